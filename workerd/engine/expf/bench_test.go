package expf

import (
	"math"
	"math/rand/v2"
	"testing"
)

// benchInput is n gate-like values: normal, spread over a few units.
func benchInput(n int) []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(r.NormFloat64() * 3)
	}
	return src
}

// BenchmarkExp reports ns per element for the math.Exp loop each path
// replaces and for Exp and SiLU on each path.
func BenchmarkExp(b *testing.B) {
	src := benchInput(1024)
	dst := make([]float32, len(src))
	perElem := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(src)), "ns/elem")
	}
	b.Run("math.Exp", func(b *testing.B) {
		for b.Loop() {
			for i, x := range src {
				dst[i] = float32(math.Exp(float64(x)))
			}
		}
		perElem(b)
	})
	b.Run("silu-math.Exp", func(b *testing.B) {
		for b.Loop() {
			for i, x := range src {
				dst[i] = refSiLU(x)
			}
		}
		perElem(b)
	})
	for _, p := range paths(b) {
		b.Run("Exp-"+p.name, func(b *testing.B) {
			p.setup(b)
			for b.Loop() {
				Exp(dst, src)
			}
			perElem(b)
		})
		b.Run("SiLU-"+p.name, func(b *testing.B) {
			p.setup(b)
			for b.Loop() {
				SiLU(dst, src)
			}
			perElem(b)
		})
	}
}
