package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
)

// LedgerStore is what the ledger suite needs: the ledger and the earnings
// the keeper pays out, plus accounts for the daily allowance.
type LedgerStore interface {
	store.Ledger
	store.Earnings
	CreateAccount(ctx context.Context, a store.Account) error
	GetAccount(ctx context.Context, id string) (store.Account, error)
}

// RunLedger is the conformance suite of store.Ledger. open must return a
// fresh, empty store for the subtest it is given and close it when the
// subtest ends. Subtests run in parallel, each on its own store.
func RunLedger(t *testing.T, open func(t *testing.T) LedgerStore) {
	for _, tc := range ledgerTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, open(t))
		})
	}
}

var lt0 = time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)

func transfers(run string, n int) []store.Transfer {
	out := make([]store.Transfer, n)
	for i := range out {
		out[i] = store.Transfer{Key: fmt.Sprintf("%s/reward/w%d", run, i), Seq: n - i, Kind: "reward",
			Recipient: fmt.Sprintf("w%d", i), Mint: "usdc", Amount: int64(100 + i)}
	}
	return out
}

// sealedRun starts a run with n transfers and seals it.
func sealedRun(t *testing.T, l store.Ledger, run string, n int) []store.Transfer {
	t.Helper()
	ctx := context.Background()
	if _, _, err := l.StartRun(ctx, store.KeeperRun{ID: run, Created: lt0}); err != nil {
		t.Fatalf("StartRun: %v", err)
	}
	ts := transfers(run, n)
	if err := l.AddTransfers(ctx, run, ts, lt0); err != nil {
		t.Fatalf("AddTransfers: %v", err)
	}
	if err := l.SealPlan(ctx, run, n, "test", lt0); err != nil {
		t.Fatalf("SealPlan: %v", err)
	}
	return ts
}

func keysOf(ts []store.Transfer) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Key
	}
	return out
}

