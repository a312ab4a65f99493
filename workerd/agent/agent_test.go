package agent_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mr-tron/base58"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/workerd/agent"
	"github.com/c0mpute/c0mpute/workerd/backend"
)

// The model refresh (re-register when the backend's models change) is not
// tested: its period is the unexported constant modelRefresh (1 min).
// Heartbeats (every 4 min) likewise.

func TestShortName(t *testing.T) {
	for in, want := range map[string]string{
		"llama3.2:latest": "llama3.2",
		"llama3.2":        "llama3.2",
		"qwen2.5:7b":      "qwen2.5:7b",
		"x:latest:latest": "x:latest",
	} {
		if got := agent.ShortName(in); got != want {
			t.Errorf("ShortName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRegistersModels(t *testing.T) {
	have := []string{"qwen2.5:7b", "llama3.2:latest"}
	cases := []struct {
		name   string
		models map[string]string
		want   []string          // registered ids
		runs   map[string]string // network id -> backend model Chat gets
	}{
		{
			name: "every backend model under its short name",
			want: []string{"llama3.2", "qwen2.5:7b"},
			runs: map[string]string{"llama3.2": "llama3.2:latest", "qwen2.5:7b": "qwen2.5:7b"},
		},
		{
			name:   "configured ids map to backend names; missing ones are left out",
			models: map[string]string{"llama": "llama3.2", "qwen": "qwen2.5:7b", "absent": "mistral"},
			want:   []string{"llama", "qwen"},
			runs:   map[string]string{"llama": "llama3.2:latest", "qwen": "qwen2.5:7b"},
		},
		{
			name:   "a configured full name",
			models: map[string]string{"l3": "llama3.2:latest"},
			want:   []string{"l3"},
			runs:   map[string]string{"l3": "llama3.2:latest"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newTestRelay(t)
			be := newScriptedBackend(have, texts("hi"))
			startAgent(t, r, be, func(c *agent.Config) { c.Models = tc.models })
			reg := r.registered(1)
			m := reg.msg.(*relaymsg.Register)
			if !slices.Equal(m.Models, tc.want) {
				t.Errorf("registered %v, want %v", m.Models, tc.want)
			}
			if m.Agent != "workerd/test scripted" {
				t.Errorf("agent %q", m.Agent)
			}
			i := 0
			for id, backendModel := range tc.runs {
				job := fmt.Sprintf("job-%d", i)
				i++
				r.sendJob(reg.conn, job, id, "hello")
				if c := be.nextCall(t); c.Model != backendModel {
					t.Errorf("job for %s ran on backend model %q, want %q", id, c.Model, backendModel)
				}
				_, end := checkReply(t, r.waitEnd(job), job)
				if end.kind != relaymsg.TypeDone {
					t.Errorf("job for %s ended with %s", id, end)
				}
			}
		})
	}
}

func TestNoModelNoConnectUntilOneAppears(t *testing.T) {
	t.Parallel()
	r := newTestRelay(t)
	be := newScriptedBackend(nil, texts("hi"))
	startAgent(t, r, be, nil)
	time.Sleep(500 * time.Millisecond)
	if n := r.dialCount(); n != 0 {
		t.Errorf("%d dials with no model to serve", n)
	}
	be.setModels([]string{"m:latest"})
	if got := r.registered(1).msg.(*relaymsg.Register).Models; !slices.Equal(got, []string{"m"}) {
		t.Errorf("registered %v", got)
	}
}

func TestStreamsBatchedChunks(t *testing.T) {
	cases := []struct {
		name      string
		batchMS   int
		maxChunks func(deltas int) int
	}{
		// 300 deltas emitted back to back: a handful of chunks.
		{"25 ms window", 25, func(n int) int { return 1 + n/10 }},
		// The relay may ask for no batching (one machine): a chunk each.
		{"no window", 0, func(n int) int { return n }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testStreams(t, tc.batchMS, tc.maxChunks)
		})
	}
}

func testStreams(t *testing.T, batchMS int, maxChunks func(int) int) {
	r := newTestRelay(t)
	r.batchMillis = batchMS
	release := make(chan struct{})
	idx := 0
	var emitted []oaiwire.Delta
	emitted = append(emitted, oaiwire.Delta{Role: "assistant", Content: "Hel"})
	for i := range 300 {
		d := oaiwire.Delta{Content: fmt.Sprintf("t%d ", i)}
		switch i % 50 {
		case 1:
			d = oaiwire.Delta{Reasoning: "hmm <&> \"quoted\"\n"}
		case 2:
			d = oaiwire.Delta{ToolCalls: []oaiwire.ToolCall{{Index: &idx, ID: "call_1", Type: "function",
				Function: oaiwire.FunctionCall{Name: "f", Arguments: `{"a":`}}}}
		}
		emitted = append(emitted, d)
	}
	var be *scriptedBackend
	be = newScriptedBackend([]string{"m"}, func(ctx context.Context, c *chatCall, emit func(oaiwire.Delta) error) (backend.Result, error) {
		if err := emit(emitted[0]); err != nil {
			return backend.Result{}, err
		}
		if err := be.block(ctx, release); err != nil {
			return backend.Result{}, err
		}
		for _, d := range emitted[1:] {
			if err := emit(d); err != nil {
				return backend.Result{}, err
			}
		}
		return backend.Result{FinishReason: "length", Usage: stopUsage}, nil
	})
	startAgent(t, r, be, nil)
	reg := r.registered(1)
	r.sendJob(reg.conn, "j1", "m", "hello")

	// The first delta goes out alone, before the backend emits anything
	// else: time to first token pays no batching delay.
	evs := r.waitFor("the first chunk", func(evs []event) bool { return len(replyOf(evs, "j1")) > 0 })
	first := replyOf(evs, "j1")[0].msg.(*relaymsg.Chunk)
	if first.Seq != 0 || !reflect.DeepEqual(first.Deltas, emitted[:1]) {
		t.Errorf("first message %+v, want chunk 0 with only the first delta", first)
	}
	close(release)

	chunks, end := checkReply(t, r.waitEnd("j1"), "j1")
	var got []oaiwire.Delta
	for _, c := range chunks {
		got = append(got, c.Deltas...)
	}
	if !reflect.DeepEqual(got, emitted) {
		t.Errorf("the chunks' deltas differ from the backend's:\n got %+v\nwant %+v", got, emitted)
	}
	if len(chunks) > maxChunks(len(emitted)) {
		t.Errorf("%d chunks for %d quick deltas, want at most %d", len(chunks), len(emitted), maxChunks(len(emitted)))
	}
	done := end.msg.(*relaymsg.Done)
	if done.FinishReason != "length" || done.Usage != stopUsage || end.conn != reg.conn {
		t.Errorf("done %+v on %s", done, end.conn)
	}
	t.Logf("%d deltas in %d chunks", len(emitted), len(chunks))
}

func TestLargeBurstIsSplit(t *testing.T) {
	cases := []struct {
		name  string
		delta string
		n     int
	}{
		{"many small deltas", strings.Repeat("word ", 20), 3000},
		{"1 KiB deltas", strings.Repeat("a", 1024), 400},
		// JSON escapes <, > and & to \u003c…: six bytes per character.
		{"deltas that grow sixfold in JSON", strings.Repeat("<&>\x01", 3*1024), 30},
		{"one delta near the limit", strings.Repeat("b", 100*1024), 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newTestRelay(t)
			ds := make([]string, tc.n)
			for i := range ds {
				ds[i] = tc.delta
			}
			be := newScriptedBackend([]string{"m"}, texts(ds...))
			startAgent(t, r, be, nil)
			reg := r.registered(1)
			r.sendJob(reg.conn, "burst", "m", "go")
			evs := r.waitEnd("burst")
			chunks, end := checkReply(t, evs, "burst")
			if end.kind != relaymsg.TypeDone {
				t.Fatalf("the burst ended with %s", end)
			}
			if got, want := content(chunks), strings.Repeat(tc.delta, tc.n); got != want {
				t.Errorf("content: %d bytes, want %d", len(got), len(want))
			}
			largest := 0
			for _, e := range replyOf(evs, "burst") {
				largest = max(largest, e.size)
				if e.size > relaymsg.MaxMessage {
					t.Errorf("%s is over %d bytes", e, relaymsg.MaxMessage)
				}
			}
			t.Logf("%d deltas (%d bytes) in %d chunks, largest message %d bytes", tc.n, tc.n*len(tc.delta), len(chunks), largest)
		})
	}
}

func TestBackendErrorFails(t *testing.T) {
	cases := []struct {
		name   string
		deltas []string
	}{
		{"before any delta", nil},
		{"after deltas", []string{"par", "tial"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newTestRelay(t)
			be := newScriptedBackend([]string{"m"}, func(ctx context.Context, c *chatCall, emit func(oaiwire.Delta) error) (backend.Result, error) {
				for _, d := range tc.deltas {
					if err := emit(oaiwire.Delta{Content: d}); err != nil {
						return backend.Result{}, err
					}
				}
				return backend.Result{}, errors.New("boom: out of memory")
			})
			startAgent(t, r, be, nil)
			reg := r.registered(1)
			r.sendJob(reg.conn, "j", "m", "hello")
			chunks, end := checkReply(t, r.waitEnd("j"), "j")
			fail, ok := end.msg.(*relaymsg.Fail)
			if !ok || fail.Code != "backend_error" || !strings.Contains(fail.Message, "boom") {
				t.Fatalf("ended with %s (%+v), want fail backend_error", end, end.msg)
			}
			if got := content(chunks); got != strings.Join(tc.deltas, "") {
				t.Errorf("content %q", got)
			}
		})
	}
}

// serverError is an error carrying text the inference server wrote, as the
// real backends' status errors do.
type serverError struct{ text string }

func (e serverError) Error() string    { return "backend: 400: " + e.text }
func (e serverError) Redacted() string { return "backend: 400" }

// TestBackendErrorTextStaysLocal: a server's error text may quote the
// prompt (validation errors echo the input), so only the redacted form
// leaves the worker.
func TestBackendErrorTextStaysLocal(t *testing.T) {
	t.Parallel()
	r := newTestRelay(t)
	be := newScriptedBackend([]string{"m"}, func(ctx context.Context, c *chatCall, emit func(oaiwire.Delta) error) (backend.Result, error) {
		return backend.Result{}, fmt.Errorf("chat: %w", serverError{text: "input_value='my secret prompt'"})
	})
	startAgent(t, r, be, nil)
	reg := r.registered(1)
	r.sendJob(reg.conn, "j", "m", "my secret prompt")
	_, end := checkReply(t, r.waitEnd("j"), "j")
	fail, ok := end.msg.(*relaymsg.Fail)
	if !ok || fail.Code != "backend_error" || fail.Message != "backend: 400" {
		t.Fatalf("ended with %+v, want fail backend_error with the redacted text", end.msg)
	}
}

// idleRing is a ring member that drives no ring: the agent's side of
// membership with the ring itself left out.
type idleRing struct{ attached chan []relaymsg.RingOffer }

func (r idleRing) Attach(offers []relaymsg.RingOffer, _ func(any) error) { r.attached <- offers }
func (idleRing) Handle(any)                                              {}
func (idleRing) Drives(string) bool                                      { return false }
func (idleRing) Chat(context.Context, *relaymsg.Job, func(oaiwire.Delta) error) (backend.Result, *relaymsg.RingDone, error) {
	return backend.Result{}, nil, errors.New("idle ring")
}

// TestRingJobNotDriven: a ring member handed a job of a ring it does not
// drive (the ring disbanded while the job was on its way) fails it with
// ring_not_serving, which moves the job without cutting the worker off —
// not model_not_served; the register offered the worker as a ring member,
// and the offers reached the member.
func TestRingJobNotDriven(t *testing.T) {
	t.Parallel()
	r := newTestRelay(t)
	r.ringOffers = []relaymsg.RingOffer{{Model: "big", BlobURL: "https://blobs.example/big"}}
	be := newScriptedBackend([]string{"m"}, texts("hi"))
	ring := idleRing{attached: make(chan []relaymsg.RingOffer, 1)}
	startAgent(t, r, be, func(c *agent.Config) { c.Ring = ring })
	reg := r.registered(1)
	if m, ok := reg.msg.(*relaymsg.Register); !ok || !m.Ring {
		t.Fatalf("registered with %+v, want a ring member's register", reg.msg)
	}
	if got := <-ring.attached; len(got) != 1 || got[0].Model != "big" {
		t.Fatalf("the member was attached with %+v", got)
	}
	r.sendJob(reg.conn, "j", "big", "hello")
	_, end := checkReply(t, r.waitEnd("j"), "j")
	if f, ok := end.msg.(*relaymsg.Fail); !ok || f.Code != relaymsg.FailRingNotServing || f.Seq != 0 {
		t.Fatalf("ended with %s, want fail %s seq 0", end, relaymsg.FailRingNotServing)
	}
}

func TestModelNotServed(t *testing.T) {
	t.Parallel()
	r := newTestRelay(t)
	be := newScriptedBackend([]string{"m"}, texts("hi"))
	startAgent(t, r, be, nil)
	reg := r.registered(1)
	r.sendJob(reg.conn, "j", "other-model", "hello")
	_, end := checkReply(t, r.waitEnd("j"), "j")
	if f, ok := end.msg.(*relaymsg.Fail); !ok || f.Code != "model_not_served" || f.Seq != 0 {
		t.Fatalf("ended with %s, want fail model_not_served seq 0", end)
	}
	if len(be.calls) != 0 {
		t.Error("the backend was called for a model it does not serve")
	}
}

// blockingScript emits one delta, then waits for release (or the call's
// cancellation), then emits "end" and stops.
func blockingScript(be **scriptedBackend, release <-chan struct{}) script {
	return func(ctx context.Context, c *chatCall, emit func(oaiwire.Delta) error) (backend.Result, error) {
		if c.Prompt == "quick" {
			return texts("fast")(ctx, c, emit)
		}
		if err := emit(oaiwire.Delta{Content: "start "}); err != nil {
			return backend.Result{}, err
		}
		if err := (*be).block(ctx, release); err != nil {
			return backend.Result{}, err
		}
		if err := emit(oaiwire.Delta{Content: "end"}); err != nil {
			return backend.Result{}, err
		}
		return backend.Result{FinishReason: "stop", Usage: stopUsage}, nil
	}
}

func disconnected(evs []event, conn string) int {
	return index(evs, func(e event) bool { return e.kind == "disconnect" && e.conn == conn })
}

func TestCancelStopsTheBackend(t *testing.T) {
	t.Parallel()
	r := newTestRelay(t)
	var be *scriptedBackend
	be = newScriptedBackend([]string{"m"}, blockingScript(&be, nil))
	ra := startAgent(t, r, be, nil)
	reg := r.registered(1)
	r.sendJob(reg.conn, "j1", "m", "slow")
	call := be.nextCall(t)
	r.waitFor("the first chunk", func(evs []event) bool { return len(replyOf(evs, "j1")) > 0 })

	r.post(reg.conn, &relaymsg.Cancel{Job: "j1"})
	waitClosed(t, call.returned, "the backend call to end after cancel")
	if !errors.Is(call.ctx.Err(), context.Canceled) {
		t.Errorf("backend ctx: %v, want canceled", call.ctx.Err())
	}
	// The connection still serves.
	r.sendJob(reg.conn, "j2", "m", "quick")
	if _, end := checkReply(t, r.waitEnd("j2"), "j2"); end.kind != relaymsg.TypeDone {
		t.Errorf("the next job ended with %s", end)
	}
	// Shut down: Run returns only after every job goroutine ended, so
	// the record is complete once the connection is gone.
	ra.stop(t)
	evs := r.waitFor("the disconnect", func(evs []event) bool { return disconnected(evs, reg.conn) >= 0 })
	if i := endOf(evs, "j1"); i >= 0 {
		t.Errorf("a cancelled job was answered: %s", evs[i])
	}
}

func TestReconnectsAfterDrop(t *testing.T) {
	t.Parallel()
	r := newTestRelay(t)
	var be *scriptedBackend
	be = newScriptedBackend([]string{"m"}, blockingScript(&be, nil))
	startAgent(t, r, be, nil)
	first := r.registered(1)
	r.sendJob(first.conn, "j1", "m", "slow")
	call := be.nextCall(t)

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := r.mgmt.Delete(ctx, first.conn); err != nil {
		t.Fatal(err)
	}
	second := r.registered(2)
	if second.conn == first.conn {
		t.Fatalf("registered again on the dropped connection %s", first.conn)
	}
	waitClosed(t, call.returned, "the running job to be cancelled")
	if !errors.Is(call.ctx.Err(), context.Canceled) {
		t.Errorf("backend ctx: %v, want canceled", call.ctx.Err())
	}
	r.sendJob(second.conn, "j2", "m", "quick")
	if _, end := checkReply(t, r.waitEnd("j2"), "j2"); end.kind != relaymsg.TypeDone || end.conn != second.conn {
		t.Errorf("job on the new connection ended with %s", end)
	}
	if i := endOf(r.snapshot(), "j1"); i >= 0 {
		t.Errorf("the dropped job was answered: %s", r.snapshot()[i])
	}
}

func TestBackoffWhileRefused(t *testing.T) {
	t.Parallel()
	r := newTestRelay(t)
	r.setRefuse(http.StatusServiceUnavailable, "") // passing: the relay is down
	be := newScriptedBackend([]string{"m"}, texts("hi"))
	startAgent(t, r, be, nil)
	time.Sleep(3 * time.Second)
	r.mu.Lock()
	dials := append([]time.Time(nil), r.dials...)
	r.mu.Unlock()
	// Backoff 250 ms doubling, ±50 % jitter: dials 2..4 are at most
	// 0.375+0.75+1.5 s after the first, and the third gap is always longer
	// than the first.
	if len(dials) < 4 || len(dials) >= 20 {
		t.Fatalf("%d dials in 3 s while refused, want 4..19", len(dials))
	}
	if g0, g2 := dials[1].Sub(dials[0]), dials[3].Sub(dials[2]); g2 <= g0 {
		t.Errorf("backoff does not grow: gaps %s then %s", g0, g2)
	}
	r.setRefuse(0, "")
	r.registered(1)
	t.Logf("%d refused dials in 3 s", len(dials))
}

// TestRefusedForGood: a refusal retrying cannot change ends Run with a
// RefusedError that says what to do, after one try; a replayed connect
// signature is retried.
func TestRefusedForGood(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		status   int
		body     string
		register string
		want     string
	}{
		{"unknown token, no reason given", http.StatusUnauthorized, "", "", "check the worker token"},
		{"unknown token", http.StatusUnauthorized, "unknown worker token", "", "unknown worker token; check the worker token"},
		{"revoked", http.StatusForbidden, "worker token revoked", "", "create a new worker token"},
		{"banned", http.StatusForbidden, "worker banned: this identity or worker token failed the network's checks", "", "GET /v1/workers"},
		{"no model the network serves", 0, "", "no_models", "the network serves none of this worker's models (m): this network serves: c0mpute-pro, code; serve one of the network's models: --models"},
		{"revoked at registration", 0, "", "revoked", "create a new worker token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newTestRelay(t)
			r.setRefuse(tc.status, tc.body)
			r.mu.Lock()
			r.registerError = tc.register
			r.mu.Unlock()
			be := newScriptedBackend([]string{"m"}, texts("hi"))
			ra := startAgent(t, r, be, nil)
			var err error
			select {
			case err = <-ra.done:
			case <-time.After(waitLimit):
				t.Fatal("Run kept retrying")
			}
			ra.done <- err // for the cleanup
			var refused *agent.RefusedError
			if !errors.As(err, &refused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v, want a RefusedError mentioning %q", err, tc.want)
			}
			if n := r.dialCount(); n != 1 {
				t.Errorf("%d dials, want 1", n)
			}
		})
	}
	t.Run("replayed signature is retried", func(t *testing.T) {
		t.Parallel()
		r := newTestRelay(t)
		r.setRefuse(http.StatusUnauthorized, "connect signature replayed")
		be := newScriptedBackend([]string{"m"}, texts("hi"))
		startAgent(t, r, be, nil)
		r.waitFor("a second dial", func([]event) bool { return r.dialCount() >= 2 })
		r.setRefuse(0, "")
		r.registered(1)
	})
}

