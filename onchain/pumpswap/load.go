package pumpswap

import (
	"context"
	"errors"
	"fmt"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/clients/pumpamm"
	"github.com/c0mpute/c0mpute/onchain"
)

// AccountReader is the part of the JSON-RPC client LoadPool uses.
type AccountReader interface {
	GetMultipleAccounts(ctx context.Context, accounts ...solana.PublicKey) (*rpc.GetMultipleAccountsResult, error)
}

// LoadPool reads a pool and the global config from the chain with the
// generated decoders, and checks that it trades ZERO for USDC. The first
// non-zero fee recipients of the global config are used.
func LoadPool(ctx context.Context, c AccountReader, cfg onchain.Config, pool solana.PublicKey) (Pool, uint64, error) {
	global := pda(Program, []byte("global_config"))
	res, err := c.GetMultipleAccounts(ctx, pool, global)
	if err != nil {
		return Pool{}, 0, fmt.Errorf("pumpswap: read pool: %w", err)
	}
	if res == nil || len(res.Value) != 2 || res.Value[0] == nil || res.Value[1] == nil {
		return Pool{}, 0, fmt.Errorf("pumpswap: pool %s or the global config not found", pool)
	}
	for _, a := range res.Value {
		if a.Owner != Program {
			return Pool{}, 0, fmt.Errorf("pumpswap: account owned by %s, not the PumpSwap program", a.Owner)
		}
	}
	p, err := pumpamm.ParseAccount_Pool(res.Value[0].Data.GetBinary())
	if err != nil {
		return Pool{}, 0, fmt.Errorf("pumpswap: decode pool: %w", err)
	}
	g, err := pumpamm.ParseAccount_GlobalConfig(res.Value[1].Data.GetBinary())
	if err != nil {
		return Pool{}, 0, fmt.Errorf("pumpswap: decode global config: %w", err)
	}
	if p.BaseMint != cfg.ZeroMint || p.QuoteMint != cfg.USDCMint {
		return Pool{}, 0, fmt.Errorf("pumpswap: pool %s trades %s/%s, not ZERO/USDC", pool, p.BaseMint, p.QuoteMint)
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
		return Pool{}, 0, err
	}
	buyback, err := first(g.BuybackFeeRecipients[:])
	if err != nil {
		return Pool{}, 0, err
	}
	out := Pool{
		Address: pool, BaseMint: p.BaseMint, QuoteMint: p.QuoteMint,
		BaseTokenProgram: onchain.Token2022Program, QuoteTokenProgram: onchain.TokenProgram,
		PoolBaseTokenAccount: p.PoolBaseTokenAccount, PoolQuoteTokenAccount: p.PoolQuoteTokenAccount,
		CoinCreator: p.CoinCreator, IsCashbackCoin: p.IsCashbackCoin,
		ProtocolFeeRecipient: protocol, BuybackFeeRecipient: buyback,
	}
	fee := g.LpFeeBasisPoints + g.ProtocolFeeBasisPoints + g.CoinCreatorFeeBasisPoints
	return out, fee, nil
}
