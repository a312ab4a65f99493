package devnet_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3/option"
)

// TestLedgerThroughAPI: the account's ledger shows the grant, each charge
// and each earning, adds up to the balance and earnings, and pages; every response names itself
// with x-request-id, and a chat response carries its price and the balance
// it leaves.
func TestLedgerThroughAPI(t *testing.T) {
	e := newEnv(t, envOptions{credits: 1000})
	e.ollamaWorker()
	ids := map[string]bool{}
	for i := range 3 {
		var resp *http.Response
		if _, err := e.client.Chat.Completions.New(context.Background(), chatParams("hello", 3), option.WithResponseInto(&resp)); err != nil {
			t.Fatal(err)
		}
		if got := resp.Header.Get("x-c0mpute-cost-credits"); got != "10" {
			t.Errorf("cost header %q, want 10", got)
		}
		// The worker's earnings go to Earned, not the balance: each
		// request leaves 10 credits less.
		if got, want := resp.Header.Get("x-balance-remaining"), fmt.Sprint(1000-10*(i+1)); got != want {
			t.Errorf("request %d: x-balance-remaining %q, want %s", i, got, want)
		}
		id := resp.Header.Get("x-request-id")
		if id == "" || ids[id] {
			t.Errorf("x-request-id %q: want a fresh one per response", id)
		}
		ids[id] = true
	}
	type page struct {
		Data []struct {
			ID      string `json:"id"`
			Type    string `json:"type"`
			Credits int64  `json:"credits"`
			JobID   string `json:"job_id"`
			Ref     string `json:"ref"`
		} `json:"data"`
		HasMore    bool   `json:"has_more"`
		NextCursor string `json:"next_cursor"`
	}
	var all []string
	var sum, earned int64
	kinds := map[string]int{}
	for cursor := ""; ; {
		var p page
		if code := e.call(http.MethodGet, "/transactions?limit=2&cursor="+cursor, e.apiKey, &p); code != http.StatusOK {
			t.Fatalf("GET /v1/transactions: %d", code)
		}
		for _, d := range p.Data {
			all = append(all, d.ID)
			kinds[d.Type]++
			if d.Type == "earning" {
				earned += d.Credits
			} else {
				sum += d.Credits
			}
			if d.Type == "charge" && (d.Credits != -10 || d.JobID == "") {
				t.Errorf("charge %+v", d)
			}
		}
		if !p.HasMore {
			break
		}
		cursor = p.NextCursor
	}
	// The env's worker serves on the same account: its earnings are
	// entries too.
	if len(all) != 7 || kinds["grant"] != 1 || kinds["charge"] != 3 || kinds["earning"] != 3 {
		t.Errorf("entries %v by kind %v; want a grant, three charges and three earnings", all, kinds)
	}
	if a := e.balance(); sum != a.Credits || a.Credits != 970 || earned != a.Earned || a.Earned != 3*7 {
		t.Errorf("entries add up to %d credits and %d earned; the account has %d and %d", sum, earned, a.Credits, a.Earned)
	}
	if code := e.call(http.MethodGet, "/transactions?limit=0", e.apiKey, nil); code != http.StatusBadRequest {
		t.Errorf("limit 0: %d, want 400", code)
	}
}
