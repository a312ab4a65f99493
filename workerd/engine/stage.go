package engine

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/c0mpute/c0mpute/workerd/engine/expf"
	"github.com/c0mpute/c0mpute/workerd/engine/quant"
)

// Hidden is a batch of hidden states: Tokens rows of Dim float32 values
// for consecutive positions starting at Pos.
type Hidden struct {
	Pos    int
	Tokens int
	Dim    int
	Data   []float32
}

// Row returns the hidden state of the batch's i-th position.
func (h *Hidden) Row(i int) []float32 { return h.Data[i*h.Dim : (i+1)*h.Dim] }

// Embed returns the token embeddings of tokens, for positions starting
// at pos (the first stage's input).
func (m *Model) Embed(tokens []int32, pos int) (*Hidden, error) {
	if err := m.needEmbed(); err != nil {
		return nil, err
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("engine: embed: no tokens")
	}
	if pos < 0 || pos+len(tokens) > m.cfg.Context {
		return nil, fmt.Errorf("engine: embed: positions %d..%d exceed the context of %d", pos, pos+len(tokens), m.cfg.Context)
	}
	h := &Hidden{Pos: pos, Tokens: len(tokens), Dim: m.cfg.Embd, Data: make([]float32, len(tokens)*m.cfg.Embd)}
	for i, t := range tokens {
		if t < 0 || int(t) >= m.tokEmbd.Rows {
			return nil, fmt.Errorf("engine: embed: token %d outside the vocabulary of %d", t, m.tokEmbd.Rows)
		}
		quant.DequantRow(m.tokEmbd.Type, m.tokEmbd.Row(int(t)), h.Row(i))
	}
	return h, nil
}

// Logits are Tokens rows of Vocab scores.
type Logits struct {
	Tokens int
	Vocab  int
	Data   []float32
}

// Row returns the scores after the batch's i-th position.
func (l *Logits) Row(i int) []float32 { return l.Data[i*l.Vocab : (i+1)*l.Vocab] }

// Head applies the final norm and the output matrix (the last stage).
func (m *Model) Head(h *Hidden) (*Logits, error) {
	if err := m.needHead(); err != nil {
		return nil, err
	}
	if err := m.checkHidden(h); err != nil {
		return nil, err
	}
	xn := make([]float32, len(h.Data))
	for t := 0; t < h.Tokens; t++ {
		rmsNorm(xn[t*h.Dim:(t+1)*h.Dim], h.Row(t), m.outNorm, m.cfg.Eps)
	}
	lg := &Logits{Tokens: h.Tokens, Vocab: m.out.Rows, Data: make([]float32, h.Tokens*m.out.Rows)}
	m.matmul(nil, &m.out, rows(xn, h.Tokens, h.Dim), rows(lg.Data, h.Tokens, lg.Vocab))
	return lg, nil
}

func (m *Model) checkHidden(h *Hidden) error {
	if h == nil || h.Tokens <= 0 || h.Dim != m.cfg.Embd || len(h.Data) != h.Tokens*h.Dim {
		return fmt.Errorf("engine: hidden states do not fit the model's hidden size %d", m.cfg.Embd)
	}
	return nil
}

// Stage runs layers [First, Last) of a model for one sequence, holding
// that range's KV cache. A Stage is used by one goroutine at a time.
type Stage struct {
	m           *Model
	first, last int
	n           int        // positions in the cache
	k, v        [][]uint16 // per layer: n × KVHeads·HeadDim float16
	// buf holds a Forward's activations and sc its matrix products'
	// buffers, kept for the next Forward.
	buf []float32
	sc  scratch
	// att is per worker: the attention's scratch; ropeCS holds a
	// Forward's RoPE angles, RopeDim per position of the batch.
	att    []attScratch
	ropeCS []float32
}

// attScratch is one worker's attention buffers: the F16-rounded query,
// the probabilities, the sums, and the nonzero probabilities (pv) with
// their value rows' offsets in the cache (off).
type attScratch struct {
	qh, p, pv []float32
	acc       []float64
	off       []int
}

// NewStage returns an empty stage for layers [first, last).
func (m *Model) NewStage(first, last int) (*Stage, error) {
	if err := m.needLayers(first, last); err != nil {
		return nil, err
	}
	return &Stage{m: m, first: first, last: last, k: make([][]uint16, last-first), v: make([][]uint16, last-first)}, nil
}

