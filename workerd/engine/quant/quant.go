package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

// Block sizes of the supported quantized types.
const (
	QK8_0 = 32  // elements per Q8_0 block
	QKK   = 256 // elements per K-quant super-block
)

// Supported reports whether the kernels compute with tensors of type t.
func Supported(t gguf.Type) bool {
	switch t {
	case gguf.F32, gguf.F16, gguf.Q8_0, gguf.Q4_K, gguf.Q6_K:
		return true
	}
	return false
}

// CheckRow reports whether rows of n elements of type t can be computed
// with: the type is supported and n fills whole blocks.
func CheckRow(t gguf.Type, n int) error {
	if !Supported(t) {
		return fmt.Errorf("quant: tensor type %s is not supported (F32, F16, Q8_0, Q4_K, Q6_K are)", t)
	}
	if n <= 0 || n%t.BlockElems() != 0 {
		return fmt.Errorf("quant: row of %d elements does not fill %s blocks of %d", n, t, t.BlockElems())
	}
	return nil
}

// Act is an activation vector prepared for dot products with weight rows
// of one type. Its buffers are reused across Prepare calls.
type Act struct {
	Type gguf.Type // the weight type it was prepared for
	F32  []float32 // F32 weights: x; F16 weights: x rounded to F16
	Q    []int8    // Q8_0 / Q8_K quants
	D    []float32 // per-block scales
	Sums []int16   // Q8_K: sums of each 16 quants
	// Sums32 are Q8_K sums of each 32 quants (pairs of Sums): the
	// integer Σ Sums[j]·min[j/2] of Q4_K in half the products.
	Sums32 []int16
	// QT are the Q8_K quants again in the order the K-quant tiles read
	// them (ktile_amd64.s; kTileOrder), filled only where those run.
	QT []int8
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// Prepare converts x for dot products with rows of type t (ggml's
// vec_dot_type of t). len(x) must satisfy CheckRow.
func (a *Act) Prepare(t gguf.Type, x []float32) {
	a.Type = t
	n := len(x)
	switch t {
	case gguf.F32:
		a.F32 = grow(a.F32, n)
		copy(a.F32, x)
	case gguf.F16:
		a.F32 = grow(a.F32, n)
		for i, v := range x {
			a.F32[i] = RoundF16(v)
		}
	case gguf.Q8_0:
		a.Q, a.D = grow(a.Q, n), grow(a.D, n/QK8_0)
		quantizeQ8_0(x, a.Q, a.D)
	case gguf.Q4_K, gguf.Q6_K:
		a.Q, a.D, a.Sums, a.Sums32 = grow(a.Q, n), grow(a.D, n/QKK), grow(a.Sums, n/16), grow(a.Sums32, n/32)
		quantizeQ8_K(x, a.Q, a.D, a.Sums)
		for j := range a.Sums32 {
			a.Sums32[j] = a.Sums[2*j] + a.Sums[2*j+1]
		}
		a.QT = a.QT[:0]
		if haveKTiles {
			a.QT = grow(a.QT, n)
			order := kTileOrder(t)
			for c := 0; c < n; c += len(order) {
				qt, q := a.QT[c:c+len(order)], a.Q[c:c+len(order)]
				for j, src := range order {
					qt[j] = q[src]
				}
			}
		}
	default:
		panic("quant: Prepare with unsupported type " + t.String()) // callers check with CheckRow
	}
}

// kTileOrder is the order in which the K-quant tiles read a Q8_K
// activation's quants, repeating every len of the result: per 64 elements
// for Q4_K (a chunk of two 32-element sub-blocks A = 0-31 and B = 32-63,
// in two halves of 16 elements each), per 32 for Q6_K (two 16-element
// sub-blocks A = 0-15 and B = 16-31); within, for each of ggml's eight
// lanes l, A's elements l and l+8 and then B's, so that one VPMADDUBSW
// word holds a lane's pair from one sub-block.
func kTileOrder(t gguf.Type) []uint8 {
	if t == gguf.Q4_K {
		return q4KTileOrder[:]
	}
	return q6KTileOrder[:]
}

var q4KTileOrder, q6KTileOrder = func() (q4 [64]uint8, q6 [32]uint8) {
	for l := range uint8(8) {
		for m, off := range [4]uint8{0, 8, 32, 40} {
			q4[l*4+uint8(m)] = l + off
			q4[32+l*4+uint8(m)] = 16 + l + off
		}
		for m, off := range [4]uint8{0, 8, 16, 24} {
			q6[l*4+uint8(m)] = l + off
		}
	}
	return q4, q6
}()

// quantizeQ8_0 is ggml's quantize_row_q8_0_ref: d = amax/127 stored as
// F16, quants rounded half away from zero with the unrounded scale; in
// assembly where the CPU allows and the row is finite (bit for bit).
//
//go:norace
func quantizeQ8_0(x []float32, q []int8, d []float32) {
	if quantizeQ8_0Vec(x, q, d) {
		return
	}
	quantizeQ8_0Portable(x, q, d)
}

// quantizeQ8_0Portable is quantizeQ8_0 in plain Go.
//
//go:norace
func quantizeQ8_0Portable(x []float32, q []int8, d []float32) {
	for b := range d {
		blk := x[b*QK8_0 : (b+1)*QK8_0]
		var amax float32
		for _, v := range blk {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		dd := amax / 127
		var id float32
		if dd != 0 {
			id = 1 / dd
		}
		d[b] = RoundF16(dd)
		qb := q[b*QK8_0 : (b+1)*QK8_0]
		for j, v := range blk {
			qb[j] = int8(math.Round(float64(v * id)))
		}
	}
}

// nearestInt is ggml's nearest_int: round half to even through the
// float32 magic-number trick (valid for |f| < 2^22).
func nearestInt(f float32) int32 {
	v := f + 12582912
	return int32(math.Float32bits(v)&0x007fffff) - 0x00400000
}

// quantizeQ8_K is ggml's quantize_row_q8_K_ref, in assembly where the
// CPU allows (the same float32 operations per element, bit for bit).
//
//go:norace
func quantizeQ8_K(x []float32, q []int8, d []float32, sums []int16) {
	if quantizeQ8KVec(x, q, d, sums) {
		return
	}
	quantizeQ8KPortable(x, q, d, sums)
}

// quantizeQ8KPortable is quantizeQ8_K in plain Go.
//
//go:norace
func quantizeQ8KPortable(x []float32, q []int8, d []float32, sums []int16) {
	for b := range d {
		blk := x[b*QKK : (b+1)*QKK]
		qb := q[b*QKK : (b+1)*QKK]
		var mx, amax float32
		for _, v := range blk {
			if av := float32(math.Abs(float64(v))); av > amax {
				amax, mx = av, v
			}
		}
		if amax == 0 {
			d[b] = 0
			clear(qb)
			clear(sums[b*16 : (b+1)*16])
			continue
		}
		iscale := -127 / mx
		for j, v := range blk {
			qb[j] = int8(min(127, nearestInt(iscale*v)))
		}
		for j := 0; j < 16; j++ {
			var s int16
			for _, v := range qb[j*16 : (j+1)*16] {
				s += int16(v)
			}
			sums[b*16+j] = s
		}
		d[b] = 1 / iscale
	}
}

func f32s(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func u16s(b []byte) []uint16 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}

func i8s(b []byte) []int8 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*int8)(unsafe.Pointer(&b[0])), len(b))
}

