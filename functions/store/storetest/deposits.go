package storetest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
)

// Deposit intents: kept by account, unique by id in the account and by
// reference everywhere; each transfer credited once, by signature, with
// Grant's idempotency key, whichever of the two comes first.

// intent stores a new intent of account made at when and returns it as
// stored (pending, nothing credited).
func (f *fixture) intent(accountID, id string, when time.Time) store.Deposit {
	f.t.Helper()
	d := store.Deposit{ID: id, AccountID: accountID, Reference: "ref-" + accountID + "-" + id, AmountUSDC: 5_000_000,
		State: store.DepositPending, Created: when, Updated: when}
	if err := f.s.PutDeposit(f.ctx, d); err != nil {
		f.t.Fatalf("PutDeposit %s of %s: %v", id, accountID, err)
	}
	return d
}

// getDeposit fetches an intent that must exist.
func (f *fixture) getDeposit(accountID, id string) store.Deposit {
	f.t.Helper()
	d, err := f.s.GetDeposit(f.ctx, accountID, id)
	if err != nil {
		f.t.Fatalf("GetDeposit %s of %s: %v", id, accountID, err)
	}
	return d
}

// transfer is a credit of usdc units (at 100 credits a USDC) with sig to
// the account's intent id, at when.
func transfer(accountID, id, sig string, usdc int64, when time.Time) store.DepositCredit {
	return store.DepositCredit{DepositID: id, AccountID: accountID, Signature: sig, USDC: usdc,
		Credits: usdc * 100 / 1_000_000, At: when}
}

// credit credits c, which must return applied as want, and returns the
// intent it returned.
func (f *fixture) credit(c store.DepositCredit, want bool) store.Deposit {
	f.t.Helper()
	d, applied, err := f.s.CreditDeposit(f.ctx, c)
	mustApply(f.t, "CreditDeposit "+c.Signature, applied, err, want)
	return d
}

func normDeposit(d store.Deposit) store.Deposit {
	d.Created, d.Updated = normTime(d.Created), normTime(d.Updated)
	if len(d.Signatures) == 0 {
		d.Signatures = nil
	}
	return d
}

func sameDeposit(t *testing.T, what string, got, want store.Deposit) {
	t.Helper()
	if g, w := normDeposit(got), normDeposit(want); !reflect.DeepEqual(g, w) {
		t.Errorf("%s:\n got  %+v\n want %+v", what, g, w)
	}
}

// depositIDs are the ids of intents, as account/id, in order.
func depositIDs(ds []store.Deposit) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, d.AccountID+"/"+d.ID)
	}
	return out
}

func (f *fixture) listDeposits(accountID string, limit int) []string {
	f.t.Helper()
	ds, err := f.s.ListDeposits(f.ctx, accountID, limit)
	if err != nil {
		f.t.Fatalf("ListDeposits %s: %v", accountID, err)
	}
	for _, d := range ds {
		if d.AccountID != accountID {
			f.t.Errorf("ListDeposits %s: intent %s of account %s", accountID, d.ID, d.AccountID)
		}
	}
	return depositIDs(ds)
}

func (f *fixture) openDeposits(since time.Time, limit int) []string {
	f.t.Helper()
	ds, err := f.s.OpenDeposits(f.ctx, since, limit)
	if err != nil {
		f.t.Fatalf("OpenDeposits since %v: %v", since, err)
	}
	for i, d := range ds {
		if d.Created.Before(since) {
			f.t.Errorf("OpenDeposits since %v: intent %s made at %v", since, d.ID, d.Created)
		}
		if i > 0 && d.Created.Before(ds[i-1].Created) {
			f.t.Errorf("OpenDeposits since %v: %s (%v) after %s (%v): not oldest first", since, d.ID, d.Created, ds[i-1].ID, ds[i-1].Created)
		}
	}
	return depositIDs(ds)
}

