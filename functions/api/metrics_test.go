package api_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/connections"
	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/dispatch"
	"github.com/c0mpute/c0mpute/functions/listener"
	"github.com/c0mpute/c0mpute/functions/metrics"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/relayroutes"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
	"github.com/c0mpute/c0mpute/infra/relay"
	"github.com/c0mpute/c0mpute/workerd/agent"
	"github.com/c0mpute/c0mpute/workerd/backend"
)

// Markers of text that must never reach a metric: the prompt's, the
// completion's, and a model name a client made up.
const (
	promptMarker     = "PROMPT-MARKER-7f3a"
	completionMarker = "COMPLETION-MARKER-9c1e"
	modelMarker      = "MODEL-MARKER-44d0"
)

// served, idle and left are the catalog's models: one a worker serves,
// one nobody does, and one whose worker left a moment ago.
const (
	served = "c0mpute-pro"
	idle   = "c0mpute-mini"
	left   = "c0mpute-left"
)

// scripted is the worker's inference server: a fixed reply carrying the
// completion marker, and fixed usage.
type scripted struct{}

func (scripted) Name() string                             { return "scripted" }
func (scripted) Models(context.Context) ([]string, error) { return []string{"scripted"}, nil }
func (scripted) Chat(_ context.Context, _ string, req *oaiwire.ChatRequest, emit func(oaiwire.Delta) error) (backend.Result, error) {
	if req.Prediction != nil {
		// Only a ring drafts from a prediction: the gateway sends it to
		// no other worker.
		return backend.Result{}, errors.New("scripted: a prediction reached a whole model's worker")
	}
	for _, part := range []string{"Hello there, ", "the word is " + completionMarker + "."} {
		if err := emit(oaiwire.Delta{Content: part}); err != nil {
			return backend.Result{}, err
		}
	}
	return backend.Result{FinishReason: "stop", Usage: oaiwire.Usage{PromptTokens: 7, CompletionTokens: 9}}, nil
}

// lines is the metrics' writer: it keeps what was written and says when
// more arrives.
type lines struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{}
}

func newLines() *lines { return &lines{written: make(chan struct{}, 1)} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case l.written <- struct{}{}:
	default:
	}
	return l.buf.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *lines) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Reset()
}

// record is one EMF record, reduced to what the tests compare: its
// dimensions (the first set, name=value) and its metrics (name → value).
type record struct {
	dims    []string
	metrics map[string]float64
}

func (r record) String() string { return strings.Join(r.dims, ",") + " " + mapString(r.metrics) }

func mapString(m map[string]float64) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+strconv.FormatFloat(m[k], 'f', -1, 64))
	}
	return strings.Join(out, " ")
}

