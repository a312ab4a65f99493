package ollama

// Tests against a real Ollama (v0.6.5, built by scripts/test) serving the
// generated tiny model. Its replies are whole words (" sea", " red"…), one
// token each, and never end on their own: only a token limit or a stop
// string ends them.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/workerd/backend/backendtest"
)

func postJSON(t *testing.T, url string, body, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("POST %s: %v: %s", url, err, raw)
	}
}

func TestRealOllamaModels(t *testing.T) {
	s := realOllama(t)
	got, err := New(s.URL()).Models(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, tinyModel) {
		t.Errorf("Models() = %v, want %s in it", got, tinyModel)
	}
	b := New(s.URL())
	if _, err := b.Models(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := b.ModelDigest(tinyModel); len(d) != 64 {
		t.Errorf("ModelDigest = %q, want Ollama's 64-hex manifest digest", d)
	}
}

// TestRealOllamaDeterministic: at temperature 0, or with a seed, the
// streamed reply is the same every time and equals Ollama's own
// non-streamed /api/chat reply and its /v1/chat/completions reply, with the
// same token counts.
func TestRealOllamaDeterministic(t *testing.T) {
	s := realOllama(t)
	b := New(s.URL())
	tests := []struct {
		name string
		req  oaiwire.ChatRequest
		// v1 compares with /v1 too. Ollama 0.6.5's /v1 passes the
		// developer role on verbatim and makes each content part its own
		// message, so those requests render another prompt there.
		v1 bool
	}{
		{"greedy", oaiwire.ChatRequest{Temperature: ptr(0.0), MaxTokens: ptr[int64](12),
			Messages: []oaiwire.Message{backendtest.User("hello")}}, true},
		{"seeded sampling", oaiwire.ChatRequest{Temperature: ptr(1.5), TopP: ptr(1.0), Seed: ptr[int64](42), MaxTokens: ptr[int64](12),
			Messages: []oaiwire.Message{backendtest.User("tell me a story")}}, true},
		{"system and history", oaiwire.ChatRequest{Temperature: ptr(0.0), MaxTokens: ptr[int64](9),
			Messages: []oaiwire.Message{
				{Role: "system", Content: oaiwire.Content{Text: "be brief"}},
				backendtest.User("hi"),
				{Role: "assistant", Content: oaiwire.Content{Text: " the cat"}},
				backendtest.User("and then?"),
			}}, true},
		{"developer role and content parts", oaiwire.ChatRequest{Temperature: ptr(0.0), MaxCompletionTokens: ptr[int64](9),
			Messages: []oaiwire.Message{
				{Role: "developer", Content: oaiwire.Content{Text: "be brief"}},
				{Role: "user", Content: oaiwire.Content{IsParts: true, Parts: []oaiwire.Part{{Type: "text", Text: "and"}, {Type: "text", Text: " then?"}}}},
			}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := backendtest.Run(context.Background(), b, tinyModel, &tt.req)
			second := backendtest.Run(context.Background(), b, tinyModel, &tt.req)
			if first.Error != "" {
				t.Fatal(first.Error)
			}
			text := first.Content()
			n := tt.req.Limit()
			if second.Content() != text || second.Result != first.Result {
				t.Errorf("two runs differ:\n%q %+v\n%q %+v", text, first.Result, second.Content(), second.Result)
			}
			if len(first.Deltas) != int(n) || len(strings.Fields(text)) != int(n) {
				t.Errorf("%d deltas, %d words for %d tokens: %q", len(first.Deltas), len(strings.Fields(text)), n, text)
			}
			if r := first.Result; r.FinishReason != "length" || r.Usage.CompletionTokens != n || r.Usage.PromptTokens == 0 ||
				r.Usage.TotalTokens != r.Usage.PromptTokens+n {
				t.Errorf("result %+v", r)
			}

			// Ollama's native API, not streamed, with the same messages and options.
			native, err := translate(tinyModel, &tt.req)
			if err != nil {
				t.Fatal(err)
			}
			native.Stream = false
			var nr struct {
				Message         struct{ Content string }
				DoneReason      string `json:"done_reason"`
				PromptEvalCount int64  `json:"prompt_eval_count"`
				EvalCount       int64  `json:"eval_count"`
			}
			postJSON(t, s.URL()+"/api/chat", native, &nr)
			if nr.Message.Content != text || nr.DoneReason != "length" || nr.EvalCount != n || nr.PromptEvalCount != first.Result.Usage.PromptTokens {
				t.Errorf("/api/chat non-streamed: %+v; streamed %q %+v", nr, text, first.Result)
			}

			if !tt.v1 {
				return
			}
			// Ollama's OpenAI-compatible API, not streamed.
			oreq := tt.req
			oreq.Model = tinyModel
			var cr oaiwire.Completion
			postJSON(t, s.URL()+"/v1/chat/completions", &oreq, &cr)
			if len(cr.Choices) != 1 || cr.Choices[0].Message.Content == nil {
				t.Fatalf("/v1 reply %+v", cr)
			}
			if got := *cr.Choices[0].Message.Content; got != text || cr.Choices[0].FinishReason != "length" || cr.Usage != first.Result.Usage {
				t.Errorf("/v1/chat/completions: %q %s %+v; streamed %q %+v", got, cr.Choices[0].FinishReason, cr.Usage, text, first.Result)
			}
			t.Logf("%q %+v", text, first.Result.Usage)
		})
	}
}

func TestRealOllamaMaxTokens(t *testing.T) {
	b := New(realOllama(t).URL())
	for _, n := range []int64{1, 2, 7, 25} {
		for _, field := range []string{"max_tokens", "max_completion_tokens"} {
			req := oaiwire.ChatRequest{Temperature: ptr(0.0), Messages: []oaiwire.Message{backendtest.User("count")}}
			if field == "max_tokens" {
				req.MaxTokens = &n
			} else {
				req.MaxCompletionTokens, req.MaxTokens = &n, ptr[int64](1000)
			}
			c := backendtest.Run(context.Background(), b, tinyModel, &req)
			if c.Error != "" || c.Result.FinishReason != "length" || c.Result.Usage.CompletionTokens != n || len(strings.Fields(c.Content())) != int(n) {
				t.Errorf("%s=%d: %q %+v %s", field, n, c.Content(), c.Result, c.Error)
			}
		}
	}
}

// TestRealOllamaStop: a stop string ends the reply before it, with finish
// reason stop, and is not part of the content.
func TestRealOllamaStop(t *testing.T) {
	b := New(realOllama(t).URL())
	base := oaiwire.ChatRequest{Temperature: ptr(0.0), MaxTokens: ptr[int64](16), Messages: []oaiwire.Message{backendtest.User("go on")}}
	full := backendtest.Run(context.Background(), b, tinyModel, &base).Content()
	words := strings.Fields(full)
	if len(words) != 16 {
		t.Fatalf("baseline %q", full)
	}
	// A stop string that spans a token boundary: the end of word 4, the
	// space and the start of word 5.
	w4, w5 := words[4], words[5]
	spanning := w4[len(w4)-1:] + " " + w5[:1]
	tests := []struct {
		name string
		stop oaiwire.Stop
	}{
		{"one word", oaiwire.Stop{" " + words[3]}},
		{"first word", oaiwire.Stop{" " + words[0]}},
		{"earliest of several", oaiwire.Stop{" " + words[9], "zzz", " " + words[6]}},
		{"across tokens", oaiwire.Stop{spanning}},
		{"never reached", oaiwire.Stop{"zzz"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := base
			req.Stop = tt.stop
			c := backendtest.Run(context.Background(), b, tinyModel, &req)
			if c.Error != "" {
				t.Fatal(c.Error)
			}
			cut, reason := len(full), "length"
			for _, s := range tt.stop {
				if i := strings.Index(full, s); i >= 0 && i < cut {
					cut, reason = i, "stop"
				}
			}
			if got := c.Content(); got != full[:cut] || c.Result.FinishReason != reason {
				t.Errorf("stop %q: %q, %s; want %q, %s", tt.stop, got, c.Result.FinishReason, full[:cut], reason)
			}
			// Ollama counts the tokens that made up the stop string.
			tokens := int64(len(words))
			for k := len(words); k > 0; k-- {
				for _, s := range tt.stop {
					if strings.Contains(" "+strings.Join(words[:k], " "), s) {
						tokens = int64(k)
					}
				}
			}
			if c.Result.Usage.CompletionTokens != tokens {
				t.Errorf("stop %q: %d completion tokens, want %d", tt.stop, c.Result.Usage.CompletionTokens, tokens)
			}
			t.Logf("stop %q: %q, %+v", tt.stop, c.Content(), c.Result)
		})
	}
}

// TestRealOllamaCancel: cancelling the context, or an emit error, ends an
// endless generation at once, and the server then serves the next request.
func TestRealOllamaCancel(t *testing.T) {
	b := New(realOllama(t).URL())
	endless := oaiwire.ChatRequest{Temperature: ptr(0.0), Messages: []oaiwire.Message{backendtest.User("never stop")}} // no limit: this model never ends

	t.Run("context", func(t *testing.T) {
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
		took := time.Since(cancelled)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if took > 2*time.Second {
			t.Errorf("returned %v after cancel", took)
		}
		t.Logf("returned %v after cancel, %d deltas", took, n)
	})
	t.Run("emit error", func(t *testing.T) {
		stop := errors.New("client went away")
		var n int
		_, err := b.Chat(context.Background(), tinyModel, &endless, func(oaiwire.Delta) error {
			if n++; n == 3 {
				return stop
			}
			return nil
		})
		if err != stop || n != 3 {
			t.Errorf("err = %v after %d deltas, want the emit error after 3", err, n)
		}
	})
	t.Run("server free after", func(t *testing.T) {
		start := time.Now()
		c := backendtest.Run(context.Background(), b, tinyModel, &oaiwire.ChatRequest{Temperature: ptr(0.0), MaxTokens: ptr[int64](3), Messages: endless.Messages})
		if c.Error != "" || c.Result.Usage.CompletionTokens != 3 {
			t.Errorf("%+v", c)
		}
		t.Logf("next request took %v", time.Since(start))
	})
}

func TestRealOllamaErrors(t *testing.T) {
	b := New(realOllama(t).URL())
	req := oaiwire.ChatRequest{Messages: []oaiwire.Message{backendtest.User("hi")}, MaxTokens: ptr[int64](2)}
	tests := []struct {
		name, model string
		req         oaiwire.ChatRequest
		status      int
		msg         string
	}{
		{"unknown model", "no-such-model", req, 404, `model "no-such-model" not found`},
		{"invalid model name", "Bad Name!", req, 400, "model is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var emitted int
			_, err := b.Chat(context.Background(), tt.model, &tt.req, func(oaiwire.Delta) error { emitted++; return nil })
			var se *StatusError
			if !errors.As(err, &se) || se.StatusCode != tt.status || !strings.Contains(se.Message, tt.msg) || emitted != 0 {
				t.Errorf("err = %v (%d deltas), want status %d with %q", err, emitted, tt.status, tt.msg)
			}
		})
	}
	if _, err := New("http://127.0.0.1:1").Models(context.Background()); err == nil {
		t.Error("Models with no server: no error")
	}
}

