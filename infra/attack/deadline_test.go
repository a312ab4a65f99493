package attack_test

// Finding 5 (deadlines: a reply delivered whole is charged; one that never
// ends is refunded once) and finding 9c (a silent worker loses its job).

import (
	"context"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/workerd/backend"
)

// trickle streams a token every interval until its context ends, as a long
// generation on a slow GPU does, and then returns the context's error, as a
// real backend does when its request is cancelled.
func trickle(interval time.Duration) script {
	return func(ctx context.Context, _ *oaiwire.ChatRequest, emit func(oaiwire.Delta) error) (backend.Result, error) {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if err := emit(oaiwire.Delta{Content: "tok "}); err != nil {
				return backend.Result{}, err
			}
			select {
			case <-ctx.Done():
				return backend.Result{}, ctx.Err()
			case <-t.C:
			}
		}
	}
}

// shortJob is a job deadline of a few seconds.
func shortJob(l *api.Limits) { l.Job = 3 * time.Second; l.FirstToken = 2 * time.Second }

// TestDeadlineHonestSlowWorker is finding 5: an honest worker whose
// generation would run past the job deadline. Before, the gateway cut the
// stream at the deadline with an error event, refunded the user and paid
// the worker nothing for everything it had delivered. Now the worker ends
// the reply before the deadline with finish_reason "length", and the job
// is charged and paid.
func TestDeadlineHonestSlowWorker(t *testing.T) {
	e := newEnv(t, options{limits: shortJob})
	user, honestAcct := e.newAccount("user", 1000), e.newAccount("honest", 0)
	e.honestWorker(honestAcct, trickle(100*time.Millisecond))
	r := e.chat(user.apiKey, chatBody("a long story", true))
	if !r.ok() || r.Finish != "length" || r.Content == "" || !r.Done {
		t.Errorf("reply: %s; want a complete stream ending with finish_reason \"length\" and [DONE]", r)
	}
	if r.ID == "" {
		t.Fatal("no completion id")
	}
	e.expectCharged(r.ID)
	e.expectEarned(honestAcct, earning)
	e.expectCredits(user, 1000-price)
}

// TestDeadlineHostileStreamsPast: a worker that keeps streaming past the
// deadline and never sends done. The client gets exactly one error event,
// the job is refunded once (chunks arriving after the deadline change
// nothing), and the worker earns nothing.
func TestDeadlineHostileStreamsPast(t *testing.T) {
	e := newEnv(t, options{limits: shortJob})
	user, mallory := e.newAccount("user", 1000), e.newAccount("mallory", 0)
	h := e.hostileWorker(mallory)
	c := e.start(user.apiKey, chatBody("never ending", true))
	j := h.nextJob()
	// Stream until a second after the gateway gave up on the job (the
	// reply ended), whatever grace it allows past the deadline.
	stop := make(chan struct{})
	streamed := make(chan int)
	go func() {
		n := 0
		for seq := int64(0); !h.isClosed(); seq++ {
			if h.chunk(j, seq, "tok ") != nil {
				break
			}
			n++
			select {
			case <-stop:
				streamed <- n
				return
			case <-time.After(100 * time.Millisecond): // pacing, not an assertion
			}
		}
		<-stop
		streamed <- n
	}()
	r := c.wait(t)
	ended := time.Now()
	time.Sleep(time.Second) // the worker goes on streaming: pacing, not an assertion
	close(stop)
	n := <-streamed
	t.Logf("the worker streamed %d chunks; the reply ended %s after the deadline", n, ended.Sub(j.Deadline).Round(100*time.Millisecond))
	if len(r.Errors) != 1 || r.Done || r.Finish != "" {
		t.Errorf("reply: %s; want exactly one error event, no finish and no [DONE]", r)
	}
	e.expectRefunded(j.Job)
	e.expectCredits(user, 1000)
	e.expectEarned(mallory, 0)
}

// TestSilentWorker is finding 9c: a worker registers and never answers the
// job it is given. After the first-token timeout the job moves to an honest
// worker and the user gets a normal reply, charged once; the silent worker
// is cut off.
func TestSilentWorker(t *testing.T) {
	e := newEnv(t, options{limits: func(l *api.Limits) { l.FirstToken = 3 * time.Second; l.QueueWait = 8 * time.Second }})
	user, mallory, honestAcct := e.newAccount("user", 1000), e.newAccount("mallory", 0), e.newAccount("honest", 0)
	h := e.hostileWorker(mallory)
	c := e.start(user.apiKey, chatBody("anyone there?", true))
	j := h.nextJob() // and say nothing
	e.honestWorker(honestAcct, words("Hello", " world"))
	r := c.wait(t)
	if !r.ok() || r.Content != "Hello world" {
		t.Errorf("reply: %s; want the honest worker's reply", r)
	}
	job := e.expectCharged(j.Job)
	if job.WorkerAccount != honestAcct.id {
		t.Errorf("job served by account %q; want the honest worker's", job.WorkerAccount)
	}
	e.expectCredits(user, 1000-price)
	e.expectEarned(honestAcct, earning)
	e.expectEarned(mallory, 0)
	if !h.waitClosed(10 * time.Second) {
		t.Errorf("the silent worker is still connected")
	}
}

// TestStaleTicketAfterRequeue: a ticket outlives a requeue — the worker the
// job first went to still holds a ticket that verifies for its own
// connection. After the silent worker's job has moved to an honest one,
// the silent worker sends a chunk and a done for it with that ticket.
// Neither may reach the client or end the job: the user gets the honest
// reply, charged once, and the stale worker earns nothing.
func TestStaleTicketAfterRequeue(t *testing.T) {
	e := newEnv(t, options{limits: func(l *api.Limits) { l.FirstToken = 3 * time.Second; l.QueueWait = 8 * time.Second }})
	user, mallory, honestAcct := e.newAccount("user", 1000), e.newAccount("mallory", 0), e.newAccount("honest", 0)
	h := e.hostileWorker(mallory)
	c := e.start(user.apiKey, chatBody("who answers?", true))
	j := h.nextJob() // silent until the job has moved
	gate := make(chan struct{})
	w := e.honestWorker(honestAcct, gated(gate, "Hello", " world"))
	w.waitStarted(t)
	chunkErr, doneErr := h.chunk(j, 0, "INJECTED"), h.done(j, 1, 1)
	t.Logf("the stale worker's chunk and done: %v, %v (connection closed: %v)", chunkErr, doneErr, h.isClosed())
	close(gate)
	r := c.wait(t)
	if !r.ok() || r.Content != "Hello world" || r.Finish != "stop" {
		t.Errorf("reply: %s; want the honest worker's whole reply", r)
	}
	job := e.expectCharged(j.Job)
	if job.WorkerAccount != honestAcct.id {
		t.Errorf("job served by account %q; want the honest worker's", job.WorkerAccount)
	}
	e.expectCredits(user, 1000-price)
	e.expectEarned(honestAcct, earning)
	e.expectEarned(mallory, 0)
}
