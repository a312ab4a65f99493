package openaicompat

// Tests against a scripted SSE server (httptest): it replays recorded or
// hand-written OpenAI-style event streams and error answers, for what the
// tiny real model cannot produce (tool calls, reasoning, server errors,
// broken streams) and for other servers' dialects (llama.cpp, vLLM).

import (
	"context"
	"encoding/json"
	"errors"
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

// scripted answers every request with status and body, and records the
// last request.
type scripted struct {
	*httptest.Server
	got chan *http.Request
	raw chan []byte
}

func newScripted(t *testing.T, status int, body string) *scripted {
	s := &scripted{got: make(chan *http.Request, 1), raw: make(chan []byte, 1)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case s.got <- r:
			s.raw <- b
		default:
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(s.Close)
	return s
}

func hi() *oaiwire.ChatRequest {
	return &oaiwire.ChatRequest{Messages: []oaiwire.Message{backendtest.User("hi")}}
}

func TestScriptedSSEStreams(t *testing.T) {
	files, _ := filepath.Glob("testdata/streams/*.sse")
	if len(files) == 0 {
		t.Fatal("no streams")
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".sse")
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			s := newScripted(t, 200, string(body))
			c := backendtest.Run(context.Background(), New(s.URL), "m", hi())
			checkToolDeltas(t, c.Deltas)
			backendtest.Golden(t, "streams/"+name+".golden", c)
		})
	}
}

// checkToolDeltas holds the backend contract: every fragment has an
// index, and a call's first fragment its id, type and name.
func checkToolDeltas(t *testing.T, ds []oaiwire.Delta) {
	t.Helper()
	seen := map[int]bool{}
	for _, d := range ds {
		for _, tc := range d.ToolCalls {
			if tc.Index == nil {
				t.Fatalf("fragment without index: %+v", tc)
			}
			if !seen[*tc.Index] && (tc.ID == "" || tc.Type != "function" || tc.Function.Name == "") {
				t.Errorf("first fragment of call %d lacks id, type or name: %+v", *tc.Index, tc)
			}
			seen[*tc.Index] = true
		}
	}
}

func TestScriptedSSERequests(t *testing.T) {
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
			before, _ := json.Marshal(&req)
			s := newScripted(t, 200, "data: [DONE]\n\n")
			c := backendtest.Run(context.Background(), New(s.URL), "served-model", &req)
			if c.Error != "" {
				t.Fatal(c.Error)
			}
			r := <-s.got
			if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Authorization") != "" {
				t.Errorf("%s %s %v", r.Method, r.URL.Path, r.Header)
			}
			backendtest.Golden(t, "requests/"+name+".golden.json", json.RawMessage(<-s.raw))
			if after, _ := json.Marshal(&req); string(after) != string(before) {
				t.Error("the caller's request was modified")
			}
		})
	}
}

func TestScriptedSSEDeveloperRoleKept(t *testing.T) {
	s := newScripted(t, 200, "data: [DONE]\n\n")
	req := &oaiwire.ChatRequest{Messages: []oaiwire.Message{{Role: "developer", Content: oaiwire.Content{Text: "x"}}, backendtest.User("hi")}}
	backendtest.Run(context.Background(), New(s.URL, WithDeveloperRole()), "m", req)
	<-s.got
	if body := string(<-s.raw); !strings.Contains(body, `"role":"developer"`) {
		t.Errorf("sent %s", body)
	}
}

func TestScriptedSSEAPIKey(t *testing.T) {
	s := newScripted(t, 200, `{"object":"list","data":[{"id":"a","object":"model"},{"id":"b/c:d","object":"model"}]}`)
	got, err := New(s.URL+"/v1/", WithAPIKey("sk-local")).Models(context.Background())
	r := <-s.got
	if err != nil || strings.Join(got, ",") != "a,b/c:d" || r.URL.Path != "/v1/models" || r.Header.Get("Authorization") != "Bearer sk-local" {
		t.Errorf("Models() = %v, %v; %s %v", got, err, r.URL.Path, r.Header)
	}
}

func TestScriptedSSEHTTPErrors(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   APIError
	}{
		{"openai", 401, `{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
			APIError{401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"}},
		{"ollama v1", 404, `{"error":{"message":"model \"x\" not found, try pulling it first","type":"api_error","param":null,"code":null}}`,
			APIError{404, `model "x" not found, try pulling it first`, "api_error", ""}},
		{"llama.cpp", 400, `{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}}`,
			APIError{400, "the request exceeds the available context size", "exceed_context_size_error", "400"}},
		{"vllm top-level", 400, `{"object":"error","message":"max_tokens must be at least 1","type":"BadRequestError","param":null,"code":400}`,
			APIError{400, "max_tokens must be at least 1", "BadRequestError", ""}},
		{"string error", 503, `{"error":"Loading model"}`, APIError{503, "Loading model", "", ""}},
		{"fastapi detail", 404, `{"detail":"Not Found"}`, APIError{404, "Not Found", "", ""}},
		{"plain text", 502, "upstream connect error\n", APIError{502, "upstream connect error", "", ""}},
		{"empty", 500, "", APIError{500, "500 Internal Server Error", "", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScripted(t, tt.status, tt.body)
			b := New(s.URL)
			_, err := b.Chat(context.Background(), "m", hi(), func(oaiwire.Delta) error { t.Error("emitted"); return nil })
			var ae *APIError
			if !errors.As(err, &ae) || *ae != tt.want {
				t.Errorf("Chat err = %#v, want %#v", err, tt.want)
			}
			if _, err := b.Models(context.Background()); !errors.As(err, &ae) || ae.StatusCode != tt.status {
				t.Errorf("Models err = %v", err)
			}
		})
	}
}

func TestScriptedSSELineLimit(t *testing.T) {
	long := `data: {"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 5000) + `"}}]}` + "\n\ndata: [DONE]\n\n"
	s := newScripted(t, 200, long)
	if c := backendtest.Run(context.Background(), New(s.URL, WithMaxLine(4096)), "m", hi()); !strings.Contains(c.Error, "longer than 4096 bytes") || len(c.Deltas) != 0 {
		t.Errorf("one long line: %+v", c)
	}
	// Many short data lines of one event add up too.
	many := strings.Repeat("data: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n", 100) + "\n"
	s = newScripted(t, 200, many)
	if c := backendtest.Run(context.Background(), New(s.URL, WithMaxLine(4096)), "m", hi()); !strings.Contains(c.Error, "event longer than 4096 bytes") {
		t.Errorf("long event: %+v", c)
	}
	if c := backendtest.Run(context.Background(), New(newScripted(t, 200, long).URL), "m", hi()); c.Error != "" || len(c.Content()) != 5000 {
		t.Errorf("default limit: %v", c.Error)
	}
}

func TestScriptedSSEEmitError(t *testing.T) {
	body, _ := os.ReadFile("testdata/streams/no_usage.sse")
	s := newScripted(t, 200, string(body))
	stop := errors.New("stop")
	n := 0
	_, err := New(s.URL).Chat(context.Background(), "m", hi(), func(oaiwire.Delta) error { n++; return stop })
	if err != stop || n != 1 {
		t.Errorf("err %v after %d deltas", err, n)
	}
}

// TestScriptedSSEStall: a server that stops sending mid-stream is left
// when the context ends.
func TestScriptedSSEStall(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"a"}}]}`+"\n\n")
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
	c := backendtest.Run(ctx, New(srv.URL), "m", hi())
	if c.Error != context.DeadlineExceeded.Error() || c.Content() != "a" || time.Since(start) > 2*time.Second {
		t.Errorf("%+v after %v", c, time.Since(start))
	}
}
