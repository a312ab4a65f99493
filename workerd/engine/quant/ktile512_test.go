//go:build amd64

package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

// tileKernels are the prefill tile paths DotTile can take on this CPU:
// the AVX-512 tiles (where the CPU has them), the AVX2 ones, and none
// (Dot per activation, the portable kernels).
func tileKernels() []struct {
	name        string
	vec, vec512 bool
} {
	all := []struct {
		name        string
		vec, vec512 bool
	}{{"avx512", true, true}, {"avx2", true, false}, {"portable", false, false}}
	var ks []struct {
		name        string
		vec, vec512 bool
	}
	for _, k := range all {
		if (k.vec && !haveKTiles) || (k.vec512 && !haveTilesAVX512) {
			continue
		}
		ks = append(ks, k)
	}
	return ks
}

// extremeKRow makes a Q4_K / Q6_K row of nb super-blocks for case c:
// 0 random quants and modest scales, 1 every quant and scale bit set
// (the largest integer sums; Q6_K scales of -1), 2 random quants with
// F16 scales at the extremes (largest finite, smallest subnormal, zero,
// negative), 3 random quants with infinite or NaN F16 scales.
func extremeKRow(r *rand.Rand, typ gguf.Type, nb, c int) []byte {
	n := nb * QKK
	row := randomRow(r, typ, n)
	if c == 1 {
		for i := range row {
			row[i] = 0xff
		}
	}
	scales := [][]uint16{
		nil,
		{0x3c00},                                 // 1.0
		{0x7bff, 0x0001, 0x0000, 0x8000, 0xfbff}, // ±65504, 2^-24, ±0
		{0x7c00, 0xfc00, 0x7e00, 0x7d01},         // ±Inf, NaNs
	}[c]
	if scales == nil {
		return row
	}
	size, offs := q4KBytes, []int{0, 2}
	if typ == gguf.Q6_K {
		size, offs = q6KBytes, []int{208}
	}
	for b := range nb {
		for _, o := range offs {
			binary.LittleEndian.PutUint16(row[b*size+o:], scales[r.IntN(len(scales))])
		}
	}
	return row
}

// extremeActivation is an activation of n elements for case c: 0
// standard normal, 1 all ±1 alternating (quants ±127), 2 magnitudes near
// float32's largest (scales D that overflow products to infinity) and
// smallest, 3 zero blocks (D = 0) beside normal ones.
func extremeActivation(r *rand.Rand, n, c int) []float32 {
	x := normalVector(r, n)
	for j := range x {
		switch c {
		case 1:
			x[j] = float32(1 - 2*(j%2))
		case 2:
			if (j/QKK)%2 == 0 {
				x[j] *= 1e37
			} else {
				x[j] *= 1e-37
			}
		case 3:
			if (j/QKK)%2 == 0 {
				x[j] = 0
			}
		}
	}
	return x
}

// TestKTilesAVX512IsPortable: DotTile on Q4_K and Q6_K rows gives every
// activation the portable kernel's bits on each tile path (AVX-512,
// AVX2, none), for rows of 1 to 9 super-blocks and batches of 1 to 17
// (tiles of eight, of four and remainders), on random data and on the
// extremes of quants, weight scales and activation scales; and the
// AVX-512 path gives the AVX2 path's bits on the same inputs. With
// infinite or NaN weight scales a NaN from the portable kernels may
// carry another sign or payload than the assembly's (where two NaNs
// meet, x86 returns the first operand's, and the AVX2 kernels already
// differ from the portable ones there): in that case a NaN matches any
// NaN, while the AVX-512 tiles must still give the AVX2 tiles' bits.
func TestKTilesAVX512IsPortable(t *testing.T) {
	vec, vec512 := haveKTiles, haveTilesAVX512
	defer func() { haveKTiles, haveTilesAVX512 = vec, vec512 }()
	portable := map[gguf.Type]func([]byte, *Act) float32{
		gguf.Q4_K: dotQ4KPortable,
		gguf.Q6_K: dotQ6KPortable,
	}
	kernels := tileKernels()
	r := rand.New(rand.NewPCG(23, 24))
	for _, typ := range []gguf.Type{gguf.Q4_K, gguf.Q6_K} {
		for nb := 1; nb <= 9; nb++ {
			n := nb * QKK
			for batch := 1; batch <= 17; batch++ {
				c := (nb + batch) % 4
				row := extremeKRow(r, typ, nb, c)
				xs := make([][]float32, batch)
				for i := range xs {
					xs[i] = extremeActivation(r, n, (c+i)%4)
				}
				var first []float32
				for _, k := range kernels {
					haveKTiles, haveTilesAVX512 = k.vec, k.vec512
					acts := make([]Act, batch)
					for i := range acts {
						acts[i].Prepare(typ, xs[i])
					}
					out := make([]float32, batch)
					DotTile(row, acts, out)
					for i := range acts {
						want := portable[typ](row, &acts[i])
						if c == 3 && math.IsNaN(float64(out[i])) && math.IsNaN(float64(want)) {
							continue // NaN payloads: see the test's comment
						}
						if math.Float32bits(out[i]) != math.Float32bits(want) {
							t.Fatalf("%s nb=%d batch %d case %d, %s: activation %d: tile %g (%#x), portable %g (%#x)",
								typ, nb, batch, c, k.name, i, out[i], math.Float32bits(out[i]), want, math.Float32bits(want))
						}
					}
					if !k.vec {
						continue
					}
					if first == nil {
						first = out
						continue
					}
					for i := range out {
						if math.Float32bits(out[i]) != math.Float32bits(first[i]) {
							t.Fatalf("%s nb=%d batch %d case %d: activation %d: %s %g (%#x), %s %g (%#x)",
								typ, nb, batch, c, i, k.name, out[i], math.Float32bits(out[i]), kernels[0].name, first[i], math.Float32bits(first[i]))
						}
					}
				}
			}
		}
	}
}

