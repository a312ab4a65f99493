// Package keeper is c0mpute's scheduled on-chain work: at 15:00 UTC the
// treasury's new USDC splits 50/50 into buyback-and-burn of ZERO and staker
// rewards in proportion to matured stake; at 00:00 UTC the day's free-credit
// allowance is shared among stakers; worker earnings are paid out in USDC.
//
// Planning is pure integer arithmetic (plan.go). Execution (exec.go) goes
// through a ledger (store.Ledger) that records every transfer under an
// idempotency key before it is signed and its signature before it is sent,
// so a re-run after a crash anywhere completes the run without paying
// anyone twice.
package keeper

import (
	"errors"
	"fmt"
	"math/big"
	"sort"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/onchain/stakes"
)

// Share is an amount owed to one wallet, in base units.
type Share struct {
	Owner  solana.PublicKey `json:"owner"`
	Amount uint64           `json:"amount"`
}

// RewardInputs is what the 15:00 UTC split is computed from.
type RewardInputs struct {
	// At is the run time: matured stake is judged at it.
	At time.Time
	// Revenue is the USDC the network earned since the last split (jobs
	// ended less workers' shares, refunds and credits given away; see
	// store.Money): all of it is split today.
	Revenue uint64
	// TreasuryUSDC is the treasury's USDC balance now, and Liabilities
	// what of it is owed: customers' unspent credits, workers' unpaid
	// earnings, any reserve the operator sets. Neither is ever split: they
	// only check the books (see ShortfallError).
	TreasuryUSDC uint64
	Liabilities  uint64
	// CarriedRewards is the reward remainder carried from earlier days. It
	// is still in the treasury, and is added to the reward pot whole.
	CarriedRewards uint64
	Stakes         []stakes.Stake
}

// ShortfallError is PlanRewards' refusal when the treasury holds less than
// what it owes plus what the day would split: the books and the chain
// disagree (a payout outside the keeper, a deposit credited twice, a
// treasury key used by hand), and splitting would spend customers' or
// workers' money. Nothing is sent until an operator finds out why.
type ShortfallError struct {
	Treasury, Liabilities, CarriedRewards, Split uint64
}

func (e *ShortfallError) Error() string {
	return fmt.Sprintf("keeper: the treasury holds %s USDC, less than it owes (%s) plus carried rewards (%s) plus today's split (%s): refusing to split",
		USDC(e.Treasury), USDC(e.Liabilities), USDC(e.CarriedRewards), USDC(e.Split))
}

// USDC formats base units as USDC with its six decimals.
func USDC(units uint64) string { return fmt.Sprintf("%d.%06d", units/1_000_000, units%1_000_000) }

// RewardPlan is the day's split.
type RewardPlan struct {
	// Split is the USDC divided 50/50 today: the revenue since the last
	// split.
	Split uint64 `json:"split"`
	// RewardPot is half the split (rounded down) plus the carried
	// remainder; BurnPot the other half.
	RewardPot uint64 `json:"reward_pot"`
	BurnPot   uint64 `json:"burn_pot"`
	// Rewards go to reward vaults in USDC; Compound are the auto-
	// compounders' rewards, swapped to ZERO together and staked back.
	Rewards  []Share `json:"rewards"`
	Compound []Share `json:"compound"`
	// CompoundUSDC is the sum of Compound.
	CompoundUSDC uint64 `json:"compound_usdc"`
	// Remainder is the part of RewardPot that floor division left over:
	// carried to the next day.
	Remainder uint64 `json:"remainder"`
	// MaturedTotal is the matured stake the pot was divided by.
	MaturedTotal uint64 `json:"matured_total"`
}

