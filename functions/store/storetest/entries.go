package storetest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
)

// The account ledger: every money move writes one entry, in the same write,
// once; an account's entries add up to its balance, earnings and payouts.

// moneyMoves is what moves money besides store.Store: the daily allowance
// and payouts, which both stores implement.
type moneyMoves interface {
	SetDailyAllowance(ctx context.Context, accountID, day string, credits int64) (bool, error)
	AdjustPaidOut(ctx context.Context, accountID string, delta int64, key string) (bool, error)
	MoneyTotals(ctx context.Context) (store.Money, error)
	AllowanceAccounts(ctx context.Context, day string) ([]string, error)
}

// moves returns the fixture's store as moneyMoves, or skips the test.
func (f *fixture) moves() moneyMoves {
	f.t.Helper()
	m, ok := f.s.(moneyMoves)
	if !ok {
		f.t.Skip("the store sets no daily allowance and makes no payouts")
	}
	return m
}

// entries reads all of an account's entries and checks their order:
// newest first, ids strictly descending (so unique), times not ascending.
func (f *fixture) entries(accountID string) []store.Entry {
	f.t.Helper()
	got, err := f.s.Entries(f.ctx, accountID, "", store.MaxEntries)
	if err != nil {
		f.t.Fatalf("Entries %s: %v", accountID, err)
	}
	for i, e := range got {
		if e.AccountID != accountID {
			f.t.Errorf("Entries %s: entry %s of account %s", accountID, e.ID, e.AccountID)
		}
		if i > 0 && (e.ID >= got[i-1].ID || e.At.After(got[i-1].At)) {
			f.t.Errorf("Entries %s: %s (%v) after %s (%v): not newest first", accountID, e.ID, e.At, got[i-1].ID, got[i-1].At)
		}
	}
	return got
}

// sameEntries compares entries as sets, by everything but the id (the
// store's), and the time where want has none (the store's clock: then got
// must have one).
func sameEntries(t *testing.T, what string, got, want []store.Entry) {
	t.Helper()
	norm := func(es []store.Entry) []store.Entry {
		out := make([]store.Entry, len(es))
		for i, e := range es {
			e.ID, e.At = "", normTime(e.At)
			out[i] = e
		}
		slices.SortFunc(out, func(a, b store.Entry) int {
			return cmp.Or(cmp.Compare(a.AccountID, b.AccountID), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.JobID, b.JobID),
				cmp.Compare(a.Ref, b.Ref), cmp.Compare(a.Credits, b.Credits))
		})
		return out
	}
	g, w := norm(got), norm(want)
	if len(g) == len(w) {
		for i := range g {
			if w[i].At.IsZero() && !g[i].At.IsZero() {
				g[i].At = time.Time{}
			}
		}
	}
	if !slices.Equal(g, w) {
		t.Errorf("%s:\n got  %+v\n want %+v", what, g, w)
	}
}

// sums adds up an account's entries as the account's fields they change.
func sums(es []store.Entry) (credits, earned, paidOut int64) {
	for _, e := range es {
		switch e.Kind {
		case store.EntryDeposit, store.EntryGrant, store.EntryCharge, store.EntryRefund:
			credits += e.Credits
		case store.EntryEarning:
			earned += e.Credits
		case store.EntryPayout:
			paidOut += e.Credits
		}
	}
	return credits, earned, paidOut
}

// checkSums checks that an account's entries add up to its balance,
// earnings and payouts, for an account created with none.
func (f *fixture) checkSums(accountID string) []store.Entry {
	f.t.Helper()
	es := f.entries(accountID)
	a := f.getAccount(accountID)
	credits, earned, paidOut := sums(es)
	if credits != a.Credits || earned != a.Earned || paidOut != a.PaidOut {
		f.t.Errorf("account %s: entries add up to credits %d, earned %d, paid out %d; the account has %d, %d, %d",
			accountID, credits, earned, paidOut, a.Credits, a.Earned, a.PaidOut)
	}
	return es
}

