package devnet_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/infra/devnet"
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
func streamTimes(url, key string, tokens int, interval time.Duration) ([]time.Duration, error) {
	body := fmt.Sprintf(`{"model":"paced","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"go"}]}`, tokens)
	req, err := http.NewRequest(http.MethodPost, url+"/chat/completions", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
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

// measure runs rounds of `streams` concurrent requests against url and
// returns first-token and per-token latencies.
func measure(b *testing.B, url, key string, streams, tokens int, interval time.Duration) (ttft, perToken []time.Duration, elapsed time.Duration) {
	var mu sync.Mutex
	start := time.Now()
	for range b.N {
		var wg sync.WaitGroup
		for range streams {
			wg.Go(func() {
				ts, err := streamTimes(url, key, tokens, interval)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				ttft = append(ttft, ts[0])
				perToken = append(perToken, ts[1:]...)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	return ttft, perToken, time.Since(start)
}

// BenchmarkAddedLatency measures what the whole local path (gateway →
// relay → workerd → backend → workerd → relay → gateway) adds to a stream,
// against calling the same backend directly, at 1 and 200 concurrent
// streams; and the relayed tokens/s when the backend does not pace.
func BenchmarkAddedLatency(b *testing.B) {
	for _, c := range []struct {
		streams  int
		tokens   int
		interval time.Duration
	}{
		{1, 32, 5 * time.Millisecond},
		{1, 32, 20 * time.Millisecond}, // 50 tok/s, a typical GPU stream
		{200, 32, 5 * time.Millisecond},
		{200, 256, 0},
	} {
		b.Run(fmt.Sprintf("streams=%d/tokens=%d/interval=%s", c.streams, c.tokens, c.interval), func(b *testing.B) {
			backendSrv := pacedServer(c.tokens, c.interval)
			defer backendSrv.Close()
			limits := devnet.ScriptedLimits()
			limits.RatePerMinute = 1 << 40
			b.StopTimer()
			env := newEnv(b, envOptions{credits: 1 << 40, limits: &limits, models: []catalog.Model{{ID: "paced", Price: 1}}})
			for range c.streams {
				env.startWorker(openaicompat.New(backendSrv.URL+"/v1"), map[string]string{"paced": "paced"})
			}
			env.waitWorkers("paced", c.streams)
			b.StartTimer()
			dTTFT, dTok, _ := measure(b, backendSrv.URL+"/v1", "", c.streams, c.tokens, c.interval)
			gTTFT, gTok, elapsed := measure(b, env.stack.APIURL, env.apiKey, c.streams, c.tokens, c.interval)
			us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
			b.ReportMetric(us(pct(gTTFT, .5)-pct(dTTFT, .5)), "added-ttft-p50-µs")
			b.ReportMetric(us(pct(gTTFT, .99)-pct(dTTFT, .99)), "added-ttft-p99-µs")
			b.ReportMetric(us(pct(gTok, .5)-pct(dTok, .5)), "added-token-p50-µs")
			b.ReportMetric(us(pct(gTok, .99)-pct(dTok, .99)), "added-token-p99-µs")
			b.ReportMetric(float64(len(gTok)+len(gTTFT))/elapsed.Seconds(), "relayed-tok/s")
		})
	}
}
