package devnet_test

import (
	"context"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/devnet"
	"github.com/c0mpute/c0mpute/workerd/backend/ollama"
)

// TestLostDispatchIsRecovered: dispatch events come from stateless
// functions that can die between a store write and the message that
// follows it. A queued job must not wait out its queue deadline when the
// worker it needs is idle (the event was lost) or already assigned to it
// (the assignment message was lost).
func TestLostDispatchIsRecovered(t *testing.T) {
	for _, assignBehindItsBack := range []bool{false, true} {
		name := "idle worker, no dispatch event"
		if assignBehindItsBack {
			name = "assigned, no assignment message"
		}
		t.Run(name, func(t *testing.T) {
			limits := devnet.ScriptedLimits()
			limits.QueueWait = 4 * time.Second // well past the 500 ms recheck
			e := newEnv(t, envOptions{credits: 100, limits: &limits})
			g := newGate(t, sharedOllama(t).URL())
			e.startWorker(ollama.New(g.URL()), map[string]string{tinyModel: tinyModel})
			e.waitWorkers(tinyModel, 1)
			ctx := context.Background()

			// Job A keeps the only worker busy: its reply is held after the
			// first token until the test ends, so it cannot finish first.
			g.arm(holdAfterFirstToken)
			a := e.client.Chat.Completions.NewStreaming(ctx, chatParams("hello", 200))
			defer a.Close()
			if !a.Next() {
				t.Fatalf("job A: %v", a.Err())
			}
			aID := a.Current().ID

			// Job B queues behind it.
			type result struct {
				r   *openai.ChatCompletion
				err error
			}
			res := make(chan result, 1)
			go func() {
				r, err := e.client.Chat.Completions.New(ctx, chatParams("the cat", 5))
				res <- result{r, err}
			}()
			var b store.Job
			waitFor(t, "job B queued", func() bool {
				q, err := e.store.QueuedJobs(ctx, tinyModel, 2)
				if err != nil || len(q) != 1 {
					return false
				}
				b = q[0]
				return true
			})
			// Free the worker in the store alone: no dispatch event.
			freed, err := e.store.Fail(ctx, aID, "test", true, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if assignBehindItsBack {
				// A dispatcher that assigned B and died before telling B's
				// listener.
				if _, err := e.store.Assign(ctx, b.ID, freed.Worker, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			r := <-res
			if r.err != nil {
				t.Fatalf("job B: %v", r.err)
			}
			if r.r.ID != b.ID || r.r.Choices[0].Message.Content == "" {
				t.Errorf("job B answered %q as %s", r.r.Choices[0].Message.Content, r.r.ID)
			}
		})
	}
}
