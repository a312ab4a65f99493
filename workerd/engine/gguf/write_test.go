package gguf_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

// sameValue compares two metadata values as GGUF sees them: same Go type,
// same elements, floats compared by their bits (so NaN equals itself).
func sameValue(a, b any) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if !va.IsValid() || !vb.IsValid() || va.Type() != vb.Type() {
		return false
	}
	switch va.Kind() {
	case reflect.Float32:
		return math.Float32bits(float32(va.Float())) == math.Float32bits(float32(vb.Float()))
	case reflect.Float64:
		return math.Float64bits(va.Float()) == math.Float64bits(vb.Float())
	case reflect.Slice:
		if va.Len() != vb.Len() {
			return false
		}
		for i := 0; i < va.Len(); i++ {
			if !sameValue(va.Index(i).Interface(), vb.Index(i).Interface()) {
				return false
			}
		}
		return true
	}
	return a == b
}

// sameFile reports the first difference between two parsed files'
// metadata and tensors (name, dims, type and bytes, in order).
func sameFile(a, b *gguf.File) error {
	if len(a.Metadata) != len(b.Metadata) {
		return fmt.Errorf("%d keys, then %d", len(a.Metadata), len(b.Metadata))
	}
	for k, v := range a.Metadata {
		if !sameValue(v, b.Metadata[k]) {
			return fmt.Errorf("key %q: %#v, then %#v", k, v, b.Metadata[k])
		}
	}
	if len(a.Tensors) != len(b.Tensors) {
		return fmt.Errorf("%d tensors, then %d", len(a.Tensors), len(b.Tensors))
	}
	for i, ta := range a.Tensors {
		tb := b.Tensors[i]
		if ta.Name != tb.Name || ta.Type != tb.Type || !reflect.DeepEqual(ta.Dims, tb.Dims) || !bytes.Equal(a.Bytes(ta), b.Bytes(tb)) {
			return fmt.Errorf("tensor %d: %s %v %v, then %s %v %v", i, ta.Name, ta.Type, ta.Dims, tb.Name, tb.Type, tb.Dims)
		}
	}
	return nil
}

// roundTrip writes f and parses the result, checking it equals f and that
// writing it again gives the same bytes.
func roundTrip(t testing.TB, f *gguf.File) []byte {
	t.Helper()
	out, err := gguf.Bytes(f.Metadata, f.WriteTensors())
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	g, err := gguf.Parse(out)
	if err != nil {
		t.Fatalf("parse what Write wrote: %v", err)
	}
	if err := sameFile(f, g); err != nil {
		t.Fatalf("round trip changed the file: %v", err)
	}
	if g.Version != 3 {
		t.Fatalf("wrote version %d", g.Version)
	}
	for _, ti := range g.Tensors {
		if ti.Offset%g.Alignment != 0 {
			t.Fatalf("tensor %s at %d, not aligned to %d", ti.Name, ti.Offset, g.Alignment)
		}
	}
	again, err := gguf.Bytes(g.Metadata, g.WriteTensors())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, again) {
		t.Fatal("writing the parsed output again gives other bytes")
	}
	return out
}

func TestWriteRoundTripModels(t *testing.T) {
	for _, arch := range []string{"llama", "qwen2"} {
		for _, typ := range []testmodel.TensorType{testmodel.F32, testmodel.Q8_0, testmodel.Q4_K} {
			t.Run(fmt.Sprintf("%s-%d", arch, typ), func(t *testing.T) {
				o := testmodel.Options{Seed: 7, Arch: arch, Type: typ, Layers: 3, KVHeads: 2,
					ChatTemplate: "{% for m in messages %}{{ m.content }}{% endfor %}"}
				if typ == testmodel.Q4_K {
					o.Embedding, o.FeedForward = 256, 256
				}
				b, err := testmodel.Bytes(o)
				if err != nil {
					t.Fatal(err)
				}
				f, err := gguf.Parse(b)
				if err != nil {
					t.Fatal(err)
				}
				out := roundTrip(t, f)
				// testmodel lists its keys unsorted and leaves the last
				// tensor unpadded; Write pads every tensor as ggml does. The
				// layout is otherwise the same.
				if want := (len(b) + 31) / 32 * 32; len(out) != want {
					t.Errorf("written file is %d bytes, want %d (the generated %d, padded)", len(out), want, len(b))
				}
			})
		}
	}
}

// everyType is metadata holding each value type Parse returns, nested
// arrays and empty ones included, with a 64-byte alignment.
func everyType() gguf.Metadata {
	return gguf.Metadata{
		"general.alignment": uint32(64),
		"u8":                uint8(250), "i8": int8(-5), "u16": uint16(65000), "i16": int16(-300),
		"u32": uint32(4e9), "i32": int32(-7), "u64": uint64(1) << 63, "i64": int64(-1) << 40,
		"f32": float32(1.5), "f64": -2.25, "nan": float32(math.NaN()), "t": true, "f": false,
		"s": "héllo", "empty.s": "",
		"a.u8": []uint8{1, 2}, "a.i8": []int8{-1}, "a.u16": []uint16{3}, "a.i16": []int16{-4},
		"a.u32": []uint32{5, 6}, "a.i32": []int32{-7, 8}, "a.u64": []uint64{9}, "a.i64": []int64{-10},
		"a.f32": []float32{0.5, float32(math.Inf(-1))}, "a.f64": []float64{math.Pi}, "a.bool": []bool{true, false},
		"a.str": []string{"x", "", "▁y"}, "a.empty": []int32{},
		"a.nested": []any{[]string{"a", "b"}, []float32{1}, []any{[]uint8{7}, []any{}}},
	}
}

