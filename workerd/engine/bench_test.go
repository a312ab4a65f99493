package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/infra/ollamatest"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

// benchModel is the realistic-width model of the speed figures: hidden
// size 1024, 9 layers, 16 heads (4 KV heads), feed-forward 2816 — about
// 101M parameters (the test vocabulary is small, so nearly all of them
// are in the layers).
func benchModel(typ testmodel.TensorType) testmodel.Options {
	return testmodel.Options{Seed: 1, Name: "c0mpute-bench", Embedding: 1024, Layers: 9, Heads: 16, KVHeads: 4,
		FeedForward: 2816, Context: 512, Type: typ}
}

// benchFile writes the model once into the repository's .cache (it is
// hundreds of MB in F32) and returns its path.
func benchFile(b *testing.B, name string, o testmodel.Options) string {
	b.Helper()
	dir := filepath.Join("..", "..", ".cache", "engine-bench")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, name+".gguf")
	if _, err := os.Stat(path); err != nil {
		if err := testmodel.WriteFile(path, o); err != nil {
			b.Fatal(err)
		}
	}
	return path
}

// ollamaSpeed runs n greedy tokens of the file on a real Ollama with the
// given threads and returns its decode tokens/s (eval_count /
// eval_duration, the better of two runs).
func ollamaSpeed(b *testing.B, path, name string, prompt string, n, threads int) float64 {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	s := ollamatest.Shared(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := ollamatest.Create(ctx, s.URL(), name, data); err != nil {
		b.Fatal(err)
	}
	data = nil
	var best float64
	for i := 0; i < 2; i++ { // the first run also loads the model
		req := map[string]any{"model": name, "prompt": prompt, "raw": true, "stream": false,
			"options": map[string]any{"temperature": 0, "num_predict": n, "num_thread": threads, "repeat_penalty": 1}}
		if i == 1 {
			req["keep_alive"] = 0 // unload after: no idle runner lingers into the next measurement
		}
		body, _ := json.Marshal(req)
		hreq, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+"/api/generate", bytes.NewReader(body))
		resp, err := http.DefaultClient.Do(hreq)
		if err != nil {
			b.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out struct {
			EvalCount    int   `json:"eval_count"`
			EvalDuration int64 `json:"eval_duration"`
		}
		if err := json.Unmarshal(raw, &out); err != nil || out.EvalCount == 0 {
			b.Fatalf("ollama: %s", raw)
		}
		best = max(best, float64(out.EvalCount)/(float64(out.EvalDuration)/1e9))
	}
	return best
}

// BenchmarkDecode measures single-sequence decoding (one token per
// forward pass, the KV cache growing) on the benchmark model per tensor
// type, with GOMAXPROCS goroutines, and Ollama on the same file when it
// is available (2 threads, and 1 thread: see ollama_1thread_tok/s).
// Run with -benchtime 1x: each iteration reads a 16-token prompt in one
// batch (prefill_tok/s) and generates 32 tokens (tok/s, ms/layer).
func BenchmarkDecode(b *testing.B) {
	const prompt, n = 16, 32
	for _, c := range []struct {
		name string
		typ  testmodel.TensorType
	}{{"F32", testmodel.F32}, {"Q8_0", testmodel.Q8_0}, {"Q4_K_M", testmodel.Q4_K}} {
		b.Run(c.name, func(b *testing.B) {
			o := benchModel(c.typ)
			path := benchFile(b, "bench-"+c.name, o)
			f, err := gguf.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			st, _ := os.Stat(path)
			m, err := engine.Load(f, 0)
			if err != nil {
				b.Fatal(err)
			}
			var params int64
			for _, ti := range f.Tensors {
				params += int64(ti.Elements())
			}
			toks := make([]int32, prompt)
			for i := range toks {
				toks[i] = int32(290 + i)
			}
			ctx := context.Background()
			var decode, prefill time.Duration
			b.ResetTimer()
			for b.Loop() {
				p, _ := m.NewPipeline(nil)
				start := time.Now()
				lg, err := p.Step(ctx, toks)
				if err != nil {
					b.Fatal(err)
				}
				prefill += time.Since(start)
				next := engine.Argmax(lg.Row(lg.Tokens - 1))
				start = time.Now()
				for i := 0; i < n; i++ {
					lg, err = p.Step(ctx, []int32{next})
					if err != nil {
						b.Fatal(err)
					}
					next = engine.Argmax(lg.Row(0))
				}
				decode += time.Since(start)
			}
			b.StopTimer()
			tps := float64(n*b.N) / decode.Seconds()
			b.ReportMetric(tps, "tok/s")
			b.ReportMetric(float64(prompt*b.N)/prefill.Seconds(), "prefill_tok/s")
			b.ReportMetric(decode.Seconds()*1e3/float64(n*b.N)/float64(o.Layers), "ms/layer")
			b.ReportMetric(float64(params)/1e6, "Mparams")
			b.ReportMetric(float64(st.Size())/(1<<20), "MiB")
			if _, why := ollamatest.Binary(); why != "" {
				b.Logf("no Ollama to compare with: %s", why)
				return
			}
			var words bytes.Buffer
			for i := 0; i < prompt-1; i++ { // BOS + 15 one-letter pieces
				fmt.Fprintf(&words, "%c", 'a'+i)
			}
			ot := ollamaSpeed(b, path, "bench-"+c.name, words.String(), n, runtime.GOMAXPROCS(0))
			b.ReportMetric(ot, "ollama_tok/s")
			b.ReportMetric(tps/ot, "ratio")
			// ggml's thread pool synchronises every graph node with spinning
			// barriers, which a loaded machine punishes; one thread shows
			// Ollama's kernels without that effect.
			b.ReportMetric(ollamaSpeed(b, path, "bench-"+c.name, words.String(), n, 1), "ollama_1thread_tok/s")
		})
	}
}
