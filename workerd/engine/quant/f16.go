package quant

import "math"

// f16table maps every half-precision bit pattern to its float32 value;
// 256 KiB, built once, faster than decoding in the inner loops.
var f16table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = decodeF16(uint16(i))
	}
	return &t
}()

// F16ToF32 converts a half-precision value.
func F16ToF32(h uint16) float32 { return f16table[h] }

func decodeF16(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf, NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: value = mant * 2^-24.
	v := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}

// F32ToF16 converts to half precision, rounding to nearest even as the
// F16C instruction and ggml's software conversion do; overflow goes to
// infinity, NaN stays NaN.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127
	mant := b & 0x7fffff
	switch {
	case exp == 128: // inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp > 15:
		return sign | 0x7c00
	case exp >= -14: // normal half
		h := uint32(exp+15)<<10 | mant>>13
		rest := mant & 0x1fff
		if rest > 0x1000 || (rest == 0x1000 && h&1 == 1) {
			h++ // may carry into the exponent, up to infinity: correct
		}
		return sign | uint16(h)
	case exp < -25:
		return sign
	}
	// Subnormal half: shift the full significand.
	m := mant | 0x800000
	shift := uint32(-exp - 14 + 13) // 14..24
	h := m >> shift
	rest := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rest > half || (rest == half && h&1 == 1) {
		h++
	}
	return sign | uint16(h)
}

// RoundF16 rounds f to the nearest half-precision value.
func RoundF16(f float32) float32 { return f16table[F32ToF16(f)] }
