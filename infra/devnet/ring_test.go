package devnet_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/rings"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/devnet"
	"github.com/c0mpute/c0mpute/infra/ollamatest"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/agent"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/backend/builtin"
	"github.com/c0mpute/c0mpute/workerd/config"
	"github.com/c0mpute/c0mpute/workerd/ringmember"
	"github.com/c0mpute/c0mpute/workerd/shardblob"
)

// ringTemplate renders chats as ollamatest.Template does (see
// builtin's e2e tests), so the ring, the built-in engine and Ollama get
// the same prompt from the same file.
const ringTemplate = `{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}{%- endfor %}<|assistant|>`

// ringTimeouts make formation quick on one machine.
var ringTimeouts = devnet.RingTimeouts{Debounce: 50 * time.Millisecond, RTT: 20 * time.Second, Ready: time.Minute, Retry: time.Second}

// publishRing writes a generated model, publishes it as a ring model of
// exactly stages stages (signed manifest and blobs served over HTTP, as
// `workerd shard publish` and a blob server would) and returns its
// catalogue entry and the file.
func publishRing(t testing.TB, id string, o testmodel.Options, stages int) (catalog.Model, string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, id+".gguf")
	if err := testmodel.WriteFile(path, o); err != nil {
		t.Fatal(err)
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blobs := filepath.Join(dir, "blobs")
	if _, err := shardblob.Publish(path, blobs, id, key); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(blobs)))
	t.Cleanup(srv.Close)
	return catalog.Model{ID: id, Price: 10, Ring: &catalog.RingSpec{BlobURL: srv.URL, MinStages: stages, MaxStages: stages,
		ContextTokens: int64(o.Context)}}, path
}

// ringMember is a `workerd --backend builtin --shard` process.
type ringMember struct {
	*workerdProcess
	account string
}

// startMember runs a ring member as its own process, configured as a
// contributor configures it (environment variables), with a fresh
// identity and a worker token of its own contributor account.
func (e *env) startMember(t testing.TB, bin string, i int, settings ...string) *ringMember {
	t.Helper()
	return e.startMemberAt(t, bin, i, "127.0.0.1:0", "", settings...)
}

// startMemberAt is startMember with the stage listener on listen, told to
// peers as advertise ("" for listen's own address); settings are more
// NAME=value environment settings.
func (e *env) startMemberAt(t testing.TB, bin string, i int, listen, advertise string, settings ...string) *ringMember {
	t.Helper()
	ctx := context.Background()
	account := fmt.Sprintf("%s-member-%d", e.account, i)
	if err := e.store.CreateAccount(ctx, store.Account{ID: account, CreatedAt: time.Now()}); err != nil && !errors.Is(err, store.ErrExists) {
		t.Fatal(err)
	}
	token, err := e.stack.IssueWorkerToken(ctx, account)
	if err != nil {
		t.Fatal(err)
	}
	p := e.runWorkerd(t, bin, token, fmt.Sprintf("ring member %d", i), append([]string{
		config.EnvBackend + "=builtin",
		config.EnvShard + "=1",
		config.EnvShardMemory + "=1Gi",
		config.EnvShardListen + "=" + listen,
		config.EnvShardAdvertise + "=" + advertise}, settings...)...)
	return &ringMember{workerdProcess: p, account: account}
}

// ringState is the stack's view of the model's ring.
func (e *env) ringState(model string) rings.State {
	for _, st := range e.stack.Rings.Rings() {
		if st.Model == model {
			return st
		}
	}
	return rings.State{}
}

// waitRing waits until a ring of stages serves model and /v1/models says
// so, and returns its state.
func (e *env) waitRing(model string, stages int, but ...string) rings.State {
	e.t.Helper()
	var st rings.State
	e.waitFor(fmt.Sprintf("a ring of %d stages serving %s", stages, model), func() bool {
		st = e.ringState(model)
		if !st.Serving || st.Stages != stages {
			return false
		}
		for _, p := range st.Primaries {
			if slices.Contains(but, p.String()) {
				return false
			}
		}
		m, err := e.client.Models.Get(context.Background(), model)
		return err == nil && strings.Contains(m.RawJSON(), `"available":true`) &&
			strings.Contains(m.RawJSON(), fmt.Sprintf(`"ring":{"stages":%d}`, stages))
	})
	return st
}

