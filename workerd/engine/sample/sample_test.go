package sample_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/engine/sample"
)

func mustNew(t testing.TB, p sample.Params) *sample.Sampler {
	t.Helper()
	s, err := sample.New(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func randomLogits(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	l := make([]float32, n)
	for i := range l {
		l[i] = float32(r.NormFloat64() * 3)
	}
	return l
}

func TestGreedy(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	cases := []struct {
		logits []float32
		want   int32
	}{
		{[]float32{0.1, 3, 2}, 1},
		{[]float32{5, 5, 1}, 0}, // ties: the lowest id
		{[]float32{-1, -1, -0.5}, 2},
		{[]float32{nan, 1, nan}, 1},
		{[]float32{1, inf, 2}, 1},
		{[]float32{nan}, 0},
		{nil, -1},
	}
	for _, temp := range []float32{0, -1} {
		s := mustNew(t, sample.Params{Temperature: max(temp, 0), TopK: 1})
		for _, c := range cases {
			if got := s.Sample(c.logits); got != c.want {
				t.Errorf("Sample(%v) = %d, want %d", c.logits, got, c.want)
			}
			if got := sample.Argmax(c.logits); got != c.want {
				t.Errorf("Argmax(%v) = %d, want %d", c.logits, got, c.want)
			}
		}
	}
}

// TestSeedDeterminism: one seed gives one sequence, whatever else runs;
// another seed gives another.
func TestSeedDeterminism(t *testing.T) {
	p := sample.Params{Temperature: 1, TopK: 50, TopP: 0.95, Seed: 42}
	run := func(p sample.Params) []int32 {
		s := mustNew(t, p)
		var out []int32
		for i := range 200 {
			out = append(out, s.Sample(randomLogits(uint64(i), 1000)))
		}
		return out
	}
	a := run(p)
	// Interleave another sampler: no shared state.
	other := mustNew(t, sample.Params{Temperature: 1, Seed: 7})
	other.Sample(randomLogits(99, 1000))
	if b := run(p); !slices.Equal(a, b) {
		t.Fatal("same seed, different tokens")
	}
	p.Seed = 43
	if c := run(p); slices.Equal(a, c) {
		t.Fatal("different seeds, same 200 tokens")
	}
}

// TestFilters: tokens outside top-k / top-p / min-p are never drawn, and
// the frequencies follow the softmax.
func TestFilters(t *testing.T) {
	// probabilities at temperature 1: softmax of log(p) = p
	probs := []float64{0.5, 0.25, 0.15, 0.07, 0.03}
	logits := make([]float32, len(probs))
	for i, p := range probs {
		logits[i] = float32(math.Log(p))
	}
	cases := []struct {
		name    string
		p       sample.Params
		allowed []int32
	}{
		{"all", sample.Params{Temperature: 1}, []int32{0, 1, 2, 3, 4}},
		{"top-k 2", sample.Params{Temperature: 1, TopK: 2}, []int32{0, 1}},
		{"top-p 0.7", sample.Params{Temperature: 1, TopP: 0.7}, []int32{0, 1}},      // 0.5 < 0.7 <= 0.75
		{"top-p 0.76", sample.Params{Temperature: 1, TopP: 0.76}, []int32{0, 1, 2}}, // needs the third
		{"min-p 0.2", sample.Params{Temperature: 1, MinP: 0.2}, []int32{0, 1, 2}},   // >= 0.1
		{"top-k 3 top-p 0.6", sample.Params{Temperature: 1, TopK: 3, TopP: 0.6}, []int32{0, 1}},
	}
	const n = 20000
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.p.Seed = 1
			s := mustNew(t, c.p)
			counts := make([]int, len(probs))
			for range n {
				counts[s.Sample(logits)]++
			}
			var mass float64
			for _, id := range c.allowed {
				mass += probs[id]
			}
			for id, k := range counts {
				if !slices.Contains(c.allowed, int32(id)) {
					if k != 0 {
						t.Errorf("token %d drawn %d times, outside the filter", id, k)
					}
					continue
				}
				want := probs[id] / mass * n
				// 5 standard deviations of a binomial count.
				if sd := math.Sqrt(want * (1 - want/n)); math.Abs(float64(k)-want) > 5*sd {
					t.Errorf("token %d drawn %d times, expected about %.0f", id, k, want)
				}
			}
		})
	}
}

