package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

// TestF16RoundTrip: every finite half converts to float32 and back to
// itself.
func TestF16RoundTrip(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := F16ToF32(h)
		if math.IsNaN(float64(f)) {
			if F32ToF16(f)&0x7c00 != 0x7c00 || F32ToF16(f)&0x3ff == 0 {
				t.Fatalf("NaN %#04x converts back to %#04x", h, F32ToF16(f))
			}
			continue
		}
		if back := F32ToF16(f); back != h {
			t.Fatalf("%#04x → %g → %#04x", h, f, back)
		}
	}
}

// TestF16Nearest: F32ToF16 picks the nearest half, ties to even, for
// values across the normal, subnormal and overflow ranges.
func TestF16Nearest(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		f := float32(math.Ldexp(r.Float64()*2-1, r.IntN(44)-28))
		h := F32ToF16(f)
		got := float64(F16ToF32(h))
		if math.IsInf(got, 0) {
			if math.Abs(float64(f)) < 65520 {
				t.Fatalf("%g overflowed", f)
			}
			continue
		}
		for _, nb := range []uint16{h - 1, h + 1} {
			if nb&0x7c00 == 0x7c00 || (nb^h)&0x8000 != 0 {
				continue
			}
			alt := float64(F16ToF32(nb))
			d, da := math.Abs(got-float64(f)), math.Abs(alt-float64(f))
			if da < d || (da == d && h&1 == 1) {
				t.Fatalf("%g → %#04x (%g), but %#04x (%g) is nearer or the even tie", f, h, got, nb, alt)
			}
		}
	}
}

// randomRow makes one row of n elements of type typ with random quants
// and modest scales.
// normalVector is n standard normal floats from r: an activation.
func normalVector(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func randomRow(r *rand.Rand, typ gguf.Type, n int) []byte {
	b := make([]byte, typ.RowBytes(n))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	scale := func(off int) {
		binary.LittleEndian.PutUint16(b[off:], F32ToF16(float32(r.Float64()*0.01+0.001)))
	}
	switch typ {
	case gguf.F32:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(b[i*4:], math.Float32bits(float32(r.NormFloat64())))
		}
	case gguf.F16:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(b[i*2:], F32ToF16(float32(r.NormFloat64())))
		}
	case gguf.Q8_0:
		for blk := 0; blk < n/32; blk++ {
			scale(blk * 34)
		}
	case gguf.Q4_K:
		for blk := 0; blk < n/256; blk++ {
			scale(blk * 144)
			scale(blk*144 + 2)
		}
	case gguf.Q6_K:
		for blk := 0; blk < n/256; blk++ {
			scale(blk*210 + 208)
		}
	}
	return b
}

// TestDotMatchesDequant: each kernel's dot product equals, to float
// rounding, the float64 dot of the dequantized row with the prepared
// activation dequantized — two independent readings of each layout.
func TestDotMatchesDequant(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const n = 512
	for _, typ := range []gguf.Type{gguf.F32, gguf.F16, gguf.Q8_0, gguf.Q4_K, gguf.Q6_K} {
		for trial := 0; trial < 20; trial++ {
			row := randomRow(r, typ, n)
			x := normalVector(r, n)
			var a Act
			a.Prepare(typ, x)
			xa := make([]float64, n)
			for i := range xa {
				switch typ {
				case gguf.F32, gguf.F16:
					xa[i] = float64(a.F32[i])
				case gguf.Q8_0:
					xa[i] = float64(a.D[i/32]) * float64(a.Q[i])
				default:
					xa[i] = float64(a.D[i/256]) * float64(a.Q[i])
				}
			}
			w := make([]float32, n)
			DequantRow(typ, row, w)
			var want, mag float64
			for i := range w {
				want += float64(w[i]) * xa[i]
				mag += math.Abs(float64(w[i]) * xa[i])
			}
			got := float64(Dot(row, &a))
			if math.Abs(got-want) > 1e-5*mag+1e-6 {
				t.Fatalf("%s trial %d: dot %g, dequantized %g (magnitude %g)", typ, trial, got, want, mag)
			}
		}
	}
}

