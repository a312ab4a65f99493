package devnet_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/backend/builtin"
	"github.com/c0mpute/c0mpute/workerd/config"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
	"github.com/c0mpute/c0mpute/workerd/metrics"
	"github.com/c0mpute/c0mpute/workerd/speculate"
)

// specBenchModel is BenchmarkRingSpeculation's target: BenchmarkRingHops'
// model, cheap on a CPU, whose replies are whole-word tokens.
var specBenchModel = testmodel.Options{Seed: 9, Type: testmodel.Q8_0, Layers: 8, KVHeads: 2, Context: 1024, ChatTemplate: ringTemplate}

// specPrompts are the benchmark's user messages, one request each.
var specPrompts = []string{
	"hello world, the cat sat on the mat",
	"tell me about the big red dog and the small blue bird",
	"the sun and the moon over the sea at night",
	"a green tree, a fish and an apple: good day to you",
}

// specReply is the benchmark's reply length (max_tokens, temperature 0).
const specReply = 64

// specAlphaTolerance is how close a calibrated draft's greedy agreement
// comes to the acceptance rate asked for.
const specAlphaTolerance = 0.03

// specRequest is the wire request of a benchmark prompt: greedy, n tokens.
func specRequest(model, prompt string, n int64) oaiwire.ChatRequest {
	temp := 0.0
	return oaiwire.ChatRequest{Model: model, Temperature: &temp, MaxTokens: &n,
		Messages: []oaiwire.Message{{Role: "user", Content: oaiwire.Content{Text: prompt}}}}
}

// loadModel generates o's file in memory and loads it with the built-in
// engine; the Text renders and tokenizes chats as the ring's driver does.
func loadModel(t testing.TB, o testmodel.Options) (*engine.Model, *builtin.Text) {
	t.Helper()
	b, err := testmodel.Bytes(o)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	m, err := engine.Load(f, 0)
	if err != nil {
		t.Fatal(err)
	}
	text, err := builtin.NewText(f.Metadata, m.Config())
	if err != nil {
		t.Fatal(err)
	}
	return m, text
}

// draftCalibration holds a target's greedy replies to the benchmark's
// prompts, to measure a draft model's agreement with them.
type draftCalibration struct {
	target testmodel.Options
	// prompts are the rendered, tokenized prompts; replies the target's
	// greedy continuation of each, specReply tokens.
	prompts, replies [][]int32
	// measured caches the agreement of each Perturb tried (PerturbSeed
	// is fixed): calibrations for several α start from the same bracket.
	measured map[float64]float64
}