// PlanRewards computes the split of the day's revenue, after checking that
// the treasury holds its liabilities, the carried rewards and the split
// (ShortfallError otherwise). Every share is floor(pot × stake / total) in
// exact integer arithmetic, so the shares never exceed the pot and the
// remainder is below the number of stakers.
func PlanRewards(in RewardInputs) (RewardPlan, error) {
	need := new(big.Int).SetUint64(in.Liabilities)
	need.Add(need, new(big.Int).SetUint64(in.CarriedRewards))
	need.Add(need, new(big.Int).SetUint64(in.Revenue))
	if new(big.Int).SetUint64(in.TreasuryUSDC).Cmp(need) < 0 {
		return RewardPlan{}, &ShortfallError{Treasury: in.TreasuryUSDC, Liabilities: in.Liabilities, CarriedRewards: in.CarriedRewards, Split: in.Revenue}
	}
	split := in.Revenue
	p := RewardPlan{Split: split, BurnPot: split - split/2, RewardPot: split/2 + in.CarriedRewards}

	matured := stakes.Matured(in.Stakes, in.At)
	auto := map[solana.PublicKey]bool{}
	for _, s := range in.Stakes {
		auto[s.Owner] = s.Autocompound
	}
	total := new(big.Int)
	for _, v := range matured {
		total.Add(total, new(big.Int).SetUint64(v))
	}
	if !total.IsUint64() {
		return RewardPlan{}, errors.New("keeper: matured stake exceeds 2^64 base units")
	}
	p.MaturedTotal = total.Uint64()
	shares, rem := proportional(p.RewardPot, matured)
	p.Remainder = rem
	for _, s := range shares {
		if auto[s.Owner] {
			p.Compound = append(p.Compound, s)
			p.CompoundUSDC += s.Amount
		} else {
			p.Rewards = append(p.Rewards, s)
		}
	}
	return p, nil
}

// proportional divides pot by weight: floor(pot × w / Σw) each, leaving out
// zero shares; sorted by owner so that a plan is byte-for-byte repeatable.
func proportional(pot uint64, weights map[solana.PublicKey]uint64) ([]Share, uint64) {
	total := new(big.Int)
	for _, w := range weights {
		total.Add(total, new(big.Int).SetUint64(w))
	}
	if total.Sign() == 0 || pot == 0 {
		return nil, pot
	}
	owners := make([]solana.PublicKey, 0, len(weights))
	for o := range weights {
		owners = append(owners, o)
	}
	sort.Slice(owners, func(i, j int) bool { return owners[i].String() < owners[j].String() })
	bp := new(big.Int).SetUint64(pot)
	var out []Share
	var paid uint64
	for _, o := range owners {
		v := new(big.Int).SetUint64(weights[o])
		v.Mul(v, bp).Quo(v, total)
		if v.Sign() == 0 {
			continue
		}
		out = append(out, Share{Owner: o, Amount: v.Uint64()})
		paid += v.Uint64()
	}
	return out, pot - paid
}

// PlanCompound divides the ZERO a compound swap returned (plus ZERO carried
// from earlier days) among the auto-compounders in proportion to their USDC
// rewards; the remainder is carried.
func PlanCompound(zeroOut, carried uint64, compound []Share) ([]Share, uint64) {
	w := make(map[solana.PublicKey]uint64, len(compound))
	for _, s := range compound {
		w[s.Owner] += s.Amount
	}
	return proportional(zeroOut+carried, w)
}

// AllowanceInputs is what the 00:00 UTC free-credit allowance is computed
// from.
type AllowanceInputs struct {
	At     time.Time
	Stakes []stakes.Stake
	// Active says whether a staker used the network in the last 7 days;
	// only they share the pool.
	Active func(owner solana.PublicKey) bool
	// Pool is the day's credits (SPEC default 5,000); CapBasisPoints the
	// most one staker gets, in 1/10,000 of the pool (default 2,500 = 25%).
	Pool           int64
	CapBasisPoints int64
}

// PlanAllowance shares the pool in proportion to matured stake among active
// stakers, each capped; what the caps and rounding leave is not given (the
// pool is a daily budget, not money owed).
func PlanAllowance(in AllowanceInputs) ([]Share, error) {
	if in.Pool < 0 || in.CapBasisPoints < 0 || in.CapBasisPoints > 10_000 {
		return nil, fmt.Errorf("keeper: allowance pool %d, cap %d bp", in.Pool, in.CapBasisPoints)
	}
	matured := stakes.Matured(in.Stakes, in.At)
	for o := range matured {
		if in.Active != nil && !in.Active(o) {
			delete(matured, o)
		}
	}
	shares, _ := proportional(uint64(in.Pool), matured)
	limit := uint64(in.Pool * in.CapBasisPoints / 10_000)
	for i := range shares {
		shares[i].Amount = min(shares[i].Amount, limit)
	}
	return shares, nil
}

// MinPayout is the smallest worker payout, in USDC base units (SPEC: $1).
const MinPayout = store.MinPayoutCredits * creditUnits

