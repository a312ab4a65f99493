// Package gguf reads GGUF v2/v3 model files: the metadata key/values and
// the tensor directory, with the tensor data left in place (memory-mapped
// by Open). Every count, length, offset and size read from a file is
// checked against the file's bytes before use, so a hostile or truncated
// file yields an error, never a panic or a huge allocation.
//
// A dedicated parser rather than gguf-parser-go: that module brings
// remote-download, estimation and Ollama-registry features (and gonum,
// x/tools, jsoniter) that workerd does not use, and does not read from a
// mapping we own. This one is small, has no dependencies and is fuzzed
// (FuzzParse).
package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
)

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// Limits on what a file may declare; far above any real model, they keep
// a corrupt header from making the parser allocate or loop without end.
const (
	maxTensors  = 1 << 20
	maxKVs      = 1 << 20
	maxDims     = 4
	maxStrLen   = 1 << 26
	maxArrayLen = 1 << 28
	maxDepth    = 4
)

// Metadata value types, as GGUF numbers them.
const (
	typeUint8   = 0
	typeInt8    = 1
	typeUint16  = 2
	typeInt16   = 3
	typeUint32  = 4
	typeInt32   = 5
	typeFloat32 = 6
	typeBool    = 7
	typeString  = 8
	typeArray   = 9
	typeUint64  = 10
	typeInt64   = 11
	typeFloat64 = 12
)

// ErrFormat is wrapped by every error about a malformed file.
var ErrFormat = errors.New("gguf: malformed file")

// Metadata is a file's key/values. Scalars are uint8, int8, uint16, int16,
// uint32, int32, uint64, int64, float32, float64, bool or string; arrays
// are typed slices ([]string, []float32, []int32, []uint32, ...); arrays
// of arrays are []any.
type Metadata map[string]any

// String returns a string value.
func (m Metadata) String(key string) (string, bool) {
	s, ok := m[key].(string)
	return s, ok
}

// Uint returns a non-negative integer value of any integer type.
func (m Metadata) Uint(key string) (uint64, bool) {
	switch v := m[key].(type) {
	case uint64: // the one kind past int64
		return v, true
	case uint:
		return uint64(v), true
	}
	n, ok := Int(m[key])
	return uint64(n), ok && n >= 0
}

// Int reads a metadata value of any Go integer kind; values past int64
// fail. Packages that take metadata as a plain map use it too.
func Int(x any) (int64, bool) {
	switch n := x.(type) {
	case int:
		return int64(n), true
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint:
		return int64(n), uint64(n) <= math.MaxInt64
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint64:
		return int64(n), n <= math.MaxInt64
	}
	return 0, false
}

// Float returns a floating-point value (float32 or float64).
func (m Metadata) Float(key string) (float64, bool) {
	switch v := m[key].(type) {
	case float32:
		return float64(v), true
	case float64:
		return v, true
	}
	return 0, false
}

// Bool returns a boolean value.
func (m Metadata) Bool(key string) (bool, bool) {
	b, ok := m[key].(bool)
	return b, ok
}

// Strings returns a string array value.
func (m Metadata) Strings(key string) ([]string, bool) {
	s, ok := m[key].([]string)
	return s, ok
}

// TensorInfo is one entry of the tensor directory.
type TensorInfo struct {
	Name string
	// Dims are in GGUF order: Dims[0] is the contiguous dimension (a
	// matrix's row length).
	Dims []uint64
	Type Type
	// Offset is the data's position in the file, absolute.
	Offset uint64
	// Size is the data's size in bytes.
	Size uint64
}

// Elements is the number of elements.
func (t TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// File is a parsed GGUF file. Data holds the whole file (the mapping when
// it came from Open); tensor bytes are slices of it.
type File struct {
	Version  uint32
	Metadata Metadata
	Tensors  []TensorInfo
	// Alignment of the data section (general.alignment, default 32).
	Alignment uint64
	Data      []byte

	byName map[string]int
	unmap  func() error
}

// Tensor returns the directory entry named name.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// Bytes returns the tensor's data. The slice aliases the file: read only.
func (f *File) Bytes(t TensorInfo) []byte { return f.Data[t.Offset : t.Offset+t.Size] }

// Close unmaps the file when it came from Open; tensor slices are invalid
// afterwards.
func (f *File) Close() error {
	if f.unmap == nil {
		return nil
	}
	u := f.unmap
	f.unmap = nil
	return u()
}

type reader struct {
	b   []byte
	off uint64
	err error
}

func (r *reader) fail(format string, a ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrFormat}, a...)...)
	}
}

