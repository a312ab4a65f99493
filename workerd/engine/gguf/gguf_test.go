package gguf_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

var update = flag.Bool("update", false, "rewrite the fuzz seed corpus")

// small is a complete, small model file.
func small(t testing.TB) []byte {
	b, err := testmodel.Bytes(testmodel.Options{Seed: 1, Embedding: 8, Heads: 2, Layers: 1, FeedForward: 8, Context: 16, Words: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParse(t *testing.T) {
	for _, typ := range []testmodel.TensorType{testmodel.F32, testmodel.Q4_K} {
		o := testmodel.Options{Seed: 1, Type: typ, Arch: "qwen2", Embedding: 64, FeedForward: 128}
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
		if f.Version != 3 || f.Architecture() != "qwen2" || f.Alignment != 32 {
			t.Errorf("header: v%d %q align %d", f.Version, f.Architecture(), f.Alignment)
		}
		if n, ok := f.ArchUint("embedding_length"); !ok || n != uint64(o.Embedding) {
			t.Errorf("embedding_length %d %v", n, ok)
		}
		if toks, ok := f.Metadata.Strings("tokenizer.ggml.tokens"); !ok || toks[1] != "<s>" {
			t.Errorf("tokens: %v", ok)
		}
		if v, ok := f.Metadata.Bool("tokenizer.ggml.add_bos_token"); !ok || !v {
			t.Error("add_bos_token")
		}
		if v, ok := f.ArchFloat("rope.freq_base"); !ok || v != 10000 {
			t.Errorf("freq_base %v", v)
		}
		q, ok := f.Tensor("blk.0.attn_q.weight")
		wantType := gguf.F32
		if typ == testmodel.Q4_K {
			wantType = gguf.Q4_K
		}
		if !ok || q.Type != wantType || q.Dims[0] != uint64(o.Embedding) || q.Size != uint64(wantType.RowBytes(o.Embedding)*o.Embedding) {
			t.Errorf("attn_q: %+v", q)
		}
		if d, ok := f.Tensor("blk.0.ffn_down.weight"); typ == testmodel.Q4_K && (!ok || d.Type != gguf.Q6_K) {
			t.Errorf("Q4_K_M mix: ffn_down is %v", d.Type)
		}
		if _, ok := f.Tensor("blk.0.attn_k.bias"); !ok {
			t.Error("qwen2 bias missing")
		}
		last := f.Tensors[len(f.Tensors)-1]
		if last.Offset+last.Size != uint64(len(b)) {
			t.Errorf("last tensor ends at %d, file %d", last.Offset+last.Size, len(b))
		}
	}
}

func TestOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, small(t), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ti, _ := f.Tensor("token_embd.weight")
	if len(f.Bytes(ti)) != int(ti.Size) {
		t.Error("tensor bytes")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal("second close:", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.gguf")
	os.WriteFile(bad, []byte("GGUF\x03\x00\x00\x00 too short to be a model"), 0o644)
	if _, err := gguf.Open(bad); !errors.Is(err, gguf.ErrFormat) {
		t.Errorf("truncated file: %v", err)
	}
	if _, err := gguf.Open(filepath.Join(t.TempDir(), "none.gguf")); err == nil {
		t.Error("missing file: no error")
	}
}

// minimal is a hand-built GGUF v3 file: three key/values (a string, a
// u32, an int32 array) and one 4-element F32 tensor: a compact fuzz seed.
func minimal() []byte {
	le := binary.LittleEndian
	str := func(b []byte, s string) []byte { return append(le.AppendUint64(b, uint64(len(s))), s...) }
	b := []byte("GGUF")
	b = le.AppendUint32(b, 3)
	b = le.AppendUint64(b, 1) // tensors
	b = le.AppendUint64(b, 3) // key/values
	b = str(b, "general.architecture")
	b = str(le.AppendUint32(b, 8), "llama")
	b = str(b, "general.alignment")
	b = le.AppendUint32(le.AppendUint32(b, 4), 32)
	b = str(b, "a.list")
	b = le.AppendUint64(le.AppendUint32(le.AppendUint32(b, 9), 5), 2)
	b = le.AppendUint32(le.AppendUint32(b, 7), 0xfffffff9)
	b = str(b, "t")
	b = le.AppendUint32(b, 1)
	b = le.AppendUint64(b, 4)
	b = le.AppendUint32(b, 0) // F32
	b = le.AppendUint64(b, 0)
	for len(b)%32 != 0 {
		b = append(b, 0)
	}
	for i := 0; i < 4; i++ {
		b = le.AppendUint32(b, 0x3f800000)
	}
	return b
}

func TestMinimal(t *testing.T) {
	f, err := gguf.Parse(minimal())
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := f.Metadata["a.list"].([]int32); !ok || len(l) != 2 || l[1] != -7 {
		t.Errorf("int32 array: %#v", f.Metadata["a.list"])
	}
	ti, ok := f.Tensor("t")
	if !ok || ti.Elements() != 4 || len(f.Bytes(ti)) != 16 {
		t.Errorf("tensor: %+v", ti)
	}
}

// corrupt returns damaged variants of a valid file, each with what must
// be refused.
func corrupt(b []byte) map[string][]byte {
	le := binary.LittleEndian
	mod := func(f func(c []byte) []byte) []byte { return f(bytes.Clone(b)) }
	return map[string][]byte{
		"magic":            mod(func(c []byte) []byte { c[0] = 'X'; return c }),
		"version":          mod(func(c []byte) []byte { le.PutUint32(c[4:], 9); return c }),
		"tensor count":     mod(func(c []byte) []byte { le.PutUint64(c[8:], 1<<40); return c }),
		"kv count":         mod(func(c []byte) []byte { le.PutUint64(c[16:], 1<<19); return c }),
		"first key size":   mod(func(c []byte) []byte { le.PutUint64(c[24:], 1<<62); return c }),
		"truncated":        b[:len(b)/2],
		"no tensor data":   b[:len(b)-64],
		"header only":      b[:24],
		"first value type": mod(func(c []byte) []byte { n := le.Uint64(c[24:]); le.PutUint32(c[32+n:], 77); return c }),
	}
}

func TestCorrupt(t *testing.T) {
	for name, c := range corrupt(small(t)) {
		if _, err := gguf.Parse(c); !errors.Is(err, gguf.ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", name, err)
		}
	}
}

// FuzzParse: no input makes Parse panic, and whatever it accepts has
// every tensor inside the file.
func FuzzParse(f *testing.F) {
	f.Add(small(f))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := gguf.Parse(data)
		if err != nil {
			if !errors.Is(err, gguf.ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		for _, ti := range g.Tensors {
			if ti.Offset+ti.Size > uint64(len(data)) || ti.Offset%g.Alignment != 0 {
				t.Fatalf("tensor %s out of bounds", ti.Name)
			}
			_ = g.Bytes(ti)
		}
		for k := range g.Metadata {
			g.Metadata.String(k)
			g.Metadata.Uint(k)
			g.Metadata.Float(k)
		}
	})
}

// TestWriteCorpus writes FuzzParse's seed corpus (go test -update).
func TestWriteCorpus(t *testing.T) {
	if !*update {
		t.Skip("run with -update to rewrite testdata/fuzz")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzParse")
	os.MkdirAll(dir, 0o755)
	seeds := corrupt(minimal())
	seeds["valid"] = minimal()
	for name, c := range seeds {
		name = strings.ReplaceAll(name, " ", "-")
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", c)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
