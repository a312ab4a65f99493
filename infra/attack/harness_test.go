package attack_test

// The harness: a gateway stack (devnet.Start) on the embedded store, or on
// DynamoDB Local with C0MPUTE_STORE=dynamodb; accounts with credits, API
// keys and worker tokens; honest workers (the real workerd agent, in
// process, in front of a scripted backend); a hostile worker that speaks
// the relay protocol by hand; and a client that reads the API's replies
// byte for byte. Every wait is on a condition with a deadline; nothing
// asserts a duration.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/devnet"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
	"github.com/c0mpute/c0mpute/workerd/agent"
	"github.com/c0mpute/c0mpute/workerd/backend"
)

const (
	// model is the one model of the test catalogue, price its flat price.
	model = "tiny"
	price = 10
	// workerShare is the worker's share of a price, in percent.
	workerShare = 70
	// earning is what a worker's account earns for one charged job.
	earning = price * workerShare / 100
	// waitLimit bounds every wait on a condition: a liveness bound only.
	waitLimit = 20 * time.Second
)

// testLimits are short deadlines, so a suite of attacks runs in a couple of
// minutes: the attacks are about what happens at a deadline, not how long
// it is.
func testLimits() api.Limits {
	l := api.DefaultLimits()
	l.MaxTokPerSec = 0 // scripted backends answer at memory speed
	l.RatePerMinute = 100_000
	l.QueueWait = 3 * time.Second
	l.FirstToken = 5 * time.Second
	l.Job = 30 * time.Second
	l.KeepAliveAfter = 500 * time.Millisecond
	l.KeepAliveEvery = time.Second
	l.WorkerSharePercent = workerShare
	l.MaxAttempts = 3
	return l
}

func testLog(t testing.TB) *slog.Logger {
	if os.Getenv("C0MPUTE_ATTACK_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

// openStore opens the store the suite runs on: the embedded store, or with
// C0MPUTE_STORE=dynamodb a fresh table on DynamoDB Local.
func openStore(t testing.TB) store.Store { return dynamotest.SuiteStore(t) }

// options change a stack from the defaults.
type options struct {
	limits func(*api.Limits)
	// wrap wraps the store the gateway runs on (the test keeps the bare
	// one in env.store).
	wrap func(store.Store) store.Store
	// config edits the stack's configuration last.
	config func(*devnet.Config)
}

// env is a running gateway and what the test made on it.
type env struct {
	t      *testing.T
	stack  *devnet.Stack
	store  store.Store
	limits api.Limits
	http   *http.Client
	// accounts counts the accounts made, for unique ids.
	accounts atomic.Int64
}

func newEnv(t *testing.T, o options) *env {
	t.Helper()
	st := openStore(t)
	limits := testLimits()
	if o.limits != nil {
		o.limits(&limits)
	}
	var gw store.Store = st
	if o.wrap != nil {
		gw = o.wrap(st)
	}
	cfg := devnet.Config{Store: gw, APIAddr: "127.0.0.1:0", RelayAddr: "127.0.0.1:0",
		Models: []catalog.Model{{ID: model, Price: price}}, Limits: limits, Log: testLog(t)}
	if o.config != nil {
		o.config(&cfg)
	}
	stack, err := devnet.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	e := &env{t: t, stack: stack, store: st, limits: limits, http: &http.Client{Transport: tr}}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		stack.Close()
	})
	return e
}

// account is a user or contributor account with one API key and one
// worker token.
type account struct {
	id     string
	apiKey string
	token  string
}

// newAccount makes an account with credits, an API key and a worker token.
func (e *env) newAccount(name string, credits int64) *account {
	e.t.Helper()
	ctx := context.Background()
	a := &account{id: fmt.Sprintf("%s-%d-%s", name, e.accounts.Add(1), randomText(4))}
	var err error
	if a.apiKey, err = e.stack.CreateAccount(ctx, a.id, credits, "grant-"+a.id); err != nil {
		e.t.Fatal(err)
	}
	if a.token, err = e.stack.IssueWorkerToken(ctx, a.id); err != nil {
		e.t.Fatal(err)
	}
	return a
}

