package devnet_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// call makes an authenticated request and decodes the JSON answer.
func (e *env) call(method, path, key string, out any) int {
	e.t.Helper()
	req, err := http.NewRequest(method, e.stack.APIURL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			e.t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

// TestBalanceStatsAndKeys covers the account routes: balance in exact
// credits and dollars, network stats after a request, and API keys (shown
// once, at most 5 active, revocation effective at once).
func TestBalanceStatsAndKeys(t *testing.T) {
	e := newEnv(t, envOptions{credits: 1234})
	e.ollamaWorker()
	if _, err := e.client.Chat.Completions.New(context.Background(), chatParams("hello", 5)); err != nil {
		t.Fatal(err)
	}

	var bal map[string]any
	if s := e.call(http.MethodGet, "/balance", e.apiKey, &bal); s != 200 {
		t.Fatalf("balance: %d", s)
	}
	want := map[string]any{"object": "balance", "credits": 1224.0, "usd": "12.24", "total_spent": 10.0,
		"total_deposited": 0.0, "free_allowance_left": 0.0}
	for k, v := range want {
		if bal[k] != v {
			t.Errorf("balance.%s = %v, want %v", k, bal[k], v)
		}
	}

	// The figures are up to a couple of seconds old (the gateway caches
	// them): the one job shows within that.
	var stats map[string]any
	e.waitFor("the job in /v1/stats", func() bool {
		if s := e.call(http.MethodGet, "/stats", "", &stats); s != 200 {
			t.Fatalf("stats: %d", s)
		}
		return stats["jobs_completed"] == 1.0
	})
	if stats["jobs_completed"] != 1.0 || stats["tokens_served"] != 5.0 || stats["workers_online"] != 1.0 ||
		stats["queue_depth"] != 0.0 || stats["workers_by_model"].(map[string]any)[tinyModel] != 1.0 {
		t.Errorf("stats %v", stats)
	}

	// The env's key is one; four more may be created, the sixth is refused.
	var created []string
	for i := range 5 {
		var k map[string]any
		s := e.call(http.MethodPost, "/keys", e.apiKey, &k)
		if i < 4 {
			secret, _ := k["secret"].(string)
			if s != 201 || !strings.HasPrefix(secret, "sk-c0mpute-") || k["id"] == "" {
				t.Fatalf("create key %d: %d %v", i, s, k)
			}
			created = append(created, secret)
		} else if s != 400 {
			t.Errorf("sixth active key: status %d, want 400", s)
		}
	}
	var list struct {
		Data []map[string]any `json:"data"`
	}
	e.call(http.MethodGet, "/keys", e.apiKey, &list)
	if len(list.Data) != 5 {
		t.Fatalf("keys listed: %d", len(list.Data))
	}
	for _, k := range list.Data {
		if _, leaked := k["secret"]; leaked {
			t.Error("a listed key shows its secret")
		}
	}
	// Revoke a created key: it stops working at once.
	var newest map[string]any
	for _, k := range list.Data {
		newest = k
	}
	if s := e.call(http.MethodDelete, "/keys/"+newest["id"].(string), e.apiKey, nil); s != 200 {
		t.Fatalf("revoke: %d", s)
	}
	revoked := created[len(created)-1]
	if s := e.call(http.MethodGet, "/balance", revoked, nil); s != 401 {
		t.Errorf("revoked key: status %d, want 401", s)
	}
	if s := e.call(http.MethodDelete, "/keys/key_doesnotexist", e.apiKey, nil); s != 404 {
		t.Errorf("revoke unknown: %d", s)
	}
}
