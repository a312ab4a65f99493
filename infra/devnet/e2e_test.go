package devnet_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/c0mpute/c0mpute/infra/devnet"
)

func chatParams(prompt string, maxTokens int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:       tinyModel,
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage(prompt)},
		MaxTokens:   openai.Int(maxTokens),
		Temperature: openai.Float(0),
		Seed:        openai.Int(42),
	}
}

// TestRepliesMatchBackend drives the whole local network with the official
// Go SDK and checks that replies are identical to what the same Ollama
// answers directly on its own OpenAI-compatible endpoint.
func TestRepliesMatchBackend(t *testing.T) {
	e := newEnv(t, envOptions{credits: 1000})
	_, srv := e.ollamaWorker()
	direct := openai.NewClient(option.WithBaseURL(srv.URL()+"/v1/"), option.WithAPIKey("ollama"), option.WithMaxRetries(0))
	ctx := context.Background()

	prompts := []string{"hello world", "the cat sat on the mat", "grüße aus köln — ünïcödé ✓"}
	for _, prompt := range prompts {
		t.Run(prompt, func(t *testing.T) {
			want, err := direct.Chat.Completions.New(ctx, chatParams(prompt, 24))
			if err != nil {
				t.Fatalf("direct: %v", err)
			}
			got, err := e.client.Chat.Completions.New(ctx, chatParams(prompt, 24))
			if err != nil {
				t.Fatalf("gateway: %v", err)
			}
			if got.Choices[0].Message.Content != want.Choices[0].Message.Content {
				t.Errorf("non-stream content differs:\n gateway %q\n backend %q", got.Choices[0].Message.Content, want.Choices[0].Message.Content)
			}
			if got.Choices[0].Message.Content == "" {
				t.Error("empty reply")
			}
			if got.Choices[0].FinishReason != want.Choices[0].FinishReason {
				t.Errorf("finish_reason %q, backend %q", got.Choices[0].FinishReason, want.Choices[0].FinishReason)
			}
			if got.Usage.CompletionTokens != want.Usage.CompletionTokens || got.Usage.PromptTokens != want.Usage.PromptTokens {
				t.Errorf("usage %+v, backend %+v", got.Usage, want.Usage)
			}
			if got.Usage.TotalTokens != got.Usage.PromptTokens+got.Usage.CompletionTokens {
				t.Errorf("total_tokens %d", got.Usage.TotalTokens)
			}
			if !strings.HasPrefix(got.ID, "chatcmpl-") || got.Object != "chat.completion" {
				t.Errorf("id %q object %q", got.ID, got.Object)
			}

			// Streaming, with usage, through the SDK's accumulator.
			p := chatParams(prompt, 24)
			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			stream := e.client.Chat.Completions.NewStreaming(ctx, p)
			var acc openai.ChatCompletionAccumulator
			chunks := 0
			for stream.Next() {
				acc.AddChunk(stream.Current())
				chunks++
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			if acc.Choices[0].Message.Content != want.Choices[0].Message.Content {
				t.Errorf("stream content differs:\n gateway %q\n backend %q", acc.Choices[0].Message.Content, want.Choices[0].Message.Content)
			}
			if acc.Usage.CompletionTokens != want.Usage.CompletionTokens {
				t.Errorf("stream usage %+v, backend %+v", acc.Usage, want.Usage)
			}
			if chunks < 3 {
				t.Errorf("only %d chunks", chunks)
			}
		})
	}
	// Each request cost 10 credits, none refunded.
	if got, want := e.balance().Credits, int64(1000-10*2*len(prompts)); got != want {
		t.Errorf("balance %d, want %d", got, want)
	}
}

// TestStreamShape checks the wire rules an SDK relies on, on raw SSE: the
// role first, usage null on every chunk then one usage chunk with no
// choices, then [DONE]; without include_usage, no usage at all.
func TestStreamShape(t *testing.T) {
	e := newEnv(t, envOptions{credits: 1000})
	e.ollamaWorker()
	for _, includeUsage := range []bool{true, false} {
		body := `{"model":"tiny","stream":true,"max_tokens":8,"temperature":0,"messages":[{"role":"user","content":"hello"}]`
		if includeUsage {
			body += `,"stream_options":{"include_usage":true}`
		}
		body += `}`
		req, _ := http.NewRequest(http.MethodPost, e.stack.APIURL+"/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		var events []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events = append(events, line)
			}
		}
		resp.Body.Close()
		if len(events) < 4 || events[len(events)-1] != "[DONE]" {
			t.Fatalf("events %q", events)
		}
		if !strings.Contains(events[0], `"delta":{"role":"assistant"}`) {
			t.Errorf("first event does not carry the role: %s", events[0])
		}
		data := events[:len(events)-1]
		if includeUsage {
			last := data[len(data)-1]
			if !strings.Contains(last, `"choices":[]`) || !strings.Contains(last, `"completion_tokens":8`) {
				t.Errorf("last chunk is not the usage chunk: %s", last)
			}
			for _, ev := range data[:len(data)-1] {
				if !strings.Contains(ev, `"usage":null`) {
					t.Errorf("chunk without usage:null: %s", ev)
				}
			}
			if !strings.Contains(data[len(data)-2], `"finish_reason":"length"`) {
				t.Errorf("finish chunk: %s", data[len(data)-2])
			}
		} else {
			for _, ev := range data {
				if strings.Contains(ev, `"usage"`) {
					t.Errorf("usage without include_usage: %s", ev)
				}
			}
		}
	}
}

