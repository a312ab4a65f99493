package ringmember

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
	"github.com/c0mpute/c0mpute/workerd/speculate"
	"github.com/c0mpute/c0mpute/workerd/stagenet"
)

// maxPredictionTokens bounds the prediction tokens a job drafts from (the
// gateway bounds the prediction's text).
const maxPredictionTokens = 1 << 16

// drafts is a driving ring's speculation: the drafter its model was given
// (speculate.Choice) and the γ controller, which learns the ring's loop
// time and keeps it across jobs.
type drafts struct {
	spec  speculate.Spec
	model speculate.Prefetcher // ModeModel: the draft model, kept across jobs
	ctl   *speculate.Controller
	once  sync.Once
}

// newDrafts sets up the driver's drafter for its ring model. A draft
// model that cannot be used (unreadable, another vocabulary) is logged
// and replaced by lookup drafting: the ring serves either way.
func (r *ring) newDrafts(vocab gguf.Metadata) *drafts {
	d := &drafts{spec: r.s.o.draft.For(r.a.Model), ctl: speculate.NewController(speculate.MaxGamma)}
	if d.spec.Mode != speculate.ModeModel {
		return d
	}
	if err := d.openModel(vocab, r.a.Workers, r.log); err != nil {
		r.log.Warn("ringmember: the draft model cannot be used; drafting by lookup", "path", d.spec.Path, "err", err)
		d.spec = speculate.Spec{Mode: speculate.ModeLookup}
	}
	return d
}

func (d *drafts) openModel(vocab gguf.Metadata, workers int, log *slog.Logger) error {
	p, err := speculate.OpenModel(d.spec.Path, &gguf.File{Metadata: vocab}, workers, log)
	if err != nil {
		return err
	}
	d.model = p
	return nil
}

// close frees the draft model, once no job can use it: it takes the ring
// for good (the ring is stopped, so no job starts after it).
func (r *ring) closeDrafts() {
	d := r.drafts
	if d == nil {
		return
	}
	d.once.Do(func() {
		r.busy <- struct{}{}
		if d.model != nil {
			_ = d.model.Close()
		}
	})
}

// forJob returns the drafter of one job and the controller of its γ, or
// a nil drafter for none: the request's prediction first (OpenAI's
// Predicted Outputs), then the model's drafter; none when the request
// turned speculation off. The model's drafter starts from nothing (no
// job drafts from, or runs faster for, an earlier job's tokens). A job
// with a prediction gets a controller of its own: what one client's
// prediction teaches about acceptance says nothing of the next request,
// and must not shape its latency; the ring's controller learns from its
// drafter's jobs.
func (d *drafts) forJob(off bool, prediction []int32) (speculate.Drafter, *speculate.Controller) {
	if d == nil || off {
		return nil, nil
	}
	var base speculate.Drafter
	switch d.spec.Mode {
	case speculate.ModeModel:
		d.model.Reset()
		base = d.model
	case speculate.ModeNone:
	default:
		base = speculate.NewLookup(nil)
	}
	if len(prediction) == 0 {
		return base, d.ctl
	}
	return &chained{first: speculate.NewLookup(prediction), then: base}, speculate.NewController(speculate.MaxGamma)
}

// chained drafts from first, and from then when first proposes nothing.
type chained struct {
	first, then speculate.Drafter
}

func (c *chained) Draft(ctx context.Context, history []int32, n int) ([]int32, error) {
	out, err := c.first.Draft(ctx, history, n)
	if err != nil || len(out) > 0 || c.then == nil {
		return out, err
	}
	return c.then.Draft(ctx, history, n)
}

// Prefetch drafts ahead with then, when it can (first is a lookup, which
// needs no head start).
func (c *chained) Prefetch(history []int32, n int) {
	if p, ok := c.then.(prefetcher); ok {
		p.Prefetch(history, n)
	}
}

// prefetcher is a drafter that can draft ahead (speculate.Prefetcher
// without its Close, which the ring's owner calls).
type prefetcher interface {
	Prefetch(history []int32, n int)
}

// predictionTokens tokenizes a request's prediction, bounded.
func (r *ring) predictionTokens(req *oaiwire.ChatRequest) []int32 {
	if req.Prediction == nil {
		return nil
	}
	text := req.Prediction.Content.String()
	if text == "" {
		return nil
	}
	toks := r.text.Tokenize(text)
	return toks[:min(len(toks), maxPredictionTokens)]
}