// wholeReply is the built-in engine's reply to req on the whole file.
func wholeReply(t testing.TB, be *builtin.Backend, model string, req oaiwire.ChatRequest) (string, oaiwire.Usage, string) {
	t.Helper()
	var text strings.Builder
	res, err := be.Chat(context.Background(), model, &req, func(d oaiwire.Delta) error { text.WriteString(d.Content); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return text.String(), res.Usage, res.FinishReason
}

// ringCase is one request compared between the ring and the whole model.
type ringCase struct {
	name   string
	msgs   []openai.ChatCompletionMessageParamUnion
	params func(*openai.ChatCompletionNewParams)
}

func ringCases() []ringCase {
	hello := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello world, the cat sat on the mat")}
	return []ringCase{
		{"greedy", hello, func(p *openai.ChatCompletionNewParams) { p.Temperature = openai.Float(0); p.MaxTokens = openai.Int(40) }},
		{"greedy non-ascii", []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("réponds brièvement"),
			openai.UserMessage("héllo wörld — 日本語 ✓ 🐱 café")}, func(p *openai.ChatCompletionNewParams) {
			p.Temperature = openai.Float(0)
			p.MaxTokens = openai.Int(40)
		}},
		{"sampled with a seed", hello, func(p *openai.ChatCompletionNewParams) {
			p.Temperature = openai.Float(0.8)
			p.Seed = openai.Int(7)
			p.MaxTokens = openai.Int(40)
		}},
	}
}

// request is the wire request the gateway relays for a case.
func (c ringCase) request(model string) (openai.ChatCompletionNewParams, oaiwire.ChatRequest) {
	p := openai.ChatCompletionNewParams{Model: model, Messages: c.msgs}
	c.params(&p)
	var req oaiwire.ChatRequest
	req.Model = model
	for _, m := range c.msgs {
		switch {
		case m.OfSystem != nil:
			req.Messages = append(req.Messages, oaiwire.Message{Role: "system", Content: oaiwire.Content{Text: m.OfSystem.Content.OfString.Value}})
		default:
			req.Messages = append(req.Messages, oaiwire.Message{Role: "user", Content: oaiwire.Content{Text: m.OfUser.Content.OfString.Value}})
		}
	}
	if p.Temperature.Valid() {
		v := p.Temperature.Value
		req.Temperature = &v
	}
	if p.Seed.Valid() {
		v := p.Seed.Value
		req.Seed = &v
	}
	if p.MaxTokens.Valid() {
		v := p.MaxTokens.Value
		req.MaxTokens = &v
	}
	return p, req
}

// TestRingServesLikeTheWholeModel: a model published as a ring and served
// by separate workerd processes, each holding only its own layers, gives
// replies token-for-token identical to the built-in engine on the whole
// file — greedy and seeded sampling, streamed and not, with a stop string
// — for rings of 2, 3 and 4 stages, llama and qwen2, Q8_0 and Q4_K; the
// job's earning reaches the stages' accounts, split by their layers.
func TestRingServesLikeTheWholeModel(t *testing.T) {
	bin := buildWorkerd(t)
	for _, tc := range []struct {
		name   string
		o      testmodel.Options
		stages int
	}{
		{"llama-q8_0-2", testmodel.Options{Seed: 9, Type: testmodel.Q8_0, Layers: 4, KVHeads: 2, Context: 512, ChatTemplate: ringTemplate}, 2},
		{"qwen2-q4_k-3", testmodel.Options{Seed: 12, Type: testmodel.Q4_K, Arch: "qwen2", Layers: 4, Embedding: 256, FeedForward: 512, KVHeads: 2, Context: 512, ChatTemplate: ringTemplate}, 3},
		{"llama-q4_k-4", testmodel.Options{Seed: 9, Type: testmodel.Q4_K, Layers: 4, Embedding: 256, FeedForward: 512, KVHeads: 2, Context: 512, ChatTemplate: ringTemplate}, 4},
		{"qwen2-q8_0-4", testmodel.Options{Seed: 12, Type: testmodel.Q8_0, Arch: "qwen2", Layers: 5, KVHeads: 2, Context: 512, ChatTemplate: ringTemplate}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			model := "ring-" + tc.name
			cm, path := publishRing(t, model, tc.o, tc.stages)
			e := newEnv(t, envOptions{credits: 100_000, models: []catalog.Model{cm}, rings: ringTimeouts})
			members := map[string]*ringMember{}
			for i := range tc.stages {
				m := e.startMember(t, bin, i)
				members[m.pubkey] = m
			}
			st := e.waitRing(model, tc.stages)
			whole, err := builtin.New(path, builtin.WithModelID(model), builtin.WithLogger(testLog(t)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { whole.Close() })
			jobs := 0
			for _, c := range ringCases() {
				params, req := c.request(model)
				want, wantUsage, wantFinish := wholeReply(t, whole, model, req)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				resp, err := e.client.Chat.Completions.New(ctx, params)
				cancel()
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				jobs++
				if got := resp.Choices[0].Message.Content; got != want || string(resp.Choices[0].FinishReason) != wantFinish ||
					resp.Usage.CompletionTokens != wantUsage.CompletionTokens || resp.Usage.PromptTokens != wantUsage.PromptTokens {
					t.Errorf("%s: the ring said %q (%s, %d+%d tokens), the whole model %q (%s, %d+%d)", c.name, got, resp.Choices[0].FinishReason,
						resp.Usage.PromptTokens, resp.Usage.CompletionTokens, want, wantFinish, wantUsage.PromptTokens, wantUsage.CompletionTokens)
				}
				if len(strings.Fields(want)) < 5 {
					t.Errorf("%s: reply %q is not the generated words", c.name, want)
				}
				// Streamed: the same text, delta by delta.
				ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
				stream := e.client.Chat.Completions.NewStreaming(ctx, params)
				var acc openai.ChatCompletionAccumulator
				for stream.Next() {
					acc.AddChunk(stream.Current())
				}
				err = stream.Err()
				cancel()
				if err != nil {
					t.Fatalf("%s streamed: %v", c.name, err)
				}
				jobs++
				if got := acc.Choices[0].Message.Content; got != want {
					t.Errorf("%s streamed: the ring said %q, the whole model %q", c.name, got, want)
				}
				// A stop string cuts both at the same place.
				stop := stopWord(want)
				if stop == "" {
					t.Fatalf("%s: no stop word in %q", c.name, want)
				}
				params.Stop = openai.ChatCompletionNewParamsStopUnion{OfString: openai.String(stop)}
				req.Stop = oaiwire.Stop{stop}
				wantStop, _, finish := wholeReply(t, whole, model, req)
				ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
				resp, err = e.client.Chat.Completions.New(ctx, params)
				cancel()
				if err != nil {
					t.Fatalf("%s with stop: %v", c.name, err)
				}
				jobs++
				if got := resp.Choices[0].Message.Content; got != wantStop || string(resp.Choices[0].FinishReason) != finish || finish != "stop" {
					t.Errorf("%s with stop %q: the ring said %q (%s), the whole model %q (%s)", c.name, stop, got, resp.Choices[0].FinishReason, wantStop, finish)
				}
			}
			// Money: every job charged once, its earning (70%) split
			// over the stages' accounts and nothing else.
			if got := e.balance().Credits; got != 100_000-int64(jobs)*cm.Price {
				t.Errorf("the user has %d credits after %d jobs of %d", got, jobs, cm.Price)
			}
			var earned int64
			for _, p := range st.Primaries {
				m := members[p.String()]
				a, err := e.store.GetAccount(context.Background(), m.account)
				if err != nil {
					t.Fatal(err)
				}
				if a.Earned <= 0 {
					t.Errorf("stage member %s (%s) earned nothing", m.account, p)
				}
				earned += a.Earned
			}
			if want := int64(jobs) * cm.Price * 70 / 100; earned != want {
				t.Errorf("the stages earned %d in all, want %d for %d jobs", earned, want, jobs)
			}
		})
	}
}

// TestRingAgainstOllama: the ring's greedy reply equals a real Ollama's on
// the same file.
func TestRingAgainstOllama(t *testing.T) {
	bin := buildWorkerd(t)
	for _, tc := range []struct {
		name   string
		o      testmodel.Options
		stages int
	}{
		{"llama-q8_0-3", testmodel.Options{Seed: 9, Type: testmodel.Q8_0, Layers: 4, KVHeads: 2, Context: 512, ChatTemplate: ringTemplate}, 3},
		{"qwen2-q4_k-2", testmodel.Options{Seed: 12, Type: testmodel.Q4_K, Arch: "qwen2", Layers: 4, Embedding: 256, FeedForward: 512, KVHeads: 2, Context: 512, ChatTemplate: ringTemplate}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			model := "ring-vs-ollama-" + tc.name
			srv := ollamatest.TinyModel(t, model, tc.o)
			cm, _ := publishRing(t, model, tc.o, tc.stages)
			e := newEnv(t, envOptions{credits: 10_000, models: []catalog.Model{cm}, rings: ringTimeouts})
			for i := range tc.stages {
				e.startMember(t, bin, i)
			}
			e.waitRing(model, tc.stages)
			const n = 40
			msgs := []map[string]string{{"role": "user", "content": "hello world, the cat sat on the mat"}}
			want := srv.GreedyChat(t, model, msgs, n)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp, err := e.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model,
				Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage(msgs[0]["content"])},
				Temperature: openai.Float(0), MaxTokens: openai.Int(n)})
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Choices[0].Message.Content; got != want {
				t.Errorf("the ring and Ollama differ:\nring:   %q\nollama: %q", got, want)
			}
		})
	}
}

