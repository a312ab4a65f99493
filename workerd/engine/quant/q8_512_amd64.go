package quant

import (
	"golang.org/x/sys/cpu"

	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

//go:noescape
func q8_0Tile16AVX512(row *byte, nb int, q *[16]*int8, d *[16]*float32, out *[16]float32)

// haveQ8AVX512 selects the AVX-512 Q8_0 tile (q8_512_amd64.s:
// VPDPBUSD from VNNI, sign masks from BW); a variable so tests run both
// it and the AVX2 tiles.
var haveQ8AVX512 = haveAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW &&
	cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VNNI

// q8_0Tiles16 computes out[i] = Dot(row, &acts[i]) for the leading
// activations that fill tiles of sixteen with the AVX-512 tile and
// returns how many it did: 0 without it or when nb, the row's blocks,
// is not a multiple of eight; it stops at an activation prepared for
// another type or length. The caller checked row's length.
//
//go:norace
func q8_0Tiles16(row []byte, nb int, acts []Act, out []float32) int {
	if !haveQ8AVX512 || nb%8 != 0 {
		return 0
	}
	var q [16]*int8
	var d [16]*float32
	i := 0
	for ; i+16 <= len(acts); i += 16 {
		for k := range 16 {
			a := &acts[i+k]
			if a.Type != gguf.Q8_0 || len(a.D) != nb || len(a.Q) != nb*QK8_0 {
				return i
			}
			q[k], d[k] = &a.Q[0], &a.D[0]
		}
		q8_0Tile16AVX512(&row[0], nb, &q, &d, (*[16]float32)(out[i:i+16]))
	}
	return i
}

// q8_0Tile16Rows is q8_0Tiles16 for n weight rows rowBytes apart, out
// holding each row's len(acts) results in turn: the activations' tiles
// of sixteen, each tile's pointers gathered once for all the rows. The
// caller checked every activation and the rows' and out's lengths.
//
//go:norace
func q8_0Tile16Rows(rows []byte, rowBytes, n, nb int, acts []Act, out []float32) int {
	if !haveQ8AVX512 || nb%8 != 0 {
		return 0
	}
	T := len(acts)
	var q [16]*int8
	var d [16]*float32
	i := 0
	for ; i+16 <= T; i += 16 {
		for j := range 16 {
			q[j], d[j] = &acts[i+j].Q[0], &acts[i+j].D[0]
		}
		for k := range n {
			q8_0Tile16AVX512(&rows[k*rowBytes], nb, &q, &d, (*[16]float32)(out[k*T+i:k*T+i+16]))
		}
	}
	return i
}
