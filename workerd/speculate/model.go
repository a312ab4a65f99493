package speculate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
	"github.com/c0mpute/c0mpute/workerd/engine/tokenizer"
)

// maxChunk is the most positions one Forward of a history runs: it
// bounds the batch's activations (a few MB for a small draft model)
// while keeping the matrix products batched.
const maxChunk = 256

// modelDrafter drafts with a small model of the same vocabulary, greedily
// (NewModel).
type modelDrafter struct {
	m     *engine.Model
	vocab int // draft only ids below this (the vocabulary both share)
	ctx   int // the model's context: no position at or past it is run
	log   *slog.Logger
	close func() error // frees what the drafter owns besides the stage (OpenModel's file)

	// mu is held by whoever runs the model: Draft, or the prefetch
	// goroutine. It guards the fields below.
	mu    sync.Mutex
	stage *engine.Stage // nil once closed
	// toks is the sequence computed so far: the stage's cache holds
	// toks[:stage.Len()]; toks[i] for i >= own is the model's greedy
	// choice after toks[:i].
	toks []int32
	own  int

	// pmu guards pf, the prefetch started last and not yet taken by a
	// Draft (nil when none), and closed.
	pmu    sync.Mutex
	pf     *prefetch
	closed bool
	// wg counts prefetch goroutines, replaced ones included.
	wg sync.WaitGroup
}

// prefetch is one background Prefetch run.
type prefetch struct {
	history []int32 // copy of the history it drafts after
	cancel  context.CancelFunc
	done    chan struct{} // closed when the goroutine has returned
	// progress gets a value (without blocking) after each drafted token.
	progress chan struct{}

	mu  sync.Mutex
	got []int32 // tokens drafted after history so far
}

// NewModel returns a Prefetcher that drafts with m, a whole model
// (embedding, every layer, head) sharing the ring model's vocabulary:
// Draft returns the n tokens m would generate greedily after history.
// It keeps m's KV cache for the sequence it last computed and reuses it:
// a history that extends that sequence costs only its new tokens, and
// one that extends it by tokens the drafter proposed (the usual case once
// they are accepted) is answered from the greedy tokens already computed,
// at no cost. Prefetch computes those in the background while a loop is
// in flight. No position past m.Config().Context is run: near it Draft
// returns fewer tokens, past it none.
//
// log (nil: slog.Default()) gets only a recovered panic of the prefetch
// goroutine, never a token. One caller at a time may use the drafter
// (the request's driver); its prefetch goroutine is synchronised with it.
func NewModel(m *engine.Model, log *slog.Logger) (Prefetcher, error) {
	d, err := newModelDrafter(m, log)
	if err != nil {
		return nil, err
	}
	return d, nil
}

func newModelDrafter(m *engine.Model, log *slog.Logger) (*modelDrafter, error) {
	if m == nil {
		return nil, errors.New("speculate: draft model: no model")
	}
	first, last, embed, head := m.Holds()
	cfg := m.Config()
	if first != 0 || last != cfg.Layers || !embed || !head {
		return nil, fmt.Errorf("speculate: draft model: it holds layers [%d, %d) of %d (embedding %t, head %t); a draft model must be whole: load its file with engine.Load", first, last, cfg.Layers, embed, head)
	}
	st, err := m.NewStage(0, cfg.Layers)
	if err != nil {
		return nil, fmt.Errorf("speculate: draft model: %w", err)
	}
	if log == nil {
		log = slog.Default()
	}
	return &modelDrafter{m: m, vocab: cfg.Vocab, ctx: cfg.Context, log: log, stage: st}, nil
}

// OpenModel opens the draft model file at path, checks that it shares the
// vocabulary of target (the ring model's file that carries the tokenizer:
// its embedding blob) and returns a drafter over it (NewModel). workers is
// the goroutines of a matrix product, 0 for GOMAXPROCS. Close unmaps the
// file.
func OpenModel(path string, target *gguf.File, workers int, log *slog.Logger) (Prefetcher, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("speculate: draft model: %w", err)
	}
	d, err := func() (*modelDrafter, error) {
		if err := SameVocabulary(target, f); err != nil {
			return nil, err
		}
		m, err := engine.Load(f, workers)
		if err != nil {
			return nil, err
		}
		d, err := newModelDrafter(m, log)
		if err != nil {
			return nil, err
		}
		toks, _ := f.Metadata.Strings(tokenizer.KeyTokens)
		if rows := m.Config().Vocab; rows < len(toks) {
			// Every token of the shared vocabulary can come up in a
			// history: each needs its embedding row.
			return nil, fmt.Errorf("its embedding has %d rows for a vocabulary of %d tokens", rows, len(toks))
		}
		d.vocab = min(d.vocab, len(toks))
		return d, nil
	}()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("draft model %s: %w", path, err)
	}
	d.close = f.Close
	return d, nil
}

