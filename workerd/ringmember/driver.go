package ringmember

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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

// closeGrace bounds the close of a job cut short by its caller's context
// (the agent's reply deadline; the gateway waits 5 s past it for the
// job's last message): the ring is closed under a context of its own, so
// the stages' receipts still settle the reply sent so far.
const closeGrace = 2 * time.Second

// ErrStageFailed fails a job that a stage of the ring reported failed (an
// error frame came back around the ring). The frame's text is a peer's:
// it is not echoed into the error, nor into any log above debug (which
// logs its size only), nor into the job's Fail message.
var ErrStageFailed = errors.New("ringmember: a stage of the ring failed the job")

// errInterrupted marks a wait for the ring's answer cut short by the
// caller's context: the step stays in flight, and the job can still be
// closed.
var errInterrupted = errors.New("ringmember: interrupted")

// Chat runs a chat job on the ring this member drives (stage 0 of the
// plan the job names). It renders the prompt with the chat template and
// tokenizer of the model's embedding blob and runs the token loop around
// the ring: it behaves as the built-in backend does on the whole model
// file — the same tokens, deltas, stop strings, max_tokens and context
// cap (the plan's context, Assignment.ContextTokens), finish reason and
// usage (both run builtin.Text.Generate). On success it also returns the
// ring's account of the job: the driver's hash chains and every stage's
// signed receipt, for the gateway to settle with shard.Verify. Any
// failure of the ring (a stage gone, a bad frame, a step timeout) fails
// the job; request errors wrap builtin.ErrRequest; a panic (in emit, say)
// fails the job and leaves the ring to the next one.
//
// When ctx ends mid-reply (the agent's reply deadline, or a cancel), the
// reply sent so far still settles: Chat closes the ring under a context
// of its own (closeGrace at most) and returns, with ctx's error, the
// usage so far (finish "length", the completion tokens the loop got) and
// the ring's account, whose receipts cover every position the ring ran.
// The account is nil when the ring could not be closed (nothing ran yet,
// a stage failed, the plan was dropped).
func (s *Server) Chat(ctx context.Context, job Job, req *oaiwire.ChatRequest, emit func(oaiwire.Delta) error) (res backend.Result, done *relaymsg.RingDone, err error) {
	if err := validate.Struct(&job); err != nil {
		return backend.Result{}, nil, fmt.Errorf("ringmember: job id %q: want 1 to 64 printable ASCII characters (stage frames carry it)", job.ID)
	}
	r := s.startChat()
	if r == nil {
		return backend.Result{}, nil, fmt.Errorf("%w: this member serves no plan", ErrNotServing)
	}
	defer s.chats.Done()
	switch {
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
	d.spec = r.newSpeculation(job.Ring.NoSpeculation, req)
	// The ring goes to the next job however this one ends.
	defer d.release()
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("ringmember: job panicked", "job", job.ID, "panic", p)
			res, done, err = backend.Result{}, nil, fmt.Errorf("ringmember: job %q: internal error (a panic; see the log)", job.ID)
			d.abort(err)
		}
	}()
	res, err = r.text.Generate(d.ctx, d, prompt, req, emit)
	if err != nil {
		if cause := context.Cause(d.ctx); cause != nil && !errors.Is(err, cause) {
			// The engine reports a cancelled context as ctx.Err(); say
			// why it ended (the caller's cancel, or the plan dropped).
			err = fmt.Errorf("%w (%w)", cause, err)
		}
		if ctx.Err() == nil || !d.closable() {
			d.abort(err)
			return backend.Result{}, nil, err
		}
		done, cerr := d.finish(ctx)
		if cerr != nil {
			r.log.Info("ringmember: a job cut short could not be closed", "job", job.ID, "err", cerr)
			return backend.Result{}, nil, err
		}
		r.log.Debug("ringmember: job cut short and closed", "job", job.ID, "positions", done.TokenEnd)
		return d.usage(), done, err
	}
	done, err = d.finish(ctx)
	if err != nil {
		return backend.Result{}, nil, err
	}
	res.Usage.CompletionTokensDetails = d.spec.details(res.Usage.CompletionTokens)
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
	// tokens is how many tokens Next returned: the reply's completion
	// tokens so far.
	tokens int64
	// pending: a step was sent and its answer not yet taken (a wait cut
	// short by the caller's context), with pendingWant token ids to
	// come. broken: the job's frames and chains may disagree with the
	// stages' (a failed send, a bad answer); it cannot be closed.
	pending       bool
	pendingWant   int
	pendingVerify *pendingVerify
	broken        bool
	// spec is the job's speculation (its drafter nil: none).
	spec *speculation
	// closing is set when the close begins (tests wait for it).
	closing atomic.Bool

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
	if r.ctx.Err() != nil {
		// Both were ready and the select took the ring: it is stopped.
		<-r.busy
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
	d.tokens++
	return id, nil
}

