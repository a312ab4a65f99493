package cheat_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mr-tron/base58"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/c0mpute/c0mpute/functions/canary"
	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/devnet"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
	"github.com/c0mpute/c0mpute/infra/ollamatest"
	"github.com/c0mpute/c0mpute/infra/testenv"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/agent"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/backend/builtin"
	"github.com/c0mpute/c0mpute/workerd/backend/ollama"
	"github.com/c0mpute/c0mpute/workerd/backend/openaicompat"
)

func TestMain(m *testing.M) {
	code := m.Run()
	ollamatest.StopShared()
	os.Exit(code)
}

const (
	model = "tiny"
	// otherModel is the cheater's cheaper stand-in: other weights.
	otherModel = "tiny-other"
	price      = 10
	share      = 70
	earning    = price * share / 100
	// honestJobs is how many real jobs the honest workers must complete,
	// none struck, for the suite to pass.
	honestJobs = 1000
	// detectionBound is the most jobs (real ones and canaries) a cheater
	// may serve before it is quarantined.
	detectionBound = 12
	// runLimit bounds the whole run: a liveness bound only.
	runLimit = 8 * time.Minute
	// marker is in every user prompt: it must not reach a log or the store.
	marker = "zq-marker-7f3a9c"
)

// jinjaTemplate renders chats as ollamatest.Template does, so that the
// built-in engine and Ollama see the same tokens.
const jinjaTemplate = `{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}{%- endfor %}<|assistant|>`

var (
	honestWeights = testmodel.Options{Seed: 9, KVHeads: 2, ChatTemplate: jinjaTemplate}
	otherWeights  = testmodel.Options{Seed: 23, KVHeads: 2, ChatTemplate: jinjaTemplate}
)

// prompts are users' requests; each carries the marker.
var prompts = []string{
	"Tell me a story about a cat on a mat.",
	"What does the dog see at night?",
	"Write a line about the sea and the sky.",
	"Describe a big red tree in the sun.",
	"hello world, how is the day?",
	"Which bird sings over the house?",
}

// worker is one participant: its account, identity and role.
type worker struct {
	name    string
	account string
	pubkey  string
	honest  bool
}

// suite is the running network and what the test measures.
type suite struct {
	t     *testing.T
	stack *devnet.Stack
	store store.Store
	dump  func() []byte
	logs  *testenv.Buffer

	workers []*worker

	mu sync.Mutex
	// detected is each cheater's reputation when it was first seen out
	// of active standing.
	detected map[string]store.Reputation
	reps     map[string]store.Reputation
	errs     map[string]int
	requests atomic.Int64
}

func TestCheatersAreQuarantined(t *testing.T) {
	if testing.Short() {
		t.Skip("the adversarial suite serves over a thousand jobs on a real Ollama")
	}
	srv := ollamatest.TinyModel(t, model, honestWeights)
	ollamatest.TinyModel(t, otherModel, otherWeights)
	s := start(t)

	ctx := context.Background()
	userKey, err := s.stack.CreateAccount(ctx, "user", 100_000, "grant-user")
	if err != nil {
		t.Fatal(err)
	}
	gguf := writeGGUF(t, honestWeights)
	bi, err := builtin.New(gguf, builtin.WithModelID(model))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bi.Close() })
	ref := s.join("ollama", true, ollama.New(srv.URL()), map[string]string{model: model})
	if err := s.store.SetTrusted(ctx, ref.account, ref.pubkey, true); err != nil {
		t.Fatal(err)
	}
	s.join("builtin", true, bi, map[string]string{model: model})
	s.join("openai", true, openaicompat.New(srv.URL()), map[string]string{model: model})

	// The network has been running: the canary runner holds reference
	// replies from the trusted worker when the cheaters join.
	if !poll(time.Minute, func() bool { return s.stack.Canaries.References(model) >= 4 }) {
		t.Fatal("the canary runner made no reference replies")
	}
	canned := fakeOpenAI(t, func(body map[string]any) (string, usage) {
		return "Sure! Here is a clear and helpful answer to your question, with all the details you need.", usage{20, 18}
	})
	empty := fakeOpenAI(t, func(map[string]any) (string, usage) { return "", usage{20, 0} })
	s.join("canned", false, openaicompat.New(canned.URL), map[string]string{model: model})
	s.join("empty", false, openaicompat.New(empty.URL), map[string]string{model: model})
	s.join("other-model", false, ollama.New(srv.URL()), map[string]string{model: otherModel})
	s.join("inflate", false, openaicompat.New(inflating(t, srv.URL()).URL), map[string]string{model: model})

	runCtx, stop := context.WithTimeout(ctx, runLimit)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { s.watch(runCtx, stop) })
	client := openai.NewClient(option.WithBaseURL(s.stack.APIURL+"/"), option.WithAPIKey(userKey), option.WithMaxRetries(0))
	for i := range 3 {
		wg.Go(func() { s.traffic(runCtx, client, i) })
	}
	wg.Wait()
	s.stack.Canaries.Wait()
	s.report()
}