func sameIDs(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// credited is d after transfers of sigs, each of usdc, the last at when.
func credited(d store.Deposit, usdc int64, when time.Time, sigs ...string) store.Deposit {
	for _, sig := range sigs {
		d = d.Credit(transfer(d.AccountID, d.ID, sig, usdc, when))
	}
	return d
}

// depositEntry is the ledger entry of a transfer of usdc with sig at when.
func depositEntry(accountID, sig string, usdc int64, when time.Time) store.Entry {
	return store.Entry{AccountID: accountID, Kind: store.EntryDeposit, Credits: usdc * 100 / 1_000_000,
		Ref: store.DepositKey(sig), At: when}
}

var depositTests = []test{
	{"PutGetList", func(t *testing.T, f *fixture) {
		d1 := f.intent("a", "d1", at(1))
		d2 := f.intent("a", "d2", at(3))
		d3 := f.intent("a", "d3", at(2))
		f.intent("b", "d4", at(4))
		sameDeposit(t, "GetDeposit d1", f.getDeposit("a", "d1"), d1)
		sameDeposit(t, "GetDeposit d2", f.getDeposit("a", "d2"), d2)
		sameDeposit(t, "GetDeposit d3", f.getDeposit("a", "d3"), d3)
		sameIDs(t, "ListDeposits a", f.listDeposits("a", store.MaxDeposits), "a/d2", "a/d3", "a/d1")
		sameIDs(t, "ListDeposits a, 2", f.listDeposits("a", 2), "a/d2", "a/d3")
		sameIDs(t, "ListDeposits a, 1", f.listDeposits("a", 1), "a/d2")
		sameIDs(t, "ListDeposits b", f.listDeposits("b", 10), "b/d4")
		sameIDs(t, "ListDeposits of an account without intents", f.listDeposits("c", 10))
		ds, err := f.s.ListDeposits(f.ctx, "a", 10)
		if err != nil || len(ds) != 3 {
			t.Fatalf("ListDeposits a = %d, %v", len(ds), err)
		}
		sameDeposit(t, "listed d2", ds[0], d2)
	}},
	{"PutFresh", func(t *testing.T, f *fixture) {
		// A new intent is pending with nothing credited, whatever it says.
		d := store.Deposit{ID: "d1", AccountID: "a", Kind: store.DepositX402, Reference: "r1", State: store.DepositCredited,
			CreditedUSDC: 9, Credits: 9, Signatures: []string{"s"}, Created: at(1), Updated: at(1)}
		if err := f.s.PutDeposit(f.ctx, d); err != nil {
			t.Fatalf("PutDeposit: %v", err)
		}
		d.State, d.CreditedUSDC, d.Credits, d.Signatures = store.DepositPending, 0, 0, nil
		sameDeposit(t, "GetDeposit", f.getDeposit("a", "d1"), d)
	}},
	{"PutTaken", func(t *testing.T, f *fixture) {
		d1 := f.intent("a", "d1", at(1))
		taken := []struct {
			what string
			d    store.Deposit
		}{
			{"the id", store.Deposit{ID: "d1", AccountID: "a", Reference: "fresh-ref", Created: at(2)}},
			{"the reference", store.Deposit{ID: "d2", AccountID: "a", Reference: d1.Reference, Created: at(2)}},
			{"another account's reference", store.Deposit{ID: "d3", AccountID: "b", Reference: d1.Reference, Created: at(2)}},
		}
		for _, tc := range taken {
			wantErr(t, "PutDeposit with "+tc.what, f.s.PutDeposit(f.ctx, tc.d), store.ErrExists)
		}
		sameDeposit(t, "GetDeposit d1", f.getDeposit("a", "d1"), d1)
		sameIDs(t, "ListDeposits a", f.listDeposits("a", 10), "a/d1")
		sameIDs(t, "ListDeposits b", f.listDeposits("b", 10))
		sameIDs(t, "OpenDeposits", f.openDeposits(at(0), 10), "a/d1")
		// The refused puts took nothing: their reference and id are free.
		f.intent("a", "d2", at(3))
		if err := f.s.PutDeposit(f.ctx, store.Deposit{ID: "d5", AccountID: "a", Reference: "fresh-ref", Created: at(4)}); err != nil {
			t.Fatalf("PutDeposit with the reference a refused put named: %v", err)
		}
	}},
	{"GetMissing", func(t *testing.T, f *fixture) {
		f.intent("a", "d1", at(1))
		_, err := f.s.GetDeposit(f.ctx, "b", "d1")
		wantErr(t, "GetDeposit of another account's intent", err, store.ErrNotFound)
		_, err = f.s.GetDeposit(f.ctx, "a", "d2")
		wantErr(t, "GetDeposit of a missing intent", err, store.ErrNotFound)
	}},
	{"Credit", func(t *testing.T, f *fixture) {
		f.account("a", 0, 0)
		d := f.intent("a", "d1", at(1))
		c := transfer("a", "d1", "sig1", 1_500_000, at(10))
		want := credited(d, 1_500_000, at(10), "sig1")
		if want.State != store.DepositCredited || want.CreditedUSDC != 1_500_000 || want.Credits != 150 ||
			!slices.Equal(want.Signatures, []string{"sig1"}) || !want.Updated.Equal(at(10)) {
			t.Fatalf("Deposit.Credit = %+v", want)
		}
		sameDeposit(t, "CreditDeposit", f.credit(c, true), want)
		sameDeposit(t, "GetDeposit", f.getDeposit("a", "d1"), want)
		check := func(what string) {
			t.Helper()
			a := f.getAccount("a")
			if a.Credits != 150 || a.TotalDeposited != 150 {
				t.Errorf("%s: account credits %d, deposited %d; want 150, 150", what, a.Credits, a.TotalDeposited)
			}
			sameEntries(t, what+": entries", f.checkSums("a"), []store.Entry{depositEntry("a", "sig1", 1_500_000, at(10))})
			sameDeposit(t, what+": GetDeposit", f.getDeposit("a", "d1"), want)
		}
		check("credited")

		// The same transfer again, reported later: nothing changes.
		sameDeposit(t, "CreditDeposit again", f.credit(transfer("a", "d1", "sig1", 1_500_000, at(20)), false), want)
		check("credited again")
		// Nor does Grant of its key.
		applied, err := f.s.Grant(f.ctx, "a", 150, store.DepositKey("sig1"), true)
		mustApply(t, "Grant of the credited signature", applied, err, false)
		check("granted after")
		// Nor crediting it to another of the account's intents.
		d2 := f.intent("a", "d2", at(2))
		sameDeposit(t, "CreditDeposit to another intent", f.credit(transfer("a", "d2", "sig1", 1_500_000, at(20)), false), d2)
		check("credited to another intent")
		sameDeposit(t, "the other intent", f.getDeposit("a", "d2"), d2)
	}},
	{"GrantFirst", func(t *testing.T, f *fixture) {
		f.account("a", 0, 0)
		d := f.intent("a", "d1", at(1))
		applied, err := f.s.Grant(f.ctx, "a", 150, store.DepositKey("sig1"), true)
		mustApply(t, "Grant", applied, err, true)
		sameDeposit(t, "CreditDeposit after Grant", f.credit(transfer("a", "d1", "sig1", 1_500_000, at(10)), false), d)
		sameDeposit(t, "GetDeposit", f.getDeposit("a", "d1"), d)
		if a := f.getAccount("a"); a.Credits != 150 || a.TotalDeposited != 150 {
			t.Errorf("account credits %d, deposited %d; want 150, 150", a.Credits, a.TotalDeposited)
		}
		if es := f.checkSums("a"); len(es) != 1 {
			t.Errorf("%d entries, want Grant's one: %+v", len(es), es)
		}
	}},
	{"ZeroCredits", func(t *testing.T, f *fixture) {
		// A transfer worth less than a credit is recorded on the intent,
		// once, and writes no entry.
		f.account("a", 0, 0)
		d := f.intent("a", "d1", at(1))
		c := transfer("a", "d1", "dust", 9_999, at(10))
		if c.Credits != 0 {
			t.Fatalf("credits %d", c.Credits)
		}
		want := d.Credit(c)
		sameDeposit(t, "CreditDeposit", f.credit(c, true), want)
		sameDeposit(t, "CreditDeposit again", f.credit(c, false), want)
		if a := f.getAccount("a"); a.Credits != 0 || a.TotalDeposited != 0 {
			t.Errorf("account credits %d, deposited %d; want 0, 0", a.Credits, a.TotalDeposited)
		}
		if es := f.entries("a"); len(es) != 0 {
			t.Errorf("entries %+v, want none", es)
		}
	}},
	{"Signatures", func(t *testing.T, f *fixture) {
		f.account("a", 0, 0)
		d := f.intent("a", "d1", at(1))
		var sigs []string
		for i := range store.MaxDepositSignatures {
			sig := fmt.Sprintf("sig%02d", i)
			sigs = append(sigs, sig)
			f.credit(transfer("a", "d1", sig, 2_000_000, at(10+i)), true)
			if i == 1 {
				sameDeposit(t, "after two", f.getDeposit("a", "d1"), credited(d, 2_000_000, at(11), sigs...))
				if a := f.getAccount("a"); a.Credits != 400 || a.TotalDeposited != 400 {
					t.Errorf("after two: account credits %d, deposited %d; want 400, 400", a.Credits, a.TotalDeposited)
				}
			}
		}
		full := credited(d, 2_000_000, at(10+store.MaxDepositSignatures-1), sigs...)
		sameDeposit(t, "full", f.getDeposit("a", "d1"), full)
		_, applied, err := f.s.CreditDeposit(f.ctx, transfer("a", "d1", "one-too-many", 2_000_000, at(100)))
		wantErr(t, "CreditDeposit past the limit", err, store.ErrLimit)
		if applied {
			t.Error("CreditDeposit past the limit applied")
		}
		// A signature credited before is still told apart from a new one.
		f.credit(transfer("a", "d1", "sig00", 2_000_000, at(100)), false)
		sameDeposit(t, "after the refused ones", f.getDeposit("a", "d1"), full)
		total := int64(200 * store.MaxDepositSignatures)
		if a := f.getAccount("a"); a.Credits != total || a.TotalDeposited != total {
			t.Errorf("account credits %d, deposited %d; want %d, %d", a.Credits, a.TotalDeposited, total, total)
		}
		if es := f.checkSums("a"); len(es) != store.MaxDepositSignatures {
			t.Errorf("%d entries, want %d", len(es), store.MaxDepositSignatures)
		}
		// The refused transfer took nothing: a new intent takes it.
		f.intent("a", "d2", at(2))
		f.credit(transfer("a", "d2", "one-too-many", 2_000_000, at(101)), true)
	}},
	{"CreditMissing", func(t *testing.T, f *fixture) {
		f.account("a", 0, 0)
		f.account("b", 0, 0)
		d := f.intent("a", "d1", at(1))
		orphan := f.intent("x", "d1", at(1)) // of an account that does not exist
		for _, c := range []store.DepositCredit{
			transfer("b", "d1", "sig1", 1_000_000, at(10)), // another account's intent
			transfer("a", "d9", "sig1", 1_000_000, at(10)), // no such intent
			transfer("c", "d1", "sig1", 1_000_000, at(10)), // no such account, nor intent
			transfer("x", "d1", "sig1", 1_000_000, at(10)), // an intent, but no account
		} {
			_, applied, err := f.s.CreditDeposit(f.ctx, c)
			wantErr(t, fmt.Sprintf("CreditDeposit %s of %s", c.DepositID, c.AccountID), err, store.ErrNotFound)
			if applied {
				t.Errorf("CreditDeposit %s of %s applied", c.DepositID, c.AccountID)
			}
		}
		sameDeposit(t, "GetDeposit", f.getDeposit("a", "d1"), d)
		sameDeposit(t, "GetDeposit of the orphan", f.getDeposit("x", "d1"), orphan)
		for _, id := range []string{"a", "b"} {
			if a := f.getAccount(id); a.Credits != 0 || a.TotalDeposited != 0 {
				t.Errorf("account %s: credits %d, deposited %d", id, a.Credits, a.TotalDeposited)
			}
		}
		// The signature was not taken.
		f.credit(transfer("a", "d1", "sig1", 1_000_000, at(10)), true)
	}},
	{"Invalid", func(t *testing.T, f *fixture) {
		f.account("a", 0, 0)
		d := f.intent("a", "d1", at(1))
		for _, limit := range []int{-1, 0, store.MaxDeposits + 1} {
			if _, err := f.s.ListDeposits(f.ctx, "a", limit); err == nil {
				t.Errorf("ListDeposits limit %d: no error", limit)
			}
			if _, err := f.s.OpenDeposits(f.ctx, at(0), limit); err == nil {
				t.Errorf("OpenDeposits limit %d: no error", limit)
			}
		}
		for what, p := range map[string]store.Deposit{
			"no id":           {AccountID: "a", Reference: "r", Created: at(2)},
			"no account":      {ID: "d2", Reference: "r", Created: at(2)},
			"no reference":    {ID: "d2", AccountID: "a", Created: at(2)},
			"no created time": {ID: "d2", AccountID: "a", Reference: "r"},
			"negative amount": {ID: "d2", AccountID: "a", Reference: "r", AmountUSDC: -1, Created: at(2)},
		} {
			if err := f.s.PutDeposit(f.ctx, p); err == nil {
				t.Errorf("PutDeposit with %s: no error", what)
			}
		}
		sameIDs(t, "ListDeposits after the refused puts", f.listDeposits("a", 10), "a/d1")
		ok := transfer("a", "d1", "sig1", 1_000_000, at(10))
		for what, change := range map[string]func(c *store.DepositCredit){
			"negative credits": func(c *store.DepositCredit) { c.Credits = -1 },
			"no USDC":          func(c *store.DepositCredit) { c.USDC = 0 },
			"negative USDC":    func(c *store.DepositCredit) { c.USDC = -1 },
			"no signature":     func(c *store.DepositCredit) { c.Signature = "" },
			"no intent":        func(c *store.DepositCredit) { c.DepositID = "" },
			"no account":       func(c *store.DepositCredit) { c.AccountID = "" },
			"no time":          func(c *store.DepositCredit) { c.At = time.Time{} },
		} {
			c := ok
			change(&c)
			if _, applied, err := f.s.CreditDeposit(f.ctx, c); err == nil || applied {
				t.Errorf("CreditDeposit with %s = %v, %v; want an error", what, applied, err)
			}
		}
		sameDeposit(t, "GetDeposit after the refused credits", f.getDeposit("a", "d1"), d)
		if a := f.getAccount("a"); a.Credits != 0 {
			t.Errorf("account credits %d after refused credits", a.Credits)
		}
		f.credit(ok, true)
	}},
	{"ConcurrentSameSignature", func(t *testing.T, f *fixture) {
		f.account("a", 0, 0)
		d := f.intent("a", "d1", at(1))
		const n = 10
		applied := make([]bool, n)
		errs := race(n, func(i int) (err error) {
			_, applied[i], err = f.s.CreditDeposit(f.ctx, transfer("a", "d1", "sig1", 3_000_000, at(10)))
			return err
		})
		tally(t, errs)
		if got := len(slices.DeleteFunc(applied, func(a bool) bool { return !a })); got != 1 {
			t.Errorf("%d of %d concurrent credits of one signature applied, want 1", got, n)
		}
		sameDeposit(t, "GetDeposit", f.getDeposit("a", "d1"), credited(d, 3_000_000, at(10), "sig1"))
		if a := f.getAccount("a"); a.Credits != 300 || a.TotalDeposited != 300 {
			t.Errorf("account credits %d, deposited %d; want 300, 300", a.Credits, a.TotalDeposited)
		}
		sameEntries(t, "entries", f.checkSums("a"), []store.Entry{depositEntry("a", "sig1", 3_000_000, at(10))})
		// The money totals count the deposit once too.
		if m, ok := f.s.(interface {
			MoneyTotals(context.Context) (store.Money, error)
		}); ok {
			if money, err := m.MoneyTotals(f.ctx); err != nil || money != (store.Money{Deposited: 300}) {
				t.Errorf("money totals %+v, %v; want 300 deposited", money, err)
			}
		}
	}},
	{"ConcurrentSignatures", func(t *testing.T, f *fixture) {
		f.account("a", 0, 0)
		f.intent("a", "d1", at(1))
		const n = 10
		var want []store.Entry
		for i := range n {
			want = append(want, depositEntry("a", fmt.Sprintf("sig%d", i), int64(i+1)*1_000_000, at(10)))
		}
		errs := race(n, func(i int) error {
			_, applied, err := f.s.CreditDeposit(f.ctx, transfer("a", "d1", fmt.Sprintf("sig%d", i), int64(i+1)*1_000_000, at(10)))
			if err == nil && !applied {
				err = fmt.Errorf("signature %d not applied", i)
			}
			return err
		})
		if ok, _ := tally(t, errs); ok != n {
			t.Fatalf("%d of %d applied", ok, n)
		}
		got := f.getDeposit("a", "d1")
		const usdc, credits = 55_000_000, 5_500 // 1 + 2 + … + 10 USDC
		if got.State != store.DepositCredited || got.CreditedUSDC != usdc || got.Credits != credits || len(got.Signatures) != n {
			t.Errorf("intent %+v: want credited, %d USDC units, %d credits, %d signatures", got, usdc, credits, n)
		}
		sigs := slices.Sorted(slices.Values(got.Signatures))
		for i, sig := range slices.Compact(sigs) {
			if want := fmt.Sprintf("sig%d", i); sig != want {
				t.Errorf("signatures %v: want sig0 to sig%d once each", got.Signatures, n-1)
				break
			}
		}
		if a := f.getAccount("a"); a.Credits != credits || a.TotalDeposited != credits {
			t.Errorf("account credits %d, deposited %d; want %d, %d", a.Credits, a.TotalDeposited, credits, credits)
		}
		sameEntries(t, "entries", f.checkSums("a"), want)
	}},
	{"Open", func(t *testing.T, f *fixture) {
		f.account("a", 0, 0)
		f.intent("a", "a1", at(100))
		f.intent("b", "b1", at(200))
		f.intent("c", "c1", at(300))
		f.intent("a", "a2", at(400))
		f.intent("b", "b2", at(500))
		f.intent("c", "c2", at(500))                                    // the same time as b2
		f.credit(transfer("a", "a1", "sig1", 1_000_000, at(600)), true) // credited intents stay open
		sameIDs(t, "OpenDeposits since the first", f.openDeposits(at(100), 10), "a/a1", "b/b1", "c/c1", "a/a2", "b/b2", "c/c2")
		sameIDs(t, "OpenDeposits since before the first", f.openDeposits(at(0), store.MaxDeposits), "a/a1", "b/b1", "c/c1", "a/a2", "b/b2", "c/c2")
		sameIDs(t, "OpenDeposits since the second", f.openDeposits(at(200), 10), "b/b1", "c/c1", "a/a2", "b/b2", "c/c2")
		sameIDs(t, "OpenDeposits since just after the second", f.openDeposits(at(201), 10), "c/c1", "a/a2", "b/b2", "c/c2")
		sameIDs(t, "OpenDeposits, 3", f.openDeposits(at(0), 3), "a/a1", "b/b1", "c/c1")
		sameIDs(t, "OpenDeposits since the third, 2", f.openDeposits(at(300), 2), "c/c1", "a/a2")
		sameIDs(t, "OpenDeposits since the last", f.openDeposits(at(500), 10), "b/b2", "c/c2")
		sameIDs(t, "OpenDeposits since after the last", f.openDeposits(at(501), 10))
		ds, err := f.s.OpenDeposits(f.ctx, at(100), 1)
		if err != nil || len(ds) != 1 {
			t.Fatalf("OpenDeposits = %d, %v", len(ds), err)
		}
		if ds[0].State != store.DepositCredited || ds[0].CreditedUSDC != 1_000_000 {
			t.Errorf("OpenDeposits: %+v, want a1 credited", ds[0])
		}
	}},
}