// records decodes every line; each must be one EMF object whose sets are
// [dims] and [].
func (l *lines) records(t *testing.T) []record {
	t.Helper()
	var out []record
	for line := range strings.Lines(l.String()) {
		var raw map[string]any
		if err := json.Unmarshal([]byte(line), &raw); err != nil {
			t.Fatalf("metric line %q is not one JSON object: %v", line, err)
		}
		dir := raw["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)
		rec := record{metrics: map[string]float64{}}
		sets := dir["Dimensions"].([]any)
		if last := sets[len(sets)-1].([]any); len(last) != 0 {
			t.Errorf("record %q lacks the aggregate dimension set", line)
		}
		if len(sets) == 2 {
			for _, d := range sets[0].([]any) {
				rec.dims = append(rec.dims, d.(string)+"="+raw[d.(string)].(string))
			}
		}
		for _, m := range dir["Metrics"].([]any) {
			name := m.(map[string]any)["Name"].(string)
			rec.metrics[name] = raw[name].(float64)
		}
		out = append(out, rec)
	}
	return out
}

// requestRecords are the records of requests: all but the gauges, which
// are written in the background, at most once a minute.
func (l *lines) requestRecords(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, r := range l.records(t) {
		if _, gauge := r.metrics[metrics.QueueDepth]; !gauge {
			out = append(out, r.String())
		}
	}
	slices.Sort(out)
	return out
}

// waitFor waits until the records satisfy ok, or fails after a while.
func (l *lines) waitFor(t *testing.T, what string, ok func([]record) bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for !ok(l.records(t)) {
		select {
		case <-l.written:
		case <-timeout:
			t.Fatalf("no %s in the metrics after 10 s:\n%s", what, l.String())
		}
	}
}

// gateway is the API with the relay, a listener, one worker serving
// served, and the embedded store: the whole request path in process.
type gateway struct {
	api     *api.Server
	metrics *lines
	key     string
}

func newGateway(t *testing.T) *gateway {
	t.Helper()
	ctx := t.Context()
	log := slog.New(slog.DiscardHandler)
	st, err := embedded.Open(t.TempDir()+"/c0.db", embedded.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	cat, err := catalog.New([]catalog.Model{{ID: served, Price: 10}, {ID: idle, Price: 1}, {ID: left, Price: 1}})
	if err != nil {
		t.Fatal(err)
	}
	secret := randomHex(32)
	creds := aws.Credentials{AccessKeyID: "c0mputetest", SecretAccessKey: randomHex(20)}
	registered := make(chan struct{}, 1)
	var conns *connections.Client
	var routes *relayroutes.Handler
	rel := relay.New(relay.HandlerFunc(func(ctx context.Context, ev events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
		resp, err := routes.Handle(ctx, ev)
		if strings.Contains(resp.Body, `"type":"`+relaymsg.TypeRegistered+`"`) {
			select {
			case registered <- struct{}{}:
			default:
			}
		}
		return resp, err
	}), relay.WithCredentials(creds.AccessKeyID, creds.SecretAccessKey))
	ws := httptest.NewServer(rel)
	mgmt := httptest.NewServer(rel.Management())
	t.Cleanup(func() {
		_ = rel.Close()
		ws.Close()
		mgmt.Close()
	})
	conns = connections.NewLocal(mgmt.URL, creds)
	disp := dispatch.New(st, conns, log)
	routes = &relayroutes.Handler{Store: st, Post: conns, Dispatch: disp, Catalog: cat, ListenerSecret: secret, Log: log}
	wsURL := "ws" + strings.TrimPrefix(ws.URL, "http")
	lis, err := listener.Start(ctx, listener.Config{URL: wsURL, Secret: secret, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	limits := api.DefaultLimits()
	limits.MaxTokPerSec = 0                       // the scripted worker answers at memory speed
	limits.QueueWait = 300 * time.Millisecond     // a request for idle gives up soon
	limits.KeepAliveAfter = 10 * limits.QueueWait // and keeps its real status
	out := newLines()
	a, err := api.New(api.Config{Store: st, Dispatcher: disp, Connections: conns, Relay: lis, Catalog: cat,
		Tickets: relaymsg.NewTicketer(secret), Limits: limits, Log: log, Metrics: metrics.New(out, "c0mpute/test")})
	if err != nil {
		t.Fatal(err)
	}

	now := time.Now()
	if err := st.CreateAccount(ctx, store.Account{ID: "payer", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Grant(ctx, "payer", 1000, "grant", false); err != nil {
		t.Fatal(err)
	}
	key, hash, id := credential.New(credential.APIKeyPrefix)
	if err := st.PutAPIKey(ctx, store.Secret{Hash: hash, ID: id, AccountID: "payer", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	tok, hash, id := credential.New(credential.WorkerTokenPrefix)
	if err := st.PutWorkerToken(ctx, store.Secret{Hash: hash, ID: id, AccountID: "payer", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	_, wkey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = agent.New(agent.Config{RelayURL: wsURL, Token: tok, Key: wkey, Backend: scripted{},
			Models: map[string]string{served: "scripted"}, Log: log, DrainTimeout: time.Second}).Run(wctx)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	select {
	case <-registered:
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not register")
	}
	// A worker of left came and went: requests for it wait in the queue.
	gone := store.Worker{Conn: "gone", AccountID: "payer", State: store.WorkerIdle, ConnectedAt: now}
	if err := st.PutWorker(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RegisterWorker(ctx, gone.Conn, []string{left}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DeleteWorker(ctx, gone.Conn); err != nil {
		t.Fatal(err)
	}
	return &gateway{api: a, metrics: out, key: key}
}

// chat sends a chat completion request straight to the handler, which
// returns once the request has ended, its metrics written.
func (g *gateway) chat(t *testing.T, key, model, prompt string) *httptest.ResponseRecorder {
	t.Helper()
	body, err := json.Marshal(map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": prompt}}})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+key)
	w := httptest.NewRecorder()
	g.api.ServeHTTP(w, r)
	return w
}

func TestMetricsOfACompletedRequest(t *testing.T) {
	g := newGateway(t) // its own: the first request also makes the gauges due
	w := g.chat(t, g.key, served, "Say the word. "+promptMarker)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), completionMarker) {
		t.Fatalf("chat: %d %s", w.Code, w.Body)
	}
	recs := g.metrics.records(t)
	var got *record
	for i, r := range recs {
		if _, ok := r.metrics[metrics.Requests]; ok {
			if got != nil {
				t.Fatalf("two request records: %v", recs)
			}
			got = &recs[i]
		}
		if _, ok := r.metrics[metrics.Errors]; ok {
			t.Errorf("an error counted for a completed request: %v", r)
		}
	}
	if got == nil {
		t.Fatalf("no request record in:\n%s", g.metrics)
	}
	if want := []string{"Model=" + served}; !slices.Equal(got.dims, want) {
		t.Errorf("dimensions %v, want %v", got.dims, want)
	}
	wantNames := []string{metrics.CompletionTokens, metrics.Duration, metrics.PromptTokens, metrics.QueueWait, metrics.Requests, metrics.TTFT}
	if names := slices.Sorted(maps.Keys(got.metrics)); !slices.Equal(names, wantNames) {
		t.Errorf("metrics %v, want %v", names, wantNames)
	}
	if got.metrics[metrics.Requests] != 1 || got.metrics[metrics.PromptTokens] != 7 || got.metrics[metrics.CompletionTokens] != 9 {
		t.Errorf("record %v: want 1 request of 7 prompt and 9 completion tokens", got)
	}
	if d, ttft := got.metrics[metrics.Duration], got.metrics[metrics.TTFT]; ttft <= 0 || ttft > d {
		t.Errorf("TTFT %v ms, Duration %v ms: want 0 < TTFT <= Duration", ttft, d)
	}

	// The request made the gauges due: one record per catalog model, from
	// the store's counters, the one without workers at 0.
	want := map[string]string{"Model=" + served: "OnlineWorkers=1 QueueDepth=0", "Model=" + idle: "OnlineWorkers=0 QueueDepth=0",
		"Model=" + left: "OnlineWorkers=0 QueueDepth=0"}
	g.metrics.waitFor(t, "gauges", func(recs []record) bool {
		got := map[string]string{}
		for _, r := range recs {
			if _, ok := r.metrics[metrics.QueueDepth]; ok {
				got[strings.Join(r.dims, ",")] = mapString(r.metrics)
			}
		}
		return maps.Equal(got, want)
	})
	noText(t, g.metrics.String())
}

// Each error answer is counted by its code, a 5xx as a server error too,
// and a refunded job as a refund; a request for a model that is not
// offered counts under "other".
func TestMetricsOfErrors(t *testing.T) {
	g := newGateway(t) // one for the cases, which run in order
	for _, tc := range []struct {
		name   string
		key    bool
		model  string
		status int
		want   []string
	}{
		{"model not offered", true, modelMarker, http.StatusNotFound, []string{
			"Code=model_not_found Errors=1",
			"Model=other Duration Requests=1",
		}},
		{"bad key", false, served, http.StatusUnauthorized, []string{
			// Refused before the model is read: counted in the
			// aggregate only.
			" Requests=1",
			"Code=invalid_api_key Errors=1",
		}},
		{"no worker lately, at once", true, idle, http.StatusServiceUnavailable, []string{
			" ServerErrors=1",
			"Code=no_worker_available Errors=1",
			"Model=" + idle + " Duration Requests=1",
		}},
		{"no worker after the queue wait, refunded", true, left, http.StatusServiceUnavailable, []string{
			" ServerErrors=1",
			"Code=no_worker_available Errors=1",
			"Model=" + left + " Duration QueueWait Requests=1",
			"Model=" + left + " Refunds=1",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g.metrics.reset()
			key := g.key
			if !tc.key {
				key, _, _ = credential.New(credential.APIKeyPrefix)
			}
			if w := g.chat(t, key, tc.model, "Hello. "+promptMarker); w.Code != tc.status {
				t.Fatalf("chat: %d %s, want %d", w.Code, w.Body, tc.status)
			}
			// Durations vary: only their presence is compared.
			var got []string
			for _, r := range g.metrics.requestRecords(t) {
				for _, m := range []string{metrics.Duration, metrics.QueueWait} {
					r = durationRE(r, m)
				}
				got = append(got, r)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			noText(t, g.metrics.String())
		})
	}
}

// durationRE drops the value of the duration metric name from a record's
// string: "Duration=12.5" becomes "Duration".
func durationRE(s, name string) string {
	fields := strings.Fields(s)
	for i, f := range fields {
		if strings.HasPrefix(f, name+"=") {
			fields[i] = name
		}
	}
	if strings.HasPrefix(s, " ") {
		return " " + strings.Join(fields, " ")
	}
	return strings.Join(fields, " ")
}

// noText fails if any text of a request reached the metrics.
func noText(t *testing.T, out string) {
	t.Helper()
	for _, marker := range []string{promptMarker, completionMarker, modelMarker} {
		if strings.Contains(out, marker) {
			t.Errorf("metrics carry %s:\n%s", marker, out)
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
