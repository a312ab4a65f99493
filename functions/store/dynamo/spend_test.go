package dynamo_test

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
)

// TestKeySpendAcrossProcesses drives one limited key from two processes,
// each building its writes to the key from what it last saw of it: a stale
// view costs one more transaction, never a wrong answer, and a warm one
// none.
func TestKeySpendAcrossProcesses(t *testing.T) {
	c := dynamotest.Client(t)
	table := dynamotest.Table(t, c)
	ca, cb := dynamotest.NewCounting(c), dynamotest.NewCounting(c)
	a, b := dynamo.New(ca, table), dynamo.New(cb, table)
	if err := a.CreateAccount(bg, store.Account{ID: "acct", Credits: 1000, CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	key := store.Secret{Hash: "kh", ID: "k1", AccountID: "acct", CreatedAt: t0, Limit: 30, LimitReset: store.ResetDaily}
	if err := a.PutAPIKey(bg, key); err != nil {
		t.Fatal(err)
	}
	n := 0
	admit := func(s *dynamo.Store, price int64, created time.Time) error {
		n++
		r := req(fmt.Sprintf("j%d", n))
		r.Job.AccountID, r.Job.Price, r.Job.Created = "acct", price, created
		_, err := s.Admit(bg, r)
		return err
	}
	step := func(what string, err, wantErr error, counts *dynamotest.Counting, want map[string]int) {
		t.Helper()
		if (err == nil) != (wantErr == nil) || !errors.Is(err, wantErr) {
			t.Fatalf("%s: error %v, want %v", what, err, wantErr)
		}
		if got := counts.Take(); !maps.Equal(got, want) {
			t.Errorf("%s: calls %v, want %v", what, got, want)
		}
	}
	usage := func(what string, u, pu int64, period string) {
		t.Helper()
		k, err := a.GetAPIKey(bg, "kh")
		if err != nil {
			t.Fatal(err)
		}
		if k.Usage != u || k.PeriodUsage != pu || k.Period != period {
			t.Errorf("%s: usage %d, period usage %d in %q; want %d, %d in %q", what, k.Usage, k.PeriodUsage, k.Period, u, pu, period)
		}
		ca.Take()
	}
	ca.Take()
	one, two := map[string]int{"TransactWriteItems": 1}, map[string]int{"TransactWriteItems": 2}

	// b has never seen the key: it takes it for an unlimited one, and the
	// failed condition tells it otherwise.
	step("b's first admit", admit(b, 10, t0), nil, cb, two)
	// a knows the limit, but not that the key has started a period.
	step("a's first admit", admit(a, 10, t0), nil, ca, two)
	step("a, warm", admit(a, 5, t0), nil, ca, one)
	usage("three jobs", 25, 25, "2031-03-14")

	// b lowers the limit; a, still seeing the old one, is refused
	// exactly all the same.
	if _, err := b.UpdateAPIKey(bg, "acct", "k1", store.KeyPatch{Limit: new(int64(20))}); err != nil {
		t.Fatal(err)
	}
	cb.Take()
	step("a over the lowered limit", admit(a, 1, t0), store.ErrKeyLimit, ca, one)
	step("a refused again, warm", admit(a, 1, t0), store.ErrKeyLimit, ca, one)

	// The next day: a starts the period; b, still in the old one, is
	// told, and counts in the new one.
	next := t0.Add(24 * time.Hour)
	step("a, the next day", admit(a, 15, next), nil, ca, one)
	step("b, the next day", admit(b, 5, next), nil, cb, two)
	step("b, full", admit(b, 1, next), store.ErrKeyLimit, cb, one)
	usage("the next day", 45, 20, "2031-03-15")

	// A refund from a process that never saw the key.
	fresh := dynamotest.NewCounting(c)
	if _, err := dynamo.New(fresh, table).Fail(bg, "j6", "worker_lost", true, next); err != nil { // a's 15
		t.Fatal(err)
	}
	if got := fresh.Take(); got["TransactWriteItems"] != 2 || got["GetItem JOB"] != 1 {
		t.Errorf("refund from a fresh process: calls %v, want the job read and 2 transactions", got)
	}
	usage("refunded", 30, 5, "2031-03-15")
}
