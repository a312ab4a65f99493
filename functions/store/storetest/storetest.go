// Package storetest is the conformance suite every store.Store
// implementation must pass: the embedded bbolt store and the DynamoDB store
// run the same tests, so the gateway behaves the same on one machine and in
// AWS.
//
// The suite uses only the store.Store interface. It never sleeps to wait
// for a store, except for the one nonce test that needs real time to pass
// (UseNonce judges expiry by the store's clock).
package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
)

// Run runs the suite. open must return a fresh, empty store for the subtest
// it is given; Run closes it when the subtest ends. Subtests run in
// parallel, each on its own store.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	groups := []struct {
		name  string
		tests []test
	}{
		{"Account", accountTests},
		{"Secret", secretTests()},
		{"Key", keyTests},
		{"Nonce", nonceTests},
		{"Admit", admitTests},
		{"QueuedJobs", queueTests},
		{"Assign", assignTests},
		{"Requeue", requeueTests},
		{"Complete", completeTests},
		{"Ring", ringTests},
		{"Fail", failTests},
		{"Worker", workerTests},
		{"Listener", listenerTests},
		{"Stats", statsTests},
		{"Dispatch", dispatchTests},
		{"Reputation", reputationTests},
		{"Entries", entryTests},
		{"Deposit", depositTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.run(t, newFixture(t, open))
				})
			}
		})
	}
	t.Run("Close", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	})
}

type test struct {
	name string
	run  func(t *testing.T, f *fixture)
}

// base is the suite's reference time. Times are whole milliseconds so that
// a store keeping millisecond precision still round-trips them exactly.
var base = time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)

// window is the rate-limit window of base.
var window = base.Truncate(time.Minute)

// at returns base plus n milliseconds.
func at(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }

// fixture is one subtest's store and the helpers that seed it.
type fixture struct {
	t   *testing.T
	s   store.Store
	ctx context.Context
	mu  sync.Mutex
	seq int
}

func newFixture(t *testing.T, open func(t *testing.T) store.Store) *fixture {
	s := open(t)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &fixture{t: t, s: s, ctx: t.Context()}
}

// next returns a number unique within the fixture.
func (f *fixture) next() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	return f.seq
}

// account creates an account with a balance and an allowance.
func (f *fixture) account(id string, credits, allowance int64) store.Account {
	f.t.Helper()
	a := store.Account{ID: id, Wallet: "wallet-" + id, Credits: credits, FreeAllowanceLeft: allowance, CreatedAt: base}
	if err := f.s.CreateAccount(f.ctx, a); err != nil {
		f.t.Fatalf("CreateAccount %s: %v", id, err)
	}
	return a
}

// getAccount fetches an account that must exist.
func (f *fixture) getAccount(id string) store.Account {
	f.t.Helper()
	a, err := f.s.GetAccount(f.ctx, id)
	if err != nil {
		f.t.Fatalf("GetAccount %s: %v", id, err)
	}
	return a
}

// key stores a fresh active API key for the account and returns its hash.
func (f *fixture) key(accountID string) string {
	f.t.Helper()
	n := f.next()
	sec := store.Secret{
		Hash:      fmt.Sprintf("keyhash-%s-%04d", accountID, n),
		ID:        fmt.Sprintf("key%04d", n),
		AccountID: accountID,
		CreatedAt: at(n),
	}
	if err := f.s.PutAPIKey(f.ctx, sec); err != nil {
		f.t.Fatalf("PutAPIKey: %v", err)
	}
	return sec.Hash
}

// payer creates an account with a key: the usual client of Admit.
func (f *fixture) payer(id string, credits, allowance int64) (keyHash string) {
	f.t.Helper()
	f.account(id, credits, allowance)
	return f.key(id)
}

// request builds an AdmitRequest in the base window with a generous limit.
func request(keyHash, jobID, model string, price int64, created time.Time) store.AdmitRequest {
	return store.AdmitRequest{
		KeyHash: keyHash,
		Window:  window,
		Limit:   1000,
		Job: store.Job{
			ID:       jobID,
			Model:    model,
			Price:    price,
			Listener: "listener-1",
			Created:  created,
		},
	}
}

// admit admits a job that must be admitted.
func (f *fixture) admit(keyHash, jobID, model string, price int64, created time.Time) store.Job {
	f.t.Helper()
	a, err := f.s.Admit(f.ctx, request(keyHash, jobID, model, price, created))
	if err != nil {
		f.t.Fatalf("Admit %s: %v", jobID, err)
	}
	return a.Job
}

// worker connects and registers a worker.
func (f *fixture) worker(conn, accountID string, models ...string) store.Worker {
	f.t.Helper()
	f.putWorker(conn, accountID)
	w, err := f.s.RegisterWorker(f.ctx, conn, models, nil)
	if err != nil {
		f.t.Fatalf("RegisterWorker %s: %v", conn, err)
	}
	return w
}

