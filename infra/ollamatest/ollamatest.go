// Package ollamatest runs a real Ollama server for tests: a private one on a
// free loopback port with its own HOME and model store, and creates models
// in it from GGUF bytes (see infra/testmodel).
//
// The binary is C0MPUTE_OLLAMA_BIN, else <repo>/.cache/bin/ollama (where
// scripts/test builds it), else ollama on PATH. Without one, tests skip, or
// fail under C0MPUTE_REQUIRE_INTEGRATION=1.
package ollamatest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/infra/testenv"
	"github.com/c0mpute/c0mpute/infra/testmodel"
)

// BinEnv names the variable that points at an ollama binary.
const BinEnv = "C0MPUTE_OLLAMA_BIN"

// Template is the chat template models are created with. It renders
// tools, so requests with tools are accepted, but no reply is ever parsed
// as a tool call.
const Template = `{{- if .Tools }}<|tools|>{{ range .Tools }}{{ .Function.Name }};{{ end }}{{ end }}` +
	`{{- range .Messages }}<|{{ .Role }}|>{{ .Content }}{{ range .ToolCalls }}<|call|>{{ .Function.Name }}{{ end }}{{ end }}<|assistant|>`

// Parameters are the parameters models are created with.
var Parameters = map[string]any{"num_ctx": 256, "num_thread": 1}

const startTimeout = 60 * time.Second

// Server is a running `ollama serve`.
type Server struct {
	url  string
	dir  string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when the process has exited
	// stopped records a Stop call: an exit after it is expected.
	stopped bool
}

// URL is the server's base URL, e.g. http://127.0.0.1:41234.
func (s *Server) URL() string { return s.url }

// Logs returns what the server has logged so far.
func (s *Server) Logs() string {
	b, _ := os.ReadFile(s.log.Name())
	return string(b)
}

// Start runs a server for the test and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, why := Binary()
	if bin == "" {
		testenv.Missing(t, "ollama", why)
	}
	s, err := start(bin, t.TempDir())
	if err != nil {
		t.Fatalf("ollamatest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("ollamatest: %v", err)
		}
		if t.Failed() {
			t.Logf("ollama log:\n%s", tail(s.Logs(), 4000))
		}
	})
	return s
}

var shared struct {
	sync.Mutex
	s   *Server
	err error
	why string
}

// Shared returns a server shared by all tests of the test binary, started
// on first use. The package's TestMain must call StopShared after m.Run.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if shared.s == nil && shared.err == nil && shared.why == "" {
		bin, why := Binary()
		if bin == "" {
			shared.why = why
		} else {
			dir, err := os.MkdirTemp("", "ollamatest-")
			if err == nil {
				shared.s, err = start(bin, dir)
				if err != nil {
					os.RemoveAll(dir)
				}
			}
			shared.err = err
		}
	}
	switch {
	case shared.why != "":
		testenv.Missing(t, "ollama", shared.why)
	case shared.err != nil:
		t.Fatalf("ollamatest: %v", shared.err)
	}
	return shared.s
}

var models struct {
	sync.Mutex
	err map[string]error // by server URL and model name: the creation's outcome
}

// TinyModel returns the Shared server with model name created in it from
// the generated model (infra/testmodel) with opts. The model is created
// once per server; a failed creation fails every test that asks for it.
// Later calls for the same name get the first model whatever their opts.
func TinyModel(t testing.TB, name string, opts testmodel.Options) *Server {
	t.Helper()
	s := Shared(t)
	models.Lock()
	defer models.Unlock()
	if models.err == nil {
		models.err = map[string]error{}
	}
	key := s.url + " " + name
	err, done := models.err[key]
	if !done {
		var gguf []byte
		if gguf, err = testmodel.Bytes(opts); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			err = Create(ctx, s.url, name, gguf)
			cancel()
		}
		models.err[key] = err
	}
	if err != nil {
		t.Fatalf("ollamatest: create model %s: %v", name, err)
	}
	return s
}

// StopShared stops the shared server, if one was started.
func StopShared() {
	shared.Lock()
	defer shared.Unlock()
	if shared.s != nil {
		if err := shared.s.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "ollamatest:", err)
		}
		os.RemoveAll(shared.s.dir)
		shared.s = nil
	}
}

// Binary finds the ollama binary, or says why there is none.
func Binary() (path, why string) {
	if p := os.Getenv(BinEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Sprintf("%s=%s: %v", BinEnv, p, err)
		}
		return p, ""
	}
	if root := repoRoot(); root != "" {
		p := filepath.Join(root, ".cache", "bin", "ollama")
		if _, err := os.Stat(p); err == nil {
			return p, ""
		}
	}
	if p, err := exec.LookPath("ollama"); err == nil {
		return p, ""
	}
	return "", "no ollama binary in $" + BinEnv + ", .cache/bin or PATH"
}

func repoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

func start(bin, dir string) (*Server, error) {
	var err error
	for range 3 { // the free port can be taken before serve binds it
		var s *Server
		if s, err = startOnce(bin, dir); err == nil {
			return s, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, err
}

func startOnce(bin, dir string) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()

	log, err := os.CreateTemp(dir, "serve-*.log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(cleanEnv(),
		"HOME="+dir,
		"OLLAMA_MODELS="+filepath.Join(dir, "models"),
		"OLLAMA_HOST="+addr,
	)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // runners too can be killed as a group
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	s := &Server{url: "http://" + addr, dir: dir, cmd: cmd, log: log, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()

	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-s.done:
			log.Close()
			return nil, fmt.Errorf("ollama serve exited at start: %s", tail(s.Logs(), 2000))
		case <-time.After(20 * time.Millisecond):
		}
		if ready(s.url) {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("ollama serve not ready after %v: %s", startTimeout, tail(s.Logs(), 2000))
		}
	}
}

// cleanEnv is the environment without OLLAMA_ settings from outside.
func cleanEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "OLLAMA_") {
			env = append(env, e)
		}
	}
	return env
}

func ready(url string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/version", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Stop ends the server with SIGTERM (which ends its runners), and kills
// its process group if it has not exited after 10 s.
func (s *Server) Stop() error {
	defer s.log.Close()
	stoppedBefore := s.stopped
	s.stopped = true
	select {
	case <-s.done:
		if stoppedBefore {
			return nil
		}
		// It died on its own: its model runners may live on in its
		// process group, and the crash must not pass unnoticed.
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		return fmt.Errorf("ollama serve exited before it was stopped: %v", s.cmd.ProcessState)
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(10 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
		return errors.New("ollama serve ignored SIGTERM for 10 s; killed")
	}
}

// CreateModel creates model name on the server from a GGUF file.
func (s *Server) CreateModel(t testing.TB, name string, gguf []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := Create(ctx, s.url, name, gguf); err != nil {
		t.Fatalf("ollamatest: %v", err)
	}
}

// Create creates model name on the Ollama at baseURL from a GGUF file,
// with Template and Parameters: it uploads the blob unless the server has
// it, then creates the model over it.
func Create(ctx context.Context, baseURL, name string, gguf []byte) error {
	baseURL = strings.TrimRight(baseURL, "/")
	sum := sha256.Sum256(gguf)
	digest := "sha256:" + hex.EncodeToString(sum[:])

	head, err := http.NewRequestWithContext(ctx, http.MethodHead, baseURL+"/api/blobs/"+digest, nil)
	if err != nil {
		return err
	}
	if code, _, err := do(head); err != nil {
		return err
	} else if code != http.StatusOK {
		up, _ := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/api/blobs/"+digest, bytes.NewReader(gguf))
		if code, body, err := do(up); err != nil {
			return err
		} else if code/100 != 2 {
			return fmt.Errorf("upload blob %s: %d %s", digest, code, body)
		}
	}

	body, err := json.Marshal(map[string]any{
		"model":      name,
		"files":      map[string]string{"model.gguf": digest},
		"template":   Template,
		"parameters": Parameters,
		"stream":     false,
	})
	if err != nil {
		return err
	}
	create, _ := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/api/create", bytes.NewReader(body))
	create.Header.Set("Content-Type", "application/json")
	code, resp, err := do(create)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("create model %s: %d %s", name, code, resp)
	}
	return nil
}

func do(req *http.Request) (int, string, error) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// GreedyChat asks the server directly (its own /api/chat, no gateway) for
// a greedy reply of exactly n tokens, with the repetition penalty off (the
// OpenAI API has none by default), and fails t otherwise.
func (s *Server) GreedyChat(t testing.TB, model string, msgs []map[string]string, n int) string {
	t.Helper()
	body, err := json.Marshal(map[string]any{"model": model, "messages": msgs, "stream": false,
		"options": map[string]any{"temperature": 0, "num_predict": n, "seed": 1, "repeat_penalty": 1, "repeat_last_n": 0}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/api/chat", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("ollama chat: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatalf("ollama chat: %v", err)
	}
	var out struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		EvalCount int  `json:"eval_count"`
		Done      bool `json:"done"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil || !out.Done {
		t.Fatalf("ollama chat: %d %s", resp.StatusCode, raw)
	}
	if out.EvalCount != n {
		t.Fatalf("ollama generated %d tokens, want %d: %s", out.EvalCount, n, raw)
	}
	return out.Message.Content
}
