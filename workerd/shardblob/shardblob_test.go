package shardblob_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/chattemplate"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
	"github.com/c0mpute/c0mpute/workerd/engine/tokenizer"
	"github.com/c0mpute/c0mpute/workerd/shardblob"
)

const chatTemplate = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"

func publisher() ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("shardblob-test-publisher"))
	return ed25519.NewKeyFromSeed(seed[:])
}

// source is a model to split: a generated test model, optionally edited
// (through gguf.Write) into a shape the generator does not make.
type source struct {
	name string
	o    testmodel.Options
	// tiedRope drops output.weight (the head then uses token_embd.weight)
	// and adds rope_freqs.weight.
	tiedRope bool
}

func sources() []source {
	var out []source
	for _, arch := range []string{"llama", "qwen2"} {
		for _, typ := range []struct {
			name string
			t    testmodel.TensorType
		}{{"f32", testmodel.F32}, {"q8_0", testmodel.Q8_0}, {"q4_k", testmodel.Q4_K}} {
			o := testmodel.Options{Seed: 21, Arch: arch, Type: typ.t, Layers: 4, KVHeads: 2, ChatTemplate: chatTemplate}
			if typ.t == testmodel.Q4_K {
				o.Embedding, o.FeedForward = 256, 256
			}
			out = append(out, source{name: arch + "-" + typ.name, o: o})
		}
	}
	return append(out, source{name: "llama-f32-tied-rope-freqs", o: testmodel.Options{Seed: 22, Layers: 4, KVHeads: 2}, tiedRope: true})
}

// write stores the source model as a file and maps it, as `workerd shard
// publish` does.
func (s source) write(t testing.TB) (*gguf.File, string) {
	t.Helper()
	b, err := testmodel.Bytes(s.o)
	if err != nil {
		t.Fatal(err)
	}
	if s.tiedRope {
		f, err := gguf.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		var ts []gguf.WriteTensor
		for _, w := range f.WriteTensors() {
			if w.Name != "output.weight" {
				ts = append(ts, w)
			}
		}
		rd, _ := f.ArchUint("rope.dimension_count")
		freqs := make([]byte, 0, 4*rd/2)
		for i := range rd / 2 {
			freqs = append(freqs, f32bytes(1+float32(i)/4)...)
		}
		ts = append(ts, gguf.WriteTensor{Name: "rope_freqs.weight", Dims: []uint64{rd / 2}, Type: gguf.F32, Data: freqs})
		if b, err = gguf.Bytes(f.Metadata, ts); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), s.name+".gguf")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, path
}

func f32bytes(v float32) []byte {
	u := math.Float32bits(v)
	return []byte{byte(u), byte(u >> 8), byte(u >> 16), byte(u >> 24)}
}

