package ringmember

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"

	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/workerd/engine"
)

// benchRuns is how many bench frames a probe sends each peer; the peer's
// observed layer time is the least of their round trips less the RTT.
const benchRuns = 3

// benchLayer returns the model's bench layer k (its middle layer,
// len(Layers)/2, which every candidate pulled and keeps open to measure
// itself) and the open model holding it, or false when this member has
// not measured that model.
func (m *Member) benchLayer(h shard.Hash) (*engine.Model, int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	man := m.manifests[h]
	if man == nil {
		return nil, 0, false
	}
	k := len(man.Layers) / 2
	p := m.parts[partKey{h, k, k + 1}]
	if p == nil {
		return nil, 0, false
	}
	return p.Model(), k, true
}

// serveBench answers a peer's bench frame: the Server's BenchFunc.
func (m *Member) serveBench(ctx context.Context, model string, payload []byte) ([]byte, error) {
	var h shard.Hash
	if err := h.UnmarshalText([]byte(model)); err != nil {
		return nil, fmt.Errorf("ringmember: bench: %w", err)
	}
	mod, k, ok := m.benchLayer(h)
	if !ok {
		return nil, fmt.Errorf("%w: model %s", ErrNoBench, h)
	}
	return benchForward(ctx, mod, k, payload)
}

// benchForward runs layer k of model over one token's hidden state, given
// in F32 wire form, at position 0 of a fresh stage, and returns the output
// in the same form. It refuses anything but exactly one token of the
// model's hidden size in F32 at position 0, so a bench costs one layer on
// one token, never more.
func benchForward(ctx context.Context, model *engine.Model, k int, payload []byte) ([]byte, error) {
	dim := model.Config().Embd
	h, err := engine.DecodeHidden(payload)
	if err != nil {
		return nil, fmt.Errorf("ringmember: bench input: %w", err)
	}
	if h.Tokens != 1 || h.Dim != dim || h.Pos != 0 {
		return nil, fmt.Errorf("ringmember: bench input is %d tokens of %d values at position %d; want 1 token of the model's hidden size %d at position 0", h.Tokens, h.Dim, h.Pos, dim)
	}
	canon, err := engine.EncodeHidden(h, engine.F32)
	if err != nil || !bytes.Equal(canon, payload) {
		return nil, fmt.Errorf("ringmember: bench input is not in F32 wire form (%d bytes, want %d)", len(payload), len(canon))
	}
	st, err := model.NewStage(k, k+1)
	if err != nil {
		return nil, fmt.Errorf("ringmember: bench layer %d: %w", k, err)
	}
	if err := st.Forward(ctx, h); err != nil {
		return nil, fmt.Errorf("ringmember: bench layer %d: %w", k, err)
	}
	return engine.EncodeHidden(h, engine.F32)
}

// benchCheck draws benchRuns random one-token hidden states (a fresh
// random stream per call, so a peer cannot replay answers) and computes
// this member's own bench result for each: what a peer's replies must
// equal bit for bit. It returns nil when this member holds no bench layer
// of the model (it then times no one's).
func (m *Member) benchCheck(ctx context.Context, h shard.Hash) (*BenchCheck, error) {
	mod, k, ok := m.benchLayer(h)
	if !ok {
		return nil, nil
	}
	var seed [32]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("ringmember: bench seed: %w", err)
	}
	rng := mrand.New(mrand.NewChaCha8(seed))
	dim := mod.Config().Embd
	b := &BenchCheck{Model: h.String()}
	for range benchRuns {
		hs := &engine.Hidden{Tokens: 1, Dim: dim, Data: make([]float32, dim)}
		for i := range hs.Data {
			hs.Data[i] = rng.Float32()*2 - 1
		}
		in, err := engine.EncodeHidden(hs, engine.F32)
		if err != nil {
			return nil, fmt.Errorf("ringmember: bench input: %w", err)
		}
		want, err := benchForward(ctx, mod, k, in)
		if err != nil {
			return nil, err
		}
		b.Inputs = append(b.Inputs, in)
		b.Want = append(b.Want, want)
	}
	return b, nil
}