// TestRingStageKilledMidJob: a stage of a serving ring is killed (SIGKILL)
// while a reply streams. The job ends by the usual rules — after the first
// token, an error and a refund: the user pays nothing and no stage earns
// — and the ring re-forms from the members still connected (a spare
// joins), and serves the next request exactly as before.
func TestRingStageKilledMidJob(t *testing.T) {
	bin := buildWorkerd(t)
	o := testmodel.Options{Seed: 9, Type: testmodel.Q8_0, Layers: 4, KVHeads: 2, Context: 4096, ChatTemplate: ringTemplate}
	for _, victim := range []struct {
		name  string
		stage int
	}{{"last stage", 1}, {"driver", 0}} {
		t.Run(victim.name, func(t *testing.T) {
			model := "ring-kill"
			cm, path := publishRing(t, model, o, 2)
			const credits = 10_000
			e := newEnv(t, envOptions{credits: credits, models: []catalog.Model{cm}, rings: ringTimeouts})
			members := map[string]*ringMember{}
			for i := range 3 {
				m := e.startMember(t, bin, i)
				members[m.pubkey] = m
			}
			st := e.waitRing(model, 2)
			killed := members[st.Primaries[victim.stage].String()]

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			stream := e.client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: model,
				Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tell me a long story")},
				Temperature: openai.Float(0.8), Seed: openai.Int(3), MaxTokens: openai.Int(3000)})
			got := ""
			for stream.Next() {
				if c := stream.Current(); len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
					if got == "" {
						killed.sigkill(t) // the kill happened: sigkill checks the exit
					}
					got += c.Choices[0].Delta.Content
				}
			}
			if got == "" {
				t.Fatal("no token arrived before the stream ended")
			}
			if stream.Err() == nil {
				t.Fatalf("the stream ended without an error after the %s was killed (%d bytes)", victim.name, len(got))
			}
			// The refund is settled as the job ends, which may be a moment
			// after the client saw the error.
			e.waitFor("the refund", func() bool { return e.balance().Credits == credits })
			for _, m := range members {
				a, err := e.store.GetAccount(context.Background(), m.account)
				if err != nil {
					t.Fatal(err)
				}
				if a.Earned != 0 {
					t.Errorf("member %s earned %d for a job that failed", m.account, a.Earned)
				}
			}
			// The ring re-forms without the killed member, and serves.
			e.waitRing(model, 2, killed.pubkey)
			whole, err := builtin.New(path, builtin.WithModelID(model), builtin.WithLogger(testLog(t)))
			if err != nil {
				t.Fatal(err)
			}
			defer whole.Close()
			params, req := ringCases()[0].request(model)
			want, _, _ := wholeReply(t, whole, model, req)
			resp, err := e.client.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Choices[0].Message.Content != want {
				t.Errorf("the re-formed ring said %q, the whole model %q", resp.Choices[0].Message.Content, want)
			}
			if e.balance().Credits != credits-cm.Price {
				t.Errorf("the user has %d credits, want %d", e.balance().Credits, credits-cm.Price)
			}
		})
	}
}

