package expf

import (
	"math"
	"os"
	"runtime"
	"sync"
	"testing"
)

type path struct {
	name  string
	setup func(testing.TB)
}

// refSiLU is the engine's definition of SiLU.
func refSiLU(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }

// check runs Exp and SiLU on src, out of place and in place, and compares
// every result's bits with the reference; it returns the first mismatch.
func check(t testing.TB, src []float32) {
	t.Helper()
	dst := make([]float32, len(src))
	in := make([]float32, len(src))
	for _, f := range []struct {
		name string
		run  func(dst, src []float32)
		ref  func(float32) float32
	}{{"Exp", Exp, ref}, {"SiLU", SiLU, refSiLU}} {
		f.run(dst, src)
		copy(in, src)
		f.run(in, in)
		for i, x := range src {
			want := math.Float32bits(f.ref(x))
			if got := math.Float32bits(dst[i]); got != want {
				t.Fatalf("%s(%g = %#08x) = %#08x (%g), want %#08x (%g)", f.name, x, math.Float32bits(x), got, dst[i], want, math.Float32frombits(want))
			}
			if got := math.Float32bits(in[i]); got != want {
				t.Fatalf("%s(%g = %#08x) in place = %#08x, want %#08x", f.name, x, math.Float32bits(x), got, want)
			}
		}
	}
}

// next returns the float32 n steps of the total bit order away from x
// (n may be negative), staying on x's side of zero.
func next(x float32, n int) float32 {
	b := int64(math.Float32bits(x)&^(1<<31)) + int64(n)
	if math.Signbit(float64(x)) {
		return -math.Float32frombits(uint32(max(b, 0)))
	}
	return math.Float32frombits(uint32(max(b, 0)))
}

// specials are the special values and the region boundaries, with their
// neighbours.
func specials() []float32 {
	nan := math.Float32frombits(0x7fc00000)
	vals := []float32{
		0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		nan, -nan, math.Float32frombits(0x7f800001), math.Float32frombits(0xffbfffff),
		math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32,
		0x1p-126, -0x1p-126, 0x1p-24, -0x1p-24, 0x1p-25, -0x1p-25, 0x1p-26, -0x1p-26, 1, -1,
	}
	// The fast range's ends, the short cuts' thresholds, where the float32
	// result overflows, turns subnormal and turns zero, and where exp(x)
	// is near 1; each negated too, for SiLU's exp(-x).
	edges := []float32{lo, hi, under, over, 88.72284, -87.33655, -103.27893, -103.97208,
		0x1p-23, 0x1p-24, 0x1p-25}
	for _, e := range edges {
		for d := -300; d <= 300; d++ {
			vals = append(vals, next(e, d), -next(e, d))
		}
	}
	return vals
}

func TestSpecials(t *testing.T) {
	vals := specials()
	for _, p := range paths(t) {
		t.Run(p.name, func(t *testing.T) {
			p.setup(t)
			check(t, vals)
			// Every length up to 17 and every offset: the vector blocks,
			// the tail, and flagged lanes in every position.
			for n := 1; n <= 17; n++ {
				for off := 0; off+n <= len(vals); off += 7 {
					check(t, vals[off:off+n])
				}
			}
		})
	}
}

// TestRegions checks every float32 in the regions where the result
// changes kind, for Exp and (negated) for SiLU: overflow, and the float32
// subnormal results down to zero.
func TestRegions(t *testing.T) {
	regions := [][2]float32{
		{88.70, 88.76}, {-88.76, -88.70}, // the fast range's end, overflow, the short cut to +Inf
		{-104.2, -87.2}, {87.2, 104.2}, // subnormal results, zero, the short cut to +0
	}
	for _, p := range paths(t) {
		t.Run(p.name, func(t *testing.T) {
			p.setup(t)
			for _, r := range regions {
				buf := make([]float32, 0, 4096)
				for x := r[0]; x <= r[1]; x = math.Nextafter32(x, float32(math.Inf(1))) {
					if buf = append(buf, x); len(buf) == cap(buf) {
						check(t, buf)
						buf = buf[:0]
					}
				}
				check(t, buf)
			}
		})
	}
}

