package engine

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
	"github.com/c0mpute/c0mpute/workerd/engine/quant"
)

// TestAxpyF16RowsIsScalar checks axpyF16Rows (assembly where available,
// then the portable tail) bit for bit against the per-element loop it
// replaces, over widths with and without a tail of columns, with
// subnormal, signed-zero and infinite values and products that
// underflow, and rows in any order of the cache.
func TestAxpyF16RowsIsScalar(t *testing.T) {
	specials := []float32{0, float32(math.Copysign(0, -1)), 6e-8, -6e-8, 65504, -65504,
		float32(math.Inf(1)), float32(math.Inf(-1)), 1e-5, -3}
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		name        string
		width, rows int
	}{
		{"no rows", 64, 0}, {"one row", 64, 1}, {"head 64", 64, 37}, {"head 128", 128, 70},
		{"head 80: tail of 16", 80, 23}, {"head 16: tail only", 16, 9}, {"head 33", 33, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			const stride = 4 // rows in the cache per row used, so offsets skip
			v := make([]uint16, (c.rows*stride+1)*c.width)
			for i := range v {
				x := float32(r.NormFloat64()) * float32(math.Exp2(float64(r.IntN(40)-20)))
				if r.IntN(8) == 0 {
					x = specials[r.IntN(len(specials))]
				}
				v[i] = quant.F32ToF16(x)
			}
			off := make([]int, c.rows)
			p := make([]float32, c.rows)
			for k := range off {
				off[k] = r.IntN(c.rows*stride+1) * c.width
				p[k] = quant.RoundF16(float32(r.Float64()) * float32(math.Exp2(float64(-r.IntN(30)))))
			}
			want := make([]float64, c.width)
			got := make([]float64, c.width)
			for i := range want {
				want[i] = float64(r.NormFloat64())
				got[i] = want[i]
			}
			for k, o := range off {
				for i, x := range v[o : o+c.width] {
					want[i] += float64(quant.F16ToF32(x) * p[k])
				}
			}
			axpyF16Rows(got, v, off, p)
			for i := range want {
				if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
					t.Fatalf("column %d: got %v (%#x), want %v (%#x)", i, got[i], math.Float64bits(got[i]), want[i], math.Float64bits(want[i]))
				}
			}
		})
	}
}

// TestAxpyF16RowsRefusesOutside checks that a row beyond the cache
// panics instead of reading past it (the assembly does not check).
func TestAxpyF16RowsRefusesOutside(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a row past the cache")
		}
	}()
	axpyF16Rows(make([]float64, 64), make([]uint16, 128), []int{0, 65}, []float32{1, 1})
}

// TestCopyBlock checks the transpose of a block of results into the
// output rows, at an offset, for several block and batch sizes.
func TestCopyBlock(t *testing.T) {
	for _, c := range []struct{ r, n, T int }{{0, 16, 1}, {5, 16, 3}, {16, 7, 64}, {3, 1, 2}} {
		out := make([][]float32, c.T)
		for i := range out {
			out[i] = make([]float32, c.r+c.n+2)
		}
		res := make([]float32, c.n*c.T)
		for i := range res {
			res[i] = float32(i + 1)
		}
		copyBlock(out, c.r, c.n, res, c.T)
		for tt, o := range out {
			for j, v := range o {
				want := float32(0)
				if k := j - c.r; k >= 0 && k < c.n {
					want = res[k*c.T+tt]
				}
				if v != want {
					t.Fatalf("r=%d n=%d T=%d: out[%d][%d] = %v, want %v", c.r, c.n, c.T, tt, j, v, want)
				}
			}
		}
	}
}

// TestGatedFFNIsUnfused checks the fused gate/up pass bit for bit against
// the two products followed by the activation, for batch sizes around
// the 16-row blocks and worker counts whose chunks end inside a block.
func TestGatedFFNIsUnfused(t *testing.T) {
	const cols, rows = 64, 1000 // 3 workers: chunks of 20 rows, blocks of 16 and 4
	r := rand.New(rand.NewPCG(3, 4))
	matrix := func() Matrix {
		data := make([]byte, rows*cols*4)
		for i := 0; i < len(data); i += 4 {
			bits := math.Float32bits(float32(r.NormFloat64()))
			data[i], data[i+1], data[i+2], data[i+3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
		}
		return Matrix{Type: gguf.F32, Rows: rows, Cols: cols, RowBytes: cols * 4, Data: data}
	}
	gate, up := matrix(), matrix()
	for _, workers := range []int{1, 2, 3} {
		for _, T := range []int{1, 5, 17} {
			m := &Model{workers: workers}
			x := rows2(T, cols, func() float32 { return float32(r.NormFloat64()) })
			g, u := rows2(T, rows, nil), rows2(T, rows, nil)
			m.matmuls(nil, x, product{&gate, g}, product{&up, u})
			got := rows2(T, rows, nil)
			var sc scratch
			m.gatedFFN(&sc, x, &gate, &up, got)
			for tt := range got {
				for i, v := range got[tt] {
					want := float32(silu(g[tt][i]) * u[tt][i])
					if math.Float32bits(v) != math.Float32bits(want) {
						t.Fatalf("workers %d, batch %d: [%d][%d] = %v, want %v", workers, T, tt, i, v, want)
					}
				}
			}
		}
	}
}

// rows2 returns n rows of width values from fill (zeros when fill is nil).
func rows2(n, width int, fill func() float32) [][]float32 {
	out := rows(make([]float32, n*width), n, width)
	if fill != nil {
		for _, row := range out {
			for i := range row {
				row[i] = fill()
			}
		}
	}
	return out
}
