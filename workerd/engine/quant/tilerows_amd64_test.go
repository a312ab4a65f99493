package quant

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

// tileRowsKernel is a kernel set DotTile and DotTileRows can run: the
// AVX2 kernels, the AVX-512 K-quant tiles and decode rows, the AVX-512
// Q8_0 tile (all off: the portable kernels).
type tileRowsKernel struct {
	name                          string
	avx2, avx512K, avx512Q8, rows bool
}

// tileRowsKernels are the kernel sets this CPU can run: portable, AVX2,
// and the AVX-512 ones where the CPU has them.
func tileRowsKernels() []tileRowsKernel {
	ks := []tileRowsKernel{{name: "portable"}}
	if haveAVX2 && haveKTiles {
		ks = append(ks, tileRowsKernel{"avx2", true, false, false, false})
	}
	if haveTilesAVX512 || haveQ8AVX512 {
		ks = append(ks, tileRowsKernel{"avx512", true, haveTilesAVX512, haveQ8AVX512, haveRowsAVX512})
	}
	return ks
}

// TestDotTileRowsAllKernels: DotTileRows gives DotTile's bits on every
// kernel set (the sweep of TestDotTileRowsIsDotTile), and on the
// extremes of K-quant and Q8_0 weights and activations (infinite and
// NaN scales included: both run the same kernel for each activation, so
// even NaN payloads agree).
func TestDotTileRowsAllKernels(t *testing.T) {
	avx2, vec, k512, q512, rows512 := haveAVX2, haveKTiles, haveTilesAVX512, haveQ8AVX512, haveRowsAVX512
	defer func() {
		haveAVX2, haveKTiles, haveTilesAVX512, haveQ8AVX512, haveRowsAVX512 = avx2, vec, k512, q512, rows512
	}()
	r := rand.New(rand.NewPCG(65, 66))
	for _, k := range tileRowsKernels() {
		haveAVX2, haveKTiles, haveTilesAVX512, haveQ8AVX512, haveRowsAVX512 = k.avx2, k.avx2, k.avx512K, k.avx512Q8, k.rows
		sweepTileRows(t, r, k.name)
		for _, typ := range []gguf.Type{gguf.Q4_K, gguf.Q6_K} {
			for nb := 1; nb <= 3; nb++ {
				for batch := 4; batch <= 17; batch++ {
					c := (nb + batch) % 4
					rows, rowBytes := blockOfRows(5, 0, func() []byte { return extremeKRow(r, typ, nb, c) })
					acts := make([]Act, batch)
					for i := range acts {
						acts[i].Prepare(typ, extremeActivation(r, nb*QKK, (c+i)%4))
					}
					checkTileRows(t, fmt.Sprintf("%s %s extreme case %d, %d blocks", k.name, typ, c, nb), rows, rowBytes, acts)
				}
			}
		}
		for _, nb := range []int{4, 8, 16} {
			for batch := 4; batch <= 17; batch++ {
				rows, rowBytes := blockOfRows(5, 0, func() []byte { return extremeQ8Row(r, nb) })
				acts := make([]Act, batch)
				for i := range acts {
					acts[i] = q8TestAct(r, nb, true)
				}
				checkTileRows(t, fmt.Sprintf("%s Q8_0 extreme, %d blocks", k.name, nb), rows, rowBytes, acts)
			}
		}
	}
}

// TestTileRowsRun: with AVX2 the row-block paths take a block whose
// activations are all ready (the sweeps would pass through DotTile per
// row too) and decline one with an activation the tiles do not take or
// rows too short for the activations.
func TestTileRowsRun(t *testing.T) {
	if !haveAVX2 || !haveKTiles {
		t.Skip("no AVX2: DotTileRows runs DotTile per row")
	}
	r := rand.New(rand.NewPCG(67, 68))
	for _, typ := range []gguf.Type{gguf.Q8_0, gguf.Q4_K, gguf.Q6_K} {
		tileRows := kTileRows
		if typ == gguf.Q8_0 {
			tileRows = q8_0TileRows
		}
		const n = 512
		rows, rowBytes := blockOfRows(4, 0, func() []byte { return randomRow(r, typ, n) })
		acts := make([]Act, 15)
		for i := range acts {
			acts[i].Prepare(typ, normalVector(r, n))
		}
		out := make([]float32, 4*len(acts))
		if !tileRows(rows, rowBytes, acts, out) {
			t.Fatalf("%s: the row-block tiles declined 15 ready activations", typ)
		}
		if tileRows(rows, rowBytes/2, acts, out[:2*len(acts)]) {
			t.Fatalf("%s: the row-block tiles took rows shorter than the activations", typ)
		}
		unready(&acts[9])
		if tileRows(rows, rowBytes, acts, out) {
			t.Fatalf("%s: the row-block tiles took a block with activation 9 unready", typ)
		}
	}
}
