package ringmember

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/sample"
	"github.com/c0mpute/c0mpute/workerd/stagenet"
)

// Job is one chat job for a ring model, as the relay dispatched it to the
// ring's driver: the relay's job id (which every stage frame and receipt
// names) and the job message's ring part.
type Job struct {
	ID   string `validate:"required,max=64,printascii"`
	Ring relaymsg.RingJob
}

// Chat runs a chat job on the ring this member drives (stage 0 of the
// plan the job names). It renders the prompt with the chat template and
// tokenizer of the model's embedding blob and runs the token loop around
// the ring: it behaves as the built-in backend does on the whole model
// file — the same tokens, deltas, stop strings, max_tokens and context
// cap, finish reason and usage (both run builtin.Text.Generate). On
// success it also returns the ring's account of the job: the driver's
// hash chains and every stage's signed receipt, for the gateway to
// settle with shard.Verify. Any failure of the ring (a stage gone, a bad
// frame, a step timeout) fails the job; request errors wrap
// builtin.ErrRequest.
func (s *Server) Chat(ctx context.Context, job Job, req *oaiwire.ChatRequest, emit func(oaiwire.Delta) error) (backend.Result, *relaymsg.RingDone, error) {
	if err := validate.Struct(&job); err != nil {
		return backend.Result{}, nil, fmt.Errorf("ringmember: job id %q: want 1 to 64 printable ASCII characters (stage frames carry it)", job.ID)
	}
	r := s.current()
	switch {
	case r == nil:
		return backend.Result{}, nil, fmt.Errorf("%w: this member serves no plan", ErrNotServing)
	case r.hash != job.Ring.Plan:
		return backend.Result{}, nil, fmt.Errorf("%w: job %q is for plan %s, this member serves %s", ErrNotServing, job.ID, job.Ring.Plan, r.hash)
	case r.held || !r.driver:
		return backend.Result{}, nil, fmt.Errorf("%w: this member is stage %d (%s) of plan %s, not its driver", ErrNotServing, r.me.Stage, r.me.Role, r.hash)
	}
	prompt, params, err := r.text.Request(req)
	if err != nil {
		return backend.Result{}, nil, err
	}
	start := time.Now()
	d, err := r.openJob(ctx, job.ID, job.Ring, len(prompt), params)
	if err != nil {
		return backend.Result{}, nil, err
	}
	res, err := r.text.Generate(d.ctx, d, prompt, req, emit)
	if err != nil {
		if cause := context.Cause(d.ctx); cause != nil && !errors.Is(err, cause) {
			// The engine reports a cancelled context as ctx.Err(); say
			// why it ended (the caller's cancel, or the plan dropped).
			err = fmt.Errorf("%w (%w)", cause, err)
		}
		d.abort(err)
		return backend.Result{}, nil, err
	}
	done, err := d.finish()
	if err != nil {
		return backend.Result{}, nil, err
	}
	el := time.Since(start)
	r.log.Debug("ringmember: job done", "job", job.ID, "prompt_tokens", len(prompt), "tokens", res.Usage.CompletionTokens,
		"finish", res.FinishReason, "tok_per_s", float64(res.Usage.CompletionTokens)/el.Seconds())
	return res, done, nil
}

// driverJob is the job the driver runs: its local stage (layers from 0),
// its accounts, and the events the router hands it. It is the Stepper
// builtin.Text.Generate runs.
type driverJob struct {
	r *ring
	account
	// recv is the chain over the tokens frames the last stage sent back:
	// RingDone.Output.
	recv   chain
	st     *engine.Stage
	smp    *sample.Sampler // a one-stage ring samples itself
	step   uint32
	events chan inEvent
	done   chan struct{}

	ctx       context.Context
	cancel    context.CancelCauseFunc
	stopAfter func() bool
	once      sync.Once
}

