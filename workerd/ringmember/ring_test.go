package ringmember

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/backend/backendtest"
	"github.com/c0mpute/c0mpute/workerd/backend/builtin"
)

func ptr[T any](v T) *T { return &v }

// prompts include non-ASCII text (byte-fallback tokens in these
// vocabularies) and a system message.
var prompts = [][]oaiwire.Message{
	{backendtest.User("hello world, the cat sat on the mat")},
	{{Role: "system", Content: oaiwire.Content{Text: "réponds brièvement"}}, backendtest.User("héllo wörld — 日本語 ✓ 🐱 café")},
}

func greedy(msgs []oaiwire.Message, n int64, stream bool) *oaiwire.ChatRequest {
	return &oaiwire.ChatRequest{Messages: msgs, Temperature: ptr(0.0), MaxTokens: ptr(n), Stream: stream}
}

// ringModel is one of the matrix's models.
type ringModel struct {
	name string
	arch string
	typ  testmodel.TensorType
}

var ringModels = []ringModel{
	{"llama-q8_0", "llama", testmodel.Q8_0},
	{"llama-q4_k", "llama", testmodel.Q4_K},
	{"qwen2-q8_0", "qwen2", testmodel.Q8_0},
	{"qwen2-q4_k", "qwen2", testmodel.Q4_K},
}

// chatCase is one request the ring must answer exactly as the built-in
// backend does; check, when set, also proves the case tests what it
// names (a stop string that stops, a limit that cuts).
type chatCase struct {
	name  string
	req   *oaiwire.ChatRequest
	check func(backendtest.Collected) error
}

// chatCases builds the requests for a model from its built-in replies.
func chatCases(t *testing.T, m *testModel) []chatCase {
	t.Helper()
	var cs []chatCase
	for i, p := range prompts {
		for _, stream := range []bool{false, true} {
			cs = append(cs, chatCase{name: fmt.Sprintf("greedy-%d-stream=%v", i, stream), req: greedy(p, 24, stream)})
		}
	}
	full := m.reference(greedy(prompts[0], 24, false))
	sampled := greedy(prompts[0], 24, true)
	sampled.Temperature, sampled.Seed = ptr(0.8), ptr(int64(7))
	cs = append(cs, chatCase{name: "sampled-seed-7", req: sampled, check: func(c backendtest.Collected) error {
		if c.Content() == full.Content() {
			return fmt.Errorf("the seeded reply %q is the greedy one: the sampler would go untested", c.Content())
		}
		return nil
	}})
	cs = append(cs, chatCase{name: "max-tokens-5", req: greedy(prompts[1], 5, false), check: func(c backendtest.Collected) error {
		if c.Result.FinishReason != "length" || c.Result.Usage.CompletionTokens != 5 {
			return fmt.Errorf("finish %q after %d tokens, want length after 5", c.Result.FinishReason, c.Result.Usage.CompletionTokens)
		}
		return nil
	}})
	words := strings.Fields(full.Content())
	if full.Error != "" || len(words) < 8 {
		t.Fatalf("built-in reply %q (%s): too short to cut with a stop string", full.Content(), full.Error)
	}
	// A stop string that first occurs past the reply's start, so the cut
	// reply is neither empty nor whole.
	stop, cut := "", -1
	for i := 2; i+1 < len(words) && cut <= 0; i++ {
		stop = " " + words[i] + " " + words[i+1]
		cut = strings.Index(full.Content(), stop)
	}
	if cut <= 0 {
		t.Fatalf("built-in reply %q repeats itself: no stop string cuts it", full.Content())
	}
	withStop := greedy(prompts[0], 24, true)
	withStop.Stop = oaiwire.Stop{"zzz", stop}
	cs = append(cs, chatCase{name: "stop-string", req: withStop, check: func(c backendtest.Collected) error {
		if c.Result.FinishReason != "stop" || c.Content() != full.Content()[:cut] {
			return fmt.Errorf("with stop %q: %q (%s), want %q (stop)", stop, c.Content(), c.Result.FinishReason, full.Content()[:cut])
		}
		return nil
	}})
	return cs
}

