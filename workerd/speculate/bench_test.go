package speculate_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/speculate"
)

// text is n tokens of a 32k vocabulary that read somewhat like text: a
// Zipf-distributed word stream with whole phrases repeated now and then,
// so lookups both hit and miss.
func text(seed uint64, n int) []int32 {
	r := rand.New(rand.NewPCG(seed, seed))
	z := rand.NewZipf(r, 1.1, 2, 31999)
	out := make([]int32, 0, n)
	for len(out) < n {
		if len(out) > 64 && r.IntN(8) == 0 {
			at := r.IntN(len(out) - 32)
			out = append(out, out[at:at+4+r.IntN(28)]...)
			continue
		}
		out = append(out, int32(z.Uint64()))
	}
	return out[:n]
}

// BenchmarkLookup: drafting by lookup over a 32k-token history.
//
//   - step: the driver's pattern, a history that grows by 1 to 4 tokens
//     between calls (8 drafts wanted), with a 4k-token prediction;
//   - first-call: the first Draft on a 32k-token prompt (the history is
//     indexed whole);
//   - new-prediction: NewLookup of a 32k-token prediction.
func BenchmarkLookup(b *testing.B) {
	const n = 32 << 10
	base := text(1, n)
	more := text(2, 1<<16)
	pred := text(3, 4<<10)
	b.Run("step", func(b *testing.B) {
		ctx := context.Background()
		d := speculate.NewLookup(pred)
		h := slices.Clone(base)
		next := 0
		if _, err := d.Draft(ctx, h, 8); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if len(h) >= 2*n {
				b.StopTimer()
				d = speculate.NewLookup(pred)
				h = slices.Clone(base)
				if _, err := d.Draft(ctx, h, 8); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			k := 1 + i%4
			h = append(h, more[next:next+k]...)
			next = (next + k) % (len(more) - 4)
			if _, err := d.Draft(ctx, h, 8); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("first-call", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := speculate.NewLookup(nil).Draft(context.Background(), base, 8); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("new-prediction", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			speculate.NewLookup(base)
		}
	})
}

// BenchmarkModelDraft: drafting 8 tokens with a generated draft model
// (hidden size 256, 4 layers, Q8_0), matrix products on one core.
//
//   - step: the driver's pattern: the history grows by some of the last
//     drafts and one other token, so each call runs the new positions and
//     8 greedy steps;
//   - prompt: the first call, on a 256-token prompt (a batched prefill).
func BenchmarkModelDraft(b *testing.B) {
	o := testmodel.Options{Seed: 1, Embedding: 256, Layers: 4, Heads: 4, FeedForward: 512, Context: 1024, Type: testmodel.Q8_0}
	m := load(b, o)
	words := wordTokens(o)
	prompt := randomTokens(rand.New(rand.NewPCG(1, 1)), words, 256)
	ctx := context.Background()
	run := func(b *testing.B, grow func(h, drafts []int32, i int) []int32) {
		d, err := speculate.NewModel(m, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		h := slices.Clone(prompt[:32])
		drafts, err := d.Draft(ctx, h, 8)
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := range b.N {
			h = grow(h, drafts, i)
			if len(h) > 900 {
				h = h[:32] // a rewind: the cache keeps the prefix
			}
			if drafts, err = d.Draft(ctx, h, 8); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/8, "ns/draft")
	}
	b.Run("step", func(b *testing.B) {
		run(b, func(h, drafts []int32, i int) []int32 {
			h = append(h, drafts[:i%len(drafts)]...)
			return append(h, words[i%len(words)])
		})
	})
	b.Run("prompt", func(b *testing.B) {
		for range b.N {
			d, err := speculate.NewModel(m, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := d.Draft(ctx, prompt, 8); err != nil {
				b.Fatal(err)
			}
			_ = d.Close()
		}
	})
}
