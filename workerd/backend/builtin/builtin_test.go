package builtin_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/backend/backendtest"
	"github.com/c0mpute/c0mpute/workerd/backend/builtin"
)

func tiny(t testing.TB) (*builtin.Backend, string) {
	t.Helper()
	return writeModel(t, "tiny", testmodel.Options{Seed: 9, KVHeads: 2, ChatTemplate: jinjaTemplate}), "tiny"
}

func ptr[T any](v T) *T { return &v }

func greedyReq(text string, n int64) *oaiwire.ChatRequest {
	return &oaiwire.ChatRequest{Messages: []oaiwire.Message{backendtest.User(text)}, Temperature: ptr(0.0), MaxTokens: ptr(n)}
}

func TestModels(t *testing.T) {
	be, id := tiny(t)
	ms, err := be.Models(context.Background())
	if err != nil || len(ms) != 1 || ms[0] != id {
		t.Fatalf("models %v, %v; want [%s]", ms, err, id)
	}
	if be.Name() != "builtin" {
		t.Errorf("name %q", be.Name())
	}
	if got := builtin.ModelID("/a/b/Qwen2.5-0.5B-Q4_K_M.gguf"); got != "Qwen2.5-0.5B-Q4_K_M" {
		t.Errorf("ModelID: %q", got)
	}
}

// TestMaxTokens: the reply ends on the limit with finish length, and
// usage counts the prompt and the reply.
func TestMaxTokens(t *testing.T) {
	be, id := tiny(t)
	c := backendtest.Run(context.Background(), be, id, greedyReq("the cat", 7))
	if c.Error != "" {
		t.Fatal(c.Error)
	}
	if c.Result.FinishReason != "length" || c.Result.Usage.CompletionTokens != 7 || c.Result.Usage.PromptTokens == 0 ||
		c.Result.Usage.TotalTokens != c.Result.Usage.PromptTokens+7 {
		t.Errorf("result %+v", c.Result)
	}
	if n := len(strings.Fields(c.Content())); n != 7 {
		t.Errorf("%d words in %q, want 7 (one per token)", n, c.Content())
	}
	for _, d := range c.Deltas {
		if d.Content == "" {
			t.Errorf("empty delta")
		}
	}
}

// TestStop: a stop string ends the reply before it, with finish stop,
// and no delta shows any part of it.
func TestStop(t *testing.T) {
	be, id := tiny(t)
	full := backendtest.Run(context.Background(), be, id, greedyReq("hello", 20)).Content()
	words := strings.Fields(full)
	if len(words) < 10 {
		t.Fatalf("reply %q", full)
	}
	stop := " " + words[5] + " " + words[6]
	req := greedyReq("hello", 20)
	req.Stop = oaiwire.Stop{stop, "zzz"}
	c := backendtest.Run(context.Background(), be, id, req)
	want := full[:strings.Index(full, stop)]
	if c.Content() != want || c.Result.FinishReason != "stop" {
		t.Errorf("with stop %q: %q (%s), want %q (stop)", stop, c.Content(), c.Result.FinishReason, want)
	}
	for _, d := range c.Deltas {
		if strings.Contains(stop, d.Content) && strings.TrimSpace(d.Content) == words[5] {
			t.Errorf("delta %q shows part of the stop string", d.Content)
		}
	}
}

// TestSeed: sampling is deterministic for a seed.
func TestSeed(t *testing.T) {
	be, id := tiny(t)
	run := func(seed int64) string {
		req := greedyReq("hello", 15)
		req.Temperature, req.Seed = ptr(1.5), ptr(seed)
		c := backendtest.Run(context.Background(), be, id, req)
		if c.Error != "" {
			t.Fatal(c.Error)
		}
		return c.Content()
	}
	a, b, other := run(5), run(5), run(6)
	if a != b {
		t.Errorf("seed 5 twice: %q and %q", a, b)
	}
	if a == other {
		t.Errorf("seeds 5 and 6 gave the same %q", a)
	}
}

// TestCancel: cancelling the context stops the generation with the
// context's error; an emit error stops it with that error.
func TestCancel(t *testing.T) {
	be, id := tiny(t)
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err := be.Chat(ctx, id, greedyReq("hello", 200), func(oaiwire.Delta) error {
		if n++; n == 2 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n > 3 {
		t.Errorf("after cancel: %v, %d deltas", err, n)
	}
	boom := errors.New("client gone")
	_, err = be.Chat(context.Background(), id, greedyReq("hello", 200), func(oaiwire.Delta) error { return boom })
	if !errors.Is(err, boom) {
		t.Errorf("emit error: %v", err)
	}
}

// TestConcurrent: requests queue for the engine and all complete.
func TestConcurrent(t *testing.T) {
	be, id := tiny(t)
	want := backendtest.Run(context.Background(), be, id, greedyReq("hello", 10)).Content()
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := backendtest.Run(context.Background(), be, id, greedyReq("hello", 10)); got.Content() != want {
				t.Errorf("concurrent run: %q %s, want %q", got.Content(), got.Error, want)
			}
		}()
	}
	wg.Wait()
}

