package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
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

var (
	peerRounds = flag.Int("enginebench.rounds", 3, "BenchmarkVersusLlamaCpp: interleaved runs of each engine per file (the median counts)")
	peerPrompt = flag.Int("enginebench.prompt", 64, "BenchmarkVersusLlamaCpp: prompt tokens, read in one batch (prefill)")
	peerTokens = flag.Int("enginebench.tokens", 32, "BenchmarkVersusLlamaCpp: greedy tokens generated one at a time (decode)")
)

// run is one engine's timings of one prompt and its greedy tokens: wall
// time and process CPU time (user and system, all threads) of the
// prefill and of the decoding, and the tokens generated after the first
// (the first greedy token ends the prefill).
type run struct {
	prefill, decode       time.Duration
	prefillCPU, decodeCPU time.Duration
	tokens                []int32
}

// engineRun reads prompt in one batch and generates n greedy tokens one
// at a time, as the peer harness does.
func engineRun(b *testing.B, m *engine.Model, prompt []int32, n int) run {
	b.Helper()
	ctx := context.Background()
	p, err := m.NewPipeline(nil)
	if err != nil {
		b.Fatal(err)
	}
	var r run
	cpu0, start := cpuTime(), time.Now()
	lg, err := p.Step(ctx, prompt)
	if err != nil {
		b.Fatal(err)
	}
	next := engine.Argmax(lg.Row(lg.Tokens - 1))
	r.prefill = time.Since(start)
	cpu1 := cpuTime()
	start = time.Now()
	for i := 0; i < n; i++ {
		if lg, err = p.Step(ctx, []int32{next}); err != nil {
			b.Fatal(err)
		}
		next = engine.Argmax(lg.Row(0))
		r.tokens = append(r.tokens, next)
	}
	r.decode = time.Since(start)
	r.prefillCPU, r.decodeCPU = cpu1-cpu0, cpuTime()-cpu1
	return r
}

// llamaCpp is a running infra/enginebench/llamacpp.mjs: a current
// llama.cpp (node-llama-cpp's prebuilt CPU build) with one model loaded.
type llamaCpp struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Reader
	backend string
	flash   bool
}

// peerAnswerMax bounds one line from the harness: a few hundred token ids.
const peerAnswerMax = 64 << 10

// harnessDir finds infra/enginebench with node-llama-cpp installed, or
// says why not.
func harnessDir() (string, string) {
	dir, err := filepath.Abs(filepath.Join("..", "..", "infra", "enginebench"))
	if err != nil {
		return "", err.Error()
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", "no node on PATH"
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-llama-cpp", "package.json")); err != nil {
		return "", "node-llama-cpp is not installed in infra/enginebench (scripts/bench-engine installs it)"
	}
	return dir, ""
}

// startLlamaCpp starts the harness on path with the given threads and
// waits for its ready line.
func startLlamaCpp(b *testing.B, dir, path string, threads int) *llamaCpp {
	b.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("node", "llamacpp.mjs", abs, strconv.Itoa(threads))
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &limitedWriter{w: &stderr, n: 64 << 10}
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start the llama.cpp harness: %v", err)
	}
	p := &llamaCpp{cmd: cmd, in: in, out: bufio.NewReaderSize(outPipe, peerAnswerMax)}
	b.Cleanup(func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			b.Logf("llama.cpp harness exited: %v: %s", err, stderr.Bytes())
		}
	})
	var ready struct {
		Ready   bool   `json:"ready"`
		Backend string `json:"backend"`
		Threads int    `json:"threads"`
	}
	p.read(b, &ready)
	if !ready.Ready || ready.Threads != threads {
		b.Fatalf("llama.cpp harness: ready %v with %d threads, want %d", ready.Ready, ready.Threads, threads)
	}
	p.backend = ready.Backend
	return p
}

