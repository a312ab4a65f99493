package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/c0mpute/c0mpute/functions/connections"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/infra/relay"
	"github.com/c0mpute/c0mpute/workerd/identity"
)

// capture runs f with os.Stdout going to a file and returns what it wrote.
func capture(t *testing.T, f func() error) (string, error) {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	saved := os.Stdout
	os.Stdout = out
	ferr := f()
	os.Stdout = saved
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b), ferr
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := capture(t, func() error { return run(args) })
		if err != nil || out != "workerd dev\n" {
			t.Errorf("%v: %q, %v", args, out, err)
		}
	}
}

var update = flag.Bool("update", false, "rewrite testdata/help.golden")

// TestHelp: --help, -h, help and run --help print the commands and the run
// flags (testdata/help.golden; -update rewrites it) and succeed.
func TestHelp(t *testing.T) {
	const golden = "testdata/help.golden"
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"run", "--help"}} {
		out, err := capture(t, func() error { return run(args) })
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if *update {
			if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if out != string(want) {
			t.Errorf("%v prints:\n%s\nwant (%s):\n%s", args, out, golden, want)
		}
	}
}

func TestInit(t *testing.T) {
	home := t.TempDir()
	t.Setenv("C0MPUTE_HOME", home)
	t.Setenv("C0MPUTE_WORKER_KEY", "")
	out, err := capture(t, func() error { return run([]string{"init"}) })
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(home, "worker-key.json")
	key, err := identity.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	addr := identity.Address(key)
	if !strings.Contains(out, "created identity "+path) || !strings.Contains(out, addr) {
		t.Errorf("init output %q lacks the path or wallet %s", out, addr)
	}
	// A second init keeps the key and shows the same wallet.
	out, err = capture(t, func() error { return run([]string{"init"}) })
	if err != nil || !strings.Contains(out, "already exists") || !strings.Contains(out, addr) {
		t.Errorf("second init: %q, %v", out, err)
	}
	if again, _ := identity.Load(path); !again.Equal(key) {
		t.Error("second init changed the key")
	}
	// An explicit path.
	other := filepath.Join(t.TempDir(), "other.json")
	if _, err := capture(t, func() error { return run([]string{"init", other}) }); err != nil {
		t.Fatal(err)
	}
	if _, err := identity.Load(other); err != nil {
		t.Error(err)
	}
	// --home and --key-file are flags, not file names.
	flagHome := t.TempDir()
	if _, err := capture(t, func() error { return run([]string{"init", "--home", flagHome}) }); err != nil {
		t.Fatal(err)
	}
	if _, err := identity.Load(filepath.Join(flagHome, "worker-key.json")); err != nil {
		t.Errorf("init --home: %v", err)
	}
	if _, err := os.Stat("--home"); err == nil {
		t.Error("init made a file named --home")
	}
	keyFile := filepath.Join(t.TempDir(), "k.json")
	if _, err := capture(t, func() error { return run([]string{"init", "--key-file", keyFile}) }); err != nil {
		t.Fatal(err)
	}
	if _, err := identity.Load(keyFile); err != nil {
		t.Errorf("init --key-file: %v", err)
	}
	if out, err := capture(t, func() error { return run([]string{"init", "--help"}) }); err != nil || !strings.Contains(out, "usage: workerd init") {
		t.Errorf("init --help: %q, %v", out, err)
	}
	if _, err := capture(t, func() error { return run([]string{"init", "--bogus"}) }); err == nil || !strings.Contains(err.Error(), "usage: workerd init") {
		t.Errorf("init --bogus: %v; want the usage", err)
	}
	// An unreadable existing file is an error, not a silent success.
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := capture(t, func() error { return run([]string{"init", bad}) }); err == nil {
		t.Error("init over a broken key file succeeded")
	}
}