// newDraftCalibration runs the target greedily from each prompt, one
// token at a time, as the built-in backend (and a ring without drafts)
// does.
func newDraftCalibration(t testing.TB, target testmodel.Options, prompts []string, n int) *draftCalibration {
	t.Helper()
	m, text := loadModel(t, target)
	vocab := target.Vocab()
	c := &draftCalibration{target: target, measured: map[float64]float64{}}
	for _, p := range prompts {
		req := specRequest("target", p, int64(n))
		prompt, _, err := text.Request(&req)
		if err != nil {
			t.Fatal(err)
		}
		pipe, err := m.NewPipeline(nil)
		if err != nil {
			t.Fatal(err)
		}
		var reply []int32
		for in := prompt; len(reply) < n; {
			logits, err := pipe.Next(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			id := engine.Argmax(logits)
			// Whole words only: the benchmark counts differences in
			// words, which are then tokens one for one.
			if tok := vocab[id]; !strings.HasPrefix(tok, "▁") || len([]rune(tok)) < 2 {
				t.Fatalf("the target chose token %d %q, not a word piece, after %d tokens of prompt %q", id, tok, len(reply), p)
			}
			reply = append(reply, id)
			in = []int32{id}
		}
		c.prompts, c.replies = append(c.prompts, prompt), append(c.replies, reply)
	}
	return c
}

// agreement is the rate at which draft's greedy choice, given the
// target's own prefix, is the target's token, over every drafted
// position of the replies (the first token of a reply follows the prompt
// and is never drafted). Along the target's sequence that is the greedy
// acceptance rate α: a drafted token is accepted iff it is the target's
// greedy choice, and the prefix it is drafted after is always the
// target's (drafts accepted so far, or the target's own correction). A
// ring checks a subset of the positions (not the token that follows a
// loop's drafts all accepted), so its measured α agrees up to sampling.
func (c *draftCalibration) agreement(t testing.TB, draft testmodel.Options) float64 {
	t.Helper()
	m, _ := loadModel(t, draft)
	agree, total := 0, 0
	for i, prompt := range c.prompts {
		reply := c.replies[i]
		pipe, err := m.NewPipeline(nil)
		if err != nil {
			t.Fatal(err)
		}
		// One batched pass over the prompt and the reply but its last
		// token: row len(prompt)-1+k holds the draft's scores for reply[k].
		lg, err := pipe.Step(context.Background(), append(append([]int32(nil), prompt...), reply[:len(reply)-1]...))
		if err != nil {
			t.Fatal(err)
		}
		for k := 1; k < len(reply); k++ {
			total++
			if engine.Argmax(lg.Row(len(prompt)-1+k)) == reply[k] {
				agree++
			}
		}
	}
	return float64(agree) / float64(total)
}

// calibrateDraft finds by bisection the Perturb of a draft of the
// calibration's target (PerturbSeed fixed) whose greedy agreement with
// the target is within specAlphaTolerance of alpha, and returns it with
// the agreement measured. Agreement is 1 at Perturb 0 and falls, not
// strictly, as Perturb grows: the bisection keeps the closest value seen.
func (c *draftCalibration) calibrateDraft(t testing.TB, alpha float64) (testmodel.Options, float64) {
	t.Helper()
	if !(alpha > 0 && alpha <= 1) {
		t.Fatalf("calibrate a draft for α = %v: α must be in (0, 1]", alpha)
	}
	draft := func(p float64) testmodel.Options {
		o := c.target
		o.Perturb, o.PerturbSeed = p, c.target.Seed+1000
		return o
	}
	best, bestAgr := draft(0), 1.0
	consider := func(p float64) float64 {
		a, ok := c.measured[p]
		if !ok {
			a = c.agreement(t, draft(p))
			c.measured[p] = a
		}
		if math.Abs(a-alpha) < math.Abs(bestAgr-alpha) {
			best, bestAgr = draft(p), a
		}
		return a
	}
	if alpha == 1 {
		return best, bestAgr
	}
	// Grow the upper end until the agreement is below α, then bisect.
	lo, hi := 0.0, 0.25
	for consider(hi) > alpha {
		if lo, hi = hi, hi*2; hi > 1e4 {
			t.Fatalf("no Perturb up to %v brings the draft's agreement down to %v", hi, alpha)
		}
	}
	for i := 0; i < 40 && math.Abs(bestAgr-alpha) > specAlphaTolerance/2; i++ {
		mid := (lo + hi) / 2
		if consider(mid) > alpha {
			lo = mid
		} else {
			hi = mid
		}
	}
	if math.Abs(bestAgr-alpha) > specAlphaTolerance {
		t.Fatalf("calibrating a draft for α = %v: the closest agreement found is %v (Perturb %v)", alpha, bestAgr, best.Perturb)
	}
	return best, bestAgr
}

// TestDraftCalibration: on the benchmark's model and prompts, the
// unperturbed draft agrees with its target everywhere, and calibration
// finds a Perturb for each acceptance rate the benchmark measures; the
// lower the rate, the noisier the draft's head.
func TestDraftCalibration(t *testing.T) {
	if testing.Short() {
		t.Skip("calibration runs the benchmark model a few dozen times (seconds): not under -short")
	}
	c := newDraftCalibration(t, specBenchModel, specPrompts, specReply)
	same := specBenchModel
	same.PerturbSeed = 77 // no Perturb: the target's own bytes
	if got := c.agreement(t, same); got != 1 {
		t.Fatalf("the draft without Perturb agrees with its target at %v, want 1", got)
	}
	prev := 0.0
	for _, alpha := range []float64{0.95, 0.8, 0.5} {
		t.Run(fmt.Sprintf("alpha=%v", alpha), func(t *testing.T) {
			draft, got := c.calibrateDraft(t, alpha)
			if math.Abs(got-alpha) > specAlphaTolerance {
				t.Fatalf("calibrated agreement %v, want %v ± %v", got, alpha, specAlphaTolerance)
			}
			if draft.Perturb <= prev {
				t.Errorf("α %v needed Perturb %v, not more than the %v of a higher α", alpha, draft.Perturb, prev)
			}
			prev = draft.Perturb
			t.Logf("α %v: Perturb %.4f gives agreement %.4f", alpha, draft.Perturb, got)
		})
	}
}

// specHeader turns a request's speculative decoding off at the gateway
// (relaymsg.RingJob.NoSpeculation): the naive baseline.
const specHeader = "C0mpute-Speculation"

// specShort is the short reply whose time BenchmarkRingSpeculation
// subtracts from a specReply one's, leaving specReply-specShort decode
// tokens (see BenchmarkRingHops). One token: the prompt's pass yields it,
// so the difference is every decode loop of the long reply and nothing
// else. (A two-token reply would cost a whole loop for its one decoded
// token, which the difference would then take from the long reply's
// loops though not from its tokens, overstating a speculative rate.)
const specShort = 1

// specMember is a ring member process with its metrics endpoint.
type specMember struct {
	*ringMember
	metrics string // host:port of /metrics
}

// startSpecMembers starts n ring members as startWANMembers does, each
// behind a proxy adding oneWay to every byte sent to its stage listener,
// and each with the drafter draft (C0MPUTE_DRAFT: a draft GGUF file) and
// its metrics on a free port (C0MPUTE_METRICS_ADDR). It returns them by
// identity (rings.State's Primaries name them so).
func (e *env) startSpecMembers(t testing.TB, bin string, n int, oneWay time.Duration, draft string) map[string]*specMember {
	t.Helper()
	w := newWAN()
	members := map[string]*specMember{}
	for i := range n {
		ctx := context.Background()
		account := fmt.Sprintf("%s-member-%d", e.account, i)
		if err := e.store.CreateAccount(ctx, store.Account{ID: account, CreatedAt: time.Now()}); err != nil && !errors.Is(err, store.ErrExists) {
			t.Fatal(err)
		}
		token, err := e.stack.IssueWorkerToken(ctx, account)
		if err != nil {
			t.Fatal(err)
		}
		listen, metricsAddr := freeAddr(t), freeAddr(t)
		p := e.runWorkerd(t, bin, token, fmt.Sprintf("ring member %d", i),
			config.EnvBackend+"=builtin",
			config.EnvShard+"=1",
			config.EnvShardMemory+"=1Gi",
			config.EnvShardListen+"="+listen,
			config.EnvShardAdvertise+"="+w.proxy(t, fmt.Sprintf("member-%d", i), listen, oneWay),
			config.EnvDraft+"="+draft,
			config.EnvMetricsAddr+"="+metricsAddr)
		members[p.pubkey] = &specMember{ringMember: &ringMember{workerdProcess: p, account: account}, metrics: metricsAddr}
	}
	return members
}

// specStats are a driver's speculation counters
// (c0mpute_workerd_ring_spec_*), summed over any labels but gamma.
type specStats struct {
	loops                         float64
	byGamma                       map[int]float64 // loops by drafted tokens
	drafted, accepted, rejections float64
	loopSeconds, draftSeconds     float64
	families                      int // spec families present
}

// sub is s − o: the counts of what happened between two scrapes.
func (s specStats) sub(o specStats) specStats {
	d := specStats{loops: s.loops - o.loops, drafted: s.drafted - o.drafted, accepted: s.accepted - o.accepted,
		rejections: s.rejections - o.rejections, loopSeconds: s.loopSeconds - o.loopSeconds,
		draftSeconds: s.draftSeconds - o.draftSeconds, byGamma: map[int]float64{}, families: min(s.families, o.families)}
	for g, n := range s.byGamma {
		d.byGamma[g] = n - o.byGamma[g]
	}
	return d
}

// add accumulates o into s.
func (s *specStats) add(o specStats) {
	s.loops += o.loops
	s.drafted += o.drafted
	s.accepted += o.accepted
	s.rejections += o.rejections
	s.loopSeconds += o.loopSeconds
	s.draftSeconds += o.draftSeconds
	if s.byGamma == nil {
		s.byGamma = map[int]float64{}
	}
	for g, n := range o.byGamma {
		s.byGamma[g] += n
	}
	s.families = o.families
}

// maxScrape bounds what a scrape reads from a member's endpoint.
const maxScrape = 4 << 20

// scrapeSpec reads a member's speculation counters from its Prometheus
// endpoint (the text exposition). Families not there (a workerd without
// speculation) count as zero.
func scrapeSpec(t testing.TB, addr string) specStats {
	t.Helper()
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr + metrics.Path)
	if err != nil {
		t.Fatalf("scrape the driver's metrics at %s: %v", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxScrape+1))
	switch {
	case err != nil:
		t.Fatalf("scrape the driver's metrics at %s: %v", addr, err)
	case resp.StatusCode != http.StatusOK:
		t.Fatalf("scrape the driver's metrics at %s: HTTP %d", addr, resp.StatusCode)
	case len(body) > maxScrape:
		t.Fatalf("the driver's metrics at %s are over %d bytes", addr, maxScrape)
	}
	parser := expfmt.NewTextParser(prommodel.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse the driver's metrics at %s: %v", addr, err)
	}
	st := specStats{byGamma: map[int]float64{}}
	prefix := metrics.Namespace + "_ring_spec_"
	sum := func(name string, each func(m *dto.Metric, v float64)) float64 {
		f := fams[prefix+name]
		if f == nil {
			return 0
		}
		st.families++
		var total float64
		for _, m := range f.GetMetric() {
			v := m.GetCounter().GetValue()
			total += v
			if each != nil {
				each(m, v)
			}
		}
		return total
	}
	st.loops = sum("loops_total", func(m *dto.Metric, v float64) {
		for _, l := range m.GetLabel() {
			if l.GetName() != "gamma" {
				continue
			}
			g, err := strconv.Atoi(l.GetValue())
			if err != nil || g < 0 || g > speculate.MaxGamma {
				t.Fatalf("the driver's %sloops_total has gamma=%q: not 0..%d", prefix, l.GetValue(), speculate.MaxGamma)
			}
			st.byGamma[g] += v
		}
	})
	st.drafted = sum("drafted_tokens_total", nil)
	st.accepted = sum("accepted_tokens_total", nil)
	st.rejections = sum("rejections_total", nil)
	st.loopSeconds = sum("loop_seconds_total", nil)
	st.draftSeconds = sum("draft_seconds_total", nil)
	return st
}