// start brings up the gateway with canaries, on the store the suite runs
// on, logging into a buffer the privacy check reads.
func start(t *testing.T) *suite {
	s := &suite{t: t, logs: &testenv.Buffer{}, detected: map[string]store.Reputation{}, reps: map[string]store.Reputation{}, errs: map[string]int{}}
	s.store, s.dump = dynamotest.SuiteStoreWithDump(t)
	limits := devnet.ScriptedLimits()
	limits.RatePerMinute = 100_000
	limits.QueueWait = 15 * time.Second
	limits.FirstToken = 15 * time.Second
	limits.Job = time.Minute
	limits.WorkerSharePercent = share
	log := slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	stack, err := devnet.Start(context.Background(), devnet.Config{Store: s.store, APIAddr: "127.0.0.1:0", RelayAddr: "127.0.0.1:0",
		Models: []catalog.Model{{ID: model, Price: price}}, Limits: limits, BatchWindow: devnet.DevBatchWindow, Log: log,
		Canaries: &canary.Config{Every: 2 * time.Second, Tick: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stack.Close() })
	s.stack = stack
	return s
}

// join runs the real workerd agent over be on a new account, and waits
// until it is registered.
func (s *suite) join(name string, honest bool, be backend.Backend, models map[string]string) *worker {
	t := s.t
	ctx := context.Background()
	w := &worker{name: name, account: "acct-" + name, honest: honest}
	if _, err := s.stack.CreateAccount(ctx, w.account, 0, ""); err != nil {
		t.Fatal(err)
	}
	tok, err := s.stack.IssueWorkerToken(ctx, w.account)
	if err != nil {
		t.Fatal(err)
	}
	pub, key, err := ed25519.GenerateKey(crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	w.pubkey = base58.Encode(pub)
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	a := agent.New(agent.Config{RelayURL: s.stack.RelayURL, Token: tok, Key: key, Backend: be, Models: models,
		Log: slog.New(slog.NewTextHandler(s.logs, nil)).With("worker", name), Version: "cheat-test", DrainTimeout: 2 * time.Second})
	go func() { defer close(done); _ = a.Run(actx) }()
	t.Cleanup(func() { cancel(); <-done })
	if !poll(30*time.Second, func() bool {
		ws, err := s.store.Workers(ctx)
		if err != nil {
			return false
		}
		for _, x := range ws {
			if x.Pubkey == w.pubkey && x.Registered {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("worker %s did not register", name)
	}
	s.workers = append(s.workers, w)
	return w
}

// watch polls the reputations: it records when each cheater leaves active
// standing, and ends the run once every cheater is out and the honest
// workers completed honestJobs.
func (s *suite) watch(ctx context.Context, stop context.CancelFunc) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var honestDone int64
		out := 0
		s.mu.Lock()
		for _, w := range s.workers {
			rep, err := s.store.GetReputation(ctx, w.account, w.pubkey)
			if err != nil {
				continue
			}
			s.reps[w.name] = rep
			if w.honest {
				honestDone += rep.JobsCompleted
				continue
			}
			if _, ok := s.detected[w.name]; !ok && rep.Standing != store.StandingActive {
				s.detected[w.name] = rep
			}
			if _, ok := s.detected[w.name]; ok {
				out++
			}
		}
		s.mu.Unlock()
		if out == len(s.workers)-3 && honestDone >= honestJobs {
			stop()
			return
		}
	}
}

// traffic is one user sending requests with the official SDK until the run
// ends: mostly whole replies, every fourth one streamed.
func (s *suite) traffic(ctx context.Context, client openai.Client, n int) {
	for i := 0; ctx.Err() == nil; i++ {
		p := prompts[rand.IntN(len(prompts))] + " (" + marker + ")"
		params := openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(int64(8 + rand.IntN(17))),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(p)}}
		s.requests.Add(1)
		var err error
		if (i+n)%4 == 0 {
			stream := client.Chat.Completions.NewStreaming(ctx, params)
			for stream.Next() {
			}
			err = stream.Err()
		} else {
			_, err = client.Chat.Completions.New(ctx, params)
		}
		if err != nil && ctx.Err() == nil {
			s.mu.Lock()
			s.errs[errorCode(err)]++
			s.mu.Unlock()
		}
	}
}

// errorCode is an API error's code, or the error's text.
func errorCode(err error) string {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return apiErr.Code
	}
	if s := err.Error(); strings.Contains(s, "reply_rejected") {
		return "reply_rejected"
	}
	return err.Error()
}