// TestTemperature: a low temperature concentrates the draws on the best
// token, a high one spreads them.
func TestTemperature(t *testing.T) {
	logits := []float32{2, 1, 0}
	share := func(temp float32) float64 {
		s := mustNew(t, sample.Params{Temperature: temp, Seed: 3})
		best := 0
		for range 5000 {
			if s.Sample(logits) == 0 {
				best++
			}
		}
		return float64(best) / 5000
	}
	low, one, high := share(0.1), share(1), share(10)
	// exact shares: ~1.0, 0.665, ~0.367
	if !(low > 0.99 && math.Abs(one-0.665) < 0.03 && high < 0.42) {
		t.Errorf("best-token share at T=0.1, 1, 10: %.3f %.3f %.3f", low, one, high)
	}
}

func TestSampleLarge(t *testing.T) {
	// A vocabulary-sized draw with top-k uses the partial selection path;
	// it must pick only among the k best.
	logits := randomLogits(5, 150000)
	order := make([]int32, len(logits))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		if logits[a] != logits[b] {
			if logits[a] > logits[b] {
				return -1
			}
			return 1
		}
		return int(a - b)
	})
	best := order[:40]
	s := mustNew(t, sample.Params{Temperature: 2, TopK: 40, Seed: 9})
	for range 100 {
		if id := s.Sample(logits); !slices.Contains(best, id) {
			t.Fatalf("drew %d, not among the 40 best", id)
		}
	}
}

func TestParamsValidation(t *testing.T) {
	nan := float32(math.NaN())
	for _, p := range []sample.Params{
		{Temperature: -1}, {TopK: -1}, {TopP: 1.5}, {TopP: -0.1}, {MinP: 2}, {Temperature: nan}, {TopP: nan},
	} {
		if _, err := sample.New(p); err == nil || !strings.HasPrefix(err.Error(), "sample:") {
			t.Errorf("New(%+v) = %v, want an error", p, err)
		}
	}
}

func TestStopper(t *testing.T) {
	cases := []struct {
		name    string
		stops   []string
		deltas  []string
		emitted []string // per delta
		stopped bool
		flush   string
	}{
		{"no stops", nil, []string{"a", "b"}, []string{"a", "b"}, false, ""},
		{"stop inside a delta", []string{"END"}, []string{"abcENDxyz", "more"}, []string{"abc", ""}, true, ""},
		{"stop across deltas", []string{"END"}, []string{"ab E", "N", "D!"}, []string{"ab ", "", ""}, true, ""},
		{"false start released", []string{"END"}, []string{"ab E", "NX"}, []string{"ab ", "ENX"}, false, ""},
		{"held at the end", []string{"END"}, []string{"abEN"}, []string{"ab"}, false, "EN"},
		{"earliest of several", []string{"xyz", "b"}, []string{"axyzb"}, []string{"a"}, true, ""},
		{"non-ASCII", []string{"日本"}, []string{"こんにちは日", "本語"}, []string{"こんにちは", ""}, true, ""},
		{"empty stop ignored", []string{""}, []string{"abc"}, []string{"abc"}, false, ""},
		{"first completed wins", []string{"0", "100"}, []string{"100"}, []string{"1"}, true, ""},
		{"stop at start", []string{"\n\n"}, []string{"\n", "\nrest"}, []string{"", ""}, true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := sample.NewStopper(c.stops)
			stopped := false
			for i, d := range c.deltas {
				out, st := s.Add(d)
				if out != c.emitted[i] {
					t.Errorf("delta %d %q: emitted %q, want %q", i, d, out, c.emitted[i])
				}
				stopped = st
			}
			if stopped != c.stopped || s.Stopped() != c.stopped {
				t.Errorf("stopped = %v, want %v", stopped, c.stopped)
			}
			if f := s.Flush(); f != c.flush {
				t.Errorf("flush %q, want %q", f, c.flush)
			}
		})
	}
}

func BenchmarkSample(b *testing.B) {
	logits := randomLogits(1, 128256)
	for _, p := range []sample.Params{
		{},
		{Temperature: 0.8, TopK: 40, TopP: 0.9},
		{Temperature: 0.8, TopP: 0.9},
	} {
		name := "greedy"
		if p.Temperature > 0 {
			name = "topk"
			if p.TopK == 0 {
				name = "topp-only"
			}
		}
		b.Run(name, func(b *testing.B) {
			s := mustNew(b, p)
			for b.Loop() {
				s.Sample(logits)
			}
		})
	}
}
