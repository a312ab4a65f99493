package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/c0mpute/c0mpute/workerd/engine/quant"
)

// DType is the element encoding of hidden states on the wire.
type DType uint8

// Wire element encodings.
const (
	// F32 is exact: a stage that receives F32 states computes bit for bit
	// what an unsplit model computes.
	F32 DType = 0
	// F16 halves the bytes but rounds every value to half precision
	// (about 3 decimal digits), so logits after it differ slightly from
	// an unsplit run's and a near-tie greedy choice can change.
	F16 DType = 1
)

// Wire layout, little-endian:
//
//	"C0HS" | version u8 (1) | dtype u8 | reserved u16 (0) |
//	pos u32 | tokens u32 | dim u32 | tokens·dim elements (f32 or f16)
const (
	wireMagic   = "C0HS"
	wireVersion = 1
	wireHeader  = 20
	// Limits far above any real batch keep a forged header from
	// implying a huge allocation (sizes are also checked against the
	// actual length).
	maxWireTokens = 1 << 16
	maxWireDim    = 1 << 16
)

// ErrWire is wrapped by every error about malformed hidden-state bytes.
var ErrWire = errors.New("engine: malformed hidden states")

// EncodeHidden returns h in the wire form with elements of type dt.
func EncodeHidden(h *Hidden, dt DType) ([]byte, error) {
	if h == nil || h.Tokens <= 0 || h.Dim <= 0 || len(h.Data) != h.Tokens*h.Dim ||
		h.Tokens > maxWireTokens || h.Dim > maxWireDim || h.Pos < 0 || h.Pos > math.MaxUint32 {
		return nil, fmt.Errorf("engine: encode hidden states: bad shape")
	}
	size := 4
	if dt == F16 {
		size = 2
	} else if dt != F32 {
		return nil, fmt.Errorf("engine: encode hidden states: dtype %d", dt)
	}
	b := make([]byte, wireHeader, wireHeader+len(h.Data)*size)
	copy(b, wireMagic)
	b[4], b[5] = wireVersion, byte(dt)
	le := binary.LittleEndian
	le.PutUint32(b[8:], uint32(h.Pos))
	le.PutUint32(b[12:], uint32(h.Tokens))
	le.PutUint32(b[16:], uint32(h.Dim))
	for _, v := range h.Data {
		if dt == F32 {
			b = le.AppendUint32(b, math.Float32bits(v))
		} else {
			b = le.AppendUint16(b, quant.F32ToF16(v))
		}
	}
	return b, nil
}

// DecodeHidden parses the wire form. It refuses wrong lengths, unknown
// versions or dtypes and non-finite values.
func DecodeHidden(b []byte) (*Hidden, error) {
	if len(b) < wireHeader || string(b[:4]) != wireMagic {
		return nil, fmt.Errorf("%w: no header", ErrWire)
	}
	if b[4] != wireVersion {
		return nil, fmt.Errorf("%w: version %d", ErrWire, b[4])
	}
	dt := DType(b[5])
	size := 0
	switch dt {
	case F32:
		size = 4
	case F16:
		size = 2
	default:
		return nil, fmt.Errorf("%w: dtype %d", ErrWire, dt)
	}
	if b[6] != 0 || b[7] != 0 {
		return nil, fmt.Errorf("%w: reserved bytes set", ErrWire)
	}
	le := binary.LittleEndian
	pos, tokens, dim := le.Uint32(b[8:]), le.Uint32(b[12:]), le.Uint32(b[16:])
	if tokens == 0 || dim == 0 || tokens > maxWireTokens || dim > maxWireDim || uint64(pos) > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d tokens of %d at position %d", ErrWire, tokens, dim, pos)
	}
	n := int(tokens) * int(dim)
	if len(b)-wireHeader != n*size {
		return nil, fmt.Errorf("%w: %d data bytes for %d×%d %d-byte elements", ErrWire, len(b)-wireHeader, tokens, dim, size)
	}
	h := &Hidden{Pos: int(pos), Tokens: int(tokens), Dim: int(dim), Data: make([]float32, n)}
	d := b[wireHeader:]
	for i := range h.Data {
		var v float32
		if dt == F32 {
			v = math.Float32frombits(le.Uint32(d[i*4:]))
		} else {
			v = quant.F16ToF32(le.Uint16(d[i*2:]))
		}
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("%w: element %d is %v", ErrWire, i, v)
		}
		h.Data[i] = v
	}
	return h, nil
}

// HashHidden is the receipt hash of a wire-form message: SHA-256 of its
// bytes, so sender and receiver agree on exactly what crossed the wire.
func HashHidden(wire []byte) [32]byte { return sha256.Sum256(wire) }
