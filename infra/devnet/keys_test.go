package devnet_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/devnet"
)

// sendJSON makes an authenticated request with a JSON body and decodes the
// answer.
func (e *env) sendJSON(method, path, key string, body, out any) int {
	e.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		e.t.Fatal(err)
	}
	resp := e.do(method, "/v1"+path, "Bearer "+key, b)
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			e.t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

type keyAnswer struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	Secret         string `json:"secret"`
	Limit          *int64 `json:"limit"`
	LimitReset     string `json:"limit_reset"`
	LimitRemaining *int64 `json:"limit_remaining"`
	Usage          *int64 `json:"usage"`
	ExpiresAt      string `json:"expires_at"`
	Error          *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Param   string `json:"param"`
	} `json:"error"`
}

func val(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}

// TestKeySpendControls: a key with a daily limit serves until the next
// request would pass it, then gets 402 naming the limit, and nothing is
// charged; raising the limit lets it go on; GET /v1/key shows what is
// left; an expired key gets 401; refunds give the limit back.
func TestKeySpendControls(t *testing.T) {
	e := newEnv(t, envOptions{credits: 1000})
	e.ollamaWorker()
	var k keyAnswer
	if code := e.sendJSON(http.MethodPost, "/keys", e.apiKey, map[string]any{"name": "agent", "limit": 25, "limit_reset": "daily"}, &k); code != http.StatusCreated ||
		k.Name != "agent" || val(k.Limit) != 25 || k.LimitReset != "daily" || val(k.LimitRemaining) != 25 || val(k.Usage) != 0 || k.Secret == "" {
		t.Fatalf("create: %d %+v", code, k)
	}
	agent := openai.NewClient(option.WithBaseURL(e.stack.APIURL+"/"), option.WithAPIKey(k.Secret), option.WithMaxRetries(0))
	ctx := context.Background()
	for i := range 2 {
		if _, err := agent.Chat.Completions.New(ctx, chatParams("hello", 3)); err != nil {
			t.Fatalf("request %d within the limit: %v", i, err)
		}
	}
	_, err := agent.Chat.Completions.New(ctx, chatParams("hello", 3))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusPaymentRequired || apiErr.Code != "key_limit_exceeded" ||
		!strings.Contains(apiErr.Message, "25 credits per day") || !strings.Contains(apiErr.Message, "20 spent") {
		t.Fatalf("past the limit: %v; want 402 key_limit_exceeded naming the limit", err)
	}
	if got := e.balance().Credits; got != 1000-20 {
		t.Errorf("balance %d after two requests and a refused one; want %d", got, 1000-20)
	}
	// A key with spend controls spends; it does not manage keys.
	if code := e.sendJSON(http.MethodPost, "/keys", k.Secret, map[string]any{"name": "escape"}, nil); code != http.StatusForbidden {
		t.Errorf("a limited key minting a key: %d, want 403", code)
	}
	if code := e.sendJSON(http.MethodPatch, "/keys/"+k.ID, k.Secret, map[string]any{"limit": 0}, nil); code != http.StatusForbidden {
		t.Errorf("a limited key lifting its own limit: %d, want 403", code)
	}
	var self keyAnswer
	if code := e.sendJSON(http.MethodGet, "/key", k.Secret, nil, &self); code != http.StatusOK || val(self.LimitRemaining) != 5 || val(self.Usage) != 20 || self.ID != k.ID {
		t.Errorf("GET /v1/key: %d %+v", code, self)
	}
	var raised keyAnswer
	if code := e.sendJSON(http.MethodPatch, "/keys/"+k.ID, e.apiKey, map[string]any{"limit": 40}, &raised); code != http.StatusOK ||
		val(raised.Limit) != 40 || val(raised.LimitRemaining) != 20 || raised.Name != "agent" {
		t.Fatalf("raise the limit: %d %+v", code, raised)
	}
	if _, err := agent.Chat.Completions.New(ctx, chatParams("hello", 3)); err != nil {
		t.Fatalf("after raising the limit: %v", err)
	}
	// Bad input is refused, with the field named, and changes nothing.
	for _, tc := range []struct {
		body  map[string]any
		param string
	}{
		{map[string]any{"limitt": 5}, ""},
		{map[string]any{"limit": -1}, ""},
		{map[string]any{"limit_reset": "hourly"}, ""},
		{map[string]any{"expires_at": "2020-01-01T00:00:00Z"}, "expires_at"},
		{map[string]any{"expires_at": "tomorrow"}, "expires_at"},
	} {
		var bad keyAnswer
		if code := e.sendJSON(http.MethodPatch, "/keys/"+k.ID, e.apiKey, tc.body, &bad); code != http.StatusBadRequest || bad.Error == nil || bad.Error.Param != tc.param {
			t.Errorf("PATCH %v: %d %+v; want 400", tc.body, code, bad.Error)
		}
	}
	if code := e.sendJSON(http.MethodPatch, "/keys/key_nope", e.apiKey, map[string]any{"name": "x"}, nil); code != http.StatusNotFound {
		t.Errorf("PATCH an unknown key: %d", code)
	}
	// An expired key is refused at once, on the hot path and elsewhere.
	past := time.Now().Add(-time.Second)
	if _, err := e.store.UpdateAPIKey(ctx, e.account, k.ID, store.KeyPatch{ExpiresAt: &past}); err != nil {
		t.Fatal(err)
	}
	_, err = agent.Chat.Completions.New(ctx, chatParams("hello", 3))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized || !strings.Contains(apiErr.Message, "expired") {
		t.Errorf("an expired key: %v; want 401 saying expired", err)
	}
	if code := e.call(http.MethodGet, "/balance", k.Secret, nil); code != http.StatusUnauthorized {
		t.Errorf("an expired key on GET /v1/balance: %d", code)
	}

	// Worker tokens have names too.
	var tok keyAnswer
	if code := e.sendJSON(http.MethodPost, "/worker-tokens", e.apiKey, map[string]any{"name": "rig-1"}, &tok); code != http.StatusCreated || tok.Name != "rig-1" {
		t.Fatalf("create token: %d %+v", code, tok)
	}
	var renamed keyAnswer
	if code := e.sendJSON(http.MethodPatch, "/worker-tokens/"+tok.ID, e.apiKey, map[string]any{"name": "rig-2"}, &renamed); code != http.StatusOK || renamed.Name != "rig-2" {
		t.Errorf("rename token: %d %+v", code, renamed)
	}
}