// earnings reads a worker's account and reputation as of one moment: the
// canary runner keeps judging while the report is read, and a canary that
// passes credits both in one transaction, so a rep read before the account
// and one read after that agree bracket an account read with no credit in
// between.
func (s *suite) earnings(ctx context.Context, w *worker) (store.Account, store.Reputation) {
	t := s.t
	for try := 0; ; try++ {
		before, err := s.store.GetReputation(ctx, w.account, w.pubkey)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		acct, err := s.store.GetAccount(ctx, w.account)
		if err != nil {
			t.Fatal(err)
		}
		after, err := s.store.GetReputation(ctx, w.account, w.pubkey)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		if before == after || try == 100 {
			return acct, after
		}
	}
}

// report checks and logs what the run measured.
func (s *suite) report() {
	t := s.t
	ctx := context.Background()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.workers {
		if rep, err := s.store.GetReputation(ctx, w.account, w.pubkey); err == nil {
			s.reps[w.name] = rep
		}
	}
	var honestDone, honestEmpty, realJobs int64
	var table strings.Builder
	fmt.Fprintf(&table, "%-12s %-11s %8s %8s %8s %8s %8s %8s\n", "worker", "state", "jobs", "rejected", "canaries", "failed", "earned", "detected")
	for _, w := range s.workers {
		acct, rep := s.earnings(ctx, w)
		s.reps[w.name] = rep
		realJobs += rep.JobsCompleted + rep.JobsRejected
		det := "-"
		if d, ok := s.detected[w.name]; ok {
			det = fmt.Sprintf("after %d", d.JobsCompleted+d.JobsRejected+d.CanariesPassed+d.CanariesFailed)
		}
		fmt.Fprintf(&table, "%-12s %-11s %8d %8d %8d %8d %8d %8s\n", w.name, rep.Standing, rep.JobsCompleted, rep.JobsRejected,
			rep.CanariesPassed+rep.CanariesFailed, rep.CanariesFailed, rep.EarnedCredits, det)
		// Every credit an identity earned is an account's, and every one
		// is for a job or a canary that passed: rejected work earns
		// nothing (nor does a canary a banned identity passes).
		paid := earning * (rep.JobsCompleted + rep.CanariesPassed)
		if acct.Earned != rep.EarnedCredits || rep.EarnedCredits > paid || (w.honest && rep.EarnedCredits != paid) {
			t.Errorf("%s: account earned %d, identity %d, for %d jobs and %d canaries passed (want %d each)",
				w.name, acct.Earned, rep.EarnedCredits, rep.JobsCompleted, rep.CanariesPassed, earning)
		}
		if w.honest {
			honestDone += rep.JobsCompleted
			honestEmpty += rep.JobsRejected
			if rep.Standing != store.StandingActive || rep.Strikes != 0 || rep.CanariesFailed != 0 || rep.JobsCompleted < 20 {
				t.Errorf("honest worker %s: %s with %d strikes, %d canaries failed (last %q), %d jobs",
					w.name, rep.Standing, rep.Strikes, rep.CanariesFailed, rep.LastReason, rep.JobsCompleted)
			}
			continue
		}
		d, ok := s.detected[w.name]
		switch {
		case !ok:
			t.Errorf("cheater %s was never quarantined: %+v", w.name, rep)
		case d.JobsCompleted+d.JobsRejected+d.CanariesPassed+d.CanariesFailed > detectionBound:
			t.Errorf("cheater %s quarantined after %d jobs, want at most %d", w.name,
				d.JobsCompleted+d.JobsRejected+d.CanariesPassed+d.CanariesFailed, detectionBound)
		case rep.JobsCompleted > d.JobsCompleted:
			// Jobs in flight when the verdict came are refused.
			t.Errorf("cheater %s completed %d jobs after its quarantine", w.name, rep.JobsCompleted-d.JobsCompleted)
		case rep.EarnedCredits > d.EarnedCredits+earning*(rep.CanariesPassed-d.CanariesPassed):
			// A passed canary is all a quarantined identity earns by.
			t.Errorf("cheater %s earned %d credits after its quarantine, %d canaries passed", w.name,
				rep.EarnedCredits-d.EarnedCredits, rep.CanariesPassed-d.CanariesPassed)
		}
	}
	counts := s.stack.Canaries.Counts()
	t.Logf("workers after %d user requests (%d real jobs served, %d honest; %d honest replies were empty and re-served, no strike):\n%s",
		s.requests.Load(), realJobs, honestDone, honestEmpty, table.String())
	t.Logf("canaries: %d sent, %d passed, %d failed, %d without a verdict; overhead %.1f%% of jobs",
		counts.Sent, counts.Passed, counts.Failed, counts.Inconclusive, 100*float64(counts.Sent)/float64(counts.Sent+realJobs))
	if honestDone < honestJobs {
		t.Errorf("honest workers completed %d jobs, want at least %d", honestDone, honestJobs)
	}
	for code, n := range s.errs {
		// A streamed reply rejected at its end, and a job whose every
		// attempt went to a cheater, are the users' only errors.
		if code != "reply_rejected" && code != "worker_lost" {
			t.Errorf("%d user requests failed with %q", n, code)
		}
	}
	t.Logf("user-visible errors: %v", s.errs)
	if bytes.Contains(s.logs.Bytes(), []byte(marker)) {
		t.Error("a prompt reached the logs")
	}
	if bytes.Contains(s.dump(), []byte(marker)) {
		t.Error("a prompt reached the store")
	}
}