// sweepStats is what sweep saw of the fast method on the inputs in
// range: those it left to the fallback, how many there were, and its
// largest error in float64 ulps against math.Exp.
type sweepStats struct {
	fallbacks []float32
	inRange   int
	maxErr    uint64
}

// sweep checks every stride-th bit pattern (all 2^32 for stride 1) on the
// current path, over all CPUs.
func sweep(t *testing.T, stride uint64) sweepStats {
	const batch = 1 << 14
	var mu sync.Mutex
	var wg sync.WaitGroup
	var st sweepStats
	workers := runtime.GOMAXPROCS(0)
	total := uint64(1) << 32
	for w := range workers {
		wg.Go(func() {
			src := make([]float32, 0, batch)
			var my sweepStats
			for b := uint64(w) * batch * stride; b < total; b += uint64(workers) * batch * stride {
				src = src[:0]
				for i := b; i < min(b+batch*stride, total); i += stride {
					x := math.Float32frombits(uint32(i))
					src = append(src, x)
					if x >= lo && x <= hi {
						my.inRange++
						y := fast(x)
						if nearBoundary(y) {
							my.fallbacks = append(my.fallbacks, x)
						}
						ey, ez := int64(math.Float64bits(y)), int64(math.Float64bits(math.Exp(float64(x))))
						my.maxErr = max(my.maxErr, uint64(max(ey-ez, ez-ey)))
					}
				}
				check(t, src)
				if t.Failed() {
					return
				}
			}
			mu.Lock()
			st.fallbacks = append(st.fallbacks, my.fallbacks...)
			st.inRange += my.inRange
			st.maxErr = max(st.maxErr, my.maxErr)
			mu.Unlock()
		})
	}
	wg.Wait()
	return st
}

// TestStrided checks every 251st bit pattern on every path (a prime
// stride, so every exponent and many fraction patterns) and the 128
// neighbours of each input the sample sent to the fallback, and that
// the fast method's measured error stays well inside the margin.
func TestStrided(t *testing.T) {
	stride := uint64(251)
	if testing.Short() {
		stride = 2039
	}
	for _, p := range paths(t) {
		t.Run(p.name, func(t *testing.T) {
			p.setup(t)
			st := sweep(t, stride)
			t.Logf("stride %d: %d of %d in range fell back; the Go fast method's largest error %d ulps (margin %d)",
				stride, len(st.fallbacks), st.inRange, st.maxErr, margin)
			if st.maxErr > margin/2 {
				t.Errorf("fast method's error %d ulps, over half the margin %d", st.maxErr, margin)
			}
			if len(st.fallbacks) == 0 {
				t.Fatal("no input fell back: the fallback went untested")
			}
			var near []float32
			for _, x := range st.fallbacks {
				for d := -64; d <= 64; d++ {
					near = append(near, next(x, d), -next(x, d))
				}
			}
			check(t, near)
		})
	}
}

// TestExhaustive checks all 2^32 float32s on every path. It takes minutes:
// it runs only with EXPF_EXHAUSTIVE=1.
func TestExhaustive(t *testing.T) {
	if testing.Short() || os.Getenv("EXPF_EXHAUSTIVE") != "1" {
		t.Skip("set EXPF_EXHAUSTIVE=1 to check all 2^32 inputs")
	}
	for _, p := range paths(t) {
		t.Run(p.name, func(t *testing.T) {
			p.setup(t)
			st := sweep(t, 1)
			t.Logf("all inputs: %d of %d in range fell back; the Go fast method's largest error %d ulps (margin %d)",
				len(st.fallbacks), st.inRange, st.maxErr, margin)
		})
	}
}
