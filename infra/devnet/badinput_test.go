package devnet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/oaiwire/badrequests"
)

// badCorpus is oaiwire's corpus of malformed requests, the same one its
// decoder tests run.
func badCorpus(t *testing.T) []badrequests.Case {
	t.Helper()
	cases, err := badrequests.Cases()
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 60 {
		t.Fatalf("corpus has %d cases", len(cases))
	}
	return cases
}

// apiError is a response read as OpenAI's error document.
type apiError struct {
	status      int
	contentType string
	message     string
	typ         string
	param       *string
	code        string
}

// readAPIError checks resp is OpenAI's error shape, exactly
// {"error":{"message","type","param","code"}}, sent as application/json.
func readAPIError(t *testing.T, resp *http.Response) apiError {
	t.Helper()
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	e := apiError{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}
	if e.contentType != "application/json" {
		t.Errorf("status %d: Content-Type %q, want application/json (body %.200s)", resp.StatusCode, e.contentType, raw)
	}
	var doc map[string]map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil || len(doc) != 1 || doc["error"] == nil {
		t.Fatalf("status %d: body is not {\"error\":{…}}: %.300s", resp.StatusCode, raw)
	}
	inner := doc["error"]
	if len(inner) != 4 {
		t.Errorf("error object has keys other than message, type, param, code: %s", raw)
	}
	for k, dst := range map[string]*string{"message": &e.message, "type": &e.typ, "code": &e.code} {
		if err := json.Unmarshal(inner[k], dst); err != nil || *dst == "" {
			t.Errorf("error.%s is not a non-empty string: %s", k, raw)
		}
	}
	if p, ok := inner["param"]; !ok || json.Unmarshal(p, &e.param) != nil {
		t.Errorf("error.param is not a string or null: %s", raw)
	}
	return e
}

func (e *env) post(path, auth string, body []byte) *http.Response {
	e.t.Helper()
	return e.do(http.MethodPost, path, auth, body)
}