func (f *fixture) completeEarning(jobID, conn string, earning int64, when time.Time) {
	f.t.Helper()
	err := f.s.Complete(f.ctx, store.Completion{JobID: jobID, Worker: conn, CompletionTokens: 3, Earning: earning, At: when})
	if err != nil {
		f.t.Fatalf("Complete %s: %v", jobID, err)
	}
}

func (f *fixture) fail(jobID string, refund bool, when time.Time) {
	f.t.Helper()
	if _, err := f.s.Fail(f.ctx, jobID, "test", refund, when); err != nil {
		f.t.Fatalf("Fail %s: %v", jobID, err)
	}
}

// passCanary applies a passed canary's verdict on the identity of conn's
// worker, of account wa.
func (f *fixture) passCanary(jobID, conn, wa string, earning int64, when time.Time) store.Verdict {
	f.t.Helper()
	v := store.Verdict{JobID: jobID, Conn: conn, Pubkey: "pubkey-" + conn, AccountID: wa, TokenHash: "tokenhash-" + wa,
		Kind: store.VerdictCanaryPassed, Earning: earning, At: when}
	if _, err := f.s.Judge(f.ctx, v); err != nil {
		f.t.Fatalf("Judge %s: %v", jobID, err)
	}
	return v
}

// mustApply fails unless an idempotent move returned applied as want.
func mustApply(t *testing.T, what string, applied bool, err error, want bool) {
	t.Helper()
	if err != nil || applied != want {
		t.Fatalf("%s = %v, %v; want %v", what, applied, err, want)
	}
}

