package openaicompat

// Tests against a real OpenAI-compatible server: Ollama 0.6.5's /v1,
// serving the generated tiny model (whole-word tokens, never ends on its
// own). The same server's native API, through the ollama backend, is the
// reference.

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/workerd/backend/backendtest"
	"github.com/c0mpute/c0mpute/workerd/backend/ollama"
)

func TestRealOllamaV1Models(t *testing.T) {
	s := realOllama(t)
	for _, base := range []string{s.URL(), s.URL() + "/v1", s.URL() + "/v1/"} {
		got, err := New(base).Models(context.Background())
		if err != nil || !slices.Contains(got, tinyModel) {
			t.Errorf("%s: Models() = %v, %v; want %s in it", base, got, err, tinyModel)
		}
	}
}

// TestRealOllamaV1Chat: streamed through /v1, the reply is deterministic
// and equals the native API's (ollama backend), deltas, finish reason and
// usage alike.
func TestRealOllamaV1Chat(t *testing.T) {
	s := realOllama(t)
	b, native := New(s.URL()), ollama.New(s.URL())
	tests := []struct {
		name   string
		req    oaiwire.ChatRequest
		finish string
	}{
		{"greedy", oaiwire.ChatRequest{Temperature: ptr(0.0), MaxTokens: ptr[int64](12), Messages: []oaiwire.Message{backendtest.User("hello")}}, "length"},
		{"seeded sampling", oaiwire.ChatRequest{Temperature: ptr(1.5), TopP: ptr(1.0), Seed: ptr[int64](42), MaxTokens: ptr[int64](12),
			Messages: []oaiwire.Message{backendtest.User("tell me a story")}}, "length"},
		// Ollama ignores max_completion_tokens: it arrives as max_tokens.
		{"max_completion_tokens", oaiwire.ChatRequest{Temperature: ptr(0.0), MaxCompletionTokens: ptr[int64](5), Messages: []oaiwire.Message{backendtest.User("hello")}}, "length"},
		// Sent on verbatim, these would render another prompt on Ollama's /v1.
		{"developer role and text parts", oaiwire.ChatRequest{Temperature: ptr(0.0), MaxTokens: ptr[int64](9),
			Messages: []oaiwire.Message{
				{Role: "developer", Content: oaiwire.Content{Text: "be brief"}},
				{Role: "user", Content: oaiwire.Content{IsParts: true, Parts: []oaiwire.Part{{Type: "text", Text: "and"}, {Type: "text", Text: " then?"}}}},
			}}, "length"},
		{"stop", oaiwire.ChatRequest{Temperature: ptr(0.0), MaxTokens: ptr[int64](12), Stop: oaiwire.Stop{" dog"}, Messages: []oaiwire.Message{backendtest.User("hello")}}, "stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := backendtest.Run(context.Background(), b, tinyModel, &tt.req)
			second := backendtest.Run(context.Background(), b, tinyModel, &tt.req)
			ref := backendtest.Run(context.Background(), native, tinyModel, &tt.req)
			if first.Error != "" || ref.Error != "" {
				t.Fatalf("openai: %s; native: %s", first.Error, ref.Error)
			}
			if !reflect.DeepEqual(first.Deltas, second.Deltas) || first.Result != second.Result {
				t.Errorf("two runs differ:\n%+v\n%+v", first, second)
			}
			if !reflect.DeepEqual(first.Deltas, ref.Deltas) || first.Result != ref.Result {
				t.Errorf("/v1 and native differ:\n%q %+v\n%q %+v", first.Content(), first.Result, ref.Content(), ref.Result)
			}
			if first.Result.FinishReason != tt.finish || first.Result.Usage.PromptTokens == 0 {
				t.Errorf("result %+v, want finish %s", first.Result, tt.finish)
			}
			if n := tt.req.Limit(); tt.finish == "length" && (first.Result.Usage.CompletionTokens != n || len(first.Deltas) != int(n)) {
				t.Errorf("%d deltas, usage %+v for %d tokens", len(first.Deltas), first.Result.Usage, n)
			}
			t.Logf("%q %+v", first.Content(), first.Result)
		})
	}
}

func TestRealOllamaV1Cancel(t *testing.T) {
	b := New(realOllama(t).URL())
	endless := oaiwire.ChatRequest{Temperature: ptr(0.0), Messages: []oaiwire.Message{backendtest.User("never stop")}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n int
	var cancelled time.Time
	_, err := b.Chat(ctx, tinyModel, &endless, func(oaiwire.Delta) error {
		if n++; n == 5 {
			cancelled = time.Now()
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n != 5 || time.Since(cancelled) > 2*time.Second {
		t.Errorf("err %v after %d deltas, %v after cancel", err, n, time.Since(cancelled))
	}
	c := backendtest.Run(context.Background(), b, tinyModel, &oaiwire.ChatRequest{Temperature: ptr(0.0), MaxTokens: ptr[int64](3), Messages: endless.Messages})
	if c.Error != "" || c.Result.Usage.CompletionTokens != 3 {
		t.Errorf("next request: %+v", c)
	}
}

func TestRealOllamaV1Errors(t *testing.T) {
	b := New(realOllama(t).URL())
	_, err := b.Chat(context.Background(), "no-such-model", &oaiwire.ChatRequest{Messages: []oaiwire.Message{backendtest.User("hi")}}, func(oaiwire.Delta) error { return nil })
	var ae *APIError
	// Ollama 0.6.5 types every /v1 error after the handler ran as
	// api_error, whatever the status.
	if !errors.As(err, &ae) || ae.StatusCode != 404 || !strings.Contains(ae.Message, `"no-such-model" not found`) || ae.Type != "api_error" {
		t.Errorf("err = %#v", err)
	}
	t.Logf("%v", err)
}