func (e *env) do(method, path, auth string, body []byte) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest(method, strings.TrimSuffix(e.stack.APIURL, "/v1")+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// checkNothingCharged checks no job was admitted: the balance is the
// initial grant, nothing spent, no job queued or completed.
func (e *env) checkNothingCharged(credits int64) {
	e.t.Helper()
	if a := e.balance(); a.Credits != credits || a.TotalSpent != 0 {
		e.t.Errorf("account after bad requests: credits %d spent %d, want %d and 0", a.Credits, a.TotalSpent, credits)
	}
	st, err := e.store.Stats(context.Background(), time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	if len(st.QueueByModel) != 0 || st.JobsCompleted != 0 {
		e.t.Errorf("stats after bad requests: queue %v, completed %d", st.QueueByModel, st.JobsCompleted)
	}
}

// TestBadInputThroughGateway sends oaiwire's whole malformed-request corpus
// to the running gateway with a valid key. Each gets its 4xx (never a 5xx)
// as OpenAI's error JSON with the corpus's param, and none of them costs
// anything or leaves a job. No worker is needed.
func TestBadInputThroughGateway(t *testing.T) {
	const credits = 1000
	e := newEnv(t, envOptions{credits: credits})
	auth := "Bearer " + e.apiKey
	for _, c := range badCorpus(t) {
		t.Run(c.Name, func(t *testing.T) {
			e := *e
			e.t = t
			got := readAPIError(t, e.post("/v1/chat/completions", auth, c.Body))
			if got.status != c.Status {
				t.Errorf("status %d (%s), want %d", got.status, got.message, c.Status)
			}
			if got.status >= 500 {
				t.Errorf("server error for a malformed request: %d %s", got.status, got.message)
			}
			if got.typ != oaiwire.TypeInvalidRequest {
				t.Errorf("type %q", got.typ)
			}
			if p := deref(got.param); p != c.Param {
				t.Errorf("param %q, want %q (%s)", p, c.Param, got.message)
			}
		})
	}
	e.checkNothingCharged(credits)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// TestBadAuth: every malformed, foreign, unknown or revoked credential is a
// 401 invalid_api_key before the body is even looked at.
func TestBadAuth(t *testing.T) {
	const credits = 100
	e := newEnv(t, envOptions{credits: credits})
	ctx := context.Background()
	revoked, err := e.stack.IssueAPIKey(ctx, e.account)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := e.store.ListAPIKeys(ctx, e.account)
	if err != nil {
		t.Fatal(err)
	}
	var revokedID string
	for _, k := range keys {
		if k.Hash == credential.Hash(revoked) {
			revokedID = k.ID
		}
	}
	if revokedID == "" {
		t.Fatal("revoked key not listed")
	}
	// It works until it is revoked.
	if resp := e.do(http.MethodGet, "/v1/balance", "Bearer "+revoked, nil); resp.StatusCode != 200 {
		t.Fatalf("fresh key: %d", resp.StatusCode)
	} else {
		resp.Body.Close()
	}
	if err := e.store.RevokeAPIKey(ctx, e.account, revokedID, time.Now()); err != nil {
		t.Fatal(err)
	}
	unknown, _, _ := credential.New(credential.APIKeyPrefix)
	worker, err := e.stack.IssueWorkerToken(ctx, e.account)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`)
	for _, c := range []struct{ name, auth string }{
		{"missing header", ""},
		{"basic", "Basic " + e.apiKey},
		{"basic user:pass", "Basic dXNlcjpwYXNz"},
		{"no scheme", e.apiKey},
		{"bearer without token", "Bearer "},
		{"bearer only", "Bearer"},
		{"wrong prefix", "Bearer sk-" + strings.TrimPrefix(e.apiKey, credential.APIKeyPrefix)},
		{"openai key", "Bearer sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"},
		{"truncated key", "Bearer " + e.apiKey[:len(e.apiKey)-1]},
		{"key with junk", "Bearer " + e.apiKey + "x"},
		{"worker token", "Bearer " + worker},
		{"unknown well-formed key", "Bearer " + unknown},
		{"revoked key", "Bearer " + revoked},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := *e
			e.t = t
			for _, r := range []struct {
				method, path string
				body         []byte
			}{
				{http.MethodPost, "/v1/chat/completions", body},
				{http.MethodPost, "/v1/chat/completions", []byte(`{not json`)}, // auth comes first
				{http.MethodGet, "/v1/balance", nil},
				{http.MethodGet, "/v1/keys", nil},
			} {
				got := readAPIError(t, e.do(r.method, r.path, c.auth, r.body))
				if got.status != http.StatusUnauthorized || got.code != "invalid_api_key" || got.typ != oaiwire.TypeAuthentication {
					t.Errorf("%s %s: %d %s %s, want 401 invalid_api_key", r.method, r.path, got.status, got.typ, got.code)
				}
			}
		})
	}
	e.checkNothingCharged(credits)
}

// TestUnknownRoutes: unknown paths are 404 and wrong methods 404 or 405,
// always as OpenAI's error JSON.
func TestUnknownRoutes(t *testing.T) {
	e := newEnv(t, envOptions{credits: 100})
	auth := "Bearer " + e.apiKey
	for _, c := range []struct {
		method, path string
		statuses     []int
	}{
		{http.MethodGet, "/v1/nope", []int{404}},
		{http.MethodPost, "/v1/chat/completion", []int{404}},
		{http.MethodPost, "/v1/completions", []int{404}},
		{http.MethodPost, "/v1/embeddings", []int{404}},
		{http.MethodGet, "/v1/chat/completions/", []int{404}},
		{http.MethodGet, "/v1/chat/completions", []int{404, 405}},
		{http.MethodPut, "/v1/chat/completions", []int{404, 405}},
		{http.MethodDelete, "/v1/chat/completions", []int{404, 405}},
		{http.MethodPost, "/v1/models", []int{404, 405}},
		{http.MethodDelete, "/v1/balance", []int{404, 405}},
		{http.MethodPatch, "/v1/keys", []int{404, 405}},
		// A base URL without /v1 is a common client mistake; it must still
		// get an error an SDK can read.
		{http.MethodPost, "/chat/completions", []int{404}},
		{http.MethodGet, "/", []int{404}},
	} {
		t.Run(fmt.Sprintf("%s %s", c.method, c.path), func(t *testing.T) {
			e := *e
			e.t = t
			var body []byte
			if c.method != http.MethodGet {
				body = []byte(`{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`)
			}
			got := readAPIError(t, e.do(c.method, c.path, auth, body))
			ok := false
			for _, s := range c.statuses {
				ok = ok || got.status == s
			}
			if !ok {
				t.Errorf("status %d, want one of %v", got.status, c.statuses)
			}
		})
	}
	e.checkNothingCharged(100)
}