func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// account reads an account from the store.
func (e *env) account(id string) store.Account {
	e.t.Helper()
	a, err := e.store.GetAccount(context.Background(), id)
	if err != nil {
		e.t.Fatalf("account %s: %v", id, err)
	}
	return a
}

// job reads a job from the store.
func (e *env) job(id string) store.Job {
	e.t.Helper()
	j, err := e.store.GetJob(context.Background(), id)
	if err != nil {
		e.t.Fatalf("job %s: %v", id, err)
	}
	return j
}

// settled waits until a job is done or failed and returns it.
func (e *env) settled(id string) store.Job {
	e.t.Helper()
	var j store.Job
	e.waitFor("job "+id+" to settle", func() bool {
		var err error
		j, err = e.store.GetJob(context.Background(), id)
		return err == nil && (j.State == store.JobDone || j.State == store.JobFailed)
	})
	return j
}

// reputationOf waits for the reputation of an account's one worker
// identity (a verdict is recorded before the job's answer goes out, but a
// connect's record may still be on its way) and returns it.
func (e *env) reputationOf(acct *account) store.Reputation {
	e.t.Helper()
	var rep store.Reputation
	e.waitFor("the reputation of "+acct.id, func() bool {
		reps, err := e.store.Reputations(context.Background(), acct.id)
		if err != nil || len(reps) != 1 {
			return false
		}
		rep = reps[0]
		return true
	})
	return rep
}

// waitFor polls cond until it holds, failing the test after waitLimit.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	if !poll(waitLimit, cond) {
		e.t.Fatalf("timed out after %s waiting for %s", waitLimit, what)
	}
}