// runChunk embeds one chunk, runs the driver's layers and sends the hidden
// states on; it returns the tokens the last stage answers (one for a
// final chunk, none for an earlier prompt chunk). A ctx that ends before
// the chunk is sent leaves the job as it was; one that ends while the
// answer is awaited leaves the step in flight: either way the job can
// still be closed.
func (d *driverJob) runChunk(ctx context.Context, part []int32, final bool) ([]int32, error) {
	r := d.r
	h, err := d.runOwn(ctx, part)
	if err != nil {
		return nil, err
	}
	if r.stages == 1 {
		var ids []int32
		if final {
			last := &engine.Hidden{Pos: h.Pos + h.Tokens - 1, Tokens: 1, Dim: h.Dim, Data: h.Row(h.Tokens - 1)}
			lg, err := r.model.Head(last)
			if err != nil {
				d.broken = true
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
		d.broken = true
		return nil, err
	}
	f := &stagenet.Frame{Kind: stagenet.KindHidden, Job: d.open.Job, Step: d.step, Pos: uint32(h.Pos), Payload: wire, Hash: engine.HashHidden(wire)}
	// Sent under the ring's context, not the caller's: a send cut short
	// could leave the next stage part of a frame, and a step's send
	// waits on nothing (the ring runs in lockstep).
	if err := r.send(r.ctx, f); err != nil {
		d.broken = true
		return nil, err
	}
	d.out.addFrame(f)
	want := 0
	if final {
		want = 1
	}
	d.pending, d.pendingWant = true, want
	return d.answer(ctx, want)
}

// runOwn embeds tokens at the cache's length and runs the driver's layers
// over them, as the next step: the step's hidden states. The driver's
// input chain is over the tokens it fed its embedding, as if it had
// received them in a tokens frame. A Forward cut short leaves the cache
// as it was.
func (d *driverJob) runOwn(ctx context.Context, tokens []int32) (*engine.Hidden, error) {
	r := d.r
	pos := d.st.Len()
	if pos+len(tokens) > r.ctxTokens {
		return nil, fmt.Errorf("ringmember: job %q: positions up to %d, past the plan's context of %d", d.open.Job, pos+len(tokens), r.ctxTokens)
	}
	h, err := r.model.Embed(tokens, pos)
	if err != nil {
		return nil, fmt.Errorf("ringmember: job %q: %w", d.open.Job, err)
	}
	if err := d.st.Forward(ctx, h); err != nil {
		return nil, fmt.Errorf("ringmember: job %q: %w", d.open.Job, err)
	}
	d.step++
	d.in.add(stagenet.KindTokens, d.step, uint32(pos), sha256.Sum256(encodeTokens(tokens)))
	d.positions += int64(len(tokens))
	return h, nil
}

// answer waits for the last stage's answer to the step in flight, a
// tokens frame with want ids (none: a non-final prompt chunk, or a
// truncation's acknowledgement), and takes it into the output chain. A
// wait cut short by ctx leaves the step in flight; any other failure
// breaks the job.
func (d *driverJob) answer(ctx context.Context, want int) ([]int32, error) {
	ans, err := d.await(ctx, stagenet.KindTokens)
	if err != nil {
		if !errors.Is(err, errInterrupted) {
			d.broken = true
		}
		return nil, err
	}
	ids, err := decodeTokens(ans.Payload, maxTokensPerFrame, d.r.cfg.Vocab)
	if err == nil && len(ids) != want {
		err = badFrame("job %q: step %d answered with %d tokens, %d expected", d.open.Job, d.step, len(ids), want)
	}
	if err != nil {
		d.broken = true
		return nil, fmt.Errorf("ringmember: job %q: %w", d.open.Job, err)
	}
	d.recv.addFrame(&ans)
	d.pending = false
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
	if err := d.st.Truncate(n); err != nil {
		return err
	}
	d.step++
	empty := sha256.Sum256(nil)
	d.in.add(stagenet.KindTruncate, d.step, uint32(n), empty)
	if r.stages == 1 {
		f := tokensFrame(d.open.Job, d.step, n, nil)
		d.out.addFrame(f)
		d.recv.addFrame(f)
		return nil
	}
	f := &stagenet.Frame{Kind: stagenet.KindTruncate, Job: d.open.Job, Step: d.step, Pos: uint32(n), Hash: empty}
	if err := r.send(r.ctx, f); err != nil {
		d.broken = true
		return err
	}
	d.out.addFrame(f)
	d.pending, d.pendingWant = true, 0
	_, err := d.answer(ctx, 0)
	return err
}

// await waits for the answer to the current step from the last stage, at
// the driver's cache length.
func (d *driverJob) await(ctx context.Context, kind stagenet.Kind) (stagenet.Frame, error) {
	return d.awaitAt(ctx, kind, d.st.Len())
}

// awaitAt waits for the answer to the current step from the last stage,
// at position pos (-1: the caller checks it).
func (d *driverJob) awaitAt(ctx context.Context, kind stagenet.Kind, pos int) (stagenet.Frame, error) {
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
			d.r.log.Debug("ringmember: a stage failed the job", "job", d.open.Job, "step", d.step, "reason_bytes", len(f.Payload))
			return f, fmt.Errorf("ringmember: job %q: %w", d.open.Job, ErrStageFailed)
		case f.Job != d.open.Job:
			return f, badFrame("%s frame for job %q while job %q runs", f.Kind, f.Job, d.open.Job)
		case f.Kind != kind:
			return f, badFrame("job %q: a %s frame came back, a %s frame was awaited", d.open.Job, f.Kind, kind)
		case f.Step != d.step:
			return f, badFrame("job %q: the answer is for step %d, step %d was awaited", d.open.Job, f.Step, d.step)
		case pos >= 0 && int(f.Pos) != pos:
			return f, badFrame("job %q: the answer is at position %d, the driver's cache holds %d", d.open.Job, f.Pos, pos)
		}
		return f, nil
	case <-t.C:
		return stagenet.Frame{}, fmt.Errorf("ringmember: job %q: no answer from the ring within %s (step %d)", d.open.Job, d.r.s.o.stepTimeout, d.step)
	case <-ctx.Done():
		return stagenet.Frame{}, fmt.Errorf("ringmember: job %q: %w: %w", d.open.Job, errInterrupted, context.Cause(ctx))
	}
}