func TestWriteEveryType(t *testing.T) {
	tensors := []gguf.WriteTensor{
		{Name: "a", Dims: []uint64{3}, Type: gguf.F32, Data: make([]byte, 12)},
		{Name: "b", Dims: []uint64{32, 2}, Type: gguf.Q8_0, Data: bytes.Repeat([]byte{1}, 68)},
		{Name: "c", Dims: []uint64{2, 1, 1, 1}, Type: gguf.F16, Data: []byte{1, 2, 3, 4}},
	}
	b, err := gguf.Bytes(everyType(), tensors)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if f.Alignment != 64 {
		t.Errorf("alignment %d, want 64", f.Alignment)
	}
	want := everyType()
	for k, v := range want {
		if !sameValue(v, f.Metadata[k]) {
			t.Errorf("key %q: wrote %#v, parsed %#v", k, v, f.Metadata[k])
		}
	}
	if len(f.Metadata) != len(want) {
		t.Errorf("%d keys parsed, %d written", len(f.Metadata), len(want))
	}
	for i, ti := range f.Tensors {
		if ti.Name != tensors[i].Name || !bytes.Equal(f.Bytes(ti), tensors[i].Data) || ti.Offset%64 != 0 {
			t.Errorf("tensor %d: %+v", i, ti)
		}
	}
	roundTrip(t, f)
	// Map order never shows in the bytes.
	for range 5 {
		again, err := gguf.Bytes(everyType(), tensors)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatal("the same input gives other bytes")
		}
	}
}

func TestWriteRefuses(t *testing.T) {
	f32 := func(name string, n int) gguf.WriteTensor {
		return gguf.WriteTensor{Name: name, Dims: []uint64{uint64(n)}, Type: gguf.F32, Data: make([]byte, 4*n)}
	}
	deep := any([]uint8{1})
	for range 4 {
		deep = []any{deep}
	}
	cases := []struct {
		name    string
		meta    gguf.Metadata
		tensors []gguf.WriteTensor
		want    string
	}{
		{"int", gguf.Metadata{"k": 3}, nil, `key "k": value of Go type int has no GGUF type`},
		{"nil", gguf.Metadata{"k": nil}, nil, `key "k": value of Go type <nil>`},
		{"scalar in nested array", gguf.Metadata{"k": []any{uint8(1)}}, nil, "element 0: value of Go type uint8"},
		{"nested too deep", gguf.Metadata{"k": deep}, nil, "nested deeper than 4"},
		{"alignment not a power of two", gguf.Metadata{"general.alignment": uint32(48)}, nil, "general.alignment 48"},
		{"alignment not an integer", gguf.Metadata{"general.alignment": "32"}, nil, "general.alignment 32 (string)"},
		{"short data", nil, []gguf.WriteTensor{{Name: "t", Dims: []uint64{4}, Type: gguf.F32, Data: make([]byte, 15)}}, `tensor "t": F32 [4] is 16 bytes, 15 given`},
		{"duplicate tensor", nil, []gguf.WriteTensor{f32("t", 1), f32("t", 1)}, `tensor "t" given twice`},
		{"no dims", nil, []gguf.WriteTensor{{Name: "t", Type: gguf.F32}}, `tensor "t" has 0 dimensions`},
		{"five dims", nil, []gguf.WriteTensor{{Name: "t", Dims: []uint64{1, 1, 1, 1, 1}, Type: gguf.F32, Data: make([]byte, 4)}}, "5 dimensions"},
		{"unknown type", nil, []gguf.WriteTensor{{Name: "t", Dims: []uint64{1}, Type: 99, Data: make([]byte, 4)}}, "unknown tensor type 99"},
		{"partial block", nil, []gguf.WriteTensor{{Name: "t", Dims: []uint64{16}, Type: gguf.Q8_0, Data: make([]byte, 17)}}, "not a multiple of Q8_0's block"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			err := gguf.Write(&out, c.meta, c.tensors)
			if !errors.Is(err, gguf.ErrWrite) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v; want ErrWrite containing %q", err, c.want)
			}
			if out.Len() != 0 {
				t.Errorf("%d bytes written before the error", out.Len())
			}
		})
	}
}

// failWriter fails after n bytes.
type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		return 0, errors.New("disk full")
	}
	w.n -= len(p)
	return len(p), nil
}

func TestWriteReportsWriterErrors(t *testing.T) {
	big := gguf.WriteTensor{Name: "big", Dims: []uint64{1 << 19}, Type: gguf.F32, Data: make([]byte, 4<<19)}
	err := gguf.Write(&failWriter{n: 1 << 20}, nil, []gguf.WriteTensor{big})
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("error %v; want the writer's", err)
	}
}

// corpusSeeds reads FuzzParse's seed corpus (testdata/fuzz/FuzzParse), so
// the round trip starts from the same valid and damaged files.
func corpusSeeds(t testing.TB) [][]byte {
	dir := filepath.Join("testdata", "fuzz", "FuzzParse")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") {
			t.Fatalf("%s is not a one-value []byte corpus file", e.Name())
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		out = append(out, []byte(s))
	}
	if len(out) == 0 {
		t.Fatal("empty seed corpus")
	}
	return out
}

// FuzzWriteRoundTrip: whatever Parse accepts, Write encodes, and parsing
// that gives the same metadata and tensor bytes; writing it again gives
// the same bytes.
func FuzzWriteRoundTrip(f *testing.F) {
	for _, s := range corpusSeeds(f) {
		f.Add(s)
	}
	f.Add(small(f))
	every, err := gguf.Bytes(everyType(), []gguf.WriteTensor{{Name: "x", Dims: []uint64{2}, Type: gguf.F16, Data: []byte{0, 60, 0, 188}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(every)
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := gguf.Parse(data)
		if err != nil {
			return
		}
		roundTrip(t, g)
	})
}
