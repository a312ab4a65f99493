package attack_test

// Found in review: a worker a job moved away from still holds a valid
// ticket for it. It must not be able to fill the job's buffers (and have
// the bounds blame the job's new, honest worker), nor take the job back.

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/devnet"
)

// TestMovedAwayWorkerFloods: Mallory's worker takes her job, fails it
// before any token (so it moves to an honest worker, and is not handed to
// Mallory's worker again), then floods the job with 100 KB chunks under its
// old ticket while the honest worker serves it. Before, the flood counted
// toward the job's mailbox, the overflow was blamed on the honest worker,
// which was cut off unpaid, and the job was refunded after the client had
// the reply. Now the moved-away worker's messages are dropped: the honest
// reply arrives whole, charged, the honest worker paid and still
// connected.
func TestMovedAwayWorkerFloods(t *testing.T) {
	// The flood shares the listener's connection with the honest
	// worker's messages and delays them while it lasts (seconds on a
	// loaded machine): the limits leave room for that, so that what is
	// tested is where the flood goes, not how fast it drains.
	e := newEnv(t, options{limits: func(l *api.Limits) { l.FirstToken = time.Minute; l.Job = 2 * time.Minute }})
	mallory, honestAcct := e.newAccount("mallory", 1000), e.newAccount("honest", 0)
	h := e.hostileWorker(mallory)
	c := e.start(mallory.apiKey, chatBody("serve me twice", true))
	j := h.nextJob()

	gate := make(chan struct{})
	hw := e.honestWorker(honestAcct, gated(gate, "first", " second", " third"))
	if err := h.send(&relaymsg.Fail{Job: j.Job, To: j.ReplyTo, Seq: 0, Code: "backend_error", Ticket: j.Ticket}); err != nil {
		t.Fatalf("fail: %v", err)
	}
	hw.waitStarted(t)
	big := strings.Repeat("x", 100<<10)
	for i := range 120 {
		if err := h.chunk(j, int64(1+i), big); err != nil {
			break // cut off: also fine, as long as the honest job is untouched
		}
	}
	close(gate)
	r := c.wait(t)
	if !r.ok() || r.Content != "first second third" || !r.Done {
		t.Errorf("reply: %s; want the honest worker's whole reply", r)
	}
	job := e.expectCharged(r.ID)
	if job.WorkerAccount != honestAcct.id {
		t.Errorf("the job was completed by %q, want the honest worker", job.WorkerAccount)
	}
	e.expectEarned(honestAcct, earning)
	e.expectEarned(mallory, 0)
	for _, w := range e.workersOf(honestAcct) {
		if !w.Registered {
			t.Errorf("the honest worker %s is no longer registered", w.Conn)
		}
	}
	if n := len(e.workersOf(honestAcct)); n != 1 {
		t.Errorf("the honest worker has %d connections, want 1 (it was cut off?)", n)
	}
	if got := e.job(r.ID); got.State != store.JobDone {
		t.Errorf("job %s, want done", got.State)
	}
}

// TestMovedJobAnsweredBeforeThePostReturns: a job moves to a worker that
// answers it whole before the gateway's post of the job to it returns (a
// tiny model is that fast; a loaded machine or a slow management API makes
// the post that slow). Before, the job's mailbox went on expecting the
// worker the job moved away from until the post returned, dropped the whole
// reply, and the job waited out its first-token timeout, cut the worker off
// and failed (TestWorkerKilledMidStream, now and then). Now the reply
// arrives whole and charged, and the worker is paid.
func TestMovedJobAnsweredBeforeThePostReturns(t *testing.T) {
	late := &latePosts{release: make(chan struct{})}
	e := newEnv(t, options{config: func(c *devnet.Config) {
		c.APIConnections = func(inner api.Connections) api.Connections { late.Connections = inner; return late }
	}})
	user, firstAcct, nextAcct := e.newAccount("user", 1000), e.newAccount("first", 0), e.newAccount("next", 0)
	first := e.hostileWorker(firstAcct)
	c := e.start(user.apiKey, chatBody("answer at once", false))
	j := first.nextJob()
	next := e.hostileWorker(nextAcct)
	late.hold(next.conn)
	// Lost before any token: the job moves to the next worker.
	first.ws.CloseNow()
	moved := next.nextJob()
	if moved.Job != j.Job {
		t.Fatalf("the next worker got job %s, want the moved %s", moved.Job, j.Job)
	}
	next.serve(moved, 2, "fast", " reply")
	// The relay handles a connection's messages in order: the answer to
	// this hello comes once the reply went on to the gateway's listener.
	if err := next.send(&relaymsg.Hello{}); err != nil {
		t.Fatalf("hello: %v", err)
	}
	if er, _ := next.waitError(waitLimit); er == nil || er.Code != "forbidden" {
		t.Fatalf("hello: %+v, want forbidden", er)
	}
	close(late.release)
	r := c.wait(t)
	if !r.ok() || r.Content != "fast reply" {
		t.Fatalf("reply: %s; want the next worker's whole reply", r)
	}
	job := e.expectCharged(r.ID)
	if job.WorkerAccount != nextAcct.id || job.Attempts != 2 {
		t.Errorf("job completed by %q at attempt %d, want the next worker at the second", job.WorkerAccount, job.Attempts)
	}
	e.expectEarned(nextAcct, earning)
	e.expectEarned(firstAcct, 0)
}

// latePosts wraps the API's connections: its posts of a job to the held
// connection return only once release is closed, after the job was
// delivered.
type latePosts struct {
	api.Connections
	release chan struct{}

	mu   sync.Mutex
	conn string
}

func (l *latePosts) hold(conn string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conn = conn
}

func (l *latePosts) Post(ctx context.Context, conn string, data []byte) error {
	if err := l.Connections.Post(ctx, conn, data); err != nil {
		return err
	}
	l.mu.Lock()
	held := conn == l.conn && relaymsg.PeekType(data) == relaymsg.TypeJob
	l.mu.Unlock()
	if held {
		select {
		case <-l.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