// openJob takes the ring for one job (waiting for the job before it) and
// opens it on every stage.
func (r *ring) openJob(ctx context.Context, id string, rj relaymsg.RingJob, promptLen int, p sample.Params) (*driverJob, error) {
	select {
	case r.busy <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("ringmember: job %q: waiting for the ring: %w", id, context.Cause(ctx))
	case <-r.ctx.Done():
		return nil, fmt.Errorf("%w: plan %s was dropped", ErrNotServing, r.hash)
	}
	d := &driverJob{r: r, events: make(chan inEvent, 4), done: make(chan struct{})}
	d.open = openMsg{Job: id, Plan: r.hash, Nonce: rj.Nonce, Slot: rj.Slot, Blockhash: rj.Blockhash, Prompt: promptLen, Sampling: wireSampling(p)}
	d.ctx, d.cancel = context.WithCancelCause(ctx)
	d.stopAfter = context.AfterFunc(r.ctx, func() { d.cancel(fmt.Errorf("%w: plan %s was dropped", ErrNotServing, r.hash)) })
	r.mu.Lock()
	r.job = d
	r.mu.Unlock()
	fail := func(err error) (*driverJob, error) {
		d.release()
		return nil, err
	}
	if err := validate.Struct(&d.open); err != nil {
		return fail(fmt.Errorf("ringmember: job %q: %w", id, err))
	}
	var err error
	if d.st, err = r.model.NewStage(r.me.LayerStart, r.me.LayerEnd); err != nil {
		return fail(err)
	}
	if r.stages == 1 {
		if d.smp, err = sample.New(p); err != nil {
			return fail(err)
		}
		return d, nil
	}
	payload, err := json.Marshal(&d.open)
	if err != nil {
		return fail(fmt.Errorf("ringmember: encode open: %w", err))
	}
	if err := r.send(d.ctx, &stagenet.Frame{Kind: stagenet.KindOpen, Job: id, Payload: payload}); err != nil {
		return fail(fmt.Errorf("ringmember: job %q: open: %w", id, err))
	}
	return d, nil
}

// release gives the ring back for the next job.
func (d *driverJob) release() {
	d.once.Do(func() {
		d.stopAfter()
		d.cancel(errors.New("ringmember: job ended"))
		d.r.ended.add(d.open.Job)
		d.r.mu.Lock()
		if d.r.job == d {
			d.r.job = nil
		}
		d.r.mu.Unlock()
		close(d.done)
		<-d.r.busy
	})
}

// abort ends a failed job and tells the ring, so every stage drops it.
// The reason sent names no error text of the caller's: emit's errors are
// the agent's business.
func (d *driverJob) abort(err error) {
	d.r.log.Info("ringmember: job failed", "job", d.open.Job, "err", err)
	if d.r.stages > 1 {
		d.r.sendError(d.open.Job, errors.New("ringmember: the driver ended the job"))
	}
	d.release()
}

// Next runs tokens around the ring: the prompt in chunks of at most the
// prompt chunk size, then one token a step. It returns the token the
// last stage sampled after them.
func (d *driverJob) Next(ctx context.Context, tokens []int32) (int32, error) {
	if len(tokens) == 0 {
		return 0, errors.New("ringmember: no tokens to run")
	}
	id := int32(-1)
	for off := 0; off < len(tokens); {
		n := min(d.r.s.o.chunk, len(tokens)-off)
		final := d.st.Len()+n >= d.open.Prompt
		if final && off+n < len(tokens) {
			return 0, fmt.Errorf("ringmember: job %q: %d tokens run past the prompt in one call; run generated tokens one at a time", d.open.Job, len(tokens))
		}
		ids, err := d.runChunk(ctx, tokens[off:off+n], final)
		if err != nil {
			return 0, err
		}
		if final {
			id = ids[0]
		}
		off += n
	}
	if id < 0 {
		return 0, fmt.Errorf("ringmember: job %q: the tokens end inside the prompt of %d", d.open.Job, d.open.Prompt)
	}
	return id, nil
}

