package api_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/infra/devnet"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
	"github.com/c0mpute/c0mpute/workerd/agent"
)

// tokenGateway is a real gateway (infra/devnet: the store, the relay, the
// API) with two contributor accounts, each with an API key and a worker
// token; the owner's worker has completed one paid job.
type tokenGateway struct {
	stack                *devnet.Stack
	ownerKey, ownerToken string
	otherKey, otherToken string
}

const (
	owner = "acct-worker-token-owner"
	other = "acct-worker-token-other"
	// jobPrice is the served model's price; the worker earns 70% of it.
	jobPrice = 100
)

func newTokenGateway(t *testing.T) *tokenGateway {
	t.Helper()
	ctx := context.Background()
	st := dynamotest.SuiteStore(t)
	stack, err := devnet.Start(ctx, devnet.Config{Store: st, APIAddr: "127.0.0.1:0", RelayAddr: "127.0.0.1:0",
		Models: []catalog.Model{{ID: served, Price: jobPrice}}, Limits: devnet.ScriptedLimits(), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.Close() })
	g := &tokenGateway{stack: stack}
	if g.ownerKey, err = stack.CreateAccount(ctx, owner, 1000, "grant"); err != nil {
		t.Fatal(err)
	}
	if g.ownerToken, err = stack.IssueWorkerToken(ctx, owner); err != nil {
		t.Fatal(err)
	}
	if g.otherKey, err = stack.CreateAccount(ctx, other, 0, "grant"); err != nil {
		t.Fatal(err)
	}
	if g.otherToken, err = stack.IssueWorkerToken(ctx, other); err != nil {
		t.Fatal(err)
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = agent.New(agent.Config{RelayURL: stack.RelayURL, Token: g.ownerToken, Key: key, Backend: scripted{},
			Models: map[string]string{served: "scripted"}, DrainTimeout: time.Second}).Run(wctx)
	}()
	t.Cleanup(func() { stop(); <-done })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ws, err := st.IdleWorkers(ctx, served); err != nil {
			t.Fatal(err)
		} else if len(ws) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker did not register within 20 s")
		}
	}
	// One job, paid by the owner's own API key: its worker earns 70.
	code, body := g.call(t, http.MethodPost, "/chat/completions", g.ownerKey,
		`{"model":"`+served+`","messages":[{"role":"user","content":"hello"}]}`)
	if code != http.StatusOK {
		t.Fatalf("chat: %d %s", code, body)
	}
	return g
}

// call sends one request to the gateway over HTTP and returns the status
// and the body.
func (g *tokenGateway) call(t *testing.T, method, path, bearer, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, g.stack.APIURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
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

type earningsRead struct {
	AccountID string `json:"account_id"`
	Earned    int64  `json:"earned"`
	Pending   int64  `json:"pending"`
	Workers   []struct {
		Pubkey        string `json:"pubkey"`
		Earned        int64  `json:"earned"`
		JobsCompleted int64  `json:"jobs_completed"`
	} `json:"workers"`
}

func (g *tokenGateway) earnings(t *testing.T, bearer string) earningsRead {
	t.Helper()
	code, body := g.call(t, http.MethodGet, "/earnings", bearer, "")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/earnings: %d %s", code, body)
	}
	var e earningsRead
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("earnings: %v: %s", err, body)
	}
	return e
}

