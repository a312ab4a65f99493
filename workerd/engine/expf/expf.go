// Package expf computes float32(math.Exp(float64(x))) for float32 slices,
// bit for bit, faster than calling math.Exp per element.
//
// Each element is first evaluated in float64 by a short method whose
// error is bounded: k = round(x·16/ln2), r = x − k·ln2/16 (|r| ≤ ln2/32),
// exp(x) = 2^(k>>4) · 2^((k&15)/16) · p(r) with a 16-entry table and p the
// degree-5 Taylor polynomial. Its truncation error is |r|⁶/720 < 2^-42.7
// relative and the roundings (table, reduction, Horner, scaling) add a
// few 2^-53, so the float64 value is within 2^-42.5 of exp(x): under 1450
// float64 ulps of it. math.Exp itself is within 1 ulp. Rounding that value
// to float32 therefore gives the reference's float32 whenever it lies more
// than margin (4096) ulps away from a float32 rounding boundary (the
// midpoint between two float32s, where the low 29 of the 52 fraction bits
// are 1<<28); otherwise, and outside the range where the method is exact
// (results near overflow or in the float32 subnormal range, NaN), the
// element is computed as float32(math.Exp(float64(x))). Of the 2.24·10⁹
// float32s in the fast range 8252 fall back (one in 270,000); the largest
// error measured over all of them is 1289 ulps. The tests compare every
// float32 bit pattern on every path.
package expf

import "math"

// Ranges, all compared in float32. In [lo, hi] the fast method applies:
// exp(lo) > 2^-126, so the float32 result is normal, and exp(hi) <
// MaxFloat32. At or below under exp(x) < 2^-150 even with math.Exp's error,
// so the float32 is +0; at or above over exp(x) > 2^128, +Inf.
const (
	lo    float32 = -87.3
	hi    float32 = 88.72
	under float32 = -104
	over  float32 = 88.73

	// margin is the distance, in float64 ulps of the fast value, from a
	// float32 rounding boundary under which the element falls back: the
	// bound of 1450 for the method plus 1 for math.Exp, with room.
	margin = 4096
	low29  = 1<<29 - 1
	mid    = 1 << 28

	// magic is 1.5·2^52: adding it to a float64 of magnitude under 2^51
	// rounds it to an integer k (to nearest, ties to even) that is the low
	// bits of the sum's representation.
	magic = 0x1.8p52
)

// c holds the constants in the order the assembly reads them; the Go path
// reads the same values.
var c = func() (c consts) {
	for j := range c.tab {
		c.tab[j] = math.Exp2(float64(j) / 16)
	}
	c.invC = 16 / math.Ln2
	c.magic = magic
	// chi is ln2/16 with its 13 low fraction bits cleared, so k·chi is exact
	// for |k| < 2^13 and so is x − k·chi (Sterbenz: x is within a factor
	// two of k·chi); clo is the rest of ln2/16, including what float64's
	// Ln2 misses of ln 2.
	const ln2Err = 2.3190468138462996e-17 // ln 2 − float64(math.Ln2)
	c16 := math.Ln2 / 16
	c.chi = math.Float64frombits(math.Float64bits(c16) &^ (1<<13 - 1))
	c.clo = (c16 - c.chi) + ln2Err/16
	c.c5, c.c4, c.c3, c.c2, c.one = 1.0/120, 1.0/24, 1.0/6, 1.0/2, 1
	c.low29, c.midLo, c.twoMargin = low29, mid-margin, 2*margin
	c.lo, c.hi, c.under, c.over = lo, hi, under, over
	c.one32, c.inf32 = 1, float32(math.Inf(1))
	c.signFlip = 1 << 31
	return c
}()

// consts is the assembly's constant block: 8-byte slots, the float32 ones
// in their slot's low half.
type consts struct {
	tab                     [16]float64
	invC, magic, chi, clo   float64
	c5, c4, c3, c2, one     float64
	low29, midLo, twoMargin uint64
	lo, _, hi, _            float32
	under, _, over, _       float32
	one32, _, inf32, _      float32
	signFlip, _             uint32
}

// Exp sets dst[i] = float32(math.Exp(float64(src[i]))) for every i, bit for
// bit. dst must be at least as long as src; dst and src must be the same
// slice or not overlap.
func Exp(dst, src []float32) { run(dst, src, false) }

// SiLU sets dst[i] = x / (1 + float32(math.Exp(float64(-x)))) with x =
// src[i], in float32 as written, bit for bit. dst and src as for Exp.
func SiLU(dst, src []float32) { run(dst, src, true) }

// run does the vector part where there is one and the rest element by
// element.
func run(dst, src []float32, silu bool) {
	dst = dst[:len(src)]
	n := vec(dst, src, silu)
	dst, src = dst[n:], src[n:]
	if silu {
		for i, x := range src {
			dst[i] = x / (1 + exp1(-x))
		}
		return
	}
	for i, x := range src {
		dst[i] = exp1(x)
	}
}

// exp1 is float32(math.Exp(float64(x))) by the fast method where it is
// proven, the reference elsewhere.
func exp1(x float32) float32 {
	if !(x >= lo && x <= hi) { // NaN too
		switch {
		case x <= under:
			return 0
		case x >= over:
			return float32(math.Inf(1))
		}
		return ref(x)
	}
	y := fast(x)
	if nearBoundary(y) {
		return ref(x)
	}
	return float32(y)
}

// nearBoundary reports whether y (a float32-normal float64) is within
// margin ulps of the midpoint between two float32s.
func nearBoundary(y float64) bool {
	return math.Float64bits(y)&low29-(mid-margin) < 2*margin
}

// fast is exp(x) in float64 within 2^-42.5 relative, for x in [lo, hi].
func fast(x float32) float64 {
	xd := float64(x)
	t := float64(xd*c.invC) + magic
	k := int64(math.Float64bits(t) - math.Float64bits(magic))
	kf := t - magic
	r := (xd - kf*c.chi) - kf*c.clo
	p := ((((c.c5*r+c.c4)*r+c.c3)*r+c.c2)*r+1)*r + 1
	scale := math.Float64frombits(math.Float64bits(c.tab[k&15]) + uint64(k>>4)<<52)
	return p * scale
}

// ref is the definition.
func ref(x float32) float32 { return float32(math.Exp(float64(x))) }
