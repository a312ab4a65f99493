package devnet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/c0mpute/c0mpute/infra/devnet"
)

// sdkReply is one streamed reply as the official Go SDK delivers it: the
// time to its first content delta and to its end, from the call, and the
// text.
type sdkReply struct {
	ttft, total time.Duration
	text        string
	tokens      int64
}

// sdkStream sends params through client and times the reply.
func sdkStream(ctx context.Context, client openai.Client, params openai.ChatCompletionNewParams) (sdkReply, error) {
	var r sdkReply
	start := time.Now()
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		c := stream.Current()
		acc.AddChunk(c)
		if r.ttft == 0 && len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			r.ttft = time.Since(start)
		}
	}
	r.total = time.Since(start)
	if err := stream.Err(); err != nil {
		return r, err
	}
	if len(acc.Choices) == 0 || r.ttft == 0 {
		return r, fmt.Errorf("a reply without content")
	}
	r.text, r.tokens = acc.Choices[0].Message.Content, acc.Usage.CompletionTokens
	return r, nil
}

// BenchmarkOllamaAddedLatency is BenchmarkAddedLatency's one stream in
// front of a real Ollama, with the official OpenAI Go SDK as the client:
// each iteration sends the same greedy request (16 tokens, usage
// included) to Ollama's own OpenAI-compatible endpoint and through the
// gateway, in alternating order, so the two see the same machine moment
// (measurePairs). The stack runs in this process as the tests run it
// (newEnv); this file needs nothing else, so it runs as is in older
// checkouts for a before-and-after. BenchmarkOllamaAddedLatencyProcess
// (bench_test.go) runs the gateway as its own process and reports its
// CPU. Both skip without an Ollama binary (ollamatest.Binary); scripts/test
// builds them but does not run them.
func BenchmarkOllamaAddedLatency(b *testing.B) {
	limits := devnet.ScriptedLimits()
	limits.RatePerMinute = 1 << 40
	e := newEnv(b, envOptions{credits: 1 << 40, limits: &limits})
	_, srv := e.ollamaWorker()
	measurePairs(b, srv.URL(), e.client, func() {}, func() {})
}

// ollamaBenchParams is the benchmarks' request: greedy, 16 tokens, usage
// included.
func ollamaBenchParams() openai.ChatCompletionNewParams {
	p := chatParams("Tell me about the sea.", 16)
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	return p
}

// measurePairs sends ollamaBenchParams b.N times to the Ollama at
// ollamaURL and through the gateway behind via, in alternating order,
// after four pairs that warm both paths, calling start and stop around the
// measured pairs. The added latency is taken per pair (gateway minus
// direct, for the first content delta and for the whole reply) and
// reported at the pairs' median and 90th percentile; each pair's two
// replies must be the same text. It returns the tokens the gateway's
// replies counted.
func measurePairs(b *testing.B, ollamaURL string, via openai.Client, start, stop func()) (tokens int64) {
	b.StopTimer()
	params := ollamaBenchParams()
	ctx := context.Background()
	direct := openai.NewClient(option.WithBaseURL(ollamaURL+"/v1/"), option.WithAPIKey("ollama"), option.WithMaxRetries(0))
	pair := func(i int) (d, g sdkReply) {
		var err error
		for k := range 2 {
			if (i+k)%2 == 0 {
				d, err = sdkStream(ctx, direct, params)
			} else {
				g, err = sdkStream(ctx, via, params)
			}
			if err != nil {
				b.Fatalf("request %d: %v", i, err)
			}
		}
		if d.text != g.text {
			b.Fatalf("request %d: the gateway's reply %q differs from Ollama's %q", i, g.text, d.text)
		}
		return d, g
	}
	for i := range 4 {
		pair(i)
	}
	var addedTTFT, addedTotal, directTTFT []time.Duration
	start()
	b.StartTimer()
	for i := range b.N {
		d, g := pair(i)
		addedTTFT = append(addedTTFT, g.ttft-d.ttft)
		addedTotal = append(addedTotal, g.total-d.total)
		directTTFT = append(directTTFT, d.ttft)
		tokens += g.tokens
	}
	b.StopTimer()
	stop()
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(us(pct(addedTTFT, .5)), "added-ttft-p50-µs")
	b.ReportMetric(us(pct(addedTTFT, .9)), "added-ttft-p90-µs")
	b.ReportMetric(us(pct(addedTotal, .5)), "added-reply-p50-µs")
	b.ReportMetric(us(pct(addedTotal, .9)), "added-reply-p90-µs")
	b.ReportMetric(us(pct(directTTFT, .5)), "direct-ttft-p50-µs")
	return tokens
}
