package keeper_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/onchain/keeper"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// writeless is the keeper's store with every write it could make failing
// the test: a dry run reads only, on DynamoDB as on the embedded store.
type writeless struct {
	store.Store
	t *testing.T
}

func (s writeless) wrote(what string) error {
	s.t.Helper()
	s.t.Errorf("a dry run wrote: %s", what)
	return store.ErrConflict
}

func (s writeless) StartRun(context.Context, store.KeeperRun) (store.KeeperRun, bool, error) {
	return store.KeeperRun{}, false, s.wrote("StartRun")
}
func (s writeless) ResetPlan(context.Context, string) error { return s.wrote("ResetPlan") }
func (s writeless) AddTransfers(context.Context, string, []store.Transfer, time.Time) error {
	return s.wrote("AddTransfers")
}
func (s writeless) SealPlan(context.Context, string, int, string, time.Time) error {
	return s.wrote("SealPlan")
}
func (s writeless) MarkSent(context.Context, []string, string, string, uint64, time.Time) error {
	return s.wrote("MarkSent")
}
func (s writeless) Settle(context.Context, []string, string, store.TransferState, string, time.Time) error {
	return s.wrote("Settle")
}
func (s writeless) FinishRun(context.Context, string, map[string]int64, time.Time) error {
	return s.wrote("FinishRun")
}
func (s writeless) SetDailyAllowance(context.Context, string, string, int64) (bool, error) {
	return false, s.wrote("SetDailyAllowance")
}
func (s writeless) AdjustPaidOut(context.Context, string, int64, string) (bool, error) {
	return false, s.wrote("AdjustPaidOut")
}
func (s writeless) RequestPayout(context.Context, string, time.Time) (store.Account, error) {
	return store.Account{}, s.wrote("RequestPayout")
}
func (s writeless) SetStakeBoost(context.Context, string, time.Time) error {
	return s.wrote("SetStakeBoost")
}

// noSend is the cluster with sending failing the test.
type noSend struct {
	keeper.Chain
	t *testing.T
}

func (c noSend) Send(context.Context, *solana.Transaction) (solana.Signature, error) {
	c.t.Error("a dry run sent a transaction")
	return solana.Signature{}, store.ErrConflict
}

func skipped(ss []keeper.Skip) map[string]keeper.SkipReason {
	out := map[string]keeper.SkipReason{}
	for _, s := range ss {
		out[s.Wallet+"/"+s.Account] = s.Reason
	}
	return out
}

func equalSkips(t *testing.T, what string, got []keeper.Skip, want map[string]keeper.SkipReason) {
	t.Helper()
	g := skipped(got)
	if len(g) != len(got) || len(g) != len(want) {
		t.Errorf("%s skipped %+v, want %v", what, got, want)
		return
	}
	for k, r := range want {
		if g[k] != r {
			t.Errorf("%s skipped %+v, want %v", what, got, want)
			return
		}
	}
}