func (r *reader) take(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b))-r.off {
		r.fail("need %d bytes at offset %d, file has %d", n, r.off, len(r.b))
		return nil
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p
}

func (r *reader) u8() uint8 {
	if p := r.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if p := r.take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if p := r.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if p := r.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

func (r *reader) str() string {
	n := r.u64()
	if n > maxStrLen {
		r.fail("string of %d bytes at offset %d", n, r.off)
		return ""
	}
	return string(r.take(n))
}

// count reads an array length and checks that n elements of at least
// minSize bytes each can still fit in the file.
func (r *reader) count(minSize uint64) uint64 {
	n := r.u64()
	if r.err != nil {
		return 0
	}
	if n > maxArrayLen || n*minSize > uint64(len(r.b))-r.off {
		r.fail("array of %d elements at offset %d does not fit", n, r.off)
		return 0
	}
	return n
}

func scalarSize(t uint32) uint64 {
	switch t {
	case typeUint8, typeInt8, typeBool:
		return 1
	case typeUint16, typeInt16:
		return 2
	case typeUint32, typeInt32, typeFloat32:
		return 4
	case typeUint64, typeInt64, typeFloat64, typeString, typeArray:
		return 8 // a string or array holds at least its 8-byte length
	}
	return 0
}

func (r *reader) value(t uint32, depth int) any {
	switch t {
	case typeUint8:
		return r.u8()
	case typeInt8:
		return int8(r.u8())
	case typeUint16:
		return r.u16()
	case typeInt16:
		return int16(r.u16())
	case typeUint32:
		return r.u32()
	case typeInt32:
		return int32(r.u32())
	case typeFloat32:
		return math.Float32frombits(r.u32())
	case typeBool:
		b := r.u8()
		if b > 1 {
			r.fail("bool value %d", b)
		}
		return b == 1
	case typeString:
		return r.str()
	case typeUint64:
		return r.u64()
	case typeInt64:
		return int64(r.u64())
	case typeFloat64:
		return math.Float64frombits(r.u64())
	case typeArray:
		if depth >= maxDepth {
			r.fail("arrays nested deeper than %d", maxDepth)
			return nil
		}
		et := r.u32()
		sz := scalarSize(et)
		if sz == 0 {
			r.fail("array element type %d", et)
			return nil
		}
		n := r.count(sz)
		return r.array(et, n, depth)
	}
	r.fail("value type %d", t)
	return nil
}

func fill[T any](r *reader, n uint64, f func() T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = f()
		if r.err != nil {
			return nil
		}
	}
	return out
}

func (r *reader) array(et uint32, n uint64, depth int) any {
	switch et {
	case typeUint8:
		return fill(r, n, r.u8)
	case typeInt8:
		return fill(r, n, func() int8 { return int8(r.u8()) })
	case typeUint16:
		return fill(r, n, r.u16)
	case typeInt16:
		return fill(r, n, func() int16 { return int16(r.u16()) })
	case typeUint32:
		return fill(r, n, r.u32)
	case typeInt32:
		return fill(r, n, func() int32 { return int32(r.u32()) })
	case typeFloat32:
		return fill(r, n, func() float32 { return math.Float32frombits(r.u32()) })
	case typeBool:
		return fill(r, n, func() bool { return r.value(typeBool, depth).(bool) })
	case typeString:
		return fill(r, n, r.str)
	case typeUint64:
		return fill(r, n, r.u64)
	case typeInt64:
		return fill(r, n, func() int64 { return int64(r.u64()) })
	case typeFloat64:
		return fill(r, n, func() float64 { return math.Float64frombits(r.u64()) })
	default: // typeArray
		return fill(r, n, func() any { return r.value(typeArray, depth+1) })
	}
}