func bitsEqual(a, b []float32) bool {
	return len(a) == len(b) && slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// rings are the stage bounds tried on a 4-layer model: 1 to 4 stages.
var rings = [][]int{{0, 4}, {0, 2, 4}, {0, 1, 3, 4}, {0, 1, 2, 3, 4}}

// TestRingEqualsWholeModel splits each model, then for rings of 1 to 4
// stages gives every stage a fresh directory holding only its blobs
// (pulled over HTTP from the split directory with shard.Pull, which
// re-hashes them), opens its Part from there, and runs a prompt and 8
// greedy steps through the stages, hidden states crossing between them in
// the F32 wire form: the logits equal the whole file's, bit for bit. The
// first stage's metadata builds the same tokenizer and chat template as
// the whole file.
func TestRingEqualsWholeModel(t *testing.T) {
	ctx := context.Background()
	for _, s := range sources() {
		t.Run(s.name, func(t *testing.T) {
			src, _ := s.write(t)
			splitDir := t.TempDir()
			pub, err := shardblob.Split(src, splitDir, s.name)
			if err != nil {
				t.Fatal(err)
			}
			pub.Sign(publisher())
			if err := pub.Manifest.Check(); err != nil {
				t.Fatal(err)
			}
			if err := pub.Model.Check(); err != nil {
				t.Fatal(err)
			}
			if err := pub.Manifest.Matches(&pub.Model); err != nil {
				t.Fatal(err)
			}
			checkBlobs(t, src, splitDir, pub, s.tiedRope)
			srv := httptest.NewServer(http.FileServer(http.Dir(splitDir)))
			defer srv.Close()

			whole, err := engine.Load(src, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, bounds := range rings {
				var parts []*shardblob.Part
				var stages []*engine.Stage
				for i := 0; i+1 < len(bounds); i++ {
					a, b := bounds[i], bounds[i+1]
					blobs, err := pub.Manifest.Blobs(a, b)
					if err != nil {
						t.Fatal(err)
					}
					dir := t.TempDir()
					if err := shard.Pull(ctx, shard.HTTPSource{Base: srv.URL}, dir, blobs); err != nil {
						t.Fatalf("stage [%d,%d): pull: %v", a, b, err)
					}
					if entries, _ := os.ReadDir(dir); len(entries) != len(blobs) {
						t.Fatalf("stage [%d,%d): %d files for %d blobs", a, b, len(entries), len(blobs))
					}
					p, err := shardblob.Open(dir, &pub.Manifest, a, b, 2)
					if err != nil {
						t.Fatalf("stage [%d,%d): %v", a, b, err)
					}
					defer p.Close()
					if f, l, e, h := p.Model().Holds(); f != a || l != b || e != (a == 0) || h != (b == 4) {
						t.Fatalf("stage [%d,%d) holds [%d,%d) embed %v head %v", a, b, f, l, e, h)
					}
					st, err := p.Model().NewStage(a, b)
					if err != nil {
						t.Fatal(err)
					}
					parts, stages = append(parts, p), append(stages, st)
				}
				ref, _ := whole.NewPipeline(nil)
				toks := []int32{1, 300, 301, 302, 303}
				for step := 0; step <= 8; step++ {
					want, err := ref.Step(ctx, toks)
					if err != nil {
						t.Fatal(err)
					}
					h, err := parts[0].Model().Embed(toks, stages[0].Len())
					if err != nil {
						t.Fatal(err)
					}
					for i, st := range stages {
						if i > 0 { // to another process
							wire, err := engine.EncodeHidden(h, engine.F32)
							if err != nil {
								t.Fatal(err)
							}
							if h, err = engine.DecodeHidden(wire); err != nil {
								t.Fatal(err)
							}
						}
						if err := st.Forward(ctx, h); err != nil {
							t.Fatal(err)
						}
					}
					got, err := parts[len(parts)-1].Model().Head(h)
					if err != nil {
						t.Fatal(err)
					}
					if !bitsEqual(got.Data, want.Data) {
						t.Fatalf("ring %v, step %d: logits differ from the whole model's", bounds, step)
					}
					toks = []int32{engine.Argmax(want.Row(want.Tokens - 1))}
				}
				checkFrontEnd(t, src.Metadata, parts[0].Metadata())
				if len(parts) > 2 {
					if _, ok := parts[1].Metadata()["tokenizer.ggml.tokens"]; ok {
						t.Error("a middle stage's metadata carries the vocabulary")
					}
				}
			}
		})
	}
}

// checkFrontEnd: the first stage's metadata makes the tokenizer and chat
// template the whole file makes.
func checkFrontEnd(t *testing.T, whole, first gguf.Metadata) {
	t.Helper()
	tw, err := tokenizer.FromMetadata(whole)
	if err != nil {
		t.Fatal(err)
	}
	tf, err := tokenizer.FromMetadata(first)
	if err != nil {
		t.Fatalf("tokenizer from the first stage's metadata: %v", err)
	}
	for _, text := range []string{"hello world, the cat sat on the mat", "<s>über dog\n\tjumps"} {
		if a, b := tw.Encode(text, true, true), tf.Encode(text, true, true); !slices.Equal(a, b) || len(a) < 3 {
			t.Errorf("%q encodes to %v from the stage, %v from the file", text, b, a)
		}
	}
	cw, err := chattemplate.FromMetadata(whole)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := chattemplate.FromMetadata(first)
	if err != nil {
		t.Fatal(err)
	}
	if cw.Source() != cf.Source() {
		t.Errorf("chat template %q from the stage, %q from the file", cf.Source(), cw.Source())
	}
}

// checkBlobs: each blob holds what the package doc says, and the
// descriptor's sizes are the blobs'.
func checkBlobs(t *testing.T, src *gguf.File, dir string, pub shardblob.Published, tied bool) {
	t.Helper()
	open := func(b shard.Blob) *gguf.File {
		f, err := gguf.Open(filepath.Join(dir, b.Hash.String()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if int64(len(f.Data)) != b.Size {
			t.Fatalf("blob %s: %d bytes, manifest %d", b.Hash, len(f.Data), b.Size)
		}
		return f
	}
	names := func(f *gguf.File) []string {
		var out []string
		for _, ti := range f.Tensors {
			out = append(out, ti.Name)
		}
		return out
	}
	embed := open(pub.Manifest.Embed)
	if !reflect.DeepEqual(embed.Metadata, src.Metadata) || !slices.Equal(names(embed), []string{"token_embd.weight"}) {
		t.Errorf("embedding blob: %d keys (source %d), tensors %v", len(embed.Metadata), len(src.Metadata), names(embed))
	}
	arch := src.Architecture()
	var largest int64
	for i, b := range pub.Manifest.Layers {
		f := open(b)
		for k := range f.Metadata {
			if !strings.HasPrefix(k, arch+".") && k != "general.architecture" && k != "general.name" && k != "general.alignment" {
				t.Errorf("layer %d blob carries key %s", i, k)
			}
		}
		for _, n := range names(f) {
			if !strings.HasPrefix(n, fmt.Sprintf("blk.%d.", i)) && n != "rope_freqs.weight" {
				t.Errorf("layer %d blob carries tensor %s", i, n)
			}
		}
		if _, ok := f.Tensor("rope_freqs.weight"); ok != tied {
			t.Errorf("layer %d blob: rope_freqs.weight present %v", i, ok)
		}
		if len(f.Tensors) < 9 {
			t.Errorf("layer %d blob has %d tensors", i, len(f.Tensors))
		}
		largest = max(largest, b.Size)
	}
	head := open(pub.Manifest.Head)
	want := []string{"output_norm.weight", "output.weight"}
	if tied {
		want = []string{"token_embd.weight", "output_norm.weight"}
	}
	if got := names(head); !slices.Equal(got, want) {
		t.Errorf("head blob tensors %v, want %v", got, want)
	}
	if _, ok := head.Metadata["tokenizer.ggml.tokens"]; ok {
		t.Error("head blob carries the vocabulary")
	}
	m, _ := engine.Load(src, 1)
	c := m.Config()
	d := pub.Model
	if d.Name != pub.Manifest.Name || d.Layers != 4 || d.LayerBytes != largest || d.EmbedBytes != pub.Manifest.Embed.Size ||
		d.HeadBytes != pub.Manifest.Head.Size || d.KVBytesPerToken != int64(2*c.KVHeads*c.HeadDim*2) || d.ActivationBytes != int64(4*c.Embd) {
		t.Errorf("descriptor %+v", d)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 6 {
		t.Errorf("split directory holds %d files, want 6 blobs", len(entries))
	}
}

// TestSplitIsDeterministic: two splits of the same file give the same
// blob bytes, the same manifest and, signed by the same key, the same
// model hash.
func TestSplitIsDeterministic(t *testing.T) {
	s := sources()[4] // qwen2 Q8_0
	src, _ := s.write(t)
	a, b := t.TempDir(), t.TempDir()
	pa, err := shardblob.Split(src, a, "m")
	if err != nil {
		t.Fatal(err)
	}
	pb, err := shardblob.Split(src, b, "m")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pa, pb) {
		t.Fatal("two splits give different manifests")
	}
	unsigned := pa.Manifest
	pa.Sign(publisher())
	pb.Sign(publisher())
	if pa.Model.Hash != pb.Model.Hash || pa.Model.Hash.IsZero() {
		t.Fatal("model hashes differ")
	}
	ea, _ := os.ReadDir(a)
	eb, _ := os.ReadDir(b)
	if len(ea) != 6 || len(ea) != len(eb) {
		t.Fatalf("%d and %d files", len(ea), len(eb))
	}
	for i := range ea {
		x, _ := os.ReadFile(filepath.Join(a, ea[i].Name()))
		y, _ := os.ReadFile(filepath.Join(b, eb[i].Name()))
		if ea[i].Name() != eb[i].Name() || !bytes.Equal(x, y) {
			t.Fatalf("blob %s differs from %s", ea[i].Name(), eb[i].Name())
		}
		if sum := sha256.Sum256(x); fmt.Sprintf("%x", sum) != ea[i].Name() {
			t.Fatalf("blob %s hashes to %x", ea[i].Name(), sum)
		}
	}
	// Splitting again into the same directory changes nothing.
	pc, err := shardblob.Split(src, a, "m")
	if err != nil || !reflect.DeepEqual(pc.Manifest, unsigned) {
		t.Fatalf("re-split: %v", err)
	}
	pc.Sign(publisher())
	if pc.Model.Hash != pa.Model.Hash {
		t.Fatal("re-split hash differs")
	}
	if ec, _ := os.ReadDir(a); len(ec) != 6 {
		t.Fatalf("re-split leaves %d files", len(ec))
	}
}

// stageDir copies the blobs of layers [first, last) into a fresh
// directory.
func stageDir(t *testing.T, from string, m *shard.Manifest, first, last int) string {
	t.Helper()
	blobs, err := m.Blobs(first, last)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, b := range blobs {
		data, err := os.ReadFile(filepath.Join(from, b.Hash.String()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, b.Hash.String()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestOpenRefuses(t *testing.T) {
	src, _ := sources()[0].write(t)
	split := t.TempDir()
	pub, err := shardblob.Split(src, split, "m")
	if err != nil {
		t.Fatal(err)
	}
	pub.Sign(publisher())
	m := &pub.Manifest
	layer2 := m.Layers[2]
	edit := func(f func(path string)) string {
		dir := stageDir(t, split, m, 1, 3)
		f(filepath.Join(dir, layer2.Hash.String()))
		return dir
	}
	flip := func(at func(size int) int) func(string) {
		return func(path string) {
			b, _ := os.ReadFile(path)
			b[at(len(b))] ^= 0x20
			os.WriteFile(path, b, 0o644)
		}
	}
	cases := []struct {
		name     string
		dir      string
		mismatch bool
		want     []string
	}{
		{"flipped weight byte", edit(flip(func(n int) int { return n - 100 })), true,
			[]string{"layer 2 blob", layer2.Hash.String(), "changed after it was pulled; delete it and pull it again"}},
		{"flipped header byte", edit(flip(func(int) int { return 0 })), true,
			[]string{"layer 2 blob", "changed after it was pulled"}},
		{"truncated", edit(func(p string) { os.Truncate(p, layer2.Size-1) }), true,
			[]string{"layer 2 blob", fmt.Sprintf("is %d bytes on disk, the manifest says %d", layer2.Size-1, layer2.Size)}},
		{"missing", edit(func(p string) { os.Remove(p) }), false,
			[]string{"the layer 2 blob " + layer2.Hash.String() + " is missing from", "pull it first"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := shardblob.Open(c.dir, m, 1, 3, 1)
			if err == nil {
				p.Close()
				t.Fatal("opened")
			}
			if errors.Is(err, shard.ErrBlobMismatch) != c.mismatch {
				t.Errorf("ErrBlobMismatch %v, want %v: %v", !c.mismatch, c.mismatch, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	// The untouched copy opens; a stage never sees the other blobs.
	p, err := shardblob.Open(stageDir(t, split, m, 1, 3), m, 1, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Model().Embed([]int32{1}, 0); !errors.Is(err, engine.ErrNotHeld) {
		t.Errorf("middle part embeds: %v", err)
	}
	if _, err := p.Model().NewStage(0, 3); !errors.Is(err, engine.ErrNotHeld) {
		t.Errorf("middle part makes a stage outside its range: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal("second close:", err)
	}
	if _, err := shardblob.Open(split, m, 2, 9, 1); err == nil || !strings.Contains(err.Error(), "range [2,9) of a 4-layer model") {
		t.Errorf("range past the model: %v", err)
	}
	if _, err := shardblob.Open(split, nil, 0, 1, 1); err == nil {
		t.Error("nil manifest: no error")
	}
}

func TestSplitRefuses(t *testing.T) {
	good, _ := sources()[0].write(t)
	variant := func(meta func(gguf.Metadata), extra ...gguf.WriteTensor) *gguf.File {
		md := gguf.Metadata{}
		for k, v := range good.Metadata {
			md[k] = v
		}
		meta(md)
		b, err := gguf.Bytes(md, append(good.WriteTensors(), extra...))
		if err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	norm := func(name string) gguf.WriteTensor {
		return gguf.WriteTensor{Name: name, Dims: []uint64{64}, Type: gguf.F32, Data: make([]byte, 256)}
	}
	keep := func(gguf.Metadata) {}
	cases := []struct {
		name  string
		src   *gguf.File
		model string
		want  string
	}{
		{"empty name", good, "", `model name ""`},
		{"non-ASCII name", good, "modèle", "printable ASCII"},
		{"long name", good, strings.Repeat("m", 129), "1 to 128"},
		{"unsupported architecture", variant(func(md gguf.Metadata) { md["general.architecture"] = "gpt2" }), "m", `architecture "gpt2"`},
		{"unplaced tensor", variant(keep, norm("position_embd.weight")), "m", "tensor position_embd.weight belongs to no blob"},
		{"layer past the model", variant(keep, norm("blk.4.attn_norm.weight")), "m", "tensor blk.4.attn_norm.weight belongs to no blob"},
		{"odd layer number", variant(keep, norm("blk.01.attn_norm.weight")), "m", "tensor blk.01.attn_norm.weight belongs to no blob"},
		{"no source", nil, "m", "no source file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := shardblob.Split(c.src, dir, c.model)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a refused split left %d files", len(entries))
			}
		})
	}
}