func TestRollKeepsJobOnOldConnection(t *testing.T) {
	t.Parallel()
	r := newTestRelay(t)
	release := make(chan struct{})
	var be *scriptedBackend
	be = newScriptedBackend([]string{"m"}, blockingScript(&be, release))
	startAgent(t, r, be, func(c *agent.Config) { c.RollAfter = 400 * time.Millisecond })
	first := r.registered(1)
	old := first.conn
	r.sendJob(old, "j1", "m", "slow")
	be.nextCall(t)

	evs := r.waitFor("the roll", func(evs []event) bool {
		return index(evs, func(e event) bool { return e.kind == relaymsg.TypeDrain && e.conn == old }) >= 0
	})
	drain := index(evs, func(e event) bool { return e.kind == relaymsg.TypeDrain && e.conn == old })
	newReg := index(evs, func(e event) bool { return e.kind == relaymsg.TypeRegister && e.conn != old })
	if newReg < 0 || newReg > drain {
		t.Errorf("drain on the old connection (event %d) before a new one registered (event %d)", drain, newReg)
	}
	if i := disconnected(evs, old); i >= 0 {
		t.Fatalf("the old connection closed with a job running (event %d)", i)
	}
	// Let the job run across a few more rolls, then finish.
	time.Sleep(600 * time.Millisecond)
	close(release)
	r.waitEnd("j1")
	evs = r.waitFor("the old connection to close", func(evs []event) bool { return disconnected(evs, old) >= 0 })
	chunks, end := checkReply(t, evs, "j1")
	if end.kind != relaymsg.TypeDone || content(chunks) != "start end" {
		t.Errorf("job ended with %s, content %q", end, content(chunks))
	}
	for _, e := range replyOf(evs, "j1") {
		if e.conn != old {
			t.Errorf("%s came on a connection other than the job's %s", e, old)
		}
	}
	if d, done := disconnected(evs, old), endOf(evs, "j1"); d < done {
		t.Errorf("the old connection closed (event %d) before the job's done (event %d)", d, done)
	}
	if n := len(ofKind(evs, relaymsg.TypeRegister)); n < 2 {
		t.Errorf("%d registrations", n)
	}
}

func TestRollRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	r := newTestRelay(t)
	be := newScriptedBackend([]string{"m"}, texts("hi"))
	startAgent(t, r, be, func(c *agent.Config) { c.RollAfter = 200 * time.Millisecond })
	first := r.registered(1)
	r.setRefuse(http.StatusServiceUnavailable, "")
	before := r.dialCount()
	time.Sleep(2 * time.Second)
	if n := r.dialCount() - before; n >= 20 {
		t.Errorf("%d dials in 2 s while the relay refused the roll: no backoff", n)
	} else {
		t.Logf("%d refused roll dials in 2 s", n)
	}
	if i := disconnected(r.snapshot(), first.conn); i >= 0 {
		t.Error("the working connection was dropped while the roll failed")
	}
	r.setRefuse(0, "")
	r.registered(2)
	r.waitFor("the old connection to drain and close", func(evs []event) bool { return disconnected(evs, first.conn) >= 0 })
}

func TestDrainOnShutdown(t *testing.T) {
	t.Parallel()
	r := newTestRelay(t)
	release := make(chan struct{})
	var be *scriptedBackend
	be = newScriptedBackend([]string{"m"}, blockingScript(&be, release))
	ra := startAgent(t, r, be, nil)
	reg := r.registered(1)
	r.sendJob(reg.conn, "j1", "m", "slow")
	be.nextCall(t)

	ra.cancel() // SIGTERM
	evs := r.waitFor("drain", func(evs []event) bool { return len(ofKind(evs, relaymsg.TypeDrain)) > 0 })
	if ra.returned() {
		t.Fatal("Run returned with a job in flight")
	}
	if i := disconnected(evs, reg.conn); i >= 0 {
		t.Fatal("the connection closed with a job in flight")
	}
	close(release)
	ra.stop(t)
	evs = r.waitFor("the disconnect", func(evs []event) bool { return disconnected(evs, reg.conn) >= 0 })
	chunks, end := checkReply(t, evs, "j1")
	if end.kind != relaymsg.TypeDone || content(chunks) != "start end" {
		t.Errorf("job ended with %s, content %q", end, content(chunks))
	}
	drain := index(evs, func(e event) bool { return e.kind == relaymsg.TypeDrain })
	if d, done := disconnected(evs, reg.conn), endOf(evs, "j1"); !(drain < done && done < d) {
		t.Errorf("order: drain %d, done %d, disconnect %d; want drain < done < disconnect", drain, done, d)
	}
}

