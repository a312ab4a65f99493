package quant

import (
	"golang.org/x/sys/cpu"

	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

//go:noescape
func q4KDot4AVX2(row *byte, nb int, q *[4]*int8, d *[4]*float32, sums32 *[4]*int16, lanes *[4][8]float32, mins *[4]float32)

//go:noescape
func q4KDot8AVX2(row *byte, nb int, q *[8]*int8, d *[8]*float32, sums32 *[8]*int16, lanes *[8][8]float32, mins *[8]float32)

//go:noescape
func q6KDot4AVX2(row *byte, nb int, q *[4]*int8, d *[4]*float32, lanes *[4][8]float32)

//go:noescape
func q6KDot8AVX2(row *byte, nb int, q *[8]*int8, d *[8]*float32, lanes *[8][8]float32)

//go:noescape
func q4KDot4AVX512(row *byte, nb int, q *[4]*int8, d *[4]*float32, sums32 *[4]*int16, lanes *[4][8]float32, mins *[4]float32)

//go:noescape
func q4KTiles8AVX512(row *byte, nb int, acts *Act, tiles int, out *float32)

//go:noescape
func q6KDot4AVX512(row *byte, nb int, q *[4]*int8, d *[4]*float32, lanes *[4][8]float32)

//go:noescape
func q6KTiles8AVX512(row *byte, nb int, acts *Act, tiles int, out *float32)

// haveTilesAVX512 selects the AVX-512 prefill tiles (ktile512_amd64.s:
// byte permutes from VBMI, VPDPWSSD from VNNI, Y16-Y23 from VL); a
// variable so tests run both them and the AVX2 ones.
var haveTilesAVX512 = haveKTiles && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW &&
	cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VBMI && cpu.X86.HasAVX512VNNI

// haveKTiles: Prepare arranges Q8_K activations in tile order (Act.QT)
// only where the tiles run.
var haveKTiles = haveAVX2

// kTiles computes out[i] = Dot(row, &acts[i]) for the leading activations
// that fill tiles of eight, then of four, with the Q4_K / Q6_K tile
// kernels (ktile512_amd64.s where haveTilesAVX512, else ktile_amd64.s),
// bit for bit, and returns how many it did: 0 without AVX2, for other
// types, or when an activation was not prepared like the first for the
// row's length.
//
//go:norace
func kTiles(row []byte, acts []Act, out []float32) int {
	if !haveKTiles || len(acts) < 4 {
		return 0
	}
	t, nb := acts[0].Type, len(acts[0].D)
	if nb == 0 {
		return 0
	}
	switch t {
	case gguf.Q4_K:
		_ = row[nb*q4KBytes-1]
	case gguf.Q6_K:
		_ = row[nb*q6KBytes-1]
	default:
		return 0
	}
	i := 0
	if haveTilesAVX512 {
		// The AVX-512 tiles of eight take the whole row's leading run
		// of ready activations in one call, reading their slices from
		// the Act structs and writing the final sums.
		ready := 0
		for ready < len(acts) && kTileReady(&acts[ready], t, nb) {
			ready++
		}
		if tiles := ready / 8; tiles > 0 {
			_ = out[tiles*8-1]
			if t == gguf.Q4_K {
				q4KTiles8AVX512(&row[0], nb, &acts[0], tiles, &out[0])
			} else {
				q6KTiles8AVX512(&row[0], nb, &acts[0], tiles, &out[0])
			}
			i = tiles * 8
		}
	}
	var q [8]*int8
	var d [8]*float32
	var sums [8]*int16
	var lanes [8][8]float32
	var mins [8]float32
	for i+4 <= len(acts) {
		n := 4
		if i+8 <= len(acts) {
			n = 8
		}
		for k := range n {
			a := &acts[i+k]
			if !kTileReady(a, t, nb) {
				return i
			}
			q[k], d[k], sums[k] = &a.QT[0], &a.D[0], &a.Sums32[0]
		}
		kTile(t, n, &row[0], nb, &q, &d, &sums, &lanes, &mins)
		addLanes(out[i:i+n], mins[:n], lanes[:n])
		i += n
	}
	return i
}

// kTile runs the Q4_K (t) or Q6_K tile kernel of n activations, eight
// or the first four of q, d and sums, on a row of nb super-blocks,
// leaving their lanes and (Q4_K) mins' sums for addLanes.
func kTile(t gguf.Type, n int, row *byte, nb int, q *[8]*int8, d *[8]*float32, sums *[8]*int16, lanes *[8][8]float32, mins *[8]float32) {
	q4, d4, sums4, lanes4, mins4 := (*[4]*int8)(q[:4]), (*[4]*float32)(d[:4]), (*[4]*int16)(sums[:4]), (*[4][8]float32)(lanes[:4]), (*[4]float32)(mins[:4])
	switch {
	case t == gguf.Q4_K && n == 8:
		q4KDot8AVX2(row, nb, q, d, sums, lanes, mins)
	case t == gguf.Q4_K && haveTilesAVX512:
		q4KDot4AVX512(row, nb, q4, d4, sums4, lanes4, mins4)
	case t == gguf.Q4_K:
		q4KDot4AVX2(row, nb, q4, d4, sums4, lanes4, mins4)
	case n == 8:
		q6KDot8AVX2(row, nb, q, d, lanes)
	case haveTilesAVX512:
		q6KDot4AVX512(row, nb, q4, d4, lanes4)
	default:
		q6KDot4AVX2(row, nb, q4, d4, lanes4)
	}
}

// kTileRows computes out[k*len(acts)+i] = Dot(rows[k*rowBytes:], &acts[i])
// for every activation and each of len(out)/len(acts) weight rows with
// the tile kernels kTiles runs, the same kernel for each activation as
// kTiles gives it, and reports whether it did: not without AVX2, for
// other types, or unless every activation was prepared like the first
// for rowBytes-long rows. The activations are checked once for all the
// rows instead of once per row, and each tile's pointers gathered once.
//
//go:norace
func kTileRows(rows []byte, rowBytes int, acts []Act, out []float32) bool {
	T := len(acts)
	if !haveKTiles || T < 4 {
		return false
	}
	t, nb := acts[0].Type, len(acts[0].D)
	var blockBytes int
	switch t {
	case gguf.Q4_K:
		blockBytes = q4KBytes
	case gguf.Q6_K:
		blockBytes = q6KBytes
	default:
		return false
	}
	if nb == 0 || rowBytes < nb*blockBytes {
		return false
	}
	for i := range acts {
		if !kTileReady(&acts[i], t, nb) {
			return false
		}
	}
	n := len(out) / T
	if n == 0 {
		return true
	}
	_ = rows[(n-1)*rowBytes+nb*blockBytes-1]
	_ = out[n*T-1]
	i := 0
	if haveTilesAVX512 {
		// Tile by tile, each under all the rows: a tile's activations
		// (8·nb·256 bytes of QT) are read from L1 by every row after the
		// first, where a row against all the batch's tiles streamed the
		// whole batch (64·nb·256 bytes) from L2 again for each row.
		tile8 := q4KTiles8AVX512
		if t == gguf.Q6_K {
			tile8 = q6KTiles8AVX512
		}
		for ; i+8 <= T; i += 8 {
			for k := range n {
				tile8(&rows[k*rowBytes], nb, &acts[i], 1, &out[k*T+i])
			}
		}
	}
	var q [8]*int8
	var d [8]*float32
	var sums [8]*int16
	var lanes [8][8]float32
	var mins [8]float32
	for i+4 <= T {
		m := 4
		if i+8 <= T {
			m = 8
		}
		for j := range m {
			a := &acts[i+j]
			q[j], d[j], sums[j] = &a.QT[0], &a.D[0], &a.Sums32[0]
		}
		for k := range n {
			kTile(t, m, &rows[k*rowBytes], nb, &q, &d, &sums, &lanes, &mins)
			addLanes(out[k*T+i:k*T+i+m], mins[:m], lanes[:m])
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

// kTileReady reports whether a was prepared like a tile's activations
// must be: for type t, nb super-blocks, with the tile order.
func kTileReady(a *Act, t gguf.Type, nb int) bool {
	return a.Type == t && len(a.D) == nb && len(a.QT) == nb*QKK && len(a.Sums32) == nb*8
}

// addLanes sets out[k] to start[k] plus activation k's eight lanes in
// lane order (dotQ4K's and dotQ6K's final sum; Q6_K starts at zero: its
// mins stay zero), the activations' sums interleaved in locals: eight
// (or four) independent chains of additions instead of one long one.
func addLanes(out, start []float32, l [][8]float32) {
	if len(out) == 8 {
		addLanes8((*[8]float32)(out), (*[8]float32)(start), (*[8][8]float32)(l))
		return
	}
	addLanes4((*[4]float32)(out), (*[4]float32)(start), (*[4][8]float32)(l))
}

func addLanes8(out, start *[8]float32, l *[8][8]float32) {
	s0, s1, s2, s3, s4, s5, s6, s7 := start[0], start[1], start[2], start[3], start[4], start[5], start[6], start[7]
	for j := 0; j < 8; j++ {
		s0 += l[0][j]
		s1 += l[1][j]
		s2 += l[2][j]
		s3 += l[3][j]
		s4 += l[4][j]
		s5 += l[5][j]
		s6 += l[6][j]
		s7 += l[7][j]
	}
	*out = [8]float32{s0, s1, s2, s3, s4, s5, s6, s7}
}

func addLanes4(out, start *[4]float32, l *[4][8]float32) {
	s0, s1, s2, s3 := start[0], start[1], start[2], start[3]
	for j := 0; j < 8; j++ {
		s0 += l[0][j]
		s1 += l[1][j]
		s2 += l[2][j]
		s3 += l[3][j]
	}
	*out = [4]float32{s0, s1, s2, s3}
}

//go:noescape
func q4KRowsAVX2(rows *byte, rowBytes int, n int, q *int8, d *float32, sums32 *int16, nb int, out *float32)

//go:noescape
func q6KRowsAVX2(rows *byte, rowBytes int, n int, q *int8, d *float32, sums32 *int16, nb int, out *float32)

//go:noescape
func q4KRowsAVX512(rows *byte, rowBytes int, n int, q *int8, d *float32, sums32 *int16, nb int, out *float32)

//go:noescape
func q6KRowsAVX512(rows *byte, rowBytes int, n int, q *int8, d *float32, sums32 *int16, nb int, out *float32)

// haveRowsAVX512 selects the AVX-512 decode kernels (krows512_amd64.s:
// byte permutes from VBMI, VPDPWSSD from VNNI); a variable so tests run
// both them and the AVX2 ones.
var haveRowsAVX512 = haveKTiles && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW &&
	cpu.X86.HasAVX512VBMI && cpu.X86.HasAVX512VNNI

// kRows computes out[i] = Dot(rows[i*rowBytes:], a) for every i with the
// Q4_K / Q6_K decode kernels (ktile_amd64.s), bit for bit, and reports
// whether it did: not without AVX2, for other types, or when a was not
// prepared with the tile order. rows holds len(out) rows rowBytes apart.
//
//go:norace
func kRows(rows []byte, rowBytes int, a *Act, out []float32) bool {
	nb := len(a.D)
	if !haveKTiles || nb == 0 || len(out) == 0 || len(a.QT) != nb*QKK || len(a.Sums32) != nb*8 {
		return false
	}
	var kernel func(*byte, int, int, *int8, *float32, *int16, int, *float32)
	var blockBytes int
	switch a.Type {
	case gguf.Q4_K:
		kernel, blockBytes = q4KRowsAVX2, q4KBytes
		if haveRowsAVX512 {
			kernel = q4KRowsAVX512
		}
	case gguf.Q6_K:
		kernel, blockBytes = q6KRowsAVX2, q6KBytes
		if haveRowsAVX512 {
			kernel = q6KRowsAVX512
		}
	default:
		return false
	}
	if rowBytes < nb*blockBytes {
		return false
	}
	_ = rows[(len(out)-1)*rowBytes+nb*blockBytes-1]
	kernel(&rows[0], rowBytes, len(out), &a.QT[0], &a.D[0], &a.Sums32[0], nb, &out[0])
	return true
}
