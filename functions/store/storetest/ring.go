package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
)

// Ring settlement: a job served by a ring of workers (a sharded model's
// stages, each possibly another contributor's) completes on its
// coordinator's connection, and its earning is split between the stages'
// accounts (Completion.Shares), credited in the same write as the job's
// end, once.

// ringJob admits job id (price credits, paid by "payer") and assigns it to
// the coordinator w1 of account "wa" (identity pubkey-w1), creating the
// payer, "wa" and the worker on first use.
func (f *fixture) ringJob(id string, price int64, when time.Time) store.Job {
	f.t.Helper()
	if _, err := f.s.GetAccount(f.ctx, "payer"); errors.Is(err, store.ErrNotFound) {
		f.payer("payer", 10_000, 0)
		f.account("wa", 0, 0)
		f.worker("w1", "wa", "m1")
	}
	keys, err := f.s.ListAPIKeys(f.ctx, "payer")
	if err != nil || len(keys) != 1 {
		f.t.Fatalf("ListAPIKeys payer = %+v, %v; want one key", keys, err)
	}
	f.admit(keys[0].Hash, id, "m1", price, when)
	return f.assign(id, "w1", when.Add(time.Millisecond))
}

// ringCompletion is the completion of jobID on w1 paying shares, its
// earning their sum.
func ringCompletion(jobID string, when time.Time, shares ...store.Share) store.Completion {
	c := completion(jobID, "w1", when)
	c.Earning, c.Shares = 0, shares
	for _, sh := range shares {
		c.Earning += sh.Amount
	}
	return c
}

// earningEntry is the entry a share of amount credits to account for job.
func earningEntry(account, job string, amount int64, when time.Time) store.Entry {
	return store.Entry{AccountID: account, Kind: store.EntryEarning, Credits: amount, JobID: job, At: when}
}

// ledgerState is what a completion may change of the money, to compare
// before and after a call that must change nothing.
type ledgerState struct {
	earned  map[string]int64
	entries map[string]int
	money   store.Money
	jobs    int64
}

func (f *fixture) ledgerState(accounts ...string) ledgerState {
	f.t.Helper()
	st := ledgerState{earned: map[string]int64{}, entries: map[string]int{}}
	for _, a := range accounts {
		st.earned[a] = f.getAccount(a).Earned
		st.entries[a] = len(f.checkSums(a))
	}
	var err error
	if st.money, err = f.s.MoneyTotals(f.ctx); err != nil {
		f.t.Fatalf("MoneyTotals: %v", err)
	}
	stats, err := f.s.Stats(f.ctx, base)
	if err != nil {
		f.t.Fatalf("Stats: %v", err)
	}
	st.jobs = stats.JobsCompleted
	return st
}

func (f *fixture) sameLedgerState(what string, got, want ledgerState) {
	f.t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) { // maps print sorted
		f.t.Errorf("%s: the ledger changed:\n got  %+v\n want %+v", what, got, want)
	}
}

// owed is OwedEarnings(1) as account ids and credits.
func (f *fixture) owed() map[string]int64 {
	f.t.Helper()
	list, err := f.s.OwedEarnings(f.ctx, 1)
	if err != nil {
		f.t.Fatalf("OwedEarnings: %v", err)
	}
	out := map[string]int64{}
	for i, o := range list {
		if i > 0 && o.AccountID <= list[i-1].AccountID {
			f.t.Errorf("OwedEarnings not by account id: %s after %s", o.AccountID, list[i-1].AccountID)
		}
		if o.Wallet != "wallet-"+o.AccountID {
			f.t.Errorf("OwedEarnings: %s's wallet %q, want wallet-%s", o.AccountID, o.Wallet, o.AccountID)
		}
		out[o.AccountID] = o.Credits
	}
	return out
}

