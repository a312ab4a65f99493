package pumpswap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/clients/pumpamm"
	"github.com/c0mpute/c0mpute/onchain"
)

// AccountReader is the part of the JSON-RPC client LoadPool uses.
type AccountReader interface {
	GetMultipleAccounts(ctx context.Context, accounts ...solana.PublicKey) (*rpc.GetMultipleAccountsResult, error)
}

// Market is what a pool's quote depends on besides its reserves: the pool
// and global config as stored, the fee program's fee config (nil where it
// has none), and the base mint's supply (the market cap picks the fee
// tier).
type Market struct {
	Pool       pumpamm.Pool
	Global     pumpamm.GlobalConfig
	FeeConfig  *pumpamm.FeeConfig
	BaseSupply uint64
}

// LoadPool reads a pool, the global config, the fee config and the base
// mint from the chain with the generated decoders, and checks that the
// pool trades ZERO for USDC. The first non-zero fee recipients of the
// global config are used.
func LoadPool(ctx context.Context, c AccountReader, cfg onchain.Config, pool solana.PublicKey) (Pool, Market, error) {
	global := pda(Program, []byte("global_config"))
	feeConfig := pda(FeeProgram, []byte("fee_config"), feeConfigKey[:])
	res, err := c.GetMultipleAccounts(ctx, pool, global, feeConfig, cfg.ZeroMint)
	if err != nil {
		return Pool{}, Market{}, fmt.Errorf("pumpswap: read pool: %w", err)
	}
	if res == nil || len(res.Value) != 4 || res.Value[0] == nil || res.Value[1] == nil || res.Value[3] == nil {
		return Pool{}, Market{}, fmt.Errorf("pumpswap: pool %s, the global config or the ZERO mint not found", pool)
	}
	for _, a := range res.Value[:2] {
		if a.Owner != Program {
			return Pool{}, Market{}, fmt.Errorf("pumpswap: account owned by %s, not the PumpSwap program", a.Owner)
		}
	}
	p, err := pumpamm.ParseAccount_Pool(res.Value[0].Data.GetBinary())
	if err != nil {
		return Pool{}, Market{}, fmt.Errorf("pumpswap: decode pool: %w", err)
	}
	g, err := pumpamm.ParseAccount_GlobalConfig(res.Value[1].Data.GetBinary())
	if err != nil {
		return Pool{}, Market{}, fmt.Errorf("pumpswap: decode global config: %w", err)
	}
	m := Market{Pool: *p, Global: *g}
	if fc := res.Value[2]; fc != nil {
		if fc.Owner != FeeProgram {
			return Pool{}, Market{}, fmt.Errorf("pumpswap: fee config owned by %s, not the fee program", fc.Owner)
		}
		if m.FeeConfig, err = pumpamm.ParseAccount_FeeConfig(fc.Data.GetBinary()); err != nil {
			return Pool{}, Market{}, fmt.Errorf("pumpswap: decode fee config: %w", err)
		}
	}
	// A mint's supply is the u64 after its optional mint authority.
	if mint := res.Value[3].Data.GetBinary(); len(mint) >= 44 {
		m.BaseSupply = binary.LittleEndian.Uint64(mint[36:44])
	} else {
		return Pool{}, Market{}, fmt.Errorf("pumpswap: the ZERO mint's data is %d bytes", len(mint))
	}
	if p.BaseMint != cfg.ZeroMint || p.QuoteMint != cfg.USDCMint {
		return Pool{}, Market{}, fmt.Errorf("pumpswap: pool %s trades %s/%s, not ZERO/USDC", pool, p.BaseMint, p.QuoteMint)
	}
	first := func(keys []solana.PublicKey) (solana.PublicKey, error) {
		for _, k := range keys {
			if !k.IsZero() {
				return k, nil
			}
		}
		return solana.PublicKey{}, errors.New("pumpswap: the global config lists no fee recipient")
	}
	protocol, err := first(g.ProtocolFeeRecipients[:])
	if err != nil {
		return Pool{}, Market{}, err
	}
	buyback, err := first(g.BuybackFeeRecipients[:])
	if err != nil {
		return Pool{}, Market{}, err
	}
	out := Pool{
		Address: pool, BaseMint: p.BaseMint, QuoteMint: p.QuoteMint,
		BaseTokenProgram: onchain.Token2022Program, QuoteTokenProgram: onchain.TokenProgram,
		PoolBaseTokenAccount: p.PoolBaseTokenAccount, PoolQuoteTokenAccount: p.PoolQuoteTokenAccount,
		CoinCreator: p.CoinCreator, IsCashbackCoin: p.IsCashbackCoin,
		ProtocolFeeRecipient: protocol, BuybackFeeRecipient: buyback,
	}
	return out, m, nil
}

// Quote is the ZERO a buy spending usdcIn receives at these reserves, as
// the SDK quotes it.
func (m Market) Quote(baseReserve, quoteReserve, usdcIn uint64) (uint64, error) {
	q := new(big.Int).SetUint64(quoteReserve)
	q.Add(q, m.Pool.VirtualQuoteReserves.BigInt())
	fees, err := FeesFor(m.Global, m.FeeConfig, m.Pool, m.BaseSupply, baseReserve, q)
	if err != nil {
		return 0, err
	}
	return BuyQuote(usdcIn, baseReserve, q, fees, m.Pool.CoinCreator)
}
