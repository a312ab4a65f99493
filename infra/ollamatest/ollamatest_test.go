package ollamatest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/infra/ollamatest"
	"github.com/c0mpute/c0mpute/infra/testenv"
	"github.com/c0mpute/c0mpute/infra/testmodel"
)

func call(t *testing.T, method, url, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, b)
		}
	}
	return resp.StatusCode
}

// TestServer runs a real ollama serve, creates the generated model in it,
// and checks Ollama reads the GGUF as written and runs it.
func TestServer(t *testing.T) {
	start := time.Now()
	s := ollamatest.Start(t)
	t.Logf("serve ready in %v", time.Since(start))
	gguf, err := testmodel.Bytes(testmodel.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.CreateModel(t, "tiny", gguf)
	s.CreateModel(t, "tiny2", gguf) // blob already there: HEAD skips the upload

	var tags struct {
		Models []struct {
			Name    string `json:"name"`
			Size    int64  `json:"size"`
			Details struct {
				Family string `json:"family"`
			} `json:"details"`
		} `json:"models"`
	}
	call(t, "GET", s.URL()+"/api/tags", "", &tags)
	names := map[string]int64{}
	for _, m := range tags.Models {
		names[m.Name] = m.Size
		if m.Details.Family != "llama" {
			t.Errorf("%s family %q", m.Name, m.Details.Family)
		}
	}
	if names["tiny:latest"] < int64(len(gguf)) || names["tiny2:latest"] == 0 {
		t.Errorf("tags: %v", names)
	}

	// Ollama's own GGUF reader sees the metadata and tensors as written.
	var show struct {
		ModelInfo  map[string]any `json:"model_info"`
		Parameters string         `json:"parameters"`
		Template   string         `json:"template"`
	}
	call(t, "POST", s.URL()+"/api/show", `{"model":"tiny"}`, &show)
	for k, want := range map[string]any{
		"general.architecture":          "llama",
		"llama.embedding_length":        64.0,
		"llama.block_count":             2.0,
		"llama.attention.head_count":    4.0,
		"llama.attention.head_count_kv": 4.0,
		"llama.feed_forward_length":     128.0,
		"llama.context_length":          256.0,
		"tokenizer.ggml.model":          "llama",
		"tokenizer.ggml.bos_token_id":   1.0,
		"tokenizer.ggml.eos_token_id":   2.0,
	} {
		if got := show.ModelInfo[k]; got != want {
			t.Errorf("model_info %s = %v, want %v", k, got, want)
		}
	}
	if show.Template != ollamatest.Template || !strings.Contains(show.Parameters, "num_ctx") {
		t.Errorf("template %q parameters %q", show.Template, show.Parameters)
	}

	// It generates whole words, deterministically, to the token limit.
	chat := `{"model":"tiny","stream":false,"messages":[{"role":"user","content":"hello"}],"options":{"temperature":0,"num_predict":8}}`
	var r1, r2 struct {
		Message    struct{ Content string } `json:"message"`
		DoneReason string                   `json:"done_reason"`
		EvalCount  int                      `json:"eval_count"`
	}
	if code := call(t, "POST", s.URL()+"/api/chat", chat, &r1); code != 200 {
		t.Fatalf("chat: %d %+v", code, r1)
	}
	call(t, "POST", s.URL()+"/api/chat", chat, &r2)
	words := strings.Fields(r1.Message.Content)
	if r1 != r2 || r1.DoneReason != "length" || r1.EvalCount != 8 || len(words) != 8 || !strings.HasPrefix(r1.Message.Content, " ") {
		t.Errorf("replies %+v and %+v; want the same 8 words, done_reason length", r1, r2)
	}
	known := map[string]bool{}
	for _, w := range testmodel.DefaultWords {
		known[w] = true
	}
	for _, w := range words {
		if !known[w] {
			t.Errorf("word %q is not in the vocabulary", w)
		}
	}
	t.Logf("reply %q after %v", r1.Message.Content, time.Since(start))
}

func TestCreateErrors(t *testing.T) {
	s := ollamatest.Start(t)
	ctx := context.Background()
	if err := ollamatest.Create(ctx, s.URL(), "bad", []byte("not a gguf file")); err == nil {
		t.Error("create from garbage: no error")
	} else {
		t.Logf("garbage: %v", err)
	}
	if err := ollamatest.Create(ctx, s.URL(), "Bad Name!", []byte("GGUF")); err == nil {
		t.Error("invalid name: no error")
	}
	if err := ollamatest.Create(ctx, "http://127.0.0.1:1", "tiny", []byte("x")); err == nil {
		t.Error("no server: no error")
	}
}

func TestStopEndsServer(t *testing.T) {
	s := ollamatest.Start(t)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Post(s.URL()+"/api/version", "application/json", bytes.NewReader(nil)); err == nil {
		t.Error("server still answers after Stop")
	}
}

func TestBinaryEnv(t *testing.T) {
	t.Setenv(ollamatest.BinEnv, "/nonexistent/ollama")
	if p, why := ollamatest.Binary(); p != "" || !strings.Contains(why, "/nonexistent/ollama") {
		t.Errorf("Binary() = %q, %q", p, why)
	}
}

func TestMissingBinarySkips(t *testing.T) {
	if testenv.Required() {
		t.Log("integration required: a missing binary would fail, not skip; nothing to check")
		return
	}
	t.Setenv(ollamatest.BinEnv, "/nonexistent/ollama")
	var skipped bool
	t.Run("start", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		ollamatest.Start(t)
	})
	if !skipped {
		t.Error("Start without a binary did not skip")
	}
}