// runChunk embeds one chunk, runs the driver's layers and sends the hidden
// states on; it returns the tokens the last stage answers (one for a
// final chunk, none for an earlier prompt chunk).
func (d *driverJob) runChunk(ctx context.Context, part []int32, final bool) ([]int32, error) {
	r := d.r
	pos := d.st.Len()
	d.step++
	// The driver's input chain is over the tokens it fed its embedding,
	// as if it had received them in a tokens frame.
	d.in.add(stagenet.KindTokens, d.step, uint32(pos), sha256.Sum256(encodeTokens(part)))
	h, err := r.model.Embed(part, pos)
	if err != nil {
		return nil, fmt.Errorf("ringmember: job %q: %w", d.open.Job, err)
	}
	if err := d.st.Forward(ctx, h); err != nil {
		return nil, fmt.Errorf("ringmember: job %q: %w", d.open.Job, err)
	}
	d.positions += int64(len(part))
	if r.stages == 1 {
		var ids []int32
		if final {
			last := &engine.Hidden{Pos: h.Pos + h.Tokens - 1, Tokens: 1, Dim: h.Dim, Data: h.Row(h.Tokens - 1)}
			lg, err := r.model.Head(last)
			if err != nil {
				return nil, fmt.Errorf("ringmember: job %q: %w", d.open.Job, err)
			}
			ids = []int32{d.smp.Sample(lg.Data)}
		}
		// Alone, the driver is also the last stage: what it would send
		// the coordinator is what it gets back.
		f := tokensFrame(d.open.Job, d.step, d.st.Len(), ids)
		d.out.addFrame(f)
		d.recv.addFrame(f)
		return ids, nil
	}
	wire, err := engine.EncodeHidden(h, engine.F32)
	if err != nil {
		return nil, err
	}
	f := &stagenet.Frame{Kind: stagenet.KindHidden, Job: d.open.Job, Step: d.step, Pos: uint32(pos), Payload: wire, Hash: engine.HashHidden(wire)}
	if err := r.send(ctx, f); err != nil {
		return nil, err
	}
	d.out.addFrame(f)
	want := 0
	if final {
		want = 1
	}
	ans, err := d.await(ctx, stagenet.KindTokens)
	if err != nil {
		return nil, err
	}
	ids, err := decodeTokens(ans.Payload, maxTokensPerFrame, r.cfg.Vocab)
	if err != nil {
		return nil, fmt.Errorf("ringmember: job %q: %w", d.open.Job, err)
	}
	if len(ids) != want {
		return nil, badFrame("job %q: step %d answered with %d tokens, %d expected", d.open.Job, d.step, len(ids), want)
	}
	d.recv.addFrame(&ans)
	return ids, nil
}

// truncate rolls every stage's cache back to n positions (rejected
// drafts, once the driver speculates) and waits for the last stage's
// acknowledgement, an empty tokens frame.
func (d *driverJob) truncate(ctx context.Context, n int) error {
	r := d.r
	if n < 0 || n > d.st.Len() {
		return fmt.Errorf("ringmember: job %q: truncate to %d positions, the cache holds %d", d.open.Job, n, d.st.Len())
	}
	d.step++
	empty := sha256.Sum256(nil)
	d.in.add(stagenet.KindTruncate, d.step, uint32(n), empty)
	if err := d.st.Truncate(n); err != nil {
		return err
	}
	if r.stages == 1 {
		f := tokensFrame(d.open.Job, d.step, n, nil)
		d.out.addFrame(f)
		d.recv.addFrame(f)
		return nil
	}
	f := &stagenet.Frame{Kind: stagenet.KindTruncate, Job: d.open.Job, Step: d.step, Pos: uint32(n), Hash: empty}
	if err := r.send(ctx, f); err != nil {
		return err
	}
	d.out.addFrame(f)
	ans, err := d.await(ctx, stagenet.KindTokens)
	if err != nil {
		return err
	}
	if len(ans.Payload) != 0 {
		return badFrame("job %q: truncate answered with %d payload bytes, none expected", d.open.Job, len(ans.Payload))
	}
	d.recv.addFrame(&ans)
	return nil
}

