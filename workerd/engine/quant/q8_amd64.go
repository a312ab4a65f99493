package quant

import (
	"golang.org/x/sys/cpu"

	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

// haveAVX2 selects the assembly kernels (AVX2, with F16C for the F16
// scales). Integer sums are exact and the float operations are the
// portable kernels' in the same order, so the results are bit for bit
// the portable kernels'.
var haveAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasF16C

//go:noescape
func q8_0DotAVX2(row *byte, q *int8, d *float32, nb int) float32

// dotQ8_0Vec is dotQ8_0 in assembly; ok is false without AVX2.
func dotQ8_0Vec(row []byte, a *Act) (sum float32, ok bool) {
	nb := len(a.D)
	if !haveAVX2 || nb == 0 {
		return 0, false
	}
	_ = row[nb*34-1]
	_ = a.Q[nb*32-1]
	return q8_0DotAVX2(&row[0], &a.Q[0], &a.D[0], nb), true
}

//go:noescape
func q8_0Dot4AVX2(row *byte, nb int, q *[4]*int8, d *[4]*float32, out *[4]float32)

//go:noescape
func q8_0Dot8AVX2(row *byte, nb int, q *[8]*int8, d *[8]*float32, out *[8]float32)

// q8_0Tiles computes out[i] = Dot(row, &acts[i]) for the leading
// activations that fill tiles of sixteen (AVX-512, q8_0Tiles16), then
// of eight, then of four (each group of weight blocks loaded and
// prepared once for the tile), bit for bit, and returns how many it
// did: 0 without AVX2 or when the row's blocks are not a multiple of
// four; it stops at an activation prepared for another type or length.
//
//go:norace
func q8_0Tiles(row []byte, acts []Act, out []float32) int {
	nb := len(acts[0].D)
	if !haveAVX2 || nb == 0 || nb%4 != 0 {
		return 0
	}
	_ = row[nb*34-1]
	i := q8_0Tiles16(row, nb, acts, out)
	var q [8]*int8
	var d [8]*float32
	for i+4 <= len(acts) {
		n := 4
		if i+8 <= len(acts) {
			n = 8
		}
		for k := range n {
			a := &acts[i+k]
			if a.Type != gguf.Q8_0 || len(a.D) != nb || len(a.Q) != nb*QK8_0 {
				return i
			}
			q[k], d[k] = &a.Q[0], &a.D[0]
		}
		if n == 8 {
			q8_0Dot8AVX2(&row[0], nb, &q, &d, (*[8]float32)(out[i:i+8]))
		} else {
			q8_0Dot4AVX2(&row[0], nb, (*[4]*int8)(q[:4]), (*[4]*float32)(d[:4]), (*[4]float32)(out[i:i+4]))
		}
		i += n
	}
	return i
}

// q8_0TileRows computes out[k*len(acts)+i] = Dot(rows[k*rowBytes:],
// &acts[i]) for every activation and each of len(out)/len(acts) weight
// rows with the tile kernels q8_0Tiles runs, the same kernel for each
// activation as q8_0Tiles gives it, and reports whether it did: not
// without AVX2, when the rows' blocks are not a multiple of four, or
// unless every activation was prepared like the first for rowBytes-long
// rows. The activations are checked and each tile's pointers gathered
// once for all the rows instead of once per row.
//
//go:norace
func q8_0TileRows(rows []byte, rowBytes int, acts []Act, out []float32) bool {
	T := len(acts)
	if !haveAVX2 || T < 4 {
		return false
	}
	nb := len(acts[0].D)
	if nb == 0 || nb%4 != 0 || rowBytes < nb*34 {
		return false
	}
	for i := range acts {
		if a := &acts[i]; a.Type != gguf.Q8_0 || len(a.D) != nb || len(a.Q) != nb*QK8_0 {
			return false
		}
	}
	n := len(out) / T
	if n == 0 {
		return true
	}
	_ = rows[(n-1)*rowBytes+nb*34-1]
	_ = out[n*T-1]
	i := q8_0Tile16Rows(rows, rowBytes, n, nb, acts, out)
	var q [8]*int8
	var d [8]*float32
	for i+4 <= T {
		m := 4
		if i+8 <= T {
			m = 8
		}
		for j := range m {
			q[j], d[j] = &acts[i+j].Q[0], &acts[i+j].D[0]
		}
		for k := range n {
			o := out[k*T+i : k*T+i+m]
			if m == 8 {
				q8_0Dot8AVX2(&rows[k*rowBytes], nb, &q, &d, (*[8]float32)(o))
			} else {
				q8_0Dot4AVX2(&rows[k*rowBytes], nb, (*[4]*int8)(q[:4]), (*[4]*float32)(d[:4]), (*[4]float32)(o))
			}
		}
		i += m
	}
	for ; i < T; i++ {
		for k := range n {
			out[k*T+i] = Dot(rows[k*rowBytes:(k+1)*rowBytes], &acts[i])
		}
	}
	return true
}

//go:noescape
func q4KDotAVX2(row *byte, q8 *int8, d *float32, sums32 *int16, nb int, lanes *[8]float32) float32

//go:noescape
func q6KDotAVX2(row *byte, q8 *int8, d *float32, nb int, lanes *[8]float32)

// q4KVec is the assembly part of dotQ4K: the running sum of the mins'
// terms and the eight float lanes; ok is false without AVX2.
func q4KVec(row []byte, a *Act, lanes *[8]float32) (sumf float32, ok bool) {
	nb := len(a.D)
	if !haveAVX2 || nb == 0 {
		return 0, false
	}
	_ = row[nb*q4KBytes-1]
	_ = a.Q[nb*QKK-1]
	_ = a.Sums32[nb*8-1]
	return q4KDotAVX2(&row[0], &a.Q[0], &a.D[0], &a.Sums32[0], nb, lanes), true
}

// q6KVec is the assembly part of dotQ6K: the eight float lanes; ok is
// false without AVX2.
func q6KVec(row []byte, a *Act, lanes *[8]float32) bool {
	nb := len(a.D)
	if !haveAVX2 || nb == 0 {
		return false
	}
	_ = row[nb*q6KBytes-1]
	_ = a.Q[nb*QKK-1]
	q6KDotAVX2(&row[0], &a.Q[0], &a.D[0], nb, lanes)
	return true
}

var haveF16C = haveAVX2

//go:noescape
func dotF32AVX2(w *float32, x *float32, n int) float64

//go:noescape
func dotF16AVX2(w *uint16, x *float32, n int) float64

// dotF32Vec is Σ w[i]·x[i] over the largest multiple of 16 elements,
// and how many it covered.
func dotF32Vec(w, x []float32) (float64, int) {
	n := len(x) &^ 15
	if !haveAVX2 || n == 0 {
		return 0, 0
	}
	_ = w[n-1]
	return dotF32AVX2(&w[0], &x[0], n), n
}

// dotF16Vec is dotF32Vec with half-precision w.
func dotF16Vec(w []uint16, x []float32) (float64, int) {
	n := len(x) &^ 15
	if !haveF16C || n == 0 {
		return 0, 0
	}
	_ = w[n-1]
	return dotF16AVX2(&w[0], &x[0], n), n
}
