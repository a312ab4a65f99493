// Package sample picks the next token from a model's logits — greedy,
// or at random after temperature, top-k, top-p and min-p — and stops a
// generation on stop strings (Stopper).
//
// # Determinism
//
// A Sampler owns its random state: a PCG generator (math/rand/v2) seeded
// from Params.Seed alone, so one seed over the same logits gives the same
// tokens on every machine and run, whatever other requests do. Callers
// that get no seed from the user should draw one at random per request.
// The choice is not bit-identical to llama.cpp's sampler (it draws from a
// C++ standard library distribution); greedy decoding is.
//
// # Order
//
// As in llama.cpp's default chain: top-k, then top-p and min-p on the
// softmax of the raw logits, then temperature, then the draw.
// Temperature <= 0 is greedy: the highest logit, the lowest id on ties.
//
// # Numbers
//
// Logits are float32 as the engine produces them; probabilities and the
// cumulative sums are float64 (the sum over a 150k vocabulary in float32
// loses the small tail). Ties in sorting go to the lower id so the order
// is total and runs are reproducible. NaN logits count as -Inf.
package sample

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/go-playground/validator/v10"
)

// Params are one request's sampling settings. Zero values disable each
// filter: TopK 0 keeps every token, TopP 0 or 1 and MinP 0 keep all.
type Params struct {
	Temperature float32 `validate:"gte=0,lte=100"`
	TopK        int     `validate:"gte=0"`
	TopP        float32 `validate:"gte=0,lte=1"`
	MinP        float32 `validate:"gte=0,lte=1"`
	Seed        uint64
}

var validate = validator.New(validator.WithRequiredStructEnabled())

// Sampler picks tokens for one generation. It is not safe for concurrent
// use: make one per request.
type Sampler struct {
	p    Params
	rng  *rand.Rand
	cand []cand
}

type cand struct {
	id    int32
	logit float32
	p     float64
}

// New returns a Sampler for p.
func New(p Params) (*Sampler, error) {
	if err := validate.Struct(p); err != nil {
		return nil, fmt.Errorf("sample: invalid parameters: %w", err)
	}
	if math.IsNaN(float64(p.Temperature)) || math.IsNaN(float64(p.TopP)) || math.IsNaN(float64(p.MinP)) {
		return nil, fmt.Errorf("sample: invalid parameters: NaN")
	}
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15))}, nil
}

// Greedy reports whether the Sampler always takes the most likely token.
func (s *Sampler) Greedy() bool { return s.p.Temperature <= 0 }

// Sample returns the next token id from logits (one per vocabulary
// entry), or -1 for an empty slice. logits is not modified.
func (s *Sampler) Sample(logits []float32) int32 {
	if len(logits) == 0 {
		return -1
	}
	if s.Greedy() {
		return Argmax(logits)
	}
	c := s.cand[:0]
	for i, l := range logits {
		if l != l { // NaN
			l = float32(math.Inf(-1))
		}
		c = append(c, cand{id: int32(i), logit: l})
	}
	s.cand = c
	byLogit := func(a, b cand) int {
		if a.logit != b.logit {
			return cmp.Compare(b.logit, a.logit)
		}
		return cmp.Compare(a.id, b.id)
	}
	sorted := false
	if k := s.p.TopK; k > 0 && k < len(c) {
		c, sorted = topK(c, k, byLogit), true
	}
	topP := s.p.TopP > 0 && s.p.TopP < 1
	if topP || s.p.MinP > 0 {
		softmax(c, 1)
	}
	if topP {
		if !sorted {
			// The head that reaches TopP is usually small: select the
			// best 64, 512, … until their mass suffices, rather than
			// sorting the whole vocabulary.
			for k := 64; ; k *= 8 {
				if k >= len(c) {
					sortCands(c)
					break
				}
				head := topK(c, k, byLogit)
				var mass float64
				for _, x := range head {
					mass += x.p
				}
				if mass >= float64(s.p.TopP) {
					c = head
					break
				}
			}
		}
		// Keep the smallest head whose mass reaches TopP.
		var sum float64
		for i := range c {
			sum += c[i].p
			if sum >= float64(s.p.TopP) {
				c = c[:i+1]
				break
			}
		}
	}
	if s.p.MinP > 0 {
		var pmax float64
		for _, x := range c {
			pmax = max(pmax, x.p)
		}
		floor := pmax * float64(s.p.MinP)
		c = slices.DeleteFunc(c, func(x cand) bool { return x.p < floor })
	}

	softmax(c, float64(s.p.Temperature))
	var total float64
	for _, x := range c {
		total += x.p
	}
	r := s.rng.Float64() * total
	for _, x := range c {
		r -= x.p
		if r < 0 {
			return x.id
		}
	}
	// Rounding left r at or above zero: the last token with any mass.
	for i := len(c) - 1; i >= 0; i-- {
		if c[i].p > 0 {
			return c[i].id
		}
	}
	return c[0].id
}

