package speculate_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
	"github.com/c0mpute/c0mpute/workerd/speculate"
)

// parse generates a test model file.
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

// load generates a test model and loads it whole.
func load(t testing.TB, o testmodel.Options) *engine.Model {
	t.Helper()
	m, err := engine.Load(parse(t, o), 1)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// wordTokens are the ids of the test vocabulary's word pieces, the tokens
// its models emit.
func wordTokens(o testmodel.Options) []int32 {
	var ids []int32
	for i, tok := range o.Vocab() {
		if strings.HasPrefix(tok, "▁") && tok != "▁" {
			ids = append(ids, int32(i))
		}
	}
	return ids
}

// greedyRef is the reference for a model drafter: the tokens m generates
// greedily after history, on a fresh pipeline, one step at a time, no
// token at a position past the context.
func greedyRef(t testing.TB, m *engine.Model, history []int32, n int) []int32 {
	t.Helper()
	if len(history) == 0 || len(history) >= m.Config().Context {
		return nil
	}
	p, err := m.NewPipeline(nil)
	if err != nil {
		t.Fatal(err)
	}
	seq := slices.Clone(history)
	for len(seq) < min(len(history)+n, m.Config().Context) {
		row, err := p.Next(context.Background(), seq[p.Len():])
		if err != nil {
			t.Fatal(err)
		}
		seq = append(seq, engine.Argmax(row))
	}
	return seq[len(history):]
}

func randomTokens(r *rand.Rand, from []int32, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = from[r.IntN(len(from))]
	}
	return out
}

