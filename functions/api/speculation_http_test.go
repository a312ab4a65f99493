package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
)

// post sends body to POST /v1/chat/completions with the speculation
// header (none when nil) and returns the answer once the request ended.
func (g *gateway) post(t *testing.T, body string, speculation []string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+g.key)
	for _, v := range speculation {
		r.Header.Add("C0mpute-Speculation", v)
	}
	w := httptest.NewRecorder()
	g.api.ServeHTTP(w, r)
	return w
}

// credits is the payer's balance.
func (g *gateway) credits(t *testing.T) int64 {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v1/balance", nil)
	r.Header.Set("Authorization", "Bearer "+g.key)
	w := httptest.NewRecorder()
	g.api.ServeHTTP(w, r)
	var b struct {
		Credits *int64 `json:"credits"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil || w.Code != http.StatusOK || b.Credits == nil {
		t.Fatalf("balance: %d %s", w.Code, w.Body)
	}
	return *b.Credits
}

// Through the whole request path (relay, listener, a worker): a request
// for a model that is not a ring takes C0mpute-Speculation on or off, in
// any case, and a prediction, and completes as without them, its usage
// without completion_tokens_details in both shapes; a value that is
// neither is a 400 naming the header, answered before anything is charged.
func TestSpeculationHeaderOnTheWire(t *testing.T) {
	g := newGateway(t)
	const predicted = `{"model":"` + served + `","messages":[{"role":"user","content":"hi"}],` +
		`"prediction":{"type":"content","content":[{"type":"text","text":"Hello there, "}]}`
	for _, tc := range []struct {
		name        string
		body        string
		speculation []string
		stream      bool
		bad         bool
	}{
		{name: "absent", body: predicted + `}`},
		{name: "off", body: predicted + `}`, speculation: []string{"off"}},
		{name: "OFF spaced, streamed", body: predicted + `,"stream":true,"stream_options":{"include_usage":true}}`, speculation: []string{" OFF "}, stream: true},
		{name: "On", body: predicted + `}`, speculation: []string{"On"}},
		{name: "no prediction, off", body: `{"model":"` + served + `","messages":[{"role":"user","content":"hi"}]}`, speculation: []string{"off"}},
		{name: "invalid", body: predicted + `}`, speculation: []string{"maybe"}, bad: true},
		{name: "invalid, streamed", body: predicted + `,"stream":true}`, speculation: []string{"no"}, bad: true},
		{name: "twice", body: predicted + `}`, speculation: []string{"off", "on"}, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := g.credits(t)
			w := g.post(t, tc.body, tc.speculation)
			after := g.credits(t)
			if tc.bad {
				var e struct {
					Error map[string]*string `json:"error"`
				}
				if w.Code != http.StatusBadRequest || json.Unmarshal(w.Body.Bytes(), &e) != nil || len(e.Error) != 4 ||
					e.Error["param"] == nil || *e.Error["param"] != "C0mpute-Speculation" || e.Error["type"] == nil || *e.Error["type"] != "invalid_request_error" {
					t.Fatalf("answer %d %s", w.Code, w.Body)
				}
				if after != before || w.Header().Get("x-c0mpute-cost-credits") != "" {
					t.Fatalf("charged: %d credits before, %d after; cost header %q", before, after, w.Header().Get("x-c0mpute-cost-credits"))
				}
				return
			}
			if w.Code != http.StatusOK || after != before-10 {
				t.Fatalf("answer %d %s; %d credits before, %d after", w.Code, w.Body, before, after)
			}
			doc := w.Body.Bytes()
			if tc.stream {
				events := strings.Split(strings.TrimSpace(w.Body.String()), "\n\n")
				if len(events) < 2 || events[len(events)-1] != "data: [DONE]" {
					t.Fatalf("stream %s", w.Body)
				}
				doc = []byte(strings.TrimPrefix(events[len(events)-2], "data: "))
			}
			var v struct {
				Usage map[string]json.RawMessage `json:"usage"`
			}
			if err := json.Unmarshal(doc, &v); err != nil {
				t.Fatalf("%v: %s", err, doc)
			}
			if v.Usage == nil || !bytes.Equal(v.Usage["completion_tokens"], []byte("9")) {
				t.Fatalf("usage %s", doc)
			}
			if _, ok := v.Usage["completion_tokens_details"]; ok {
				t.Fatalf("a whole model's usage has completion_tokens_details: %s", doc)
			}
		})
	}
}

// A prediction is for a ring's driver only: for any other model the
// gateway drops it, so a long message with a prediction at its bound,
// which together would not fit in one job message, completes (and the
// scripted worker fails any request that carries a prediction).
func TestPredictionDroppedForWholeModels(t *testing.T) {
	g := newGateway(t)
	before := g.credits(t)
	body := `{"model":"` + served + `","messages":[{"role":"user","content":"` + strings.Repeat("m", 80<<10) +
		`"}],"prediction":{"type":"content","content":"` + strings.Repeat("p", oaiwire.MaxPredictionBytes) + `"}}`
	w := g.post(t, body, nil)
	if w.Code != http.StatusOK {
		t.Fatalf("answer %d %s", w.Code, w.Body)
	}
	if after := g.credits(t); after != before-10 {
		t.Fatalf("%d credits before, %d after: want one request charged", before, after)
	}
}
