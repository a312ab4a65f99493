package gguf

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
)

// WriteTensor is one tensor to write: its name, its dimensions in GGUF
// order (Dims[0] is the contiguous one), its element type and its encoded
// bytes, which must be exactly the size Type and Dims imply.
type WriteTensor struct {
	Name string
	Dims []uint64
	Type Type
	Data []byte
}

// ErrWrite is wrapped by every error about metadata or tensors Write
// cannot encode.
var ErrWrite = errors.New("gguf: cannot write")

// Write encodes a GGUF v3 file to w: meta's keys in sorted order, then
// the tensor directory in the order given, then each tensor's data,
// aligned to general.alignment when meta sets it (32 otherwise) and padded
// with zeros. The same inputs always give the same bytes, which is what
// lets a model split into blobs hash the same on every machine.
//
// Metadata values take the types Parse returns: the scalars (uint8, int8,
// uint16, int16, uint32, int32, uint64, int64, float32, float64, bool,
// string), typed slices of them for arrays, and []any of such slices for
// arrays of arrays. Anything else — an int, a nil, arrays nested deeper
// than Parse accepts — is refused with an error naming the key, before
// anything is written.
func Write(w io.Writer, meta Metadata, tensors []WriteTensor) error {
	if len(meta) > maxKVs || len(tensors) > maxTensors {
		return fmt.Errorf("%w: %d key/values and %d tensors (at most %d and %d)", ErrWrite, len(meta), len(tensors), maxKVs, maxTensors)
	}
	align := uint64(32)
	if v, ok := meta["general.alignment"]; ok {
		a, ok := meta.Uint("general.alignment")
		if !ok || a == 0 || a&(a-1) != 0 || a > 1<<16 {
			return fmt.Errorf("%w: general.alignment %v (%T) is not a power of two up to 65536", ErrWrite, v, v)
		}
		align = a
	}
	e := &encoder{}
	e.b = append(e.b, Magic...)
	e.u32(3)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(meta)))
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := e.str(k); err != nil {
			return fmt.Errorf("%w: key %.64q: %v", ErrWrite, k, err)
		}
		if err := e.value(meta[k]); err != nil {
			return fmt.Errorf("%w: key %q: %v", ErrWrite, k, err)
		}
	}
	seen := make(map[string]bool, len(tensors))
	var off uint64
	for _, t := range tensors {
		if seen[t.Name] {
			return fmt.Errorf("%w: tensor %q given twice", ErrWrite, t.Name)
		}
		seen[t.Name] = true
		if len(t.Dims) == 0 || len(t.Dims) > maxDims {
			return fmt.Errorf("%w: tensor %q has %d dimensions (1 to %d)", ErrWrite, t.Name, len(t.Dims), maxDims)
		}
		size, err := t.Type.size(t.Dims)
		if err != nil {
			return fmt.Errorf("%w: tensor %q: %v", ErrWrite, t.Name, err)
		}
		if size != uint64(len(t.Data)) {
			return fmt.Errorf("%w: tensor %q: %s %v is %d bytes, %d given", ErrWrite, t.Name, t.Type, t.Dims, size, len(t.Data))
		}
		if err := e.str(t.Name); err != nil {
			return fmt.Errorf("%w: tensor name: %v", ErrWrite, err)
		}
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(off)
		off = padTo(off+size, align)
	}
	e.b = append(e.b, make([]byte, padTo(uint64(len(e.b)), align)-uint64(len(e.b)))...)

	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := bw.Write(e.b); err != nil {
		return fmt.Errorf("gguf: write: %w", err)
	}
	zeros := make([]byte, align)
	for _, t := range tensors {
		if _, err := bw.Write(t.Data); err != nil {
			return fmt.Errorf("gguf: write tensor %s: %w", t.Name, err)
		}
		n := uint64(len(t.Data))
		if _, err := bw.Write(zeros[:padTo(n, align)-n]); err != nil {
			return fmt.Errorf("gguf: write tensor %s: %w", t.Name, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("gguf: write: %w", err)
	}
	return nil
}

// Bytes encodes a file with Write into memory.
func Bytes(meta Metadata, tensors []WriteTensor) ([]byte, error) {
	var b bytes.Buffer
	if err := Write(&b, meta, tensors); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteTensors returns f's tensors as Write takes them, in f's order; the data
// slices alias f.
func (f *File) WriteTensors() []WriteTensor {
	out := make([]WriteTensor, len(f.Tensors))
	for i, t := range f.Tensors {
		out[i] = WriteTensor{Name: t.Name, Dims: t.Dims, Type: t.Type, Data: f.Bytes(t)}
	}
	return out
}

func padTo(n, align uint64) uint64 { return (n + align - 1) / align * align }

// encoder builds the header: key/values and the tensor directory.
type encoder struct{ b []byte }

func (e *encoder) u8(v uint8)   { e.b = append(e.b, v) }
func (e *encoder) u16(v uint16) { e.b = binary.LittleEndian.AppendUint16(e.b, v) }
func (e *encoder) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }

func (e *encoder) str(s string) error {
	if len(s) > maxStrLen {
		return fmt.Errorf("string of %d bytes (at most %d)", len(s), maxStrLen)
	}
	e.u64(uint64(len(s)))
	e.b = append(e.b, s...)
	return nil
}

func (e *encoder) bool(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

// value writes a key's type and value.
func (e *encoder) value(v any) error {
	switch x := v.(type) {
	case uint8:
		e.u32(typeUint8)
		e.u8(x)
	case int8:
		e.u32(typeInt8)
		e.u8(uint8(x))
	case uint16:
		e.u32(typeUint16)
		e.u16(x)
	case int16:
		e.u32(typeInt16)
		e.u16(uint16(x))
	case uint32:
		e.u32(typeUint32)
		e.u32(x)
	case int32:
		e.u32(typeInt32)
		e.u32(uint32(x))
	case float32:
		e.u32(typeFloat32)
		e.u32(math.Float32bits(x))
	case bool:
		e.u32(typeBool)
		e.bool(x)
	case string:
		e.u32(typeString)
		return e.str(x)
	case uint64:
		e.u32(typeUint64)
		e.u64(x)
	case int64:
		e.u32(typeInt64)
		e.u64(uint64(x))
	case float64:
		e.u32(typeFloat64)
		e.u64(math.Float64bits(x))
	default:
		e.u32(typeArray)
		return e.array(v, 0)
	}
	return nil
}

// array writes an array's element type, length and elements; depth is
// its nesting level, as Parse counts it.
func (e *encoder) array(v any, depth int) error {
	if depth >= maxDepth {
		return fmt.Errorf("arrays nested deeper than %d", maxDepth)
	}
	switch x := v.(type) {
	case []uint8:
		return putArray(e, typeUint8, x, e.u8)
	case []int8:
		return putArray(e, typeInt8, x, func(v int8) { e.u8(uint8(v)) })
	case []uint16:
		return putArray(e, typeUint16, x, e.u16)
	case []int16:
		return putArray(e, typeInt16, x, func(v int16) { e.u16(uint16(v)) })
	case []uint32:
		return putArray(e, typeUint32, x, e.u32)
	case []int32:
		return putArray(e, typeInt32, x, func(v int32) { e.u32(uint32(v)) })
	case []float32:
		return putArray(e, typeFloat32, x, func(v float32) { e.u32(math.Float32bits(v)) })
	case []bool:
		return putArray(e, typeBool, x, e.bool)
	case []uint64:
		return putArray(e, typeUint64, x, e.u64)
	case []int64:
		return putArray(e, typeInt64, x, func(v int64) { e.u64(uint64(v)) })
	case []float64:
		return putArray(e, typeFloat64, x, func(v float64) { e.u64(math.Float64bits(v)) })
	case []string:
		if err := arrayHeader(e, typeString, len(x)); err != nil {
			return err
		}
		for _, s := range x {
			if err := e.str(s); err != nil {
				return err
			}
		}
		return nil
	case []any:
		if err := arrayHeader(e, typeArray, len(x)); err != nil {
			return err
		}
		for i, el := range x {
			if err := e.array(el, depth+1); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
		return nil
	}
	return fmt.Errorf("value of Go type %T has no GGUF type (use a sized integer, float, bool, string, a slice of one, or []any of slices)", v)
}

func arrayHeader(e *encoder, et uint32, n int) error {
	if n > maxArrayLen {
		return fmt.Errorf("array of %d elements (at most %d)", n, maxArrayLen)
	}
	e.u32(et)
	e.u64(uint64(n))
	return nil
}

func putArray[T any](e *encoder, et uint32, x []T, put func(T)) error {
	if err := arrayHeader(e, et, len(x)); err != nil {
		return err
	}
	for _, v := range x {
		put(v)
	}
	return nil
}
