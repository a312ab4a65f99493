package devnet_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/devnet"
	"github.com/c0mpute/c0mpute/workerd/agent"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/backend/openaicompat"
)

// pacedServer is a scripted OpenAI-compatible server (not a model): it
// streams tokens words, one every interval from when the request arrived,
// so the latency a path adds can be measured against a known schedule.
func pacedServer(tokens int, interval time.Duration) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			fmt.Fprint(w, `{"object":"list","data":[{"id":"paced","object":"model"}]}`)
			return
		}
		start := time.Now()
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for k := range tokens {
			if d := time.Until(start.Add(time.Duration(k) * interval)); d > 0 {
				time.Sleep(d)
			}
			fmt.Fprintf(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"paced\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"},\"finish_reason\":null}]}\n\n", k)
			_ = rc.Flush()
		}
		fmt.Fprintf(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"paced\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n", tokens, tokens+3)
		_ = rc.Flush()
	}))
}

// streamTimes posts a streaming request and returns, for each content
// token, its arrival time minus its scheduled offset k*interval, measured
// from the moment the request was sent.
func streamTimes(client *http.Client, url, key string, tokens int, interval time.Duration) ([]time.Duration, error) {
	body := fmt.Sprintf(`{"model":"paced","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"go"}]}`, tokens)
	req, err := http.NewRequest(http.MethodPost, url+"/chat/completions", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	var out []time.Duration
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "data: {") && strings.Contains(line, `"content":"w`) {
			k := len(out)
			out = append(out, time.Since(start)-time.Duration(k)*interval)
		}
	}
	if len(out) != tokens {
		return out, fmt.Errorf("got %d tokens, want %d", len(out), tokens)
	}
	return out, sc.Err()
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// benchClient is the load generator's HTTP client: keep-alive connections
// for every concurrent stream (net/http keeps two per host by default), so
// neither the direct nor the gateway measurement pays a TCP dial per
// request.
func benchClient(streams int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 2*streams+16, 2*streams+16
	return &http.Client{Transport: t}
}

// times gathers the streams' first-token and per-token latencies.
type times struct {
	mu             sync.Mutex
	ttft, perToken []time.Duration
}