func writeGGUF(t *testing.T, o testmodel.Options) string {
	b, err := testmodel.Bytes(o)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), model+".gguf")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

type usage struct{ prompt, completion int64 }

// fakeOpenAI is a cheater's inference server: OpenAI's streaming API over
// whatever reply answers.
func fakeOpenAI(t *testing.T, answer func(body map[string]any) (string, usage)) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"`+model+`","object":"model"}]}`)
		case "/v1/chat/completions":
			var body map[string]any
			_ = json.NewDecoder(r.Body).Decode(&body)
			text, u := answer(body)
			w.Header().Set("Content-Type", "text/event-stream")
			chunk := func(v any) {
				b, _ := json.Marshal(v)
				_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
			}
			for _, word := range strings.SplitAfter(text, " ") {
				if word != "" {
					chunk(map[string]any{"id": "x", "object": "chat.completion.chunk", "choices": []any{
						map[string]any{"index": 0, "delta": map[string]any{"content": word}}}})
				}
			}
			chunk(map[string]any{"id": "x", "object": "chat.completion.chunk", "choices": []any{
				map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}})
			chunk(map[string]any{"id": "x", "object": "chat.completion.chunk", "choices": []any{},
				"usage": map[string]any{"prompt_tokens": u.prompt, "completion_tokens": u.completion, "total_tokens": u.prompt + u.completion}})
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// inflating proxies to the real Ollama's OpenAI API and multiplies the
// usage it reports by 10: real text, false counts.
func inflating(t *testing.T, ollamaURL string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), r.Method, ollamaURL+r.URL.Path, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if data, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(data, `"usage"`) {
				var m map[string]any
				if json.Unmarshal([]byte(data), &m) == nil {
					if u, ok := m["usage"].(map[string]any); ok {
						for _, k := range []string{"completion_tokens", "total_tokens"} {
							if n, ok := u[k].(float64); ok {
								u[k] = n * 10
							}
						}
						b, _ := json.Marshal(m)
						line = "data: " + string(b)
					}
				}
			}
			_, _ = io.WriteString(w, line+"\n")
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// poll checks cond until it holds or d passes.
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
