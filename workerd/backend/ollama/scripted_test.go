package ollama

// Tests against a scripted NDJSON server (httptest): it replays recorded or
// hand-written Ollama streams, for what the tiny real model cannot produce
// (tool calls, thinking, errors mid-stream, broken streams).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/workerd/backend/backendtest"
)

// scripted serves body (with status) for POST /api/chat and records the
// last request body.
type scripted struct {
	*httptest.Server
	status int
	body   string
	got    chan []byte
}

func newScripted(t *testing.T, status int, body string) *scripted {
	s := &scripted{status: status, body: body, got: make(chan []byte, 1)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case s.got <- b:
		default:
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(s.status)
		io.WriteString(w, s.body)
	}))
	t.Cleanup(s.Close)
	return s
}

// counterIDs makes tool call ids deterministic for goldens.
func counterIDs() Option {
	n := 0
	return func(b *Backend) {
		b.newID = func() string { n++; return fmt.Sprintf("call_test%d", n) }
	}
}

func TestScriptedOllamaStreams(t *testing.T) {
	files, _ := filepath.Glob("testdata/streams/*.ndjson")
	if len(files) == 0 {
		t.Fatal("no streams")
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".ndjson")
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			s := newScripted(t, 200, string(body))
			c := backendtest.Run(context.Background(), New(s.URL, counterIDs()), "m", &oaiwire.ChatRequest{Messages: []oaiwire.Message{backendtest.User("hi")}})
			checkToolDeltas(t, c.Deltas)
			backendtest.Golden(t, "streams/"+name+".golden", c)
		})
	}
}

// checkToolDeltas holds the backend contract for tool call deltas.
func checkToolDeltas(t *testing.T, ds []oaiwire.Delta) {
	t.Helper()
	next := 0
	for _, d := range ds {
		for _, tc := range d.ToolCalls {
			if tc.Index == nil || *tc.Index != next || !strings.HasPrefix(tc.ID, "call_") || tc.Type != "function" || tc.Function.Name == "" || !json.Valid([]byte(tc.Function.Arguments)) {
				t.Errorf("tool call delta %+v (index %v), want index %d, id, type, name and JSON arguments", tc, tc.Index, next)
			}
			next++
		}
	}
}

// TestScriptedOllamaRandomIDs: without the test hook, call ids are
// "call_" and 24 random hex digits, different per call.
func TestScriptedOllamaRandomIDs(t *testing.T) {
	body, _ := os.ReadFile("testdata/streams/tool_calls_v065.ndjson")
	s := newScripted(t, 200, string(body))
	c := backendtest.Run(context.Background(), New(s.URL), "m", &oaiwire.ChatRequest{Messages: []oaiwire.Message{backendtest.User("hi")}})
	if len(c.Deltas) != 2 {
		t.Fatalf("%+v", c)
	}
	a, b := c.Deltas[0].ToolCalls[0].ID, c.Deltas[1].ToolCalls[0].ID
	if len(a) != 29 || len(b) != 29 || a == b || strings.Trim(a[5:], "0123456789abcdef") != "" {
		t.Errorf("ids %q %q", a, b)
	}
	if c.Result.FinishReason != "tool_calls" {
		t.Errorf("finish %q", c.Result.FinishReason)
	}
}

func TestScriptedOllamaRequests(t *testing.T) {
	files, _ := filepath.Glob("testdata/requests/*.json")
	for _, f := range files {
		if strings.HasSuffix(f, ".golden.json") {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var req oaiwire.ChatRequest
			if err := json.Unmarshal(raw, &req); err != nil {
				t.Fatal(err)
			}
			s := newScripted(t, 200, `{"message":{"content":"ok"},"done":true,"done_reason":"stop"}`+"\n")
			c := backendtest.Run(context.Background(), New(s.URL), "served-model", &req)
			var out struct {
				Sent  json.RawMessage `json:"sent,omitempty"`
				Error string          `json:"error,omitempty"`
			}
			out.Error = c.Error
			select {
			case out.Sent = <-s.got:
			default:
			}
			backendtest.Golden(t, "requests/"+name+".golden.json", out)
		})
	}
}

