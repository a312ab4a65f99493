package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

// q8Kernel is a set of Q8_0 kernels a test runs: the AVX-512 tile, the
// AVX2 kernels, or (both switched off) the portable Go.
type q8Kernel struct {
	name         string
	avx2, avx512 bool
}

// q8Kernels are the kernel sets this CPU can run.
func q8Kernels() []q8Kernel {
	ks := []q8Kernel{{"portable", false, false}}
	if haveAVX2 {
		ks = append(ks, q8Kernel{"avx2", true, false})
	}
	if haveQ8AVX512 {
		ks = append(ks, q8Kernel{"avx512", true, true})
	}
	return ks
}

// extremeQ8Row is a Q8_0 row of nb blocks whose quants are mostly the
// extremes -128, -127, 127 and 0 and whose F16 scales range from the
// smallest subnormal to the largest finite half.
func extremeQ8Row(r *rand.Rand, nb int) []byte {
	row := randomRow(r, gguf.Q8_0, nb*QK8_0)
	quants := []byte{0x80, 0x81, 0x7f, 0}
	scales := []uint16{0x0001, 0x03ff, 0x7bff, 0xfbff, 0x8001, 0x3c00}
	for b := range nb {
		blk := row[b*34 : (b+1)*34]
		if r.IntN(2) == 0 {
			binary.LittleEndian.PutUint16(blk, scales[r.IntN(len(scales))])
		}
		for j := 2; j < 34; j++ {
			if r.IntN(4) != 0 {
				blk[j] = quants[r.IntN(len(quants))]
			}
		}
	}
	return row
}

// q8TestAct is a Q8_0 activation of nb blocks: normal values prepared,
// or (extreme) quants of ±127 and 0 with scales from subnormal to 1e30.
func q8TestAct(r *rand.Rand, nb int, extreme bool) Act {
	var a Act
	a.Prepare(gguf.Q8_0, normalVector(r, nb*QK8_0))
	if !extreme {
		return a
	}
	for j := range a.Q {
		a.Q[j] = []int8{127, -127, 0, a.Q[j]}[r.IntN(4)]
	}
	for b := range a.D {
		a.D[b] = []float32{1e-40, 1e30, -3e-39, 7.5e20, a.D[b]}[r.IntN(5)]
	}
	return a
}

// TestQ8_0TileIsPortable: DotTile on Q8_0 rows gives dotQ8_0Portable's
// bits for every activation, with every kernel set, rows of 1 to 40
// blocks (the AVX-512 tile takes multiples of eight, the AVX2 tiles of
// four, the rest one Dot each) and batches of 1 to 17 (tiles of 16, 8,
// 4 and the remainders), on random and on extreme quants and scales.
func TestQ8_0TileIsPortable(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	avx2, avx512 := haveAVX2, haveQ8AVX512
	defer func() { haveAVX2, haveQ8AVX512 = avx2, avx512 }()
	for _, k := range q8Kernels() {
		haveAVX2, haveQ8AVX512 = k.avx2, k.avx512
		for nb := 1; nb <= 40; nb++ {
			for batch := 1; batch <= 17; batch++ {
				extreme := (nb+batch)%3 == 0
				row := randomRow(r, gguf.Q8_0, nb*QK8_0)
				if extreme {
					row = extremeQ8Row(r, nb)
				}
				acts := make([]Act, batch)
				for i := range acts {
					acts[i] = q8TestAct(r, nb, extreme)
				}
				out := make([]float32, batch)
				DotTile(row, acts, out)
				for i := range acts {
					if want := dotQ8_0Portable(row, &acts[i]); math.Float32bits(out[i]) != math.Float32bits(want) {
						t.Fatalf("%s, %d blocks, batch %d, activation %d: tile %g (%#x), portable %g (%#x)",
							k.name, nb, batch, i, out[i], math.Float32bits(out[i]), want, math.Float32bits(want))
					}
				}
			}
		}
	}
}

// TestQ8_0Tile16Runs: where the CPU has it, the AVX-512 tile takes
// whole tiles of sixteen (TestQ8_0TileIsPortable would pass through the
// AVX2 tiles too), stops at an activation of another length, and
// declines rows whose blocks are not a multiple of eight.
func TestQ8_0Tile16Runs(t *testing.T) {
	if !haveQ8AVX512 {
		t.Skip("no AVX-512 VNNI on this CPU")
	}
	r := rand.New(rand.NewPCG(45, 46))
	for _, nb := range []int{8, 12} {
		row := randomRow(r, gguf.Q8_0, nb*QK8_0)
		acts := make([]Act, 35)
		for i := range acts {
			acts[i] = q8TestAct(r, nb, false)
		}
		out := make([]float32, len(acts))
		want := 32
		if nb%8 != 0 {
			want = 0
		}
		if got := q8_0Tiles16(row, nb, acts, out); got != want {
			t.Errorf("%d blocks: the AVX-512 tile took %d of 35 activations, want %d", nb, got, want)
		}
		acts[20] = q8TestAct(r, nb+8, false)
		if got := q8_0Tiles16(row, nb, acts, out); got != min(want, 16) {
			t.Errorf("%d blocks, activation 20 of another length: the AVX-512 tile took %d, want %d", nb, got, min(want, 16))
		}
	}
}

// BenchmarkQ8_0Tile: one 1024-element Q8_0 row against 16 prepared
// activations (a prefill tile), in ns per row and position, with the
// AVX-512 tile ("avx512"), the AVX2 tiles of eight ("avx2") and one Dot
// per activation ("dot").
func BenchmarkQ8_0Tile(b *testing.B) {
	r := rand.New(rand.NewPCG(47, 48))
	const n, batch = 1024, 16
	row := randomRow(r, gguf.Q8_0, n)
	acts := make([]Act, batch)
	for i := range acts {
		acts[i] = q8TestAct(r, n/QK8_0, false)
	}
	out := make([]float32, batch)
	avx512 := haveQ8AVX512
	defer func() { haveQ8AVX512 = avx512 }()
	for _, mode := range []string{"dot", "avx2", "avx512"} {
		if mode == "avx512" && !avx512 {
			continue
		}
		b.Run(mode, func(b *testing.B) {
			haveQ8AVX512 = mode == "avx512"
			for b.Loop() {
				if mode != "dot" {
					DotTile(row, acts, out)
					continue
				}
				for i := range acts {
					out[i] = Dot(row, &acts[i])
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/pos")
		})
	}
}
