package engine_test

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/engine"
)

// splits returns every way to cut layers 0..n into 1 to 4 non-empty
// contiguous ranges, as boundary lists [0, ..., n].
func splits(n int) [][]int {
	var out [][]int
	var rec func(bounds []int)
	rec = func(bounds []int) {
		last := bounds[len(bounds)-1]
		if last == n {
			out = append(out, slices.Clone(bounds))
			return
		}
		if len(bounds) == 4 { // 3 ranges so far: the 4th takes the rest
			out = append(out, append(slices.Clone(bounds), n))
			return
		}
		for b := last + 1; b <= n; b++ {
			rec(append(bounds, b))
		}
	}
	rec([]int{0})
	return out
}

// run feeds the prompt then single tokens through the split pipeline,
// passing hidden states between stages through the wire form, and
// returns the logits of every step.
func runSplit(t *testing.T, m *engine.Model, bounds []int, dt engine.DType, steps [][]int32) [][]float32 {
	t.Helper()
	ctx := context.Background()
	p, err := m.NewPipeline(bounds)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]float32
	for _, toks := range steps {
		h, err := m.Embed(toks, p.Len())
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range p.Stages {
			if i > 0 { // crossing to another worker
				wire, err := engine.EncodeHidden(h, dt)
				if err != nil {
					t.Fatal(err)
				}
				sent := engine.HashHidden(wire)
				if h, err = engine.DecodeHidden(wire); err != nil {
					t.Fatal(err)
				}
				again, _ := engine.EncodeHidden(h, dt)
				if engine.HashHidden(again) != sent {
					t.Fatalf("re-encoding decoded states changes the receipt hash")
				}
			}
			if err := s.Forward(ctx, h); err != nil {
				t.Fatal(err)
			}
		}
		lg, err := m.Head(h)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, lg.Data)
	}
	return out
}

func TestSplitIsExact(t *testing.T) {
	cases := []struct {
		name string
		o    testmodel.Options
	}{
		{"f32-llama", testmodel.Options{Seed: 3, Layers: 5, KVHeads: 2}},
		{"q8_0-qwen2", testmodel.Options{Seed: 3, Layers: 5, Type: testmodel.Q8_0, Arch: "qwen2"}},
	}
	if testing.Short() {
		cases = cases[:1]
	}
	steps := [][]int32{{1, 300, 301, 302, 303}, {304}, {305}, {306}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := load(t, c.o)
			want := runSplit(t, m, nil, engine.F32, steps)
			all := splits(c.o.Layers)
			if len(all) != 1+4+6+4 { // C(4,0)+C(4,1)+C(4,2)+C(4,3)
				t.Fatalf("%d splits of 5 layers", len(all))
			}
			for _, b := range all {
				got := runSplit(t, m, b, engine.F32, steps)
				for i := range want {
					if !bitsEqual(got[i], want[i]) {
						t.Fatalf("split %v step %d: logits differ from the unsplit run", b, i)
					}
				}
			}
			// F16 on the wire is lossy by design: close, not equal.
			got := runSplit(t, m, []int{0, 2, 5}, engine.F16, steps)
			var worst float64
			for i := range want {
				for j := range want[i] {
					worst = max(worst, math.Abs(float64(got[i][j]-want[i][j])))
				}
			}
			if worst > 0.5 {
				t.Errorf("F16 wire: logits off by up to %g", worst)
			}
			t.Logf("F16 wire: largest logit difference %g", worst)
		})
	}
}

func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestBatchEqualsSteps: a batch of positions yields bit for bit the
// logits of the same positions fed one at a time.
func TestBatchEqualsSteps(t *testing.T) {
	m := load(t, testmodel.Options{Seed: 4, KVHeads: 2, Type: testmodel.F16})
	toks := []int32{1, 300, 310, 320, 329, 305}
	ctx := context.Background()
	batch, _ := m.NewPipeline(nil)
	lb, err := batch.Step(ctx, toks)
	if err != nil {
		t.Fatal(err)
	}
	single, _ := m.NewPipeline([]int{0, 1, 2})
	for i, tok := range toks {
		ls, err := single.Step(ctx, []int32{tok})
		if err != nil {
			t.Fatal(err)
		}
		if !bitsEqual(ls.Row(0), lb.Row(i)) {
			t.Fatalf("position %d: batched logits differ from single-step logits", i)
		}
	}
}