var ringTests = []test{
	{"SharesCredited", func(t *testing.T, f *fixture) {
		f.ringJob("j1", 100, at(1))
		for _, a := range []string{"wb", "wc", "wd"} {
			f.account(a, 0, 0)
		}
		// The coordinator's own part, two stages of wb, one of wc, and a
		// stage of wd that earned nothing.
		c := ringCompletion("j1", at(10),
			store.Share{Account: "wa", Pubkey: "pubkey-w1", Amount: 10},
			store.Share{Account: "wb", Pubkey: "pk-b1", Amount: 20},
			store.Share{Account: "wc", Pubkey: "pk-c", Amount: 25},
			store.Share{Account: "wb", Pubkey: "pk-b2", Amount: 5},
			store.Share{Account: "wd", Pubkey: "pk-d", Amount: 0})
		c.Receipt = receipt("j1", "w1", 20)
		if err := f.s.Complete(f.ctx, c); err != nil {
			t.Fatalf("Complete with shares: %v", err)
		}
		for account, want := range map[string][]store.Entry{
			"wa": {earningEntry("wa", "j1", 10, at(10))},
			"wb": {earningEntry("wb", "j1", 20, at(10)), earningEntry("wb", "j1", 5, at(10))},
			"wc": {earningEntry("wc", "j1", 25, at(10))},
			"wd": {},
		} {
			sameEntries(t, account+"'s entries", f.checkSums(account), want)
		}
		for account, want := range map[string]int64{"wa": 10, "wb": 25, "wc": 25, "wd": 0, "payer": 0} {
			if a := f.getAccount(account); a.Earned != want || a.PaidOut != 0 {
				t.Errorf("%s earned %d, paid out %d; want %d, 0", account, a.Earned, a.PaidOut, want)
			}
		}
		if got, want := f.owed(), map[string]int64{"wa": 10, "wb": 25, "wc": 25}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("owed %v, want %v", got, want)
		}
		// The rest of the completion is as without shares.
		if j := f.getJob("j1"); j.State != store.JobDone || j.CompletionTokens != 20 || j.WorkerAccount != "wa" {
			t.Errorf("job %+v, want done on wa with 20 tokens", j)
		}
		if w := f.getWorker("w1"); w.State != store.WorkerIdle || w.Job != "" || w.MilliTokPerSec != 2000 {
			t.Errorf("coordinator %+v, want idle at 2000 mtok/s", w)
		}
		if r, err := f.s.GetReceipt(f.ctx, "j1"); err != nil || r.Signature != "sig-j1" || r.AccountID != "payer" {
			t.Errorf("GetReceipt = %+v, %v; want the receipt, the payer's", r, err)
		}
		if p := f.getAccount("payer"); p.Credits != 10_000-100 || p.TotalSpent != 100 {
			t.Errorf("payer %+v, want 100 spent", p)
		}
		money, err := f.s.MoneyTotals(f.ctx)
		if want := (store.Money{Recognized: 100, Earned: 60}); err != nil || money != want {
			t.Errorf("MoneyTotals = %+v, %v; want %+v", money, err, want)
		}
		if st, err := f.s.Stats(f.ctx, at(10)); err != nil || st.JobsCompleted != 1 || st.TokensServed != 20 {
			t.Errorf("Stats = %+v, %v; want 1 job, 20 tokens", st, err)
		}
		// The coordinator's identity counts the job and its own part.
		if r := f.getReputation("wa", "pubkey-w1"); r.JobsCompleted != 1 || r.EarnedCredits != 10 {
			t.Errorf("coordinator's reputation %+v, want 1 job, 10 credits earned", r)
		}
	}},
	{"Retried", func(t *testing.T, f *fixture) {
		f.ringJob("j1", 50, at(1))
		f.account("wb", 0, 0)
		shares := []store.Share{{Account: "wb", Pubkey: "pk-b1", Amount: 12}, {Account: "wa", Pubkey: "pubkey-w1", Amount: 3},
			{Account: "wb", Pubkey: "pk-b2", Amount: 15}}
		// Racing completions, each a retry of the others: one applies.
		ok, _ := tally(t, race(20, func(int) error { return f.s.Complete(f.ctx, ringCompletion("j1", at(10), shares...)) }))
		if ok != 20 {
			t.Errorf("%d of 20 racing completions returned no error, want all: the losers find the job done", ok)
		}
		done := f.ledgerState("wa", "wb")
		want := ledgerState{earned: map[string]int64{"wa": 3, "wb": 27}, entries: map[string]int{"wa": 1, "wb": 2},
			money: store.Money{Recognized: 50, Earned: 30}, jobs: 1}
		f.sameLedgerState("after racing completions", done, want)
		// Retried later, with the same shares or others: nothing more.
		for _, again := range []store.Completion{
			ringCompletion("j1", at(20), shares...),
			ringCompletion("j1", at(30), store.Share{Account: "wb", Pubkey: "pk-b1", Amount: 30}),
			completion("j1", "w1", at(40)),
		} {
			if err := f.s.Complete(f.ctx, again); err != nil {
				t.Fatalf("Complete again: %v", err)
			}
			f.sameLedgerState("after a retried Complete", f.ledgerState("wa", "wb"), want)
		}
		if r := f.getReputation("wa", "pubkey-w1"); r.JobsCompleted != 1 || r.EarnedCredits != 3 {
			t.Errorf("coordinator's reputation %+v, want 1 job, 3 credits earned", r)
		}
	}},
	{"Refused", func(t *testing.T, f *fixture) {
		assigned := f.ringJob("j1", 100, at(1))
		f.account("wb", 0, 0)
		many := make([]store.Share, store.MaxShares+1)
		for i := range many {
			many[i] = store.Share{Account: "wb", Pubkey: fmt.Sprintf("pk-%02d", i), Amount: 1}
		}
		b := func(amount int64) store.Share { return store.Share{Account: "wb", Pubkey: "pk-b", Amount: amount} }
		for _, tc := range []struct {
			name string
			c    store.Completion
			err  error // beyond an error: the kind, where there is one
		}{
			{"below the earning", func() store.Completion {
				c := ringCompletion("j1", at(10), b(10), b(20))
				c.Earning = 40
				return c
			}(), nil},
			{"above the earning", func() store.Completion {
				c := ringCompletion("j1", at(10), b(10), b(20))
				c.Earning = 29
				return c
			}(), nil},
			{"negative share", ringCompletion("j1", at(10), b(-5), b(65)), nil},
			{"no account", ringCompletion("j1", at(10), b(10), store.Share{Pubkey: "pk-x", Amount: 5}), nil},
			{"no identity", ringCompletion("j1", at(10), b(10), store.Share{Account: "wa", Amount: 5}), nil},
			{"too many shares", ringCompletion("j1", at(10), many...), nil},
			{"unknown account", ringCompletion("j1", at(10), b(10), store.Share{Account: "nobody", Pubkey: "pk-n", Amount: 5}), store.ErrNotFound},
			{"above the price", ringCompletion("j1", at(10), b(60), store.Share{Account: "wa", Pubkey: "pubkey-w1", Amount: 41}), nil},
		} {
			before := f.ledgerState("wa", "wb")
			err := f.s.Complete(f.ctx, tc.c)
			if err == nil {
				t.Errorf("%s: Complete accepted the shares %+v", tc.name, tc.c.Shares)
				continue
			}
			if tc.err != nil {
				wantErr(t, tc.name, err, tc.err)
			}
			f.sameLedgerState(tc.name, f.ledgerState("wa", "wb"), before)
			sameJob(t, tc.name+": job", f.getJob("j1"), assigned)
			if w := f.getWorker("w1"); w.State != store.WorkerBusy || w.Job != "j1" {
				t.Errorf("%s: coordinator %+v, want still busy with j1", tc.name, w)
			}
			if _, err := f.s.GetReceipt(f.ctx, "j1"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s: GetReceipt: %v, want ErrNotFound", tc.name, err)
			}
		}
		if _, err := f.s.GetAccount(f.ctx, "nobody"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a refused share made its account: %v", err)
		}
		if got := f.owed(); len(got) != 0 {
			t.Errorf("owed %v after refused completions, want none", got)
		}
		// Refused, the job is still there to complete.
		if err := f.s.Complete(f.ctx, ringCompletion("j1", at(20), b(30), b(40))); err != nil {
			t.Fatalf("Complete after the refusals: %v", err)
		}
		if a := f.getAccount("wb"); a.Earned != 70 {
			t.Errorf("wb earned %d, want 70", a.Earned)
		}
	}},
	{"MaxShares", func(t *testing.T, f *fixture) {
		// The most shares, each to another account, none the
		// coordinator's (which then earns nothing), with a receipt: the
		// largest completion a store writes.
		total := int64(store.MaxShares * (store.MaxShares + 1) / 2)
		f.ringJob("j1", total+1, at(1))
		shares := make([]store.Share, store.MaxShares)
		want := map[string]int64{}
		for i := range shares {
			id := fmt.Sprintf("s%02d", i)
			f.account(id, 0, 0)
			shares[i] = store.Share{Account: id, Pubkey: "pk-" + id, Amount: int64(i + 1)}
			want[id] = int64(i + 1)
		}
		c := ringCompletion("j1", at(10), shares...)
		c.Receipt = receipt("j1", "w1", 20)
		if err := f.s.Complete(f.ctx, c); err != nil {
			t.Fatalf("Complete with %d shares: %v", len(shares), err)
		}
		for _, sh := range shares {
			sameEntries(t, sh.Account+"'s entries", f.checkSums(sh.Account), []store.Entry{earningEntry(sh.Account, "j1", sh.Amount, at(10))})
		}
		if es := f.checkSums("wa"); len(es) != 0 {
			t.Errorf("the coordinator's account has entries %+v, named by no share", es)
		}
		if got := f.owed(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("owed %v, want %v", got, want)
		}
		if money, err := f.s.MoneyTotals(f.ctx); err != nil || money.Earned != total || money.Recognized != total+1 {
			t.Errorf("MoneyTotals = %+v, %v; want earned %d, recognized %d", money, err, total, total+1)
		}
		if r := f.getReputation("wa", "pubkey-w1"); r.JobsCompleted != 1 || r.EarnedCredits != 0 {
			t.Errorf("coordinator's reputation %+v, want 1 job, nothing earned", r)
		}
	}},
	{"OutOfStanding", func(t *testing.T, f *fixture) {
		// The coordinator's identity quarantined mid-job: the ring's work
		// is not accepted, and no stage is paid.
		key := f.payer("payer", 100, 0)
		f.account("wa", 0, 0)
		f.account("wb", 0, 0)
		f.mustConnect("w1", "wa", "pk1", "tok-1", at(1))
		f.admit(key, "j1", "m1", 8, at(2))
		assigned := f.assign("j1", "w1", at(3))
		f.judge(verdict("c1", "w1", "pk1", "tok-1", store.VerdictCanaryFailed, store.CanaryStrikes))
		before := f.ledgerState("wa", "wb")
		c := ringCompletion("j1", at(4), store.Share{Account: "wa", Pubkey: "pk1", Amount: 2},
			store.Share{Account: "wb", Pubkey: "pk-b", Amount: 4})
		wantErr(t, "Complete of a quarantined coordinator's ring job", f.s.Complete(f.ctx, c), store.ErrNotActive)
		f.sameLedgerState("after a refused completion", f.ledgerState("wa", "wb"), before)
		sameJob(t, "refused job", f.getJob("j1"), assigned)
		if got := f.owed(); len(got) != 0 {
			t.Errorf("owed %v, want none", got)
		}
	}},
	{"EntryIDs", func(t *testing.T, f *fixture) {
		// One account holding several of a job's shares, under one
		// identity too: an entry each, each id its own.
		f.ringJob("j1", 100, at(1))
		c := ringCompletion("j1", at(10), store.Share{Account: "wa", Pubkey: "pubkey-w1", Amount: 7},
			store.Share{Account: "wa", Pubkey: "pubkey-w1", Amount: 7}, store.Share{Account: "wa", Pubkey: "pk-2", Amount: 1})
		if err := f.s.Complete(f.ctx, c); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		es := f.checkSums("wa") // ids strictly descending: unique
		var ids []string
		for _, e := range es {
			ids = append(ids, e.ID)
		}
		var want []string
		for i, sh := range c.Shares {
			want = append(want, store.RingShareEntry(f.getJob("j1"), i, sh, at(10)).ID)
		}
		slices.Sort(ids)
		slices.Sort(want)
		if !slices.Equal(ids, want) {
			t.Errorf("entry ids %q, want %q", ids, want)
		}
		if a := f.getAccount("wa"); a.Earned != 15 {
			t.Errorf("wa earned %d, want 15", a.Earned)
		}
		if r := f.getReputation("wa", "pubkey-w1"); r.EarnedCredits != 14 {
			t.Errorf("coordinator's identity earned %d, want its own 14", r.EarnedCredits)
		}
	}},
}