// Range is the stage's layer range [first, last).
func (s *Stage) Range() (first, last int) { return s.first, s.last }

// Len is the number of positions in the KV cache.
func (s *Stage) Len() int { return s.n }

// Truncate rolls the KV cache back to its first n positions, as if the
// later ones had never been seen.
func (s *Stage) Truncate(n int) error {
	if n < 0 || n > s.n {
		return fmt.Errorf("engine: truncate to %d positions, cache holds %d", n, s.n)
	}
	kv := s.m.cfg.KVHeads * s.m.cfg.HeadDim
	for i := range s.k {
		s.k[i] = s.k[i][:n*kv]
		s.v[i] = s.v[i][:n*kv]
	}
	s.n = n
	return nil
}

// Forward runs the stage's layers over h in place. h.Pos must equal
// Len(): the batch continues the cached sequence.
func (s *Stage) Forward(ctx context.Context, h *Hidden) error {
	m := s.m
	c := &m.cfg
	if err := m.checkHidden(h); err != nil {
		return err
	}
	if h.Pos != s.n {
		return fmt.Errorf("engine: hidden states start at position %d, the cache holds %d", h.Pos, s.n)
	}
	if s.n+h.Tokens > c.Context {
		return fmt.Errorf("engine: %d positions exceed the context of %d", s.n+h.Tokens, c.Context)
	}
	T, E := h.Tokens, c.Embd
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	need := T * (2*E + 2*qd + 2*kvd + c.FF)
	if cap(s.buf) < need {
		s.buf = make([]float32, need)
	}
	free := s.buf[:need]
	take := func(n int) []float32 {
		b := free[:n:n]
		free = free[n:]
		return b
	}
	xn, q, k, v := take(T*E), take(T*qd), take(T*kvd), take(T*kvd)
	att, proj, g := take(T*qd), take(T*E), take(T*c.FF)
	xr, qr, kr, vr := rows(xn, T, E), rows(q, T, qd), rows(k, T, kvd), rows(v, T, kvd)
	attr, projr, gr := rows(att, T, qd), rows(proj, T, E), rows(g, T, c.FF)
	rd := c.RopeDim
	s.ropeCS = grow(s.ropeCS, T*rd)
	for t := 0; t < T; t++ {
		m.ropeAngles(s.ropeCS[t*rd:(t+1)*rd], s.n+t)
	}
	for l := s.first; l < s.last; l++ {
		if err := ctx.Err(); err != nil {
			// Nothing of this batch is cached yet for later layers: roll
			// the earlier layers back so the cache stays consistent.
			s.rollback(l)
			return err
		}
		ly := &m.layers[l]
		for t := 0; t < T; t++ {
			rmsNorm(xr[t], h.Row(t), ly.attnNorm, c.Eps)
		}
		m.matmuls(&s.sc, xr, product{&ly.q, qr}, product{&ly.k, kr}, product{&ly.v, vr})
		for t := 0; t < T; t++ {
			addBias(qr[t], ly.bq)
			addBias(kr[t], ly.bk)
			addBias(vr[t], ly.bv)
			cs := s.ropeCS[t*rd : (t+1)*rd]
			m.rope(qr[t], c.Heads, cs)
			m.rope(kr[t], c.KVHeads, cs)
		}
		li := l - s.first
		s.k[li] = appendF16(s.k[li], k)
		s.v[li] = appendF16(s.v[li], v)
		s.attention(li, qr, attr)
		m.matmul(&s.sc, &ly.o, attr, projr)
		for i := range h.Data {
			h.Data[i] += proj[i]
		}
		for t := 0; t < T; t++ {
			rmsNorm(xr[t], h.Row(t), ly.ffnNorm, c.Eps)
		}
		m.gatedFFN(&s.sc, xr, &ly.gate, &ly.up, gr)
		m.matmul(&s.sc, &ly.down, gr, projr)
		for i := range h.Data {
			h.Data[i] += proj[i]
		}
	}
	s.n += T
	return nil
}