// poll reports whether cond held within d.
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// workersOf lists the live worker records of an account.
func (e *env) workersOf(acct *account) []store.Worker {
	e.t.Helper()
	ws, err := e.store.Workers(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	var out []store.Worker
	for _, w := range ws {
		if w.AccountID == acct.id {
			out = append(out, w)
		}
	}
	return out
}

// waitRegistered waits until n workers of the account are registered and
// idle.
func (e *env) waitRegistered(acct *account, n int) {
	e.t.Helper()
	e.waitFor(fmt.Sprintf("%d registered workers of %s", n, acct.id), func() bool {
		got := 0
		for _, w := range e.workersOf(acct) {
			if w.Registered && !w.Draining {
				got++
			}
		}
		return got >= n
	})
}

// expectCharged checks a job was completed and kept its price.
func (e *env) expectCharged(id string) store.Job {
	e.t.Helper()
	j := e.settled(id)
	if j.State != store.JobDone || j.Refunded {
		e.t.Errorf("job %s: state %s, refunded %v (reason %q); want done and charged", id, j.State, j.Refunded, j.FailReason)
	}
	return j
}

// expectRefunded checks a job failed and its price went back.
func (e *env) expectRefunded(id string) store.Job {
	e.t.Helper()
	j := e.settled(id)
	if j.State != store.JobFailed || !j.Refunded {
		e.t.Errorf("job %s: state %s, refunded %v; want failed and refunded", id, j.State, j.Refunded)
	}
	return j
}

// expectCredits waits for an account's balance to be want (settlement runs
// after the reply) and fails if it is not.
func (e *env) expectCredits(acct *account, want int64) {
	e.t.Helper()
	var got int64
	if !poll(5*time.Second, func() bool { got = e.account(acct.id).Credits; return got == want }) {
		e.t.Errorf("account %s: credits %d, want %d", acct.id, got, want)
	}
}

// expectEarned waits for an account's earnings to be want.
func (e *env) expectEarned(acct *account, want int64) {
	e.t.Helper()
	var got int64
	if !poll(5*time.Second, func() bool { got = e.account(acct.id).Earned; return got == want }) {
		e.t.Errorf("account %s: earned %d, want %d", acct.id, got, want)
	}
}

// relayHTTP is the relay's worker-facing address as an http:// URL.
func (e *env) relayHTTP() string {
	return "http://" + strings.TrimPrefix(e.stack.RelayURL, "ws://")
}

// ---------------------------------------------------------------------
// Honest workers: the real agent in front of a scripted backend.

// script plays one Chat call of a scripted backend.
type script func(ctx context.Context, req *oaiwire.ChatRequest, emit func(oaiwire.Delta) error) (backend.Result, error)

// scripted is a backend.Backend whose replies a test scripts.
type scripted struct {
	script script
	calls  atomic.Int64
	// started receives each call's request as it begins.
	started chan *oaiwire.ChatRequest
}

func (b *scripted) Name() string                             { return "scripted" }
func (b *scripted) Models(context.Context) ([]string, error) { return []string{model}, nil }

func (b *scripted) Chat(ctx context.Context, _ string, req *oaiwire.ChatRequest, emit func(oaiwire.Delta) error) (backend.Result, error) {
	b.calls.Add(1)
	select {
	case b.started <- req:
	default:
	}
	return b.script(ctx, req, emit)
}

// words replies with the words as deltas, one each, and stops.
func words(ws ...string) script {
	return func(ctx context.Context, _ *oaiwire.ChatRequest, emit func(oaiwire.Delta) error) (backend.Result, error) {
		for _, w := range ws {
			if err := emit(oaiwire.Delta{Content: w}); err != nil {
				return backend.Result{}, err
			}
		}
		n := int64(len(ws))
		return backend.Result{FinishReason: oaiwire.FinishStop,
			Usage: oaiwire.Usage{PromptTokens: 3, CompletionTokens: n, TotalTokens: 3 + n}}, nil
	}
}

// gated replies with first, waits until gate closes (or the job ends),
// then replies with rest and stops.
func gated(gate <-chan struct{}, first string, rest ...string) script {
	return func(ctx context.Context, _ *oaiwire.ChatRequest, emit func(oaiwire.Delta) error) (backend.Result, error) {
		if err := emit(oaiwire.Delta{Content: first}); err != nil {
			return backend.Result{}, err
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return backend.Result{}, ctx.Err()
		}
		for _, w := range rest {
			if err := emit(oaiwire.Delta{Content: w}); err != nil {
				return backend.Result{}, err
			}
		}
		n := int64(1 + len(rest))
		return backend.Result{FinishReason: oaiwire.FinishStop,
			Usage: oaiwire.Usage{PromptTokens: 3, CompletionTokens: n, TotalTokens: 3 + n}}, nil
	}
}

// honest is an in-process workerd.
type honest struct {
	backend *scripted
	cancel  context.CancelFunc
	done    chan struct{}
}

// honestWorker runs the real workerd agent with a scripted backend on the
// account's worker token until the test ends, and waits until it is
// registered.
func (e *env) honestWorker(acct *account, s script) *honest {
	e.t.Helper()
	before := 0
	for _, w := range e.workersOf(acct) {
		if w.Registered {
			before++
		}
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		e.t.Fatal(err)
	}
	be := &scripted{script: s, started: make(chan *oaiwire.ChatRequest, 64)}
	ctx, cancel := context.WithCancel(context.Background())
	h := &honest{backend: be, cancel: cancel, done: make(chan struct{})}
	a := agent.New(agent.Config{RelayURL: e.stack.RelayURL, Token: acct.token, Key: key, Backend: be,
		Models: map[string]string{model: model}, Log: testLog(e.t).With("worker", "honest"),
		Version: "attack-test", DrainTimeout: 2 * time.Second})
	go func() { defer close(h.done); _ = a.Run(ctx) }()
	e.t.Cleanup(h.stop)
	e.waitRegistered(acct, before+1)
	return h
}

func (h *honest) stop() {
	h.cancel()
	<-h.done
}

// started waits for the backend to begin a call.
func (h *honest) waitStarted(t *testing.T) *oaiwire.ChatRequest {
	t.Helper()
	select {
	case r := <-h.backend.started:
		return r
	case <-time.After(waitLimit):
		t.Fatalf("the honest worker's backend got no job within %s", waitLimit)
		return nil
	}
}

// ---------------------------------------------------------------------
// Hostile workers: the relay protocol by hand.

// hostile is a worker connection under the test's full control.
type hostile struct {
	t    *testing.T
	ws   *websocket.Conn
	conn string // from Registered
	// key is the identity key its connect was signed with: the key its
	// receipts must be signed with.
	key ed25519.PrivateKey

	writeMu sync.Mutex

	jobs       chan *relaymsg.Job
	errs       chan *relaymsg.Error
	cancels    chan *relaymsg.Cancel
	registered chan *relaymsg.Registered
	// other gets every message that is none of the above (raw).
	other chan []byte

	mu      sync.Mutex
	rawJobs map[string][]byte // job id → the Job message as received
	// sent is what chunk sent of each job, by seq (the first of a seq
	// only: the gateway ignores duplicates), for the job's receipt.
	sent    map[string]map[int64][]oaiwire.Delta
	closed  chan struct{}
	readErr error
}

// signedHeader is a worker's connect headers for token, signed with a
// fresh key now.
func signedHeader(token string) http.Header {
	h, _ := signedHeaderKey(token)
	return h
}

// signedHeaderKey is signedHeader and the fresh key it was signed with.
func signedHeaderKey(token string) (http.Header, ed25519.PrivateKey) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	h := http.Header{}
	relaymsg.SignConnect(h, token, key, time.Now())
	return h, key
}

