package relayroutes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/connections"
	"github.com/c0mpute/c0mpute/functions/metrics"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/relayroutes"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
)

const (
	served   = "c0mpute-pro"
	idle     = "c0mpute-mini"
	lis      = "listener-1"
	worker   = "worker-1"
	secret   = "relay-test-listener-secret"
	jobModel = served
)

var t0 = time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)

// posts answers every post with err.
type posts struct{ err error }

func (p posts) Post(context.Context, string, []byte) error { return p.err }
func (p posts) Delete(context.Context, string) error       { return nil }

type noDispatch struct{}

func (noDispatch) Dispatch(context.Context, []string) (int, error) { return 0, nil }
func (noDispatch) Registered(store.Worker)                         {}

// countingStore counts the Stats reads.
type countingStore struct {
	relayroutes.Store
	mu    sync.Mutex
	stats int
}

func (s *countingStore) Stats(ctx context.Context, now time.Time) (store.Stats, error) {
	s.mu.Lock()
	s.stats++
	s.mu.Unlock()
	return s.Store.Stats(ctx, now)
}

// fixture is a relay handler on the embedded store with a registered
// worker serving served and one job queued for it.
type fixture struct {
	h     *relayroutes.Handler
	st    *countingStore
	out   *bytes.Buffer
	now   time.Time
	store *embedded.Store
}