func mustIs(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

func byKey(t *testing.T, l store.Ledger, run string) map[string]store.Transfer {
	t.Helper()
	ts, err := l.RunTransfers(context.Background(), run)
	if err != nil {
		t.Fatalf("RunTransfers: %v", err)
	}
	m := map[string]store.Transfer{}
	for _, tr := range ts {
		m[tr.Key] = tr
	}
	return m
}

var ledgerTests = []struct {
	name string
	run  func(t *testing.T, l LedgerStore)
}{
	{"StartRunOnce", func(t *testing.T, l LedgerStore) {
		ctx := context.Background()
		r, created, err := l.StartRun(ctx, store.KeeperRun{ID: "r", Created: lt0})
		if err != nil || !created || r.State != store.RunPlanning {
			t.Fatalf("first StartRun = %+v, %v, %v", r, created, err)
		}
		r, created, err = l.StartRun(ctx, store.KeeperRun{ID: "r", Created: lt0.Add(time.Hour)})
		if err != nil || created || !r.Created.Equal(lt0) {
			t.Fatalf("second StartRun = %+v, %v, %v; want the stored run", r, created, err)
		}
		_, err = l.GetRun(ctx, "missing")
		mustIs(t, "GetRun missing", err, store.ErrNotFound)
	}},
	{"PlanAndSeal", func(t *testing.T, l LedgerStore) {
		ctx := context.Background()
		if _, _, err := l.StartRun(ctx, store.KeeperRun{ID: "r", Created: lt0}); err != nil {
			t.Fatal(err)
		}
		ts := transfers("r", 3)
		if err := l.AddTransfers(ctx, "r", ts[:2], lt0); err != nil {
			t.Fatal(err)
		}
		mustIs(t, "AddTransfers duplicate", l.AddTransfers(ctx, "r", ts[1:], lt0), store.ErrExists)
		mustIs(t, "SealPlan with a partial plan", l.SealPlan(ctx, "r", 3, "", lt0), store.ErrConflict)
		// A plan interrupted half-written is rebuilt from scratch.
		if err := l.ResetPlan(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		if got := byKey(t, l, "r"); len(got) != 0 {
			t.Fatalf("after ResetPlan: %d transfers", len(got))
		}
		if err := l.AddTransfers(ctx, "r", ts, lt0); err != nil {
			t.Fatal(err)
		}
		if err := l.SealPlan(ctx, "r", 3, "sum=303", lt0); err != nil {
			t.Fatal(err)
		}
		if err := l.SealPlan(ctx, "r", 3, "sum=303", lt0); err != nil {
			t.Fatalf("sealing again: %v", err)
		}
		mustIs(t, "AddTransfers after seal", l.AddTransfers(ctx, "r", transfers("x", 1), lt0), store.ErrConflict)
		mustIs(t, "ResetPlan after seal", l.ResetPlan(ctx, "r"), store.ErrConflict)
		r, err := l.GetRun(ctx, "r")
		if err != nil || r.State != store.RunSealed || r.Transfers != 3 || r.Summary != "sum=303" {
			t.Fatalf("run = %+v, %v", r, err)
		}
		got, err := l.RunTransfers(ctx, "r")
		if err != nil || len(got) != 3 {
			t.Fatalf("RunTransfers = %d, %v", len(got), err)
		}
		for i, tr := range got {
			if tr.Seq != i+1 || tr.State != store.TransferPlanned || tr.Run != "r" || tr.Amount != ts[len(ts)-1-i].Amount {
				t.Fatalf("transfer %d = %+v; want by seq, planned", i, tr)
			}
		}
		// A key is never reused, not even by another run.
		if _, _, err := l.StartRun(ctx, store.KeeperRun{ID: "r2", Created: lt0}); err != nil {
			t.Fatal(err)
		}
		mustIs(t, "key reused by another run", l.AddTransfers(ctx, "r2", ts[:1], lt0), store.ErrExists)
		if err := l.AddTransfers(ctx, "r2", []store.Transfer{{Key: "k", Amount: 0}}, lt0); err == nil {
			t.Fatal("zero amount accepted")
		}
	}},
	{"Earnings", func(t *testing.T, l LedgerStore) {
		ctx := context.Background()
		for _, a := range []store.Account{
			{ID: "w1", Wallet: "wallet1", Earned: 500, CreatedAt: lt0},
			{ID: "w2", Wallet: "wallet2", Earned: 99, CreatedAt: lt0},
			{ID: "w3", Wallet: "wallet3", Earned: 100, PaidOut: 100, CreatedAt: lt0},
			{ID: "payer", Credits: 1000, CreatedAt: lt0},
		} {
			if err := l.CreateAccount(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		owed, err := l.OwedEarnings(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if want := []store.Owed{{AccountID: "w1", Wallet: "wallet1", Credits: 500}}; !slices.Equal(owed, want) {
			t.Fatalf("owed %v, want %v", owed, want)
		}
		// The owner asks for a payout: the first ask's time stays, and
		// the listing says so.
		for _, when := range []time.Time{lt0.Add(time.Minute), lt0.Add(time.Hour)} {
			if a, err := l.RequestPayout(ctx, "w1", when); err != nil || !a.PayoutRequested.Equal(lt0.Add(time.Minute)) {
				t.Fatalf("RequestPayout = %+v, %v; want requested at %v", a, err, lt0.Add(time.Minute))
			}
		}
		_, err = l.RequestPayout(ctx, "nobody", lt0)
		mustIs(t, "RequestPayout of no account", err, store.ErrNotFound)
		if owed, _ = l.OwedEarnings(ctx, 100); len(owed) != 1 || !owed[0].Requested {
			t.Fatalf("owed %v, want w1 requested", owed)
		}
		// A payout reserves what it sends, once per key (which answers the
		// request); a failed one gives it back, once.
		for i, want := range []bool{true, false} {
			applied, err := l.AdjustPaidOut(ctx, "w1", 300, "payouts/d1/w1")
			if err != nil || applied != want {
				t.Fatalf("reserve, call %d: applied %v, %v; want %v", i+1, applied, err, want)
			}
		}
		if a, _ := l.GetAccount(ctx, "w1"); a.PaidOut != 300 || a.Earned != 500 || !a.PayoutRequested.IsZero() {
			t.Fatalf("after a reserve retried: paid out %d, earned %d, requested %v; want 300, 500, answered", a.PaidOut, a.Earned, a.PayoutRequested)
		}
		if owed, _ := l.OwedEarnings(ctx, 100); len(owed) != 1 || owed[0].Credits != 200 {
			t.Fatalf("owed after the reserve: %v, want w1 200", owed)
		}
		_, err = l.AdjustPaidOut(ctx, "w1", 201, "payouts/d1/w1-more")
		mustIs(t, "paying out more than earned", err, store.ErrInsufficientCredits)
		if applied, err := l.AdjustPaidOut(ctx, "w1", -300, "payouts/d1/w1/failed"); err != nil || !applied {
			t.Fatalf("give back: %v, %v", applied, err)
		}
		if applied, err := l.AdjustPaidOut(ctx, "w1", -300, "payouts/d1/w1/failed"); err != nil || applied {
			t.Fatalf("give back again: %v, %v; want not applied", applied, err)
		}
		if a, _ := l.GetAccount(ctx, "w1"); a.PaidOut != 0 {
			t.Fatalf("paid out %d after the give-back, want 0", a.PaidOut)
		}
		_, err = l.AdjustPaidOut(ctx, "w1", -1, "below-zero")
		mustIs(t, "paid out below zero", err, store.ErrInsufficientCredits)
		_, err = l.AdjustPaidOut(ctx, "nobody", 1, "k")
		mustIs(t, "missing account", err, store.ErrNotFound)
		// Concurrent reserves with distinct keys never exceed earnings.
		errs := make(chan error, 10)
		for i := range 10 {
			go func() {
				_, err := l.AdjustPaidOut(ctx, "w1", 100, fmt.Sprintf("race-%d", i))
				errs <- err
			}()
		}
		ok := 0
		for range 10 {
			switch err := <-errs; {
			case err == nil:
				ok++
			case !errors.Is(err, store.ErrInsufficientCredits):
				t.Errorf("racing reserve: %v", err)
			}
		}
		if a, _ := l.GetAccount(ctx, "w1"); ok != 5 || a.PaidOut != 500 {
			t.Fatalf("%d racing reserves applied, paid out %d; want 5, 500", ok, a.PaidOut)
		}
	}},
	{"OpenRuns", func(t *testing.T, l LedgerStore) {
		ctx := context.Background()
		for _, id := range []string{"earnings/2026-11-29", "earnings/2026-11-29/r15", "earnings/2026-11-30", "rewards/2026-11-29"} {
			if _, _, err := l.StartRun(ctx, store.KeeperRun{ID: id, Created: lt0}); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range []string{"earnings/2026-11-29", "earnings/2026-11-29/r15"} {
			if err := l.SealPlan(ctx, id, 0, "", lt0); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.FinishRun(ctx, "earnings/2026-11-29", nil, lt0); err != nil {
			t.Fatal(err)
		}
		open := func(prefix string, want ...string) {
			t.Helper()
			rs, err := l.OpenRuns(ctx, prefix)
			var ids []string
			for _, r := range rs {
				ids = append(ids, r.ID)
			}
			if err != nil || !slices.Equal(ids, want) {
				t.Errorf("OpenRuns %q = %v, %v; want %v", prefix, ids, err, want)
			}
		}
		open("earnings/", "earnings/2026-11-29/r15", "earnings/2026-11-30")
		open("rewards/", "rewards/2026-11-29")
		open("payouts/")
		if rs, _ := l.OpenRuns(ctx, "earnings/2026-11-29/"); len(rs) != 1 || rs[0].State != store.RunSealed {
			t.Errorf("the sealed run listed as %+v", rs)
		}
	}},
	{"LargePlan", func(t *testing.T, l LedgerStore) {
		ctx := context.Background()
		if _, _, err := l.StartRun(ctx, store.KeeperRun{ID: "r", Created: lt0}); err != nil {
			t.Fatal(err)
		}
		ts := transfers("r", 3*store.MaxTransfersPerAdd+5)
		if err := l.AddTransfers(ctx, "r", ts[:store.MaxTransfersPerAdd+1], lt0); err == nil {
			t.Fatal("AddTransfers took more than MaxTransfersPerAdd")
		}
		if got := byKey(t, l, "r"); len(got) != 0 {
			t.Fatalf("a refused AddTransfers stored %d transfers", len(got))
		}
		for i := 0; i < len(ts); i += store.MaxTransfersPerAdd {
			if err := l.AddTransfers(ctx, "r", ts[i:min(i+store.MaxTransfersPerAdd, len(ts))], lt0); err != nil {
				t.Fatal(err)
			}
		}
		if got := byKey(t, l, "r"); len(got) != len(ts) {
			t.Fatalf("%d transfers stored, want %d", len(got), len(ts))
		}
		// A reset of a plan larger than one write removes all of it.
		if err := l.ResetPlan(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		if got := byKey(t, l, "r"); len(got) != 0 {
			t.Fatalf("after ResetPlan: %d transfers", len(got))
		}
		if err := l.AddTransfers(ctx, "r", ts[:2], lt0); err != nil {
			t.Fatalf("keys are free again after a reset: %v", err)
		}
		if err := l.SealPlan(ctx, "r", 2, "", lt0); err != nil {
			t.Fatalf("seal counts only what is stored now: %v", err)
		}
	}},
	{"SendAndSettle", func(t *testing.T, l LedgerStore) {
		ctx := context.Background()
		if _, _, err := l.StartRun(ctx, store.KeeperRun{ID: "r", Created: lt0}); err != nil {
			t.Fatal(err)
		}
		ts := transfers("r", 3)
		if err := l.AddTransfers(ctx, "r", ts, lt0); err != nil {
			t.Fatal(err)
		}
		mustIs(t, "MarkSent before seal", l.MarkSent(ctx, keysOf(ts[:1]), "", "s1", 10, lt0), store.ErrConflict)
		if err := l.SealPlan(ctx, "r", 3, "", lt0); err != nil {
			t.Fatal(err)
		}
		if err := l.MarkSent(ctx, keysOf(ts[:2]), "", "s1", 10, lt0); err != nil {
			t.Fatal(err)
		}
		// All or nothing: one transfer under the wrong signature, none move.
		mustIs(t, "MarkSent mixed", l.MarkSent(ctx, keysOf(ts), "", "s2", 20, lt0), store.ErrConflict)
		if got := byKey(t, l, "r")[ts[2].Key]; got.State != store.TransferPlanned {
			t.Fatalf("a failed MarkSent moved %+v", got)
		}
		mustIs(t, "MarkSent from the wrong signature", l.MarkSent(ctx, keysOf(ts[:2]), "other", "s2", 20, lt0), store.ErrConflict)
		// Re-signed after the first expired unseen.
		if err := l.MarkSent(ctx, keysOf(ts[:2]), "s1", "s2", 20, lt0); err != nil {
			t.Fatal(err)
		}
		got := byKey(t, l, "r")[ts[0].Key]
		if got.Signature != "s2" || got.LastValidBlockHeight != 20 || got.Attempts != 2 || got.State != store.TransferSent {
			t.Fatalf("after resend: %+v", got)
		}
		if one, err := l.GetTransfer(ctx, ts[0].Key); err != nil || one.Signature != "s2" || one.State != store.TransferSent || one.Run != "r" {
			t.Fatalf("GetTransfer = %+v, %v; want it sent under s2", one, err)
		}
		_, err := l.GetTransfer(ctx, "r/reward/nobody")
		mustIs(t, "GetTransfer of an unknown key", err, store.ErrNotFound)
		mustIs(t, "Settle under an old signature", l.Settle(ctx, keysOf(ts[:2]), "s1", store.TransferConfirmed, "", lt0), store.ErrConflict)
		if err := l.Settle(ctx, keysOf(ts[:2]), "s2", store.TransferConfirmed, "", lt0); err != nil {
			t.Fatal(err)
		}
		if err := l.Settle(ctx, keysOf(ts[:2]), "s2", store.TransferConfirmed, "", lt0); err != nil {
			t.Fatalf("settling again: %v", err)
		}
		mustIs(t, "Settle confirmed as failed", l.Settle(ctx, keysOf(ts[:1]), "s2", store.TransferFailed, "x", lt0), store.ErrConflict)
		mustIs(t, "MarkSent after confirmed", l.MarkSent(ctx, keysOf(ts[:1]), "s2", "s3", 30, lt0), store.ErrConflict)
		mustIs(t, "Settle a planned transfer", l.Settle(ctx, keysOf(ts[2:]), "", store.TransferConfirmed, "", lt0), store.ErrConflict)
		if err := l.MarkSent(ctx, keysOf(ts[2:]), "", "s4", 40, lt0); err != nil {
			t.Fatal(err)
		}
		if err := l.Settle(ctx, keysOf(ts[2:]), "s4", store.TransferFailed, "swap_failed", lt0); err != nil {
			t.Fatal(err)
		}
		if got := byKey(t, l, "r")[ts[2].Key]; got.State != store.TransferFailed || got.Reason != "swap_failed" {
			t.Fatalf("failed transfer = %+v", got)
		}
		_, err = l.RunTransfers(ctx, "nothing")
		if err != nil {
			t.Fatalf("RunTransfers of an unknown run: %v", err)
		}
	}},
	{"FinishAndCarry", func(t *testing.T, l LedgerStore) {
		ctx := context.Background()
		if v, err := l.Carry(ctx, "rewards"); err != nil || v != 0 {
			t.Fatalf("Carry before any = %d, %v", v, err)
		}
		if _, _, err := l.StartRun(ctx, store.KeeperRun{ID: "r", Created: lt0}); err != nil {
			t.Fatal(err)
		}
		mustIs(t, "FinishRun while planning", l.FinishRun(ctx, "r", nil, lt0), store.ErrConflict)
		sealedRun(t, l, "r2", 1)
		if err := l.FinishRun(ctx, "r2", map[string]int64{"rewards": 7, "burn": 0}, lt0); err != nil {
			t.Fatal(err)
		}
		if err := l.FinishRun(ctx, "r2", map[string]int64{"rewards": 99}, lt0); err != nil {
			t.Fatalf("finishing again: %v", err)
		}
		if v, _ := l.Carry(ctx, "rewards"); v != 7 {
			t.Fatalf("carry = %d, want 7 (a second finish changes nothing)", v)
		}
		if r, _ := l.GetRun(ctx, "r2"); r.State != store.RunDone || r.Completed.IsZero() {
			t.Fatalf("run = %+v", r)
		}
		mustIs(t, "FinishRun missing", l.FinishRun(ctx, "missing", nil, lt0), store.ErrNotFound)
	}},
	{"DailyAllowance", func(t *testing.T, l LedgerStore) {
		ctx := context.Background()
		if err := l.CreateAccount(ctx, store.Account{ID: "a", Credits: 5, FreeAllowanceLeft: 1, CreatedAt: lt0}); err != nil {
			t.Fatal(err)
		}
		for i, want := range []bool{true, false} {
			applied, err := l.SetDailyAllowance(ctx, "a", "2026-11-29", int64(100+i))
			if err != nil || applied != want {
				t.Fatalf("SetDailyAllowance #%d = %v, %v; want %v", i, applied, err, want)
			}
		}
		a, _ := l.GetAccount(ctx, "a")
		if a.FreeAllowanceLeft != 100 || a.Credits != 5 {
			t.Fatalf("account = %+v; want allowance 100 (set once), credits untouched", a)
		}
		if applied, err := l.SetDailyAllowance(ctx, "a", "2026-11-30", 0); err != nil || !applied {
			t.Fatalf("next day = %v, %v", applied, err)
		}
		if a, _ := l.GetAccount(ctx, "a"); a.FreeAllowanceLeft != 0 {
			t.Fatalf("allowance = %d, want reset to 0", a.FreeAllowanceLeft)
		}
		_, err := l.SetDailyAllowance(ctx, "missing", "2026-11-29", 1)
		mustIs(t, "missing account", err, store.ErrNotFound)
	}},
	{"ConcurrentWritersOneWins", func(t *testing.T, l LedgerStore) {
		ctx := context.Background()
		ts := sealedRun(t, l, "r", 1)
		if err := l.CreateAccount(ctx, store.Account{ID: "a", CreatedAt: lt0}); err != nil {
			t.Fatal(err)
		}
		const n = 16
		var wg sync.WaitGroup
		var mu sync.Mutex
		sent, started, allowed := 0, 0, 0
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errSent := l.MarkSent(ctx, keysOf(ts), "", fmt.Sprintf("sig%d", i), 10, lt0)
				_, created, errRun := l.StartRun(ctx, store.KeeperRun{ID: "new", Created: lt0})
				applied, errAllow := l.SetDailyAllowance(ctx, "a", "d", int64(i))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case errSent == nil:
					sent++
				case !errors.Is(errSent, store.ErrConflict):
					t.Errorf("MarkSent: %v", errSent)
				}
				if errRun != nil || errAllow != nil {
					t.Errorf("StartRun: %v; SetDailyAllowance: %v", errRun, errAllow)
				}
				if created {
					started++
				}
				if applied {
					allowed++
				}
			}()
		}
		wg.Wait()
		if sent != 1 || started != 1 || allowed != 1 {
			t.Fatalf("winners: MarkSent %d, StartRun %d, SetDailyAllowance %d; want 1 each", sent, started, allowed)
		}
		if got := byKey(t, l, "r")[ts[0].Key]; got.Attempts != 1 {
			t.Fatalf("attempts = %d, want 1", got.Attempts)
		}
	}},
}