// dialRelay opens a WebSocket to the relay with the headers.
func (e *env) dialRelay(h http.Header) (*websocket.Conn, *http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return websocket.Dial(ctx, e.stack.RelayURL, &websocket.DialOptions{HTTPHeader: h})
}

// connectHostile opens an authenticated worker connection on the
// account's token, not yet registered.
func (e *env) connectHostile(acct *account) *hostile {
	e.t.Helper()
	header, key := signedHeaderKey(acct.token)
	ws, resp, err := e.dialRelay(header)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		e.t.Fatalf("hostile connect (HTTP %d): %v", status, err)
	}
	ws.SetReadLimit(1 << 20)
	h := &hostile{t: e.t, ws: ws, key: key, sent: map[string]map[int64][]oaiwire.Delta{},
		jobs: make(chan *relaymsg.Job, 1024), errs: make(chan *relaymsg.Error, 8192),
		cancels: make(chan *relaymsg.Cancel, 1024), registered: make(chan *relaymsg.Registered, 16),
		other: make(chan []byte, 1024), rawJobs: map[string][]byte{}, closed: make(chan struct{})}
	go h.read()
	e.t.Cleanup(func() { h.ws.CloseNow() })
	return h
}

// hostileWorker connects and registers a hostile worker for the model.
func (e *env) hostileWorker(acct *account) *hostile {
	e.t.Helper()
	h := e.connectHostile(acct)
	h.register(model)
	return h
}

func (h *hostile) read() {
	defer close(h.closed)
	for {
		_, b, err := h.ws.Read(context.Background())
		if err != nil {
			h.mu.Lock()
			h.readErr = err
			h.mu.Unlock()
			return
		}
		m, err := relaymsg.Decode(b)
		if err != nil {
			offer(h.other, b)
			continue
		}
		switch m := m.(type) {
		case *relaymsg.Job:
			h.mu.Lock()
			h.rawJobs[m.Job] = b
			h.mu.Unlock()
			offer(h.jobs, m)
		case *relaymsg.Error:
			offer(h.errs, m)
		case *relaymsg.Cancel:
			offer(h.cancels, m)
		case *relaymsg.Registered:
			offer(h.registered, m)
		default:
			offer(h.other, b)
		}
	}
}

// offer sends without blocking the reader; the buffers are far larger than
// any test needs.
func offer[T any](c chan T, v T) {
	select {
	case c <- v:
	default:
	}
}

// register sends Register and waits for Registered.
func (h *hostile) register(models ...string) {
	h.t.Helper()
	if err := h.send(&relaymsg.Register{Models: models, Agent: "hostile"}); err != nil {
		h.t.Fatalf("register: %v", err)
	}
	select {
	case r := <-h.registered:
		h.conn = r.Conn
	case e := <-h.errs:
		h.t.Fatalf("register refused: %s: %s", e.Code, e.Message)
	case <-h.closed:
		h.t.Fatalf("connection closed while registering: %v", h.err())
	case <-time.After(waitLimit):
		h.t.Fatal("no registered reply")
	}
}

