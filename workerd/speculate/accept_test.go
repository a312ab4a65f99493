package speculate_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/sample"
	"github.com/c0mpute/c0mpute/workerd/speculate"
)

// logits makes an engine.Logits of the given rows.
func logits(rows ...[]float32) *engine.Logits {
	lg := &engine.Logits{Tokens: len(rows), Vocab: len(rows[0])}
	for _, r := range rows {
		lg.Data = append(lg.Data, r...)
	}
	return lg
}

func sampler(t testing.TB, p sample.Params) *sample.Sampler {
	t.Helper()
	s, err := sample.New(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// probs is the distribution the sampler draws from under p, computed here
// independently: top-k on the logits, top-p and min-p on their softmax,
// then the softmax at the temperature over what is kept.
func probs(row []float32, p sample.Params) []float64 {
	type c struct {
		id int
		l  float64
	}
	cs := make([]c, len(row))
	for i, l := range row {
		cs[i] = c{i, float64(l)}
	}
	slices.SortStableFunc(cs, func(a, b c) int {
		switch {
		case a.l > b.l:
			return -1
		case a.l < b.l:
			return 1
		}
		return a.id - b.id
	})
	if p.TopK > 0 && p.TopK < len(cs) {
		cs = cs[:p.TopK]
	}
	soft := func(cs []c, temp float64) []float64 {
		out := make([]float64, len(cs))
		var sum float64
		for i, x := range cs {
			out[i] = math.Exp((x.l - cs[0].l) / temp)
			sum += out[i]
		}
		for i := range out {
			out[i] /= sum
		}
		return out
	}
	if p.TopP > 0 && p.TopP < 1 {
		q, sum := soft(cs, 1), 0.0
		for i := range q {
			sum += q[i]
			if sum >= float64(p.TopP) {
				cs = cs[:i+1]
				break
			}
		}
	}
	if p.MinP > 0 {
		q := soft(cs, 1)
		kept := cs[:0:0]
		for i, x := range cs {
			if q[i] >= q[0]*float64(p.MinP) {
				kept = append(kept, x)
			}
		}
		cs = kept
	}
	out := make([]float64, len(row))
	for i, q := range soft(cs, float64(p.Temperature)) {
		out[cs[i].id] = q
	}
	return out
}

// Fixed rows over a vocabulary of 6.
var (
	row0 = []float32{1.2, 0.9, 0.4, 0.1, -0.3, -0.6}
	row1 = []float32{-0.2, 0.5, 1.0, 0.0, 0.3, -0.4}
	row2 = []float32{0.3, -0.1, 0.2, 0.8, 0.0, 0.6}
)

// One draft: it is accepted with probability p(d); the first output token
// is distributed as p whatever d is; given a rejection it is p without d
// renormalised; given an acceptance the next token is distributed as row
// 1's distribution. The sampling filters change p, not the rule.
func TestAcceptOneDraftDistribution(t *testing.T) {
	const trials = 20000
	for _, c := range []struct {
		name  string
		p     sample.Params
		draft int32
	}{
		{"likely draft", sample.Params{Temperature: 1, Seed: 11}, 0},
		{"unlikely draft", sample.Params{Temperature: 1, Seed: 12}, 4},
		{"hot", sample.Params{Temperature: 1.5, Seed: 13}, 2},
		{"cool top-k", sample.Params{Temperature: 0.7, TopK: 4, Seed: 14}, 1},
		{"top-p min-p", sample.Params{Temperature: 0.9, TopP: 0.9, MinP: 0.2, Seed: 15}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			p0, p1 := probs(row0, c.p), probs(row1, c.p)
			smp := sampler(t, c.p)
			lg := logits(row0, row1)
			first := make([]int, 6)
			rejected := make([]int, 6)
			next := make([]int, 6)
			accepted := 0
			for range trials {
				out, err := speculate.Accept(smp, lg, []int32{c.draft})
				if err != nil {
					t.Fatal(err)
				}
				first[out[0]]++
				switch {
				case len(out) == 2 && out[0] == c.draft:
					accepted++
					next[out[1]]++
				case len(out) == 1 && out[0] != c.draft:
					rejected[out[0]]++
				default:
					t.Fatalf("Accept = %v for draft %d: want [draft, x] or [x ≠ draft]", out, c.draft)
				}
			}
			checkRate(t, "acceptances", accepted, trials, p0[c.draft])
			cnt, pr := nonzero(t, first, p0)
			checkDistribution(t, "first token", cnt, pr)
			// Given a rejection: p0 without the draft, renormalised.
			without := slices.Clone(p0)
			without[c.draft] = 0
			normalise(without)
			cnt, pr = nonzero(t, rejected, without)
			checkDistribution(t, "first token after a rejection", cnt, pr)
			cnt, pr = nonzero(t, next, p1)
			checkDistribution(t, "token after an accepted draft", cnt, pr)
		})
	}
}

// nonzero keeps the categories of positive probability for a chi-square
// test, and fails t if a category of probability 0 was ever counted.
func nonzero(t *testing.T, counts []int, p []float64) ([]int, []float64) {
	t.Helper()
	var c []int
	var q []float64
	for i := range counts {
		switch {
		case p[i] > 0:
			c, q = append(c, counts[i]), append(q, p[i])
		case counts[i] > 0:
			t.Fatalf("category %d, of probability 0, was drawn %d times", i, counts[i])
		}
	}
	return c, q
}

func normalise(p []float64) {
	var s float64
	for _, x := range p {
		s += x
	}
	for i := range p {
		p[i] /= s
	}
}

// Two drafts: the output sequence is distributed as the target's, each
// token from its row given the ones before: P(x0) = p0(x0) for x0 ≠ d1,
// P(d1, x1) = p0(d1)·p1(x1) for x1 ≠ d2, P(d1, d2, x2) = p0(d1)·p1(d2)·
// p2(x2). That is p0 ⊗ p1 (⊗ p2) along the acceptance paths.
func TestAcceptTwoDraftsJointDistribution(t *testing.T) {
	const trials = 40000
	p := sample.Params{Temperature: 1, Seed: 21}
	d := []int32{0, 2} // likely under row 0 and row 1
	p0, p1, p2 := probs(row0, p), probs(row1, p), probs(row2, p)
	smp := sampler(t, p)
	lg := logits(row0, row1, row2)
	// Categories: 6 for x0 (d1's slot is unused), 6 for (d1, x1), 6 for
	// (d1, d2, x2); impossible ones are dropped below.
	counts := make([]int, 18)
	want := make([]float64, 18)
	for x := range 6 {
		want[x] = p0[x]
		want[6+x] = p0[d[0]] * p1[x]
		want[12+x] = p0[d[0]] * p1[d[1]] * p2[x]
	}
	want[d[0]], want[6+d[1]] = 0, 0 // these continue to the next row
	given := make([]int, 6)
	for range trials {
		out, err := speculate.Accept(smp, lg, d)
		if err != nil {
			t.Fatal(err)
		}
		switch len(out) {
		case 1:
			counts[out[0]]++
		case 2:
			counts[6+out[1]]++
		case 3:
			counts[12+out[2]]++
		}
		if len(out) >= 2 {
			given[out[1]]++
		}
		for i := range len(out) - 1 {
			if out[i] != d[i] {
				t.Fatalf("Accept = %v: token %d continues past a rejected draft %d", out, i, d[i])
			}
		}
	}
	c, q := nonzero(t, counts, want)
	checkDistribution(t, "output sequences", c, q)
	c, q = nonzero(t, given, p1)
	checkDistribution(t, "second token given the first draft accepted", c, q)
}

// A draft the sampler cannot draw is never accepted, whatever removes it:
// a -Inf logit or a filter.
func TestAcceptImpossibleDraft(t *testing.T) {
	const trials = 5000
	inf := float32(math.Inf(-1))
	for _, c := range []struct {
		name  string
		row   []float32
		p     sample.Params
		draft int32
	}{
		{"-Inf logit", []float32{0.1, inf, 0.3, 0.2, 0, 0}, sample.Params{Temperature: 1, Seed: 31}, 1},
		{"outside top-k", row0, sample.Params{Temperature: 1, TopK: 3, Seed: 32}, 4},
		{"outside top-p", row0, sample.Params{Temperature: 1, TopP: 0.5, Seed: 33}, 3},
		{"under min-p", row0, sample.Params{Temperature: 1, MinP: 0.5, Seed: 34}, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			if probs(c.row, c.p)[c.draft] != 0 {
				t.Fatalf("test setup: draft %d has probability %g", c.draft, probs(c.row, c.p)[c.draft])
			}
			smp := sampler(t, c.p)
			lg := logits(c.row, row1)
			for range trials {
				out, err := speculate.Accept(smp, lg, []int32{c.draft})
				if err != nil {
					t.Fatal(err)
				}
				if len(out) != 1 || out[0] == c.draft {
					t.Fatalf("Accept = %v: the impossible draft %d was accepted", out, c.draft)
				}
			}
		})
	}
}

