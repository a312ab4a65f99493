package devnet_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/openai/openai-go/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/backend/builtin"
)

// wan puts each ring member's stage listener behind a toxiproxy proxy that
// delays every byte by a fixed one-way latency in each direction: what
// other stages dial (the advertised address) is the proxy. The kernel here
// has no netem; toxiproxy on loopback is the WAN.
type wan struct {
	server *toxiproxy.ApiServer
}

func newWAN() *wan {
	return &wan{server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.New(io.Discard))}
}

// freeAddr is a loopback address with a port nobody listens on now.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// proxy starts a proxy to upstream with oneWay latency added both ways
// and returns the address to dial.
func (w *wan) proxy(t testing.TB, name, upstream string, oneWay time.Duration) string {
	t.Helper()
	p := toxiproxy.NewProxy(w.server, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	if oneWay > 0 {
		for _, dir := range []string{"upstream", "downstream"} {
			toxic := fmt.Sprintf(`{"name":"latency-%s","type":"latency","stream":"%s","attributes":{"latency":%d}}`, dir, dir, oneWay.Milliseconds())
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return p.Listen
}

// startWANMembers starts n members each behind its own proxy.
func (e *env) startWANMembers(t testing.TB, bin string, n int, oneWay time.Duration) {
	t.Helper()
	w := newWAN()
	for i := range n {
		listen := freeAddr(t)
		e.startMemberAt(t, bin, i, listen, w.proxy(t, fmt.Sprintf("member-%d", i), listen, oneWay))
	}
}

// TestRingOverWAN: members whose stage listeners sit behind 10 ms of
// latency each way form a ring (their probes measure the proxies, and each
// member's own re-probe at accept agrees with the matrix) and serve
// replies identical to the whole model's.
func TestRingOverWAN(t *testing.T) {
	bin := buildWorkerd(t)
	o := testmodel.Options{Seed: 9, Type: testmodel.Q8_0, Layers: 4, KVHeads: 2, Context: 512, ChatTemplate: ringTemplate}
	model := "ring-wan"
	cm, path := publishRing(t, model, o, 3)
	e := newEnv(t, envOptions{credits: 10_000, models: []catalog.Model{cm}, rings: ringTimeouts})
	e.startWANMembers(t, bin, 3, 10*time.Millisecond)
	e.waitRing(model, 3)
	whole, err := builtin.New(path, builtin.WithModelID(model), builtin.WithLogger(testLog(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	for _, c := range ringCases() {
		params, req := c.request(model)
		want, _, _ := wholeReply(t, whole, model, req)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		resp, err := e.client.Chat.Completions.New(ctx, params)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := resp.Choices[0].Message.Content; got != want {
			t.Errorf("%s: the ring said %q, the whole model %q", c.name, got, want)
		}
	}
}

// BenchmarkRingHops reports a ring's per-token decode latency against the
// plan's prediction (the sum of hop latencies plus stage compute, as
// shard.Plan computes it), for rings of 2 to 4 separate member processes
// whose stage listeners sit behind 0, 10 and 25 ms of one-way latency. It
// is a figure for the README, not a pass/fail test:
//
//	go test ./infra/devnet -run '^$' -bench RingHops -benchtime 1x
func BenchmarkRingHops(b *testing.B) {
	bin := buildWorkerd(b)
	o := testmodel.Options{Seed: 9, Type: testmodel.Q8_0, Layers: 8, KVHeads: 2, Context: 1024, ChatTemplate: ringTemplate}
	for _, stages := range []int{2, 3, 4} {
		for _, hop := range []time.Duration{0, 10 * time.Millisecond, 25 * time.Millisecond} {
			b.Run(fmt.Sprintf("stages=%d/hop=%s", stages, hop), func(b *testing.B) {
				model := fmt.Sprintf("ring-bench-%d", stages)
				cm, _ := publishRing(b, model, o, stages)
				e := newEnv(b, envOptions{credits: 1_000_000, models: []catalog.Model{cm}, rings: ringTimeouts})
				e.startWANMembers(b, bin, stages, hop)
				e.waitRing(model, stages)
				params := openai.ChatCompletionNewParams{Model: model, Temperature: openai.Float(0),
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}}
				run := func(n int64) time.Duration {
					params.MaxTokens = openai.Int(n)
					start := time.Now()
					resp, err := e.client.Chat.Completions.New(context.Background(), params)
					if err != nil {
						b.Fatal(err)
					}
					if resp.Usage.CompletionTokens != n {
						b.Fatalf("%d tokens, want %d", resp.Usage.CompletionTokens, n)
					}
					return time.Since(start)
				}
				const short, long = 2, 34
				b.ResetTimer()
				var perToken time.Duration
				for range b.N {
					// The difference of two replies cancels the prompt and
					// the gateway: what is left is 32 decode steps.
					perToken += (run(long) - run(short)) / (long - short)
				}
				perToken /= time.Duration(b.N)
				// Per token, each of the ring's hops is crossed once: the
				// one-way latency both ways of a proxied connection is
				// paid once per hop.
				b.ReportMetric(float64(perToken.Microseconds())/1000, "ms/token")
				b.ReportMetric(float64(stages)*float64(hop.Microseconds())/1000, "hops-ms")
				b.ReportMetric(float64(time.Second)/float64(max(perToken, 1)), "tok/s")
			})
		}
	}
}