// stream runs one streaming request and records its times; false (the
// benchmark failed) when it did not complete.
func (g *times) stream(b *testing.B, client *http.Client, url, key string, tokens int, interval time.Duration) bool {
	ts, err := streamTimes(client, url, key, tokens, interval)
	if err != nil {
		b.Error(err)
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ttft = append(g.ttft, ts[0])
	g.perToken = append(g.perToken, ts[1:]...)
	return true
}

// measure runs rounds of `streams` concurrent requests against url and
// returns first-token and per-token latencies.
func measure(b *testing.B, client *http.Client, url, key string, streams, tokens int, interval time.Duration) (ttft, perToken []time.Duration, elapsed time.Duration) {
	var g times
	start := time.Now()
	for range b.N {
		var wg sync.WaitGroup
		for range streams {
			wg.Go(func() { g.stream(b, client, url, key, tokens, interval) })
		}
		wg.Wait()
	}
	return g.ttft, g.perToken, time.Since(start)
}

// measureSteady is measure at a steady concurrency: each of streams
// clients runs b.N requests back to back, the clients' starts spread evenly
// over one stream's length (tokens × interval), so about streams requests
// are in flight at any moment and arrivals are spread out instead of all
// coming at once.
func measureSteady(b *testing.B, client *http.Client, url, key string, streams, tokens int, interval time.Duration) (ttft, perToken []time.Duration, elapsed time.Duration) {
	var g times
	var wg sync.WaitGroup
	start := time.Now()
	span := time.Duration(tokens) * interval
	for k := range streams {
		wg.Go(func() {
			time.Sleep(span * time.Duration(k) / time.Duration(streams))
			for range b.N {
				if !g.stream(b, client, url, key, tokens, interval) {
					return
				}
			}
		})
	}
	wg.Wait()
	return g.ttft, g.perToken, time.Since(start)
}

// BenchmarkAddedLatency measures what the whole local path (gateway →
// relay → workerd → backend → workerd → relay → gateway) adds to a stream,
// against calling the same backend directly, at 1 and 200 concurrent
// streams; the relayed tokens/s; and the gateway's own CPU time per request
// and per relayed token. The 200-stream cases start all their requests at
// once (a burst: the first tokens queue behind 200 admissions), except
// "steady", where 200 clients loop with their starts spread over a
// stream's length, so 200 streams are in flight with arrivals spread out.
//
// The gateway (API, relay, relay function, listener, store) runs as a
// process of its own (gatewayProcess); the load generator, the scripted
// backend and the workers run in this one. Its CPU time is the difference
// of its getrusage(RUSAGE_SELF) user+system time across the gateway
// measurement, so the other parts on the same cores do not count. With
// C0MPUTE_BENCH_LOOPBACK=1 the gateway's own relay traffic crosses
// loopback sockets (devnet.Config.Loopback: SDK posts to the HTTP
// management API, a WebSocket listener), for comparison;
// with C0MPUTE_BENCH_GATEWAY_PROFILE=path it writes a CPU profile of
// itself there (one file per sub-benchmark, suffixed with its index),
// and with C0MPUTE_BENCH_GATEWAY_TRACE=path an execution trace (go tool
// trace; timestamps share the machine's monotonic clock with a -trace of
// the benchmark process, so the two line up), and with
// C0MPUTE_BENCH_GATEWAY_MEMPROFILE=path its allocations (pprof's allocs
// profile, written when it stops: everything since it started, its setup
// included);
// C0MPUTE_BENCH_BATCH=1ms sets the workers' batching window (default
// devnet.DevBatchWindow).
func BenchmarkAddedLatency(b *testing.B) {
	for i, c := range []struct {
		streams  int
		tokens   int
		interval time.Duration
		steady   bool
	}{
		{1, 32, 5 * time.Millisecond, false},
		{1, 32, 20 * time.Millisecond, false}, // 50 tok/s, a typical GPU stream
		{200, 32, 5 * time.Millisecond, false},
		{200, 256, 0, false},
		{200, 32, 20 * time.Millisecond, true},
	} {
		name := fmt.Sprintf("streams=%d/tokens=%d/interval=%s", c.streams, c.tokens, c.interval)
		run := measure
		if c.steady {
			name, run = name+"/steady", measureSteady
		}
		b.Run(name, func(b *testing.B) {
			backendSrv := pacedServer(c.tokens, c.interval)
			defer backendSrv.Close()
			b.StopTimer()
			gw := startGateway(b, c.streams, i)
			for k := range c.streams {
				gw.startWorker(b, k, openaicompat.New(backendSrv.URL+"/v1"), map[string]string{"paced": "paced"})
			}
			gw.waitWorkers(b, "paced", c.streams)
			client := benchClient(c.streams)
			b.StartTimer()
			dTTFT, dTok, _ := run(b, client, backendSrv.URL+"/v1", "", c.streams, c.tokens, c.interval)
			before := gw.rusage(b)
			gTTFT, gTok, elapsed := run(b, client, gw.APIURL, gw.APIKey, c.streams, c.tokens, c.interval)
			cpu := gw.rusage(b) - before
			us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
			relayed := len(gTok) + len(gTTFT)
			b.ReportMetric(us(pct(gTTFT, .5)-pct(dTTFT, .5)), "added-ttft-p50-µs")
			b.ReportMetric(us(pct(gTTFT, .99)-pct(dTTFT, .99)), "added-ttft-p99-µs")
			b.ReportMetric(us(pct(gTok, .5)-pct(dTok, .5)), "added-token-p50-µs")
			b.ReportMetric(us(pct(gTok, .99)-pct(dTok, .99)), "added-token-p99-µs")
			b.ReportMetric(float64(relayed)/elapsed.Seconds(), "relayed-tok/s")
			b.ReportMetric(us(cpu)/float64(len(gTTFT)), "gw-cpu-µs/req")
			b.ReportMetric(us(cpu)/float64(relayed), "gw-cpu-µs/tok")
		})
	}
}

// BenchmarkOllamaAddedLatencyProcess is BenchmarkOllamaAddedLatency with
// the gateway as its own process, as in BenchmarkAddedLatency: its CPU
// time across the measured pairs (it idles through the direct requests)
// divided by the gateway's requests and by their tokens.
func BenchmarkOllamaAddedLatencyProcess(b *testing.B) {
	srv := sharedOllama(b)
	gw := startGateway(b, 1, 0)
	gw.startWorker(b, 0, ollamaBackend(srv), map[string]string{tinyModel: tinyModel})
	gw.waitWorkers(b, tinyModel, 1)
	via := openai.NewClient(option.WithBaseURL(gw.APIURL+"/"), option.WithAPIKey(gw.APIKey), option.WithMaxRetries(0))
	var cpu time.Duration
	tokens := measurePairs(b, srv.URL(), via, func() { cpu = -gw.rusage(b) }, func() { cpu += gw.rusage(b) })
	us := float64(cpu.Nanoseconds()) / 1e3
	b.ReportMetric(us/float64(b.N), "gw-cpu-µs/req")
	if tokens > 0 {
		b.ReportMetric(us/float64(tokens), "gw-cpu-µs/tok")
	}
}

// gatewayEnv names the environment variable that makes TestGatewayProcess
// the benchmark's gateway.
const gatewayEnv = "C0MPUTE_BENCH_GATEWAY_PROCESS"

// gatewayInfo is what the gateway process tells the benchmark on its first
// line: where it listens and the credentials to use it.
type gatewayInfo struct {
	APIURL   string   `json:"api_url"`
	RelayURL string   `json:"relay_url"`
	APIKey   string   `json:"api_key"`
	Tokens   []string `json:"worker_tokens"`
}

// gateway is a running gateway process.
type gateway struct {
	gatewayInfo
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
	mu  sync.Mutex
}

// startGateway runs this test binary's TestGatewayProcess as the gateway,
// with worker tokens for workers workers.
func startGateway(b *testing.B, workers, index int) *gateway {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestGatewayProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), gatewayEnv+"=1", "C0MPUTE_BENCH_WORKERS="+strconv.Itoa(workers))
	if p := os.Getenv("C0MPUTE_BENCH_GATEWAY_PROFILE"); p != "" {
		cmd.Env = append(cmd.Env, "C0MPUTE_BENCH_GATEWAY_PROFILE="+p+"."+strconv.Itoa(index))
	}
	if p := os.Getenv("C0MPUTE_BENCH_GATEWAY_TRACE"); p != "" {
		cmd.Env = append(cmd.Env, "C0MPUTE_BENCH_GATEWAY_TRACE="+p+"."+strconv.Itoa(index))
	}
	if p := os.Getenv("C0MPUTE_BENCH_GATEWAY_MEMPROFILE"); p != "" {
		cmd.Env = append(cmd.Env, "C0MPUTE_BENCH_GATEWAY_MEMPROFILE="+p+"."+strconv.Itoa(index))
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	g := &gateway{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	b.Cleanup(func() {
		in.Close() // the gateway stops when its input ends
		_, _ = io.Copy(io.Discard, out)
		if err := cmd.Wait(); err != nil {
			b.Errorf("gateway process: %v", err)
		}
	})
	if err := json.Unmarshal([]byte(g.line(b)), &g.gatewayInfo); err != nil {
		b.Fatalf("gateway process: %v", err)
	}
	return g
}

// line reads the gateway's next answer line.
func (g *gateway) line(b *testing.B) string {
	b.Helper()
	for g.out.Scan() {
		if rest, ok := strings.CutPrefix(g.out.Text(), "gateway: "); ok {
			return rest
		}
	}
	b.Fatalf("gateway process ended: %v", g.out.Err())
	return ""
}

// ask sends the gateway one command and returns its answer.
func (g *gateway) ask(b *testing.B, cmd string) string {
	b.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, err := fmt.Fprintln(g.in, cmd); err != nil {
		b.Fatalf("gateway process: %v", err)
	}
	return g.line(b)
}

// rusage is the gateway process's CPU time so far, user and system.
func (g *gateway) rusage(b *testing.B) time.Duration {
	b.Helper()
	ns, err := strconv.ParseInt(g.ask(b, "rusage"), 10, 64)
	if err != nil {
		b.Fatalf("gateway rusage: %v", err)
	}
	return time.Duration(ns)
}

// startWorker runs an in-process workerd on the gateway's k-th worker
// token's account until the benchmark ends.
func (g *gateway) startWorker(b *testing.B, k int, be backend.Backend, models map[string]string) {
	b.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	a := agent.New(agent.Config{RelayURL: g.RelayURL, Token: g.Tokens[k/(store.MaxConnsPerToken/2)], Key: key, Backend: be,
		Models: models, Log: testLog(b), Version: "bench", DrainTimeout: 5 * time.Second})
	go func() { defer close(done); _ = a.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
}

// waitWorkers waits until the gateway lists n idle workers for model.
func (g *gateway) waitWorkers(b *testing.B, model string, n int) {
	b.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		got, err := strconv.Atoi(g.ask(b, "idle "+model))
		if err != nil {
			b.Fatalf("gateway idle workers: %v", err)
		}
		if got >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("fewer than %d workers registered for %s after 60 s", n, model)
}

// TestGatewayProcess is the benchmark's gateway process (startGateway); it
// is skipped unless gatewayEnv is set. It runs a stack on the suite's store
// with the paced model and the tiny Ollama one, writes a gatewayInfo line,
// then answers commands, one a line, until its input ends: "rusage" (its
// CPU time in ns, user plus system, from getrusage) and "idle MODEL" (how
// many idle workers the store lists).
func TestGatewayProcess(t *testing.T) {
	if os.Getenv(gatewayEnv) == "" {
		t.Skip("the benchmark's gateway process: runs only under BenchmarkAddedLatency")
	}
	workers, err := strconv.Atoi(os.Getenv("C0MPUTE_BENCH_WORKERS"))
	if err != nil || workers < 1 {
		t.Fatalf("C0MPUTE_BENCH_WORKERS=%q: want a positive count", os.Getenv("C0MPUTE_BENCH_WORKERS"))
	}
	limits := devnet.ScriptedLimits()
	limits.RatePerMinute = 1 << 40
	window := devnet.DevBatchWindow
	if v := os.Getenv("C0MPUTE_BENCH_BATCH"); v != "" {
		if window, err = time.ParseDuration(v); err != nil {
			t.Fatalf("C0MPUTE_BENCH_BATCH=%q: %v", v, err)
		}
	}
	st := openStore(t)
	stack, err := devnet.Start(context.Background(), devnet.Config{Store: st, APIAddr: "127.0.0.1:0", RelayAddr: "127.0.0.1:0",
		Models: []catalog.Model{{ID: "paced", Price: 1}, {ID: tinyModel, Price: 1}}, Limits: limits, BatchWindow: window, Log: testLog(t),
		ManualSweep: true, Loopback: os.Getenv("C0MPUTE_BENCH_LOOPBACK") == "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer stack.Close()
	ctx := context.Background()
	info := gatewayInfo{APIURL: stack.APIURL, RelayURL: stack.RelayURL}
	if info.APIKey, err = stack.CreateAccount(ctx, "bench-client", 1<<40, "bench-grant"); err != nil {
		t.Fatal(err)
	}
	for k := range (workers + store.MaxConnsPerToken/2 - 1) / (store.MaxConnsPerToken / 2) {
		id := fmt.Sprintf("bench-contributor-%d", k)
		if err := st.CreateAccount(ctx, store.Account{ID: id, CreatedAt: time.Now()}); err != nil && !errors.Is(err, store.ErrExists) {
			t.Fatal(err)
		}
		tok, err := stack.IssueWorkerToken(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		info.Tokens = append(info.Tokens, tok)
	}
	if p := os.Getenv("C0MPUTE_BENCH_GATEWAY_PROFILE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if p := os.Getenv("C0MPUTE_BENCH_GATEWAY_TRACE"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := trace.Start(f); err != nil {
			t.Fatal(err)
		}
		defer func() { trace.Stop(); f.Close() }()
	}
	if p := os.Getenv("C0MPUTE_BENCH_GATEWAY_MEMPROFILE"); p != "" {
		defer func() {
			f, err := os.Create(p)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			runtime.GC() // the profile lags by up to two cycles
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				t.Error(err)
			}
		}()
	}
	line, _ := json.Marshal(info)
	fmt.Printf("gateway: %s\n", line)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch cmd := sc.Text(); {
		case cmd == "rusage":
			var ru syscall.Rusage
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
				t.Fatal(err)
			}
			fmt.Printf("gateway: %d\n", ru.Utime.Nano()+ru.Stime.Nano())
		case strings.HasPrefix(cmd, "idle "):
			ws, err := st.IdleWorkers(ctx, strings.TrimPrefix(cmd, "idle "))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Printf("gateway: %d\n", len(ws))
		default:
			t.Fatalf("gateway process: unknown command %q", cmd)
		}
	}
}

// BenchmarkLoopbackRoundTrip is the floor under every hop of the path: one
// 16-byte round trip over a loopback TCP connection between two goroutines
// of this process, back to back (gap 0) and after the machine idled for
// gap, as a stream's hops do between its tokens (idle-p50-µs is the idle
// time the sleeps gave: a timer fires late). The difference is what waking
// an idle vCPU costs, twice per round trip, with no work at all.
func BenchmarkLoopbackRoundTrip(b *testing.B) {
	for _, gap := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond} {
		b.Run("gap="+gap.String(), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				_, _ = io.Copy(c, c) // echo until the client closes
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, 16)
			rtts, idle := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				if gap > 0 {
					slept := time.Now()
					time.Sleep(gap)
					idle = append(idle, time.Since(slept))
				}
				start := time.Now()
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
				rtts = append(rtts, time.Since(start))
			}
			b.ReportMetric(float64(pct(rtts, .5).Nanoseconds())/1e3, "rtt-p50-µs")
			b.ReportMetric(float64(pct(rtts, .9).Nanoseconds())/1e3, "rtt-p90-µs")
			b.ReportMetric(float64(pct(idle, .5).Nanoseconds())/1e3, "idle-p50-µs")
		})
	}
}