func newFixture(t *testing.T, withMetrics bool, post error) *fixture {
	t.Helper()
	ctx := t.Context()
	st, err := embedded.Open(t.TempDir()+"/c0.db", embedded.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	cat, err := catalog.New([]catalog.Model{{ID: served, Price: 10}, {ID: idle, Price: 1}})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{st: &countingStore{Store: st}, out: &bytes.Buffer{}, now: t0, store: st}
	f.h = &relayroutes.Handler{Store: f.st, Post: posts{post}, Dispatch: noDispatch{}, Catalog: cat, ListenerSecret: secret,
		Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return f.now }}
	if withMetrics {
		f.h.Metrics = metrics.New(f.out, "c0mpute/test")
	}
	must(t, st.CreateAccount(ctx, store.Account{ID: "payer", Credits: 100, CreatedAt: t0}))
	must(t, st.PutAPIKey(ctx, store.Secret{Hash: "keyhash", ID: "key1", AccountID: "payer", CreatedAt: t0}))
	must(t, st.PutWorker(ctx, store.Worker{Conn: worker, AccountID: "payer", Pubkey: "pk", ConnectedAt: t0}))
	if _, err := st.RegisterWorker(ctx, worker, []string{served}, nil); err != nil {
		t.Fatal(err)
	}
	_, err = st.Admit(ctx, store.AdmitRequest{KeyHash: "keyhash", Window: t0, Limit: 10,
		Job: store.Job{ID: "job-1", Model: jobModel, Price: 10, Listener: lis, Created: t0}})
	must(t, err)
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// message sends body from conn as a $default event.
func (f *fixture) message(t *testing.T, conn string, body []byte) events.APIGatewayProxyResponse {
	t.Helper()
	var ev events.APIGatewayWebsocketProxyRequest
	ev.RequestContext.ConnectionID, ev.RequestContext.RouteKey, ev.Body = conn, "$default", string(body)
	resp, err := f.h.Handle(t.Context(), ev)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (f *fixture) heartbeat(t *testing.T) {
	t.Helper()
	b, err := relaymsg.Encode(&relaymsg.Heartbeat{})
	must(t, err)
	f.message(t, worker, b)
}

// records decodes the metric lines written so far into "dims metrics"
// strings, the metrics in the order written.
func (f *fixture) records(t *testing.T) []string {
	t.Helper()
	var out []string
	for line := range strings.Lines(f.out.String()) {
		var raw map[string]any
		if err := json.Unmarshal([]byte(line), &raw); err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		dir := raw["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)
		var fields []string
		for _, d := range dir["Dimensions"].([]any)[0].([]any) {
			fields = append(fields, d.(string)+"="+raw[d.(string)].(string))
		}
		for _, m := range dir["Metrics"].([]any) {
			name := m.(map[string]any)["Name"].(string)
			b, _ := json.Marshal(raw[name])
			fields = append(fields, name+"="+string(b))
		}
		out = append(out, strings.Join(fields, " "))
	}
	return out
}

// The gauges go out with the first event and then at most once a minute,
// one record per catalog model, from the store's counters: a model nobody
// serves at 0.
func TestGaugesOncePerMinute(t *testing.T) {
	f := newFixture(t, true, nil)
	gauges := []string{
		"Model=" + served + " QueueDepth=1 OnlineWorkers=1",
		"Model=" + idle + " QueueDepth=0 OnlineWorkers=0",
	}
	var want []string
	for _, tc := range []struct {
		after time.Duration
		due   bool
	}{{0, true}, {30 * time.Second, false}, {59 * time.Second, false}, {61 * time.Second, true}, {90 * time.Second, false}} {
		f.now = t0.Add(tc.after)
		f.heartbeat(t)
		if tc.due {
			want = append(want, gauges...)
		}
		if got := f.records(t); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("after a heartbeat at +%v:\n%s\nwant:\n%s", tc.after, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if f.st.stats != 2 {
		t.Errorf("%d Stats reads for two gauge rounds", f.st.stats)
	}
}

// Without metrics the relay reads nothing for them.
func TestNoMetricsNoReads(t *testing.T) {
	f := newFixture(t, false, nil)
	f.heartbeat(t)
	if f.st.stats != 0 || f.out.Len() != 0 {
		t.Errorf("%d Stats reads, %d bytes of metrics, want none", f.st.stats, f.out.Len())
	}
}

// A job whose listener is gone is failed with a refund, which counts once,
// by its catalog model, and carries none of the reply's text.
func TestRefundCounted(t *testing.T) {
	f := newFixture(t, true, connections.ErrGone)
	f.heartbeat(t) // the gauges, out of the way
	f.out.Reset()
	f.now = t0.Add(time.Second)
	if _, err := f.store.Assign(t.Context(), "job-1", worker, f.now); err != nil {
		t.Fatal(err)
	}
	ticket := relaymsg.NewTicketer(secret).Issue("job-1", worker, lis)
	for range 2 { // the second chunk finds the job failed: no second refund
		b, err := relaymsg.Encode(&relaymsg.Chunk{Job: "job-1", To: lis, Deltas: []oaiwire.Delta{{Content: "COMPLETION-MARKER"}}, Ticket: ticket})
		must(t, err)
		f.message(t, worker, b)
	}
	if job, err := f.store.GetJob(t.Context(), "job-1"); err != nil || !job.Refunded {
		t.Fatalf("job after its listener went: %+v, %v; want refunded", job, err)
	}
	if got, want := f.records(t), []string{"Model=" + served + " Refunds=1"}; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("records %v, want %v", got, want)
	}
	if strings.Contains(f.out.String(), "COMPLETION-MARKER") {
		t.Errorf("the reply's text reached the metrics: %s", f.out)
	}
}

// TestNoModelsSaysWhatIsServed: a worker registering only models the
// network does not offer is told which ids it does, so that its owner can
// map one (workerd --models).
func TestNoModelsSaysWhatIsServed(t *testing.T) {
	f := newFixture(t, false, nil)
	b, err := relaymsg.Encode(&relaymsg.Register{Models: []string{"gpt-4", "llama9"}})
	must(t, err)
	resp := f.message(t, worker, b)
	m, err := relaymsg.Decode([]byte(resp.Body))
	must(t, err)
	e, ok := m.(*relaymsg.Error)
	if !ok || e.Code != "no_models" || e.Message != "this network serves "+served+", "+idle+" (and their aliases)" {
		t.Fatalf("reply %s", resp.Body)
	}
}