// Parse reads a GGUF file held in data. The File aliases data.
func Parse(data []byte) (*File, error) {
	r := &reader{b: data}
	if string(r.take(4)) != Magic {
		return nil, fmt.Errorf("%w: not a GGUF file (bad magic)", ErrFormat)
	}
	f := &File{Version: r.u32(), Data: data, Alignment: 32}
	if f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("%w: version %d (want 2 or 3)", ErrFormat, f.Version)
	}
	nt, nkv := r.u64(), r.u64()
	if r.err != nil {
		return nil, r.err
	}
	if nt > maxTensors || nkv > maxKVs {
		return nil, fmt.Errorf("%w: %d tensors, %d key/values", ErrFormat, nt, nkv)
	}
	f.Metadata = make(Metadata, min(nkv, 1024))
	for i := uint64(0); i < nkv && r.err == nil; i++ {
		key := r.str()
		t := r.u32()
		v := r.value(t, 0)
		if r.err != nil {
			break
		}
		if _, dup := f.Metadata[key]; dup {
			return nil, fmt.Errorf("%w: duplicate key %q", ErrFormat, key)
		}
		f.Metadata[key] = v
	}
	if r.err != nil {
		return nil, fmt.Errorf("metadata: %w", r.err)
	}
	if v, ok := f.Metadata["general.alignment"]; ok {
		a, ok := f.Metadata.Uint("general.alignment")
		if !ok || a == 0 || a&(a-1) != 0 || a > 1<<16 {
			return nil, fmt.Errorf("%w: general.alignment %v is not a power of two", ErrFormat, v)
		}
		f.Alignment = a
	}
	f.Tensors = make([]TensorInfo, 0, min(nt, 4096))
	f.byName = make(map[string]int, min(nt, 4096))
	for i := uint64(0); i < nt && r.err == nil; i++ {
		t := TensorInfo{Name: r.str()}
		nd := r.u32()
		if nd == 0 || nd > maxDims {
			r.fail("tensor %q has %d dimensions", t.Name, nd)
			break
		}
		t.Dims = make([]uint64, nd)
		for j := range t.Dims {
			t.Dims[j] = r.u64()
		}
		t.Type = Type(r.u32())
		t.Offset = r.u64()
		if r.err != nil {
			break
		}
		if _, dup := f.byName[t.Name]; dup {
			return nil, fmt.Errorf("%w: duplicate tensor %q", ErrFormat, t.Name)
		}
		size, err := t.Type.size(t.Dims)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		t.Size = size
		f.byName[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	if r.err != nil {
		return nil, fmt.Errorf("tensor directory: %w", r.err)
	}
	start := (r.off + f.Alignment - 1) / f.Alignment * f.Alignment
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if t.Offset%f.Alignment != 0 {
			return nil, fmt.Errorf("%w: tensor %q offset %d not aligned to %d", ErrFormat, t.Name, t.Offset, f.Alignment)
		}
		if t.Offset > uint64(len(data)) || start > uint64(len(data))-t.Offset || t.Size > uint64(len(data))-start-t.Offset {
			return nil, fmt.Errorf("%w: tensor %q (%d bytes at %d) lies past the end of the file (%d bytes)", ErrFormat, t.Name, t.Size, t.Offset, len(data))
		}
		t.Offset += start
	}
	return f, nil
}

// Architecture is general.architecture.
func (f *File) Architecture() string {
	s, _ := f.Metadata.String("general.architecture")
	return s
}

// ArchUint reads "<arch>.<key>".
func (f *File) ArchUint(key string) (uint64, bool) {
	return f.Metadata.Uint(f.Architecture() + "." + key)
}

// ArchFloat reads "<arch>.<key>".
func (f *File) ArchFloat(key string) (float64, bool) {
	return f.Metadata.Float(f.Architecture() + "." + key)
}

// String summarises the file for logs.
func (f *File) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "GGUF v%d %s, %d tensors, %d keys", f.Version, f.Architecture(), len(f.Tensors), len(f.Metadata))
	return b.String()
}