func f16at(b []byte, off int) float32 { return f16table[binary.LittleEndian.Uint16(b[off:])] }

// The kernels below carry go:norace: they are pure functions over
// read-only weights and caller-owned buffers, and under the race
// detector's instrumentation they would run ~50 times slower, making the
// end-to-end tests (which CI runs with -race) too slow. The code that
// shares buffers between goroutines (engine's matmul and attention) stays
// instrumented.

// Dot is the dot product of one weight row (its encoded bytes, of type
// a.Type) with the prepared activation a.
func Dot(row []byte, a *Act) float32 {
	switch a.Type {
	case gguf.F32:
		return dotF32(f32s(row), a.F32)
	case gguf.F16:
		return dotF16(u16s(row), a.F32)
	case gguf.Q8_0:
		return dotQ8_0(row, a)
	case gguf.Q4_K:
		return dotQ4K(row, a)
	case gguf.Q6_K:
		return dotQ6K(row, a)
	}
	panic("quant: Dot with unsupported type " + a.Type.String())
}

// dotF32 accumulates float32 products in float64, as ggml's scalar
// ggml_vec_dot_f32 does; four accumulators only reorder float64 sums.
//
//go:norace
func dotF32(w, x []float32) float32 {
	n := len(x)
	w = w[:n]
	s0, i := dotF32Vec(w, x)
	var s1, s2, s3 float64
	for ; i+4 <= n; i += 4 {
		s0 += float64(w[i] * x[i])
		s1 += float64(w[i+1] * x[i+1])
		s2 += float64(w[i+2] * x[i+2])
		s3 += float64(w[i+3] * x[i+3])
	}
	for ; i < n; i++ {
		s0 += float64(w[i] * x[i])
	}
	return float32((s0 + s1) + (s2 + s3))
}