func TestScriptedOllamaHTTPErrors(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"not found", 404, `{"error":"model \"x\" not found, try pulling it first"}`, `ollama: 404 Not Found: model "x" not found, try pulling it first`},
		{"bad request", 400, `{"error":"json: cannot unmarshal string into Go struct field"}`, "ollama: 400 Bad Request: json: cannot unmarshal string into Go struct field"},
		{"plain text", 502, "bad gateway\n", "ollama: 502 Bad Gateway: bad gateway"},
		{"empty", 500, "", "ollama: 500 Internal Server Error: 500 Internal Server Error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScripted(t, tt.status, tt.body)
			b := New(s.URL)
			_, err := b.Chat(context.Background(), "x", &oaiwire.ChatRequest{Messages: []oaiwire.Message{backendtest.User("hi")}}, func(oaiwire.Delta) error { return nil })
			var se *StatusError
			if !errors.As(err, &se) || se.StatusCode != tt.status || err.Error() != tt.want {
				t.Errorf("Chat err = %v, want %q", err, tt.want)
			}
			if _, err := b.Models(context.Background()); !errors.As(err, &se) || se.StatusCode != tt.status {
				t.Errorf("Models err = %v", err)
			}
		})
	}
}

func TestScriptedOllamaLineLimit(t *testing.T) {
	long := `{"message":{"content":"` + strings.Repeat("x", 5000) + `"},"done":false}` + "\n"
	s := newScripted(t, 200, long+`{"done":true}`+"\n")
	c := backendtest.Run(context.Background(), New(s.URL, WithMaxLine(4096)), "m", &oaiwire.ChatRequest{Messages: []oaiwire.Message{backendtest.User("hi")}})
	if !strings.Contains(c.Error, "longer than 4096 bytes") || len(c.Deltas) != 0 {
		t.Errorf("%+v", c)
	}
	c = backendtest.Run(context.Background(), New(s.URL), "m", &oaiwire.ChatRequest{Messages: []oaiwire.Message{backendtest.User("hi")}})
	if c.Error != "" || len(c.Content()) != 5000 {
		t.Errorf("default limit: %v", c.Error)
	}
}

// TestScriptedOllamaStall: a server that stops sending mid-stream is left
// when the context ends.
func TestScriptedOllamaStall(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"message":{"content":"a"},"done":false}`+"\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	c := backendtest.Run(ctx, New(srv.URL), "m", &oaiwire.ChatRequest{Messages: []oaiwire.Message{backendtest.User("hi")}})
	if c.Error != context.DeadlineExceeded.Error() || c.Content() != "a" || time.Since(start) > 2*time.Second {
		t.Errorf("%+v after %v", c, time.Since(start))
	}
}

func TestScriptedOllamaModels(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/tags" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, `{"models":[{"name":"llama3:8b","model":"llama3:8b","size":1,"digest":"365c0bd3c000a25d28ddbf732fe1c6add414de7275464c4e4d1c3b5fcb5d8ad1"},{"model":"only-model:latest"}]}`)
	}))
	defer srv.Close()
	b := New(srv.URL + "/")
	if d := b.ModelDigest("llama3:8b"); d != "" {
		t.Errorf("digest %q before any listing", d)
	}
	got, err := b.Models(context.Background())
	if err != nil || strings.Join(got, ",") != "llama3:8b,only-model:latest" {
		t.Errorf("Models() = %v, %v", got, err)
	}
	for model, want := range map[string]string{
		"llama3:8b":         "365c0bd3c000a25d28ddbf732fe1c6add414de7275464c4e4d1c3b5fcb5d8ad1",
		"only-model:latest": "", // the server gave none
		"absent":            "",
	} {
		if d := b.ModelDigest(model); d != want {
			t.Errorf("ModelDigest(%q) = %q, want %q", model, d, want)
		}
	}
}