// read decodes the harness's next line into v; an {"error"} line fails.
func (p *llamaCpp) read(b *testing.B, v any) {
	b.Helper()
	line, err := p.out.ReadSlice('\n')
	if err != nil {
		b.Fatalf("llama.cpp harness: reading its answer (at most %d bytes a line): %v", peerAnswerMax, err)
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(line, &e) == nil && e.Error != "" {
		b.Fatalf("llama.cpp harness: %s", e.Error)
	}
	if err := json.Unmarshal(line, v); err != nil {
		b.Fatalf("llama.cpp harness: answer %.200q: %v", line, err)
	}
}

// run is engineRun on the peer.
func (p *llamaCpp) run(b *testing.B, prompt []int32, n int) run {
	b.Helper()
	req, _ := json.Marshal(map[string]any{"prompt": prompt, "tokens": n})
	if _, err := p.in.Write(append(req, '\n')); err != nil {
		b.Fatalf("llama.cpp harness: %v", err)
	}
	var ans struct {
		PrefillMS      float64 `json:"prefill_ms"`
		DecodeMS       float64 `json:"decode_ms"`
		PrefillCPUMS   float64 `json:"prefill_cpu_ms"`
		DecodeCPUMS    float64 `json:"decode_cpu_ms"`
		Tokens         []int32 `json:"tokens"`
		FlashAttention bool    `json:"flashAttention"`
	}
	p.read(b, &ans)
	p.flash = ans.FlashAttention
	if len(ans.Tokens) != n || !(ans.PrefillMS > 0) || !(ans.DecodeMS > 0) {
		b.Fatalf("llama.cpp harness: %d tokens in %g + %g ms, want %d", len(ans.Tokens), ans.PrefillMS, ans.DecodeMS, n)
	}
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	return run{ms(ans.PrefillMS), ms(ans.DecodeMS), ms(ans.PrefillCPUMS), ms(ans.DecodeCPUMS), ans.Tokens}
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if k := min(len(p), l.n); k > 0 {
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// loadAverage is /proc/loadavg's first figure, or "?" where there is none.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// BenchmarkVersusLlamaCpp runs this engine and a current llama.cpp
// (node-llama-cpp's prebuilt CPU build, AVX2/AVX-512 kernels chosen at run
// time, in infra/enginebench) side by side on the same generated files
// with the same threads (GOMAXPROCS: set it with -cpu): a prompt read in
// one batch (prefill) and greedy tokens one at a time (decode), the two
// engines' runs interleaved -enginebench.rounds times so load on a shared
// machine falls on both alike; the medians count (ratio, prefill_ratio:
// ours over llama.cpp's), and the best runs, the least disturbed by other
// processes, give best_ratio and best_prefill_ratio; same_tokens counts the leading
// greedy tokens both engines chose alike (llama.cpp's flash attention and libm
// round differently, so a near tie may flip). Run with -benchtime 1x
// (scripts/bench-engine does); skipped without node and the harness.
func BenchmarkVersusLlamaCpp(b *testing.B) {
	dir, why := harnessDir()
	if why != "" {
		b.Skip(why)
	}
	if *peerRounds < 1 || *peerPrompt < 1 || *peerPrompt > 256 || *peerTokens < 1 || *peerTokens > 256 {
		b.Fatalf("-enginebench.rounds must be at least 1, -enginebench.prompt and -enginebench.tokens from 1 to 256")
	}
	threads := runtime.GOMAXPROCS(0)
	for _, c := range []struct {
		name string
		typ  testmodel.TensorType
	}{{"F32", testmodel.F32}, {"Q8_0", testmodel.Q8_0}, {"Q4_K_M", testmodel.Q4_K}} {
		b.Run(c.name, func(b *testing.B) {
			path := benchFile(b, "bench-"+c.name, benchModel(c.typ))
			f, err := gguf.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			m, err := engine.Load(f, threads)
			if err != nil {
				b.Fatal(err)
			}
			peer := startLlamaCpp(b, dir, path, threads)
			prompt := make([]int32, *peerPrompt)
			for i := range prompt {
				prompt[i] = int32(290 + i%40) // word pieces and letters of the test vocabulary
			}
			n := *peerTokens
			// One warm-up each: page the mapping in, size the buffers.
			engineRun(b, m, prompt, n)
			peer.run(b, prompt, n)
			// Each engine's wall and CPU time per run, interleaved.
			var ours, theirs []run
			load := loadAverage()
			for b.Loop() {
				for r := 0; r < *peerRounds; r++ {
					// Alternate who goes first, so neither always runs
					// right after the other warmed the caches.
					if r%2 == 0 {
						ours = append(ours, engineRun(b, m, prompt, n))
						theirs = append(theirs, peer.run(b, prompt, n))
					} else {
						theirs = append(theirs, peer.run(b, prompt, n))
						ours = append(ours, engineRun(b, m, prompt, n))
					}
				}
			}
			field := func(rs []run, f func(run) time.Duration) []time.Duration {
				var d []time.Duration
				for _, r := range rs {
					d = append(d, f(r))
				}
				return d
			}
			ourPre, ourDec := field(ours, func(r run) time.Duration { return r.prefill }), field(ours, func(r run) time.Duration { return r.decode })
			peerPre, peerDec := field(theirs, func(r run) time.Duration { return r.prefill }), field(theirs, func(r run) time.Duration { return r.decode })
			tps := float64(n) / median(ourDec).Seconds()
			ptps := float64(n) / median(peerDec).Seconds()
			pre := float64(len(prompt)) / median(ourPre).Seconds()
			ppre := float64(len(prompt)) / median(peerPre).Seconds()
			b.ReportMetric(tps, "tok/s")
			b.ReportMetric(ptps, "llama_tok/s")
			b.ReportMetric(tps/ptps, "ratio")
			b.ReportMetric(pre, "prefill_tok/s")
			b.ReportMetric(ppre, "llama_prefill_tok/s")
			b.ReportMetric(pre/ppre, "prefill_ratio")
			b.ReportMetric(slices.Min(peerDec).Seconds()/slices.Min(ourDec).Seconds(), "best_ratio")
			b.ReportMetric(slices.Min(peerPre).Seconds()/slices.Min(ourPre).Seconds(), "best_prefill_ratio")
			// CPU milliseconds per token, medians: what each engine spends
			// whatever else runs on the machine (llama.cpp's threads spin
			// at their barriers, which counts here).
			cpuPerTok := func(rs []run, f func(run) time.Duration, k int) float64 {
				return median(field(rs, f)).Seconds() * 1e3 / float64(k)
			}
			b.ReportMetric(cpuPerTok(ours, func(r run) time.Duration { return r.decodeCPU }, n), "cpu_ms/tok")
			b.ReportMetric(cpuPerTok(theirs, func(r run) time.Duration { return r.decodeCPU }, n), "llama_cpu_ms/tok")
			b.ReportMetric(cpuPerTok(ours, func(r run) time.Duration { return r.prefillCPU }, len(prompt)), "prefill_cpu_ms/tok")
			b.ReportMetric(cpuPerTok(theirs, func(r run) time.Duration { return r.prefillCPU }, len(prompt)), "llama_prefill_cpu_ms/tok")
			last := len(ours) - 1
			same := 0
			for i := range ours[last].tokens {
				if ours[last].tokens[i] != theirs[last].tokens[i] {
					break
				}
				same++
			}
			b.ReportMetric(float64(same), "same_tokens")
			b.Logf("llama.cpp: %s, flash attention %v, %d threads; %d rounds, prompt %d, %d tokens; load average %s before, %s after",
				peer.backend, peer.flash, threads, len(ourDec), len(prompt), n, load, loadAverage())
			b.Logf("decode: ours %v, llama.cpp %v; prefill: ours %v, llama.cpp %v", ourDec, peerDec, ourPre, peerPre)
		})
	}
}