//go:norace
func dotF16(w []uint16, x []float32) float32 {
	return DotF16(w, x)
}

// DotF16 is Σ w[i]·x[i] for half-precision w: float32 products summed in
// float64 (ggml's scalar F16 dot), vectorised where the CPU allows.
//
//go:norace
func DotF16(w []uint16, x []float32) float32 {
	n := len(x)
	w = w[:n]
	t := f16table
	s0, i := dotF16Vec(w, x)
	var s1, s2, s3 float64
	for ; i+4 <= n; i += 4 {
		s0 += float64(t[w[i]] * x[i])
		s1 += float64(t[w[i+1]] * x[i+1])
		s2 += float64(t[w[i+2]] * x[i+2])
		s3 += float64(t[w[i+3]] * x[i+3])
	}
	for ; i < n; i++ {
		s0 += float64(t[w[i]] * x[i])
	}
	return float32((s0 + s1) + (s2 + s3))
}

// dotQ8_0 is ggml_vec_dot_q8_0_q8_0's reference (the scalar kernel an
// Ollama built without AVX runs): exact int32 sums per block, scaled and
// summed in float32 in block order. The assembly computes the block
// terms eight at a time and adds them in the same order.
//
//go:norace
func dotQ8_0(row []byte, a *Act) float32 {
	if s, ok := dotQ8_0Vec(row, a); ok {
		return s
	}
	return dotQ8_0Portable(row, a)
}

// dotQ8_0Portable is dotQ8_0 in plain Go.
//
//go:norace
func dotQ8_0Portable(row []byte, a *Act) float32 {
	const bs = 2 + QK8_0
	nb := len(a.D)
	row = row[:nb*bs]
	var sumf float32
	for b := 0; b < nb; b++ {
		blk := row[b*bs : (b+1)*bs]
		qw := i8s(blk[2:bs])
		qx := a.Q[b*QK8_0 : (b+1)*QK8_0]
		qw = qw[:32]
		var s0, s1, s2, s3 int32
		for j := 0; j < 32; j += 4 {
			s0 += int32(qw[j]) * int32(qx[j])
			s1 += int32(qw[j+1]) * int32(qx[j+1])
			s2 += int32(qw[j+2]) * int32(qx[j+2])
			s3 += int32(qw[j+3]) * int32(qx[j+3])
		}
		sumi := s0 + s1 + s2 + s3
		sumf += float32(float32(sumi) * float32(f16at(blk, 0)*a.D[b]))
	}
	return sumf
}

// DotTile writes Dot(row, &acts[i]) to out[i] for every activation, bit
// for bit, the row read from memory once for all of them: a batch's
// matrix product (prefill, verification) tiles over its positions this
// way, Q8_0, Q4_K and Q6_K rows sixteen (AVX-512 Q8_0), eight or four
// activations at a time (each weight block loaded and prepared once for
// the tile), and each result is the one a batch of one gets. Every
// activation must be prepared for the row's type and length.
//
//go:norace
func DotTile(row []byte, acts []Act, out []float32) {
	out = out[:len(acts)]
	i := 0
	if len(acts) >= 4 {
		switch acts[0].Type {
		case gguf.Q8_0:
			i = q8_0Tiles(row, acts, out)
		case gguf.Q4_K, gguf.Q6_K:
			i = kTiles(row, acts, out)
		}
	}
	for ; i < len(acts); i++ {
		out[i] = Dot(row, &acts[i])
	}
}