var entryTests = []test{
	{"EachKind", func(t *testing.T, f *fixture) {
		m := f.moves()
		key := f.payer("a1", 100, 10)
		f.account("wa", 0, 0)
		f.worker("w1", "wa", "m1")

		// Every move, then (first false) every retry, which finds its
		// move made and writes nothing.
		moves := func(first bool) {
			t.Helper()
			var admitErr error
			if !first {
				admitErr = store.ErrExists
			}
			applied, err := f.s.Grant(f.ctx, "a1", 50, "sig-1", true)
			mustApply(t, "Grant deposit", applied, err, first)
			applied, err = f.s.Grant(f.ctx, "a1", 7, "dev-1", false)
			mustApply(t, "Grant", applied, err, first)
			_, err = f.s.Admit(f.ctx, request(key, "j1", "m1", 30, at(1))) // 10 from the allowance, 20 from the balance
			wantErr(t, "Admit j1", err, admitErr)
			_, err = f.s.Admit(f.ctx, request(key, "j2", "m1", 5, at(2))) // all from the balance
			wantErr(t, "Admit j2", err, admitErr)
			f.fail("j1", true, at(10))
			if first {
				f.assign("j2", "w1", at(11))
			}
			f.completeEarning("j2", "w1", 3, at(20))
			f.passCanary("c1", "w1", "wa", 4, at(30))
			applied, err = m.SetDailyAllowance(f.ctx, "a1", "2031-03-14", 25)
			mustApply(t, "SetDailyAllowance", applied, err, first)
			applied, err = m.AdjustPaidOut(f.ctx, "wa", 5, "payout-1")
			mustApply(t, "AdjustPaidOut +5", applied, err, first)
			applied, err = m.AdjustPaidOut(f.ctx, "wa", -5, "payout-1/failed")
			mustApply(t, "AdjustPaidOut -5", applied, err, first)
		}
		wantA1 := []store.Entry{
			{AccountID: "a1", Kind: store.EntryDeposit, Credits: 50, Ref: "sig-1"},
			{AccountID: "a1", Kind: store.EntryGrant, Credits: 7, Ref: "dev-1"},
			{AccountID: "a1", Kind: store.EntryCharge, Credits: -20, Allowance: -10, JobID: "j1", At: at(1)},
			{AccountID: "a1", Kind: store.EntryCharge, Credits: -5, JobID: "j2", At: at(2)},
			{AccountID: "a1", Kind: store.EntryRefund, Credits: 20, Allowance: 10, JobID: "j1", At: at(10)},
			{AccountID: "a1", Kind: store.EntryAllowance, Allowance: 25, Ref: "2031-03-14"},
		}
		wantWA := []store.Entry{
			{AccountID: "wa", Kind: store.EntryEarning, Credits: 3, JobID: "j2", At: at(20)},
			{AccountID: "wa", Kind: store.EntryEarning, Credits: 4, JobID: "c1", At: at(30)},
			{AccountID: "wa", Kind: store.EntryPayout, Credits: 5, Ref: "payout-1"},
			{AccountID: "wa", Kind: store.EntryPayout, Credits: -5, Ref: "payout-1/failed"},
		}
		for _, first := range []bool{true, false} {
			moves(first)
			what := fmt.Sprintf("(first run %v)", first)
			sameEntries(t, "a1's entries "+what, f.entries("a1"), wantA1)
			sameEntries(t, "wa's entries "+what, f.entries("wa"), wantWA)
		}
	}},
	{"NothingMovedNoEntry", func(t *testing.T, f *fixture) {
		// A free job, an earning of 0, a grant of 0, a failure without a
		// refund and a failed canary move nothing, and write no entry.
		key := f.payer("a1", 10, 0)
		f.account("wa", 0, 0)
		f.worker("w1", "wa", "m1")
		applied, err := f.s.Grant(f.ctx, "a1", 0, "nothing", false)
		mustApply(t, "Grant 0", applied, err, true)
		f.admit(key, "free", "m1", 0, at(1))
		f.assign("free", "w1", at(2))
		f.completeEarning("free", "w1", 0, at(3))
		f.admit(key, "j1", "m1", 4, at(4))
		f.fail("j1", false, at(5))
		_, err = f.s.Judge(f.ctx, store.Verdict{JobID: "c1", Conn: "w1", Pubkey: "pubkey-w1", AccountID: "wa",
			TokenHash: "tokenhash-wa", Kind: store.VerdictCanaryFailed, Strikes: 1, Reason: "mismatch", At: at(6)})
		wantErr(t, "Judge failed canary", err, nil)
		sameEntries(t, "a1's entries", f.entries("a1"), []store.Entry{
			{AccountID: "a1", Kind: store.EntryCharge, Credits: -4, JobID: "j1", At: at(4)},
		})
		if es := f.entries("wa"); len(es) != 0 {
			t.Errorf("wa's entries %+v, want none", es)
		}
	}},
	{"RefusedAdmitNoEntry", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 10, 0)
		f.admit(key, "ok", "m1", 1, at(1))
		refused := func(what string, r store.AdmitRequest, want error) {
			t.Helper()
			_, err := f.s.Admit(f.ctx, r)
			wantErr(t, what, err, want)
		}
		refused("no credits", request(key, "poor", "m1", 10, at(2)), store.ErrInsufficientCredits)
		refused("job id taken", request(key, "ok", "m1", 1, at(3)), store.ErrExists)
		r := request(key, "rate", "m1", 1, at(4))
		r.Limit = 1
		refused("key's rate limit", r, store.ErrRateLimited)
		r = request(key, "arate", "m1", 1, at(5))
		r.AccountLimit = 1
		refused("account's rate limit", r, store.ErrRateLimited)
		capped := store.Secret{Hash: "capped-hash", ID: "capped", AccountID: "a1", CreatedAt: base,
			Limit: 2, LimitReset: store.ResetDaily}
		expired := store.Secret{Hash: "expired-hash", ID: "expired", AccountID: "a1", CreatedAt: base, ExpiresAt: at(1)}
		for _, s := range []store.Secret{capped, expired} {
			if err := f.s.PutAPIKey(f.ctx, s); err != nil {
				t.Fatalf("PutAPIKey %s: %v", s.ID, err)
			}
		}
		refused("key's spend limit", request(capped.Hash, "limit", "m1", 3, at(6)), store.ErrKeyLimit)
		refused("expired key", request(expired.Hash, "expired", "m1", 1, at(7)), store.ErrExpired)
		if err := f.s.RevokeAPIKey(f.ctx, "a1", "capped", at(8)); err != nil {
			t.Fatalf("RevokeAPIKey: %v", err)
		}
		refused("revoked key", request(capped.Hash, "revoked", "m1", 1, at(9)), store.ErrRevoked)
		sameEntries(t, "a1's entries", f.entries("a1"), []store.Entry{
			{AccountID: "a1", Kind: store.EntryCharge, Credits: -1, JobID: "ok", At: at(1)},
		})
	}},
	{"AllowanceDays", func(t *testing.T, f *fixture) {
		// The keeper's allowance is the day's: a refund gives its part
		// back while the account's allowance is still that day's, and
		// nothing once the next day's allowance replaced it; a request
		// that costs something marks the account active.
		m := f.moves()
		key := f.payer("p", 100, 0)
		day, next := store.DayOf(at(1)), store.DayOf(at(1).Add(24*time.Hour))
		applied, err := m.SetDailyAllowance(f.ctx, "p", day, 30)
		mustApply(t, "SetDailyAllowance", applied, err, true)
		if a := f.getAccount("p"); a.FreeAllowanceLeft != 30 || a.AllowanceDay != day || !a.LastRequest.IsZero() {
			t.Fatalf("after the day's allowance: %+v", a)
		}
		f.admit(key, "free", "m1", 0, at(1))
		if a := f.getAccount("p"); !a.LastRequest.IsZero() {
			t.Errorf("a free request made the account active: %v", a.LastRequest)
		}
		f.admit(key, "j1", "m1", 20, at(2))
		f.fail("j1", true, at(3))
		if a := f.getAccount("p"); a.FreeAllowanceLeft != 30 || a.Credits != 100 || !a.LastRequest.Equal(at(2)) {
			t.Errorf("refunded the same day: allowance %d, credits %d, last request %v; want 30, 100, %v", a.FreeAllowanceLeft, a.Credits, a.LastRequest, at(2))
		}
		f.admit(key, "j2", "m1", 35, at(4)) // 30 from the allowance, 5 paid
		applied, err = m.SetDailyAllowance(f.ctx, "p", next, 0)
		mustApply(t, "SetDailyAllowance of the next day", applied, err, true)
		f.fail("j2", true, at(5))
		if a := f.getAccount("p"); a.FreeAllowanceLeft != 0 || a.Credits != 100 || a.AllowanceDay != next {
			t.Errorf("refunded after the day: allowance %d, credits %d, day %s; want 0 (the day is gone), 100, %s", a.FreeAllowanceLeft, a.Credits, a.AllowanceDay, next)
		}
		es := f.entries("p")
		if es[0].Kind != store.EntryRefund || es[0].Credits != 5 || es[0].Allowance != 0 {
			t.Errorf("the late refund's entry %+v; want 5 credits and no allowance", es[0])
		}
		for d, want := range map[string][]string{day: {"p"}, next: {}} {
			if got, err := m.AllowanceAccounts(f.ctx, d); err != nil || !slices.Equal(got, want) {
				t.Errorf("AllowanceAccounts %s = %v, %v; want %v", d, got, err, want)
			}
		}
	}},
	{"AddUpToTheAccount", func(t *testing.T, f *fixture) {
		m := f.moves()
		k1 := f.payer("p1", 0, 0)
		k2 := f.payer("p2", 0, 0)
		f.account("wa", 0, 0)
		f.worker("w1", "wa", "m1")
		grant := func(account string, credits int64, key string, deposit bool) {
			t.Helper()
			applied, err := f.s.Grant(f.ctx, account, credits, key, deposit)
			mustApply(t, "Grant "+key, applied, err, true)
		}
		grant("p1", 100, "dep-1", true)
		grant("p1", 20, "dev-1", false)
		grant("p2", 50, "dep-2", true)
		applied, err := m.SetDailyAllowance(f.ctx, "p1", "day-1", 15)
		mustApply(t, "SetDailyAllowance p1", applied, err, true)
		f.admit(k1, "j1", "m1", 10, at(1)) // all from the allowance
		f.admit(k1, "j2", "m1", 10, at(2)) // 5 and 5
		f.admit(k1, "j3", "m1", 10, at(3)) // all from the balance
		f.admit(k2, "j4", "m1", 30, at(4))
		f.admit(k2, "j5", "m1", 0, at(5)) // free
		f.assign("j1", "w1", at(6))
		f.completeEarning("j1", "w1", 6, at(7))
		f.assign("j2", "w1", at(8))
		f.fail("j2", true, at(9)) // refunded: 5 to the allowance, 5 to the balance
		f.assign("j3", "w1", at(10))
		f.completeEarning("j3", "w1", 7, at(11))
		f.fail("j4", false, at(12))
		f.fail("j4", true, at(13)) // the refund asked for later
		f.assign("j5", "w1", at(14))
		f.completeEarning("j5", "w1", 0, at(15))
		f.passCanary("c1", "w1", "wa", 4, at(16))
		for _, p := range []struct {
			delta int64
			key   string
		}{{10, "payout-1"}, {-10, "payout-1/failed"}, {8, "payout-2"}} {
			applied, err := m.AdjustPaidOut(f.ctx, "wa", p.delta, p.key)
			mustApply(t, "AdjustPaidOut "+p.key, applied, err, true)
		}
		applied, err = m.SetDailyAllowance(f.ctx, "p2", "day-1", 5)
		mustApply(t, "SetDailyAllowance p2", applied, err, true)

		count := func(es []store.Entry) map[store.EntryKind]int {
			n := map[store.EntryKind]int{}
			for _, e := range es {
				n[e.Kind]++
			}
			return n
		}
		for account, want := range map[string]map[store.EntryKind]int{
			"p1": {store.EntryDeposit: 1, store.EntryGrant: 1, store.EntryAllowance: 1, store.EntryCharge: 3, store.EntryRefund: 1},
			"p2": {store.EntryDeposit: 1, store.EntryCharge: 1, store.EntryRefund: 1, store.EntryAllowance: 1},
			"wa": {store.EntryEarning: 3, store.EntryPayout: 3},
		} {
			if got := count(f.checkSums(account)); !maps.Equal(got, want) {
				t.Errorf("%s's entries by kind %v, want %v", account, got, want)
			}
		}
		if a := f.getAccount("wa"); a.Earned != 17 || a.PaidOut != 8 {
			t.Errorf("wa earned %d, paid out %d; want 17, 8", a.Earned, a.PaidOut)
		}
		// The totals follow every move: j3's 10 paid credits are the only
		// ones a job kept (j1 drew on the allowance, j2 and j4 were
		// refunded, j5 was free), and they add up to the accounts.
		money, err := m.MoneyTotals(f.ctx)
		if want := (store.Money{Deposited: 150, Granted: 20, Recognized: 10, Earned: 17, PaidOut: 8}); err != nil || money != want {
			t.Errorf("MoneyTotals = %+v, %v; want %+v", money, err, want)
		}
		if got, want := money.CustomerCredits(), f.getAccount("p1").Credits+f.getAccount("p2").Credits; got != want {
			t.Errorf("customer credits %d, the accounts hold %d", got, want)
		}
		if got := money.Revenue(); got != 10-17-20 {
			t.Errorf("revenue %d, want %d", got, 10-17-20)
		}
		// A job running still belongs to its customer; it becomes revenue
		// when it ends, its paid part only (p2's allowance of 5 pays the
		// rest).
		f.admit(k2, "j6", "m1", 9, at(17))
		if money, err = m.MoneyTotals(f.ctx); err != nil || money.CustomerCredits() != 160 || money.Recognized != 10 {
			t.Errorf("with j6 running: %+v, %v; want customer credits 160, recognized 10", money, err)
		}
		f.fail("j6", false, at(18))
		f.fail("j6", false, at(19)) // again: nothing more
		if money, err = m.MoneyTotals(f.ctx); err != nil || money.Recognized != 14 || money.CustomerCredits() != 156 {
			t.Errorf("j6 failed unrefunded: %+v, %v; want recognized 14, customer credits 156", money, err)
		}
		f.fail("j6", true, at(20)) // the refund asked for later gives it back
		if money, err = m.MoneyTotals(f.ctx); err != nil || money.Recognized != 10 || money.CustomerCredits() != 160 {
			t.Errorf("j6 refunded: %+v, %v; want recognized 10, customer credits 160", money, err)
		}

		// The ledger shares the accounts' partitions with their keys and
		// identities: those read as before.
		keys, err := f.s.ListAPIKeys(f.ctx, "p1")
		if err != nil || len(keys) != 1 || keys[0].Hash != k1 {
			t.Errorf("ListAPIKeys p1 = %+v, %v; want its one key", keys, err)
		}
		reps, err := f.s.Reputations(f.ctx, "wa")
		if err != nil || len(reps) != 1 || reps[0].Pubkey != "pubkey-w1" {
			t.Errorf("Reputations wa = %+v, %v; want w1's identity", reps, err)
		}
	}},
	{"Paging", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 1000, 0)
		var want []string
		for i := range 25 {
			id := fmt.Sprintf("j%02d", i)
			f.admit(key, id, "m1", int64(1+i), at(i))
			want = append([]string{id}, want...) // newest first
		}
		var got []string
		seen := map[string]bool{}
		before := ""
		for page := 0; ; page++ {
			es, err := f.s.Entries(f.ctx, "a1", before, 10)
			if err != nil {
				t.Fatalf("Entries page %d: %v", page, err)
			}
			if wantLen := min(10, 25-10*page); len(es) != max(wantLen, 0) {
				t.Fatalf("page %d has %d entries, want %d", page, len(es), max(wantLen, 0))
			}
			if len(es) == 0 {
				break
			}
			for _, e := range es {
				if seen[e.ID] {
					t.Errorf("entry %s twice", e.ID)
				}
				seen[e.ID] = true
				got = append(got, e.JobID)
			}
			before = es[len(es)-1].ID
		}
		if !slices.Equal(got, want) {
			t.Errorf("paged jobs %v, want %v", got, want)
		}
		all := f.entries("a1")
		if len(all) != 25 {
			t.Fatalf("%d entries, want 25", len(all))
		}
		// A cursor is any id: the entries after it, whether it is one or not.
		es, err := f.s.Entries(f.ctx, "a1", all[4].ID+"~", 3)
		if err != nil || len(es) != 3 || es[0].ID != all[4].ID || es[2].ID != all[6].ID {
			t.Errorf("Entries after a made-up cursor = %+v, %v; want entries 5 to 7", es, err)
		}
		for _, limit := range []int{0, -1, store.MaxEntries + 1} {
			if _, err := f.s.Entries(f.ctx, "a1", "", limit); err == nil {
				t.Errorf("Entries with limit %d: no error", limit)
			}
		}
		if es, err := f.s.Entries(f.ctx, "a1", "", 1); err != nil || len(es) != 1 || es[0].ID != all[0].ID {
			t.Errorf("Entries limit 1 = %+v, %v; want the newest", es, err)
		}
		for _, account := range []string{"nobody", "a"} { // "a" is a prefix of "a1"
			if es, err := f.s.Entries(f.ctx, account, "", 10); err != nil || len(es) != 0 {
				t.Errorf("Entries of %s = %+v, %v; want none", account, es, err)
			}
		}
	}},
	{"ConcurrentAdmits", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 1000, 5)
		errs := race(20, func(i int) error {
			_, err := f.s.Admit(f.ctx, request(key, fmt.Sprintf("j%02d", i), "m1", 3, at(i)))
			return err
		})
		if ok, _ := tally(t, errs); ok != 20 {
			t.Fatalf("%d of 20 admitted", ok)
		}
		es := f.entries("a1")
		jobs := map[string]bool{}
		var credits, allowance int64
		for _, e := range es {
			if e.Kind != store.EntryCharge {
				t.Errorf("entry %+v, want a charge", e)
			}
			jobs[e.JobID] = true
			credits, allowance = credits+e.Credits, allowance+e.Allowance
		}
		if len(es) != 20 || len(jobs) != 20 {
			t.Errorf("%d entries of %d jobs, want 20 of 20", len(es), len(jobs))
		}
		if a := f.getAccount("a1"); credits != a.Credits-1000 || allowance != a.FreeAllowanceLeft-5 || credits+allowance != -60 {
			t.Errorf("charges add up to %d credits and %d allowance; the account has %d and %d left of 1000 and 5",
				credits, allowance, a.Credits, a.FreeAllowanceLeft)
		}
	}},
}
