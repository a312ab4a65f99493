package quant

import "golang.org/x/sys/cpu"

// haveAVX2 selects the AVX2 block sums of Q8_0 dot products. They are
// exact integers, so the result is bit for bit the portable kernel's.
var haveAVX2 = cpu.X86.HasAVX2

//go:noescape
func blockDotsQ8_0AVX2(row *byte, q *int8, nb int, out *int32)

// blockDotsQ8_0 writes the integer dot of each of len(out) blocks.
func blockDotsQ8_0(row []byte, q []int8, out []int32) bool {
	if !haveAVX2 || len(out) == 0 {
		return false
	}
	n := len(out)
	_ = row[n*34-1]
	_ = q[n*32-1]
	blockDotsQ8_0AVX2(&row[0], &q[0], n, &out[0])
	return true
}

//go:noescape
func q4KLanesAVX2(qs *byte, q8 *int8, scales *uint32, aux *int32)

// q4KLanes computes one super-block's integer lanes (see dotQ4K).
func q4KLanes(qs []byte, q8 []int8, scales *[4]uint32, aux *[8]int32) bool {
	if !haveAVX2 {
		return false
	}
	_ = qs[127]
	_ = q8[255]
	q4KLanesAVX2(&qs[0], &q8[0], &scales[0], &aux[0])
	return true
}

//go:noescape
func q6KLanesAVX2(blk *byte, q8 *int8, scales *uint32, aux *int32)

// q6KLanes computes one super-block's integer lanes (see dotQ6K).
func q6KLanes(blk []byte, q8 []int8, scales *[8]uint32, aux *[8]int32) bool {
	if !haveAVX2 {
		return false
	}
	_ = blk[191]
	_ = q8[255]
	q6KLanesAVX2(&blk[0], &q8[0], &scales[0], &aux[0])
	return true
}

var haveF16C = haveAVX2 && cpu.X86.HasF16C

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
