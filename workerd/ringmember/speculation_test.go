package ringmember

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/backend/backendtest"
	"github.com/c0mpute/c0mpute/workerd/speculate"
)

// draftFile writes a draft model for m's options: the same vocabulary,
// other weights (another seed), so its guesses are often wrong.
func draftFile(t *testing.T, o testmodel.Options) string {
	t.Helper()
	o.Seed += 1000
	o.Layers = 2
	path := filepath.Join(t.TempDir(), "draft.gguf")
	if err := testmodel.WriteFile(path, o); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSpeculationMatchesBuiltin: whatever drafts the driver (a draft
// model that is the target itself, so every draft is accepted; one of
// other weights, so many are rejected; lookup in the context; the
// request's prediction; none), a ring's reply is the built-in backend's
// on the whole file token for token, greedy and seeded-sampled, and its
// usage says how the drafts fared; every reply settles.
func TestSpeculationMatchesBuiltin(t *testing.T) {
	o := modelOptions("llama", testmodel.Q8_0)
	m := loadModel(t, "llama-q8_0", o)
	other := draftFile(t, o)
	reqs := func() []*oaiwire.ChatRequest {
		var rs []*oaiwire.ChatRequest
		for i, p := range prompts {
			rs = append(rs, greedy(p, 40, i == 0))
			sampled := greedy(p, 40, false)
			sampled.Temperature, sampled.Seed = ptr(0.8), ptr(int64(7+i))
			rs = append(rs, sampled)
		}
		return rs
	}
	type want struct{ accepted, rejected bool }
	for _, c := range []struct {
		name  string
		draft speculate.Spec
		// predict sets each request's prediction to its reference reply.
		predict bool
		want    want
	}{
		{"draft-model-the-target", speculate.Spec{Mode: speculate.ModeModel, Path: m.path}, false, want{accepted: true}},
		{"draft-model-other-weights", speculate.Spec{Mode: speculate.ModeModel, Path: other}, false, want{rejected: true}},
		{"lookup", speculate.Spec{Mode: speculate.ModeLookup}, false, want{}},
		{"prediction", speculate.Spec{Mode: speculate.ModeNone}, true, want{accepted: true}},
		{"none", speculate.Spec{Mode: speculate.ModeNone}, false, want{}},
	} {
		for _, stages := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/%d-stages", c.name, stages), func(t *testing.T) {
				tr := startInProcess(t, m, stages, WithDraft(speculate.Choice{Default: c.draft}))
				var accepted, rejected, greedyRejected int64
				for i, req := range reqs() {
					ref := m.reference(req)
					if c.predict {
						req.Prediction = &oaiwire.Prediction{Type: "content", Content: oaiwire.Content{Text: ref.Content()}}
					}
					got := tr.chat(t, req)
					if diff := same(got, ref); diff != "" {
						t.Fatalf("request %d: %s", i, diff)
					}
					tr.verify(t, got)
					d := got.Result.Usage.CompletionTokensDetails
					accepted += d.AcceptedPredictionTokens
					rejected += d.RejectedPredictionTokens
					if *req.Temperature == 0 {
						greedyRejected += d.RejectedPredictionTokens
					}
				}
				t.Logf("drafts accepted %d, rejected %d", accepted, rejected)
				if c.draft.Mode == speculate.ModeNone && !c.predict && accepted+rejected != 0 {
					t.Fatalf("no drafter, yet %d drafts accepted and %d rejected", accepted, rejected)
				}
				if c.want.accepted && accepted == 0 {
					t.Fatal("no draft was accepted")
				}
				if c.want.rejected && rejected == 0 {
					t.Fatal("no draft was rejected: the rollback went untested")
				}
				if c.draft.Path == m.path && greedyRejected != 0 {
					// (A sampled reply may reject the greedy draft.)
					t.Fatalf("the target drafting for itself had %d drafts of greedy replies rejected", greedyRejected)
				}
			})
		}
	}
}

// TestSpeculationOff: a job with NoSpeculation (the request header
// C0mpute-Speculation: off) drafts nothing, and answers the same.
func TestSpeculationOff(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	tr := startInProcess(t, m, 2, WithDraft(speculate.Choice{Default: speculate.Spec{Mode: speculate.ModeModel, Path: m.path}}))
	req := greedy(prompts[0], 24, false)
	ref := m.reference(req)
	on := tr.chat(t, req)
	if diff := same(on, ref); diff != "" {
		t.Fatal(diff)
	}
	if on.Result.Usage.CompletionTokensDetails.AcceptedPredictionTokens == 0 {
		t.Fatal("with speculation on, no draft was accepted")
	}
	job, _ := tr.ringJob(t)
	job.Ring.NoSpeculation = true
	var c backendtest.Collected
	res, done, err := tr.driver.Chat(t.Context(), job, req, func(d oaiwire.Delta) error {
		c.Deltas = append(c.Deltas, d)
		return nil
	})
	if err != nil || done == nil {
		t.Fatal(err)
	}
	c.Result = res
	if d := res.Usage.CompletionTokensDetails; d == nil || d.AcceptedPredictionTokens != 0 || d.RejectedPredictionTokens != 0 {
		t.Fatalf("speculation off: details %+v, want zeros", d)
	}
	if c.Content() != ref.Content() {
		t.Fatalf("speculation off: %q, want %q", c.Content(), ref.Content())
	}
	// Fed one token a loop: the ring ran the prompt and one position per
	// reply token but the last.
	if want := res.Usage.PromptTokens + res.Usage.CompletionTokens - 1; done.TokenEnd != want {
		t.Fatalf("speculation off: the ring ran %d positions, want %d", done.TokenEnd, want)
	}
}

