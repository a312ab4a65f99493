package tokenizer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/infra/ollamatest"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/engine/tokenizer"
)

var update = flag.Bool("update", false, "rewrite the golden token files in testdata/golden")

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	ollamatest.StopShared()
	os.Exit(code)
}

// vocabs are the generated model files the corpus is checked on: the
// SentencePiece vocabulary and the BPE one under several pre-tokenizers.
var vocabs = []struct {
	name string
	opts testmodel.Options
}{
	{"spm", testmodel.Options{Context: 512}},
	{"bpe-llama3", testmodel.Options{Context: 512, BPE: &testmodel.BPE{Pre: "llama-bpe"}}},
	{"bpe-qwen2", testmodel.Options{Context: 512, BPE: &testmodel.BPE{Pre: "qwen2"}}},
	{"bpe-gpt2", testmodel.Options{Context: 512, BPE: &testmodel.BPE{Pre: "gpt-2"}}},
	{"bpe-starcoder", testmodel.Options{Context: 512, BPE: &testmodel.BPE{Pre: "starcoder"}}},
	{"bpe-default", testmodel.Options{Context: 512, BPE: &testmodel.BPE{Pre: "default"}}},
	{"bpe-gpt4o", testmodel.Options{Context: 512, BPE: &testmodel.BPE{Pre: "gpt-4o"}}},
	{"bpe-tekken", testmodel.Options{Context: 512, BPE: &testmodel.BPE{Pre: "tekken"}}},
	{"bpe-deepseek-v3", testmodel.Options{Context: 512, BPE: &testmodel.BPE{Pre: "deepseek-v3"}}},
	{"bpe-deepseek-llm", testmodel.Options{Context: 512, BPE: &testmodel.BPE{Pre: "deepseek-llm"}}},
	{"bpe-deepseek-coder", testmodel.Options{Context: 512, BPE: &testmodel.BPE{Pre: "deepseek-coder"}}},
	{"bpe-bloom", testmodel.Options{Context: 512, BPE: &testmodel.BPE{Pre: "bloom"}}},
	{"bpe-viking", testmodel.Options{Context: 512, BPE: &testmodel.BPE{Pre: "viking"}}},
	{"bpe-chameleon", testmodel.Options{Context: 512, BPE: &testmodel.BPE{Pre: "chameleon"}}},
}

func corpus(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "corpus.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c []string
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("corpus.json: %v", err)
	}
	return c
}

