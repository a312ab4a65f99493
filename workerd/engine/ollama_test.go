package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/infra/ollamatest"
	"github.com/c0mpute/c0mpute/infra/testmodel"
)

func TestMain(m *testing.M) {
	code := m.Run()
	ollamatest.StopShared()
	os.Exit(code)
}

// modelCases are the generated files the engine is checked on: one per
// tensor type, and the qwen2 variant. K-quant files need rows that are
// multiples of 256.
func modelCases() []struct {
	name string
	o    testmodel.Options
} {
	type c = struct {
		name string
		o    testmodel.Options
	}
	// Seeds are chosen so that no greedy choice in the compared range is
	// a near tie (smallest top-1/top-2 logit gap ≥ 0.05, checked by the
	// test: below about 0.01, last-bit differences between glibc's expf
	// and Go's exp can flip a quantized activation and with it the token,
	// which would test the libm, not the engine) and no token repeats 30
	// times in a row (Ollama aborts such replies).
	k := func(seed int64, typ testmodel.TensorType, arch string) testmodel.Options {
		return testmodel.Options{Seed: seed, Type: typ, Arch: arch, Embedding: 256, FeedForward: 512, Heads: 4, KVHeads: 2}
	}
	return []c{
		{"f32", testmodel.Options{Seed: 9, Type: testmodel.F32, KVHeads: 2}},
		{"f16", testmodel.Options{Seed: 9, Type: testmodel.F16, KVHeads: 2}},
		{"q8_0", testmodel.Options{Seed: 9, Type: testmodel.Q8_0, KVHeads: 2}},
		{"q4_k_m", k(9, testmodel.Q4_K, "llama")},
		{"q6_k", k(6, testmodel.Q6_K, "llama")},
		{"qwen2-f32", testmodel.Options{Seed: 15, Type: testmodel.F32, Arch: "qwen2"}},
		{"qwen2-q4_k_m", k(12, testmodel.Q4_K, "qwen2")},
	}
}

// ollamaGenerate runs a raw greedy completion on Ollama and returns the
// reply text.
func ollamaGenerate(t *testing.T, url, model, prompt string, n int) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"model": model, "prompt": prompt, "raw": true, "stream": false,
		"options": map[string]any{"temperature": 0, "num_predict": n, "seed": 1, "repeat_penalty": 1, "repeat_last_n": 0, "top_k": 1},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/api/generate", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Response string `json:"response"`
		EvalN    int    `json:"eval_count"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil {
		t.Fatalf("ollama generate: %d %s", resp.StatusCode, b)
	}
	if out.EvalN != n {
		t.Fatalf("ollama generated %d tokens, want %d: %s", out.EvalN, n, b)
	}
	return out.Response
}

// TestGreedyMatchesOllama runs the same generated files in a real Ollama
// (llama.cpp) and in the engine: 60 greedy tokens after a word prompt,
// compared as text. The prompt is tokenized by hand, so this checks the
// numerics alone; the backend's end-to-end test adds the tokenizer and
// non-ASCII prompts.
func TestGreedyMatchesOllama(t *testing.T) {
	const n = 60
	words := []string{"hello", "world", "the", "cat", "sat", "on", "the", "mat"}
	for _, c := range modelCases() {
		t.Run(c.name, func(t *testing.T) {
			s := ollamatest.TinyModel(t, "engine-"+c.name, c.o)
			// No leading space: SentencePiece adds the "▁" prefix itself.
			want := ollamaGenerate(t, s.URL(), "engine-"+c.name, strings.Join(words, " "), n)

			m := load(t, c.o)
			vocab := c.o.Vocab()
			prompt := spell(vocab, words)
			p, err := m.NewPipeline(nil)
			if err != nil {
				t.Fatal(err)
			}
			var got strings.Builder
			toks, least := greedyMargin(t, p, prompt, n)
			if least < 0.05 {
				t.Fatalf("test design: greedy margin %g is a near tie; choose another seed", least)
			}
			for _, tok := range toks {
				got.WriteString(strings.ReplaceAll(vocab[tok], "▁", " "))
			}
			if got.String() != want {
				t.Errorf("engine and Ollama differ after %d words:\nengine: %q\nollama: %q", commonWords(got.String(), want), got.String(), want)
			}
		})
	}
}

func commonWords(a, b string) int {
	x, y := strings.Fields(a), strings.Fields(b)
	i := 0
	for i < len(x) && i < len(y) && x[i] == y[i] {
		i++
	}
	return i
}

// spell tokenizes words as llama.cpp's SentencePiece does with the test
// vocabulary: no piece joins "▁" and a letter, so no merge ever starts
// and a word becomes "▁" and its letters.
func spell(vocab []string, words []string) []int32 {
	id := map[string]int32{}
	for i, v := range vocab {
		id[v] = int32(i)
	}
	out := []int32{testmodel.BOSID}
	for _, w := range words {
		out = append(out, id["▁"])
		for _, c := range w {
			out = append(out, id[string(c)])
		}
	}
	return out
}