// DotTileRows is DotTile for each of len(out)/len(acts) consecutive
// weight rows rowBytes apart: out[k*len(acts)+i] = Dot(row k, &acts[i]),
// bit for bit, row k's results one run as DotTile writes them. A batch's
// matrix product hands a worker's block of rows over in one call, so the
// activations are checked once for the block instead of once per row
// (64 positions' checks per row were 3-7 % of a Q4_K_M prefill's CPU
// profile) and each tile's pointers gathered once; where the tiles do not take every
// activation (other types, activations prepared unlike the first), each
// row goes through DotTile.
//
//go:norace
func DotTileRows(rows []byte, rowBytes int, acts []Act, out []float32) {
	T := len(acts)
	if T == 0 {
		return
	}
	n := len(out) / T
	rows, out = rows[:n*rowBytes], out[:n*T]
	switch acts[0].Type {
	case gguf.Q8_0:
		if q8_0TileRows(rows, rowBytes, acts, out) {
			return
		}
	case gguf.Q4_K, gguf.Q6_K:
		if kTileRows(rows, rowBytes, acts, out) {
			return
		}
	}
	for k := range n {
		DotTile(rows[k*rowBytes:(k+1)*rowBytes], acts, out[k*T:(k+1)*T])
	}
}

// DotRows writes Dot(rows[i*rowBytes:(i+1)*rowBytes], a) to out[i] for
// each of len(out) consecutive weight rows, bit for bit: a decode step's
// matrix product (one activation) hands a worker's rows over in one
// call, and for Q4_K and Q6_K one assembly call computes them all, the
// activation's quants and scales read from cache row after row and no
// per-row Go left between the rows.
//
//go:norace
func DotRows(rows []byte, rowBytes int, a *Act, out []float32) {
	if len(out) == 0 {
		return
	}
	rows = rows[:len(out)*rowBytes]
	if (a.Type == gguf.Q4_K || a.Type == gguf.Q6_K) && kRows(rows, rowBytes, a, out) {
		return
	}
	for i := range out {
		out[i] = Dot(rows[i*rowBytes:(i+1)*rowBytes], a)
	}
}

// scaleMinK4 decodes the 8 six-bit scales and mins of a Q4_K block
// (ggml's get_scale_min_k4).
//
//go:norace
func scaleMinK4(q []byte) (sc, mn [8]uint8) {
	q = q[:12]
	for j := 0; j < 4; j++ {
		sc[j] = q[j] & 63
		mn[j] = q[j+4] & 63
	}
	for j := 4; j < 8; j++ {
		sc[j] = q[j+4]&0xF | (q[j-4]>>6)<<4
		mn[j] = q[j+4]>>4 | (q[j]>>6)<<4
	}
	return sc, mn
}

// Q4_K block: d f16, dmin f16, scales[12], qs[128] — 144 bytes.
const q4KBytes = 144

// Q6_K block: ql[128], qh[64], scales[16] int8, d f16 — 210 bytes.
const q6KBytes = 210

// dotQ4K is ggml_vec_dot_q4_K_q8_K's reference: eight integer lanes per
// super-block (lane = element index mod 8), scaled into eight float
// lanes, mins subtracted, lanes summed at the end — the same float
// operations in the same order, in assembly where the CPU allows.
//
//go:norace
func dotQ4K(row []byte, a *Act) float32 {
	var s [8]float32
	sumf, ok := q4KVec(row, a, &s)
	if !ok {
		return dotQ4KPortable(row, a)
	}
	for _, v := range s {
		sumf += v
	}
	return sumf
}