// lyingRing is a ring member whose driver lies about the ring's work in
// its done: what a cheating first stage, or a stage whose receipt went
// wrong, would hand the gateway.
type lyingRing struct {
	*ringmember.Member
	lie  func(d *relaymsg.RingDone)
	last *relaymsg.RingDone // the previous job's settlement, for replays
}

func (l *lyingRing) Chat(ctx context.Context, job *relaymsg.Job, emit func(oaiwire.Delta) error) (backend.Result, *relaymsg.RingDone, error) {
	res, done, err := l.Member.Chat(ctx, job, emit)
	if err == nil && done != nil {
		honest := *done
		honest.Receipts = slices.Clone(done.Receipts)
		l.lie(done)
		if l.last != nil && done.Input == (shard.Hash{}) {
			// A replay: the previous job's whole settlement.
			done = l.last
		}
		l.last = &honest
	}
	return res, done, err
}

// noWholeModel is the backend of a member that serves ring stages only.
type noWholeModel struct{}

func (noWholeModel) Name() string                             { return "builtin" }
func (noWholeModel) Models(context.Context) ([]string, error) { return nil, nil }
func (noWholeModel) Chat(context.Context, string, *oaiwire.ChatRequest, func(oaiwire.Delta) error) (backend.Result, error) {
	return backend.Result{}, errors.New("ring stages only")
}