// speculation is what a driver job keeps to speculate: its drafter, the
// sequence so far (the prompt, then every token the ring returned; the
// last is the token the next step feeds), and its counts.
type speculation struct {
	drafter  speculate.Drafter
	ctl      *speculate.Controller
	stats    *speculate.Stats
	history  []int32
	accepted int64
	rejected int64
	// last is the most recent step's tokens, and lastAccepted the drafts
	// among them, until the reply says how many it took (Took).
	last, lastAccepted int
}

// newSpeculation is a job's speculation (a nil drafter: none).
func (r *ring) newSpeculation(off bool, req *oaiwire.ChatRequest) *speculation {
	s := &speculation{stats: &r.s.spec}
	s.drafter, s.ctl = r.drafts.forJob(off, r.predictionTokens(req))
	return s
}

// details are the job's completion_tokens_details: drafted tokens
// accepted (at most the reply's tokens) and rejected.
func (s *speculation) details(completion int64) *oaiwire.CompletionTokensDetails {
	return &oaiwire.CompletionTokensDetails{AcceptedPredictionTokens: min(s.accepted, completion), RejectedPredictionTokens: s.rejected}
}

// NextN is builtin.MultiStepper's step: the prompt as Next runs it; after
// it, one loop around the ring that feeds the token returned last and,
// when the drafter proposes any, the drafts after it, which the last
// stage accepts or rejects (stageVerify). It returns the accepted drafts
// and the token that follows them: at most limit tokens.
func (d *driverJob) NextN(ctx context.Context, tokens []int32, limit int) ([]int32, error) {
	s := d.spec
	decoding := d.st.Len() >= d.open.Prompt && len(tokens) == 1
	gamma := 0
	if decoding && s.drafter != nil {
		gamma = min(s.ctl.Gamma(), limit-1, d.r.ctxTokens-d.st.Len()-1, speculate.MaxGamma)
	}
	if !decoding && s.drafter != nil && d.st.Len()+len(tokens) >= d.open.Prompt {
		if p, ok := s.drafter.(prefetcher); ok {
			// Draft after the prompt while the ring runs it: the first
			// window's drafts are ready, or at least the prompt is in the
			// draft model's cache, when the first token comes back.
			p.Prefetch(append(s.history[:len(s.history):len(s.history)], tokens...), s.ctl.Gamma()+1)
		}
	}
	var proposed []int32
	var drafting time.Duration
	if gamma > 0 {
		start := time.Now()
		var err error
		proposed, err = s.drafter.Draft(ctx, s.history, gamma)
		drafting = time.Since(start)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("ringmember: job %q: drafting: %w", d.open.Job, context.Cause(ctx))
			}
			// A drafter's failure costs the speculation of one step,
			// never the job. Its error is not logged: it may name a token.
			d.r.log.Warn("ringmember: drafting failed; this step runs undrafted", "job", d.open.Job)
			proposed = nil
		}
		proposed = proposed[:min(len(proposed), gamma)]
		for i, id := range proposed {
			if id < 0 || int(id) >= d.r.cfg.Vocab {
				proposed = proposed[:i] // a drafter's id the model lacks: no draft from it on
				break
			}
		}
		s.ctl.ObserveDraft(len(proposed), drafting)
	}
	start := time.Now()
	var ids []int32
	if len(proposed) == 0 {
		id, err := d.Next(ctx, tokens)
		if err != nil {
			return nil, err
		}
		ids = []int32{id}
	} else {
		var err error
		if ids, err = d.verify(ctx, tokens[0], proposed); err != nil {
			return nil, err
		}
		d.tokens += int64(len(ids))
	}
	accepted := len(ids) - 1
	if decoding {
		loop := time.Since(start)
		if s.drafter != nil {
			s.ctl.Observe(len(proposed), accepted, loop)
		}
		s.stats.Observe(len(proposed), accepted, loop, drafting)
		s.accepted += int64(accepted)
		s.rejected += int64(len(proposed) - accepted)
	}
	s.last, s.lastAccepted = len(ids), accepted
	if !decoding {
		// The prompt (or the part the caller fed): the history holds it.
		s.history = append(s.history, tokens...)
	}
	// The history ends with the token the next step feeds.
	s.history = append(s.history, ids...)
	return ids, nil
}

