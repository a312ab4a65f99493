package testmodel

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// gguf is a parsed file: this is a second, independent reading of the
// format (GGUF v3, little-endian) to check the writer against.
type gguf struct {
	version  uint32
	kv       map[string]any
	keys     []string
	tensors  []tensorInfo
	dataOff  uint64
	fileSize int
	raw      []byte
}

type tensorInfo struct {
	name   string
	dims   []uint64
	typ    uint32
	offset uint64
}

type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil || n < 0 || r.off+n > len(r.b) {
		if r.err == nil {
			r.err = fmt.Errorf("short file at %d (want %d bytes)", r.off, n)
		}
		return make([]byte, max(n, 0))
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p
}
func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.take(4)) }
func (r *reader) u64() uint64 { return binary.LittleEndian.Uint64(r.take(8)) }
func (r *reader) str() string { return string(r.take(int(r.u64()))) }

func (r *reader) value(typ uint32) any {
	switch typ {
	case 4:
		return r.u32()
	case 5:
		return int32(r.u32())
	case 6:
		return math.Float32frombits(r.u32())
	case 7:
		return r.take(1)[0] != 0
	case 8:
		return r.str()
	case 9:
		et, n := r.u32(), r.u64()
		if n > uint64(len(r.b)) {
			r.err = fmt.Errorf("array of %d", n)
			return nil
		}
		out := make([]any, n)
		for i := range out {
			out[i] = r.value(et)
		}
		return out
	}
	r.err = fmt.Errorf("value type %d", typ)
	return nil
}

func parse(b []byte) (*gguf, error) {
	r := &reader{b: b}
	if string(r.take(4)) != "GGUF" {
		return nil, fmt.Errorf("bad magic")
	}
	g := &gguf{version: r.u32(), kv: map[string]any{}, fileSize: len(b), raw: b}
	nt, nkv := r.u64(), r.u64()
	for i := uint64(0); i < nkv && r.err == nil; i++ {
		k := r.str()
		g.kv[k] = r.value(r.u32())
		g.keys = append(g.keys, k)
	}
	for i := uint64(0); i < nt && r.err == nil; i++ {
		t := tensorInfo{name: r.str()}
		nd := r.u32()
		for j := uint32(0); j < nd && r.err == nil; j++ {
			t.dims = append(t.dims, r.u64())
		}
		t.typ, t.offset = r.u32(), r.u64()
		g.tensors = append(g.tensors, t)
	}
	g.dataOff = (uint64(r.off) + 31) / 32 * 32
	return g, r.err
}

func (g *gguf) floats(t tensorInfo) []float32 {
	n := uint64(1)
	for _, d := range t.dims {
		n *= d
	}
	start := g.dataOff + t.offset
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(g.raw[start+uint64(i)*4:]))
	}
	return out
}

