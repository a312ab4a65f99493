package lambdatest

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdaurl"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/connections"
	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/dispatch"
	"github.com/c0mpute/c0mpute/functions/listener"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/relayroutes"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
	"github.com/c0mpute/c0mpute/workerd/backend"
)

// gatedBackend stands in for the worker's inference server so the test
// decides when the reply goes on: it emits "Hello", waits for release,
// then emits " world". (The real server, Ollama, runs in
// TestGatewayUnderRIE; here the point is the order of bytes.)
type gatedBackend struct {
	started chan struct{}
	release chan struct{}
}

func (g *gatedBackend) Name() string                             { return "gated" }
func (g *gatedBackend) Models(context.Context) ([]string, error) { return []string{"gated-model"}, nil }
func (g *gatedBackend) Chat(ctx context.Context, _ string, _ *oaiwire.ChatRequest, emit func(oaiwire.Delta) error) (backend.Result, error) {
	// started closes before the first emit: emit may hand the token on
	// before it returns, so closing after it would race the reader.
	close(g.started)
	if err := emit(oaiwire.Delta{Content: "Hello"}); err != nil {
		return backend.Result{}, err
	}
	select {
	case <-g.release:
	case <-ctx.Done():
		return backend.Result{}, ctx.Err()
	}
	if err := emit(oaiwire.Delta{Content: " world"}); err != nil {
		return backend.Result{}, err
	}
	return backend.Result{FinishReason: "stop", Usage: oaiwire.Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5}}, nil
}

// TestStreamingThroughLambdaURLWrap runs the API handler as the API
// function does, through lambdaurl.Wrap (what lambdaurl.Start serves), and
// reads the Function URL streaming response while the worker is still
// generating: the first token must reach the response stream before the
// reply is finished. The emulator cannot show this (it buffers), so it is
// checked here, in process, with the real relay routes, listener, store
// and worker agent.
func TestStreamingThroughLambdaURLWrap(t *testing.T) {
	ctx := context.Background()
	log := testLog(t)
	st, err := embedded.Open(filepath.Join(t.TempDir(), "c0.db"), embedded.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cat, err := catalog.New([]catalog.Model{{ID: "c0mpute-pro", Price: 10}})
	if err != nil {
		t.Fatal(err)
	}
	lr := listenRelay(t)
	conns := connections.NewLocal(lr.mgmtURL, lr.creds)
	disp := dispatch.New(st, conns, log)
	secret := randomHex(32)
	lr.serve(t, &relayroutes.Handler{Store: st, Post: conns, Dispatch: disp, Catalog: cat, ListenerSecret: secret, Log: log})
	relayURL := lr.wsURL
	lis, err := listener.Start(ctx, listener.Config{URL: relayURL, Secret: secret, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	limits := api.DefaultLimits()
	limits.MaxTokPerSec = 0 // the scripted backend answers at memory speed
	a, err := api.New(api.Config{Store: st, Dispatcher: disp, Connections: conns, Relay: lis, Catalog: cat,
		Tickets: relaymsg.NewTicketer(secret), Limits: limits, Log: log})
	if err != nil {
		t.Fatal(err)
	}

	acct := "acct-stream"
	if err := st.CreateAccount(ctx, store.Account{ID: acct, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Grant(ctx, acct, 100, "g", false); err != nil {
		t.Fatal(err)
	}
	key, hash, id := credential.New(credential.APIKeyPrefix)
	if err := st.PutAPIKey(ctx, store.Secret{Hash: hash, ID: id, AccountID: acct, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	tok, hash, id := credential.New(credential.WorkerTokenPrefix)
	if err := st.PutWorkerToken(ctx, store.Secret{Hash: hash, ID: id, AccountID: acct, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	be := &gatedBackend{started: make(chan struct{}), release: make(chan struct{})}
	g := &gateway{relayURL: relayURL}
	g.startWorker(t, tok, be, map[string]string{"c0mpute-pro": "gated-model"})
	deadline := time.Now().Add(20 * time.Second)
	for {
		ws, err := st.IdleWorkers(ctx, "c0mpute-pro")
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("worker did not register")
		}
		time.Sleep(10 * time.Millisecond)
	}

	var ev events.LambdaFunctionURLRequest
	loadEvent(t, "function-url-chat.json", &ev)
	ev.Headers["authorization"] = "Bearer " + key
	released := false
	defer func() {
		if !released {
			close(be.release)
		}
	}()
	resp, err := lambdaurl.Wrap(a)(ctx, &ev)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Headers["Content-Type"] != "text/event-stream" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Headers)
	}
	body := bufio.NewReader(resp.Body)
	var seen strings.Builder
	// Read events until the first token: the backend is still holding the
	// rest of the reply, so these bytes were streamed, not buffered.
	for !strings.Contains(seen.String(), `"content":"Hello"`) {
		line, err := body.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before the first token: %v\nread %q", err, seen.String())
		}
		seen.WriteString(line)
	}
	select {
	case <-be.started:
	default:
		t.Fatal("first token read before the backend began its reply")
	}
	if strings.Contains(seen.String(), "world") || strings.Contains(seen.String(), "[DONE]") {
		t.Fatalf("read the end of the reply before the backend released it: %q", seen.String())
	}
	released = true
	close(be.release)
	rest, err := readAll(body)
	if err != nil {
		t.Fatal(err)
	}
	text, finish, done := readSSE(t, []byte(seen.String()+rest))
	if text != "Hello world" || finish != "stop" || !done {
		t.Fatalf("stream: %q finish %q [DONE] %v", text, finish, done)
	}
}

func readAll(r *bufio.Reader) (string, error) {
	b, err := io.ReadAll(r)
	return string(b), err
}
