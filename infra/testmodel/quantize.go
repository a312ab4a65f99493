package testmodel

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// Encoders of the non-F32 tensor types, written from the GGUF/ggml block
// layouts: the files they produce are read by llama.cpp (through Ollama)
// and by the built-in engine alike. The quantizers are simple
// (per-block min/max scales, not llama.cpp's error-minimising search):
// any valid encoding serves, since every engine reads the same bytes.

func checkType(t TensorType, embedding, feedForward int) error {
	switch t {
	case F32, F16, Q8_0:
		if embedding%32 != 0 || feedForward%32 != 0 {
			if t == Q8_0 {
				return fmt.Errorf("testmodel: Q8_0 needs embedding and feed-forward sizes that are multiples of 32")
			}
		}
		return nil
	case Q4_K, Q6_K:
		if embedding%256 != 0 || feedForward%256 != 0 {
			return fmt.Errorf("testmodel: %s needs embedding and feed-forward sizes that are multiples of 256 (got %d, %d)", typeName(t), embedding, feedForward)
		}
		return nil
	}
	return fmt.Errorf("testmodel: tensor type %d is not supported", t)
}

func typeName(t TensorType) string {
	return map[TensorType]string{F32: "F32", F16: "F16", Q8_0: "Q8_0", Q4_K: "Q4_K", Q6_K: "Q6_K"}[t]
}

// fileType is general.file_type (llama_ftype) for a file whose matrices
// are mostly of type t.
func fileType(t TensorType) uint32 {
	return map[TensorType]uint32{F32: 0, F16: 1, Q8_0: 7, Q4_K: 15 /* Q4_K_M */, Q6_K: 18}[t]
}

// weightType is the type a matrix is written in. Q4_K files follow the
// common Q4_K_M mix: the output matrix and ffn_down in Q6_K, the rest
// in Q4_K.
func weightType(t TensorType, name string) TensorType {
	if t == Q4_K && (name == "output.weight" || strings.HasSuffix(name, "ffn_down.weight")) {
		return Q6_K
	}
	return t
}

func encodedSize(t TensorType, n int) uint64 {
	switch t {
	case F16:
		return uint64(n) * 2
	case Q8_0:
		return uint64(n/32) * 34
	case Q4_K:
		return uint64(n/256) * 144
	case Q6_K:
		return uint64(n/256) * 210
	}
	return uint64(n) * 4
}

func appendEncoded(b []byte, t TensorType, data []float32) []byte {
	le := binary.LittleEndian
	switch t {
	case F16:
		for _, f := range data {
			b = le.AppendUint16(b, toF16(f))
		}
	case Q8_0:
		for i := 0; i < len(data); i += 32 {
			b = appendQ8_0(b, data[i:i+32])
		}
	case Q4_K:
		for i := 0; i < len(data); i += 256 {
			b = appendQ4K(b, data[i:i+256])
		}
	case Q6_K:
		for i := 0; i < len(data); i += 256 {
			b = appendQ6K(b, data[i:i+256])
		}
	default:
		for _, f := range data {
			b = le.AppendUint32(b, math.Float32bits(f))
		}
	}
	return b
}

// The encoders carry go:norace: pure functions, exempt from the race
// detector's instrumentation so that tests which generate quantized
// files stay fast under -race.

// appendQ8_0: d = amax/127 (as f16), q = round(x/d).
//
//go:norace
func appendQ8_0(b []byte, x []float32) []byte {
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	b = binary.LittleEndian.AppendUint16(b, toF16(d))
	for _, v := range x {
		b = append(b, byte(int8(math.Round(float64(v*id)))))
	}
	return b
}

