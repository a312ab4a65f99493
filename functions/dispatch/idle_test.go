package dispatch

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
)

// countingStore counts the idle-worker reads dispatch makes.
type countingStore struct {
	*embedded.Store
	idleReads atomic.Int64
}

func (c *countingStore) IdleWorkers(ctx context.Context, model string) ([]store.Worker, error) {
	c.idleReads.Add(1)
	return c.Store.IdleWorkers(ctx, model)
}

type nopPoster struct{}

func (nopPoster) Post(context.Context, string, []byte) error { return nil }

func TestIdleCache(t *testing.T) {
	ctx := context.Background()
	es, err := embedded.Open(filepath.Join(t.TempDir(), "c0.db"), embedded.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	st := &countingStore{Store: es}
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	d := New(st, nopPoster{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	d.now = func() time.Time { return now }

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.CreateAccount(ctx, store.Account{ID: "a", Credits: 100}))
	must(st.PutAPIKey(ctx, store.Secret{Hash: "h", ID: "k", AccountID: "a", CreatedAt: now}))
	for _, c := range []string{"w1", "w2"} {
		must(st.PutWorker(ctx, store.Worker{Conn: c, AccountID: "a"}))
		_, err := st.RegisterWorker(ctx, c, []string{"m"}, nil)
		must(err)
	}
	admit := func(id string) store.Job {
		t.Helper()
		adm, err := st.Admit(ctx, store.AdmitRequest{KeyHash: "h", Window: now, Limit: 100,
			Job: store.Job{ID: id, Model: "m", Price: 1, Listener: "l", Created: now}})
		must(err)
		return adm.Job
	}
	assign := func(id string) store.Job {
		t.Helper()
		j, ok, err := d.Assign(ctx, admit(id))
		if err != nil || !ok {
			t.Fatalf("Assign %s: ok %v, err %v", id, ok, err)
		}
		return j
	}
	reads := func(want int64, when string) {
		t.Helper()
		if got := st.idleReads.Load(); got != want {
			t.Fatalf("%s: %d idle-worker reads, want %d", when, got, want)
		}
	}

	first := assign("j1")
	reads(1, "first job")
	second := assign("j2")
	reads(1, "second job, other worker from the cached list")
	if first.Worker == second.Worker {
		t.Fatalf("both jobs on %s", first.Worker)
	}

	// Both busy: the cached list is empty, so the store is asked, and the
	// job stays queued.
	if _, ok, err := d.Assign(ctx, admit("j3")); ok || err != nil {
		t.Fatalf("third job: ok %v, err %v; want queued", ok, err)
	}
	reads(2, "no idle worker")

	// A completion puts the worker back in the cache: no read.
	must(st.Complete(ctx, store.Completion{JobID: "j1", Worker: first.Worker, At: now}))
	d.Released(first.Worker, 0)
	if j := assign("j4"); j.Worker != first.Worker {
		t.Fatalf("j4 on %s, want %s", j.Worker, first.Worker)
	}
	reads(2, "after release") // the empty list read for j3 is still fresh, and release refilled it

	// A stale cache entry (the worker was taken elsewhere) costs a lost
	// claim, then a fresh read finds the real idle worker.
	must(st.Complete(ctx, store.Completion{JobID: "j2", Worker: second.Worker, At: now}))
	d.Released(second.Worker, 0)
	if _, err := st.Assign(ctx, "j3", second.Worker, now); err != nil {
		t.Fatal(err) // another dispatcher takes it
	}
	must(st.Complete(ctx, store.Completion{JobID: "j4", Worker: first.Worker, At: now}))
	if j := assign("j5"); j.Worker != first.Worker {
		t.Fatalf("j5 on %s, want %s (the cache still lists %s as idle)", j.Worker, first.Worker, second.Worker)
	}

	// After idleTTL the list is read again.
	now = now.Add(idleTTL + time.Second)
	before := st.idleReads.Load()
	must(st.Complete(ctx, store.Completion{JobID: "j5", Worker: first.Worker, At: now}))
	assign("j6")
	reads(before+1, "after the TTL")
}