// Greedy decoding accepts exactly the drafts that are each row's argmax,
// up to the first that is not, and adds that row's argmax (the lowest id
// on a tie).
func TestAcceptGreedy(t *testing.T) {
	tie := []float32{0.5, 0.9, 0.9, 0.1, 0, 0}
	for _, c := range []struct {
		name   string
		rows   [][]float32
		drafts []int32
		want   []int32
	}{
		{"no drafts", [][]float32{row0}, nil, []int32{0}},
		{"all accepted", [][]float32{row0, row1, row2}, []int32{0, 2}, []int32{0, 2, 3}},
		{"first rejected", [][]float32{row0, row1, row2}, []int32{1, 2}, []int32{0}},
		{"second rejected", [][]float32{row0, row1, row2}, []int32{0, 4}, []int32{0, 2}},
		{"tie goes to the lower id", [][]float32{tie, row1}, []int32{2}, []int32{1}},
		{"tie accepted", [][]float32{tie, row1}, []int32{1}, []int32{1, 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			smp := sampler(t, sample.Params{Temperature: 0, Seed: 1})
			for range 3 { // and again: greedy draws nothing random
				got, err := speculate.Accept(smp, logits(c.rows...), c.drafts)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, c.want) {
					t.Fatalf("Accept = %v, want %v", got, c.want)
				}
			}
		})
	}
}