// TestRingLiarsArePaidNothing: when the ring's settlement does not verify
// — a stage receipt with a forged signature, an activation chain that does
// not link up, the receipts of an earlier job replayed — nobody is paid,
// the user is refunded, and the reply ends with ring_rejected. An honest
// job on the same ring before each lie is paid.
func TestRingLiarsArePaidNothing(t *testing.T) {
	o := testmodel.Options{Seed: 9, Type: testmodel.Q8_0, Layers: 4, KVHeads: 2, Context: 512, ChatTemplate: ringTemplate}
	for _, tc := range []struct {
		name string
		lie  func(d *relaymsg.RingDone)
	}{
		{"forged receipt signature", func(d *relaymsg.RingDone) { d.Receipts[len(d.Receipts)-1].Sig[0] ^= 1 }},
		{"broken activation chain", func(d *relaymsg.RingDone) { d.Output[0] ^= 1 }},
		{"receipts of an earlier job", func(d *relaymsg.RingDone) { d.Input = shard.Hash{} }},
		{"a stage's receipt missing", func(d *relaymsg.RingDone) { d.Receipts = d.Receipts[:len(d.Receipts)-1] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			model := "ring-liar"
			cm, _ := publishRing(t, model, o, 2)
			const credits = 10_000
			e := newEnv(t, envOptions{credits: credits, models: []catalog.Model{cm}, rings: ringTimeouts})
			var accounts []string
			var lying atomic.Bool
			for i := range 2 {
				ctx := context.Background()
				account := fmt.Sprintf("%s-member-%d", e.account, i)
				if err := e.store.CreateAccount(ctx, store.Account{ID: account, CreatedAt: time.Now()}); err != nil {
					t.Fatal(err)
				}
				accounts = append(accounts, account)
				token, err := e.stack.IssueWorkerToken(ctx, account)
				if err != nil {
					t.Fatal(err)
				}
				_, key, err := ed25519.GenerateKey(rand.Reader)
				if err != nil {
					t.Fatal(err)
				}
				m, err := ringmember.NewMember(ringmember.MemberConfig{Key: key, Dir: t.TempDir(), Memory: 1 << 30,
					Listen: "127.0.0.1:0", Advertise: "127.0.0.1:0", Uplink: 100_000_000, Log: testLog(t)})
				if err != nil {
					t.Fatal(err)
				}
				ring := &lyingRing{Member: m, lie: func(d *relaymsg.RingDone) {
					if lying.Load() {
						tc.lie(d)
					}
				}}
				runCtx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				a := agent.New(agent.Config{RelayURL: e.stack.RelayURL, Token: token, Key: key, Backend: noWholeModel{}, Ring: ring,
					Log: testLog(t), Version: "test", DrainTimeout: 5 * time.Second})
				go func() { defer close(done); _ = a.Run(runCtx) }()
				t.Cleanup(func() { cancel(); <-done; m.Close() })
			}
			e.waitRing(model, 2)
			earned := func() (sum int64) {
				for _, acct := range accounts {
					a, err := e.store.GetAccount(context.Background(), acct)
					if err != nil {
						t.Fatal(err)
					}
					sum += a.Earned
				}
				return sum
			}
			params, _ := ringCases()[0].request(model)
			if _, err := e.client.Chat.Completions.New(context.Background(), params); err != nil {
				t.Fatalf("the honest job: %v", err)
			}
			if got := earned(); got != cm.Price*70/100 {
				t.Fatalf("the honest job paid the stages %d, want %d", got, cm.Price*70/100)
			}
			lying.Store(true)
			_, err := e.client.Chat.Completions.New(context.Background(), params)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.Code != "ring_rejected" {
				t.Fatalf("the lying ring's job ended with %v, want the ring_rejected error", err)
			}
			e.waitFor("the refund", func() bool { return e.balance().Credits == credits-cm.Price })
			if got := earned(); got != cm.Price*70/100 {
				t.Errorf("after the lie the stages have earned %d, want the honest job's %d only", got, cm.Price*70/100)
			}
			// The ring that lied is void; with its culprit left out, two
			// members cannot form another.
			e.waitFor("the lying ring voided", func() bool { return !e.ringState(model).Serving })
		})
	}
}