// SameVocabulary reports whether two model files have the same vocabulary
// (tokenizer.ggml.tokens, token for token), as a draft model and the ring
// model it drafts for must: drafts travel as token ids. The error names
// the first difference by index and the sizes, not the token strings.
func SameVocabulary(target, draft *gguf.File) error {
	if target == nil || draft == nil {
		return errors.New("speculate: vocabulary check: missing file")
	}
	a, ok := target.Metadata.Strings(tokenizer.KeyTokens)
	if !ok || len(a) == 0 {
		return fmt.Errorf("speculate: the ring model's file has no %s: its vocabulary cannot be compared", tokenizer.KeyTokens)
	}
	b, ok := draft.Metadata.Strings(tokenizer.KeyTokens)
	if !ok || len(b) == 0 {
		return fmt.Errorf("speculate: the draft model has no %s: use a GGUF model with a tokenizer, of the ring model's family", tokenizer.KeyTokens)
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Errorf("speculate: the draft model's vocabulary differs from the ring model's at token %d (%d and %d tokens): use a draft model of the same tokenizer", i, len(b), len(a))
		}
	}
	if len(a) != len(b) {
		return fmt.Errorf("speculate: the draft model's vocabulary has %d tokens, the ring model's %d (the first %d agree): use a draft model of the same tokenizer", len(b), len(a), min(len(a), len(b)))
	}
	return nil
}

// Draft returns the tokens the model generates greedily after history, at
// most n. It first settles a prefetch: one whose history and drafted
// tokens agree with history is waited for and its work reused, any other
// is cancelled (and waited for, so the cache is consistent).
func (d *modelDrafter) Draft(ctx context.Context, history []int32, n int) ([]int32, error) {
	if err := d.settle(ctx, history); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stage == nil {
		return nil, errors.New("speculate: draft model: closed")
	}
	got, err := d.draft(ctx, history, n, nil)
	if err != nil {
		return nil, fmt.Errorf("speculate: draft model: %w", err)
	}
	return slices.Clone(got), nil
}

// settle takes the pending prefetch, if any, and waits for it to end: at
// once when it cannot serve history (cancelled), else when it is done.
func (d *modelDrafter) settle(ctx context.Context, history []int32) error {
	d.pmu.Lock()
	pf := d.pf
	d.pf = nil
	d.pmu.Unlock()
	if pf == nil {
		return nil
	}
	for {
		if !pf.serves(history) {
			pf.cancel()
		}
		select {
		case <-pf.done:
			return nil
		case <-pf.progress:
		case <-ctx.Done():
			pf.cancel()
			<-pf.done
			return ctx.Err()
		}
	}
}

// serves reports whether history agrees with the prefetch: it is the
// prefetch's history, or extends it by tokens that equal those drafted so
// far (tokens past them are not known yet: the prefetch still may draft
// them). A strict prefix does not: the drafts after it would differ.
func (pf *prefetch) serves(history []int32) bool {
	if len(history) < len(pf.history) || !slices.Equal(history[:len(pf.history)], pf.history) {
		return false
	}
	extra := history[len(pf.history):]
	pf.mu.Lock()
	defer pf.mu.Unlock()
	k := min(len(extra), len(pf.got))
	return slices.Equal(extra[:k], pf.got[:k])
}

// Prefetch starts drafting n tokens after history in the background (see
// Prefetcher); a prefetch still running is cancelled.
func (d *modelDrafter) Prefetch(history []int32, n int) {
	if n <= 0 || len(history) == 0 {
		return
	}
	d.pmu.Lock()
	defer d.pmu.Unlock()
	if d.closed {
		return
	}
	if d.pf != nil {
		d.pf.cancel() // it ends promptly; the new one waits for the lock
	}
	ctx, cancel := context.WithCancel(context.Background())
	pf := &prefetch{history: slices.Clone(history), cancel: cancel, done: make(chan struct{}), progress: make(chan struct{}, 1)}
	d.pf = pf
	d.wg.Add(1)
	go d.runPrefetch(ctx, pf, n)
}

