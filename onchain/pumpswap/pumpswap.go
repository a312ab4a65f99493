// Package pumpswap buys ZERO on its PumpSwap pool for the keeper's buyback
// and auto-compound, through the client generated from the IDL that the
// official PumpSwap SDK ships (clients/pumpamm). The buy instruction and
// its accounts are built the way the SDK's buyInstructionsNoPool builds
// them; TestBuyMatchesSDK checks that byte for byte.
package pumpswap

import (
	"context"
	"errors"
	"fmt"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/clients/pumpamm"
	"github.com/c0mpute/c0mpute/onchain"
)

// Program ids and the fee config seed, from the IDL.
var (
	Program    = pumpamm.ProgramID
	FeeProgram = solana.MustPublicKeyFromBase58("pfeeUxB6jkeY1Hxd7CsFCAjcbHA9rWtchMGdZ6VojVZ")
	// feeConfigKey is the second seed of fee_config: the AMM program's id.
	feeConfigKey = Program
)

func pda(program solana.PublicKey, seeds ...[]byte) solana.PublicKey {
	a, _, err := solana.FindProgramAddress(seeds, program)
	if err != nil {
		panic("pumpswap: no program address: " + err.Error())
	}
	return a
}

// Pool is what a buy needs to know about a pool. The fee recipients are
// chosen by the caller from the global config (the SDK picks one at
// random; any listed one is valid).
type Pool struct {
	Address               solana.PublicKey
	BaseMint, QuoteMint   solana.PublicKey
	BaseTokenProgram      solana.PublicKey
	QuoteTokenProgram     solana.PublicKey
	PoolBaseTokenAccount  solana.PublicKey
	PoolQuoteTokenAccount solana.PublicKey
	CoinCreator           solana.PublicKey
	IsCashbackCoin        bool
	ProtocolFeeRecipient  solana.PublicKey
	BuybackFeeRecipient   solana.PublicKey
}

// BuyInstructions buys baseOut base units for at most maxQuoteIn quote
// units; createBaseAccount prepends the idempotent creation of the user's
// base token account, as the SDK does when it does not exist yet.
func BuyInstructions(p Pool, user solana.PublicKey, baseOut, maxQuoteIn uint64, createBaseAccount bool) ([]solana.Instruction, error) {
	userBase := onchain.ATA(user, p.BaseMint, p.BaseTokenProgram)
	userQuote := onchain.ATA(user, p.QuoteMint, p.QuoteTokenProgram)
	creatorVault := pda(Program, []byte("creator_vault"), p.CoinCreator[:])
	ix, err := pumpamm.NewBuyInstruction(baseOut, maxQuoteIn, pumpamm.OptionBool{V0: true},
		p.Address, user, pda(Program, []byte("global_config")), p.BaseMint, p.QuoteMint,
		userBase, userQuote, p.PoolBaseTokenAccount, p.PoolQuoteTokenAccount,
		p.ProtocolFeeRecipient, onchain.ATA(p.ProtocolFeeRecipient, p.QuoteMint, p.QuoteTokenProgram),
		p.BaseTokenProgram, p.QuoteTokenProgram, onchain.SystemProgram, onchain.ATAProgram,
		pda(Program, []byte("__event_authority")), Program,
		onchain.ATA(creatorVault, p.QuoteMint, p.QuoteTokenProgram), creatorVault,
		pda(Program, []byte("global_volume_accumulator")),
		pda(Program, []byte("user_volume_accumulator"), user[:]),
		pda(FeeProgram, []byte("fee_config"), feeConfigKey[:]), FeeProgram)
	if err != nil {
		return nil, fmt.Errorf("pumpswap: buy: %w", err)
	}
	data, err := ix.Data()
	if err != nil {
		return nil, err
	}
	metas := ix.Accounts()
	if p.IsCashbackCoin {
		uva := pda(Program, []byte("user_volume_accumulator"), user[:])
		metas = append(metas, solana.Meta(onchain.ATA(uva, p.QuoteMint, p.QuoteTokenProgram)).WRITE())
	}
	if !p.CoinCreator.IsZero() {
		metas = append(metas, solana.Meta(pda(Program, []byte("pool-v2"), p.BaseMint[:])))
	}
	metas = append(metas,
		solana.Meta(p.BuybackFeeRecipient),
		solana.Meta(onchain.ATA(p.BuybackFeeRecipient, p.QuoteMint, p.QuoteTokenProgram)).WRITE())
	var out []solana.Instruction
	if createBaseAccount {
		out = append(out, onchain.CreateATAIdempotent(user, user, p.BaseMint, p.BaseTokenProgram))
	}
	return append(out, solana.NewInstruction(Program, metas, data)), nil
}

// Reserves reads a pool's token balances.
type Reserves interface {
	TokenBalance(ctx context.Context, account solana.PublicKey) (uint64, error)
}

// Swapper is the keeper's ZERO buyer on a PumpSwap pool whose base is ZERO
// and quote is USDC.
type Swapper struct {
	Pool     Pool
	Market   Market
	Reserves Reserves
	// SlippageBasisPoints is how far below the quoted output the buy may
	// fill; below it the swap fails on-chain and the keeper falls back.
	SlippageBasisPoints uint64
}

// ErrEmptyPool means the pool holds no liquidity.
var ErrEmptyPool = errors.New("pumpswap: pool has no liquidity")

// BuyZero implements keeper.Swapper: spend at most usdcIn for at least the
// SDK's quote at the pool's reserves now, less slippage.
func (s *Swapper) BuyZero(ctx context.Context, keeper solana.PublicKey, usdcIn uint64) (onchain.Group, error) {
	base, err := s.Reserves.TokenBalance(ctx, s.Pool.PoolBaseTokenAccount)
	if err != nil {
		return onchain.Group{}, err
	}
	quote, err := s.Reserves.TokenBalance(ctx, s.Pool.PoolQuoteTokenAccount)
	if err != nil {
		return onchain.Group{}, err
	}
	if base == 0 || quote == 0 {
		return onchain.Group{}, ErrEmptyPool
	}
	out, err := s.Market.Quote(base, quote, usdcIn)
	if err != nil {
		return onchain.Group{}, err
	}
	out = out * (10_000 - min(s.SlippageBasisPoints, 10_000)) / 10_000
	if out == 0 {
		return onchain.Group{}, fmt.Errorf("pumpswap: %d USDC base units buy no ZERO", usdcIn)
	}
	ixs, err := BuyInstructions(s.Pool, keeper, out, usdcIn, true)
	return onchain.Group{Instructions: ixs, ComputeUnits: 200_000}, err
}