// TestActivationQuantization: the prepared activations reproduce x
// within half a quantization step, and Q8_K block sums are exact.
func TestActivationQuantization(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, 512)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 3)
	}
	x[7] = 0
	var a Act
	a.Prepare(gguf.Q8_0, x)
	for i, v := range x {
		if d := math.Abs(float64(a.D[i/32])*float64(a.Q[i]) - float64(v)); d > float64(a.D[i/32])*0.5+1e-3*math.Abs(float64(v)) {
			t.Fatalf("Q8_0 element %d: %g vs %g", i, float64(a.D[i/32])*float64(a.Q[i]), v)
		}
	}
	a.Prepare(gguf.Q4_K, x)
	for i, v := range x {
		if d := math.Abs(float64(a.D[i/256])*float64(a.Q[i]) - float64(v)); d > math.Abs(float64(a.D[i/256]))*0.5001 {
			t.Fatalf("Q8_K element %d: %g vs %g", i, float64(a.D[i/256])*float64(a.Q[i]), v)
		}
	}
	for j := range a.Sums {
		var s int
		for _, q := range a.Q[j*16 : j*16+16] {
			s += int(q)
		}
		if int(a.Sums[j]) != s {
			t.Fatalf("block sum %d: %d, want %d", j, a.Sums[j], s)
		}
	}
	zero := make([]float32, 256)
	a.Prepare(gguf.Q6_K, zero)
	if a.D[0] != 0 || a.Sums[0] != 0 {
		t.Fatal("zero block")
	}
}

func TestCheckRow(t *testing.T) {
	if CheckRow(gguf.Q4_0, 32) == nil || CheckRow(gguf.Q4_K, 128) == nil || CheckRow(gguf.F32, 0) == nil {
		t.Error("bad rows accepted")
	}
	if err := CheckRow(gguf.Q6_K, 512); err != nil {
		t.Error(err)
	}
}

func BenchmarkDot(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	const n = 4096
	for _, typ := range []gguf.Type{gguf.F32, gguf.F16, gguf.Q8_0, gguf.Q4_K, gguf.Q6_K} {
		row := randomRow(r, typ, n)
		x := normalVector(r, n)
		var a Act
		a.Prepare(typ, x)
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(len(row)))
			for b.Loop() {
				Dot(row, &a)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
		})
	}
}

// BenchmarkDotTile: one 1024-element row (the benchmark model's hidden
// size) against a batch of 8 prepared activations (prefill's tile), in
// ns per row and position; "dot" is the same work as one Dot per
// activation, the tile's baseline.
func BenchmarkDotTile(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	const n, batch = 1024, 8
	for _, typ := range []gguf.Type{gguf.F32, gguf.F16, gguf.Q8_0, gguf.Q4_K, gguf.Q6_K} {
		row := randomRow(r, typ, n)
		acts := make([]Act, batch)
		for i := range acts {
			x := normalVector(r, n)
			acts[i].Prepare(typ, x)
		}
		out := make([]float32, batch)
		for _, mode := range []string{"tile", "dot"} {
			b.Run(typ.String()+"/"+mode, func(b *testing.B) {
				for b.Loop() {
					if mode == "tile" {
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
}

// BenchmarkDotRows: a decode step's block of 16 rows of 1024 elements
// (the benchmark model's hidden size) against one activation, in ns per
// row: "dot" is one Dot per row (the step before DotRows), "avx2" and
// "avx512" DotRows with each set of decode kernels (where the CPU has
// them).
func BenchmarkDotRows(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 3))
	const n, rows = 1024, 16
	vec512 := haveRowsAVX512
	defer func() { haveRowsAVX512 = vec512 }()
	for _, typ := range []gguf.Type{gguf.Q8_0, gguf.Q4_K, gguf.Q6_K} {
		rowBytes := typ.RowBytes(n)
		var data []byte
		for range rows {
			data = append(data, randomRow(r, typ, n)...)
		}
		x := normalVector(r, n)
		var a Act
		a.Prepare(typ, x)
		out := make([]float32, rows)
		for _, mode := range []string{"dot", "avx2", "avx512"} {
			if mode == "avx512" && !vec512 {
				continue
			}
			b.Run(typ.String()+"/"+mode, func(b *testing.B) {
				haveRowsAVX512 = mode == "avx512"
				for b.Loop() {
					if mode != "dot" {
						DotRows(data, rowBytes, &a, out)
						continue
					}
					for i := range out {
						out[i] = Dot(data[i*rowBytes:(i+1)*rowBytes], &a)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
			})
		}
	}
}

// BenchmarkPrepare: one 1024-element activation prepared for each type
// (quantization, and for the K-quants the tile order too).
func BenchmarkPrepare(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 5))
	x := normalVector(r, 1024)
	for _, typ := range []gguf.Type{gguf.Q8_0, gguf.Q4_K} {
		b.Run(typ.String(), func(b *testing.B) {
			var a Act
			for b.Loop() {
				a.Prepare(typ, x)
			}
		})
	}
}
