package dispatch

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
)

// pausingStore holds the first IdleWorkers read that finds no worker until
// released: a claim caught between "no idle worker" and giving up.
type pausingStore struct {
	*embedded.Store
	once    sync.Once
	paused  chan struct{} // closed when the read is held
	release chan struct{}
	assigns sync.Map // job id → how many Assign writes it got
}

func (p *pausingStore) IdleWorkers(ctx context.Context, model string) ([]store.Worker, error) {
	ws, err := p.Store.IdleWorkers(ctx, model)
	if err == nil && len(ws) == 0 {
		p.once.Do(func() {
			close(p.paused)
			<-p.release
		})
	}
	return ws, err
}

func (p *pausingStore) Assign(ctx context.Context, jobID, worker string, at time.Time) (store.Job, error) {
	n, _ := p.assigns.LoadOrStore(jobID, new(int))
	*n.(*int)++
	return p.Store.Assign(ctx, jobID, worker, at)
}

// TestDispatchLeavesClaimedJobs: a Dispatch that runs while this
// dispatcher's Assign of a queued job is in flight leaves the job to it
// (no racing store write), and the claim, which had found no idle worker,
// looks again and takes the worker that turned idle.
func TestDispatchLeavesClaimedJobs(t *testing.T) {
	ctx := context.Background()
	es, err := embedded.Open(filepath.Join(t.TempDir(), "c0.db"), embedded.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	st := &pausingStore{Store: es, paused: make(chan struct{}), release: make(chan struct{})}
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
	must(st.PutWorker(ctx, store.Worker{Conn: "w1", AccountID: "a"}))
	_, err = st.RegisterWorker(ctx, "w1", []string{"m"}, nil)
	must(err)
	admit := func(id string) store.Job {
		t.Helper()
		adm, err := st.Admit(ctx, store.AdmitRequest{KeyHash: "h", Window: now, Limit: 100,
			Job: store.Job{ID: id, Model: "m", Price: 1, Listener: "l", Created: now}})
		must(err)
		return adm.Job
	}
	busy, ok, err := d.Assign(ctx, admit("busy"))
	if err != nil || !ok {
		t.Fatalf("first job: ok %v, err %v", ok, err)
	}

	// The claim of "waiting" finds no idle worker and is held there.
	type result struct {
		job store.Job
		ok  bool
		err error
	}
	done := make(chan result, 1)
	waiting := admit("waiting")
	go func() {
		j, ok, err := d.Assign(ctx, waiting)
		done <- result{j, ok, err}
	}()
	<-st.paused

	// The worker finishes; the completion's Dispatch sees "waiting"
	// queued but leaves it to its claimer.
	must(st.Complete(ctx, store.Completion{JobID: busy.ID, Worker: "w1", At: now}))
	d.Released("w1", 0)
	if n, err := d.Dispatch(ctx, []string{"m"}); err != nil || n != 0 {
		t.Fatalf("Dispatch: %d assigned, err %v; want the claimed job left alone", n, err)
	}
	if n, ok := st.assigns.Load("waiting"); ok {
		t.Fatalf("Dispatch wrote %d claims of a job being claimed", *n.(*int))
	}
	close(st.release)
	r := <-done
	if r.err != nil || !r.ok || r.job.Worker != "w1" {
		t.Fatalf("claim after the Dispatch: %+v; want it on w1", r)
	}

	// With no claim running, Dispatch assigns a queued job itself.
	must(st.Complete(ctx, store.Completion{JobID: "waiting", Worker: "w1", At: now}))
	d.Released("w1", 0)
	admit("queued")
	if n, err := d.Dispatch(ctx, []string{"m"}); err != nil || n != 1 {
		t.Fatalf("Dispatch of an unclaimed job: %d assigned, err %v; want 1", n, err)
	}
	if len(d.claims.jobs) != 0 {
		t.Fatalf("claims left behind: %v", d.claims.jobs)
	}
}
