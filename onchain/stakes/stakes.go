// Package stakes reads every zero_staking stake account from the chain and
// computes matured stake: a deposit counts once 24 hours have passed since
// the cluster time it was made at, as recorded on-chain. Unstaking has
// already removed the newest deposits on-chain, so what the account holds
// is what counts.
package stakes

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/clients/zerostaking"
	"github.com/c0mpute/c0mpute/onchain"
)

// Maturity is how long a deposit waits before it counts (SPEC: 24 h).
const Maturity = 24 * time.Hour

// MaxDeposits bounds the deposits one account may list, so that a corrupt
// or hostile account cannot make the keeper allocate without bound. The
// program's TooManyDeposits error keeps real accounts below it.
const MaxDeposits = 4096

// Stake is one owner's stake account as read from the chain.
type Stake struct {
	Owner        solana.PublicKey
	Autocompound bool
	// Total is the ZERO base units held, the sum of Deposits.
	Total    uint64
	Deposits []zerostaking.Deposit
}

// Matured is the part of the stake deposited at least Maturity before at.
func (s Stake) Matured(at time.Time) uint64 {
	cutoff := at.Add(-Maturity).Unix()
	var sum uint64
	for _, d := range s.Deposits {
		if d.Time <= cutoff {
			sum += d.Amount
		}
	}
	return sum
}

// Decode parses a stake account's data and checks it is consistent: the
// right discriminator, at most MaxDeposits deposits, and a total equal to
// the deposits' sum without overflow.
func Decode(data []byte) (Stake, error) {
	// A vec length is a u32: refuse a huge one before the decoder
	// allocates for it. Layout: 8 discriminator, 32 owner, 1 bump,
	// 1 autocompound, 8 total, 4 vec length.
	const lenAt = 8 + 32 + 1 + 1 + 8
	if len(data) >= lenAt+4 {
		n := uint32(data[lenAt]) | uint32(data[lenAt+1])<<8 | uint32(data[lenAt+2])<<16 | uint32(data[lenAt+3])<<24
		if n > MaxDeposits || int(n)*16 > len(data)-lenAt-4 {
			return Stake{}, fmt.Errorf("stakes: account lists %d deposits in %d bytes", n, len(data))
		}
	}
	a, err := zerostaking.ParseAccount_StakeAccount(data)
	if err != nil {
		return Stake{}, fmt.Errorf("stakes: decode: %w", err)
	}
	sum := new(big.Int)
	for _, d := range a.Deposits {
		if d.Amount == 0 {
			return Stake{}, errors.New("stakes: account holds an empty deposit")
		}
		sum.Add(sum, new(big.Int).SetUint64(d.Amount))
	}
	if !sum.IsUint64() || sum.Uint64() != a.Total {
		return Stake{}, fmt.Errorf("stakes: total %d is not the deposits' sum %s", a.Total, sum)
	}
	return Stake{Owner: a.Owner, Autocompound: a.Autocompound, Total: a.Total, Deposits: a.Deposits}, nil
}

// Client is the part of the JSON-RPC client Read uses.
type Client interface {
	GetProgramAccountsWithOpts(ctx context.Context, program solana.PublicKey, opts *rpc.GetProgramAccountsOpts) (rpc.GetProgramAccountsResult, error)
}

// Read fetches every stake account of the staking program, filtered
// server-side by the account discriminator, and decodes them. An account
// that is not at its owner's stake PDA is refused: only the program can
// own accounts, but a reader never assumes. Sorted by owner.
func Read(ctx context.Context, c Client, cfg onchain.Config) ([]Stake, error) {
	res, err := c.GetProgramAccountsWithOpts(ctx, cfg.StakingProgram, &rpc.GetProgramAccountsOpts{
		Encoding:   solana.EncodingBase64,
		Commitment: rpc.CommitmentFinalized,
		Filters: []rpc.RPCFilter{{Memcmp: &rpc.RPCFilterMemcmp{
			Offset: 0, Bytes: solana.Base58(zerostaking.Account_StakeAccount[:]),
		}}},
	})
	if err != nil {
		return nil, fmt.Errorf("stakes: get program accounts: %w", err)
	}
	out := make([]Stake, 0, len(res))
	for _, ka := range res {
		if ka == nil || ka.Account == nil || ka.Account.Data == nil {
			return nil, errors.New("stakes: node returned an empty account")
		}
		if ka.Account.Owner != cfg.StakingProgram {
			return nil, fmt.Errorf("stakes: account %s is owned by %s, not the staking program", ka.Pubkey, ka.Account.Owner)
		}
		s, err := Decode(ka.Account.Data.GetBinary())
		if err != nil {
			return nil, fmt.Errorf("stakes: account %s: %w", ka.Pubkey, err)
		}
		if want := cfg.StakePDA(s.Owner); ka.Pubkey != want {
			return nil, fmt.Errorf("stakes: account %s claims owner %s whose stake PDA is %s", ka.Pubkey, s.Owner, want)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Owner.String() < out[j].Owner.String() })
	return out, nil
}

// Matured maps each owner to their matured stake at at, leaving out
// owners with none.
func Matured(all []Stake, at time.Time) map[solana.PublicKey]uint64 {
	m := make(map[solana.PublicKey]uint64, len(all))
	for _, s := range all {
		if v := s.Matured(at); v > 0 {
			m[s.Owner] = v
		}
	}
	return m
}
