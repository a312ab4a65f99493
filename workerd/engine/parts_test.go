package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

// parse generates a test model's file.
func parse(t testing.TB, o testmodel.Options) *gguf.File {
	t.Helper()
	b, err := testmodel.Bytes(o)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// rewrite writes meta and the tensors of f that keep selects as a new
// file.
func rewrite(t testing.TB, f *gguf.File, meta gguf.Metadata, keep func(name string) bool) *gguf.File {
	t.Helper()
	var ts []gguf.WriteTensor
	for _, w := range f.WriteTensors() {
		if keep(w.Name) {
			ts = append(ts, w)
		}
	}
	b, err := gguf.Bytes(meta, ts)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestLoadPartsRange: a part loaded from the whole file holds exactly its
// range; its stage computes bit for bit what the whole model's stage
// computes; the embedding, the head and other layers are refused.
func TestLoadPartsRange(t *testing.T) {
	f := parse(t, testmodel.Options{Seed: 11, Layers: 4, KVHeads: 2})
	whole, err := engine.Load(f, 2)
	if err != nil {
		t.Fatal(err)
	}
	if a, b, e, h := whole.Holds(); a != 0 || b != 4 || !e || !h {
		t.Fatalf("whole model holds [%d,%d) embed %v head %v", a, b, e, h)
	}
	ctx := context.Background()
	cases := []struct {
		first, last int
		embed, head bool
	}{{0, 1, true, false}, {1, 3, false, false}, {3, 4, false, true}, {0, 4, true, true}}
	for _, c := range cases {
		part, err := engine.LoadParts([]*gguf.File{f}, c.first, c.last, 1)
		if err != nil {
			t.Fatalf("[%d,%d): %v", c.first, c.last, err)
		}
		a, b, e, h := part.Holds()
		if a != c.first || b != c.last || e != c.embed || h != c.head {
			t.Fatalf("[%d,%d): holds [%d,%d) embed %v head %v", c.first, c.last, a, b, e, h)
		}
		if cfg := part.Config(); cfg.Layers != 4 || cfg.Vocab != whole.Config().Vocab {
			t.Errorf("[%d,%d): config layers %d vocab %d, want 4 and %d", c.first, c.last, cfg.Layers, cfg.Vocab, whole.Config().Vocab)
		}
		_, errE := part.Embed([]int32{1}, 0)
		if (errE == nil) != c.embed || !c.embed && (!errors.Is(errE, engine.ErrNotHeld) || !strings.Contains(errE.Error(), "only the part holding layer 0")) {
			t.Errorf("[%d,%d): Embed: %v", c.first, c.last, errE)
		}
		h0, _ := whole.Embed([]int32{1, 300, 301}, 0)
		_, errH := part.Head(h0)
		if (errH == nil) != c.head || !c.head && (!errors.Is(errH, engine.ErrNotHeld) || !strings.Contains(errH.Error(), "only the part holding the last layer")) {
			t.Errorf("[%d,%d): Head: %v", c.first, c.last, errH)
		}
		if c.first > 0 {
			if _, err := part.NewStage(c.first-1, c.last); !errors.Is(err, engine.ErrNotHeld) || !strings.Contains(err.Error(), "this part holds") {
				t.Errorf("[%d,%d): stage from layer %d: %v", c.first, c.last, c.first-1, err)
			}
		}
		if c.last < 4 {
			if _, err := part.NewStage(c.first, c.last+1); !errors.Is(err, engine.ErrNotHeld) {
				t.Errorf("[%d,%d): stage to layer %d: %v", c.first, c.last, c.last+1, err)
			}
		}
		// The part's stage against the whole model's, on the same input.
		ps, err := part.NewStage(c.first, c.last)
		if err != nil {
			t.Fatal(err)
		}
		ws, _ := whole.NewStage(c.first, c.last)
		for _, toks := range [][]int32{{1, 300, 301}, {302}} {
			x, _ := whole.Embed(toks, ps.Len())
			y := &engine.Hidden{Pos: x.Pos, Tokens: x.Tokens, Dim: x.Dim, Data: append([]float32(nil), x.Data...)}
			if err := ps.Forward(ctx, x); err != nil {
				t.Fatal(err)
			}
			if err := ws.Forward(ctx, y); err != nil {
				t.Fatal(err)
			}
			if !bitsEqual(x.Data, y.Data) {
				t.Fatalf("[%d,%d): the part's stage differs from the whole model's", c.first, c.last)
			}
		}
	}
}

// TestLoadPartsAcrossFiles: tensors spread one per file, with the shape
// in the last file only, load into a model whose logits equal the single
// file's bit for bit; so does a tied-embedding model whose head part
// carries token_embd.weight.
func TestLoadPartsAcrossFiles(t *testing.T) {
	ctx := context.Background()
	for _, tied := range []bool{false, true} {
		f := parse(t, testmodel.Options{Seed: 12, Layers: 3, Arch: "qwen2", KVHeads: 2})
		if tied {
			f = rewrite(t, f, f.Metadata, func(n string) bool { return n != "output.weight" })
		}
		var files []*gguf.File
		for _, ti := range f.Tensors {
			files = append(files, rewrite(t, f, nil, func(n string) bool { return n == ti.Name }))
		}
		files = append(files, rewrite(t, f, f.Metadata, func(string) bool { return false }))
		split, err := engine.LoadParts(files, 0, 3, 1)
		if err != nil {
			t.Fatalf("tied %v: %v", tied, err)
		}
		whole, err := engine.Load(f, 1)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := whole.NewPipeline(nil)
		b, _ := split.NewPipeline([]int{0, 2, 3})
		for _, toks := range [][]int32{{1, 300, 301, 302}, {303}, {304}} {
			la, err := a.Step(ctx, toks)
			if err != nil {
				t.Fatal(err)
			}
			lb, err := b.Step(ctx, toks)
			if err != nil {
				t.Fatal(err)
			}
			if !bitsEqual(la.Data, lb.Data) {
				t.Fatalf("tied %v: logits from the spread files differ", tied)
			}
		}
		// The head alone, from the layer's and the head's tensors only.
		keep := func(n string) bool {
			return strings.HasPrefix(n, "blk.2.") || n == "output_norm.weight" || n == "output.weight" || tied && n == "token_embd.weight"
		}
		head, err := engine.LoadParts([]*gguf.File{rewrite(t, f, f.Metadata, keep)}, 2, 3, 1)
		if err != nil {
			t.Fatalf("tied %v: head part: %v", tied, err)
		}
		if head.Config().Vocab != whole.Config().Vocab {
			t.Errorf("tied %v: head part vocab %d, want %d", tied, head.Config().Vocab, whole.Config().Vocab)
		}
	}
}

func TestLoadPartsRefuses(t *testing.T) {
	f := parse(t, testmodel.Options{Seed: 13, Layers: 3})
	other := parse(t, testmodel.Options{Seed: 13, Layers: 3, Embedding: 32})
	all := func(string) bool { return true }
	noBlk1 := rewrite(t, f, f.Metadata, func(n string) bool { return !strings.HasPrefix(n, "blk.1.") })
	tensorsOnly := rewrite(t, f, nil, all)
	tied := rewrite(t, f, f.Metadata, func(n string) bool { return strings.HasPrefix(n, "blk.2.") || n == "output_norm.weight" })
	// The same tensor name with other bytes.
	forged := rewrite(t, other, nil, func(n string) bool { return n == "output_norm.weight" })
	bigger := rewrite(t, f, nil, func(n string) bool { return n == "blk.0.attn_norm.weight" })
	bigger.Data = append([]byte(nil), bigger.Data...)
	ti, _ := bigger.Tensor("blk.0.attn_norm.weight")
	bigger.Data[ti.Offset] ^= 1
	cases := []struct {
		name        string
		files       []*gguf.File
		first, last int
		want        string
	}{
		{"no files", nil, 0, 3, "no files"},
		{"nil file", []*gguf.File{f, nil}, 0, 3, "file 1 is nil"},
		{"no architecture", []*gguf.File{tensorsOnly}, 0, 3, "none of the 1 files sets general.architecture"},
		{"empty range", []*gguf.File{f}, 2, 2, "layer range [2, 2) outside the model's 3 layers"},
		{"past the end", []*gguf.File{f}, 1, 4, "layer range [1, 4)"},
		{"layer missing", []*gguf.File{noBlk1}, 0, 3, "tensor blk.1.attn_q.weight missing"},
		{"another model's shape", []*gguf.File{f, other}, 0, 3, "file 1 describes another model"},
		{"tensor differs between files", []*gguf.File{f, forged}, 0, 3, "tensor output_norm.weight differs between the files"},
		{"tensor bytes differ", []*gguf.File{f, bigger}, 0, 3, "tensor blk.0.attn_norm.weight differs"},
		{"tied head without token_embd", []*gguf.File{tied}, 2, 3, "the head of a model without output.weight is token_embd.weight"},
	}
	for _, c := range cases {
		_, err := engine.LoadParts(c.files, c.first, c.last, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
	// A file without layer 1 still serves a range that does not need it.
	if _, err := engine.LoadParts([]*gguf.File{noBlk1}, 2, 3, 1); err != nil {
		t.Errorf("layers [2, 3) without layer 1's tensors: %v", err)
	}
}
