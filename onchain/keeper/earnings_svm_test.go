package keeper_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/keeper"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

type crashEarnings struct {
	store.Earnings
	c *crashPoint
}

func (e crashEarnings) AdjustPaidOut(ctx context.Context, account string, delta int64, key string) (applied bool, err error) {
	err = e.c.step(func() error { applied, err = e.Earnings.AdjustPaidOut(ctx, account, delta, key); return err })
	return
}

// earned is what each of the world's three workers earned, in credits:
// $2.50, $0.99 (below the $1 minimum: it waits) and exactly $1.00.
var earned = []int64{250, 99, 100}

// earningsWorld is a world whose workers have accounts with earnings.
func earningsWorld(t *testing.T, e *svmtest.Env) (*world, store.Earnings) {
	t.Helper()
	w := newWorld(t, e, false, false)
	st, ok := w.ledger.(interface {
		store.Earnings
		CreateAccount(context.Context, store.Account) error
	})
	if !ok {
		t.Fatalf("%T keeps no earnings", w.ledger)
	}
	for i, s := range w.workers {
		a := store.Account{ID: fmt.Sprintf("worker-%d", i), Wallet: s.Owner.String(), Earned: earned[i], CreatedAt: w.at}
		if err := st.CreateAccount(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	}
	return w, st
}

func (w *world) earningsKeeper(earn store.Earnings, c *crashPoint) *keeper.Keeper {
	k := w.keeper(c)
	k.Earnings = earn
	if c != nil {
		k.Earnings = crashEarnings{earn, c}
	}
	return k
}

// checkEarnings: every worker owed at least the minimum got exactly its
// earnings in USDC, once, and the store says so.
func (w *world) checkEarnings(t *testing.T, earn store.Earnings) {
	t.Helper()
	owed, err := earn.OwedEarnings(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]int64{}
	for _, o := range owed {
		left[o.Wallet] = o.Credits
	}
	for i, s := range w.workers {
		var paid int64
		if earned[i]*10_000 >= keeper.MinPayout {
			paid = earned[i]
		}
		if got := w.e.TokenBalance(t, w.cfg.USDCATA(s.Owner)); got != uint64(paid*10_000) {
			t.Errorf("worker %d holds %d USDC units, want %d", i, got, paid*10_000)
		}
		if left[s.Owner.String()] != earned[i]-paid {
			t.Errorf("worker %d still owed %d credits, want %d", i, left[s.Owner.String()], earned[i]-paid)
		}
	}
}

func TestEarningsPayoutsOnSVM(t *testing.T) {
	e := svmtest.NewEnv(t)
	w, earn := earningsWorld(t, e)
	k := w.earningsKeeper(earn, nil)
	plan, _, err := k.EarningsPayouts(context.Background(), w.at, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 2 {
		t.Fatalf("dry run planned %d payouts, want 2 (one worker is below the minimum)", len(plan))
	}
	if _, _, err := k.EarningsPayouts(context.Background(), w.at, true); err != nil {
		t.Fatal(err)
	}
	w.checkEarnings(t, earn)
	before := e.TransactionCount(t)
	if _, _, err := k.EarningsPayouts(context.Background(), w.at, true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := k.EarningsPayouts(context.Background(), w.at.AddDate(0, 0, 1), true); err != nil {
		t.Fatal(err)
	}
	if e.TransactionCount(t) != before {
		t.Fatal("a second run, or the next day's, paid again")
	}
	w.checkEarnings(t, earn)
}

// TestEarningsPayoutsCrashAtEveryStep kills the keeper at each ledger write,
// reservation and send of an earnings payout run — the daily one, and the
// hourly run of the payouts workers asked for — before and after it, and
// re-runs it (the same run, or only a later one, which must finish the
// crashed run first) and checks every worker was paid exactly once and the
// store agrees.
func TestEarningsPayoutsCrashAtEveryStep(t *testing.T) {
	e := svmtest.NewEnv(t)
	type payFunc func(k *keeper.Keeper, at time.Time) error
	daily := func(k *keeper.Keeper, at time.Time) error {
		_, _, err := k.EarningsPayouts(context.Background(), at, true)
		return err
	}
	requested := func(k *keeper.Keeper, at time.Time) error {
		_, _, err := k.RequestedPayouts(context.Background(), at, true)
		return err
	}
	for _, kind := range []struct {
		name     string
		request  bool
		pay      payFunc
		later    payFunc
		laterGap time.Duration
	}{
		{"daily", false, daily, daily, 24 * time.Hour},
		{"requested", true, requested, daily, 24 * time.Hour},
		{"requested, then the next hour's", true, requested, requested, time.Hour},
	} {
		world := func(t *testing.T) (*world, store.Earnings) {
			w, earn := earningsWorld(t, e)
			if kind.request {
				for i := range w.workers {
					if _, err := earn.RequestPayout(context.Background(), fmt.Sprintf("worker-%d", i), w.at); err != nil {
						t.Fatal(err)
					}
				}
			}
			return w, earn
		}
		t.Run(kind.name, func(t *testing.T) {
			w, earn := world(t)
			count := &crashPoint{at: -1}
			if err := kind.pay(w.earningsKeeper(earn, count), w.at); err != nil {
				t.Fatal(err)
			}
			w.checkEarnings(t, earn)
			steps := count.n
			t.Logf("a %s payout run takes %d steps", kind.name, steps)
			for at := 1; at <= steps; at++ {
				for _, after := range []bool{false, true} {
					t.Run(fmt.Sprintf("step%d/after=%v", at, after), func(t *testing.T) {
						w, earn := world(t)
						err := killed(func() error { return kind.pay(w.earningsKeeper(earn, &crashPoint{at: at, after: after}), w.at) })
						if !errors.Is(err, errCrash) {
							t.Fatalf("crash at step %d did not surface: %v", at, err)
						}
						e.AdvanceBlocks(t, 151)
						// Odd steps re-run the same run; even ones only a
						// later one, which must finish the crashed run first.
						rerun, at2 := kind.pay, w.at
						if at%2 == 0 {
							rerun, at2 = kind.later, w.at.Add(kind.laterGap)
						}
						if err := rerun(w.earningsKeeper(earn, nil), at2); err != nil {
							t.Fatalf("re-run: %v", err)
						}
						w.checkEarnings(t, earn)
					})
				}
			}
		})
	}
}

// TestEarningsRunsOutOfOrder: the next day's run stops after its first
// reservation; a run for the day before, started by hand afterwards, must
// finish the open run first rather than plan the same earnings again, and
// until then the unpaid earnings the rewards split must not touch include
// the reserved ones.
func TestEarningsRunsOutOfOrder(t *testing.T) {
	e := svmtest.NewEnv(t)
	w, earn := earningsWorld(t, e)
	ctx := context.Background()
	k := w.keeper(nil)
	k.Earnings = crashEarnings{earn, &crashPoint{at: 2}}
	next := w.at.AddDate(0, 0, 1)
	err := killed(func() error { _, _, err := k.EarningsPayouts(ctx, next, true); return err })
	if !errors.Is(err, errCrash) {
		t.Fatalf("crash did not surface: %v", err)
	}
	clean := w.earningsKeeper(earn, nil)
	unpaid, err := clean.UnpaidEarnings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want uint64
	for _, c := range earned {
		want += keeper.CreditsToUSDC(c)
	}
	if unpaid < want {
		t.Fatalf("unpaid earnings with a run open: %d USDC units, want at least %d (reserved ones included)", unpaid, want)
	}
	if err := clean.FinishOpenEarnings(ctx); err != nil {
		t.Fatal(err)
	}
	if unpaid, _ := clean.UnpaidEarnings(ctx); unpaid != keeper.CreditsToUSDC(earned[1]) {
		t.Fatalf("unpaid once the open run finished: %d, want the one below the minimum (%d)", unpaid, keeper.CreditsToUSDC(earned[1]))
	}
	w.checkEarnings(t, earn)
	// Re-crash the same way and let the earlier day's run finish it.
	w, earn = earningsWorld(t, e)
	k = w.keeper(nil)
	k.Earnings = crashEarnings{earn, &crashPoint{at: 2}}
	if err := killed(func() error { _, _, err := k.EarningsPayouts(ctx, next, true); return err }); !errors.Is(err, errCrash) {
		t.Fatalf("crash did not surface: %v", err)
	}
	clean = w.earningsKeeper(earn, nil)
	if _, _, err := clean.EarningsPayouts(ctx, w.at, true); err != nil {
		t.Fatal(err)
	}
	w.checkEarnings(t, earn)
	if _, _, err := clean.EarningsPayouts(ctx, w.at.AddDate(0, 0, 2), true); err != nil {
		t.Fatal(err)
	}
	w.checkEarnings(t, earn)
	if unpaid, _ := clean.UnpaidEarnings(ctx); unpaid != keeper.CreditsToUSDC(earned[1]) {
		t.Fatalf("unpaid after the payouts: %d, want the one below the minimum (%d)", unpaid, keeper.CreditsToUSDC(earned[1]))
	}
}

// TestFrozenRecipientFailsAlone: a worker whose USDC account is frozen
// makes the transaction it shares with others fail in preflight; the
// keeper sends each of that transaction's payouts again alone, so the
// others are paid and only the frozen one fails (given back, still owed).
func TestFrozenRecipientFailsAlone(t *testing.T) {
	e := svmtest.NewEnv(t)
	w, earn := earningsWorld(t, e)
	ctx := context.Background()
	// Freeze worker 0's USDC account: its state byte (offset 108) = 2.
	frozen := e.MintTo(t, w.cfg.USDCMint, onchain.TokenProgram, w.workers[0].Owner, 0)
	res, err := e.RPC.GetAccountInfo(ctx, frozen)
	if err != nil {
		t.Fatal(err)
	}
	data := res.Value.Data.GetBinary()
	data[108] = 2
	e.SetAccount(t, frozen, onchain.TokenProgram, data)

	ts, _, err := w.earningsKeeper(earn, nil).EarningsPayouts(ctx, w.at, true)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]store.TransferState{}
	for _, tr := range ts {
		states[tr.Recipient] = tr.State
	}
	if states[w.workers[0].Owner.String()] != store.TransferFailed || states[w.workers[2].Owner.String()] != store.TransferConfirmed {
		t.Fatalf("transfers %+v; want the frozen worker's failed and the other's confirmed", ts)
	}
	if got := e.TokenBalance(t, w.cfg.USDCATA(w.workers[2].Owner)); got != uint64(earned[2]*10_000) {
		t.Fatalf("the other worker holds %d, want %d", got, earned[2]*10_000)
	}
	owed, err := earn.OwedEarnings(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]int64{}
	for _, o := range owed {
		left[o.Wallet] = o.Credits
	}
	if left[w.workers[0].Owner.String()] != earned[0] || left[w.workers[2].Owner.String()] != 0 {
		t.Fatalf("still owed %v; want the frozen worker's %d given back and the other paid", left, earned[0])
	}
}