// TestStop checks that a stop string ends the reply before it, as the
// backend does it.
func TestStop(t *testing.T) {
	e := newEnv(t, envOptions{credits: 1000})
	e.ollamaWorker()
	ctx := context.Background()
	full, err := e.client.Chat.Completions.New(ctx, chatParams("hello world", 30))
	if err != nil {
		t.Fatal(err)
	}
	words := strings.Fields(full.Choices[0].Message.Content)
	if len(words) < 4 {
		t.Fatalf("reply too short to pick a stop word: %q", full.Choices[0].Message.Content)
	}
	stopWord := words[3]
	p := chatParams("hello world", 30)
	p.Stop = openai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{stopWord}}
	got, err := e.client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	text := got.Choices[0].Message.Content
	if strings.Contains(text, stopWord) || !strings.HasPrefix(full.Choices[0].Message.Content, text) {
		t.Errorf("stop %q: got %q from full %q", stopWord, text, full.Choices[0].Message.Content)
	}
	if got.Choices[0].FinishReason != "stop" {
		t.Errorf("finish_reason %q", got.Choices[0].FinishReason)
	}
}

// TestErrors checks the SDK sees OpenAI's statuses and codes.
func TestErrors(t *testing.T) {
	limits := devnet.ScriptedLimits()
	limits.RatePerMinute = 3
	e := newEnv(t, envOptions{credits: 25, limits: &limits})
	e.ollamaWorker()
	ctx := context.Background()

	statusOf := func(err error) (int, string) {
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("not an API error: %v", err)
		}
		return apiErr.StatusCode, apiErr.Code
	}

	bad := openai.NewClient(option.WithBaseURL(e.stack.APIURL+"/"), option.WithAPIKey("sk-c0mpute-nope"), option.WithMaxRetries(0))
	_, err := bad.Chat.Completions.New(ctx, chatParams("hi", 4))
	if s, c := statusOf(err); s != 401 || c != "invalid_api_key" {
		t.Errorf("bad key: %d %s", s, c)
	}
	p := chatParams("hi", 4)
	p.Model = "no-such-model"
	_, err = e.client.Chat.Completions.New(ctx, p)
	if s, c := statusOf(err); s != 404 || c != "model_not_found" {
		t.Errorf("unknown model: %d %s", s, c)
	}
	// 25 credits pay for two requests of 10.
	for i := range 2 {
		if _, err := e.client.Chat.Completions.New(ctx, chatParams("hi", 4)); err != nil {
			t.Fatalf("paid request %d: %v", i, err)
		}
	}
	_, err = e.client.Chat.Completions.New(ctx, chatParams("hi", 4))
	if s, c := statusOf(err); s != 402 || c != "insufficient_quota" {
		t.Errorf("no credits: %d %s", s, c)
	}
	if got := e.balance().Credits; got != 5 {
		t.Errorf("balance %d, want 5", got)
	}
	// The key made 3 admitted requests... the 402 did not count, so one
	// more admitted request would be the 3rd; use a fresh account's worth
	// of credits to reach the limit.
	if _, err := e.store.Grant(ctx, e.account, 100, "more", false); err != nil {
		t.Fatal(err)
	}
	var last error
	for range 3 {
		_, last = e.client.Chat.Completions.New(ctx, chatParams("hi", 4))
		if last != nil {
			break
		}
	}
	var apiErr *openai.Error
	if !errors.As(last, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" {
		t.Fatalf("rate limit: %v", last)
	}
	if ra := apiErr.Response.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("Retry-After %q", ra)
	}
}
