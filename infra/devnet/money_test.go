package devnet_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/c0mpute/c0mpute/functions/store"
)

// TestConcurrentDebits: 200 concurrent requests against a balance that pays
// for exactly 10 → exactly 10 served, 190 refused with 402, balance exactly
// 0, and nothing refunded (every admitted job completed).
func TestConcurrentDebits(t *testing.T) {
	e := newEnv(t, envOptions{credits: 100})
	e.ollamaWorker()
	ctx := context.Background()
	var served, refused, other atomic.Int64
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			_, err := e.client.Chat.Completions.New(ctx, chatParams("hello", 4))
			var apiErr *openai.Error
			switch {
			case err == nil:
				served.Add(1)
			case errors.As(err, &apiErr) && apiErr.StatusCode == 402:
				refused.Add(1)
			default:
				other.Add(1)
				t.Errorf("unexpected: %v", err)
			}
		})
	}
	wg.Wait()
	if served.Load() != 10 || refused.Load() != 190 || other.Load() != 0 {
		t.Errorf("served %d, refused %d, other %d; want 10, 190, 0", served.Load(), refused.Load(), other.Load())
	}
	a := e.balance()
	if a.Credits != 0 || a.TotalSpent != 100 {
		t.Errorf("credits %d spent %d; want 0 and 100", a.Credits, a.TotalSpent)
	}
	st, err := e.store.Stats(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.JobsCompleted != 10 {
		t.Errorf("jobs completed %d", st.JobsCompleted)
	}
}

// TestWorkerKilledMidStream kills the connection of the worker holding a job
// at a random moment, 50 times, with three workers serving. Every job must
// either complete (it moved to another worker before any token reached the
// client) or end with one error event and exactly one refund; in the end
// the ledger balances to the credit.
func TestWorkerKilledMidStream(t *testing.T) {
	const rounds, price, credits = 50, 10, 10_000
	e := newEnv(t, envOptions{credits: credits})
	srv := sharedOllama(t)
	for range 3 {
		e.startWorker(ollamaBackend(srv), map[string]string{tinyModel: tinyModel})
	}
	e.waitWorkers(tinyModel, 3)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))

	var completed, failedWithEvent int
	var jobIDs []string
	for i := range rounds {
		stream := i%2 == 0
		p := chatParams("the cat sat on the mat", 48)
		killAfter := time.Duration(rng.IntN(40)) * time.Millisecond

		var id, text string
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			if stream {
				s := e.client.Chat.Completions.NewStreaming(ctx, p)
				var b strings.Builder
				for s.Next() {
					c := s.Current()
					id = c.ID
					if len(c.Choices) > 0 {
						b.WriteString(c.Choices[0].Delta.Content)
					}
				}
				text, err = b.String(), s.Err()
			} else {
				var r *openai.ChatCompletion
				r, err = e.client.Chat.Completions.New(ctx, p)
				if r != nil {
					id, text = r.ID, r.Choices[0].Message.Content
				}
			}
		}()
		time.Sleep(killAfter)
		e.killBusyWorker()
		<-done
		switch {
		case err == nil:
			completed++
			if text == "" {
				t.Errorf("round %d: completed with empty text", i)
			}
		case stream && id != "":
			failedWithEvent++ // tokens reached the client, then an error event
		default:
			t.Errorf("round %d (stream=%v): %v", i, stream, err)
		}
		if id != "" {
			jobIDs = append(jobIDs, id)
		}
	}
	t.Logf("%d completed on a worker, %d ended with an error event", completed, failedWithEvent)

	// Let settlement finish, then audit every job and the balance.
	time.Sleep(100 * time.Millisecond)
	var done, refunded int64
	for _, id := range jobIDs {
		j, err := e.store.GetJob(ctx, id)
		if err != nil {
			t.Fatalf("job %s: %v", id, err)
		}
		switch {
		case j.State == store.JobDone && !j.Refunded:
			done++
		case j.State == store.JobFailed && j.Refunded:
			refunded++
		default:
			t.Errorf("job %s: state %s refunded %v", id, j.State, j.Refunded)
		}
	}
	a := e.balance()
	if want := int64(credits) - done*price; a.Credits != want || a.TotalSpent != done*price {
		t.Errorf("credits %d spent %d; want %d and %d (done %d, refunded %d)", a.Credits, a.TotalSpent, want, done*price, done, refunded)
	}
	if int(done) != completed || int(refunded) != failedWithEvent {
		t.Errorf("store says %d done %d refunded; clients saw %d completed %d failed", done, refunded, completed, failedWithEvent)
	}
}

// killBusyWorker drops the relay connection of every busy worker, as a
// network failure or a crash would.
func (e *env) killBusyWorker() {
	ws, err := e.store.Workers(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	for _, w := range ws {
		if w.State == store.WorkerBusy {
			if err := e.stack.Conns.Delete(context.Background(), w.Conn); err != nil {
				e.t.Errorf("kill %s: %v", w.Conn, err)
			}
		}
	}
}