// dotQ4KPortable is dotQ4K in plain Go, the lanes unrolled into locals.
//
//go:norace
func dotQ4KPortable(row []byte, a *Act) float32 {
	nb := len(a.D)
	row = row[:nb*q4KBytes]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	var sumf float32
	for b := 0; b < nb; b++ {
		blk := row[b*q4KBytes : (b+1)*q4KBytes]
		sc, mn := scaleMinK4(blk[4:16])
		qs := blk[16:144]
		q8 := a.Q[b*QKK : (b+1)*QKK]
		bsums := a.Sums[b*16 : (b+1)*16]
		var summ int32
		for j := 0; j < 16; j++ {
			summ += int32(bsums[j]) * int32(mn[j/2])
		}
		var a0, a1, a2, a3, a4, a5, a6, a7 int32
		for j := 0; j < 4; j++ {
			q := qs[j*32 : j*32+32]
			lo := q8[j*64 : j*64+32]
			hi := q8[j*64+32 : j*64+64]
			var l0, l1, l2, l3, l4, l5, l6, l7 int32
			var h0, h1, h2, h3, h4, h5, h6, h7 int32
			for k := 0; k < 32; k += 8 {
				qq, ll, hh := q[k:k+8:k+8], lo[k:k+8:k+8], hi[k:k+8:k+8]
				l0 += int32(qq[0]&0xF) * int32(ll[0])
				h0 += int32(qq[0]>>4) * int32(hh[0])
				l1 += int32(qq[1]&0xF) * int32(ll[1])
				h1 += int32(qq[1]>>4) * int32(hh[1])
				l2 += int32(qq[2]&0xF) * int32(ll[2])
				h2 += int32(qq[2]>>4) * int32(hh[2])
				l3 += int32(qq[3]&0xF) * int32(ll[3])
				h3 += int32(qq[3]>>4) * int32(hh[3])
				l4 += int32(qq[4]&0xF) * int32(ll[4])
				h4 += int32(qq[4]>>4) * int32(hh[4])
				l5 += int32(qq[5]&0xF) * int32(ll[5])
				h5 += int32(qq[5]>>4) * int32(hh[5])
				l6 += int32(qq[6]&0xF) * int32(ll[6])
				h6 += int32(qq[6]>>4) * int32(hh[6])
				l7 += int32(qq[7]&0xF) * int32(ll[7])
				h7 += int32(qq[7]>>4) * int32(hh[7])
			}
			sa, sb := int32(sc[2*j]), int32(sc[2*j+1])
			a0 += sa*l0 + sb*h0
			a1 += sa*l1 + sb*h1
			a2 += sa*l2 + sb*h2
			a3 += sa*l3 + sb*h3
			a4 += sa*l4 + sb*h4
			a5 += sa*l5 + sb*h5
			a6 += sa*l6 + sb*h6
			a7 += sa*l7 + sb*h7
		}
		d := f16at(blk, 0) * a.D[b]
		s0 += float32(d * float32(a0))
		s1 += float32(d * float32(a1))
		s2 += float32(d * float32(a2))
		s3 += float32(d * float32(a3))
		s4 += float32(d * float32(a4))
		s5 += float32(d * float32(a5))
		s6 += float32(d * float32(a6))
		s7 += float32(d * float32(a7))
		dmin := f16at(blk, 2) * a.D[b]
		sumf -= float32(dmin * float32(summ))
	}
	sumf += s0
	sumf += s1
	sumf += s2
	sumf += s3
	sumf += s4
	sumf += s5
	sumf += s6
	sumf += s7
	return sumf
}

// dotQ6K is ggml_vec_dot_q6_K_q8_K's reference, lane for lane, in
// assembly where the CPU allows.
//
//go:norace
func dotQ6K(row []byte, a *Act) float32 {
	var s [8]float32
	if !q6KVec(row, a, &s) {
		return dotQ6KPortable(row, a)
	}
	var sumf float32
	for _, v := range s {
		sumf += v
	}
	return sumf
}