func TestRunErrors(t *testing.T) {
	home := t.TempDir()
	t.Setenv("C0MPUTE_HOME", home)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad config", []string{"run", "--relay", "http://x/", "--token", "cwt_x"}, `--relay (or C0MPUTE_RELAY_URL) is "http://x/"`},
		{"unknown command", []string{"serve"}, `unknown command "serve"`},
		{"no key yet", []string{"run", "--relay", "ws://127.0.0.1:1/", "--token", "cwt_x"}, "workerd init"},
	} {
		if err := run(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
}

// TestRunServesAndStopsOnSIGTERM runs the daemon end to end: init, then
// run against a local relay and a fake OpenAI-compatible server; it
// registers the server's model, answers a job, and on SIGTERM drains and
// returns nil.
func TestRunServesAndStopsOnSIGTERM(t *testing.T) {
	home := t.TempDir()
	t.Setenv("C0MPUTE_HOME", home)
	t.Setenv("C0MPUTE_WORKER_KEY", "")
	if _, err := capture(t, func() error { return run([]string{"init"}) }); err != nil {
		t.Fatal(err)
	}

	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(w, `{"object":"list","data":[{"id":"tiny:latest","object":"model"}]}`)
		case "/v1/chat/completions":
			w.Header().Set("Content-Type", "text/event-stream")
			for _, ev := range []string{
				`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{"content":" there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`,
				`[DONE]`,
			} {
				fmt.Fprintf(w, "data: %s\n\n", ev)
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer llm.Close()

	var mu sync.Mutex
	var seen []any
	var conn string
	h := func(_ context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
		switch req.RequestContext.RouteKey {
		case relay.RouteConnect:
			get := func(k string) string {
				for hk, v := range req.Headers {
					if strings.EqualFold(hk, k) {
						return v
					}
				}
				return ""
			}
			if p, err := relaymsg.VerifyConnect(get, time.Now()); err != nil || p.Token != "cwt_main" {
				return events.APIGatewayProxyResponse{StatusCode: http.StatusUnauthorized}, nil
			}
			return events.APIGatewayProxyResponse{StatusCode: 200}, nil
		case relay.RouteDisconnect:
			return events.APIGatewayProxyResponse{StatusCode: 200}, nil
		}
		m, err := relaymsg.Decode([]byte(req.Body))
		if err != nil {
			return events.APIGatewayProxyResponse{}, err
		}
		mu.Lock()
		seen = append(seen, m)
		mu.Unlock()
		if reg, ok := m.(*relaymsg.Register); ok {
			mu.Lock()
			conn = req.RequestContext.ConnectionID
			mu.Unlock()
			b, _ := relaymsg.Encode(&relaymsg.Registered{Conn: req.RequestContext.ConnectionID, Models: reg.Models, BatchMillis: 25})
			return events.APIGatewayProxyResponse{StatusCode: 200, Body: string(b)}, nil
		}
		return events.APIGatewayProxyResponse{StatusCode: 200}, nil
	}
	creds := aws.Credentials{AccessKeyID: "AKIAWORKERDTEST00002", SecretAccessKey: "workerd-main-test"}
	rl := relay.New(relay.HandlerFunc(h), relay.WithCredentials(creds.AccessKeyID, creds.SecretAccessKey))
	srv := httptest.NewServer(rl)
	defer srv.Close()
	defer rl.Close()
	mgmt := httptest.NewServer(rl.Management())
	defer mgmt.Close()

	done := make(chan error, 1)
	go func() {
		done <- run([]string{"run", "--relay", "ws" + strings.TrimPrefix(srv.URL, "http"), "--token", "cwt_main",
			"--backend", "openai", "--backend-url", llm.URL, "--log-level", "error"})
	}()
	find := func(what string, pred func(any) bool) any {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			for _, m := range seen {
				if pred(m) {
					mu.Unlock()
					return m
				}
			}
			mu.Unlock()
			select {
			case err := <-done:
				t.Fatalf("run returned early: %v", err)
			case <-time.After(5 * time.Millisecond):
			}
		}
		t.Fatalf("timed out waiting for %s", what)
		return nil
	}
	reg := find("register", func(m any) bool { _, ok := m.(*relaymsg.Register); return ok }).(*relaymsg.Register)
	if len(reg.Models) != 1 || reg.Models[0] != "tiny" || reg.Agent != "workerd/dev openai" {
		t.Errorf("register %+v", reg)
	}

	var job relaymsg.Job
	if err := json.Unmarshal([]byte(`{"job":"j1","reply_to":"l1","model":"tiny","deadline":"2999-01-01T00:00:00Z",
		"ticket":"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk",
		"request":{"model":"tiny","messages":[{"role":"user","content":"hello"}],"stream":true}}`), &job); err != nil {
		t.Fatal(err)
	}
	b, err := relaymsg.Encode(&job)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	c := conn
	mu.Unlock()
	if err := connections.NewLocal(mgmt.URL, creds).Post(context.Background(), c, b); err != nil {
		t.Fatal(err)
	}
	end := find("done", func(m any) bool {
		switch m.(type) {
		case *relaymsg.Done, *relaymsg.Fail:
			return true
		}
		return false
	})
	d, ok := end.(*relaymsg.Done)
	if !ok {
		t.Fatalf("the job ended with %+v", end)
	}
	if d.Job != "j1" || d.FinishReason != "stop" || d.Usage.TotalTokens != 5 {
		t.Errorf("done %+v", d)
	}
	var text strings.Builder
	mu.Lock()
	for _, m := range seen {
		if ch, ok := m.(*relaymsg.Chunk); ok {
			for _, dl := range ch.Deltas {
				text.WriteString(dl.Content)
			}
		}
	}
	mu.Unlock()
	if text.String() != "Hi there" {
		t.Errorf("reply %q", text.String())
	}

	// SIGTERM: the signal context set up by run catches it (it is set up
	// before the agent connects, so it is in place now).
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not stop on SIGTERM")
	}
	find("drain", func(m any) bool { _, ok := m.(*relaymsg.Drain); return ok })
}