func TestDrainTimeout(t *testing.T) {
	t.Parallel()
	r := newTestRelay(t)
	var be *scriptedBackend
	be = newScriptedBackend([]string{"m"}, blockingScript(&be, nil)) // never finishes
	ra := startAgent(t, r, be, func(c *agent.Config) { c.DrainTimeout = 300 * time.Millisecond })
	reg := r.registered(1)
	r.sendJob(reg.conn, "j1", "m", "slow")
	call := be.nextCall(t)
	ra.stop(t)
	r.waitFor("the disconnect", func(evs []event) bool { return disconnected(evs, reg.conn) >= 0 })
	// A job past the drain timeout can answer no one: it is stopped.
	waitClosed(t, call.returned, "the job to be cancelled after the drain timeout")
}

// A single delta too large for any message cannot be split by the batcher:
// the job fails, and the fail takes the next unsent seq (no gap the
// receiver would wait on).
func TestOversizeDeltaFails(t *testing.T) {
	t.Parallel()
	r := newTestRelay(t)
	be := newScriptedBackend([]string{"m"}, texts("ok", strings.Repeat("x", relaymsg.MaxMessage)))
	startAgent(t, r, be, nil)
	reg := r.registered(1)
	r.sendJob(reg.conn, "j", "m", "hello")
	chunks, end := checkReply(t, r.waitEnd("j"), "j")
	if f, ok := end.msg.(*relaymsg.Fail); !ok || f.Code != "backend_error" || content(chunks) != "ok" {
		t.Fatalf("ended with %s after %q, want fail backend_error after \"ok\"", end, content(chunks))
	}
}