// Took is told how many of the last step's tokens the reply took
// (builtin.Text.Generate stops inside a step's tokens at an end token, a
// stop string, the limit or a failed emit): the rest count neither as the
// reply's tokens nor as accepted drafts.
func (d *driverJob) Took(n int) {
	s := d.spec
	if s == nil || n < 0 || n >= s.last {
		return
	}
	d.tokens -= int64(s.last - n)
	s.accepted -= int64(s.lastAccepted - min(s.lastAccepted, n))
	s.last, s.lastAccepted = n, min(s.lastAccepted, n)
}

// verify runs one verify step: pending (the token returned last, not yet
// in the caches) and the drafts after it, through every stage in one
// loop. The last stage answers with the drafts it accepted and the token
// after them, at the accepted length, to which the driver rolls its own
// cache back; the other stages roll back on the next frame (rewind).
func (d *driverJob) verify(ctx context.Context, pending int32, drafted []int32) ([]int32, error) {
	r := d.r
	pos := d.st.Len()
	h, err := d.runOwn(ctx, append([]int32{pending}, drafted...))
	if err != nil {
		return nil, err
	}
	if r.stages == 1 {
		lg, err := r.model.Head(h)
		if err != nil {
			d.broken = true
			return nil, fmt.Errorf("ringmember: job %q: %w", d.open.Job, err)
		}
		ids, err := speculate.Accept(d.smp, lg, drafted)
		if err != nil {
			d.broken = true
			return nil, err
		}
		if err := d.st.Truncate(pos + len(ids)); err != nil {
			d.broken = true
			return nil, err
		}
		f := tokensFrame(d.open.Job, d.step, pos+len(ids), ids)
		d.out.addFrame(f)
		d.recv.addFrame(f)
		return ids, nil
	}
	wire, err := engine.EncodeHidden(h, engine.F32)
	if err != nil {
		d.broken = true
		return nil, err
	}
	payload := encodeVerify(drafted, wire)
	f := &stagenet.Frame{Kind: stagenet.KindVerify, Job: d.open.Job, Step: d.step, Pos: uint32(pos), Payload: payload, Hash: sha256.Sum256(payload)}
	if err := r.send(r.ctx, f); err != nil {
		d.broken = true
		return nil, err
	}
	d.out.addFrame(f)
	d.pending, d.pendingVerify = true, &pendingVerify{pos: pos, drafts: drafted}
	if p, ok := d.spec.drafter.(prefetcher); ok {
		// Draft the next window while the ring verifies this one, as if
		// every draft is accepted (the likely case when drafts are good).
		p.Prefetch(append(d.spec.history[:len(d.spec.history):len(d.spec.history)], drafted...), len(drafted)+1)
	}
	return d.answerVerify(ctx)
}

// pendingVerify is a verify step in flight: its first position and its
// drafts.
type pendingVerify struct {
	pos    int
	drafts []int32
}

// answerVerify waits for the last stage's answer to the verify step in
// flight and checks it: one to len(drafts)+1 tokens, every one but the
// last the draft at its place, at the position the accepted rows end;
// then the driver's cache keeps those rows only.
func (d *driverJob) answerVerify(ctx context.Context) ([]int32, error) {
	v := d.pendingVerify
	ans, err := d.awaitAt(ctx, stagenet.KindTokens, -1)
	if err != nil {
		if !errors.Is(err, errInterrupted) {
			d.broken = true
		}
		return nil, err
	}
	ids, err := decodeTokens(ans.Payload, len(v.drafts)+1, d.r.cfg.Vocab)
	switch {
	case err != nil:
	case len(ids) == 0:
		err = badFrame("job %q: a verify step answered with no token", d.open.Job)
	case int(ans.Pos) != v.pos+len(ids):
		err = badFrame("job %q: a verify step's %d tokens answered at position %d, want %d", d.open.Job, len(ids), ans.Pos, v.pos+len(ids))
	default:
		for i, id := range ids[:len(ids)-1] {
			if id != v.drafts[i] {
				err = badFrame("job %q: a verify step's answer accepts token %d, which is not the draft", d.open.Job, i)
				break
			}
		}
	}
	if err == nil {
		err = d.st.Truncate(v.pos + len(ids))
	}
	if err != nil {
		d.broken = true
		return nil, fmt.Errorf("ringmember: job %q: %w", d.open.Job, err)
	}
	d.recv.addFrame(&ans)
	d.pending, d.pendingVerify = false, nil
	return ids, nil
}