// TestKTileRowsIsPortable: DotTileRows on blocks of Q4_K and Q6_K rows
// gives every row and activation the portable kernel's bits on each tile
// path (AVX-512, AVX2, none), for rows of 1, 4 and 9 super-blocks (the
// last padded, as rows of a wider matrix), blocks of 1, 3 and 16 rows and
// batches of 1 to 33 (up to four tiles of eight, each under all the
// block's rows, then tiles of four and single activations), on random
// data and on the extremes (NaNs as in TestKTilesAVX512IsPortable).
func TestKTileRowsIsPortable(t *testing.T) {
	vec, vec512 := haveKTiles, haveTilesAVX512
	defer func() { haveKTiles, haveTilesAVX512 = vec, vec512 }()
	portable := map[gguf.Type]func([]byte, *Act) float32{
		gguf.Q4_K: dotQ4KPortable,
		gguf.Q6_K: dotQ6KPortable,
	}
	kernels := tileKernels()
	r := rand.New(rand.NewPCG(29, 30))
	for _, typ := range []gguf.Type{gguf.Q4_K, gguf.Q6_K} {
		for _, nb := range []int{1, 4, 9} {
			pad := 0
			if nb == 9 {
				pad = 7
			}
			for _, nrows := range []int{1, 3, 16} {
				for batch := 1; batch <= 33; batch++ {
					c := (nb + nrows + batch) % 4
					rows, rowBytes := blockOfRows(nrows, pad, func() []byte { return extremeKRow(r, typ, nb, c) })
					xs := make([][]float32, batch)
					for i := range xs {
						xs[i] = extremeActivation(r, nb*QKK, (c+i)%4)
					}
					for _, k := range kernels {
						haveKTiles, haveTilesAVX512 = k.vec, k.vec512
						acts := make([]Act, batch)
						for i := range acts {
							acts[i].Prepare(typ, xs[i])
						}
						out := make([]float32, nrows*batch)
						DotTileRows(rows, rowBytes, acts, out)
						for j := range nrows {
							row := rows[j*rowBytes : (j+1)*rowBytes]
							for i := range acts {
								got, want := out[j*batch+i], portable[typ](row, &acts[i])
								if c == 3 && math.IsNaN(float64(got)) && math.IsNaN(float64(want)) {
									continue // NaN payloads: see TestKTilesAVX512IsPortable
								}
								if math.Float32bits(got) != math.Float32bits(want) {
									t.Fatalf("%s nb=%d, %d rows, batch %d, case %d, %s: row %d activation %d: %g (%#x), portable %g (%#x)",
										typ, nb, nrows, batch, c, k.name, j, i, got, math.Float32bits(got), want, math.Float32bits(want))
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestKTilesAVX512Run: with the AVX-512 tiles the tile kernels take every
// whole tile of eight and four (TestKTilesAVX512IsPortable would pass
// through the one-at-a-time fallback too).
func TestKTilesAVX512Run(t *testing.T) {
	if !haveTilesAVX512 {
		t.Skip("no AVX-512 VBMI/VNNI: the AVX2 tiles run")
	}
	r := rand.New(rand.NewPCG(25, 26))
	for _, typ := range []gguf.Type{gguf.Q4_K, gguf.Q6_K} {
		const n = 768
		row := randomRow(r, typ, n)
		acts := make([]Act, 15)
		for i := range acts {
			acts[i].Prepare(typ, normalVector(r, n))
		}
		out := make([]float32, len(acts))
		if got := kTiles(row, acts, out); got != 12 {
			t.Fatalf("%s: the tiles took %d of 15 activations, want 12 (8 + 4)", typ, got)
		}
	}
}

// BenchmarkKTiles: one 1024-element row against a batch of 64 prepared
// activations (a prefill's tiles of eight), in ns per row and
// activation, with each set of tile kernels.
func BenchmarkKTiles(b *testing.B) {
	vec512 := haveTilesAVX512
	defer func() { haveTilesAVX512 = vec512 }()
	kernels := tileKernels()
	r := rand.New(rand.NewPCG(27, 28))
	const n, batch = 1024, 64
	for _, typ := range []gguf.Type{gguf.Q4_K, gguf.Q6_K} {
		row := randomRow(r, typ, n)
		acts := make([]Act, batch)
		for i := range acts {
			acts[i].Prepare(typ, normalVector(r, n))
		}
		out := make([]float32, batch)
		for _, k := range kernels {
			if !k.vec {
				continue
			}
			b.Run(typ.String()+"/"+k.name, func(b *testing.B) {
				haveTilesAVX512 = k.vec512
				for b.Loop() {
					DotTile(row, acts, out)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/pos")
			})
		}
	}
}