// TestRingMatchesBuiltin: rings of 2, 3 and 4 stages, every stage but the
// driver its own OS process holding only its own blobs, answer every
// request exactly as the built-in backend does on the whole file (deltas,
// finish reason, usage), and every reply's receipts settle with
// shard.Verify.
func TestRingMatchesBuiltin(t *testing.T) {
	type run struct {
		model  ringModel
		stages []int
	}
	runs := []run{}
	for _, m := range ringModels {
		runs = append(runs, run{m, []int{2, 3, 4}})
	}
	if raceEnabled {
		// Under the race detector every stage process is instrumented
		// too: a smaller matrix still crosses every code path.
		runs = []run{{ringModels[0], []int{2, 4}}, {ringModels[3], []int{3}}}
		t.Logf("reduced matrix under -race: %d of %d models", len(runs), len(ringModels))
	}
	for _, r := range runs {
		t.Run(r.model.name, func(t *testing.T) {
			m := loadModel(t, r.model.name, modelOptions(r.model.arch, r.model.typ))
			cases := chatCases(t, m)
			want := make([]backendtest.Collected, len(cases))
			for i, c := range cases {
				want[i] = m.reference(c.req)
				if c.check != nil {
					if err := c.check(want[i]); err != nil {
						t.Fatalf("%s: the built-in reply does not test it: %v", c.name, err)
					}
				}
			}
			for _, n := range r.stages {
				t.Run(fmt.Sprintf("%d-stages", n), func(t *testing.T) {
					tr := startProcesses(t, m, n)
					t.Logf("plan %s: %s", tr.hash.String()[:12], describe(tr))
					for i, c := range cases {
						got := tr.chat(t, c.req)
						if diff := same(got, want[i]); diff != "" {
							t.Fatalf("%s: the ring's reply differs from the built-in backend's:\n%s", c.name, diff)
						}
						tr.verify(t, got)
					}
				})
			}
		})
	}
}

// describe lists the plan's stages and layer ranges.
func describe(tr *testRing) string {
	var b strings.Builder
	for s := 0; s < tr.plan.Stages; s++ {
		pm, _ := tr.plan.Primary(s)
		fmt.Fprintf(&b, "[%d,%d) ", pm.LayerStart, pm.LayerEnd)
	}
	return b.String()
}

// TestStageKilled: a stage process killed mid-job makes Chat fail with the
// ring's error — not a step timeout (set far beyond the test's own
// limit): the driver sees its next stage's or its last stage's
// connection end, or, for a stage further in, the stage after it passes
// the failure on around the ring.
func TestStageKilled(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	for _, c := range []struct{ stages, stage int }{{3, 1}, {3, 2}, {4, 2}} {
		stage := c.stage
		t.Run(fmt.Sprintf("stage-%d-of-%d", stage, c.stages), func(t *testing.T) {
			tr := startProcesses(t, m, c.stages, WithStepTimeout(10*waitLimit))
			job, _ := tr.ringJob(t)
			n := 0
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			_, done, err := tr.driver.Chat(ctx, job, greedy(prompts[0], 200, true), func(oaiwire.Delta) error {
				if n++; n == 3 {
					tr.children[stage].kill(t)
				}
				return nil
			})
			if err == nil || done != nil {
				t.Fatalf("chat after killing stage %d: %v, %v; want an error", stage, err, done)
			}
			if n < 3 {
				t.Fatalf("the chat ended after %d deltas, before the kill: %v", n, err)
			}
			if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "no answer from the ring within") {
				t.Fatalf("the failure was found by a timeout, not the stage's end: %v", err)
			}
			t.Logf("after killing stage %d: %v", stage, err)
		})
	}
}

// TestInProcessRings: one-stage rings (the driver alone) and rings whose
// prompt crosses several chunks (a 5-position chunk) answer as the
// built-in backend does, and settle.
func TestInProcessRings(t *testing.T) {
	m := loadModel(t, "qwen2-q8_0", modelOptions("qwen2", testmodel.Q8_0))
	for _, c := range []struct {
		stages int
		opts   []Option
	}{
		{1, nil},
		{3, []Option{WithPromptChunk(5)}},
		{2, []Option{WithPromptChunk(1)}},
	} {
		t.Run(fmt.Sprintf("%d-stages-%d-options", c.stages, len(c.opts)), func(t *testing.T) {
			tr := startInProcess(t, m, c.stages, c.opts...)
			for i, p := range prompts {
				req := greedy(p, 12, i == 0)
				if i == 1 {
					req.Temperature, req.Seed = ptr(0.8), ptr(int64(7))
				}
				got := tr.chat(t, req)
				if diff := same(got, m.reference(req)); diff != "" {
					t.Fatalf("prompt %d:\n%s", i, diff)
				}
				tr.verify(t, got)
			}
		})
	}
}