// A driver's sequence of calls: histories that grow by some of the drafts
// and one more token (the drafts' next greedy token or another), now and
// then rewound and continued otherwise; with and without a prefetch of the optimistic next
// history between calls. Every answer is the model's own greedy
// continuation.
func TestModelDraftsGreedy(t *testing.T) {
	o := testmodel.Options{Seed: 3}
	m := load(t, o)
	words := wordTokens(o)
	for _, prefetch := range []bool{false, true} {
		for seed := uint64(1); seed <= 2; seed++ {
			r := rand.New(rand.NewPCG(seed, 9))
			d, err := speculate.NewModel(m, nil)
			if err != nil {
				t.Fatal(err)
			}
			h := randomTokens(r, words, 1+r.IntN(20))
			for call := range 30 {
				n := 1 + r.IntN(8)
				got := draft(t, d, h, n)
				if want := greedyRef(t, m, h, n); !slices.Equal(got, want) {
					t.Fatalf("prefetch %t seed %d call %d: Draft(len %d, %d) = %v, want %v", prefetch, seed, call, len(h), n, got, want)
				}
				if prefetch {
					d.Prefetch(append(slices.Clone(h), got...), 1+r.IntN(8))
				}
				switch x := r.IntN(10); {
				case x == 0 && len(h) > 2: // rewound, maybe followed by others
					h = h[:1+r.IntN(len(h)-1)]
					h = append(h, randomTokens(r, words, r.IntN(12))...)
				case x < 4: // all accepted, then the model's own next token
					h = append(h, got...)
					h = append(h, greedyRef(t, m, h, 1)...)
				default:
					h = append(h, got[:r.IntN(len(got)+1)]...)
					h = append(h, words[r.IntN(len(words))])
				}
				if len(h) > 200 {
					h = h[:20]
				}
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// No token is drafted at a position past the model's context.
func TestModelContextCap(t *testing.T) {
	o := testmodel.Options{Seed: 4, Context: 32}
	m := load(t, o)
	words := wordTokens(o)
	r := rand.New(rand.NewPCG(4, 4))
	for _, c := range []struct{ history, n, want int }{
		{28, 8, 4},
		{31, 8, 1},
		{32, 8, 0},
		{40, 8, 0},
		{10, 8, 8},
	} {
		d, err := speculate.NewModel(m, nil)
		if err != nil {
			t.Fatal(err)
		}
		h := randomTokens(r, words, c.history)
		got := draft(t, d, h, c.n)
		if len(got) != c.want {
			t.Errorf("history of %d, context 32: %d drafts, want %d", c.history, len(got), c.want)
		}
		if want := greedyRef(t, m, h, c.n); !slices.Equal(got, want) {
			t.Errorf("history of %d: Draft = %v, want %v", c.history, got, want)
		}
		_ = d.Close()
	}
}

func TestNewModelRefusesPart(t *testing.T) {
	f := parse(t, testmodel.Options{Seed: 5})
	part, err := engine.LoadParts([]*gguf.File{f}, 0, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := speculate.NewModel(part, nil); err == nil || !strings.Contains(err.Error(), "must be whole") {
		t.Fatalf("NewModel of layers [0, 1) of 2 = %v, want an error saying a draft model must be whole", err)
	}
	if _, err := speculate.NewModel(nil, nil); err == nil {
		t.Fatal("NewModel(nil) succeeded")
	}
}

// A cancelled Draft returns the context's error and leaves the drafter
// consistent; Close stops a running prefetch and makes Draft fail.
func TestModelCancelAndClose(t *testing.T) {
	o := testmodel.Options{Seed: 6}
	m := load(t, o)
	r := rand.New(rand.NewPCG(6, 6))
	d, err := speculate.NewModel(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := randomTokens(r, wordTokens(o), 50)
	draft(t, d, h[:10], 4)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Draft(ctx, h, 4); !errors.Is(err, context.Canceled) {
		t.Fatalf("Draft with a cancelled context: %v, want context.Canceled", err)
	}
	if got, want := draft(t, d, h, 4), greedyRef(t, m, h, 4); !slices.Equal(got, want) {
		t.Fatalf("Draft after a cancelled one = %v, want %v", got, want)
	}
	d.Prefetch(append(slices.Clone(h), h...), 16) // 100 positions to run
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Draft(context.Background(), h, 4); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Draft after Close: %v, want an error saying it is closed", err)
	}
	d.Prefetch(h, 4) // no effect, no panic
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestSameVocabulary(t *testing.T) {
	base := parse(t, testmodel.Options{Seed: 1})
	otherWeights := parse(t, testmodel.Options{Seed: 2, Layers: 1, Embedding: 32})
	moreWords := parse(t, testmodel.Options{Seed: 1, Words: append(slices.Clone(testmodel.DefaultWords), "extra")})
	swapped := slices.Clone(testmodel.DefaultWords)
	swapped[3], swapped[4] = swapped[4], swapped[3]
	otherOrder := parse(t, testmodel.Options{Seed: 1, Words: swapped})
	noTokens := parse(t, testmodel.Options{Seed: 1})
	delete(noTokens.Metadata, "tokenizer.ggml.tokens")
	firstWord := len(testmodel.Options{}.Vocab()) - len(testmodel.DefaultWords)
	for _, c := range []struct {
		name          string
		target, draft *gguf.File
		want          string // "" for no error
	}{
		{"same vocabulary, other weights and shape", base, otherWeights, ""},
		{"more tokens", base, moreWords, "has 331 tokens, the ring model's 330 (the first 330 agree)"},
		{"fewer tokens", moreWords, base, "has 330 tokens, the ring model's 331"},
		{"another order", base, otherOrder, "differs from the ring model's at token " + strconv.Itoa(firstWord+3)},
		{"draft without tokens", base, noTokens, "the draft model has no tokenizer.ggml.tokens"},
		{"target without tokens", noTokens, base, "the ring model's file has no tokenizer.ggml.tokens"},
		{"missing file", base, nil, "missing file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := speculate.SameVocabulary(c.target, c.draft)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("SameVocabulary: %v, want nil", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("SameVocabulary: %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestOpenModel(t *testing.T) {
	o := testmodel.Options{Seed: 8}
	dir := t.TempDir()
	path := filepath.Join(dir, "draft.gguf")
	if err := testmodel.WriteFile(path, o); err != nil {
		t.Fatal(err)
	}
	target := parse(t, testmodel.Options{Seed: 9, Layers: 3}) // same vocabulary
	d, err := speculate.OpenModel(path, target, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := randomTokens(rand.New(rand.NewPCG(8, 8)), wordTokens(o), 12)
	if got, want := draft(t, d, h, 6), greedyRef(t, load(t, o), h, 6); !slices.Equal(got, want) {
		t.Fatalf("Draft = %v, want %v", got, want)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	other := parse(t, testmodel.Options{Seed: 9, Words: []string{"x", "y"}})
	if _, err := speculate.OpenModel(path, other, 1, nil); err == nil || !strings.Contains(err.Error(), "vocabulary") || !strings.Contains(err.Error(), path) {
		t.Fatalf("OpenModel with another vocabulary: %v, want an error naming the file and the vocabulary", err)
	}
	if _, err := speculate.OpenModel(filepath.Join(dir, "absent.gguf"), target, 1, nil); err == nil {
		t.Fatal("OpenModel of a missing file succeeded")
	}
}