// dotQ6KPortable is dotQ6K in plain Go.
//
//go:norace
func dotQ6KPortable(row []byte, a *Act) float32 {
	nb := len(a.D)
	row = row[:nb*q6KBytes]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	for b := 0; b < nb; b++ {
		blk := row[b*q6KBytes : (b+1)*q6KBytes]
		q8 := a.Q[b*QKK : (b+1)*QKK]
		sc := i8s(blk[192:208])
		var a0, a1, a2, a3, a4, a5, a6, a7 int32
		for n := 0; n < 2; n++ {
			ql := blk[n*64 : n*64+64]
			qh := blk[128+n*32 : 128+n*32+32]
			y := q8[n*128 : n*128+128]
			for h := 0; h < 2; h++ {
				o := 16 * h
				s1, s2, s3, s4 := int32(sc[8*n+h]), int32(sc[8*n+2+h]), int32(sc[8*n+4+h]), int32(sc[8*n+6+h])
				la, lb, hq := ql[o:o+16:o+16], ql[32+o:32+o+16:32+o+16], qh[o:o+16:o+16]
				y1, y2, y3, y4 := y[o:o+16:o+16], y[32+o:32+o+16:32+o+16], y[64+o:64+o+16:64+o+16], y[96+o:96+o+16:96+o+16]
				a0 += s1*(int32(int8(la[0]&0xF|(hq[0]&3)<<4)-32)*int32(y1[0])+int32(int8(la[8]&0xF|(hq[8]&3)<<4)-32)*int32(y1[8])) +
					s2*(int32(int8(lb[0]&0xF|(hq[0]>>2&3)<<4)-32)*int32(y2[0])+int32(int8(lb[8]&0xF|(hq[8]>>2&3)<<4)-32)*int32(y2[8])) +
					s3*(int32(int8(la[0]>>4|(hq[0]>>4&3)<<4)-32)*int32(y3[0])+int32(int8(la[8]>>4|(hq[8]>>4&3)<<4)-32)*int32(y3[8])) +
					s4*(int32(int8(lb[0]>>4|(hq[0]>>6)<<4)-32)*int32(y4[0])+int32(int8(lb[8]>>4|(hq[8]>>6)<<4)-32)*int32(y4[8]))
				a1 += s1*(int32(int8(la[1]&0xF|(hq[1]&3)<<4)-32)*int32(y1[1])+int32(int8(la[9]&0xF|(hq[9]&3)<<4)-32)*int32(y1[9])) +
					s2*(int32(int8(lb[1]&0xF|(hq[1]>>2&3)<<4)-32)*int32(y2[1])+int32(int8(lb[9]&0xF|(hq[9]>>2&3)<<4)-32)*int32(y2[9])) +
					s3*(int32(int8(la[1]>>4|(hq[1]>>4&3)<<4)-32)*int32(y3[1])+int32(int8(la[9]>>4|(hq[9]>>4&3)<<4)-32)*int32(y3[9])) +
					s4*(int32(int8(lb[1]>>4|(hq[1]>>6)<<4)-32)*int32(y4[1])+int32(int8(lb[9]>>4|(hq[9]>>6)<<4)-32)*int32(y4[9]))
				a2 += s1*(int32(int8(la[2]&0xF|(hq[2]&3)<<4)-32)*int32(y1[2])+int32(int8(la[10]&0xF|(hq[10]&3)<<4)-32)*int32(y1[10])) +
					s2*(int32(int8(lb[2]&0xF|(hq[2]>>2&3)<<4)-32)*int32(y2[2])+int32(int8(lb[10]&0xF|(hq[10]>>2&3)<<4)-32)*int32(y2[10])) +
					s3*(int32(int8(la[2]>>4|(hq[2]>>4&3)<<4)-32)*int32(y3[2])+int32(int8(la[10]>>4|(hq[10]>>4&3)<<4)-32)*int32(y3[10])) +
					s4*(int32(int8(lb[2]>>4|(hq[2]>>6)<<4)-32)*int32(y4[2])+int32(int8(lb[10]>>4|(hq[10]>>6)<<4)-32)*int32(y4[10]))
				a3 += s1*(int32(int8(la[3]&0xF|(hq[3]&3)<<4)-32)*int32(y1[3])+int32(int8(la[11]&0xF|(hq[11]&3)<<4)-32)*int32(y1[11])) +
					s2*(int32(int8(lb[3]&0xF|(hq[3]>>2&3)<<4)-32)*int32(y2[3])+int32(int8(lb[11]&0xF|(hq[11]>>2&3)<<4)-32)*int32(y2[11])) +
					s3*(int32(int8(la[3]>>4|(hq[3]>>4&3)<<4)-32)*int32(y3[3])+int32(int8(la[11]>>4|(hq[11]>>4&3)<<4)-32)*int32(y3[11])) +
					s4*(int32(int8(lb[3]>>4|(hq[3]>>6)<<4)-32)*int32(y4[3])+int32(int8(lb[11]>>4|(hq[11]>>6)<<4)-32)*int32(y4[11]))
				a4 += s1*(int32(int8(la[4]&0xF|(hq[4]&3)<<4)-32)*int32(y1[4])+int32(int8(la[12]&0xF|(hq[12]&3)<<4)-32)*int32(y1[12])) +
					s2*(int32(int8(lb[4]&0xF|(hq[4]>>2&3)<<4)-32)*int32(y2[4])+int32(int8(lb[12]&0xF|(hq[12]>>2&3)<<4)-32)*int32(y2[12])) +
					s3*(int32(int8(la[4]>>4|(hq[4]>>4&3)<<4)-32)*int32(y3[4])+int32(int8(la[12]>>4|(hq[12]>>4&3)<<4)-32)*int32(y3[12])) +
					s4*(int32(int8(lb[4]>>4|(hq[4]>>6)<<4)-32)*int32(y4[4])+int32(int8(lb[12]>>4|(hq[12]>>6)<<4)-32)*int32(y4[12]))
				a5 += s1*(int32(int8(la[5]&0xF|(hq[5]&3)<<4)-32)*int32(y1[5])+int32(int8(la[13]&0xF|(hq[13]&3)<<4)-32)*int32(y1[13])) +
					s2*(int32(int8(lb[5]&0xF|(hq[5]>>2&3)<<4)-32)*int32(y2[5])+int32(int8(lb[13]&0xF|(hq[13]>>2&3)<<4)-32)*int32(y2[13])) +
					s3*(int32(int8(la[5]>>4|(hq[5]>>4&3)<<4)-32)*int32(y3[5])+int32(int8(la[13]>>4|(hq[13]>>4&3)<<4)-32)*int32(y3[13])) +
					s4*(int32(int8(lb[5]>>4|(hq[5]>>6)<<4)-32)*int32(y4[5])+int32(int8(lb[13]>>4|(hq[13]>>6)<<4)-32)*int32(y4[13]))
				a6 += s1*(int32(int8(la[6]&0xF|(hq[6]&3)<<4)-32)*int32(y1[6])+int32(int8(la[14]&0xF|(hq[14]&3)<<4)-32)*int32(y1[14])) +
					s2*(int32(int8(lb[6]&0xF|(hq[6]>>2&3)<<4)-32)*int32(y2[6])+int32(int8(lb[14]&0xF|(hq[14]>>2&3)<<4)-32)*int32(y2[14])) +
					s3*(int32(int8(la[6]>>4|(hq[6]>>4&3)<<4)-32)*int32(y3[6])+int32(int8(la[14]>>4|(hq[14]>>4&3)<<4)-32)*int32(y3[14])) +
					s4*(int32(int8(lb[6]>>4|(hq[6]>>6)<<4)-32)*int32(y4[6])+int32(int8(lb[14]>>4|(hq[14]>>6)<<4)-32)*int32(y4[14]))
				a7 += s1*(int32(int8(la[7]&0xF|(hq[7]&3)<<4)-32)*int32(y1[7])+int32(int8(la[15]&0xF|(hq[15]&3)<<4)-32)*int32(y1[15])) +
					s2*(int32(int8(lb[7]&0xF|(hq[7]>>2&3)<<4)-32)*int32(y2[7])+int32(int8(lb[15]&0xF|(hq[15]>>2&3)<<4)-32)*int32(y2[15])) +
					s3*(int32(int8(la[7]>>4|(hq[7]>>4&3)<<4)-32)*int32(y3[7])+int32(int8(la[15]>>4|(hq[15]>>4&3)<<4)-32)*int32(y3[15])) +
					s4*(int32(int8(lb[7]>>4|(hq[7]>>6)<<4)-32)*int32(y4[7])+int32(int8(lb[15]>>4|(hq[15]>>6)<<4)-32)*int32(y4[15]))
			}
		}
		d := f16at(blk, 208) * a.D[b]
		s0 += float32(d * float32(a0))
		s1 += float32(d * float32(a1))
		s2 += float32(d * float32(a2))
		s3 += float32(d * float32(a3))
		s4 += float32(d * float32(a4))
		s5 += float32(d * float32(a5))
		s6 += float32(d * float32(a6))
		s7 += float32(d * float32(a7))
	}
	var sumf float32
	sumf += s0
	sumf += s1
	sumf += s2
	sumf += s3
	sumf += s4
	sumf += s5
	sumf += s6
	sumf += s7
	return sumf
}