func TestDeterministic(t *testing.T) {
	a, err := Bytes(Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Bytes(Options{Seed: 7})
	c, _ := Bytes(Options{Seed: 8})
	if !bytes.Equal(a, b) {
		t.Error("two writes with the same seed differ")
	}
	if bytes.Equal(a, c) || len(a) != len(c) {
		t.Errorf("seeds 7 and 8: equal=%v, sizes %d and %d; want different bytes of one size", bytes.Equal(a, c), len(a), len(c))
	}
}

// TestGolden pins the bytes for seed 1 across Go versions and refactors:
// other engines' tests use this file as their reference model.
func TestGolden(t *testing.T) {
	b, err := Bytes(Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	got := fmt.Sprintf("%s  %d bytes\n", hex.EncodeToString(sum[:]), len(b))
	const path = "testdata/seed1.sha256"
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("seed 1 model changed:\n got %s want %s(run with -update if intended)", got, want)
	}
}

func TestParseBack(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		emb  uint32
		lay  int
		kvh  uint32
		ff   uint64
	}{
		{"defaults", Options{Seed: 1}, 64, 2, 4, 128},
		{"bigger, grouped-query", Options{Seed: 2, Embedding: 128, Layers: 3, Heads: 8, KVHeads: 2, FeedForward: 256, Context: 512}, 128, 3, 2, 256},
		{"own words", Options{Seed: 3, Words: []string{"yes", "no"}}, 64, 2, 4, 128},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Bytes(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			g, err := parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if g.version != 3 {
				t.Errorf("version %d", g.version)
			}
			o, _ := tt.opts.withDefaults()
			checks := map[string]any{
				"general.architecture":          "llama",
				"tokenizer.ggml.model":          "llama",
				"llama.embedding_length":        tt.emb,
				"llama.block_count":             uint32(tt.lay),
				"llama.attention.head_count_kv": tt.kvh,
				"llama.feed_forward_length":     uint32(tt.ff),
				"llama.context_length":          uint32(o.Context),
				"llama.rope.dimension_count":    uint32(o.Embedding / o.Heads),
				"tokenizer.ggml.bos_token_id":   uint32(1),
				"tokenizer.ggml.eos_token_id":   uint32(2),
			}
			for k, want := range checks {
				if got := g.kv[k]; got != want {
					t.Errorf("%s = %v (%T), want %v (%T)", k, got, got, want, want)
				}
			}
			toks, _ := g.kv["tokenizer.ggml.tokens"].([]any)
			scores, _ := g.kv["tokenizer.ggml.scores"].([]any)
			types, _ := g.kv["tokenizer.ggml.token_type"].([]any)
			nv := 3 + 256 + 1 + 26 + len(o.Words)
			if len(toks) != nv || len(scores) != nv || len(types) != nv {
				t.Fatalf("vocab %d tokens, %d scores, %d types; want %d", len(toks), len(scores), len(types), nv)
			}
			if toks[0] != "<unk>" || toks[1] != "<s>" || toks[2] != "</s>" || toks[3] != "<0x00>" || toks[258] != "<0xFF>" ||
				toks[259] != "▁" || toks[260] != "a" || toks[286] != "▁"+o.Words[0] {
				t.Errorf("vocab layout: %v … %v", toks[:4], toks[255:287])
			}
			if types[1] != int32(3) || types[3] != int32(6) || types[286] != int32(1) {
				t.Errorf("token types %v %v %v", types[1], types[3], types[286])
			}

			// Tensors: 2 + 9 per layer + 1, aligned, in bounds, tiling the data.
			if want := 3 + 9*tt.lay; len(g.tensors) != want {
				t.Fatalf("%d tensors, want %d", len(g.tensors), want)
			}
			byName := map[string]tensorInfo{}
			end := uint64(0)
			for _, ti := range g.tensors {
				byName[ti.name] = ti
				if ti.typ != 0 || ti.offset%32 != 0 || ti.offset < end {
					t.Errorf("%s: type %d offset %d (previous end %d)", ti.name, ti.typ, ti.offset, end)
				}
				n := uint64(4)
				for _, d := range ti.dims {
					n *= d
				}
				end = ti.offset + n
			}
			if g.dataOff+end != uint64(g.fileSize) {
				t.Errorf("data ends at %d, file is %d bytes", g.dataOff+end, g.fileSize)
			}
			kv := uint64(tt.emb) / uint64(o.Heads) * uint64(tt.kvh)
			shapes := map[string][]uint64{
				"token_embd.weight":                           {uint64(tt.emb), uint64(nv)},
				"output.weight":                               {uint64(tt.emb), uint64(nv)},
				"output_norm.weight":                          {uint64(tt.emb)},
				"blk.0.attn_k.weight":                         {uint64(tt.emb), kv},
				"blk.0.ffn_down.weight":                       {tt.ff, uint64(tt.emb)},
				fmt.Sprintf("blk.%d.ffn_up.weight", tt.lay-1): {uint64(tt.emb), tt.ff},
			}
			for name, want := range shapes {
				if got := byName[name].dims; fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s dims %v, want %v", name, got, want)
				}
			}

			// Only the word pieces can win a greedy pick.
			out := g.floats(byName["output.weight"])
			for id, tok := range toks {
				row := out[id*int(tt.emb) : (id+1)*int(tt.emb)]
				zero := true
				for _, f := range row {
					zero = zero && f == 0
				}
				word := strings.HasPrefix(tok.(string), "▁") && tok != "▁"
				if zero == word {
					t.Errorf("token %d %q: output row zero=%v", id, tok, zero)
				}
			}
		})
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Embedding: 60, Heads: 8},   // not divisible
		{Embedding: 64, Heads: 64},  // odd head size (1)
		{Heads: 4, KVHeads: 3},      // not a multiple
		{Type: 2},                   // Q4_0: not written
		{Type: Q4_K},                // rows of 64, not a multiple of 256
		{Arch: "gpt2"},              // not llama-family
		{Embedding: -64, Heads: -4}, // negative
		{FeedForward: -1},           // negative
		{Perturb: -0.1},             // negative noise
		{Perturb: math.NaN()},       // not a number
		{Perturb: math.Inf(1)},      // unbounded
	} {
		if _, err := Bytes(o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

func TestWriteFile(t *testing.T) {
	path := t.TempDir() + "/demo.gguf"
	for i := 0; i < 2; i++ { // the second call finds the same bytes
		if err := WriteFile(path, Demo()); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Bytes(Demo())
	if !bytes.Equal(b, want) {
		t.Fatal("file differs from Bytes")
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode())
	}
}

// TestQuantizedTypes: every type writes, with the sizes GGUF defines,
// and the Q4_K mix puts output and ffn_down in Q6_K.
func TestQuantizedTypes(t *testing.T) {
	for _, c := range []struct {
		typ      TensorType
		rowBytes int // bytes of a 256-element row
		outType  uint32
	}{{F32, 1024, 0}, {F16, 512, 1}, {Q8_0, 272, 8}, {Q4_K, 144, 14}, {Q6_K, 210, 14}} {
		b, err := Bytes(Options{Seed: 1, Type: c.typ, Embedding: 256, FeedForward: 256})
		if err != nil {
			t.Fatal(err)
		}
		g, err := parse(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range g.tensors {
			switch {
			case ti.name == "blk.0.attn_q.weight":
				if ti.typ != uint32(c.typ) {
					t.Errorf("%d: attn_q type %d", c.typ, ti.typ)
				}
			case ti.name == "output.weight":
				if ti.typ != c.outType {
					t.Errorf("%d: output type %d, want %d", c.typ, ti.typ, c.outType)
				}
			}
		}
		if got := encodedSize(c.typ, 256); got != uint64(c.rowBytes) {
			t.Errorf("%d: row of 256 is %d bytes, want %d", c.typ, got, c.rowBytes)
		}
	}
}

// TestPerturb: a Perturb leaves every weight but the output matrix's
// byte-identical (the base stream is drawn as before), adds noise within
// ±Perturb × the matrix's own bound to its nonzero rows only, and is
// deterministic in PerturbSeed; Perturb 0 is today's file whatever the
// PerturbSeed.
func TestPerturb(t *testing.T) {
	base := Options{Seed: 9, Layers: 3, KVHeads: 2, ChatTemplate: "{{ x }}"}
	with := func(p float64, seed int64) Options { o := base; o.Perturb, o.PerturbSeed = p, seed; return o }
	plain, err := Bytes(base)
	if err != nil {
		t.Fatal(err)
	}
	if zero, _ := Bytes(with(0, 42)); !bytes.Equal(zero, plain) {
		t.Fatal("Perturb 0 with a PerturbSeed changed the file")
	}
	// And the pinned seed-1 file, as written before Perturb existed.
	seed1, err := Bytes(Options{Seed: 1, PerturbSeed: 42})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(seed1)
	pinned, err := os.ReadFile("testdata/seed1.sha256")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%s  %d bytes\n", hex.EncodeToString(sum[:]), len(seed1)); got != string(pinned) {
		t.Errorf("seed 1 with PerturbSeed and no Perturb is %s, the pinned file %s", got, pinned)
	}
	for _, tc := range []struct {
		name    string
		perturb float64
		seed    int64
	}{{"small", 0.01, 1}, {"large", 2, 1}, {"seed equal to Seed", 0.5, 9}} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Bytes(with(tc.perturb, tc.seed))
			if err != nil {
				t.Fatal(err)
			}
			if again, _ := Bytes(with(tc.perturb, tc.seed)); !bytes.Equal(again, b) {
				t.Error("two writes with the same Perturb and PerturbSeed differ")
			}
			if other, _ := Bytes(with(tc.perturb, tc.seed+1)); bytes.Equal(other, b) || len(other) != len(b) {
				t.Error("another PerturbSeed gave the same bytes, or another size")
			}
			if len(b) != len(plain) {
				t.Fatalf("%d bytes, the unperturbed file %d", len(b), len(plain))
			}
			g, err := parse(b)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := parse(plain)
			if g.dataOff != p.dataOff || !bytes.Equal(g.raw[:g.dataOff], p.raw[:p.dataOff]) {
				t.Error("the header (metadata and tensor table) changed")
			}
			o, _ := base.withDefaults()
			bound := tc.perturb * 6 * math.Sqrt(3/float64(o.Embedding))
			for i, ti := range g.tensors {
				got, want := g.floats(ti), p.floats(p.tensors[i])
				if ti.name != "output.weight" {
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("%s changed", ti.name)
					}
					continue
				}
				changed := 0
				for j := range got {
					d := math.Abs(float64(got[j]) - float64(want[j]))
					if want[j] == 0 && got[j] != 0 {
						t.Fatalf("output weight %d (row %d) is zero in the target, %v in the draft", j, j/o.Embedding, got[j])
					}
					if d > bound*(1+1e-6) {
						t.Fatalf("output weight %d moved by %v, more than the bound %v", j, d, bound)
					}
					if d > 0 {
						changed++
					}
				}
				// Every weight of the word rows gets noise.
				if words := len(o.Words) * o.Embedding; changed != words {
					t.Errorf("%d output weights changed, want the %d of the word rows", changed, words)
				}
			}
		})
	}
}
