// Package ollama is a workerd backend over Ollama's native API
// (/api/tags, /api/chat). It translates OpenAI-shaped requests to Ollama's
// and Ollama's NDJSON stream back to OpenAI-shaped deltas.
package ollama

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/backend/httpstream"
)

// DefaultMaxLine bounds one NDJSON line of the stream. A reply chunk is a
// token or, when Ollama returns tool calls, whole calls with their
// arguments; anything longer is treated as a broken server.
const DefaultMaxLine = 8 << 20

// Backend talks to one Ollama server.
type Backend struct {
	base    string
	hc      *http.Client
	maxLine int
	newID   func() string

	mu sync.Mutex
	// digests are the model digests of the last /api/tags, by name.
	digests map[string]string
}

var (
	_ backend.Backend  = (*Backend)(nil)
	_ backend.Digester = (*Backend)(nil)
	_ backend.Capable  = (*Backend)(nil)
)

// Option configures a Backend.
type Option func(*Backend)

// WithHTTPClient replaces the default client (which has no overall
// timeout: the request's context governs).
func WithHTTPClient(c *http.Client) Option { return func(b *Backend) { b.hc = c } }

// WithMaxLine sets the longest stream line accepted, in bytes.
func WithMaxLine(n int) Option {
	return func(b *Backend) {
		if n > 0 { // a non-positive cap would refuse every line
			b.maxLine = n
		}
	}
}

// New returns a backend for the Ollama at baseURL, e.g.
// http://127.0.0.1:11434.
func New(baseURL string, opts ...Option) *Backend {
	b := &Backend{base: strings.TrimRight(baseURL, "/"), hc: httpstream.Client(), maxLine: DefaultMaxLine, newID: callID}
	for _, o := range opts {
		o(b)
	}
	return b
}

// Name is "ollama".
func (b *Backend) Name() string { return "ollama" }

// StatusError is a non-2xx answer from Ollama, with its error text.
type StatusError struct {
	StatusCode int
	Message    string
}

func (e *StatusError) Error() string {
	if e.StatusCode == 0 {
		return "ollama: " + e.Message
	}
	return fmt.Sprintf("ollama: %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// Redacted is the error without the server's message (backend.Redacted).
func (e *StatusError) Redacted() string {
	if e.StatusCode == 0 {
		return "ollama: error in the reply stream"
	}
	return fmt.Sprintf("ollama: %d %s", e.StatusCode, http.StatusText(e.StatusCode))
}

// Models lists the models the server has (GET /api/tags), by name.
func (b *Backend) Models(ctx context.Context) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+"/api/tags", nil)
	if err != nil {
		return nil, err
	}
	resp, err := b.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var tags struct {
		Models []struct {
			Name   string `json:"name"`
			Model  string `json:"model"`
			Digest string `json:"digest"`
		} `json:"models"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&tags); err != nil {
		return nil, fmt.Errorf("ollama: decode /api/tags: %w", err)
	}
	names := make([]string, 0, len(tags.Models))
	digests := make(map[string]string, len(tags.Models))
	for _, m := range tags.Models {
		if m.Name == "" {
			m.Name = m.Model
		}
		names = append(names, m.Name)
		digests[m.Name] = m.Digest
	}
	b.mu.Lock()
	b.digests = digests
	b.mu.Unlock()
	return names, nil
}

// ModelDigest is the digest /api/tags last gave for model (the hash of its
// manifest, which names every layer of the weights), or "".
func (b *Backend) ModelDigest(model string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.digests[model]
}

// Capabilities asks Ollama (POST /api/show) what model supports: its
// "capabilities" list names tools and vision, every chat model takes a
// JSON format, and the context is the model's num_ctx parameter when it
// sets one (else Ollama's own default applies, which it does not report).
func (b *Backend) Capabilities(ctx context.Context, model string) (backend.Capabilities, error) {
	payload, err := json.Marshal(map[string]string{"model": model})
	if err != nil {
		return backend.Capabilities{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.base+"/api/show", bytes.NewReader(payload))
	if err != nil {
		return backend.Capabilities{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.do(req)
	if err != nil {
		return backend.Capabilities{}, err
	}
	defer resp.Body.Close()
	var show struct {
		Capabilities []string `json:"capabilities"`
		Parameters   string   `json:"parameters"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&show); err != nil {
		return backend.Capabilities{}, fmt.Errorf("ollama: decode /api/show: %w", err)
	}
	c := backend.Capabilities{ResponseFormat: true}
	for _, cap := range show.Capabilities {
		switch cap {
		case "tools":
			c.Tools = true
		case "vision":
			c.Vision = true
		}
	}
	for _, line := range strings.Split(show.Parameters, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "num_ctx" {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil && n > 0 {
				c.Context = n
			}
		}
	}
	return c, nil
}