// finish closes the job around the ring, gathering every stage's
// receipt, and adds the driver's own. It runs under a context of its own
// (closeContext), so a job whose caller's context ended still closes.
func (d *driverJob) finish(caller context.Context) (*relaymsg.RingDone, error) {
	ctx, cancel := d.closeContext(caller)
	defer cancel()
	done, err := d.close(ctx)
	if err != nil {
		d.abort(err)
		return nil, err
	}
	d.release()
	return done, nil
}

// closable reports whether the job can be closed: its frames and chains
// agree with the stages', it ran some positions (a receipt covers at
// least one), and its plan is still served.
func (d *driverJob) closable() bool {
	return !d.broken && d.positions > 0 && d.r.ctx.Err() == nil
}

// closeContext is what a job's close runs under: the ring's context for
// a step timeout, cut to closeGrace once the caller's context has ended
// (at once if it has already).
func (d *driverJob) closeContext(caller context.Context) (context.Context, context.CancelFunc) {
	if caller.Err() != nil {
		return context.WithTimeout(d.r.ctx, closeGrace)
	}
	ctx, cancel := context.WithTimeout(d.r.ctx, d.r.s.o.stepTimeout)
	stop := context.AfterFunc(caller, func() { time.AfterFunc(closeGrace, cancel) })
	return ctx, func() { stop(); cancel() }
}

// usage is the reply's usage so far, for a job cut short: the prompt and
// the tokens the loop got, finished by length.
func (d *driverJob) usage() backend.Result {
	u := oaiwire.Usage{PromptTokens: int64(d.open.Prompt), CompletionTokens: d.tokens}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if d.spec != nil {
		u.CompletionTokensDetails = d.spec.details(u.CompletionTokens)
	}
	return backend.Result{FinishReason: oaiwire.FinishLength, Usage: u}
}

// close takes the answer of a step still in flight, then sends the Close
// around the ring and returns the ring's account with every receipt.
func (d *driverJob) close(ctx context.Context) (*relaymsg.RingDone, error) {
	r := d.r
	d.closing.Store(true)
	if d.broken {
		return nil, fmt.Errorf("ringmember: job %q cannot be closed: the ring's account of it is broken", d.open.Job)
	}
	switch {
	case d.pendingVerify != nil:
		if _, err := d.answerVerify(ctx); err != nil {
			return nil, err
		}
	case d.pending:
		if _, err := d.answer(ctx, d.pendingWant); err != nil {
			return nil, err
		}
	}
	d.step++
	var rs []shard.Receipt
	if r.stages > 1 {
		payload, err := encodeClose(nil)
		if err != nil {
			return nil, err
		}
		f := &stagenet.Frame{Kind: stagenet.KindClose, Job: d.open.Job, Step: d.step, Pos: uint32(d.st.Len()), Payload: payload}
		if err := r.send(ctx, f); err != nil {
			return nil, err
		}
		ans, err := d.await(ctx, stagenet.KindClose)
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
