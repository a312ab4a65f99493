package svmtest

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/onchain"
)

// FixedPriceSwap is a test stand-in for an AMM, named as such: the
// PumpSwap program cannot run in LiteSVM. It trades through the real token
// programs: the keeper's USDC goes to a pool wallet, and ZERO comes back
// from the pool's ZERO account, on which the keeper is an approved
// delegate, at Num/Den ZERO per USDC (rounded down). With FailUnless set,
// a swap of any other USDC amount asks for more ZERO than the pool holds,
// so it fails on-chain as a slippage failure would.
type FixedPriceSwap struct {
	Config   onchain.Config
	Pool     solana.PublicKey
	Num, Den uint64
	// FailUnless, when not 0, is the one USDC amount that swaps.
	FailUnless uint64
}

// NewFixedPriceSwap funds a pool with zero ZERO and lets keeper move it.
func NewFixedPriceSwap(t testing.TB, e *Env, keeper solana.PublicKey, zero uint64, num, den uint64) *FixedPriceSwap {
	t.Helper()
	pool := NewKey(t)
	e.Airdrop(t, pool.PublicKey(), 1_000_000_000)
	poolZero := e.MintTo(t, e.Config.ZeroMint, onchain.Token2022Program, pool.PublicKey(), zero)
	e.MintTo(t, e.Config.USDCMint, onchain.TokenProgram, pool.PublicKey(), 0)
	// Approve (tag 4): the keeper may move the pool's ZERO.
	data := binary.LittleEndian.AppendUint64([]byte{4}, zero)
	approve := solana.NewInstruction(onchain.Token2022Program, solana.AccountMetaSlice{
		solana.Meta(poolZero).WRITE(), solana.Meta(keeper), solana.Meta(pool.PublicKey()).SIGNER(),
	}, data)
	e.Send(t, []solana.PrivateKey{pool}, approve)
	return &FixedPriceSwap{Config: e.Config, Pool: pool.PublicKey(), Num: num, Den: den}
}

// BuyZero implements keeper.Swapper.
func (s *FixedPriceSwap) BuyZero(_ context.Context, keeper solana.PublicKey, usdcIn uint64) (onchain.Group, error) {
	c := s.Config
	out := usdcIn * s.Num / s.Den
	if s.FailUnless != 0 && usdcIn != s.FailUnless {
		out = 1 << 62
	}
	return onchain.Group{ComputeUnits: 60_000, Instructions: []solana.Instruction{
		onchain.CreateATAIdempotent(keeper, keeper, c.ZeroMint, onchain.Token2022Program),
		onchain.TransferChecked(onchain.TokenProgram, c.USDCATA(keeper), c.USDCMint, c.USDCATA(s.Pool), keeper, usdcIn, onchain.USDCDecimals),
		onchain.TransferChecked(onchain.Token2022Program, c.ZeroATA(s.Pool), c.ZeroMint, c.ZeroATA(keeper), keeper, out, onchain.ZeroDecimals),
	}}, nil
}