func TestBadRequests(t *testing.T) {
	be, id := tiny(t)
	long := strings.Repeat("abc ", 200) // beyond the 256-position context
	cases := []struct {
		name  string
		model string
		req   *oaiwire.ChatRequest
		want  string
	}{
		{"unknown model", "other", greedyReq("hi", 5), "not served"},
		{"tools", id, func() *oaiwire.ChatRequest {
			r := greedyReq("hi", 5)
			r.Tools = []oaiwire.Tool{{Type: "function"}}
			return r
		}(), "tools"},
		{"json schema", id, func() *oaiwire.ChatRequest {
			r := greedyReq("hi", 5)
			r.ResponseFormat = &oaiwire.ResponseFormat{Type: "json_schema"}
			return r
		}(), "response_format"},
		{"image", id, &oaiwire.ChatRequest{Messages: []oaiwire.Message{{Role: "user", Content: oaiwire.Content{IsParts: true,
			Parts: []oaiwire.Part{{Type: "image_url", ImageURL: &oaiwire.ImageURL{URL: "data:image/png;base64,AAAA"}}}}}}}, "image"},
		{"prompt too long", id, greedyReq(long, 5), "context"},
		{"penalty", id, func() *oaiwire.ChatRequest {
			r := greedyReq("hi", 5)
			r.FrequencyPenalty = ptr(0.5)
			return r
		}(), "penalties"},
	}
	for _, c := range cases {
		_, err := be.Chat(context.Background(), c.model, c.req, func(oaiwire.Delta) error { return nil })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.want)
		}
		if err != nil && !errors.Is(err, builtin.ErrRequest) {
			t.Errorf("%s: %v does not wrap ErrRequest", c.name, err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := builtin.New(filepath.Join(t.TempDir(), "missing.gguf")); err == nil {
		t.Error("missing file: no error")
	}
	path := filepath.Join(t.TempDir(), "junk.gguf")
	if err := testmodel.WriteFile(path, testmodel.Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := builtin.New(path, builtin.WithModelID("")); err == nil {
		t.Error("empty model id: no error")
	}
}

// TestDemo: the demo model scripts/dev falls back to loads and answers
// under its self-describing id.
func TestDemo(t *testing.T) {
	path := filepath.Join(t.TempDir(), testmodel.DemoModelID+".gguf")
	if err := testmodel.WriteFile(path, testmodel.Demo()); err != nil {
		t.Fatal(err)
	}
	be, err := builtin.New(path)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	ms, _ := be.Models(context.Background())
	if len(ms) != 1 || ms[0] != testmodel.DemoModelID {
		t.Fatalf("models %v", ms)
	}
	c := backendtest.Run(context.Background(), be, ms[0], greedyReq("héllo 世界", 8))
	if c.Error != "" || c.Result.Usage.CompletionTokens != 8 || len(strings.Fields(c.Content())) == 0 {
		t.Fatalf("demo reply %q %+v %s", c.Content(), c.Result, c.Error)
	}
}

// TestClose: Close waits for the running generation, and later requests
// fail with ErrClosed instead of touching the unmapped file.
func TestClose(t *testing.T) {
	be, id := tiny(t)
	started := make(chan struct{})
	done := make(chan error)
	go func() {
		n := 0
		_, err := be.Chat(context.Background(), id, greedyReq("hello", 40), func(oaiwire.Delta) error {
			if n++; n == 1 {
				close(started)
			}
			return nil
		})
		done <- err
	}()
	<-started
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the generation running at Close: %v", err)
	}
	if _, err := be.Chat(context.Background(), id, greedyReq("hello", 5), func(oaiwire.Delta) error { return nil }); !errors.Is(err, builtin.ErrClosed) {
		t.Fatalf("chat after close: %v", err)
	}
	if err := be.Close(); err != nil {
		t.Fatal("second close:", err)
	}
}

// TestTopPZero: OpenAI's top_p 0 keeps only the most likely token, so
// even a high temperature gives the greedy reply.
func TestTopPZero(t *testing.T) {
	be, id := tiny(t)
	want := backendtest.Run(context.Background(), be, id, greedyReq("hello", 12)).Content()
	req := greedyReq("hello", 12)
	req.Temperature, req.TopP, req.Seed = ptr(1.8), ptr(0.0), ptr(int64(3))
	if got := backendtest.Run(context.Background(), be, id, req); got.Content() != want {
		t.Errorf("top_p 0: %q %s, want the greedy %q", got.Content(), got.Error, want)
	}
}