// await waits for the answer to the current step from the last stage.
func (d *driverJob) await(ctx context.Context, kind stagenet.Kind) (stagenet.Frame, error) {
	t := time.NewTimer(d.r.s.o.stepTimeout)
	defer t.Stop()
	select {
	case ev := <-d.events:
		if ev.err != nil {
			return stagenet.Frame{}, fmt.Errorf("ringmember: job %q: %w", d.open.Job, ev.err)
		}
		f := ev.f
		switch {
		case f.Kind == stagenet.KindError:
			return f, fmt.Errorf("ringmember: job %q failed on the ring: %q", d.open.Job, f.Payload)
		case f.Job != d.open.Job:
			return f, badFrame("%s frame for job %q while job %q runs", f.Kind, f.Job, d.open.Job)
		case f.Kind != kind:
			return f, badFrame("job %q: a %s frame came back, a %s frame was awaited", d.open.Job, f.Kind, kind)
		case f.Step != d.step:
			return f, badFrame("job %q: the answer is for step %d, step %d was awaited", d.open.Job, f.Step, d.step)
		case int(f.Pos) != d.st.Len():
			return f, badFrame("job %q: the answer is at position %d, the driver's cache holds %d", d.open.Job, f.Pos, d.st.Len())
		}
		return f, nil
	case <-t.C:
		return stagenet.Frame{}, fmt.Errorf("ringmember: job %q: no answer from the ring within %s (step %d)", d.open.Job, d.r.s.o.stepTimeout, d.step)
	case <-ctx.Done():
		return stagenet.Frame{}, fmt.Errorf("ringmember: job %q: %w", d.open.Job, context.Cause(ctx))
	}
}

// finish closes the job around the ring, gathering every stage's
// receipt, and adds the driver's own.
func (d *driverJob) finish() (*relaymsg.RingDone, error) {
	done, err := d.close()
	if err != nil {
		d.abort(err)
		return nil, err
	}
	d.release()
	return done, nil
}

func (d *driverJob) close() (*relaymsg.RingDone, error) {
	r := d.r
	d.step++
	var rs []shard.Receipt
	if r.stages > 1 {
		payload, err := encodeClose(nil)
		if err != nil {
			return nil, err
		}
		f := &stagenet.Frame{Kind: stagenet.KindClose, Job: d.open.Job, Step: d.step, Pos: uint32(d.st.Len()), Payload: payload}
		if err := r.send(d.ctx, f); err != nil {
			return nil, err
		}
		ans, err := d.await(d.ctx, stagenet.KindClose)
		if err != nil {
			return nil, err
		}
		if rs, err = decodeClose(ans.Payload, d.open.Job, &r.a.Plan, r.stages-1); err != nil {
			return nil, err
		}
	}
	own, err := d.receipt(r.s.key, r.hash, r.a.Plan.Model, r.me, r.s.o.now().UnixMilli())
	if err != nil {
		return nil, err
	}
	done := &relaymsg.RingDone{
		Plan: r.hash, Input: shard.Hash(d.in), Output: shard.Hash(d.recv),
		TokenStart: 0, TokenEnd: d.positions, Receipts: append([]shard.Receipt{own}, rs...),
	}
	if err := validate.Struct(done); err != nil {
		return nil, fmt.Errorf("ringmember: job %q: ring done: %w", d.open.Job, err)
	}
	return done, nil
}

// route hands the driver's incoming events to the job they belong to.
// Frames of jobs already ended are dropped; anything else while a job
// runs goes to it, which fails it unless it is its answer.
func (r *ring) route() {
	for {
		select {
		case <-r.ctx.Done():
			return
		case ev := <-r.inbox:
			r.mu.Lock()
			d := r.job
			r.mu.Unlock()
			if d == nil {
				if ev.err == nil {
					r.log.Debug("ringmember: frame while no job runs; dropped", "job", ev.f.Job, "kind", ev.f.Kind.String())
				}
				continue
			}
			if ev.err == nil && ev.f.Job != d.open.Job && r.ended.has(ev.f.Job) {
				continue
			}
			select {
			case d.events <- ev:
			case <-d.done:
			case <-r.ctx.Done():
				return
			}
		}
	}
}