func (h *hostile) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.readErr
}

// send encodes and sends a message (relaymsg.Encode does not validate: a
// hostile worker may send anything that encodes).
func (h *hostile) send(m any) error {
	b, err := relaymsg.Encode(m)
	if err != nil {
		return err
	}
	return h.sendRaw(b)
}

// sendRaw sends bytes as one text message.
func (h *hostile) sendRaw(b []byte) error { return h.sendFrame(websocket.MessageText, b) }

func (h *hostile) sendFrame(typ websocket.MessageType, b []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.writeMu.Lock()
	defer h.writeMu.Unlock()
	return h.ws.Write(ctx, typ, b)
}

// chunk sends one chunk of the job, with the job's ticket.
func (h *hostile) chunk(j *relaymsg.Job, seq int64, texts ...string) error {
	ds := deltas(texts...)
	h.mu.Lock()
	if h.sent[j.Job] == nil {
		h.sent[j.Job] = map[int64][]oaiwire.Delta{}
	}
	if _, dup := h.sent[j.Job][seq]; !dup && seq >= 0 {
		h.sent[j.Job][seq] = ds
	}
	h.mu.Unlock()
	return h.send(&relaymsg.Chunk{Job: j.Job, To: j.ReplyTo, Seq: seq, Deltas: ds, Ticket: j.Ticket})
}

// done ends the job with the usage claim and a valid receipt of what it
// streamed.
func (h *hostile) done(j *relaymsg.Job, seq, completionTokens int64) error {
	return h.doneWith(j, seq, completionTokens, h.receipt(j, seq, completionTokens))
}

// doneWith ends the job with the usage claim and the receipt given.
func (h *hostile) doneWith(j *relaymsg.Job, seq, completionTokens int64, r *relaymsg.Receipt) error {
	return h.send(&relaymsg.Done{Job: j.Job, To: j.ReplyTo, Seq: seq, FinishReason: oaiwire.FinishStop,
		Usage:  oaiwire.Usage{PromptTokens: 1, CompletionTokens: completionTokens, TotalTokens: 1 + completionTokens},
		Ticket: j.Ticket, Receipt: r})
}

// receipt is the valid receipt of the job ended at seq, as an honest
// worker signs it: over the chunks sent with seq 0 to seq-1 (what the
// gateway relays), the job's request, with the hostile's own key. The
// usage claim is clamped into the receipt's bounds, as workerd does.
func (h *hostile) receipt(j *relaymsg.Job, seq, completionTokens int64) *relaymsg.Receipt {
	h.t.Helper()
	var out relaymsg.OutputHasher
	h.mu.Lock()
	for i := int64(0); i < seq; i++ {
		for _, d := range h.sent[j.Job][i] {
			out.Add(d)
		}
	}
	h.mu.Unlock()
	reqHash, err := relaymsg.RequestHash(&j.Request)
	if err != nil {
		h.t.Fatalf("request hash: %v", err)
	}
	r := &relaymsg.Receipt{Job: j.Job, Model: j.Model, RequestSHA256: reqHash, OutputSHA256: out.Sum(),
		Deltas: out.Deltas(), PromptTokens: 1, CompletionTokens: min(max(completionTokens, 0), relaymsg.MaxReceiptCount),
		FirstTokenMillis: 1, TotalMillis: 2}
	return h.sign(r, h.key)
}

// sign signs a receipt with key.
func (h *hostile) sign(r *relaymsg.Receipt, key ed25519.PrivateKey) *relaymsg.Receipt {
	h.t.Helper()
	if err := relaymsg.SignReceipt(key, r); err != nil {
		h.t.Fatalf("sign receipt: %v", err)
	}
	return r
}

// serve answers a job with one chunk per text and a done claiming
// completionTokens.
func (h *hostile) serve(j *relaymsg.Job, completionTokens int64, texts ...string) {
	h.t.Helper()
	for i, s := range texts {
		if err := h.chunk(j, int64(i), s); err != nil {
			h.t.Fatalf("chunk: %v", err)
		}
	}
	if err := h.done(j, int64(len(texts)), completionTokens); err != nil {
		h.t.Fatalf("done: %v", err)
	}
}

