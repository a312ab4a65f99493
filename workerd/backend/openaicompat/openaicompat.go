// Package openaicompat is a workerd backend over any OpenAI-compatible
// server (llama.cpp, vLLM, LM Studio, Ollama's /v1): it passes requests
// through and reads the server-sent-event stream back as deltas.
package openaicompat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/backend/httpstream"
)

// DefaultMaxLine bounds one line of the event stream.
const DefaultMaxLine = 8 << 20

// Backend talks to one OpenAI-compatible server.
type Backend struct {
	base      string
	apiKey    string
	hc        *http.Client
	maxLine   int
	developer bool
	// images are the backend model names that are image models
	// (WithImageModels).
	images map[string]bool
}

var _ backend.Backend = (*Backend)(nil)

// Option configures a Backend.
type Option func(*Backend)

// WithAPIKey sends key as a bearer token.
func WithAPIKey(key string) Option { return func(b *Backend) { b.apiKey = key } }

// WithHTTPClient replaces the default client (which has no overall
// timeout: the request's context governs).
func WithHTTPClient(c *http.Client) Option { return func(b *Backend) { b.hc = c } }

// WithDeveloperRole sends developer messages as they are, for servers
// whose templates know the role (gpt-oss on vLLM), instead of as system
// messages.
func WithDeveloperRole() Option { return func(b *Backend) { b.developer = true } }

// WithMaxLine sets the longest stream line accepted, in bytes.
func WithMaxLine(n int) Option {
	return func(b *Backend) {
		if n > 0 { // a non-positive cap would refuse every line
			b.maxLine = n
		}
	}
}

// New returns a backend for the server at baseURL: its API root, with or
// without the /v1 (http://127.0.0.1:8080 and http://127.0.0.1:8080/v1
// are the same).
func New(baseURL string, opts ...Option) *Backend {
	base := strings.TrimRight(baseURL, "/")
	if !strings.HasSuffix(base, "/v1") {
		base += "/v1"
	}
	b := &Backend{base: base, hc: httpstream.Client(), maxLine: DefaultMaxLine}
	for _, o := range opts {
		o(b)
	}
	return b
}

// Name is "openai".
func (b *Backend) Name() string { return "openai" }

// APIError is an error the server reported, in OpenAI's shape where it
// used it. StatusCode is 0 for an error event inside a stream.
type APIError struct {
	StatusCode int
	Message    string
	Type       string
	Code       string
}

// Redacted is the error without the server's message (backend.Redacted).
func (e *APIError) Redacted() string {
	if e.StatusCode == 0 {
		return "openai backend: error in the reply stream"
	}
	return fmt.Sprintf("openai backend: %d %s", e.StatusCode, http.StatusText(e.StatusCode))
}

func (e *APIError) Error() string {
	if e.StatusCode == 0 {
		return "openai backend: stream error: " + e.Message
	}
	return fmt.Sprintf("openai backend: %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// Capabilities of a model behind an OpenAI-compatible server, which
// reports none: tools and response_format, which llama.cpp, vLLM and LM
// Studio all accept, and no vision (only some of their models have it).
// The context length is unknown.
// An image model (WithImageModels) renders images and serves no chat.
func (b *Backend) Capabilities(_ context.Context, model string) (backend.Capabilities, error) {
	if b.images[model] {
		return backend.Capabilities{Image: true}, nil
	}
	return backend.Capabilities{Tools: true, ResponseFormat: true}, nil
}

// Models lists the server's models (GET /v1/models), by id.
func (b *Backend) Models(ctx context.Context) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+"/models", nil)
	if err != nil {
		return nil, err
	}
	resp, err := b.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&list); err != nil {
		return nil, fmt.Errorf("openai backend: decode /models: %w", err)
	}
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	return ids, nil
}

