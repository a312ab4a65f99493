package keeper_test

import (
	"github.com/gagliardetto/solana-go"

	"context"
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/keeper"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// TestStakeBoostsOnSVM: the boost reaches exactly the accounts whose payout
// wallet holds the minimum of matured stake on the chain — a sign-in
// account paid to itself and an account that proved the wallet — until the
// next day's start plus the grace; a wallet below the minimum, or an
// account paid elsewhere, gets nothing, a dry run writes nothing, and a
// boost nobody renews has lapsed the day after.
func TestStakeBoostsOnSVM(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	w := newWorld(t, e, false, false)
	// The stakers' matured stake: 1,000,000, 3,333,333, 7 and 5×10^10.
	small, big, huge := w.stakers[0], w.stakers[1], w.stakers[3]
	account := func(id, wallet string) {
		t.Helper()
		if err := w.ledger.CreateAccount(ctx, store.Account{ID: id, Wallet: id, CreatedAt: w.at}); err != nil {
			t.Fatal(err)
		}
		if wallet != id {
			if _, err := w.ledger.SetWallet(ctx, id, wallet); err != nil {
				t.Fatal(err)
			}
		}
	}
	account(big.String(), big.String())      // signed in with its staking wallet
	account("contributor", huge.String())    // proved the staking wallet
	account(small.String(), small.String())  // below the minimum
	account(huge.String(), "somewhere-else") // the wallet's own account pays elsewhere
	k := w.keeper(nil)
	k.Accounts = w.ledger

	boosts, err := k.StakeBoosts(ctx, w.at, 3_000_000, false)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, b := range boosts {
		ids = append(ids, b.Account)
	}
	if want := []string{big.String(), "contributor"}; !slices.Equal(ids, slices.Sorted(slices.Values(want))) {
		t.Fatalf("boosted %v, want %v", ids, want)
	}
	if a, _ := w.ledger.GetAccount(ctx, "contributor"); !a.StakeBoostUntil.IsZero() {
		t.Fatalf("a dry run boosted: %+v", a)
	}
	if _, err := k.StakeBoosts(ctx, w.at, 3_000_000, true); err != nil {
		t.Fatal(err)
	}
	until := w.at.Truncate(24 * time.Hour).Add(26 * time.Hour)
	for _, id := range []string{big.String(), "contributor", small.String(), huge.String()} {
		a, err := w.ledger.GetAccount(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := id == big.String() || id == "contributor"
		if a.Boosted(w.at) != want || want && !a.StakeBoostUntil.Equal(until) {
			t.Errorf("%s boosted until %v at %v; want boosted %v (until %v)", id, a.StakeBoostUntil, w.at, want, until)
		}
		if a.Boosted(w.at.AddDate(0, 0, 1).Add(12 * time.Hour)) {
			t.Errorf("%s still boosted a day later without a renewal", id)
		}
	}
	if _, err := (&keeper.Keeper{}).StakeBoosts(ctx, w.at, 1, false); err == nil {
		t.Error("a keeper without accounts boosted")
	}
}

// spender makes an account that last paid for a request at when: active
// for the allowance for 7 days after.
func (w *world) spender(t *testing.T, id string, when time.Time) {
	t.Helper()
	ctx := context.Background()
	if err := w.ledger.CreateAccount(ctx, store.Account{ID: id, Wallet: id, CreatedAt: when}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ledger.Grant(ctx, id, 10, "deposit-"+id, true); err != nil {
		t.Fatal(err)
	}
	hash := "key-" + id
	if err := w.ledger.PutAPIKey(ctx, store.Secret{Hash: hash, ID: hash, AccountID: id, CreatedAt: when}); err != nil {
		t.Fatal(err)
	}
	job := store.Job{ID: "job-" + id, Model: "m", Price: 1, Listener: "l", Created: when}
	if _, err := w.ledger.Admit(ctx, store.AdmitRequest{KeyHash: hash, Window: when.Truncate(time.Minute), Limit: 10, Job: job}); err != nil {
		t.Fatal(err)
	}
}

// TestAllowanceOnSVM: the day's pool goes, by matured stake read from the
// chain and capped, to the stakers whose account paid for a request in the
// last 7 days — not to one idle for 8 days, nor to a staker without an
// account — and every account given an allowance before that gets none
// today is set to 0; a dry run writes nothing and a re-run changes
// nothing.
func TestAllowanceOnSVM(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	w := newWorld(t, e, false, false)
	s0, idle, s3 := w.stakers[0], w.stakers[1], w.stakers[3] // w.stakers[2] has no account
	w.spender(t, s0.String(), w.at.Add(-2*time.Hour))
	w.spender(t, idle.String(), w.at.Add(-8*24*time.Hour))
	w.spender(t, s3.String(), w.at.Add(-6*24*time.Hour))
	w.spender(t, "former", w.at.Add(-time.Hour))
	yesterday := keeper.Day(w.at.AddDate(0, 0, -1))
	for _, id := range []string{"former", idle.String()} {
		if _, err := w.ledger.SetDailyAllowance(ctx, id, yesterday, 100); err != nil {
			t.Fatal(err)
		}
	}
	k := w.keeper(nil)
	k.Accounts = w.ledger
	const pool, capBP = 5_000_000_000, 2_500
	m0, m3 := w.maturedOf(t, s0), w.maturedOf(t, s3)
	share := func(m uint64) uint64 {
		v := new(big.Int).Mul(big.NewInt(pool), new(big.Int).SetUint64(m))
		return v.Quo(v, new(big.Int).SetUint64(m0+m3)).Uint64()
	}
	want0 := share(m0)
	want3 := min(share(m3), pool*capBP/10_000) // capped at 25%

	rep, err := k.Allowance(ctx, w.at, pool, capBP, false)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, s := range rep.Shares {
		got[s.Owner.String()] = s.Amount
	}
	if len(got) != 2 || got[s0.String()] != want0 || got[s3.String()] != want3 {
		t.Fatalf("shares %v; want %s: %d and %s: %d", got, s0, want0, s3, want3)
	}
	if wantReset := slices.Sorted(slices.Values([]string{"former", idle.String()})); !slices.Equal(rep.Reset, wantReset) {
		t.Fatalf("reset %v, want %v", rep.Reset, wantReset)
	}
	if a, _ := w.ledger.GetAccount(ctx, s0.String()); a.FreeAllowanceLeft != 0 {
		t.Fatalf("a dry run set an allowance: %+v", a)
	}
	for range 2 {
		if _, err := k.Allowance(ctx, w.at, pool, capBP, true); err != nil {
			t.Fatal(err)
		}
	}
	day := keeper.Day(w.at)
	for id, want := range map[string]int64{s0.String(): int64(want0), s3.String(): int64(want3), idle.String(): 0, "former": 0} {
		a, err := w.ledger.GetAccount(ctx, id)
		if err != nil || a.FreeAllowanceLeft != want || a.AllowanceDay != day {
			t.Errorf("%s: allowance %d for %q, %v; want %d for %s", id, a.FreeAllowanceLeft, a.AllowanceDay, err, want, day)
		}
		es, _ := w.ledger.Entries(ctx, id, "", 100)
		allowances := 0
		for _, e := range es {
			if e.Kind == store.EntryAllowance && e.Ref == day {
				allowances++
			}
		}
		if allowances != 1 {
			t.Errorf("%s has %d allowance entries for %s, want 1", id, allowances, day)
		}
	}
}

// TestInflowsJoinTheSplit: trading-fee USDC moved from the fee source into
// the treasury is recorded once per transaction and split with the next
// day's revenue, exactly once; a payment into the treasury from anywhere
// else (a deposit) is refused, so customers' money is never revenue.
func TestInflowsJoinTheSplit(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	w := newWorld(t, e, false, false)
	k := w.keeper(nil)
	feeWallet, customer := svmtest.NewKey(t), svmtest.NewKey(t)
	e.Airdrop(t, feeWallet.PublicKey(), 1_000_000_000)
	e.Airdrop(t, customer.PublicKey(), 1_000_000_000)
	source := e.MintTo(t, w.cfg.USDCMint, onchain.TokenProgram, feeWallet.PublicKey(), 10_000_000)
	deposit := e.MintTo(t, w.cfg.USDCMint, onchain.TokenProgram, customer.PublicKey(), 10_000_000)
	treasury := w.cfg.USDCATA(w.kp.PublicKey())
	fees := e.Send(t, []solana.PrivateKey{feeWallet},
		onchain.TransferChecked(onchain.TokenProgram, source, w.cfg.USDCMint, treasury, feeWallet.PublicKey(), 1_500_000, 6))
	paid := e.Send(t, []solana.PrivateKey{customer},
		onchain.TransferChecked(onchain.TokenProgram, deposit, w.cfg.USDCMint, treasury, customer.PublicKey(), 2_000_000, 6))

	if _, err := k.RecordInflow(ctx, paid, source, true); err == nil {
		t.Fatal("a customer's payment into the treasury was recorded as revenue")
	}
	if in, err := k.RecordInflow(ctx, fees, source, false); err != nil || in != (keeper.Inflow{Signature: fees.String(), USDC: 1_500_000}) {
		t.Fatalf("dry run before recording: %+v, %v", in, err)
	}
	for i, want := range []bool{true, false} {
		in, err := k.RecordInflow(ctx, fees, source, true)
		if err != nil || in.USDC != 1_500_000 || in.Recorded != want || in.Before == want {
			t.Fatalf("record %d: %+v, %v; want 1500000 recorded %v", i+1, in, err, want)
		}
	}
	if in, err := k.RecordInflow(ctx, fees, source, false); err != nil || !in.Before || in.Recorded || in.USDC != 1_500_000 {
		t.Fatalf("dry run after recording: %+v, %v", in, err)
	}
	rep, err := k.Rewards(ctx, w.at, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Books.Inflows != 1_500_000 || rep.Plan.Split != revenueUSDC+1_500_000 {
		t.Fatalf("books %+v, split %d; want the inflow in the split", rep.Books, rep.Plan.Split)
	}
	if err := w.day(k); err != nil {
		t.Fatal(err)
	}
	next, err := w.keeper(nil).Rewards(ctx, w.at.AddDate(0, 0, 1), false)
	if err != nil {
		t.Fatal(err)
	}
	if next.Books.Inflows != 0 || next.Books.InflowsTotal != 1_500_000 {
		t.Fatalf("the next day's books %+v; want the inflow split once", next.Books)
	}
}