func deltas(texts ...string) []oaiwire.Delta {
	out := make([]oaiwire.Delta, len(texts))
	for i, s := range texts {
		out[i] = oaiwire.Delta{Content: s}
	}
	return out
}

// nextJob waits for a job.
func (h *hostile) nextJob() *relaymsg.Job {
	h.t.Helper()
	select {
	case j := <-h.jobs:
		return j
	case <-h.closed:
		h.t.Fatalf("hostile connection closed while waiting for a job: %v", h.err())
	case <-time.After(waitLimit):
		h.t.Fatalf("hostile worker got no job within %s", waitLimit)
	}
	return nil
}

// rawJob is the Job message as it arrived.
func (h *hostile) rawJob(id string) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rawJobs[id]
}

// waitError waits for an error reply; ok is false if none came within d
// (or the connection closed first: closed says so).
func (h *hostile) waitError(d time.Duration) (e *relaymsg.Error, closed bool) {
	select {
	case e := <-h.errs:
		return e, false
	case <-h.closed:
		// An error sent just before the close still counts.
		select {
		case e := <-h.errs:
			return e, true
		default:
			return nil, true
		}
	case <-time.After(d):
		return nil, false
	}
}

// drainErrors empties the error replies received so far.
func (h *hostile) drainErrors() []*relaymsg.Error {
	var out []*relaymsg.Error
	for {
		select {
		case e := <-h.errs:
			out = append(out, e)
		default:
			return out
		}
	}
}

// waitClosed reports whether the relay closed the connection within d.
func (h *hostile) waitClosed(d time.Duration) bool {
	select {
	case <-h.closed:
		return true
	case <-time.After(d):
		return false
	}
}

// isClosed reports whether the connection is closed now.
func (h *hostile) isClosed() bool {
	select {
	case <-h.closed:
		return true
	default:
		return false
	}
}

// closeStatus is the close code the relay sent, or -1.
func (h *hostile) closeStatus() websocket.StatusCode { return websocket.CloseStatus(h.err()) }

// ---------------------------------------------------------------------
// Clients: the API read byte for byte.

// chatBody is a chat request for the test model.
func chatBody(prompt string, stream bool, extra ...any) []byte {
	m := map[string]any{"model": model, "stream": stream,
		"messages": []map[string]string{{"role": "user", "content": prompt}}}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	b, _ := json.Marshal(m)
	return b
}

// reply is what a chat request got back.
type reply struct {
	Status int
	Header http.Header
	ID     string
	// Content is the assistant text; Finish the finish reason.
	Content string
	Finish  string
	Usage   *oaiwire.Usage
	// Errors are the error documents: the body of a non-2xx answer, or
	// each error event of a stream.
	Errors []string
	// Done: the stream ended with [DONE].
	Done bool
	// Err is a transport error (the connection broke).
	Err error
}

func (r reply) ok() bool {
	return r.Err == nil && r.Status == http.StatusOK && len(r.Errors) == 0 && r.Finish != ""
}

func (r reply) String() string {
	return fmt.Sprintf("status %d id %q finish %q content %.80q errors %q done %v err %v",
		r.Status, r.ID, r.Finish, r.Content, r.Errors, r.Done, r.Err)
}

// call is a chat request in flight.
type call struct {
	id     chan string // the completion id, as soon as the stream shows it
	result chan reply
}

// chat sends a request and waits for the whole reply.
func (e *env) chat(key string, body []byte) reply {
	e.t.Helper()
	return e.start(key, body).wait(e.t)
}

// start sends a request; the reply is read in the background.
func (e *env) start(key string, body []byte) *call {
	c := &call{id: make(chan string, 1), result: make(chan reply, 1)}
	go func() { c.result <- e.do(key, body, c.id) }()
	return c
}

func (c *call) wait(t *testing.T) reply {
	t.Helper()
	select {
	case r := <-c.result:
		return r
	case <-time.After(2 * waitLimit):
		t.Fatalf("no reply within %s", 2*waitLimit)
		return reply{}
	}
}

