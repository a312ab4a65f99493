package agent_test

// The harness: a real local relay (infra/relay) served by httptest, with a
// small relay handler that authenticates workers the way the relay
// function does, answers Register with Registered, records everything it
// sees, and lets a test post Job and Cancel messages to a worker's
// connection through the management API. The inference side is a
// scriptedBackend: each test scripts its deltas, timing and outcome.

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/mr-tron/base58"

	"github.com/c0mpute/c0mpute/functions/connections"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/infra/relay"
	"github.com/c0mpute/c0mpute/workerd/agent"
	"github.com/c0mpute/c0mpute/workerd/backend"
)

const (
	testToken = "cwt_agent_test"
	listener  = "listener-connection"
	// waitLimit is a liveness bound only: nothing here asserts speed.
	waitLimit = 15 * time.Second
)

// event is one thing the relay handler saw, in the order it saw them.
type event struct {
	conn string
	kind string // "connect", "disconnect", or a relaymsg type
	msg  any
	size int // bytes of a message
	at   time.Time
}

func (e event) String() string {
	s := fmt.Sprintf("%s %-10s", e.conn, e.kind)
	switch m := e.msg.(type) {
	case *relaymsg.Register:
		s += fmt.Sprintf(" models=%v agent=%q", m.Models, m.Agent)
	case *relaymsg.Chunk:
		s += fmt.Sprintf(" job=%s seq=%d deltas=%d size=%d", m.Job, m.Seq, len(m.Deltas), e.size)
	case *relaymsg.Done:
		s += fmt.Sprintf(" job=%s seq=%d finish=%s", m.Job, m.Seq, m.FinishReason)
	case *relaymsg.Fail:
		s += fmt.Sprintf(" job=%s seq=%d code=%s", m.Job, m.Seq, m.Code)
	}
	return s
}

type testRelay struct {
	t     *testing.T
	key   ed25519.PrivateKey
	wsURL string
	mgmt  *connections.Client

	// batchMillis is the batching window Registered grants (default 25).
	batchMillis int
	// onRegister, when set, runs inside the Register handler, before the
	// Registered reply goes out (as the relay dispatches on registration).
	onRegister func(conn string)

	mu      sync.Mutex
	refuse  int    // answer $connect with this status (0: accept)
	refusal string // and this body
	// registerError, when set, answers Register with this error code.
	registerError string
	// ringOffers are the ring models a registration offering the worker
	// as a ring member is told of.
	ringOffers []relaymsg.RingOffer
	dials      []time.Time
	nonces     map[string]bool
	events     []event
	rejected   []string // why a $connect or message was refused
	// requests is the request hash of each job posted, by job id.
	requests map[string]string
}

func newTestRelay(t *testing.T, opts ...relay.Option) *testRelay {
	t.Helper()
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &testRelay{t: t, key: key, nonces: map[string]bool{}, batchMillis: 25, requests: map[string]string{}}
	creds := aws.Credentials{AccessKeyID: "AKIAWORKERDTEST00001", SecretAccessKey: "workerd-agent-test"}
	rl := relay.New(relay.HandlerFunc(r.handle), append(opts, relay.WithCredentials(creds.AccessKeyID, creds.SecretAccessKey))...)
	srv := httptest.NewServer(rl)
	mgmt := httptest.NewServer(rl.Management())
	t.Cleanup(mgmt.Close)
	r.wsURL = "ws" + strings.TrimPrefix(srv.URL, "http")
	r.mgmt = connections.NewLocal(mgmt.URL, creds)
	// Cleanups run last-in first-out: the relay closes its WebSockets
	// (hijacked, beyond srv.Close) before the server stops.
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = rl.Close() })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay events:\n%s", describe(r.snapshot()))
		}
	})
	return r
}

