package ringmember

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/backend/backendtest"
	"github.com/c0mpute/c0mpute/workerd/backend/builtin"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/stagenet"
)

// waitFor waits until cond holds, checking it every few milliseconds, and
// fails the test if it does not within waitLimit.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", waitLimit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCutShortSettles: a job whose context ends mid-reply (the agent's
// reply deadline) returns the context's cause, the usage so far and the
// ring's account, closed under a context of the driver's own: the
// receipts cover every position the ring ran and settle with
// shard.Verify; the ring then serves the next job as before.
func TestCutShortSettles(t *testing.T) {
	m := loadModel(t, "qwen2-q8_0", modelOptions("qwen2", testmodel.Q8_0))
	errDeadline := errors.New("test: the reply's deadline came")
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d-stages", n), func(t *testing.T) {
			tr := startInProcess(t, m, n)
			job, at := tr.ringJob(t)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			c := chatResult{job: job, at: at}
			res, done, err := tr.driver.Chat(ctx, job, greedy(prompts[0], 24, true), func(d oaiwire.Delta) error {
				if c.Deltas = append(c.Deltas, d); len(c.Deltas) == 3 {
					cancel(errDeadline)
				}
				return nil
			})
			if !errors.Is(err, errDeadline) || done == nil {
				t.Fatalf("chat cut short: %v, account %v; want the deadline's cause and an account", err, done)
			}
			c.Result, c.done = res, done
			if res.FinishReason != oaiwire.FinishLength || res.Usage.CompletionTokens < 3 || res.Usage.TotalTokens != res.Usage.PromptTokens+res.Usage.CompletionTokens {
				t.Fatalf("usage so far %+v, finish %q: want length and at least the 3 tokens emitted", res.Usage, res.FinishReason)
			}
			tr.verify(t, c)
			req := greedy(prompts[0], 6, false)
			if diff := same(tr.chat(t, req), m.reference(req)); diff != "" {
				t.Fatalf("the next job: %s", diff)
			}
		})
	}
}