// waitID waits for the first event of a stream and returns its id.
func (c *call) waitID(t *testing.T) string {
	t.Helper()
	select {
	case id := <-c.id:
		return id
	case r := <-c.result:
		c.result <- r
		t.Fatalf("the request ended before its stream showed an id: %s", r)
	case <-time.After(waitLimit):
		t.Fatalf("no stream event within %s", waitLimit)
	}
	return ""
}

func (e *env) do(key string, body []byte, idc chan<- string) reply {
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLimit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.stack.APIURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return reply{Err: err}
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.http.Do(req)
	if err != nil {
		return reply{Err: err}
	}
	defer resp.Body.Close()
	r := reply{Status: resp.StatusCode, Header: resp.Header}
	if resp.StatusCode != http.StatusOK {
		b, err := io.ReadAll(resp.Body)
		r.Errors, r.Err = []string{string(b)}, err
		return r
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var doc struct {
			ID      string `json:"id"`
			Choices []struct {
				Message      struct{ Content string } `json:"message"`
				FinishReason string                   `json:"finish_reason"`
			} `json:"choices"`
			Usage *oaiwire.Usage `json:"usage"`
		}
		b, err := io.ReadAll(resp.Body)
		if err == nil {
			err = json.Unmarshal(b, &doc)
		}
		if err != nil {
			r.Err = fmt.Errorf("read completion: %w (%.200s)", err, b)
			return r
		}
		r.ID, r.Usage = doc.ID, doc.Usage
		if len(doc.Choices) > 0 {
			r.Content, r.Finish = doc.Choices[0].Message.Content, doc.Choices[0].FinishReason
		}
		return r
	}
	var content strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			r.Done = true
			continue
		}
		var ev struct {
			ID      string          `json:"id"`
			Error   json.RawMessage `json:"error"`
			Choices []struct {
				Delta        struct{ Content string } `json:"delta"`
				FinishReason *string                  `json:"finish_reason"`
			} `json:"choices"`
			Usage *oaiwire.Usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			r.Err = fmt.Errorf("bad event %.200q: %w", data, err)
			continue
		}
		if len(ev.Error) > 0 {
			r.Errors = append(r.Errors, string(ev.Error))
			continue
		}
		if ev.ID != "" && r.ID == "" {
			r.ID = ev.ID
			if idc != nil {
				idc <- ev.ID
			}
		}
		if ev.Usage != nil {
			r.Usage = ev.Usage
		}
		for _, c := range ev.Choices {
			content.WriteString(c.Delta.Content)
			if c.FinishReason != nil {
				r.Finish = *c.FinishReason
			}
		}
	}
	if err := sc.Err(); err != nil && r.Err == nil {
		r.Err = err
	}
	r.Content = content.String()
	return r
}

// ---------------------------------------------------------------------
// Processes.

// childEnv names the test an isolated child process runs.
const childEnv = "C0MPUTE_ATTACK_CHILD"

// isolated runs the test in a child process of the test binary, so that a
// crash of the gateway (a panic on a goroutine of its own ends the whole
// process) fails this test alone, with the panic in its log. It returns
// true in the child, where the test body runs; in the parent it runs the
// child, reports how it ended and returns false.
func isolated(t *testing.T) bool {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		return true
	}
	var pattern []string
	for _, part := range strings.Split(t.Name(), "/") {
		pattern = append(pattern, "^"+regexp.QuoteMeta(part)+"$")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+strings.Join(pattern, "/"), "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil && bytes.Contains(out, []byte("--- PASS: "+t.Name())):
		if testing.Verbose() {
			t.Logf("child process:\n%s", tail(out, 4000))
		}
	case err == nil:
		t.Errorf("child process did not run the test:\n%s", tail(out, 4000))
	case errors.As(err, &exit) && bytes.Contains(out, []byte("panic: ")):
		t.Errorf("the gateway crashed (%v):\n%s", err, tail(out, 6000))
	default:
		t.Errorf("child process failed (%v):\n%s", err, tail(out, 6000))
	}
	return false
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