// The relay dispatches when a worker registers, so a job can reach the
// worker before the Registered reply; the agent keeps it and runs it on
// that connection instead of dropping the connection.
func TestJobBeforeRegistered(t *testing.T) {
	t.Parallel()
	r := newTestRelay(t)
	var req oaiwire.ChatRequest
	req.Model = "m"
	req.Messages = []oaiwire.Message{{Role: "user", Content: oaiwire.Content{Text: "early"}}}
	early, err := relaymsg.Encode(&relaymsg.Job{Job: "early", ReplyTo: listener, Model: "m", Request: req, Deadline: time.Now().Add(time.Minute),
		BudgetMillis: 60_000, Ticket: testTicket})
	if err != nil {
		t.Fatal(err)
	}
	if r.requests["early"], err = relaymsg.RequestHash(&req); err != nil { // posted by hand below
		t.Fatal(err)
	}
	posted := make(chan error, 1)
	r.onRegister = func(conn string) {
		select {
		case posted <- r.mgmt.Post(context.Background(), conn, early):
		default: // only the first registration
		}
	}
	be := newScriptedBackend([]string{"m"}, texts("on time"))
	startAgent(t, r, be, nil)
	reg := r.registered(1)
	if err := <-posted; err != nil {
		t.Fatal(err)
	}
	evs := r.waitEnd("early")
	chunks, end := checkReply(t, evs, "early")
	if end.kind != relaymsg.TypeDone || end.conn != reg.conn || content(chunks) != "on time" {
		t.Errorf("early job ended with %s on %s (registered on %s), content %q", end, end.conn, reg.conn, content(chunks))
	}
	if n := len(ofKind(evs, relaymsg.TypeRegister)); n != 1 {
		t.Errorf("%d registrations: the connection was dropped", n)
	}
}