// wordDiff counts the positions at which two replies' words differ (one
// reply running past the other's end included). The benchmark model's
// replies are word pieces only (newDraftCalibration checks the target's),
// so words are tokens one for one.
func wordDiff(a, b string) int {
	fa, fb := strings.Fields(a), strings.Fields(b)
	n := 0
	for i := range max(len(fa), len(fb)) {
		if i >= len(fa) || i >= len(fb) || fa[i] != fb[i] {
			n++
		}
	}
	return n
}

// BenchmarkRingSpeculation measures speculative decoding over a ring of
// 4 member processes whose stage connections each add 25 ms one way (a
// toxiproxy per stage listener: data travels only from stage s to s+1 on
// a ring connection — the way back carries TCP acknowledgements, which
// the proxy's two sockets answer locally — so each hop of a loop costs
// the 25 ms once, 100 ms a loop; BenchmarkRingHops measures ≈ that sum
// per token). For each acceptance rate α in {0.5, 0.8, 0.95} it
// calibrates a draft model (specBenchModel with a perturbed head, see
// calibrateDraft) whose greedy agreement with the target is α ± 0.03,
// starts the ring with that draft on every member (C0MPUTE_DRAFT), and
// over the 4 benchmark prompts (temperature 0, specReply tokens) reports:
//
//   - naive-tok/s and spec-tok/s: decode tokens a second with the
//     request header "C0mpute-Speculation: off" and without it. Decode
//     only, as BenchmarkRingHops: (time of a specReply reply − time of a
//     one-token one) over the specReply−1 tokens between, which cancels
//     the prompt, the gateway and the reply's setup (streaming would
//     measure the same from the first token's arrival, but workers batch
//     deltas into chunks, blurring that instant); speedup is their ratio;
//   - naive-diff-tokens and spec-diff-tokens: words (= tokens) at which
//     each reply differs from the whole model's in process (builtin on the
//     target file). Both must be 0: greedy speculation changes no token;
//   - alpha-calibrated, and alpha-measured from the driver's metrics over
//     the speculative specReply replies: accepted / (accepted +
//     rejections);
//   - tok/loop: decoded tokens (completion tokens − the first, which the
//     prompt's pass yields) over the driver's loops; loop-ms: mean loop
//     time T; draft-ms/loop: drafting time on the critical path;
//   - bound-tok/s: Σ_γ n_γ·E(α, γ) / Σ loop time, E(α, γ) = (1 −
//     α^(γ+1)) / (1 − α) with the measured α and the loops' counts by γ,
//     what the loops could yield at best; spec/bound: spec-tok/s over it.
//
// It is a figure for the README, not a pass/fail test (beyond the
// token differences):
//
//	go test ./infra/devnet -run '^$' -bench RingSpeculation -benchtime 1x
func BenchmarkRingSpeculation(b *testing.B) {
	bin := buildWorkerd(b)
	const stages, hop = 4, 25 * time.Millisecond
	cal := newDraftCalibration(b, specBenchModel, specPrompts, specReply)
	for _, alpha := range []float64{0.5, 0.8, 0.95} {
		b.Run(fmt.Sprintf("alpha=%v", alpha), func(b *testing.B) {
			draftOpts, calibrated := cal.calibrateDraft(b, alpha)
			// Not under b.TempDir: its name holds the sub-benchmark's "=",
			// which C0MPUTE_DRAFT reads as MODEL=FILE.
			dir, err := os.MkdirTemp("", "c0mpute-draft-")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { os.RemoveAll(dir) })
			draft := filepath.Join(dir, "draft.gguf")
			if err := testmodel.WriteFile(draft, draftOpts); err != nil {
				b.Fatal(err)
			}
			model := "ring-spec"
			cm, path := publishRing(b, model, specBenchModel, stages)
			e := newEnv(b, envOptions{credits: 10_000_000, models: []catalog.Model{cm}, rings: ringTimeouts})
			members := e.startSpecMembers(b, bin, stages, hop, draft)
			st := e.waitRing(model, stages)
			driver := members[st.Primaries[0].String()]
			if driver == nil {
				b.Fatalf("stage 0's primary %s is none of the members started", st.Primaries[0])
			}
			whole, err := builtin.New(path, builtin.WithModelID(model), builtin.WithLogger(testLog(b)))
			if err != nil {
				b.Fatal(err)
			}
			defer whole.Close()
			wants := make([]string, len(specPrompts))
			for i, p := range specPrompts {
				wants[i], _, _ = wholeReply(b, whole, model, specRequest(model, p, specReply))
			}

			type reply struct {
				took   time.Duration
				text   string
				tokens int64
			}
			run := func(prompt string, n int64, speculative bool) reply {
				params := openai.ChatCompletionNewParams{Model: model, Temperature: openai.Float(0), MaxTokens: openai.Int(n),
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}
				var opts []option.RequestOption
				if !speculative {
					opts = append(opts, option.WithHeader(specHeader, "off"))
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				start := time.Now()
				resp, err := e.client.Chat.Completions.New(ctx, params, opts...)
				took := time.Since(start)
				if err != nil {
					b.Fatalf("%d tokens (speculation %v): %v", n, speculative, err)
				}
				if resp.Usage.CompletionTokens != n {
					b.Fatalf("%d tokens (speculation %v): the reply has %d", n, speculative, resp.Usage.CompletionTokens)
				}
				return reply{took, resp.Choices[0].Message.Content, resp.Usage.CompletionTokens}
			}

			b.ResetTimer()
			var naiveDecode, specDecode time.Duration
			var decodeTokens, loopTokens int64
			var naiveDiff, specDiff int
			var spec specStats
			for range b.N {
				for i, p := range specPrompts {
					naiveShort, naiveLong := run(p, specShort, false), run(p, specReply, false)
					specShortReply := run(p, specShort, true)
					before := scrapeSpec(b, driver.metrics)
					specLong := run(p, specReply, true)
					spec.add(scrapeSpec(b, driver.metrics).sub(before))
					naiveDecode += naiveLong.took - naiveShort.took
					specDecode += specLong.took - specShortReply.took
					decodeTokens += specReply - specShort
					loopTokens += specLong.tokens - 1
					naiveDiff += wordDiff(naiveLong.text, wants[i])
					specDiff += wordDiff(specLong.text, wants[i])
				}
			}
			b.StopTimer()
			if now := e.ringState(model); len(now.Primaries) == 0 || now.Primaries[0] != st.Primaries[0] {
				b.Fatalf("the ring re-formed during the benchmark: stage 0 was %s, is now %v", st.Primaries[0], now.Primaries)
			}
			if naiveDiff != 0 || specDiff != 0 {
				b.Errorf("replies differ from the whole model's: %d tokens without speculation, %d with", naiveDiff, specDiff)
			}
			naiveRate := float64(decodeTokens) / naiveDecode.Seconds()
			specRate := float64(decodeTokens) / specDecode.Seconds()
			b.ReportMetric(naiveRate, "naive-tok/s")
			b.ReportMetric(specRate, "spec-tok/s")
			b.ReportMetric(specRate/naiveRate, "speedup")
			b.ReportMetric(float64(naiveDiff), "naive-diff-tokens")
			b.ReportMetric(float64(specDiff), "spec-diff-tokens")
			b.ReportMetric(calibrated, "alpha-calibrated")
			b.ReportMetric(float64(stages)*float64(hop.Microseconds())/1000, "hops-ms")
			b.ReportMetric(spec.loops, "loops")
			if spec.loops == 0 {
				// A driver without speculation (its metrics have no
				// loops): nothing more to derive.
				b.Logf("the driver counted no speculative loops (%d of its 6 %s* families present)", spec.families, metrics.Namespace+"_ring_spec_")
				return
			}
			measured := spec.accepted / max(spec.accepted+spec.rejections, 1)
			var bound float64
			for g, n := range spec.byGamma {
				bound += n * speculate.ExpectedTokens(measured, g)
			}
			bound /= spec.loopSeconds
			b.ReportMetric(measured, "alpha-measured")
			b.ReportMetric(float64(loopTokens)/spec.loops, "tok/loop")
			b.ReportMetric(spec.loopSeconds/spec.loops*1000, "loop-ms")
			b.ReportMetric(spec.draftSeconds/spec.loops*1000, "draft-ms/loop")
			b.ReportMetric(bound, "bound-tok/s")
			b.ReportMetric(specRate/bound, "spec/bound")
		})
	}
}