// TestConcurrentJobs: jobs on one ring queue for it and all complete with
// the built-in backend's replies.
func TestConcurrentJobs(t *testing.T) {
	m := loadModel(t, "llama-q4_k", modelOptions("llama", testmodel.Q4_K))
	tr := startInProcess(t, m, 2)
	req := greedy(prompts[0], 8, false)
	want := m.reference(req)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := tr.chat(t, req)
			if diff := same(got, want); diff != "" {
				t.Error(diff)
			}
		}()
	}
	wg.Wait()
}

// TestChatRefusals: a request the engine cannot serve is refused as the
// built-in backend refuses it; a job for another plan, or on a member
// that is not the driver, is refused with ErrNotServing.
func TestChatRefusals(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	tr := startInProcess(t, m, 2)
	tools := greedy(prompts[0], 4, false)
	tools.Tools = []oaiwire.Tool{{Type: "function"}}
	if c := tr.chat(t, tools); !strings.Contains(c.Error, "tools") {
		t.Errorf("tools: %q", c.Error)
	}
	job, _ := tr.ringJob(t)
	_, _, err := tr.driver.Chat(context.Background(), job, tools, func(oaiwire.Delta) error { return nil })
	if !errors.Is(err, builtin.ErrRequest) {
		t.Errorf("tools: %v does not wrap builtin.ErrRequest", err)
	}
	job.Ring.Plan[0] ^= 1
	if _, _, err := tr.driver.Chat(context.Background(), job, greedy(prompts[0], 4, false), func(oaiwire.Delta) error { return nil }); !errors.Is(err, ErrNotServing) {
		t.Errorf("another plan: %v", err)
	}
	job, _ = tr.ringJob(t)
	if _, _, err := tr.servers[1].Chat(context.Background(), job, greedy(prompts[0], 4, false), func(oaiwire.Delta) error { return nil }); !errors.Is(err, ErrNotServing) {
		t.Errorf("stage 1: %v", err)
	}
	job.ID = "bad\x00id"
	if _, _, err := tr.driver.Chat(context.Background(), job, greedy(prompts[0], 4, false), func(oaiwire.Delta) error { return nil }); err == nil {
		t.Error("a job id with a control byte was taken")
	}
	// The ring still serves.
	req := greedy(prompts[0], 6, false)
	if diff := same(tr.chat(t, req), m.reference(req)); diff != "" {
		t.Fatal(diff)
	}
}

// TestDropAndServeAgain: dropping the plan mid-job fails the job with
// ErrNotServing and refuses later jobs; serving the plan again (the
// other stage kept it) serves jobs again; Drop of another plan changes
// nothing.
func TestDropAndServeAgain(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	tr := startInProcess(t, m, 2)
	req := greedy(prompts[0], 10, true)
	want := m.reference(req)
	tr.driver.Drop(shard.Hash{9})
	if diff := same(tr.chat(t, req), want); diff != "" {
		t.Fatalf("after dropping another plan: %s", diff)
	}
	job, _ := tr.ringJob(t)
	n := 0
	_, done, err := tr.driver.Chat(context.Background(), job, req, func(oaiwire.Delta) error {
		if n++; n == 2 {
			tr.driver.Drop(tr.hash)
		}
		return nil
	})
	if !errors.Is(err, ErrNotServing) || done != nil {
		t.Fatalf("chat dropped mid-job: %v, %v", err, done)
	}
	if c := tr.chat(t, req); !strings.Contains(c.Error, "serves no plan") {
		t.Fatalf("chat after drop: %q", c.Error)
	}
	peers := map[shard.PublicKey]string{}
	for s, srv := range tr.servers {
		pm, _ := tr.plan.Primary(s)
		peers[pm.Node] = srv.Addr().String()
	}
	if err := tr.driver.Serve(tr.assignment(t, 0, peers)); err != nil {
		t.Fatal(err)
	}
	got := tr.chat(t, req)
	if diff := same(got, want); diff != "" {
		t.Fatalf("served again: %s", diff)
	}
	tr.verify(t, got)
}