// TestCutShortWhileAwaiting: a job whose context ends while the driver
// waits for the last stage's answer takes that answer at the close, so
// its chains and the stages' agree and the account settles.
func TestCutShortWhileAwaiting(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	h := newPeerHarness(t, m, 2, 0) // the test plays stage 1, the last
	job, at := h.tr.ringJob(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type outcome struct {
		res  backend.Result
		done *relaymsg.RingDone
		err  error
	}
	out := make(chan outcome, 1)
	go func() {
		res, done, err := h.srv.Chat(ctx, job, greedy(prompts[0], 8, false), func(oaiwire.Delta) error { return nil })
		out <- outcome{res, done, err}
	}()
	of := h.expect(t, stagenet.KindOpen, job.ID)
	o, err := decodeOpen(&of)
	if err != nil {
		t.Fatal(err)
	}
	hf := h.expect(t, stagenet.KindHidden, job.ID)
	cancel()
	// The answer comes only once the driver is closing: it was awaited
	// when the context ended.
	waitFor(t, "the driver to close the job", func() bool {
		r := h.srv.current()
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.job != nil && r.job.closing.Load()
	})
	tail := account{open: o, positions: int64(o.Prompt)}
	tail.in.addFrame(&hf)
	ans := tokensFrame(job.ID, hf.Step, o.Prompt, []int32{testmodel.EOSID + 1})
	h.send(t, ans)
	tail.out.addFrame(ans)
	cf := h.expect(t, stagenet.KindClose, job.ID)
	if cf.Step != hf.Step+1 || int(cf.Pos) != o.Prompt {
		t.Fatalf("close at step %d position %d, want step %d position %d", cf.Step, cf.Pos, hf.Step+1, o.Prompt)
	}
	p1, _ := h.tr.plan.Primary(1)
	rc, err := tail.receipt(h.keys[1], h.tr.hash, h.tr.plan.Model, p1, time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	payload, err := encodeClose([]shard.Receipt{rc})
	if err != nil {
		t.Fatal(err)
	}
	h.send(t, &stagenet.Frame{Kind: stagenet.KindClose, Job: job.ID, Step: cf.Step, Pos: cf.Pos, Payload: payload})
	var got outcome
	select {
	case got = <-out:
	case <-time.After(waitLimit):
		t.Fatal("the chat did not end")
	}
	if !errors.Is(got.err, context.Canceled) || got.done == nil {
		t.Fatalf("chat cut short while awaiting: %v, account %v", got.err, got.done)
	}
	if got.done.TokenEnd != int64(o.Prompt) {
		t.Errorf("the account covers %d positions, the ring ran %d", got.done.TokenEnd, o.Prompt)
	}
	h.tr.settle(t, chatResult{done: got.done, job: job, at: at})
}

// TestChatPanic: a panic in a job (here in emit) fails that job with an
// error, not the process, and frees the ring for the next job.
func TestChatPanic(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	tr := startInProcess(t, m, 2)
	job, _ := tr.ringJob(t)
	_, done, err := tr.driver.Chat(context.Background(), job, greedy(prompts[0], 8, true), func(oaiwire.Delta) error {
		panic("test: emit blew up")
	})
	if err == nil || !strings.Contains(err.Error(), "internal error") || done != nil {
		t.Fatalf("a panicking job: %v, %v; want an internal error", err, done)
	}
	req := greedy(prompts[0], 6, false)
	if diff := same(tr.chat(t, req), m.reference(req)); diff != "" {
		t.Fatalf("the next job: %s", diff)
	}
}

// TestPlanContext: the plan's context caps a reply as the model's own
// context caps the built-in backend's (a reply cut to fit, a prompt that
// does not fit refused as a request error), and a stage refuses frames
// whose positions would pass it.
func TestPlanContext(t *testing.T) {
	m := loadModel(t, "qwen2-q8_0", modelOptions("qwen2", testmodel.Q8_0))
	t.Run("driver", func(t *testing.T) {
		prompt := m.reference(greedy(prompts[0], 1, false)).Result.Usage.PromptTokens
		if prompt == 0 {
			t.Fatal("the built-in backend counted no prompt tokens")
		}
		const room = 4
		tr := startInProcessWith(t, m, 2, int(prompt)+room)
		got := tr.chat(t, greedy(prompts[0], 50, false))
		// The cap cuts the reply where max_tokens = room would.
		if diff := same(got, m.reference(greedy(prompts[0], room, false))); diff != "" {
			t.Fatalf("a reply capped by the plan's context of %d: %s", prompt+room, diff)
		}
		if got.Result.FinishReason != "length" || got.Result.Usage.TotalTokens != prompt+room {
			t.Fatalf("finish %q, usage %+v: want length at %d tokens", got.Result.FinishReason, got.Result.Usage, prompt+room)
		}
		tr.verify(t, got)
		long := greedy([]oaiwire.Message{backendtest.User(strings.Repeat("hello world ", 20))}, 4, false)
		job, _ := tr.ringJob(t)
		if _, _, err := tr.driver.Chat(context.Background(), job, long, func(oaiwire.Delta) error { return nil }); !errors.Is(err, builtin.ErrRequest) {
			t.Fatalf("a prompt longer than the plan's context: %v, want a request error", err)
		}
	})
	t.Run("stage", func(t *testing.T) {
		h := newPeerHarnessWith(t, m, 3, 1, 4)
		h.send(t, h.openFrame(t, "fits")) // a prompt of 3
		h.expect(t, stagenet.KindOpen, "fits")
		h.send(t, h.hidden(t, "fits", 1, 0, 3))
		h.expect(t, stagenet.KindHidden, "fits")
		h.send(t, h.hidden(t, "fits", 2, 3, 2)) // positions 3 and 4: past 4
		if f := h.expect(t, stagenet.KindError, "fits"); !strings.Contains(string(f.Payload), "past the plan's context") {
			t.Fatalf("passed on %q", f.Payload)
		}
		o := openMsg{Job: "too-long", Plan: h.tr.hash, Prompt: 5}
		b, err := json.Marshal(&o)
		if err != nil {
			t.Fatal(err)
		}
		h.send(t, &stagenet.Frame{Kind: stagenet.KindOpen, Job: o.Job, Payload: b})
		h.expect(t, stagenet.KindError, o.Job)
	})
}

// TestCutShortWhileVerifying: a job whose context ends while a verify
// step's answer is awaited still closes: the driver takes the answer, rolls
// its cache back to the rows accepted, and closes at that length; the
// account covers every row run and settles.
func TestCutShortWhileVerifying(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	h := newPeerHarness(t, m, 2, 0) // the test plays stage 1, the last
	job, at := h.tr.ringJob(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const prediction = "the cat sat on the mat and the dog ran to the big red house"
	predicted := h.srv.current().text.Tokenize(prediction)
	req := greedy(prompts[0], 8, false)
	req.Prediction = &oaiwire.Prediction{Type: "content", Content: oaiwire.Content{Text: prediction}}
	type outcome struct {
		res  backend.Result
		done *relaymsg.RingDone
		err  error
	}
	out := make(chan outcome, 1)
	go func() {
		res, done, err := h.srv.Chat(ctx, job, req, func(oaiwire.Delta) error { return nil })
		out <- outcome{res, done, err}
	}()
	of := h.expect(t, stagenet.KindOpen, job.ID)
	o, err := decodeOpen(&of)
	if err != nil {
		t.Fatal(err)
	}
	// As the last stage: the prompt step answered with the prediction's
	// first token, so the driver drafts the prediction's next ones.
	tail := account{open: o}
	hf := h.expect(t, stagenet.KindHidden, job.ID)
	tail.in.addFrame(&hf)
	tail.positions += int64(o.Prompt)
	first := tokensFrame(job.ID, hf.Step, o.Prompt, predicted[:1])
	h.send(t, first)
	tail.out.addFrame(first)
	vf := h.expect(t, stagenet.KindVerify, job.ID)
	drafts, wire, err := decodeVerify(vf.Payload, h.whole.Config().Vocab)
	if err != nil || len(drafts) < 2 {
		t.Fatalf("verify with drafts %v: %v", drafts, err)
	}
	hs, err := engine.DecodeHidden(wire)
	if err != nil {
		t.Fatal(err)
	}
	tail.in.addFrame(&vf)
	tail.positions += int64(hs.Tokens)
	cancel()
	waitFor(t, "the driver to close the job", func() bool {
		r := h.srv.current()
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.job != nil && r.job.closing.Load()
	})
	// One draft accepted, then a token of the stage's own.
	kept := int(vf.Pos) + 2
	ans := tokensFrame(job.ID, vf.Step, kept, []int32{drafts[0], drafts[1] ^ 1})
	h.send(t, ans)
	tail.out.addFrame(ans)
	cf := h.expect(t, stagenet.KindClose, job.ID)
	if cf.Step != vf.Step+1 || int(cf.Pos) != kept {
		t.Fatalf("close at step %d position %d, want step %d position %d (the rows accepted)", cf.Step, cf.Pos, vf.Step+1, kept)
	}
	p1, _ := h.tr.plan.Primary(1)
	rc, err := tail.receipt(h.keys[1], h.tr.hash, h.tr.plan.Model, p1, time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	payload, err := encodeClose([]shard.Receipt{rc})
	if err != nil {
		t.Fatal(err)
	}
	h.send(t, &stagenet.Frame{Kind: stagenet.KindClose, Job: job.ID, Step: cf.Step, Pos: cf.Pos, Payload: payload})
	var got outcome
	select {
	case got = <-out:
	case <-time.After(waitLimit):
		t.Fatal("the chat did not end")
	}
	if !errors.Is(got.err, context.Canceled) || got.done == nil {
		t.Fatalf("chat cut short while verifying: %v, account %v", got.err, got.done)
	}
	if want := int64(o.Prompt + hs.Tokens); got.done.TokenEnd != want {
		t.Errorf("the account covers %d positions, the ring ran %d", got.done.TokenEnd, want)
	}
	h.tr.settle(t, chatResult{done: got.done, job: job, at: at})
}