// ringTap records what ring members tell the gateway (each one's
// announced layer time) and the inputs of every plan the gateway assigns
// them: the capabilities and RTT rows the planner placed members from.
type ringTap struct {
	mu     sync.Mutex
	claims map[shard.PublicKey]int64
	inputs map[shard.Hash]shard.Inputs
}

// tappedRing is a ring member whose control messages the tap also sees.
type tappedRing struct {
	*ringmember.Member
	tap *ringTap
}

func (r *tappedRing) Attach(offers []relaymsg.RingOffer, send func(any) error) {
	r.Member.Attach(offers, func(m any) error {
		if m, ok := m.(*relaymsg.RingAnnounce); ok {
			r.tap.mu.Lock()
			r.tap.claims[m.Capability.Node] = m.Capability.LayerMicros
			r.tap.mu.Unlock()
		}
		return send(m)
	})
}

func (r *tappedRing) Handle(m any) {
	if m, ok := m.(*relaymsg.RingAssign); ok {
		r.tap.mu.Lock()
		r.tap.inputs[m.Hash] = m.Inputs
		r.tap.mu.Unlock()
	}
	r.Member.Handle(m)
}

// effective is what the planner priced a member at, from the inputs it
// planned with: the median (the lower, for an even count) of the layer
// times the other members' rows observed for it, its claim if none did.
func effective(in *shard.Inputs, node shard.PublicKey) int64 {
	var obs []int64
	for _, row := range in.RTT {
		if row.From == in.Params.Coordinator {
			continue
		}
		for _, p := range row.Peers {
			if row.From != node && p.To == node && p.LayerMicros > 0 {
				obs = append(obs, p.LayerMicros)
			}
		}
	}
	slices.Sort(obs)
	if len(obs) == 0 {
		for _, c := range in.Capabilities {
			if c.Node == node {
				return c.LayerMicros
			}
		}
		return 0
	}
	return obs[(len(obs)-1)/2]
}