// putWorker connects a worker without registering it.
func (f *fixture) putWorker(conn, accountID string) store.Worker {
	f.t.Helper()
	w := store.Worker{
		Conn:        conn,
		AccountID:   accountID,
		TokenHash:   "tokenhash-" + accountID,
		Pubkey:      "pubkey-" + conn,
		State:       store.WorkerIdle,
		ConnectedAt: base,
	}
	if err := f.s.PutWorker(f.ctx, w); err != nil {
		f.t.Fatalf("PutWorker %s: %v", conn, err)
	}
	w.Standing = store.StandingActive // a new identity on a new token
	return w
}

func (f *fixture) getJob(id string) store.Job {
	f.t.Helper()
	j, err := f.s.GetJob(f.ctx, id)
	if err != nil {
		f.t.Fatalf("GetJob %s: %v", id, err)
	}
	return j
}

func (f *fixture) getWorker(conn string) store.Worker {
	f.t.Helper()
	w, err := f.s.GetWorker(f.ctx, conn)
	if err != nil {
		f.t.Fatalf("GetWorker %s: %v", conn, err)
	}
	return w
}

func (f *fixture) assign(jobID, conn string, when time.Time) store.Job {
	f.t.Helper()
	j, err := f.s.Assign(f.ctx, jobID, conn, when)
	if err != nil {
		f.t.Fatalf("Assign %s to %s: %v", jobID, conn, err)
	}
	return j
}

// queued returns the ids of the model's queued jobs, in the store's order.
func (f *fixture) queued(model string) []string {
	f.t.Helper()
	jobs, err := f.s.QueuedJobs(f.ctx, model, 1000)
	if err != nil {
		f.t.Fatalf("QueuedJobs %s: %v", model, err)
	}
	ids := []string{}
	for _, j := range jobs {
		if j.State != store.JobQueued || j.Model != model {
			f.t.Errorf("QueuedJobs(%s) returned job %s in state %s for model %s", model, j.ID, j.State, j.Model)
		}
		ids = append(ids, j.ID)
	}
	return ids
}

// wantErr fails unless err matches want; a nil want means no error.
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Fatalf("%s: unexpected error %v", what, err)
	case want != nil && !errors.Is(err, want):
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

// race runs fn(0..n-1) in n goroutines released at once, so that they
// contend as hard as the machine allows, and returns their errors.
func race(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = fn(i)
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// tally counts errors by kind: nil, each of targets, and anything else.
// Unexpected errors fail the test.
func tally(t *testing.T, errs []error, targets ...error) (ok int, by map[error]int) {
	t.Helper()
	by = map[error]int{}
next:
	for _, err := range errs {
		if err == nil {
			ok++
			continue
		}
		for _, target := range targets {
			if errors.Is(err, target) {
				by[target]++
				continue next
			}
		}
		t.Errorf("unexpected error: %v", err)
	}
	return ok, by
}

// The norm functions make records comparable whatever a store does with
// time zones, monotonic readings and empty slices.

func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Round(0)
}

func normJob(j store.Job) store.Job {
	j.Created, j.Updated = normTime(j.Created), normTime(j.Updated)
	return j
}

func normAccount(a store.Account) store.Account {
	a.CreatedAt = normTime(a.CreatedAt)
	return a
}

func normSecret(s store.Secret) store.Secret {
	s.CreatedAt, s.RevokedAt = normTime(s.CreatedAt), normTime(s.RevokedAt)
	return s
}

func normWorker(w store.Worker) store.Worker {
	w.ConnectedAt = normTime(w.ConnectedAt)
	if len(w.Models) == 0 {
		w.Models = nil
	}
	if len(w.Caps) == 0 {
		w.Caps = nil
	}
	return w
}

func normReputation(r store.Reputation) store.Reputation {
	r.FirstSeen, r.LastSeen = normTime(r.FirstSeen), normTime(r.LastSeen)
	return r
}

func sameJob(t *testing.T, what string, got, want store.Job) {
	t.Helper()
	if g, w := normJob(got), normJob(want); g != w {
		t.Errorf("%s:\n got  %+v\n want %+v", what, g, w)
	}
}

func sameAccount(t *testing.T, what string, got, want store.Account) {
	t.Helper()
	if g, w := normAccount(got), normAccount(want); g != w {
		t.Errorf("%s:\n got  %+v\n want %+v", what, g, w)
	}
}

func sameWorker(t *testing.T, what string, got, want store.Worker) {
	t.Helper()
	g, w := normWorker(got), normWorker(want)
	if !slices.Equal(g.Models, w.Models) {
		t.Errorf("%s: models %v, want %v", what, g.Models, w.Models)
	}
	g.Models, w.Models = nil, nil
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s:\n got  %+v\n want %+v", what, g, w)
	}
}

func sameReputation(t *testing.T, what string, got, want store.Reputation) {
	t.Helper()
	if g, w := normReputation(got), normReputation(want); g != w {
		t.Errorf("%s:\n got  %+v\n want %+v", what, g, w)
	}
}

func conns(ws []store.Worker) []string {
	out := []string{}
	for _, w := range ws {
		out = append(out, w.Conn)
	}
	slices.Sort(out)
	return out
}