// Chat runs req on model with POST /api/chat, streaming.
func (b *Backend) Chat(ctx context.Context, model string, req *oaiwire.ChatRequest, emit func(oaiwire.Delta) error) (backend.Result, error) {
	body, err := translate(model, req)
	if err != nil {
		return backend.Result{}, err
	}
	payload, err := json.Marshal(body)
	if err != nil {
		return backend.Result{}, err
	}
	ctx, cancel := context.WithCancel(ctx) // closing the stream early cancels the generation
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, b.base+"/api/chat", bytes.NewReader(payload))
	if err != nil {
		return backend.Result{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/x-ndjson")
	resp, err := b.do(hreq)
	if err != nil {
		return backend.Result{}, err
	}
	defer resp.Body.Close()
	d := &decoder{newID: b.newID}
	return d.stream(ctx, resp.Body, b.maxLine, emit)
}

// do sends req and turns a non-2xx answer into a *StatusError.
func (b *Backend) do(req *http.Request) (*http.Response, error) {
	return httpstream.Do(b.hc, req, "ollama", statusError)
}

// statusError is the *StatusError for a non-2xx answer with body raw.
func statusError(resp *http.Response, raw []byte) error {
	var e struct {
		Error string `json:"error"`
	}
	msg := strings.TrimSpace(string(raw))
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	if msg == "" {
		msg = resp.Status
	}
	return &StatusError{StatusCode: resp.StatusCode, Message: msg}
}

// callID is a fresh tool call id: Ollama's calls have none.
func callID() string {
	var b [12]byte
	rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// chunk is one line of Ollama's chat stream.
type chunk struct {
	Message struct {
		Content   string `json:"content"`
		Thinking  string `json:"thinking"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"message"`
	Done            bool            `json:"done"`
	DoneReason      string          `json:"done_reason"`
	PromptEvalCount int64           `json:"prompt_eval_count"`
	EvalCount       int64           `json:"eval_count"`
	Error           json.RawMessage `json:"error"`
}

// decoder turns stream lines into deltas.
type decoder struct {
	newID  func() string
	calls  int // tool calls emitted so far
	done   bool
	result backend.Result
}

// stream reads the NDJSON stream to its done line, emitting deltas. Once
// ctx is done it emits nothing more and returns ctx's error.
func (d *decoder) stream(ctx context.Context, r io.Reader, maxLine int, emit func(oaiwire.Delta) error) (backend.Result, error) {
	sc := httpstream.NewScanner(r, maxLine, "ollama")
	for sc.Scan() {
		deltas, err := d.line(sc.Bytes())
		if err != nil {
			return backend.Result{}, err
		}
		for _, dl := range deltas {
			if err := ctx.Err(); err != nil {
				return backend.Result{}, err
			}
			if err := emit(dl); err != nil {
				return backend.Result{}, err
			}
		}
		if d.done {
			return d.result, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return backend.Result{}, err
	}
	if err := sc.Err(); err != nil {
		return backend.Result{}, err
	}
	// Ollama ends a reply this way when it aborts it: 0.6.5 does so
	// silently when one token repeats more than 30 times.
	return backend.Result{}, errors.New("ollama: stream ended before done (the server aborted the reply)")
}

// line decodes one stream line. Blank lines are skipped.
func (d *decoder) line(b []byte) ([]oaiwire.Delta, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, nil
	}
	var c chunk
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("ollama: malformed stream line: %w", err)
	}
	if len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null")) {
		var msg string
		if json.Unmarshal(c.Error, &msg) != nil {
			msg = string(c.Error)
		}
		// StatusCode 0: an error reported inside a 200 stream.
		return nil, &StatusError{Message: msg}
	}
	var out []oaiwire.Delta
	if c.Message.Content != "" || c.Message.Thinking != "" {
		out = append(out, oaiwire.Delta{Content: c.Message.Content, Reasoning: c.Message.Thinking})
	}
	for _, tc := range c.Message.ToolCalls {
		args, err := arguments(tc.Function.Arguments)
		if err != nil {
			return nil, err
		}
		id := tc.ID
		if id == "" {
			id = d.newID()
		}
		idx := d.calls
		d.calls++
		out = append(out, oaiwire.Delta{ToolCalls: []oaiwire.ToolCall{{
			Index: &idx, ID: id, Type: "function",
			Function: oaiwire.FunctionCall{Name: tc.Function.Name, Arguments: args},
		}}})
	}
	if c.Done {
		d.done = true
		reason := oaiwire.FinishStop
		switch {
		case d.calls > 0:
			reason = oaiwire.FinishToolCalls
		case c.DoneReason == "length":
			reason = oaiwire.FinishLength
		}
		d.result = backend.Result{FinishReason: reason, Usage: oaiwire.Usage{
			PromptTokens:     c.PromptEvalCount,
			CompletionTokens: c.EvalCount,
			TotalTokens:      c.PromptEvalCount + c.EvalCount,
		}}
	}
	return out, nil
}

// arguments renders a call's arguments (an object in Ollama's API) as the
// JSON string OpenAI's API carries.
func arguments(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "{}", nil
	}
	if raw[0] == '"' { // already a string
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("ollama: malformed tool call arguments: %w", err)
		}
		return s, nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return "", fmt.Errorf("ollama: malformed tool call arguments: %w", err)
	}
	return b.String(), nil
}
