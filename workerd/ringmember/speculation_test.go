package ringmember

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
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
				var accepted, rejected int64
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
				if c.draft.Path == m.path && rejected != 0 {
					t.Fatalf("the target drafting for itself had %d drafts rejected", rejected)
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