// A generation that would outlast its job's budget ends before it, complete
// as far as it goes (finish_reason "length", like max_tokens), so that the
// gateway charges it and pays for it instead of cutting it at the deadline.
func TestReplyEndsAtTheDeadline(t *testing.T) {
	t.Parallel()
	r := newTestRelay(t)
	be := newScriptedBackend([]string{"m"}, func(ctx context.Context, c *chatCall, emit func(oaiwire.Delta) error) (backend.Result, error) {
		// Streams until told to stop, as a long generation would.
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return backend.Result{}, ctx.Err()
			case <-tick.C:
				if err := emit(oaiwire.Delta{Content: "word "}); err != nil {
					return backend.Result{}, err
				}
			}
		}
	})
	startAgent(t, r, be, nil)
	reg := r.registered(1)
	var req oaiwire.ChatRequest
	if err := json.Unmarshal([]byte(`{"model":"m","messages":[{"role":"user","content":"go on"}],"stream":true}`), &req); err != nil {
		t.Fatal(err)
	}
	r.post(reg.conn, &relaymsg.Job{Job: "long", ReplyTo: listener, Model: "m", Request: req,
		Deadline: time.Now().Add(800 * time.Millisecond), BudgetMillis: 800, Ticket: testTicket})
	chunks, end := checkReply(t, r.waitEnd("long"), "long")
	done, ok := end.msg.(*relaymsg.Done)
	if !ok {
		t.Fatalf("the job ended with %s, want done", end)
	}
	if done.FinishReason != oaiwire.FinishLength {
		t.Errorf("finish_reason %q, want length", done.FinishReason)
	}
	deltas := int64(0)
	for _, c := range chunks {
		deltas += int64(len(c.Deltas))
	}
	if deltas == 0 || done.Usage.CompletionTokens != deltas {
		t.Errorf("completion_tokens %d for %d deltas streamed", done.Usage.CompletionTokens, deltas)
	}
	// The reply ended at the deadline is signed like any other
	// (checkReply verified it against the chunks).
	wantReq, err := relaymsg.RequestHash(&req)
	if err != nil {
		t.Fatal(err)
	}
	if rc := done.Receipt; rc.RequestSHA256 != wantReq || rc.Deltas != deltas || rc.CompletionTokens != deltas || rc.Model != "m" {
		t.Errorf("receipt %+v; want the job's request hash %s, %d deltas", rc, wantReq, deltas)
	}
}