func header(h map[string]string, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

func (r *testRelay) handle(_ context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	id := req.RequestContext.ConnectionID
	ok := events.APIGatewayProxyResponse{StatusCode: http.StatusOK}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch req.RequestContext.RouteKey {
	case relay.RouteConnect:
		r.dials = append(r.dials, time.Now())
		if r.refuse != 0 {
			return events.APIGatewayProxyResponse{StatusCode: r.refuse, Body: r.refusal}, nil
		}
		proof, err := relaymsg.VerifyConnect(func(k string) string { return header(req.Headers, k) }, time.Now())
		switch {
		case err != nil:
		case proof.Token != testToken:
			err = fmt.Errorf("token %q", proof.Token)
		case proof.Pubkey != base58.Encode(r.key.Public().(ed25519.PublicKey)):
			err = fmt.Errorf("pubkey %q", proof.Pubkey)
		case r.nonces[proof.Nonce]:
			err = fmt.Errorf("replayed connect signature")
		}
		if err != nil {
			r.rejected = append(r.rejected, "connect: "+err.Error())
			return events.APIGatewayProxyResponse{StatusCode: http.StatusUnauthorized}, nil
		}
		r.nonces[proof.Nonce] = true
		r.events = append(r.events, event{conn: id, kind: "connect", at: time.Now()})
		return ok, nil
	case relay.RouteDisconnect:
		r.events = append(r.events, event{conn: id, kind: "disconnect", at: time.Now()})
		return ok, nil
	}
	m, err := relaymsg.Decode([]byte(req.Body))
	if err != nil {
		r.rejected = append(r.rejected, "message: "+err.Error())
		b, _ := relaymsg.Encode(&relaymsg.Error{Code: "bad_message", Message: err.Error()})
		return events.APIGatewayProxyResponse{StatusCode: http.StatusOK, Body: string(b)}, nil
	}
	if tk := ticketOf(m); tk != "" && tk != testTicket {
		r.rejected = append(r.rejected, "message: ticket not copied from the job")
	}
	if d, isDone := m.(*relaymsg.Done); isDone {
		// As the gateway does (the output hash is checked by checkReply,
		// against the chunks): the receipt is the job's, for its request,
		// signed by the key the worker connected with.
		switch rc := d.Receipt; {
		case relaymsg.VerifyReceipt(rc) != nil:
			r.rejected = append(r.rejected, fmt.Sprintf("done: receipt: %v", relaymsg.VerifyReceipt(rc)))
		case rc.Worker != base58.Encode(r.key.Public().(ed25519.PublicKey)):
			r.rejected = append(r.rejected, "done: receipt signed by "+rc.Worker+", not the connect's key")
		case rc.Job != d.Job:
			r.rejected = append(r.rejected, "done: receipt of job "+rc.Job)
		case rc.RequestSHA256 != r.requests[d.Job]:
			r.rejected = append(r.rejected, "done: receipt's request hash is not the job's request's")
		}
	}
	var h relaymsg.Header
	_ = json.Unmarshal([]byte(req.Body), &h)
	r.events = append(r.events, event{conn: id, kind: h.Type, msg: m, size: len(req.Body), at: time.Now()})
	if _, isReg := m.(*relaymsg.Register); isReg && r.registerError != "" {
		b, _ := relaymsg.Encode(&relaymsg.Error{Code: r.registerError, Message: "this network serves: c0mpute-pro, code"})
		return events.APIGatewayProxyResponse{StatusCode: http.StatusOK, Body: string(b)}, nil
	}
	if reg, isReg := m.(*relaymsg.Register); isReg {
		if r.onRegister != nil {
			r.onRegister(id)
		}
		ack := &relaymsg.Registered{Conn: id, Models: reg.Models, BatchMillis: r.batchMillis}
		if reg.Ring {
			ack.Ring = r.ringOffers
		}
		b, err := relaymsg.Encode(ack)
		if err != nil {
			return events.APIGatewayProxyResponse{}, err
		}
		return events.APIGatewayProxyResponse{StatusCode: http.StatusOK, Body: string(b)}, nil
	}
	return ok, nil
}

// testTicket is the ticket of every job the test relay hands out; the
// agent must copy it into each message of the job.
var testTicket = strings.Repeat("k", relaymsg.TicketLen)

func ticketOf(m any) string {
	switch m := m.(type) {
	case *relaymsg.Chunk:
		return m.Ticket
	case *relaymsg.Done:
		return m.Ticket
	case *relaymsg.Fail:
		return m.Ticket
	}
	return ""
}

// setRefuse answers each $connect with status and body (0: accept).
func (r *testRelay) setRefuse(status int, body string) {
	r.mu.Lock()
	r.refuse, r.refusal = status, body
	r.mu.Unlock()
}

func (r *testRelay) dialCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.dials)
}

