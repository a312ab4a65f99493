package attack_test

// Finding 10: a worker whose connection is gone while its store record
// still says idle (its $disconnect has not been handled yet) must not burn
// a job's attempts.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/store"
)

// slowDisconnects is the gateway's store with the first DeleteWorker of
// chosen connections held until the test releases it: the window between a
// connection's end and its record's removal, made as long as the test
// needs. It also records successful assignments.
type slowDisconnects struct {
	store.Store

	mu      sync.Mutex
	held    map[string]chan struct{} // conn → closed when the call arrives
	release chan struct{}
	assigns []assignment
}

type assignment struct{ job, worker string }

func newSlowDisconnects(s store.Store) *slowDisconnects {
	return &slowDisconnects{Store: s, held: map[string]chan struct{}{}, release: make(chan struct{})}
}

// hold makes the first DeleteWorker of conn wait for release; the returned
// channel closes when that call arrives.
func (s *slowDisconnects) hold(conn string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	arrived := make(chan struct{})
	s.held[conn] = arrived
	return arrived
}

// releaseAll lets held calls through (idempotent).
func (s *slowDisconnects) releaseAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.release:
	default:
		close(s.release)
	}
}

func (s *slowDisconnects) DeleteWorker(ctx context.Context, conn string) (store.Worker, error) {
	s.mu.Lock()
	arrived, ok := s.held[conn]
	delete(s.held, conn)
	s.mu.Unlock()
	if ok {
		close(arrived)
		select {
		case <-s.release:
		case <-ctx.Done():
			return store.Worker{}, ctx.Err()
		}
	}
	return s.Store.DeleteWorker(ctx, conn)
}

func (s *slowDisconnects) Assign(ctx context.Context, jobID, worker string, at time.Time) (store.Job, error) {
	j, err := s.Store.Assign(ctx, jobID, worker, at)
	if err == nil {
		s.mu.Lock()
		s.assigns = append(s.assigns, assignment{jobID, worker})
		s.mu.Unlock()
	}
	return j, err
}

func (s *slowDisconnects) assignedTo(worker string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.assigns {
		if a.worker == worker {
			return a.job, true
		}
	}
	return "", false
}

// TestRetryOntoDeadWorker is finding 10: with MaxAttempts = 1, a job first
// handed to a worker whose connection is already gone (its record still
// idle) must still complete on a live worker. Before, the failed post to
// the dead connection counted as the job's one attempt and the user got
// an error (refunded) although a live worker came.
func TestRetryOntoDeadWorker(t *testing.T) {
	var slow *slowDisconnects
	e := newEnv(t, options{
		limits: func(l *api.Limits) { l.MaxAttempts = 1; l.QueueWait = 5 * time.Second },
		wrap:   func(s store.Store) store.Store { slow = newSlowDisconnects(s); return slow },
	})
	t.Cleanup(slow.releaseAll)
	user, mallory, honestAcct := e.newAccount("user", 1000), e.newAccount("mallory", 0), e.newAccount("honest", 0)
	dead := e.hostileWorker(mallory)
	arrived := slow.hold(dead.conn)
	dead.ws.CloseNow()
	select {
	case <-arrived:
	case <-time.After(waitLimit):
		t.Fatal("the dead worker's $disconnect never reached the store")
	}
	if w, err := e.store.GetWorker(context.Background(), dead.conn); err != nil || w.State != store.WorkerIdle {
		t.Fatalf("the dead worker's record: %+v, %v; the test needs it idle", w, err)
	}
	c := e.start(user.apiKey, chatBody("retry me", true))
	var jobID string
	e.waitFor("the job to be handed to the dead worker", func() bool {
		var ok bool
		jobID, ok = slow.assignedTo(dead.conn)
		return ok
	})
	e.honestWorker(honestAcct, words("Hello", " world"))
	r := c.wait(t)
	if !r.ok() || r.Content != "Hello world" {
		t.Errorf("reply: %s; want the live worker's reply", r)
	}
	j := e.settled(jobID)
	if j.State != store.JobDone || j.Refunded || j.WorkerAccount != honestAcct.id {
		t.Errorf("job: state %s refunded %v served by %q (reason %q); want done on the honest worker", j.State, j.Refunded, j.WorkerAccount, j.FailReason)
	}
	e.expectCredits(user, 1000-price)
	e.expectEarned(honestAcct, earning)
}