// rollback drops the current batch's entries from layers before l.
func (s *Stage) rollback(l int) {
	kv := s.m.cfg.KVHeads * s.m.cfg.HeadDim
	for li := 0; li < l-s.first; li++ {
		s.k[li] = s.k[li][:s.n*kv]
		s.v[li] = s.v[li][:s.n*kv]
	}
}

// appendF16 appends x in half precision, growing dst once for all of it
// rather than checking its capacity per element.
func appendF16(dst []uint16, x []float32) []uint16 {
	n := len(dst)
	dst = slices.Grow(dst, len(x))[:n+len(x)]
	for i, v := range x {
		dst[n+i] = quant.F32ToF16(v)
	}
	return dst
}

func addBias(x, b []float32) {
	if b == nil {
		return
	}
	for i := range x {
		x[i] += b[i]
	}
}

// attention computes, for the batch's queries q (position s.n+t for row
// t), softmax(q·K/√d)·V over the cached positions 0..s.n+t of layer li,
// as llama.cpp's non-flash path with an F16 cache does: the query and
// the probabilities are rounded to F16 for the F16 dot products, which
// sum in float64; the softmax sums in float64.
func (s *Stage) attention(li int, q [][]float32, out [][]float32) {
	c := &s.m.cfg
	hd, kvd := c.HeadDim, c.KVHeads*c.HeadDim
	group := c.Heads / c.KVHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	K, V := s.k[li], s.v[li]
	T := len(q)
	for len(s.att) < s.m.workers {
		s.att = append(s.att, attScratch{qh: make([]float32, hd), acc: make([]float64, hd)})
	}
	s.m.parallel(T*c.Heads, max(1, T*c.Heads/(4*s.m.workers)), func(worker, lo, hi int) {
		ws := &s.att[worker]
		qh, acc := ws.qh, ws.acc
		p, pv, off := ws.p, ws.pv, ws.off
		for job := lo; job < hi; job++ {
			t, h := job/c.Heads, job%c.Heads
			kh := h / group
			n := s.n + t + 1 // causal: positions 0..s.n+t
			for i, x := range q[t][h*hd : (h+1)*hd] {
				qh[i] = quant.RoundF16(x)
			}
			p = grow(p, n)
			mx := float32(math.Inf(-1))
			for j := 0; j < n; j++ {
				p[j] = quant.DotF16(K[j*kvd+kh*hd:j*kvd+kh*hd+hd], qh) * scale
				mx = max(mx, p[j])
			}
			// p[j] = float32(math.Exp(float64(p[j] - mx))), all n at once
			// (expf's vector exp, bit for bit), then summed in order.
			for j := 0; j < n; j++ {
				p[j] -= mx
			}
			expf.Exp(p[:n], p[:n])
			var sum float64
			for _, e := range p[:n] {
				sum += float64(e)
			}
			inv := float32(1 / sum)
			pv, off = pv[:0], off[:0]
			for j := 0; j < n; j++ {
				if e := quant.RoundF16(p[j] * inv); e != 0 { // a zero adds +0 products: skipped
					pv = append(pv, e)
					off = append(off, j*kvd+kh*hd)
				}
			}
			o := out[t][h*hd : (h+1)*hd]
			clear(acc)
			axpyF16Rows(acc, V, off, pv)
			for i := range o {
				o[i] = float32(acc[i])
			}
		}
		ws.p, ws.pv, ws.off = p, pv, off
	})
}

// axpyF16Rows adds p[k]·v[off[k]:off[k]+len(acc)] to acc for each k in
// order, per element in float64: acc[i] += float64(f16(v)·p[k]) with
// the product rounded to float32. The assembly takes whole blocks of 32
// columns, this loop the rest; columns are independent, so the split
// changes no element's operations.
//
//go:norace
func axpyF16Rows(acc []float64, v []uint16, off []int, p []float32) {
	p = p[:len(off)]
	for _, o := range off {
		if o < 0 || o+len(acc) > len(v) {
			panic(fmt.Sprintf("engine: attention row at %d of %d outside a cache of %d", o, len(acc), len(v)))
		}
	}
	done := axpyF16RowsVec(acc, v, off, p)
	rest := acc[done:]
	for k, o := range off {
		row := v[o+done : o+len(acc)]
		for i, x := range row {
			rest[i] += float64(quant.F16ToF32(x) * p[k])
		}
	}
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}