// TestKeyLimitRefund: a job refunded gives its price back to the key's
// limit, as to the balance.
func TestKeyLimitRefund(t *testing.T) {
	limits := devnet.ScriptedLimits()
	limits.QueueWait = time.Second
	e := newEnv(t, envOptions{credits: 1000, limits: &limits})
	var k keyAnswer
	e.sendJSON(http.MethodPost, "/keys", e.apiKey, map[string]any{"limit": 10}, &k)
	agent := openai.NewClient(option.WithBaseURL(e.stack.APIURL+"/"), option.WithAPIKey(k.Secret), option.WithMaxRetries(0))
	// No worker: the job waits its queue time and is refunded.
	if _, err := agent.Chat.Completions.New(context.Background(), chatParams("anyone?", 3)); err == nil {
		t.Fatal("a request with no worker online succeeded")
	}
	var self keyAnswer
	e.waitFor("the refund to reach the key", func() bool {
		e.sendJSON(http.MethodGet, "/key", k.Secret, nil, &self)
		return val(self.Usage) == 0 && val(self.LimitRemaining) == 10
	})
}

// TestCORS: browser origins the operator allows get the headers a browser
// needs, a preflight is answered at once, and other origins get none.
func TestCORS(t *testing.T) {
	e := newEnv(t, envOptions{cors: []string{"https://app.example"}})
	req, _ := http.NewRequest(http.MethodOptions, e.stack.APIURL+"/chat/completions", nil)
	req.Header.Set("Origin", "https://app.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Methods"), "POST") {
		t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	for origin, want := range map[string]string{"https://app.example": "https://app.example", "https://evil.example": ""} {
		req, _ := http.NewRequest(http.MethodGet, e.stack.APIURL+"/models", nil)
		req.Header.Set("Origin", origin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != want {
			t.Errorf("GET /v1/models from %s: %d, allow-origin %q; want %q", origin, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"), want)
		}
	}
}

// TestCORSFromTheOfficialSDK: the official OpenAI Node SDK, run as a page
// on an allowed origin would, passes every browser preflight — for its
// x-stainless-* headers, Authorization, JSON bodies and DELETE — and every
// answer may be read (infra/sdktest/node/cors.test.mjs).
func TestCORSFromTheOfficialSDK(t *testing.T) {
	node, dir := nodeHarness(t, "openai")
	e := newEnv(t, envOptions{cors: []string{"https://app.example"}, credits: 10_000})
	e.ollamaWorker()
	e.waitWorkers(tinyModel, 1)
	runNodeTest(t, node, dir, "cors.test.mjs", 5, "OPENAI_BASE_URL="+e.stack.APIURL, "OPENAI_API_KEY="+e.apiKey,
		"C0MPUTE_MODEL="+tinyModel, "C0MPUTE_ORIGIN=https://app.example")
}
