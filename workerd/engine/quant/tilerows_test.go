package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

// tileRowsLengths are the row lengths the DotTileRows tests run per
// type: as TestDotTileIsDot's, Q8_0 block counts that are and are not
// multiples of four and of eight, F32/F16 lengths that are not
// multiples of the vector width.
var tileRowsLengths = map[gguf.Type][]int{
	gguf.F32:  {16, 100, 1037},
	gguf.F16:  {16, 100, 1037},
	gguf.Q8_0: {32, 128, 160, 256, 416},
	gguf.Q4_K: {256, 768},
	gguf.Q6_K: {256, 768},
}

// blockOfRows lays nrows weight rows out rowBytes apart, each row's
// bytes followed by pad bytes of garbage (rows taken from a wider
// matrix), and returns the block and rowBytes.
func blockOfRows(nrows, pad int, row func() []byte) ([]byte, int) {
	var rows []byte
	rowBytes := 0
	for range nrows {
		w := row()
		rowBytes = len(w) + pad
		rows = append(rows, w...)
		for j := range pad {
			rows = append(rows, byte(0xa5+j))
		}
	}
	return rows, rowBytes
}

// checkTileRows runs DotTileRows on rows and compares every result, bit
// for bit, with DotTile on each row alone.
func checkTileRows(t *testing.T, label string, rows []byte, rowBytes int, acts []Act) {
	t.Helper()
	nrows := len(rows) / rowBytes
	out := make([]float32, nrows*len(acts))
	for i := range out {
		out[i] = float32(math.NaN()) // any result left unwritten shows
	}
	DotTileRows(rows, rowBytes, acts, out)
	want := make([]float32, len(acts))
	for k := range nrows {
		DotTile(rows[k*rowBytes:(k+1)*rowBytes], acts, want)
		for i, w := range want {
			if got := out[k*len(acts)+i]; math.Float32bits(got) != math.Float32bits(w) {
				t.Fatalf("%s: row %d of %d, activation %d of %d: DotTileRows %g (%#x), DotTile %g (%#x)",
					label, k, nrows, i, len(acts), got, math.Float32bits(got), w, math.Float32bits(w))
			}
		}
	}
}

// unready makes acts[i] unfit for the tiles while Dot still takes it
// (its quants one longer than its blocks need; a K-quant activation
// without the tile order), so DotTileRows must leave the block to
// DotTile row by row.
func unready(a *Act) {
	switch a.Type {
	case gguf.Q8_0:
		a.Q = append(a.Q, 0)
	case gguf.Q4_K, gguf.Q6_K:
		a.QT = nil
	}
}

// sweepTileRows compares DotTileRows with DotTile per row for every type
// the engine uses, batch sizes 1 to 17 (tiles of sixteen, eight, four
// and remainders), blocks of 1, 3 and 16 rows, rows packed and padded,
// and with one activation the tiles do not take, on the kernels
// currently selected.
func sweepTileRows(t *testing.T, r *rand.Rand, kernels string) {
	for _, typ := range []gguf.Type{gguf.F32, gguf.F16, gguf.Q8_0, gguf.Q4_K, gguf.Q6_K} {
		for _, n := range tileRowsLengths[typ] {
			for batch := 1; batch <= 17; batch++ {
				for _, nrows := range []int{1, 3, 16} {
					for _, pad := range []int{0, 8} {
						rows, rowBytes := blockOfRows(nrows, pad, func() []byte {
							row := randomRow(r, typ, n)
							if typ == gguf.Q8_0 && r.IntN(2) == 0 {
								row[2] = 0x80 // a weight of -128
							}
							return row
						})
						acts := make([]Act, batch)
						for i := range acts {
							acts[i].Prepare(typ, normalVector(r, n))
						}
						label := fmt.Sprintf("%s %s n=%d pad %d", kernels, typ, n, pad)
						checkTileRows(t, label, rows, rowBytes, acts)
						unready(&acts[r.IntN(batch)])
						checkTileRows(t, label+" one activation unready", rows, rowBytes, acts)
					}
				}
			}
		}
	}
}

// TestDotTileRowsIsDotTile: DotTileRows gives every row and activation
// DotTile's bits on this CPU's kernels (tilerows_amd64_test.go runs
// every kernel set).
func TestDotTileRowsIsDotTile(t *testing.T) {
	sweepTileRows(t, rand.New(rand.NewPCG(61, 62)), "default")
}

// TestDotTileRowsEmpty: no activations or no rows is no work, and out
// beyond whole rows' results is left alone.
func TestDotTileRowsEmpty(t *testing.T) {
	r := rand.New(rand.NewPCG(63, 64))
	row := randomRow(r, gguf.Q4_K, 256)
	DotTileRows(row, len(row), nil, make([]float32, 4))
	acts := make([]Act, 5)
	for i := range acts {
		acts[i].Prepare(gguf.Q4_K, normalVector(r, 256))
	}
	out := []float32{1, 2, 3, 4}
	DotTileRows(row, len(row), acts, out)
	if out[0] != 1 || out[3] != 4 {
		t.Fatalf("fewer results than one row's: out changed to %v", out)
	}
}

// BenchmarkDotTileRows: a prefill worker's block of 16 rows of 1024
// elements (the benchmark model's hidden size) against 64 prepared
// activations (the benchmark's prompt), in ns per row and position:
// "tile" is one DotTile per row (matmuls before DotTileRows), "rows" one
// DotTileRows call for the block.
func BenchmarkDotTileRows(b *testing.B) {
	r := rand.New(rand.NewPCG(69, 70))
	const n, nrows, batch = 1024, 16, 64
	for _, typ := range []gguf.Type{gguf.Q8_0, gguf.Q4_K, gguf.Q6_K} {
		rows, rowBytes := blockOfRows(nrows, 0, func() []byte { return randomRow(r, typ, n) })
		acts := make([]Act, batch)
		for i := range acts {
			acts[i].Prepare(typ, normalVector(r, n))
		}
		out := make([]float32, nrows*batch)
		for _, mode := range []string{"tile", "rows"} {
			b.Run(typ.String()+"/"+mode, func(b *testing.B) {
				for b.Loop() {
					if mode == "rows" {
						DotTileRows(rows, rowBytes, acts, out)
						continue
					}
					for k := range nrows {
						DotTile(rows[k*rowBytes:(k+1)*rowBytes], acts, out[k*batch:(k+1)*batch])
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*nrows*batch), "ns/pos")
			})
		}
	}
}