// appendQ4K: 8 sub-blocks of 32, each x ≈ d·sc·q − dmin·m with q in
// 0..15 and six-bit sc, m; layout d, dmin (f16), scales[12], qs[128].
//
//go:norace
func appendQ4K(b []byte, x []float32) []byte {
	var scale, mins [8]float32
	var maxScale, maxMin float32
	for j := 0; j < 8; j++ {
		lo, hi := float32(0), float32(0) // min clamped to ≤ 0, as ggml's layout needs m ≥ 0
		for _, v := range x[j*32 : j*32+32] {
			lo, hi = min(lo, v), max(hi, v)
		}
		scale[j], mins[j] = (hi-lo)/15, -lo
		maxScale, maxMin = max(maxScale, scale[j]), max(maxMin, mins[j])
	}
	dh, mh := toF16(maxScale/63), toF16(maxMin/63)
	d, dmin := fromF16(dh), fromF16(mh)
	var sc, m [8]uint8
	for j := 0; j < 8; j++ {
		if d > 0 {
			sc[j] = uint8(min(63, math.Round(float64(scale[j]/d))))
		}
		if dmin > 0 {
			m[j] = uint8(min(63, math.Round(float64(mins[j]/dmin))))
		}
	}
	var s [12]byte
	for j := 0; j < 4; j++ {
		s[j] = sc[j] | (sc[j+4]>>4)<<6
		s[j+4] = m[j] | (m[j+4]>>4)<<6
		s[j+8] = sc[j+4]&0xF | (m[j+4]&0xF)<<4
	}
	var q [256]uint8
	for j := 0; j < 8; j++ {
		ds, dm := d*float32(sc[j]), dmin*float32(m[j])
		for l := 0; l < 32; l++ {
			if ds > 0 {
				q[j*32+l] = uint8(min(15, max(0, math.Round(float64((x[j*32+l]+dm)/ds)))))
			}
		}
	}
	le := binary.LittleEndian
	b = le.AppendUint16(le.AppendUint16(b, dh), mh)
	b = append(b, s[:]...)
	for j := 0; j < 4; j++ { // 64 values: low nibbles the first 32, high the next
		for l := 0; l < 32; l++ {
			b = append(b, q[j*64+l]|q[j*64+32+l]<<4)
		}
	}
	return b
}

// appendQ6K: 16 sub-blocks of 16, x ≈ d·sc·(q−32) with q in 0..63 and an
// int8 sc; layout ql[128], qh[64], scales[16], d (f16).
//
//go:norace
func appendQ6K(b []byte, x []float32) []byte {
	var scale [16]float32
	var maxScale float32
	for j := 0; j < 16; j++ {
		var amax float32
		for _, v := range x[j*16 : j*16+16] {
			amax = max(amax, abs32(v))
		}
		scale[j] = amax / 31
		maxScale = max(maxScale, scale[j])
	}
	dh := toF16(maxScale / 127)
	d := fromF16(dh)
	var sc [16]int8
	var q [256]uint8
	for j := 0; j < 16; j++ {
		if d > 0 {
			sc[j] = int8(min(127, math.Round(float64(scale[j]/d))))
		}
		ds := d * float32(sc[j])
		for l := 0; l < 16; l++ {
			v := 0.0
			if ds > 0 {
				v = math.Round(float64(x[j*16+l] / ds))
			}
			q[j*16+l] = uint8(min(31, max(-32, v)) + 32)
		}
	}
	var ql [128]byte
	var qh [64]byte
	for n := 0; n < 2; n++ {
		for l := 0; l < 32; l++ {
			a, bb, c, e := q[n*128+l], q[n*128+l+32], q[n*128+l+64], q[n*128+l+96]
			ql[n*64+l] = a&0xF | (c&0xF)<<4
			ql[n*64+l+32] = bb&0xF | (e&0xF)<<4
			qh[n*32+l] = a>>4 | (bb>>4)<<2 | (c>>4)<<4 | (e>>4)<<6
		}
	}
	b = append(b, ql[:]...)
	b = append(b, qh[:]...)
	for _, s := range sc {
		b = append(b, byte(s))
	}
	return binary.LittleEndian.AppendUint16(b, dh)
}

func abs32(f float32) float32 { return float32(math.Abs(float64(f))) }

// toF16 rounds to the nearest half-precision value (ties to even).
func toF16(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exp := int(bits>>23&0xff) - 127
	mant := bits & 0x7fffff
	switch {
	case exp == 128:
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp > 15:
		return sign | 0x7c00
	case exp < -25:
		return sign
	}
	shift := uint(13)
	m := mant
	e := exp + 15
	if e <= 0 { // subnormal half
		m |= 0x800000
		shift = uint(-exp - 1) // value = M·2^(exp-23), in units of 2^-24
		e = 0
	}
	h := m >> shift
	rest := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rest > half || (rest == half && h&1 == 1) {
		h++
	}
	return sign | uint16(uint32(e)<<10+h)
}

func fromF16(h uint16) float32 {
	sign := float32(1)
	if h&0x8000 != 0 {
		sign = -1
	}
	e, m := int(h>>10&0x1f), float64(h&0x3ff)
	switch e {
	case 0:
		return sign * float32(m*math.Pow(2, -24))
	case 31:
		if m != 0 {
			return float32(math.NaN())
		}
		return sign * float32(math.Inf(1))
	}
	return sign * float32((1+m/1024)*math.Pow(2, float64(e-15)))
}
