package engine

import (
	"context"
	"fmt"
)

// Pipeline is a model split into stages that together cover all its
// layers in order; each stage may live in another process, in which
// case the hidden states travel between them in the wire form. This
// in-process form is what the built-in backend and the tests use.
type Pipeline struct {
	Model  *Model
	Stages []*Stage
}

// NewPipeline makes stages for the layer boundaries given: bounds
// [b0=0, b1, ..., bn=Layers] yields stages [b0,b1), [b1,b2), ...; nil
// means one stage for the whole model.
func (m *Model) NewPipeline(bounds []int) (*Pipeline, error) {
	if bounds == nil {
		bounds = []int{0, m.cfg.Layers}
	}
	if len(bounds) < 2 || bounds[0] != 0 || bounds[len(bounds)-1] != m.cfg.Layers {
		return nil, fmt.Errorf("engine: split %v does not cover layers 0..%d", bounds, m.cfg.Layers)
	}
	p := &Pipeline{Model: m}
	for i := 0; i+1 < len(bounds); i++ {
		s, err := m.NewStage(bounds[i], bounds[i+1])
		if err != nil {
			return nil, err
		}
		p.Stages = append(p.Stages, s)
	}
	return p, nil
}

// Len is the number of cached positions.
func (p *Pipeline) Len() int { return p.Stages[0].Len() }

// Step runs tokens (continuing the cached sequence) through every stage
// and returns the logits of every position.
func (p *Pipeline) Step(ctx context.Context, tokens []int32) (*Logits, error) {
	h, err := p.forward(ctx, tokens)
	if err != nil {
		return nil, err
	}
	return p.Model.Head(h)
}

// forward embeds tokens and runs every stage over them.
func (p *Pipeline) forward(ctx context.Context, tokens []int32) (*Hidden, error) {
	h, err := p.Model.Embed(tokens, p.Len())
	if err != nil {
		return nil, err
	}
	for i, s := range p.Stages {
		if err := s.Forward(ctx, h); err != nil {
			for _, done := range p.Stages[:i] {
				_ = done.Truncate(h.Pos) // keep every stage at the same length
			}
			return nil, err
		}
	}
	return h, nil
}

// Next runs tokens like Step but applies the head to the last position
// only, and returns its logits: what generation needs, without the
// output matrix product for every prompt position.
func (p *Pipeline) Next(ctx context.Context, tokens []int32) ([]float32, error) {
	h, err := p.forward(ctx, tokens)
	if err != nil {
		return nil, err
	}
	last := &Hidden{Pos: h.Pos + h.Tokens - 1, Tokens: 1, Dim: h.Dim, Data: h.Row(h.Tokens - 1)}
	lg, err := p.Model.Head(last)
	if err != nil {
		return nil, err
	}
	return lg.Data, nil
}

// Truncate rolls every stage back to n positions.
func (p *Pipeline) Truncate(n int) error {
	for _, s := range p.Stages {
		if err := s.Truncate(n); err != nil {
			return err
		}
	}
	return nil
}

// Verify checks drafted tokens in one batched pass. pending is the last
// accepted token, not yet in the cache; draft are the proposed tokens
// after it. The batch [pending, draft...] runs once; draft[i] is accepted
// while it equals the greedy choice after the previous position. The
// cache is then rolled back to hold pending and the accepted drafts
// only. It returns how many drafts were accepted and the greedy token
// that follows them (the next pending token).
func (p *Pipeline) Verify(ctx context.Context, pending int32, draft []int32) (accepted int, next int32, err error) {
	start := p.Len()
	lg, err := p.Step(ctx, append([]int32{pending}, draft...))
	if err != nil {
		return 0, 0, err
	}
	for accepted < len(draft) && Argmax(lg.Row(accepted)) == draft[accepted] {
		accepted++
	}
	next = Argmax(lg.Row(accepted))
	if err := p.Truncate(start + 1 + accepted); err != nil {
		return 0, 0, err
	}
	return accepted, next, nil
}

// Argmax is the greedy choice: the highest score, the lowest id on ties
// (as llama.cpp's greedy sampler).
func Argmax(logits []float32) int32 {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return int32(best)
}