// target is a synthetic language model: the logits after a sequence
// depend on its last two tokens (and position), through a fixed hash.
type target struct{ vocab int }

func (m target) row(seq []int32) []float32 {
	var a, b uint64
	if n := len(seq); n > 0 {
		a = uint64(seq[n-1]) + 1
		if n > 1 {
			b = uint64(seq[n-2]) + 1
		}
	}
	r := rand.New(rand.NewPCG(a*1_000_003+b, uint64(len(seq)%7)))
	row := make([]float32, m.vocab)
	for i := range row {
		row[i] = float32(r.NormFloat64() * 2)
	}
	return row
}

// Speculation changes how many loops a reply takes, never its tokens: for
// several seeds and sampling settings, a reply decoded through Accept
// with drafts (some right, some wrong) equals the reply decoded one token
// at a time with a sampler of the same seed.
func TestAcceptEqualsPlainDecoding(t *testing.T) {
	const replyLen = 200
	m := target{vocab: 12}
	params := []sample.Params{
		{Temperature: 1},
		{Temperature: 0.6, TopK: 5},
		{Temperature: 1.3, TopP: 0.8},
		{Temperature: 0.8, MinP: 0.1},
		{Temperature: 0},
	}
	for _, base := range params {
		for seed := uint64(1); seed <= 8; seed++ {
			p := base
			p.Seed = seed
			// Plain: one token per loop.
			plainSmp := sampler(t, p)
			seq := []int32{3, 7}
			for len(seq) < 2+replyLen {
				seq = append(seq, plainSmp.Sample(m.row(seq)))
			}
			plain := seq[2:]

			// Speculative: drafts from the plain reply with every third
			// token altered (so some are rejected), γ cycling 0..5.
			specSmp := sampler(t, p)
			seq = []int32{3, 7}
			accepted, loops := 0, 0
			for loops = 0; len(seq) < 2+replyLen; loops++ {
				at := len(seq) - 2
				gamma := min(loops%6, replyLen-at-1)
				drafts := make([]int32, 0, gamma)
				for i := range gamma {
					d := plain[at+i]
					if (at+i)%3 == 0 {
						d = (d + 1) % int32(m.vocab)
					}
					drafts = append(drafts, d)
				}
				rows := [][]float32{m.row(seq)}
				for i := range drafts {
					rows = append(rows, m.row(append(slices.Clone(seq), drafts[:i+1]...)))
				}
				out, err := speculate.Accept(specSmp, logits(rows...), drafts)
				if err != nil {
					t.Fatal(err)
				}
				accepted += len(out) - 1
				seq = append(seq, out...)
			}
			spec := seq[2 : 2+replyLen]
			if !slices.Equal(spec, plain) {
				i := 0
				for spec[i] == plain[i] {
					i++
				}
				t.Fatalf("params %+v: speculative reply differs from plain decoding at token %d", p, i)
			}
			if accepted == 0 || loops >= replyLen {
				t.Fatalf("params %+v: %d drafts accepted in %d loops: the test exercised no speculation", p, accepted, loops)
			}
		}
	}
}

func TestAcceptRefuses(t *testing.T) {
	smp := sampler(t, sample.Params{Temperature: 1})
	many := make([]int32, speculate.MaxGamma+1)
	manyRows := make([][]float32, len(many)+1)
	for i := range manyRows {
		manyRows[i] = row0
	}
	for _, c := range []struct {
		name   string
		smp    *sample.Sampler
		lg     *engine.Logits
		drafts []int32
		want   string
	}{
		{"no sampler", nil, logits(row0), nil, "no sampler"},
		{"no logits", smp, nil, nil, "no logits"},
		{"too few rows", smp, logits(row0), []int32{1}, "1 rows of logits for 1 drafts, want 2"},
		{"too many rows", smp, logits(row0, row1, row2), []int32{1}, "3 rows of logits for 1 drafts, want 2"},
		{"too many drafts", smp, logits(manyRows...), many, "17 drafts, at most 16"},
		{"short data", smp, &engine.Logits{Tokens: 1, Vocab: 6, Data: row0[:5]}, nil, "5 logit values for 1 rows of a vocabulary of 6"},
		{"draft past the vocabulary", smp, logits(row0, row1), []int32{6}, "draft 0 is token 6, outside the vocabulary of 6"},
		{"negative draft", smp, logits(row0, row1), []int32{-1}, "draft 0 is token -1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := speculate.Accept(c.smp, c.lg, c.drafts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Accept = %v, %v; want an error containing %q", out, err, c.want)
			}
		})
	}
}
