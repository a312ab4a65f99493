package chain

import (
	"context"
	"errors"
	"fmt"
	"math/big"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
)

// TxClient is the part of the JSON-RPC client TokenDelta uses.
type TxClient interface {
	GetTransaction(ctx context.Context, sig solana.Signature, opts *rpc.GetTransactionOpts) (*rpc.GetTransactionResult, error)
}

// TokenDelta is how many base units the token account gained (negative:
// lost) in the landed transaction sig, read from the transaction's
// pre and post token balances: what a swap actually returned, as the
// cluster recorded it.
func (c *Chain) TokenDelta(ctx context.Context, sig solana.Signature, account solana.PublicKey) (int64, error) {
	tc, ok := c.rpc.(TxClient)
	if !ok {
		return 0, errors.New("chain: token delta: client cannot get transactions")
	}
	v := uint64(0)
	res, err := tc.GetTransaction(ctx, sig, &rpc.GetTransactionOpts{
		Encoding: solana.EncodingBase64, Commitment: c.Commitment, MaxSupportedTransactionVersion: &v,
	})
	if err != nil {
		return 0, fmt.Errorf("chain: get transaction %s: %w", sig, err)
	}
	if res == nil || res.Meta == nil || res.Transaction == nil {
		return 0, fmt.Errorf("chain: transaction %s: empty response", sig)
	}
	if res.Meta.Err != nil {
		return 0, fmt.Errorf("chain: transaction %s failed: %v", sig, res.Meta.Err)
	}
	tx, err := res.Transaction.GetTransaction()
	if err != nil {
		return 0, fmt.Errorf("chain: decode transaction %s: %w", sig, err)
	}
	keys := append(append(append(solana.PublicKeySlice{}, tx.Message.AccountKeys...),
		res.Meta.LoadedAddresses.Writable...), res.Meta.LoadedAddresses.ReadOnly...)
	find := func(bs []rpc.TokenBalance) (*big.Int, error) {
		for _, b := range bs {
			if int(b.AccountIndex) < len(keys) && keys[b.AccountIndex] == account && b.UiTokenAmount != nil {
				v, ok := new(big.Int).SetString(b.UiTokenAmount.Amount, 10)
				if !ok {
					return nil, fmt.Errorf("chain: bad token amount %q", b.UiTokenAmount.Amount)
				}
				return v, nil
			}
		}
		return new(big.Int), nil
	}
	pre, err := find(res.Meta.PreTokenBalances)
	if err != nil {
		return 0, err
	}
	post, err := find(res.Meta.PostTokenBalances)
	if err != nil {
		return 0, err
	}
	d := post.Sub(post, pre)
	if !d.IsInt64() {
		return 0, fmt.Errorf("chain: token delta %s out of range", d)
	}
	return d.Int64(), nil
}

// BalanceClient is the part of the JSON-RPC client TokenBalance uses.
type BalanceClient interface {
	GetTokenAccountBalance(ctx context.Context, account solana.PublicKey, commitment rpc.CommitmentType) (*rpc.GetTokenAccountBalanceResult, error)
}

// TokenBalance is a token account's balance in base units, at the
// Chain's commitment.
func (c *Chain) TokenBalance(ctx context.Context, account solana.PublicKey) (uint64, error) {
	bc, ok := c.rpc.(BalanceClient)
	if !ok {
		return 0, errors.New("chain: token balance: client cannot read balances")
	}
	res, err := bc.GetTokenAccountBalance(ctx, account, c.Commitment)
	if err != nil {
		return 0, fmt.Errorf("chain: balance of %s: %w", account, err)
	}
	if res == nil || res.Value == nil {
		return 0, fmt.Errorf("chain: balance of %s: empty response", account)
	}
	v, ok := new(big.Int).SetString(res.Value.Amount, 10)
	if !ok || !v.IsUint64() {
		return 0, fmt.Errorf("chain: balance of %s: bad amount %q", account, res.Value.Amount)
	}
	return v.Uint64(), nil
}