// TestRingLiarIsRemeasured: a member that claims one layer takes 1 µs is
// timed by its peers at probe (its bench layer's replies checked bit for
// bit), every row lists what they observed, and the plan places it at
// the median observation, not its claim: it holds more layers than an
// honest primary only if its peers measured it at least as fast. (Which of members with the same real speed is fastest is
// chance; the planner's rule itself is pinned, deterministically, by
// functions/shard TestPlanObservedLayerTime.)
func TestRingLiarIsRemeasured(t *testing.T) {
	// Layers large enough (about a millisecond each) that a layer's time,
	// not the jitter of a loopback round trip, is what peers observe.
	o := testmodel.Options{Seed: 9, Type: testmodel.Q8_0, Layers: 6, Embedding: 512, FeedForward: 2048, Heads: 4, KVHeads: 2,
		Context: 512, ChatTemplate: ringTemplate}
	model := "ring-fast-liar"
	cm, _ := publishRing(t, model, o, 2)
	e := newEnv(t, envOptions{credits: 10_000, models: []catalog.Model{cm}, rings: ringTimeouts})
	tap := &ringTap{claims: map[shard.PublicKey]int64{}, inputs: map[shard.Hash]shard.Inputs{}}
	var liar shard.PublicKey
	for i := range 3 {
		ctx := context.Background()
		account := fmt.Sprintf("%s-member-%d", e.account, i)
		if err := e.store.CreateAccount(ctx, store.Account{ID: account, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		token, err := e.stack.IssueWorkerToken(ctx, account)
		if err != nil {
			t.Fatal(err)
		}
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		cfg := ringmember.MemberConfig{Key: key, Dir: t.TempDir(), Memory: 1 << 30,
			Listen: "127.0.0.1:0", Advertise: "127.0.0.1:0", Uplink: 100_000_000, Log: testLog(t)}
		if i == 0 {
			cfg.LayerMicrosOverride = 1
			liar = shard.KeyOf(key)
		}
		m, err := ringmember.NewMember(cfg)
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		a := agent.New(agent.Config{RelayURL: e.stack.RelayURL, Token: token, Key: key, Backend: noWholeModel{}, Ring: &tappedRing{m, tap},
			Log: testLog(t), Version: "test", DrainTimeout: 5 * time.Second})
		go func() { defer close(done); _ = a.Run(runCtx) }()
		t.Cleanup(func() { cancel(); <-done; m.Close() })
	}
	st := e.waitRing(model, 2)
	tap.mu.Lock()
	defer tap.mu.Unlock()
	if tap.claims[liar] != 1 {
		t.Fatalf("the liar announced %d µs per layer, want its override of 1", tap.claims[liar])
	}
	// The inputs the serving plan was made from (later rows may differ:
	// members re-measure).
	in, ok := tap.inputs[st.Plan]
	if !ok {
		t.Fatalf("no member was assigned the serving plan %s", st.Plan)
	}
	listed := false
	for _, row := range in.RTT {
		if row.From == in.Params.Coordinator {
			continue // the gateway's nominal row observes nothing
		}
		for _, p := range row.Peers {
			if p.LayerMicros == 0 {
				t.Errorf("%s's row lists %s without a layer time: its bench was not timed", row.From, p.To)
			}
			listed = listed || row.From != liar && p.To == liar
		}
	}
	switch eff := effective(&in, liar); {
	case !listed && slices.Contains(st.Primaries, liar):
		t.Fatalf("no peer's row lists the liar, yet it holds a stage (at %d µs per layer)", eff)
	case !listed:
		// On a loaded machine every probe of it can run out of time: it
		// is then left out like an unreachable member, never placed at
		// its claim.
		t.Logf("no peer reached the liar within its probe: it was left out of the ring")
		return
	case eff <= 1:
		// Its peers timed it (every row's layer times are checked above),
		// but a bench round trip minus a noisy baseline ping can floor at
		// 1 µs on a loaded machine: the placement below still follows
		// what they observed.
		t.Logf("the liar's peers observed %d µs per layer, within their ping's noise", eff)
	}
	for s, p := range st.Primaries {
		t.Logf("stage %d: %d layers, claims %d µs, placed at %d µs (liar: %v)", s, st.Layers[s], tap.claims[p], effective(&in, p), p == liar)
	}
	li := slices.Index(st.Primaries, liar)
	if li < 0 {
		return // not a primary: it holds no layers
	}
	for s, p := range st.Primaries {
		if p != liar && st.Layers[li] > st.Layers[s] && effective(&in, liar) > effective(&in, p) {
			t.Errorf("the liar holds %d layers, stage %d's honest member %d, though its peers measured it slower (%d µs against %d µs)",
				st.Layers[li], s, st.Layers[s], effective(&in, liar), effective(&in, p))
		}
	}
}