// TestDryRunsWithoutTheKey: every job planned with only the keeper's
// public key (Keeper.Wallet; no signing key anywhere) writes nothing and
// sends nothing, and says whom it leaves out and why.
func TestDryRunsWithoutTheKey(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	w := newWorld(t, e, false, false)
	s0, idle, tiny, s3 := w.stakers[0], w.stakers[1], w.stakers[2], w.stakers[3]
	w.spender(t, s0.String(), w.at.Add(-time.Hour))
	w.spender(t, idle.String(), w.at.Add(-8*24*time.Hour))
	k := w.keeper(nil)
	k.Wallet, k.Exec.Keeper = w.kp.PublicKey(), nil
	ro := writeless{Store: w.ledger, t: t}
	k.Ledger, k.Earnings, k.Accounts, k.Exec.Ledger = ro, ro, ro, ro
	k.Exec.Chain = noSend{k.Exec.Chain, t}
	k.TableRPC = e.RPC

	rep, err := k.Rewards(ctx, w.at, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sealed || rep.Books == nil || len(rep.Stakers) != 4 || len(rep.Transfers) == 0 {
		t.Fatalf("rewards dry run: %+v", rep)
	}
	// 7 matured units of about 5×10^10 get less than one unit of the pot.
	equalSkips(t, "rewards", rep.Skipped, map[string]keeper.SkipReason{tiny.String() + "/": keeper.SkipRoundsToZero})
	est, err := k.EstimateFees(ctx, rep.Transfers, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The swap and three rewards, each creating its reward vault.
	if est.Transactions < 2 || est.Lamports < 5000*uint64(est.Transactions) || est.NewAccounts != 3 || est.Unbuilt != 0 {
		t.Errorf("fee estimate %+v", est)
	}

	allowance, err := k.Allowance(ctx, w.at, 5_000, 2_500, false)
	if err != nil {
		t.Fatal(err)
	}
	if allowance.Cap != 1_250 || len(allowance.Shares) != 1 || allowance.Shares[0].Owner != s0 || allowance.Shares[0].Amount != 1_250 {
		t.Errorf("allowance %+v", allowance)
	}
	equalSkips(t, "allowance", allowance.Skipped, map[string]keeper.SkipReason{
		idle.String() + "/" + idle.String(): keeper.SkipInactive,
		tiny.String() + "/":                 keeper.SkipNoAccount,
		s3.String() + "/":                   keeper.SkipNoAccount,
	})
	for _, s := range allowance.Skipped {
		if s.Stake != w.maturedOf(t, solana.MustPublicKeyFromBase58(s.Wallet)) || s.Reason == keeper.SkipInactive && s.LastRequest.IsZero() {
			t.Errorf("allowance skip %+v", s)
		}
	}

	boosts, err := k.StakeBoostReport(ctx, w.at, 7, false)
	if err != nil {
		t.Fatal(err)
	}
	var boosted []string
	for _, b := range boosts.Boosts {
		boosted = append(boosted, b.Account)
	}
	if want := slices.Sorted(slices.Values([]string{s0.String(), idle.String()})); !slices.Equal(boosted, want) {
		t.Errorf("boosted %v, want %v", boosted, want)
	}
	equalSkips(t, "stake boost", boosts.Skipped, map[string]keeper.SkipReason{
		tiny.String() + "/": keeper.SkipNoAccount, s3.String() + "/": keeper.SkipNoAccount})

	if _, err := k.EnsureTables(ctx, k.TableAddresses(nil, nil), false); err != nil {
		t.Fatal(err)
	}

	// Workers: $2.50 owed, $0.99 (below the minimum), $3.00 without a
	// payout wallet; the first two asked for a payout.
	for _, a := range []store.Account{
		{ID: "paid", Wallet: w.workers[0].Owner.String(), Earned: 250},
		{ID: "small", Wallet: w.workers[1].Owner.String(), Earned: 99},
		{ID: "walletless", Earned: 300},
	} {
		a.CreatedAt = w.at
		if err := w.ledger.CreateAccount(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"paid", "small"} {
		if _, err := w.ledger.RequestPayout(ctx, id, w.at); err != nil {
			t.Fatal(err)
		}
	}
	for _, requested := range []bool{false, true} {
		pay, err := k.PayEarnings(ctx, w.at, requested, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(pay.Transfers) != 1 || pay.Transfers[0].Recipient != w.workers[0].Owner.String() || pay.Transfers[0].Amount != 2_500_000 {
			t.Errorf("requested %v: payouts %+v", requested, pay.Transfers)
		}
		if acct, credits, err := keeper.EarningOf(pay.Run, pay.Transfers[0]); err != nil || acct != "paid" || credits != 250 {
			t.Errorf("requested %v: EarningOf = %q, %d, %v", requested, acct, credits, err)
		}
		want := map[string]keeper.SkipReason{w.workers[1].Owner.String() + "/small": keeper.SkipBelowMinimum}
		if !requested {
			want["/walletless"] = keeper.SkipNoPayoutWallet
		}
		equalSkips(t, pay.Run, pay.Skipped, want)
	}
	owed, err := k.PayOwed(ctx, "explicit", w.workers, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(owed.Transfers) != 2 {
		t.Errorf("explicit payouts %+v", owed.Transfers)
	}
	equalSkips(t, "explicit payouts", owed.Skipped, map[string]keeper.SkipReason{w.workers[1].Owner.String() + "/": keeper.SkipBelowMinimum})
	for _, run := range []string{"rewards/2026-11-29", keeper.EarningsRun(w.at), keeper.RequestedRun(w.at), "payouts/explicit"} {
		if r, err := w.ledger.GetRun(ctx, run); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the ledger holds %s after dry runs: %+v, %v", run, r, err)
		}
	}
}