// Argmax returns the index of the largest logit, the lowest on ties; NaN
// never wins. It is -1 for an empty slice.
func Argmax(logits []float32) int32 {
	best := int32(-1)
	for i, l := range logits {
		if l != l {
			continue
		}
		if best < 0 || l > logits[best] {
			best = int32(i)
		}
	}
	if best < 0 && len(logits) > 0 {
		return 0
	}
	return best
}

// topK returns the k best candidates, sorted best first; c may be
// reordered. A min-heap of the k best so far makes it O(n log k).
func topK(c []cand, k int, cmpf func(a, b cand) int) []cand {
	if k*8 >= len(c) {
		sortCands(c)
		return c[:k]
	}
	h := slices.Clone(c[:k])
	worse := func(i, j int) bool { return cmpf(h[i], h[j]) > 0 } // h[0] is the worst kept
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= k {
				return
			}
			m := l
			if r := l + 1; r < k && worse(r, l) {
				m = r
			}
			if !worse(m, i) {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for i := k/2 - 1; i >= 0; i-- {
		down(i)
	}
	for _, x := range c[k:] {
		if cmpf(x, h[0]) < 0 {
			h[0] = x
			down(0)
		}
	}
	slices.SortFunc(h, cmpf)
	return h
}

// sortCands sorts best first (highest logit, then lowest id), on packed
// integer keys: several times faster than a sort with a comparison
// function over a whole vocabulary. c must hold each id once.
func sortCands(c []cand) {
	keys := make([]uint64, len(c))
	byID := make(map[int32]int, 0)
	identity := true
	for i, x := range c {
		b := math.Float32bits(x.logit)
		if b&(1<<31) != 0 { // floats to unsigned integers, order kept
			b = ^b
		} else {
			b |= 1 << 31
		}
		keys[i] = uint64(^b)<<32 | uint64(uint32(x.id)) // descending logit, ascending id
		identity = identity && x.id == int32(i)
	}
	if !identity {
		for i, x := range c {
			byID[x.id] = i
		}
	}
	slices.Sort(keys)
	src := slices.Clone(c)
	for i, k := range keys {
		id := int32(uint32(k))
		if identity {
			c[i] = src[id]
		} else {
			c[i] = src[byID[id]]
		}
	}
}

// softmax sets each candidate's probability from its logit divided by
// temp, normalised to sum 1.
func softmax(c []cand, temp float64) {
	maxL := math.Inf(-1)
	for _, x := range c {
		maxL = max(maxL, float64(x.logit))
	}
	if math.IsInf(maxL, -1) {
		// Every logit is -Inf: uniform over the candidates.
		for i := range c {
			c[i].p = 1 / float64(len(c))
		}
		return
	}
	if math.IsInf(maxL, 1) {
		// +Inf logits take all the mass, shared.
		n := 0
		for _, x := range c {
			if math.IsInf(float64(x.logit), 1) {
				n++
			}
		}
		for i := range c {
			c[i].p = 0
			if math.IsInf(float64(c[i].logit), 1) {
				c[i].p = 1 / float64(n)
			}
		}
		return
	}
	var sum float64
	for i := range c {
		c[i].p = math.Exp((float64(c[i].logit) - maxL) / temp)
		sum += c[i].p
	}
	for i := range c {
		c[i].p /= sum
	}
}