// CreditsToUSDC converts credits (1 credit = $0.01) to USDC base units.
func CreditsToUSDC(credits int64) uint64 { return uint64(credits) * 10_000 }

// PlanPayouts keeps the payouts at or above min, sorted by owner.
func PlanPayouts(owed []Share, minimum uint64) []Share {
	var out []Share
	for _, s := range owed {
		if s.Amount >= minimum {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Owner.String() < out[j].Owner.String() })
	return out
}

// Day is the UTC date a run belongs to, as its runs' IDs carry it.
func Day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// SkipReason says why a run leaves someone out.
type SkipReason string

// Skip reasons.
const (
	// SkipBelowMinimum: a worker account owed less than MinPayout; its
	// earnings wait until they reach it.
	SkipBelowMinimum SkipReason = "below_minimum"
	// SkipNoPayoutWallet: a worker account with earnings and no payout
	// wallet (none set, or not an address); they wait for one.
	SkipNoPayoutWallet SkipReason = "no_payout_wallet"
	// SkipNoAccount: a staker without an account in the store (it never
	// signed in), so no allowance or stake boost can reach it.
	SkipNoAccount SkipReason = "no_account"
	// SkipInactive: a staker whose account paid for no request in the
	// allowance's activity window.
	SkipInactive SkipReason = "inactive"
	// SkipNotMatured: stake deposited less than stakes.Maturity before
	// the run: it counts from the day it matures.
	SkipNotMatured SkipReason = "stake_not_matured"
	// SkipRoundsToZero: matured stake so small beside the total that its
	// share, rounded down, is 0.
	SkipRoundsToZero SkipReason = "share_rounds_to_zero"
)

// Skip is someone a run leaves out, and why.
type Skip struct {
	// Wallet is the staker's, or the payee's, wallet; Account the store
	// account, where there is one.
	Wallet  string     `json:"wallet,omitempty"`
	Account string     `json:"account,omitempty"`
	Reason  SkipReason `json:"reason"`
	// Credits is what a worker account is owed (earnings payouts); USDC
	// what an explicit payout owed, in base units.
	Credits int64  `json:"credits,omitempty"`
	USDC    uint64 `json:"usdc,omitempty"`
	// Stake is a staker's matured stake, or its whole stake when none is
	// matured, in ZERO base units.
	Stake uint64 `json:"stake,omitempty"`
	// LastRequest is an inactive account's last paid request.
	LastRequest time.Time `json:"last_request,omitzero"`
}

// Staker is one stake account as a run saw it, in ZERO base units.
type Staker struct {
	Owner        string `json:"owner"`
	Total        uint64 `json:"total"`
	Matured      uint64 `json:"matured"`
	Autocompound bool   `json:"autocompound"`
}

// stakersAt lists every stake with its matured part at at, by owner.
func stakersAt(all []stakes.Stake, at time.Time) []Staker {
	out := make([]Staker, 0, len(all))
	for _, s := range all {
		out = append(out, Staker{Owner: s.Owner.String(), Total: s.Total, Matured: s.Matured(at), Autocompound: s.Autocompound})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Owner < out[j].Owner })
	return out
}

// stakeSkips are the stakers of all that get no share of shares: their
// stake not matured at at, or their share rounded to 0. Those other names
// (left out for another reason) are not listed again.
func stakeSkips(all []Staker, shares []Share, other map[string]bool) []Skip {
	got := map[string]bool{}
	for _, s := range shares {
		got[s.Owner.String()] = true
	}
	out := []Skip{}
	for _, s := range all {
		switch {
		case got[s.Owner] || other[s.Owner] || s.Total == 0:
		case s.Matured == 0:
			out = append(out, Skip{Wallet: s.Owner, Reason: SkipNotMatured, Stake: s.Total})
		default:
			out = append(out, Skip{Wallet: s.Owner, Reason: SkipRoundsToZero, Stake: s.Matured})
		}
	}
	sortSkips(out)
	return out
}

// sortSkips orders skips by reason, then wallet, then account: a report
// lists each reason's together.
func sortSkips(s []Skip) {
	sort.SliceStable(s, func(i, j int) bool {
		if s[i].Reason != s[j].Reason {
			return s[i].Reason < s[j].Reason
		}
		if s[i].Wallet != s[j].Wallet {
			return s[i].Wallet < s[j].Wallet
		}
		return s[i].Account < s[j].Account
	})
}
