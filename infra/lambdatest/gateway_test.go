package lambdatest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/lambdaenv"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
	"github.com/c0mpute/c0mpute/infra/ollamatest"
	"github.com/c0mpute/c0mpute/infra/relay"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/agent"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/backend/ollama"
)

func TestMain(m *testing.M) {
	code := m.Run()
	ollamatest.StopShared()
	Cleanup()
	os.Exit(code)
}

func testLog(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// gateway is the AWS topology on one machine: DynamoDB Local for the
// table, the local API-Gateway-compatible relay for the WebSocket API, and
// the relay function's bootstrap under the emulator behind it.
type gateway struct {
	rie      string
	store    *dynamo.Store
	relay    *Emulator
	relayURL string // ws://
	secret   string
	env      map[string]string // the functions' common environment
}

func newGateway(t testing.TB) *gateway {
	t.Helper()
	rie := RequireRIE(t)
	db := dynamotest.Client(t)
	table := dynamotest.Table(t, db)
	secret := randomHex(32)
	secretFile := filepath.Join(t.TempDir(), "listener-secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lr := listenRelay(t)
	g := &gateway{rie: rie, store: dynamo.New(db, table), secret: secret, relayURL: lr.wsURL}
	g.env = map[string]string{
		lambdaenv.EnvTable: table, lambdaenv.EnvDynamoEndpoint: dynamotest.Endpoint(t),
		lambdaenv.EnvConnectionsURL: lr.mgmtURL, lambdaenv.EnvListenerFile: secretFile,
		lambdaenv.EnvLogLevel: "debug",
		// The test workers serve random weights or a fixed text: their
		// model does not answer questions, so the canaries compare
		// workers instead of checking known answers (as for the dev
		// network's demo model), and one worker alone is not judged.
		lambdaenv.EnvCatalog: `[{"id":"c0mpute-pro","price":10}]`,
		// What Lambda gives every function: a region and the role's
		// credentials. DynamoDB Local accepts any; the local relay's
		// management API only these, with the signature verified, as
		// API Gateway only the role's.
		"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": lr.creds.AccessKeyID, "AWS_SECRET_ACCESS_KEY": lr.creds.SecretAccessKey,
	}
	relayEnv := clone(g.env)
	relayEnv[lambdaenv.EnvBatchWindowMS] = "5"
	relayEnv["AWS_LAMBDA_FUNCTION_NAME"] = "c0mpute-relay"
	g.relay = Start(t, rie, Bootstrap(t, "relay"), relayEnv)
	lr.serve(t, RelayFunction(g.relay), relay.WithLogger(testLog(t).With("component", "relay")))
	return g
}

// startAPI runs the API bootstrap under the emulator; its first invocation
// cold-starts it, joining the relay as a listener.
func (g *gateway) startAPI(t testing.TB) *Emulator {
	env := clone(g.env)
	env[lambdaenv.EnvRelayURL] = g.relayURL
	env["AWS_LAMBDA_FUNCTION_NAME"] = "c0mpute-api"
	return Start(t, g.rie, Bootstrap(t, "api"), env)
}

type account struct{ id, apiKey, workerToken string }

func (g *gateway) account(t *testing.T, credits int64) account {
	t.Helper()
	ctx := context.Background()
	a := account{id: "acct-" + randomHex(4)}
	if err := g.store.CreateAccount(ctx, store.Account{ID: a.id, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.store.Grant(ctx, a.id, credits, "grant-"+a.id, false); err != nil {
		t.Fatal(err)
	}
	secret, hash, id := credential.New(credential.APIKeyPrefix)
	if err := g.store.PutAPIKey(ctx, store.Secret{Hash: hash, ID: id, AccountID: a.id, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	a.apiKey = secret
	secret, hash, id = credential.New(credential.WorkerTokenPrefix)
	if err := g.store.PutWorkerToken(ctx, store.Secret{Hash: hash, ID: id, AccountID: a.id, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	a.workerToken = secret
	return a
}

// startWorker runs workerd's agent against the relay; it stops at the end
// of the test or when stop is called.
func (g *gateway) startWorker(t *testing.T, token string, be backend.Backend, models map[string]string) (stop func()) {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	a := agent.New(agent.Config{RelayURL: g.relayURL, Token: token, Key: key, Backend: be, Models: models,
		Log: testLog(t).With("component", "worker"), Version: "lambdatest", DrainTimeout: 2 * time.Second})
	go func() { defer close(done); _ = a.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

func (g *gateway) waitIdleWorkers(t *testing.T, model string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ws, err := g.store.IdleWorkers(context.Background(), model)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle workers for %s after 30 s, want %d\nrelay function:\n%s", len(ws), model, n, tail(g.relay.Logs(), 4000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRelayRoutesUnderRIE invokes the relay bootstrap directly with the
// golden WebSocket events: a listener's $connect (good and bad secret), a
// $default that is not a relay message, and $disconnect, checking the
// responses and the records in the table.
func TestRelayRoutesUnderRIE(t *testing.T) {
	g := newGateway(t)
	ctx := context.Background()
	var connect, bad, msg, disconnect events.APIGatewayWebsocketProxyRequest
	loadEvent(t, "websocket-connect.json", &connect)
	loadEvent(t, "websocket-connect.json", &bad)
	loadEvent(t, "websocket-default.json", &msg)
	loadEvent(t, "websocket-disconnect.json", &disconnect)
	conn := connect.RequestContext.ConnectionID
	connect.Headers[relaymsg.HeaderListener] = g.secret
	connect.MultiValueHeaders[relaymsg.HeaderListener] = []string{g.secret}
	bad.RequestContext.ConnectionID = "BadSecretConn0="
	bad.Headers[relaymsg.HeaderListener] = strings.Repeat("x", len(g.secret))

	resp := invokeRelay(t, g.relay, bad)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("$connect with a wrong listener secret: %d %q, want 401", resp.StatusCode, resp.Body)
	}
	if _, err := g.store.GetListener(ctx, bad.RequestContext.ConnectionID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused listener stored: %v", err)
	}

	if resp = invokeRelay(t, g.relay, connect); resp.StatusCode != http.StatusOK {
		t.Fatalf("listener $connect: %d %q", resp.StatusCode, resp.Body)
	}
	if _, err := g.store.GetListener(ctx, conn); err != nil {
		t.Fatalf("listener not stored after $connect: %v", err)
	}

	resp = invokeRelay(t, g.relay, msg)
	var reply struct {
		Type string `json:"type"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(resp.Body), &reply) != nil || reply.Type != "error" {
		t.Fatalf("$default with a message the relay does not know: %d %q, want an error reply", resp.StatusCode, resp.Body)
	}

	if resp = invokeRelay(t, g.relay, disconnect); resp.StatusCode != http.StatusOK {
		t.Fatalf("$disconnect: %d %q", resp.StatusCode, resp.Body)
	}
	if _, err := g.store.GetListener(ctx, conn); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("listener still stored after $disconnect: %v", err)
	}
	reportInit(t, "relay", g.relay)
}

func invokeRelay(t *testing.T, e *Emulator, ev events.APIGatewayWebsocketProxyRequest) events.APIGatewayProxyResponse {
	t.Helper()
	r, err := e.Invoke(context.Background(), ev)
	if err != nil {
		t.Fatalf("invoke %s: %v\n%s", ev.RequestContext.RouteKey, err, tail(e.Logs(), 3000))
	}
	var resp events.APIGatewayProxyResponse
	if err := json.Unmarshal(r.Body, &resp); err != nil {
		t.Fatalf("%s response %q: %v", ev.RequestContext.RouteKey, r.Body, err)
	}
	return resp
}

const tinyModel = "tiny"

// TestGatewayUnderRIE is the deployment on one machine: a worker (workerd's
// agent over a real Ollama) connects through the relay to the relay
// bootstrap under the emulator, the API bootstrap under another emulator
// joins the relay as a listener, and Function URL events for /v1/models
// and a streaming chat completion go to the API bootstrap. The reply comes
// from the worker through the relay function to the API's listener.
func TestGatewayUnderRIE(t *testing.T) {
	g := newGateway(t)
	ctx := context.Background()
	srv := ollamatest.TinyModel(t, tinyModel, testmodel.Options{Seed: 7})
	acct := g.account(t, 1000)
	stopWorker := g.startWorker(t, acct.workerToken, ollama.New(srv.URL()), map[string]string{"c0mpute-pro": tinyModel})
	g.waitIdleWorkers(t, "c0mpute-pro", 1)

	api := g.startAPI(t)

	t.Run("models", func(t *testing.T) {
		var ev events.LambdaFunctionURLRequest
		loadEvent(t, "function-url-models.json", &ev)
		status, header, body := invokeURL(t, api, ev)
		if status != http.StatusOK || !strings.HasPrefix(header["Content-Type"], "application/json") {
			t.Fatalf("/v1/models: %d %v %s", status, header, body)
		}
		var list struct {
			Object string `json:"object"`
			Data   []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &list); err != nil || list.Object != "list" {
			t.Fatalf("/v1/models body %s: %v", body, err)
		}
		found := false
		for _, m := range list.Data {
			found = found || m.ID == "c0mpute-pro"
		}
		if !found {
			t.Fatalf("c0mpute-pro missing from %s", body)
		}
	})
	reportInit(t, "api", api)

	t.Run("streaming chat", func(t *testing.T) {
		var ev events.LambdaFunctionURLRequest
		loadEvent(t, "function-url-chat.json", &ev)
		ev.Headers["authorization"] = "Bearer " + acct.apiKey
		before, err := g.store.GetAccount(ctx, acct.id)
		if err != nil {
			t.Fatal(err)
		}
		status, header, body := invokeURL(t, api, ev)
		if status != http.StatusOK || header["Content-Type"] != "text/event-stream" {
			t.Fatalf("chat: %d %v %s\napi:\n%s", status, header, body, tail(api.Logs(), 4000))
		}
		text, finish, done := readSSE(t, body)
		if !done || text == "" || finish == "" {
			t.Fatalf("stream: text %q, finish %q, [DONE] %v\nbody %q\napi:\n%s", text, finish, done, body, tail(api.Logs(), 5000))
		}
		after, err := g.store.GetAccount(ctx, acct.id)
		if err != nil {
			t.Fatal(err)
		}
		// c0mpute-pro is priced at 10 credits per request; the worker's
		// account is the same one here, so it also earns its share.
		if spent := before.Credits - after.Credits; spent != 10 || after.TotalSpent-before.TotalSpent != 10 {
			t.Fatalf("credits %d -> %d (spent %d), want 10 charged", before.Credits, after.Credits, spent)
		}
		if after.Earned <= before.Earned {
			t.Fatalf("worker account earned %d -> %d, want a share of the request", before.Earned, after.Earned)
		}
		t.Logf("streamed %q (finish %s) through the relay function", text, finish)
	})

	t.Run("worker disconnect", func(t *testing.T) {
		stopWorker()
		// The agent drains, then closes: the relay function's $disconnect
		// deletes the worker record.
		deadline := time.Now().Add(30 * time.Second)
		for {
			ws, err := g.store.Workers(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(ws) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("workers after the worker left: %+v\nrelay function:\n%s", ws, tail(g.relay.Logs(), 3000))
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// invokeURL sends a Function URL event to the API bootstrap and decodes
// the streaming reply, which the emulator returns whole.
func invokeURL(t *testing.T, e *Emulator, ev events.LambdaFunctionURLRequest) (int, map[string]string, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r, err := e.Invoke(ctx, ev)
	if err != nil {
		t.Fatalf("invoke %s: %v\n%s", ev.RawPath, err, tail(e.Logs(), 4000))
	}
	status, header, body, err := SplitStreamingResponse(r.Body)
	if err != nil {
		t.Fatalf("%s: %v (%q)", ev.RawPath, err, tail(string(r.Body), 300))
	}
	return status, header, body
}

// readSSE reads a chat completion stream: its text, finish reason, and
// whether it ended with [DONE].
func readSSE(t testing.TB, body []byte) (text, finish string, done bool) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		for _, c := range chunk.Choices {
			text += c.Delta.Content
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
	}
	return text, finish, done
}

func reportInit(t *testing.T, fn string, e *Emulator) {
	t.Helper()
	d, err := e.InitDuration()
	if err != nil {
		t.Errorf("%s: %v", fn, err)
		return
	}
	// A figure, not an assertion: the README's cold-start table.
	t.Logf("%s cold start under the emulator: init %v", fn, d.Round(100*time.Microsecond))
}

func clone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
