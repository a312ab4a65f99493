package speculate_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/sample"
	"github.com/c0mpute/c0mpute/workerd/speculate"
)

// plainReply decodes n tokens after prompt one step at a time: the
// reference a ring without speculation produces.
func plainReply(t *testing.T, m *engine.Model, prompt []int32, n int, p sample.Params) []int32 {
	t.Helper()
	pipe, err := m.NewPipeline([]int{0, 1, m.Config().Layers}) // two stages, as a ring
	if err != nil {
		t.Fatal(err)
	}
	smp := sampler(t, p)
	row, err := pipe.Next(context.Background(), prompt)
	if err != nil {
		t.Fatal(err)
	}
	var reply []int32
	for {
		x := smp.Sample(row)
		reply = append(reply, x)
		if len(reply) == n {
			return reply
		}
		if row, err = pipe.Next(context.Background(), []int32{x}); err != nil {
			t.Fatal(err)
		}
	}
}

// specReply decodes n tokens after prompt as a speculating ring does:
// per loop the Controller picks γ, the drafter drafts (a Prefetcher also
// drafts ahead while the loop is "in flight"), the batch [pending,
// drafts...] runs through the stages, Accept picks the output, and every
// stage rolls back past the rejected rows. It returns the reply, the
// loops it took and the drafts accepted.
func specReply(t *testing.T, m *engine.Model, prompt []int32, n int, p sample.Params, d speculate.Drafter) (reply []int32, loops, accepted int) {
	t.Helper()
	ctx := context.Background()
	pipe, err := m.NewPipeline([]int{0, 1, m.Config().Layers})
	if err != nil {
		t.Fatal(err)
	}
	smp := sampler(t, p)
	row, err := pipe.Next(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	reply = []int32{smp.Sample(row)}
	ctl := speculate.NewController(speculate.MaxGamma)
	pf, _ := d.(speculate.Prefetcher)
	for len(reply) < n {
		loops++
		history := append(slices.Clone(prompt), reply...)
		gamma := min(ctl.Gamma(), n-len(reply)-1)
		var drafts []int32
		if gamma > 0 {
			if drafts, err = d.Draft(ctx, history, gamma); err != nil {
				t.Fatal(err)
			}
			ctl.ObserveDraft(len(drafts), time.Duration(len(drafts))*time.Millisecond)
		}
		if pf != nil {
			pf.Prefetch(append(slices.Clone(history), drafts...), 4)
		}
		start := pipe.Len() // the pending token (reply's last) is not cached
		lg, err := pipe.Step(ctx, append([]int32{reply[len(reply)-1]}, drafts...))
		if err != nil {
			t.Fatal(err)
		}
		out, err := speculate.Accept(smp, lg, drafts)
		if err != nil {
			t.Fatal(err)
		}
		if err := pipe.Truncate(start + len(out)); err != nil { // pending and the accepted drafts
			t.Fatal(err)
		}
		accepted += len(out) - 1
		reply = append(reply, out...)
		// A synthetic loop time: 50 ms of hops and 2 ms per row.
		ctl.Observe(len(drafts), len(out)-1, 50*time.Millisecond+time.Duration(len(drafts)+1)*2*time.Millisecond)
	}
	if pf != nil {
		if err := pf.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return reply[:n], loops, accepted
}

// Speculation changes how many loops a reply takes, never its tokens: on
// a real model split in two stages, sampled and greedy replies decoded
// through drafts (lookup in a prediction, the same model as a draft
// model, another model of the same vocabulary) and Accept are token for
// token the replies decoded one step at a time with the same seed.
func TestSpeculativeDecodingEqualsPlain(t *testing.T) {
	const n = 120
	o := testmodel.Options{Seed: 21, Layers: 2}
	m := load(t, o)
	other := load(t, testmodel.Options{Seed: 22, Layers: 1})
	words := wordTokens(o)
	r := rand.New(rand.NewPCG(21, 21))
	prompt := randomTokens(r, words, 12)
	for _, p := range []sample.Params{
		{Temperature: 0},
		{Temperature: 0.3, Seed: 5},
		{Temperature: 0.8, TopK: 10, Seed: 6},
		{Temperature: 1, TopP: 0.9, MinP: 0.05, Seed: 7},
	} {
		plain := plainReply(t, m, prompt, n, p)
		drafters := []struct {
			name string
			make func() speculate.Drafter
		}{
			{"lookup in a prediction", func() speculate.Drafter {
				pred := slices.Clone(plain[10:100]) // most of the reply, with edits
				for i := 7; i < len(pred); i += 13 {
					pred[i] = words[(i*7)%len(words)]
				}
				return speculate.NewLookup(pred)
			}},
			{"the model itself", func() speculate.Drafter {
				d, err := speculate.NewModel(m, nil)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}},
			{"another model", func() speculate.Drafter {
				d, err := speculate.NewModel(other, nil)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}},
		}
		for _, dr := range drafters {
			spec, loops, accepted := specReply(t, m, prompt, n, p, dr.make())
			if i := firstDiff(spec, plain); i >= 0 {
				t.Fatalf("%+v, %s: the speculative reply differs from plain decoding at token %d", p, dr.name, i)
			}
			t.Logf("%+v, %s: %d tokens in %d loops, %d drafts accepted", p, dr.name, n, loops, accepted)
			if dr.name != "another model" && accepted == 0 {
				t.Errorf("%+v, %s: no draft accepted: the test exercised no speculation", p, dr.name)
			}
		}
	}
}

func firstDiff(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