// TestRealOllamaToolsAccepted: a request with tools, a tool-call history
// and a tool result, translated, is accepted by the real Ollama (the test
// template renders tools). The tiny model answers in words, not calls.
func TestRealOllamaToolsAccepted(t *testing.T) {
	b := New(realOllama(t).URL())
	req := oaiwire.ChatRequest{
		Temperature: ptr(0.0), MaxTokens: ptr[int64](4),
		Tools: []oaiwire.Tool{{Type: "function", Function: oaiwire.FunctionDef{Name: "get_weather", Description: "weather in a city",
			Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","description":"the city"}},"required":["city"]}`)}}},
		Messages: []oaiwire.Message{
			backendtest.User("weather in Paris?"),
			{Role: "assistant", Content: oaiwire.Content{Null: true}, ToolCalls: []oaiwire.ToolCall{{ID: "call_1", Type: "function",
				Function: oaiwire.FunctionCall{Name: "get_weather", Arguments: `{"city":"Paris"}`}}}},
			{Role: "tool", ToolCallID: "call_1", Content: oaiwire.Content{Text: `{"temp_c":21}`}},
		},
	}
	c := backendtest.Run(context.Background(), b, tinyModel, &req)
	if c.Error != "" || len(strings.Fields(c.Content())) != 4 || c.Result.FinishReason != "length" {
		t.Errorf("%+v", c)
	}
}

// TestRealOllamaRepeatAbort: Ollama 0.6.5 ends a reply whose token repeats
// more than 30 times by closing the stream without a done line (and
// answers a non-streamed request with done:false). The backend reports an
// error, never a silent stop. Greedy decoding of this prompt loops on one
// word after 8.
func TestRealOllamaRepeatAbort(t *testing.T) {
	b := New(realOllama(t).URL())
	c := backendtest.Run(context.Background(), b, tinyModel, &oaiwire.ChatRequest{Temperature: ptr(0.0), MaxTokens: ptr[int64](60),
		Messages: []oaiwire.Message{backendtest.User("count")}})
	words := strings.Fields(c.Content())
	if !strings.Contains(c.Error, "ended before done") || len(words) >= 60 {
		t.Errorf("%d words, error %q; want the abort reported as an error", len(words), c.Error)
	}
	t.Logf("%d words, then: %s", len(words), c.Error)
}