// TestWorkerTokenReadsItsEarnings: the worker token workerd holds reads
// its own account's earnings and workers, as the account's API key does,
// and nothing of another account.
func TestWorkerTokenReadsItsEarnings(t *testing.T) {
	g := newTokenGateway(t)
	byToken, byKey := g.earnings(t, g.ownerToken), g.earnings(t, g.ownerKey)
	if byToken.AccountID != owner || byToken.Earned != jobPrice*70/100 || byToken.Pending != byToken.Earned ||
		len(byToken.Workers) != 1 || byToken.Workers[0].JobsCompleted != 1 || byToken.Workers[0].Earned != byToken.Earned {
		t.Errorf("earnings read with the worker token: %+v; want the owner's 70 credits from one job", byToken)
	}
	if b1, b2 := mustJSON(t, byToken), mustJSON(t, byKey); b1 != b2 {
		t.Errorf("the worker token reads %s, the API key %s", b1, b2)
	}
	if o := g.earnings(t, g.otherToken); o.AccountID != other || o.Earned != 0 || len(o.Workers) != 0 {
		t.Errorf("another account's worker token reads %+v; want that account's nothing", o)
	}
	code, body := g.call(t, http.MethodGet, "/workers", g.ownerToken, "")
	var list struct {
		Data []struct {
			ID            string `json:"id"`
			JobsCompleted int64  `json:"jobs_completed"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); code != http.StatusOK || err != nil || len(list.Data) != 1 ||
		list.Data[0].ID != byToken.Workers[0].Pubkey || list.Data[0].JobsCompleted != 1 {
		t.Errorf("GET /v1/workers with the worker token: %d %s", code, body)
	}
}

// TestWorkerTokenReadsNothingElse: every other route refuses a worker
// token with a 401 in OpenAI's error shape, whatever it would do.
func TestWorkerTokenReadsNothingElse(t *testing.T) {
	g := newTokenGateway(t)
	routes := []struct{ method, path, body string }{
		{http.MethodPost, "/chat/completions", `{"model":"` + served + `","messages":[{"role":"user","content":"hi"}]}`},
		{http.MethodGet, "/balance", ""},
		{http.MethodGet, "/transactions", ""},
		{http.MethodGet, "/keys", ""},
		{http.MethodPost, "/keys", `{"name":"mine now"}`},
		{http.MethodGet, "/key", ""},
		{http.MethodGet, "/worker-tokens", ""},
		{http.MethodPost, "/worker-tokens", `{"name":"another"}`},
		{http.MethodDelete, "/worker-tokens/wt_0000000000000000", ""},
		{http.MethodPost, "/payouts", ""},
		{http.MethodPost, "/payout-wallet/challenge", `{"wallet":"11111111111111111111111111111111"}`},
		{http.MethodPost, "/payout-wallet", `{}`},
		{http.MethodGet, "/receipts/job_x", ""},
		{http.MethodGet, "/staking", ""},
		{http.MethodPost, "/deposits", `{"credits":100}`},
		{http.MethodGet, "/deposits", ""},
	}
	for _, rt := range routes {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			code, body := g.call(t, rt.method, rt.path, g.ownerToken, rt.body)
			checkRefused(t, code, body, "worker token (cwt_…) can only read")
		})
	}
	// Nothing was spent or created on the way.
	if e := g.earnings(t, g.ownerKey); e.Earned != jobPrice*70/100 {
		t.Errorf("earnings after the refusals: %+v", e)
	}
	code, body := g.call(t, http.MethodGet, "/worker-tokens", g.ownerKey, "")
	if code != http.StatusOK || strings.Count(string(body), `"wt_`) != 1 {
		t.Errorf("worker tokens after the refusals: %d %s; want the one", code, body)
	}
}

// TestRevokedWorkerTokenRefused: a revoked worker token, or one never
// issued, reads nothing.
func TestRevokedWorkerTokenRefused(t *testing.T) {
	g := newTokenGateway(t)
	unknown, _, _ := credential.New(credential.WorkerTokenPrefix)
	for _, tc := range []struct{ name, token, why string }{
		{"unknown", unknown, "Incorrect API key"},
		{"malformed", "cwt_short", "Incorrect API key"},
	} {
		code, body := g.call(t, http.MethodGet, "/earnings", tc.token, "")
		t.Run(tc.name, func(t *testing.T) { checkRefused(t, code, body, tc.why) })
	}
	id := credential.PublicID(credential.WorkerTokenPrefix, credential.Hash(g.ownerToken))
	if code, body := g.call(t, http.MethodDelete, "/worker-tokens/"+id, g.ownerKey, ""); code != http.StatusOK {
		t.Fatalf("revoke: %d %s", code, body)
	}
	for _, path := range []string{"/earnings", "/workers"} {
		code, body := g.call(t, http.MethodGet, path, g.ownerToken, "")
		checkRefused(t, code, body, "worker token was revoked")
	}
	// The API key still reads.
	if e := g.earnings(t, g.ownerKey); e.AccountID != owner {
		t.Errorf("the API key after the revoke: %+v", e)
	}
}

// checkRefused checks a 401 in OpenAI's error shape whose message says why.
func checkRefused(t *testing.T, code int, body []byte, why string) {
	t.Helper()
	var e struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || code != http.StatusUnauthorized || e.Error == nil ||
		e.Error.Type != "authentication_error" || e.Error.Code != "invalid_api_key" || !strings.Contains(e.Error.Message, why) {
		t.Errorf("%d %s; want 401 invalid_api_key saying %q (decode: %v)", code, body, why, err)
	}
	if !strings.Contains(string(body), `"param":`) {
		t.Errorf("%s: no param field (OpenAI's shape has one)", body)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