// digesting is a backend that reports its models' digests.
type digesting struct{ *scriptedBackend }

func (digesting) ModelDigest(model string) string { return "digest-of-" + model }

// Every done carries a receipt signed with the worker's identity key (the
// key its connect was signed with): the job, the network model, the
// backend's digest, the hash of the request as it arrived, and the hash of
// the deltas exactly as they were sent — text split inside a character, a
// role, empty deltas and all.
func TestDoneCarriesSignedReceipt(t *testing.T) {
	t.Parallel()
	r := newTestRelay(t)
	idx := 0
	sent := []oaiwire.Delta{
		{Role: "assistant", Content: "caf\xc3"},
		{Content: "\xa9 <ok> & more"},
		{},
		{Reasoning: "thinking"},
		{ToolCalls: []oaiwire.ToolCall{{Index: &idx, ID: "call_1", Type: "function", Function: oaiwire.FunctionCall{Name: "f", Arguments: `{"a":1}`}}}},
		{ToolCalls: []oaiwire.ToolCall{{Index: &idx}}},
	}
	be := newScriptedBackend([]string{"backend-model"}, func(ctx context.Context, c *chatCall, emit func(oaiwire.Delta) error) (backend.Result, error) {
		for _, d := range sent {
			if err := emit(d); err != nil {
				return backend.Result{}, err
			}
		}
		return backend.Result{FinishReason: "tool_calls", Usage: stopUsage}, nil
	})
	startAgent(t, r, be, func(c *agent.Config) {
		c.Backend = digesting{be}
		c.Models = map[string]string{"network-model": "backend-model"}
	})
	reg := r.registered(1)
	var req oaiwire.ChatRequest
	body := `{"model":"network-model","messages":[{"role":"system","content":"be <brief> & kind"},{"role":"user","content":[{"type":"text","text":"hi"}]}],` +
		`"tools":[{"type":"function","function":{"name":"f","parameters":{ "type" : "object" }}}],"temperature":0.7,"stop":["\n"],"stream":true}`
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	r.post(reg.conn, &relaymsg.Job{Job: "j1", ReplyTo: listener, Model: "network-model", Request: req,
		Deadline: time.Now().Add(time.Minute), BudgetMillis: 60_000, Ticket: testTicket})
	chunks, end := checkReply(t, r.waitEnd("j1"), "j1")
	done, ok := end.msg.(*relaymsg.Done)
	if !ok {
		t.Fatalf("the job ended with %s, want done", end)
	}
	rc := done.Receipt
	wantReq, err := relaymsg.RequestHash(&req)
	if err != nil {
		t.Fatal(err)
	}
	var want relaymsg.OutputHasher
	for _, c := range chunks {
		for _, d := range c.Deltas {
			want.Add(d)
		}
	}
	switch {
	case relaymsg.VerifyReceipt(rc) != nil:
		t.Errorf("receipt does not verify: %v", relaymsg.VerifyReceipt(rc))
	case rc.Worker != base58.Encode(r.key.Public().(ed25519.PublicKey)):
		t.Errorf("receipt signed by %s, not the worker's identity", rc.Worker)
	case rc.Job != "j1" || rc.Model != "network-model" || rc.ModelDigest != "digest-of-backend-model":
		t.Errorf("receipt names job %q, model %q, digest %q", rc.Job, rc.Model, rc.ModelDigest)
	case rc.RequestSHA256 != wantReq:
		t.Errorf("request hash %s, want the job's %s", rc.RequestSHA256, wantReq)
	case rc.OutputSHA256 != want.Sum() || rc.Deltas != 4:
		t.Errorf("output %s over %d deltas; the chunks the relay received hash to %s over %d (4 with text)",
			rc.OutputSHA256, rc.Deltas, want.Sum(), want.Deltas())
	case rc.PromptTokens != stopUsage.PromptTokens || rc.CompletionTokens != stopUsage.CompletionTokens:
		t.Errorf("receipt tokens %d+%d, want the backend's usage %+v", rc.PromptTokens, rc.CompletionTokens, stopUsage)
	}
}