func (d *modelDrafter) runPrefetch(ctx context.Context, pf *prefetch, n int) {
	defer d.wg.Done()
	defer close(pf.done)
	defer pf.cancel()
	d.mu.Lock()
	defer d.mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			d.log.Error("draft model prefetch panicked; its cache is dropped", "panic", p)
			d.reset()
		}
	}()
	if d.stage == nil || ctx.Err() != nil {
		return
	}
	// An error (a cancel, mostly) leaves a consistent state for the Draft
	// that follows, which recomputes what is missing and reports its own.
	_, _ = d.draft(ctx, pf.history, n, func(t int32) {
		pf.mu.Lock()
		pf.got = append(pf.got, t)
		pf.mu.Unlock()
		select {
		case pf.progress <- struct{}{}:
		default:
		}
	})
}

// Reset forgets the sequence the drafter holds and stops a prefetch, so a
// job neither drafts from an earlier job's tokens nor runs faster for
// them (a shared prefix would be a timing channel between requests).
func (d *modelDrafter) Reset() {
	_ = d.settle(context.Background(), nil) // no history: a prefetch is cancelled
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reset()
}

// reset forgets the cache: the state after a panic is not trusted.
func (d *modelDrafter) reset() {
	if d.stage != nil {
		_ = d.stage.Truncate(0)
	}
	d.toks, d.own = d.toks[:0], 0
}

// Close stops a prefetch, waits for it, and frees the cache (and the file
// OpenModel opened). Draft fails afterwards.
func (d *modelDrafter) Close() error {
	d.pmu.Lock()
	pf := d.pf
	d.pf, d.closed = nil, true
	d.pmu.Unlock()
	if pf != nil {
		pf.cancel() // those it replaced were cancelled then
	}
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stage == nil {
		return nil
	}
	d.stage, d.toks = nil, nil
	if d.close != nil {
		return d.close()
	}
	return nil
}

// draft makes toks hold history followed by up to n greedy tokens and
// returns those tokens (a view of toks: copy before unlocking). onToken,
// if set, sees each token as it is drafted. d.mu is held.
func (d *modelDrafter) draft(ctx context.Context, history []int32, n int, onToken func(int32)) ([]int32, error) {
	L := len(history)
	if n <= 0 || L == 0 || L >= d.ctx {
		return nil, nil
	}
	p := commonPrefix(history, d.toks)
	if p == L && d.own <= L {
		// toks[L:] already are greedy choices after history.
		if onToken != nil {
			for _, t := range d.toks[L:min(len(d.toks), L+n)] {
				onToken(t)
			}
		}
	} else {
		if err := d.stage.Truncate(min(p, d.stage.Len())); err != nil {
			return nil, err
		}
		d.toks = append(d.toks[:min(p, len(d.toks))], history[p:]...)
		d.own = L
	}
	want := min(L+n, d.ctx)
	for len(d.toks) < want {
		t, err := d.next(ctx)
		if err != nil {
			return nil, err
		}
		if int(t) >= d.vocab {
			break // an id the ring model does not have: no draft past it
		}
		d.toks = append(d.toks, t)
		if onToken != nil {
			onToken(t)
		}
	}
	return d.toks[L:min(L+n, len(d.toks))], nil
}

// next runs toks' tokens missing from the cache (at least the last one,
// whose logits are needed) and returns the greedy choice after toks.
func (d *modelDrafter) next(ctx context.Context) (int32, error) {
	if d.stage.Len() >= len(d.toks) {
		if err := d.stage.Truncate(len(d.toks) - 1); err != nil {
			return 0, err
		}
	}
	for {
		from := d.stage.Len()
		to := min(from+maxChunk, len(d.toks))
		h, err := d.m.Embed(d.toks[from:to], from)
		if err != nil {
			return 0, err
		}
		if err := d.stage.Forward(ctx, h); err != nil {
			return 0, err
		}
		if to < len(d.toks) {
			continue
		}
		last := &engine.Hidden{Pos: to - 1, Tokens: 1, Dim: h.Dim, Data: h.Row(h.Tokens - 1)}
		lg, err := d.m.Head(last)
		if err != nil {
			return 0, err
		}
		return engine.Argmax(lg.Data), nil
	}
}

func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