// mappings counts the process's memory mappings of path.
func mappings(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip("no /proc/self/maps to count mappings in")
	}
	return strings.Count(string(b), path)
}

// TestDraftModelFreed: a driver's draft model is mapped while its ring
// serves and unmapped when the ring stops, and an assignment refused after
// the driver's checks leaves none behind.
func TestDraftModelFreed(t *testing.T) {
	o := modelOptions("llama", testmodel.Q8_0)
	m := loadModel(t, "llama-q8_0", o)
	draft := draftFile(t, o)
	keys := memberKeys(m.name+"-freed", 2)
	plan, hash := planFor(t, m, keys)
	tr := &testRing{m: m, plan: plan, hash: hash, keys: keys, servers: make([]*Server, 2), ctxTokens: planContext}
	newDriver(t, tr, WithDraft(speculate.Choice{Default: speculate.Spec{Mode: speculate.ModeModel, Path: draft}}))
	for range 3 {
		// No address for the next stage: refused.
		if err := tr.driver.Serve(tr.assignment(t, 0, map[shard.PublicKey]string{})); err == nil {
			t.Fatal("an assignment without the next stage's address was served")
		}
	}
	if n := mappings(t, draft); n != 0 {
		t.Fatalf("after 3 refused assignments the draft model is mapped %d times", n)
	}
	p1, _ := plan.Primary(1)
	if err := tr.driver.Serve(tr.assignment(t, 0, map[shard.PublicKey]string{p1.Node: "127.0.0.1:9"})); err != nil {
		t.Fatal(err)
	}
	if n := mappings(t, draft); n == 0 {
		t.Fatal("serving, the driver has not mapped its draft model")
	}
	if err := tr.driver.Close(); err != nil {
		t.Fatal(err)
	}
	if n := mappings(t, draft); n != 0 {
		t.Fatalf("after Close the draft model is mapped %d times", n)
	}
}

// TestTook: a reply that ends inside a step's tokens (Generate says how
// many it took) counts only those, as completion tokens and as accepted
// drafts.
func TestTook(t *testing.T) {
	for _, c := range []struct {
		name                   string
		last, accepted, took   int
		wantTokens, wantAccept int64
	}{
		{"all taken", 5, 4, 5, 10, 8},
		{"the last token not taken", 5, 4, 4, 9, 8},
		{"two drafts taken", 5, 4, 2, 7, 6},
		{"none taken", 5, 4, 0, 5, 4},
		{"a plain step not taken", 1, 0, 0, 9, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &driverJob{tokens: 10, spec: &speculation{accepted: 8, last: c.last, lastAccepted: c.accepted}}
			if c.last == 1 {
				d.spec.accepted = 4
			}
			d.Took(c.took)
			if d.tokens != c.wantTokens || d.spec.accepted != c.wantAccept {
				t.Fatalf("tokens %d, accepted %d; want %d and %d", d.tokens, d.spec.accepted, c.wantTokens, c.wantAccept)
			}
		})
	}
}

// takeRecorder is a MultiStepper of fixed steps that records what the
// generation loop says it took of each.
type takeRecorder struct {
	steps [][]int32
	took  []int
}

func (s *takeRecorder) Next(ctx context.Context, tokens []int32) (int32, error) {
	ids, err := s.NextN(ctx, tokens, 1)
	return ids[0], err
}

func (s *takeRecorder) NextN(_ context.Context, _ []int32, _ int) ([]int32, error) {
	ids := s.steps[0]
	s.steps = s.steps[1:]
	return ids, nil
}

func (s *takeRecorder) Took(n int) { s.took = append(s.took, n) }

// TestGenerateSaysWhatItTook: builtin.Text.Generate, stepping several
// tokens at a time, tells the stepper how many of a step it took when the
// reply ends inside it (an end token, the limit), and nothing otherwise.
func TestGenerateSaysWhatItTook(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	tr := startInProcess(t, m, 1)
	text := tr.driver.current().text
	// Three ordinary tokens (ids past the control tokens).
	cat, dog, sat := int32(testmodel.EOSID+10), int32(testmodel.EOSID+11), int32(testmodel.EOSID+12)
	for _, c := range []struct {
		name  string
		steps [][]int32
		limit int64
		want  []int
	}{
		{"an end token inside a step", [][]int32{{cat}, {dog, sat, testmodel.EOSID, cat}}, 20, []int{3}},
		{"the limit inside a step", [][]int32{{cat}, {dog, sat, cat}}, 3, []int{2}},
		{"steps taken whole", [][]int32{{cat}, {dog, sat}, {testmodel.EOSID}}, 20, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &takeRecorder{steps: c.steps}
			req := greedy(prompts[0], c.limit, false)
			prompt, _, err := text.Request(req)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := text.Generate(context.Background(), s, prompt, req, func(oaiwire.Delta) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(s.took) != fmt.Sprint(c.want) {
				t.Fatalf("took %v, want %v", s.took, c.want)
			}
		})
	}
}