// unpackQ6K decodes a Q6_K block's 256 signed six-bit quants.
//
//go:norace
func unpackQ6K(blk []byte, out *[QKK]int8) {
	for n := 0; n < 2; n++ {
		ql := blk[n*64 : n*64+64]
		qh := blk[128+n*32 : 128+n*32+32]
		o := out[n*128 : n*128+128]
		for l := 0; l < 32; l++ {
			o[l] = int8(ql[l]&0xF|(qh[l]&3)<<4) - 32
			o[l+32] = int8(ql[l+32]&0xF|((qh[l]>>2)&3)<<4) - 32
			o[l+64] = int8(ql[l]>>4|((qh[l]>>4)&3)<<4) - 32
			o[l+96] = int8(ql[l+32]>>4|((qh[l]>>6)&3)<<4) - 32
		}
	}
}

// DequantRow decodes one row of type t into dst (len(dst) elements), as
// ggml's dequantize_row functions do.
//
//go:norace
func DequantRow(t gguf.Type, row []byte, dst []float32) {
	n := len(dst)
	switch t {
	case gguf.F32:
		copy(dst, f32s(row)[:n])
	case gguf.F16:
		for i, h := range u16s(row)[:n] {
			dst[i] = f16table[h]
		}
	case gguf.Q8_0:
		for b := 0; b < n/QK8_0; b++ {
			blk := row[b*34 : b*34+34]
			d := f16at(blk, 0)
			for j, q := range i8s(blk[2:34]) {
				dst[b*QK8_0+j] = d * float32(q)
			}
		}
	case gguf.Q4_K:
		for b := 0; b < n/QKK; b++ {
			blk := row[b*q4KBytes : (b+1)*q4KBytes]
			d, dmin := f16at(blk, 0), f16at(blk, 2)
			sc, mn := scaleMinK4(blk[4:16])
			y := dst[b*QKK : (b+1)*QKK]
			for j := 0; j < 4; j++ {
				q := blk[16+j*32 : 16+j*32+32]
				d1, m1 := d*float32(sc[2*j]), dmin*float32(mn[2*j])
				d2, m2 := d*float32(sc[2*j+1]), dmin*float32(mn[2*j+1])
				for l := 0; l < 32; l++ {
					y[j*64+l] = d1*float32(q[l]&0xF) - m1
					y[j*64+32+l] = d2*float32(q[l]>>4) - m2
				}
			}
		}
	case gguf.Q6_K:
		var a8 [QKK]int8
		for b := 0; b < n/QKK; b++ {
			blk := row[b*q6KBytes : (b+1)*q6KBytes]
			unpackQ6K(blk, &a8)
			d := f16at(blk, 208)
			sc := i8s(blk[192:208])
			y := dst[b*QKK : (b+1)*QKK]
			for j := 0; j < QKK; j++ {
				y[j] = d * float32(sc[j/16]) * float32(a8[j])
			}
		}
	default:
		panic("quant: DequantRow with unsupported type " + t.String())
	}
}
