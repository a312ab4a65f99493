package engine_test

import (
	"context"
	"math"
	"testing"

	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/engine"
)

// load generates a test model and loads it.
func load(t testing.TB, o testmodel.Options) *engine.Model {
	t.Helper()
	m, err := engine.Load(parse(t, o), 2)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// greedy generates n tokens after prompt, one step at a time.
func greedy(t testing.TB, p *engine.Pipeline, prompt []int32, n int) []int32 {
	out, _ := greedyMargin(t, p, prompt, n)
	return out
}

// margin is the gap between the best and second-best logits.
func margin(row []float32) float32 {
	b, s := float32(math.Inf(-1)), float32(math.Inf(-1))
	for _, v := range row {
		if v > b {
			b, s = v, b
		} else if v > s {
			s = v
		}
	}
	return b - s
}

// greedyMargin is greedy, also returning the smallest margin met.
func greedyMargin(t testing.TB, p *engine.Pipeline, prompt []int32, n int) ([]int32, float32) {
	t.Helper()
	ctx := context.Background()
	lg, err := p.Step(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	row := lg.Row(lg.Tokens - 1)
	var out []int32
	least := float32(math.Inf(1))
	for len(out) < n {
		next := engine.Argmax(row)
		least = min(least, margin(row))
		out = append(out, next)
		if len(out) == n {
			break
		}
		lg, err = p.Step(ctx, []int32{next})
		if err != nil {
			t.Fatal(err)
		}
		row = lg.Row(0)
	}
	return out, least
}