// body is the request sent on: the client's, for the backend's model name,
// streaming with usage. Four changes make it read the same on every
// compatible server:
//   - the token cap goes as max_tokens, which all of them read (Ollama
//     ignores max_completion_tokens);
//   - developer messages go as system ones, unless WithDeveloperRole:
//     most chat templates know no developer role and drop or reject it;
//   - content arrays of text parts only go as one string, as OpenAI reads
//     them (Ollama's /v1 makes each part a message; older servers reject
//     arrays);
//   - a tool call in the history without arguments has "{}".
//
// user is dropped: the worker never learns who asked.
func (b *Backend) body(model string, req *oaiwire.ChatRequest) *oaiwire.ChatRequest {
	r := *req
	r.Model = model
	r.Stream = true
	r.StreamOptions = &oaiwire.StreamOptions{IncludeUsage: true}
	// A prediction is for ring models' drafting (the gateway sends none
	// to other workers): never passed on to a server that might bill it.
	r.Prediction = nil
	r.MaxTokens, r.MaxCompletionTokens = nil, nil
	if n := req.Limit(); n > 0 {
		r.MaxTokens = &n
	}
	r.User = ""
	r.Messages = make([]oaiwire.Message, len(req.Messages))
	for i, m := range req.Messages {
		if m.Role == "developer" && !b.developer {
			m.Role = "system"
		}
		if m.Content.IsParts && len(m.Content.Parts) > 0 && len(m.Content.Images()) == 0 {
			m.Content = oaiwire.Content{Text: m.Content.String()}
		}
		if len(m.ToolCalls) > 0 { // a call without arguments has "{}" (vLLM requires the field)
			calls := slices.Clone(m.ToolCalls)
			for j := range calls {
				if strings.TrimSpace(calls[j].Function.Arguments) == "" {
					calls[j].Function.Arguments = "{}"
				}
			}
			m.ToolCalls = calls
		}
		r.Messages[i] = m
	}
	return &r
}

// Chat runs req on model with POST /v1/chat/completions, streaming.
func (b *Backend) Chat(ctx context.Context, model string, req *oaiwire.ChatRequest, emit func(oaiwire.Delta) error) (backend.Result, error) {
	payload, err := json.Marshal(b.body(model, req))
	if err != nil {
		return backend.Result{}, err
	}
	ctx, cancel := context.WithCancel(ctx) // closing the stream early cancels the generation
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, b.base+"/chat/completions", bytes.NewReader(payload))
	if err != nil {
		return backend.Result{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	resp, err := b.do(hreq)
	if err != nil {
		return backend.Result{}, err
	}
	defer resp.Body.Close()
	d := &decoder{}
	return d.stream(ctx, resp.Body, b.maxLine, emit)
}

// do sends req and turns a non-2xx answer into an *APIError.
func (b *Backend) do(req *http.Request) (*http.Response, error) {
	if b.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+b.apiKey)
	}
	return httpstream.Do(b.hc, req, "openai backend", statusError)
}

// statusError is the *APIError for a non-2xx answer with body raw.
func statusError(resp *http.Response, raw []byte) error {
	e := errorFrom(raw)
	if e == nil {
		e = &APIError{Message: strings.TrimSpace(string(raw))}
		if e.Message == "" {
			e.Message = resp.Status
		}
	}
	e.StatusCode = resp.StatusCode
	return e
}

// errorFrom reads an error document: OpenAI's {"error":{"message",…}},
// and the shapes other servers use ({"error":"…"}, {"message":"…"},
// {"detail":"…"}). It returns nil when raw is none of them.
func errorFrom(raw []byte) *APIError {
	var doc struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(raw, &doc) != nil {
		return nil
	}
	if len(doc.Error) > 0 && !bytes.Equal(doc.Error, []byte("null")) {
		var obj struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		}
		var s string
		switch {
		case json.Unmarshal(doc.Error, &s) == nil:
			return &APIError{Message: s}
		case json.Unmarshal(doc.Error, &obj) == nil:
			e := &APIError{Message: obj.Message, Type: obj.Type, Code: scalar(obj.Code)}
			if e.Message == "" {
				e.Message = string(doc.Error)
			}
			return e
		}
		return &APIError{Message: string(doc.Error)}
	}
	if doc.Message != "" {
		return &APIError{Message: doc.Message, Type: doc.Type}
	}
	if len(doc.Detail) > 0 {
		var s string
		if json.Unmarshal(doc.Detail, &s) != nil {
			s = string(doc.Detail)
		}
		return &APIError{Message: s}
	}
	return nil
}

// scalar renders a JSON string or number as text.
func scalar(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if t := strings.TrimSpace(string(raw)); t != "null" {
		return t
	}
	return ""
}