func load(t testing.TB, o testmodel.Options) *tokenizer.Tokenizer {
	t.Helper()
	md, err := testmodel.TokenizerMetadata(o)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// golden is one corpus line's tokens, with and without special handling.
type golden struct {
	Text    string  `json:"text"`
	Special []int32 `json:"special"` // Encode(text, true, true)
	Plain   []int32 `json:"plain"`   // Encode(text, false, false)
}

// TestGolden pins the tokens of the corpus for every vocabulary, so a
// change shows without Ollama; TestOllama is what proves them right.
func TestGolden(t *testing.T) {
	c := corpus(t)
	for _, v := range vocabs {
		t.Run(v.name, func(t *testing.T) {
			tok := load(t, v.opts)
			var got []golden
			for _, s := range c {
				got = append(got, golden{s, tok.Encode(s, true, true), tok.Encode(s, false, false)})
			}
			path := filepath.Join("testdata", "golden", v.name+".json")
			if *update {
				b, _ := json.MarshalIndent(got, "", " ")
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			var want []golden
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			if len(want) != len(got) {
				t.Fatalf("golden has %d lines, corpus %d (run with -update)", len(want), len(got))
			}
			for i := range got {
				if got[i].Text != want[i].Text || !slices.Equal(got[i].Special, want[i].Special) || !slices.Equal(got[i].Plain, want[i].Plain) {
					t.Errorf("%q:\n got %v / %v\nwant %v / %v", got[i].Text, got[i].Special, got[i].Plain, want[i].Special, want[i].Plain)
				}
			}
		})
	}
}

// TestOllama compares the tokens with llama.cpp's own tokenizer, as a
// real Ollama 0.6.5 runs it. Ollama has no tokenize route, but
// /api/generate (not raw) answers with "context": the server's
// llama.cpp vocabulary tokenizing the rendered prompt plus the reply with
// llama_tokenize(text, add_special=false, parse_special=true). With the
// template "{{ .Prompt }}" the rendered prompt is the corpus line itself,
// and one generated word is appended, so each line is checked as
// line+reply. prompt_eval_count, the runner's count of the prompt's tokens
// with add_special=true, checks BOS handling.
func TestOllama(t *testing.T) {
	c := corpus(t)
	for _, v := range vocabs {
		t.Run(v.name, func(t *testing.T) {
			name := "tok-" + v.name
			srv := ollamatest.TinyModel(t, name, v.opts)
			tok := load(t, v.opts)
			for _, s := range c {
				resp, err := generate(srv.URL(), name, s)
				if err != nil {
					t.Fatalf("%q: %v", s, err)
				}
				if resp.Response == "" {
					t.Fatalf("%q: empty reply", s)
				}
				text := s + resp.Response
				got := tok.Encode(text, false, true)
				if !slices.Equal(got, resp.Context) {
					t.Errorf("%q:\n ours   %v %q\n ollama %v %q", text, got, pieces(tok, got), resp.Context, pieces(tok, resp.Context))
				}
				if n := len(tok.Encode(s, true, true)); n != resp.PromptEvalCount {
					t.Errorf("%q: %d prompt tokens with BOS, ollama counted %d", s, n, resp.PromptEvalCount)
				}
			}
		})
	}
}

func pieces(tok *tokenizer.Tokenizer, ids []int32) []string {
	var out []string
	for _, id := range ids {
		out = append(out, tok.Token(id))
	}
	return out
}

type generateResponse struct {
	Response        string  `json:"response"`
	Context         []int32 `json:"context"`
	PromptEvalCount int     `json:"prompt_eval_count"`
}

func generate(url, model, prompt string) (generateResponse, error) {
	body, _ := json.Marshal(map[string]any{
		"model":    model,
		"prompt":   prompt,
		"template": "{{ .Prompt }}",
		"stream":   false,
		"options":  map[string]any{"num_predict": 1, "temperature": 0, "num_ctx": 512, "num_thread": 1},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/api/generate", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return generateResponse{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return generateResponse{}, err
	}
	if res.StatusCode != http.StatusOK {
		return generateResponse{}, fmt.Errorf("%d %s", res.StatusCode, b)
	}
	var r generateResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return generateResponse{}, fmt.Errorf("decode %s: %w", b, err)
	}
	return r, nil
}

// BenchmarkEncode tokenizes the whole corpus (about 2 KB of mixed text)
// per iteration; bytes/s is reported.
func BenchmarkEncode(b *testing.B) {
	c := corpus(b)
	var text string
	for _, s := range c {
		text += s + "\n"
	}
	for _, v := range vocabs[:2] {
		b.Run(v.name, func(b *testing.B) {
			tok := load(b, v.opts)
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				tok.Encode(text, true, true)
			}
		})
	}
}

func BenchmarkDecoder(b *testing.B) {
	tok := load(b, vocabs[1].opts)
	ids := tok.Encode(corpus(b)[20], false, false)
	b.ResetTimer()
	for b.Loop() {
		d := tok.NewDecoder()
		for _, id := range ids {
			d.Add(id)
		}
		d.Flush()
	}
}

// TestConcurrentEncode: one Tokenizer serves many requests at once (run
// it under -race).
func TestConcurrentEncode(t *testing.T) {
	c := corpus(t)
	for _, v := range []int{0, 1, 7} { // SentencePiece, llama-3, tekken (regexp)
		tok := load(t, vocabs[v].opts)
		want := make([][]int32, len(c))
		for i, s := range c {
			want[i] = tok.Encode(s, true, true)
		}
		errs := make(chan string, 4)
		for g := range 4 {
			go func() {
				for k := range c {
					i := (k + g*7) % len(c)
					if got := tok.Encode(c[i], true, true); !slices.Equal(got, want[i]) {
						errs <- c[i]
						return
					}
				}
				errs <- ""
			}()
		}
		for range 4 {
			if s := <-errs; s != "" {
				t.Errorf("%s: concurrent Encode(%q) differs", vocabs[v].name, s)
			}
		}
	}
}