func (r *testRelay) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

func describe(evs []event) string {
	var b strings.Builder
	for i, e := range evs {
		fmt.Fprintf(&b, "  %3d %s\n", i, e)
	}
	return b.String()
}

// waitFor polls the relay's record until cond holds.
func (r *testRelay) waitFor(what string, cond func([]event) bool) []event {
	r.t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		evs := r.snapshot()
		if cond(evs) {
			return evs
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out after %s waiting for %s", waitLimit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// registered waits for the n-th (1-based) Register and returns it.
func (r *testRelay) registered(n int) event {
	r.t.Helper()
	evs := r.waitFor(fmt.Sprintf("registration #%d", n), func(evs []event) bool { return len(ofKind(evs, relaymsg.TypeRegister)) >= n })
	return ofKind(evs, relaymsg.TypeRegister)[n-1]
}

func (r *testRelay) post(conn string, m any) {
	r.t.Helper()
	b, err := relaymsg.Encode(m)
	if err != nil {
		r.t.Fatal(err)
	}
	if j, ok := m.(*relaymsg.Job); ok {
		h, err := relaymsg.RequestHash(&j.Request)
		if err != nil {
			r.t.Fatal(err)
		}
		r.mu.Lock()
		r.requests[j.Job] = h
		r.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := r.mgmt.Post(ctx, conn, b); err != nil {
		r.t.Fatalf("post %T to %s: %v", m, conn, err)
	}
}

// sendJob posts a job whose single user message is prompt; scripts key on
// the prompt.
func (r *testRelay) sendJob(conn, job, model, prompt string) {
	r.t.Helper()
	var req oaiwire.ChatRequest
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"stream":true}`, model, prompt)
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		r.t.Fatal(err)
	}
	r.post(conn, &relaymsg.Job{Job: job, ReplyTo: listener, Model: model, Request: req, Deadline: time.Now().Add(time.Minute),
		BudgetMillis: 60_000, Ticket: testTicket})
}

// waitEnd waits for a job's done or fail.
func (r *testRelay) waitEnd(job string) []event {
	r.t.Helper()
	return r.waitFor("the end of job "+job, func(evs []event) bool { return endOf(evs, job) >= 0 })
}

func ofKind(evs []event, kind string) []event {
	var out []event
	for _, e := range evs {
		if e.kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// index is the position of the first event matching pred, or -1.
func index(evs []event, pred func(event) bool) int {
	for i, e := range evs {
		if pred(e) {
			return i
		}
	}
	return -1
}

func jobOf(e event) string {
	switch m := e.msg.(type) {
	case *relaymsg.Chunk:
		return m.Job
	case *relaymsg.Done:
		return m.Job
	case *relaymsg.Fail:
		return m.Job
	}
	return ""
}

// endOf is the index of a job's done or fail, or -1.
func endOf(evs []event, job string) int {
	return index(evs, func(e event) bool {
		return (e.kind == relaymsg.TypeDone || e.kind == relaymsg.TypeFail) && jobOf(e) == job
	})
}

// replyOf is every chunk, done and fail of a job, in arrival order.
func replyOf(evs []event, job string) []event {
	var out []event
	for _, e := range evs {
		if jobOf(e) == job {
			out = append(out, e)
		}
	}
	return out
}

// checkReply checks a finished reply's shape: chunks numbered 0..n-1,
// then exactly one done or fail numbered n, all addressed to the
// listener; it returns the chunks and the final message.
func checkReply(t *testing.T, evs []event, job string) ([]*relaymsg.Chunk, event) {
	t.Helper()
	var chunks []*relaymsg.Chunk
	var end event
	ends := 0
	for _, e := range replyOf(evs, job) {
		switch m := e.msg.(type) {
		case *relaymsg.Chunk:
			if ends > 0 {
				t.Errorf("job %s: chunk seq %d after the end", job, m.Seq)
			}
			if m.Seq != int64(len(chunks)) {
				t.Errorf("job %s: chunk seq %d, want %d", job, m.Seq, len(chunks))
			}
			if m.To != listener {
				t.Errorf("job %s: chunk to %q, want %q", job, m.To, listener)
			}
			chunks = append(chunks, m)
		case *relaymsg.Done:
			ends++
			end = e
			if m.Seq != int64(len(chunks)) || m.To != listener {
				t.Errorf("job %s: done seq %d to %q, want seq %d to %q", job, m.Seq, m.To, len(chunks), listener)
			}
		case *relaymsg.Fail:
			ends++
			end = e
			if m.Seq != int64(len(chunks)) || m.To != listener {
				t.Errorf("job %s: fail seq %d to %q, want seq %d to %q", job, m.Seq, m.To, len(chunks), listener)
			}
		}
	}
	if ends != 1 {
		t.Fatalf("job %s: %d done/fail messages, want 1", job, ends)
	}
	if done, ok := end.msg.(*relaymsg.Done); ok {
		checkReceipt(t, chunks, done)
	}
	return chunks, end
}

// checkReceipt checks a done's receipt against the reply: it verifies, and
// its output hash and delta count are those of the chunks the relay
// received (the relay handler checked its key and request hash).
func checkReceipt(t *testing.T, chunks []*relaymsg.Chunk, done *relaymsg.Done) {
	t.Helper()
	r := done.Receipt
	if err := relaymsg.VerifyReceipt(r); err != nil {
		t.Fatalf("job %s: receipt: %v", done.Job, err)
	}
	var out relaymsg.OutputHasher
	for _, c := range chunks {
		for _, d := range c.Deltas {
			out.Add(d)
		}
	}
	if r.Job != done.Job || r.OutputSHA256 != out.Sum() || r.Deltas != out.Deltas() {
		t.Errorf("job %s: receipt of %s with output %s over %d deltas; the chunks hash to %s over %d",
			done.Job, r.Job, r.OutputSHA256, r.Deltas, out.Sum(), out.Deltas())
	}
	if r.PromptTokens != max(done.Usage.PromptTokens, 0) || r.CompletionTokens != max(done.Usage.CompletionTokens, 0) {
		t.Errorf("job %s: receipt claims %d+%d tokens, the done %+v", done.Job, r.PromptTokens, r.CompletionTokens, done.Usage)
	}
	if r.TotalMillis < r.FirstTokenMillis {
		t.Errorf("job %s: receipt timings: first token %d ms, total %d ms", done.Job, r.FirstTokenMillis, r.TotalMillis)
	}
}

func content(chunks []*relaymsg.Chunk) string {
	var b strings.Builder
	for _, c := range chunks {
		for _, d := range c.Deltas {
			b.WriteString(d.Content)
		}
	}
	return b.String()
}

// chatCall is one Chat call on the scripted backend.
type chatCall struct {
	Model  string
	Prompt string
	ctx    context.Context
	// returned is closed when Chat returns.
	returned chan struct{}
}

// script plays one Chat call.
type script func(ctx context.Context, c *chatCall, emit func(oaiwire.Delta) error) (backend.Result, error)

// scriptedBackend is a fake backend.Backend: its model list is set by the
// test, and each Chat call plays the test's script. Scripts that block
// also end when the test ends (quit), so no goroutine outlives it.
type scriptedBackend struct {
	script script
	calls  chan *chatCall
	quit   chan struct{}

	mu     sync.Mutex
	models []string
}

func newScriptedBackend(models []string, s script) *scriptedBackend {
	return &scriptedBackend{script: s, models: models, calls: make(chan *chatCall, 100), quit: make(chan struct{})}
}

func (b *scriptedBackend) Name() string { return "scripted" }

func (b *scriptedBackend) Models(context.Context) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.models...), nil
}

func (b *scriptedBackend) setModels(m []string) {
	b.mu.Lock()
	b.models = m
	b.mu.Unlock()
}

func (b *scriptedBackend) Chat(ctx context.Context, model string, req *oaiwire.ChatRequest, emit func(oaiwire.Delta) error) (backend.Result, error) {
	c := &chatCall{Model: model, Prompt: req.Messages[0].Content.Text, ctx: ctx, returned: make(chan struct{})}
	defer close(c.returned)
	b.calls <- c
	return b.script(ctx, c, emit)
}

// nextCall waits for the backend's next Chat call.
func (b *scriptedBackend) nextCall(t *testing.T) *chatCall {
	t.Helper()
	select {
	case c := <-b.calls:
		return c
	case <-time.After(waitLimit):
		t.Fatal("timed out waiting for a Chat call")
		return nil
	}
}

// block waits for ch, the call's cancellation or the end of the test.
func (b *scriptedBackend) block(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-b.quit:
		return fmt.Errorf("test over")
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
	}
}

var stopUsage = oaiwire.Usage{PromptTokens: 7, CompletionTokens: 11, TotalTokens: 18}

// texts plays its deltas at once and stops.
func texts(ds ...string) script {
	return func(ctx context.Context, c *chatCall, emit func(oaiwire.Delta) error) (backend.Result, error) {
		for _, d := range ds {
			if err := emit(oaiwire.Delta{Content: d}); err != nil {
				return backend.Result{}, err
			}
		}
		return backend.Result{FinishReason: "stop", Usage: stopUsage}, nil
	}
}

// logBuf collects the agent's log; it is printed only when a test fails,
// and stays safe to write after the test ends.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type runningAgent struct {
	cancel context.CancelFunc
	done   chan error
}

// stop cancels Run's context (SIGTERM) and waits for Run to return.
func (a *runningAgent) stop(t *testing.T) {
	t.Helper()
	a.cancel()
	select {
	case err := <-a.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		a.done <- nil // for the cleanup
	case <-time.After(waitLimit):
		t.Fatal("Run did not return")
	}
}

func (a *runningAgent) returned() bool {
	select {
	case err := <-a.done:
		a.done <- err
		return true
	default:
		return false
	}
}

// startAgent runs an agent against r until the test ends.
func startAgent(t *testing.T, r *testRelay, be *scriptedBackend, edit func(*agent.Config)) *runningAgent {
	t.Helper()
	logs := &logBuf{}
	cfg := agent.Config{
		RelayURL:     r.wsURL,
		Token:        testToken,
		Key:          r.key,
		Backend:      be,
		Log:          slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Version:      "test",
		DrainTimeout: waitLimit / 2,
	}
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{cancel: cancel, done: make(chan error, 1)}
	go func() { ra.done <- agent.New(cfg).Run(ctx) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", logs)
		}
	})
	t.Cleanup(func() {
		close(be.quit)
		cancel()
		select {
		case <-ra.done:
		case <-time.After(waitLimit):
			t.Error("Run did not return after the test")
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.rejected) > 0 {
			t.Errorf("the relay refused the agent's connects or messages: %q", r.rejected)
		}
	})
	return ra
}