// chunk is one chat.completion.chunk, or an error event.
type chunk struct {
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content          string             `json:"content"`
			ReasoningContent string             `json:"reasoning_content"`
			Reasoning        string             `json:"reasoning"`
			ToolCalls        []oaiwire.ToolCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *oaiwire.Usage  `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// decoder turns events into deltas.
type decoder struct {
	finish string // last finish_reason seen
	usage  oaiwire.Usage
	calls  int  // tool call indexes used: the next is calls
	last   int  // index of the latest fragment, when calls > 0
	done   bool // [DONE] seen
}

// stream reads the event stream to [DONE], emitting deltas. A stream that
// ends without [DONE] after a finish_reason is accepted. Once ctx is done
// it emits nothing more and returns ctx's error.
func (d *decoder) stream(ctx context.Context, r io.Reader, maxLine int, emit func(oaiwire.Delta) error) (backend.Result, error) {
	sc := httpstream.NewScanner(r, maxLine, "openai backend")
	var data []byte
	var has bool
	dispatch := func() error {
		if !has {
			return nil
		}
		payload := data
		data, has = data[:0], false
		deltas, err := d.event(payload)
		if err != nil {
			return err
		}
		for _, dl := range deltas {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := emit(dl); err != nil {
				return err
			}
		}
		return nil
	}
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if err := dispatch(); err != nil {
				return backend.Result{}, err
			}
		case line[0] == ':': // comment, keep-alive
		default:
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			if string(field) == "data" {
				if has {
					data = append(data, '\n')
				}
				data, has = append(data, value...), true
				if len(data) > maxLine {
					return backend.Result{}, fmt.Errorf("openai backend: stream event longer than %d bytes", maxLine)
				}
			} // event, id, retry: nothing to do
		}
		if d.done {
			return d.result(), nil
		}
	}
	if err := ctx.Err(); err != nil {
		return backend.Result{}, err
	}
	if err := sc.Err(); err != nil {
		return backend.Result{}, err
	}
	if err := dispatch(); err != nil { // an event not closed by a blank line
		return backend.Result{}, err
	}
	if d.done || d.finish != "" {
		return d.result(), nil
	}
	return backend.Result{}, errors.New("openai backend: stream ended before finish_reason")
}

// event decodes one event's data.
func (d *decoder) event(data []byte) ([]oaiwire.Delta, error) {
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		d.done = true
		return nil, nil
	}
	if len(data) == 0 {
		return nil, nil
	}
	var c chunk
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("openai backend: malformed stream event: %w", err)
	}
	if len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null")) {
		e := errorFrom(data)
		if e == nil {
			e = &APIError{Message: string(c.Error)}
		}
		return nil, e
	}
	if c.Usage != nil {
		d.usage = *c.Usage
	}
	var out []oaiwire.Delta
	for _, ch := range c.Choices {
		if ch.Index != 0 { // n is always 1
			continue
		}
		dl := oaiwire.Delta{Content: ch.Delta.Content, Reasoning: ch.Delta.ReasoningContent}
		if dl.Reasoning == "" {
			dl.Reasoning = ch.Delta.Reasoning
		}
		for _, tc := range ch.Delta.ToolCalls {
			switch {
			case tc.Index != nil:
				if *tc.Index < 0 {
					return nil, fmt.Errorf("openai backend: negative tool call index %d", *tc.Index)
				}
				d.calls = max(d.calls, *tc.Index+1)
			case tc.ID != "" || d.calls == 0: // a server that sends no index: a new id is a new call
				i := d.calls
				d.calls++
				tc.Index = &i
			default:
				i := d.last
				tc.Index = &i
			}
			if tc.ID != "" && tc.Type == "" {
				tc.Type = "function"
			}
			d.last = *tc.Index
			dl.ToolCalls = append(dl.ToolCalls, tc)
		}
		if !dl.Empty() {
			out = append(out, dl)
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			d.finish = *ch.FinishReason
		}
	}
	return out, nil
}

// result is how the reply ended, in the three reasons workerd reports.
func (d *decoder) result() backend.Result {
	reason := oaiwire.FinishStop
	switch {
	case d.finish == oaiwire.FinishLength:
		reason = oaiwire.FinishLength
	case d.calls > 0 || d.finish == oaiwire.FinishToolCalls || d.finish == "function_call":
		reason = oaiwire.FinishToolCalls
	}
	u := d.usage
	if u.TotalTokens == 0 {
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	return backend.Result{FinishReason: reason, Usage: u}
}