// TestVerify: verifying k drafts in one pass gives the greedy tokens k
// single steps give, and after a rejection the cache continues exactly
// as if the rejected drafts had never been seen.
func TestVerify(t *testing.T) {
	m := load(t, testmodel.Options{Seed: 5, KVHeads: 2, Layers: 3})
	ctx := context.Background()
	prompt := []int32{1, 300, 301, 302}

	ref, _ := m.NewPipeline(nil)
	want := greedy(t, ref, prompt, 12) // the reference continuation

	for _, k := range []int{1, 3, 5} {
		for _, wrongAt := range []int{-1, 0, 2} { // -1: every draft right
			if wrongAt >= k {
				continue
			}
			p, _ := m.NewPipeline([]int{0, 1, 3})
			lg, err := p.Step(ctx, prompt)
			if err != nil {
				t.Fatal(err)
			}
			pending := engine.Argmax(lg.Row(lg.Tokens - 1))
			var got []int32
			for len(got) < 10 {
				got = append(got, pending)
				draft := slices.Clone(want[len(got):min(len(got)+k, len(want))])
				if wrongAt >= 0 && wrongAt < len(draft) {
					draft[wrongAt] = 259 // the "▁" piece: its output row is zero, never greedy
				}
				n, next, err := p.Verify(ctx, pending, draft)
				if err != nil {
					t.Fatal(err)
				}
				wantN := len(draft)
				if wrongAt >= 0 && wrongAt < len(draft) {
					wantN = wrongAt
				}
				if n != wantN {
					t.Fatalf("k=%d wrong at %d: accepted %d drafts, want %d", k, wrongAt, n, wantN)
				}
				got = append(got, draft[:n]...)
				if p.Len() != len(prompt)+len(got) {
					t.Fatalf("cache holds %d positions after verify, want %d", p.Len(), len(prompt)+len(got))
				}
				pending = next
			}
			if !slices.Equal(got[:10], want[:10]) {
				t.Fatalf("k=%d wrong at %d: verified tokens %v, single steps %v", k, wrongAt, got[:10], want[:10])
			}
			// The cache after rollbacks equals a cache that never saw the
			// rejected drafts: the next logits match a fresh run bit for bit.
			fresh, _ := m.NewPipeline(nil)
			seq := append(slices.Clone(prompt), got...)
			lf, err := fresh.Step(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			lp, err := p.Step(ctx, []int32{pending})
			if err != nil {
				t.Fatal(err)
			}
			if engine.Argmax(lf.Row(lf.Tokens-1)) != pending {
				t.Fatalf("pending token differs from a fresh run's")
			}
			lf2, _ := fresh.Step(ctx, []int32{pending})
			if !bitsEqual(lp.Row(0), lf2.Row(0)) {
				t.Fatalf("k=%d wrong at %d: logits after rollback differ from a run that never saw the rejected drafts", k, wrongAt)
			}
		}
	}
}

func TestTruncateErrors(t *testing.T) {
	m := load(t, testmodel.Options{Seed: 1})
	s, err := m.NewStage(0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if s.Truncate(1) == nil {
		t.Error("truncate past the cache: no error")
	}
	if _, err := m.NewStage(1, 1); err == nil {
		t.Error("empty range: no error")
	}
	if _, err := m.NewStage(0, 3); err == nil {
		t.Error("range past the last layer: no error")
	}
	h, _ := m.Embed([]int32{1}, 3)
	if s.Forward(context.Background(), h) == nil {
		t.Error("hidden states at the wrong position: no error")
	}
	if _, err := m.Embed([]int32{1 << 20}, 0); err == nil {
		t.Error("token outside the vocabulary: no error")
	}
}

// TestNext: Next's logits are the last row of Step's, bit for bit.
func TestNext(t *testing.T) {
	m := load(t, testmodel.Options{Seed: 2, KVHeads: 2})
	ctx := context.Background()
	a, _ := m.NewPipeline(nil)
	b, _ := m.NewPipeline([]int{0, 1, 2})
	for _, toks := range [][]int32{{1, 300, 301}, {302}, {303, 304}} {
		lg, err := a.Step(ctx, toks)
		if err != nil {
			t.Fatal(err)
		}
		next, err := b.Next(ctx, toks)
		if err != nil {
			t.Fatal(err)
		}
		if !bitsEqual(next, lg.Row(lg.Tokens-1)) {
			t.Fatal("Next differs from Step's last row")
		}
	}
}
