package earningscmd

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/infra/devnet"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
	"github.com/c0mpute/c0mpute/infra/ollamatest"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/agent"
	"github.com/c0mpute/c0mpute/workerd/backend/ollama"
)

func TestMain(m *testing.M) {
	code := m.Run()
	ollamatest.StopShared()
	os.Exit(code)
}

const (
	// tinyModel is the generated model on the test Ollama, and the
	// catalogue's model id.
	tinyModel = "tiny"
	// price is the model's price per job; the worker earns 70% of it.
	price   = 100
	account = "acct-earnings-golden"
	jobs    = 2
)

// workerSeed makes the worker's identity, so that its pubkey is the same
// in every run (the golden table shows it).
var workerSeed = bytes.Repeat([]byte{7}, ed25519.SeedSize)

// gateway is a real gateway (infra/devnet: the store, the relay, the API)
// whose one account's worker, a workerd agent in front of a real Ollama,
// has served real jobs.
type gateway struct {
	stack         *devnet.Stack
	apiKey, token string
}

func newGateway(t *testing.T) *gateway {
	t.Helper()
	if _, why := ollamatest.Binary(); why != "" {
		t.Skip("no Ollama binary: " + why)
	}
	srv := ollamatest.TinyModel(t, tinyModel, testmodel.Options{Seed: 7})
	ctx := context.Background()
	st := dynamotest.SuiteStore(t)
	stack, err := devnet.Start(ctx, devnet.Config{Store: st, APIAddr: "127.0.0.1:0", RelayAddr: "127.0.0.1:0",
		Models: []catalog.Model{{ID: tinyModel, Price: price}}, Limits: devnet.ScriptedLimits(),
		BatchWindow: devnet.DevBatchWindow, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.Close() })
	g := &gateway{stack: stack}
	if g.apiKey, err = stack.CreateAccount(ctx, account, 1000, "grant"); err != nil {
		t.Fatal(err)
	}
	if g.token, err = stack.IssueWorkerToken(ctx, account); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = agent.New(agent.Config{RelayURL: stack.RelayURL, Token: g.token, Key: ed25519.NewKeyFromSeed(workerSeed),
			Backend: ollama.New(srv.URL()), Models: map[string]string{tinyModel: tinyModel}, Version: "test",
			DrainTimeout: 5 * time.Second}).Run(wctx)
	}()
	t.Cleanup(func() { stop(); <-done })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ws, err := st.IdleWorkers(ctx, tinyModel); err != nil {
			t.Fatal(err)
		} else if len(ws) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker did not register within 20 s")
		}
	}
	for range jobs {
		code, body := g.call(t, http.MethodPost, "/chat/completions", g.apiKey,
			`{"model":"`+tinyModel+`","messages":[{"role":"user","content":"hello"}],"max_tokens":8,"temperature":0}`)
		if code != http.StatusOK {
			t.Fatalf("chat: %d %s", code, body)
		}
	}
	return g
}

func (g *gateway) call(t *testing.T, method, path, bearer, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, g.stack.APIURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestEarningsFromTheGateway: after the worker served real jobs, workerd
// earnings, with the settings workerd run has in workerd.json, shows the
// account's figures (testdata/earnings.golden; the gateway's times, which
// move with the clock, are checked against its own answer and then
// replaced); --json gives the gateway's answer; a revoked token and a
// wrong API URL fail with what to do (testdata/gateway_errors.golden).
func TestEarningsFromTheGateway(t *testing.T) {
	g := newGateway(t)
	home := t.TempDir()
	file, err := json.Marshal(map[string]string{"relay_url": g.stack.RelayURL, "token": g.token, "api_url": g.stack.APIURL})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "workerd.json"), file, 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"C0MPUTE_HOME": home}
	now := time.Now()
	main := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := Main(args, Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return vars[k] },
			Now: func() time.Time { return now }})
		return code, stdout.String(), stderr.String()
	}

	// What the account's owner reads with its API key.
	code, body := g.call(t, http.MethodGet, "/earnings", g.apiKey, "")
	var want Earnings
	if err := json.Unmarshal(body, &want); code != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/earnings with the API key: %d %s", code, body)
	}
	if want.Earned != jobs*price*70/100 || len(want.Workers) != 1 || want.Workers[0].JobsCompleted != jobs {
		t.Fatalf("the jobs did not earn what they should: %s", body)
	}

	code, out, errOut := main()
	if code != ExitOK || errOut != "" {
		t.Fatalf("workerd earnings: exit %d, stderr %s", code, errOut)
	}
	next, seen := when(want.NextPayout.At, now), when(want.Workers[0].LastSeen, now)
	for _, s := range []string{next, seen} {
		if !strings.Contains(out, s) {
			t.Errorf("the table does not show the gateway's time %q:\n%s", s, out)
		}
	}
	out = strings.ReplaceAll(out, next, "<next payout at>")
	out = strings.ReplaceAll(out, seen, "<last seen>")
	golden(t, "earnings.golden", out)

	code, out, errOut = main("--json")
	var got Earnings
	if err := json.Unmarshal([]byte(out), &got); code != ExitOK || errOut != "" || err != nil {
		t.Fatalf("workerd earnings --json: exit %d, %v, stderr %s", code, err, errOut)
	}
	if a, b := mustJSON(t, got), mustJSON(t, want); a != b {
		t.Errorf("--json prints %s; the gateway answers %s", a, b)
	}

	// Errors the gateway causes.
	var errs strings.Builder
	vars["C0MPUTE_API_URL"] = strings.TrimSuffix(g.stack.APIURL, "/v1") + "/gateway"
	code, _, errOut = main()
	errs.WriteString("# wrong API URL (exit " + itoa(code) + ")\n" + errOut + "\n")
	delete(vars, "C0MPUTE_API_URL")
	id := credential.PublicID(credential.WorkerTokenPrefix, credential.Hash(g.token))
	if code, body := g.call(t, http.MethodDelete, "/worker-tokens/"+id, g.apiKey, ""); code != http.StatusOK {
		t.Fatalf("revoke the worker token: %d %s", code, body)
	}
	code, _, errOut = main()
	errs.WriteString("# revoked worker token (exit " + itoa(code) + ")\n" + errOut)
	golden(t, "gateway_errors.golden", strings.ReplaceAll(errs.String(), strings.TrimSuffix(g.stack.APIURL, "/v1"), "$GATEWAY"))
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
