package devnet_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/devnet"
	"github.com/c0mpute/c0mpute/infra/testenv"
	"github.com/c0mpute/c0mpute/workerd/backend/ollama"
	"github.com/c0mpute/c0mpute/workerd/config"
	"github.com/c0mpute/c0mpute/workerd/identity"
)

// holdPoint is where the gate holds the next chat reply.
type holdPoint int

const (
	// holdBeforeReply: the worker's backend request arrived and nothing
	// was answered; no token exists anywhere yet.
	holdBeforeReply holdPoint = iota + 1
	// holdAfterFirstToken: the first line with content went to the worker,
	// which relays it at once (a first delta is never batched).
	holdAfterFirstToken
)

// gate is a pass-through proxy in front of the real Ollama that holds one
// chat reply at a chosen point, so that a test kills the worker while its
// job is provably in flight, at a known stage, rather than after a guessed
// delay. Every other request (the worker's model list, the chat of the
// worker the job moves to) passes straight through.
type gate struct {
	upstream string
	srv      *httptest.Server

	mu      sync.Mutex
	armed   holdPoint
	held    chan struct{} // closed when the armed reply reaches its point
	release chan struct{}
}

func newGate(t testing.TB, upstream string) *gate {
	t.Helper()
	g := &gate{upstream: upstream, release: make(chan struct{})}
	g.srv = httptest.NewServer(g)
	t.Cleanup(g.srv.Close)
	t.Cleanup(g.releaseHeld) // before Close, which waits for held handlers
	return g
}

func (g *gate) URL() string { return g.srv.URL }

// arm makes the next chat reply hold at p; held is closed when it does.
func (g *gate) arm(p holdPoint) (held <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.held, g.release = p, make(chan struct{}), make(chan struct{})
	return g.held
}

// releaseHeld lets a held reply go on (if its worker still wants it).
func (g *gate) releaseHeld() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.release:
	default:
		close(g.release)
	}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var hold holdPoint
	var held, release chan struct{}
	if r.URL.Path == "/api/chat" {
		g.mu.Lock()
		hold, held, release = g.armed, g.held, g.release
		g.armed = 0
		g.mu.Unlock()
	}
	// The body is read before any hold: Go's server watches for the
	// client hanging up (and cancels r.Context()) only once the body is
	// consumed, and a worker killed during a hold must be seen gone.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	// wait holds until released or the worker gives up the request (it
	// was killed or cancelled the job); false when the worker is gone.
	wait := func() bool {
		close(held)
		select {
		case <-release:
			return r.Context().Err() == nil
		case <-r.Context().Done():
			return false
		}
	}
	if hold == holdBeforeReply && !wait() {
		return
	}
	// Ollama is never hung up on mid-reply: its request outlives the
	// worker's, and what a killed worker no longer takes is read and
	// dropped (the round's max_tokens bounds it). Ollama 0.6.5, the
	// version scripts/test installs, loses one of its parallel slots (4
	// here) now and then when a streaming client hangs up — the
	// completion goroutine blocks for good handing a token to a handler
	// that stopped reading (server/routes.go, ChatHandler) — and once all
	// are lost it answers no chat again: a kill in every round would
	// wedge the Ollama that later rounds, and later tests, share, and the
	// job moved to a live worker would never get its reply.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, g.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer func() {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if _, werr := w.Write(line); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err != nil {
			return
		}
		if hold == holdAfterFirstToken && hasContent(line) {
			hold = 0
			if !wait() {
				return
			}
		}
	}
}

// hasContent reports whether an Ollama /api/chat stream line carries text.
func hasContent(line []byte) bool {
	var l struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
	}
	return json.Unmarshal(line, &l) == nil && l.Message.Content != ""
}

// killKind is one way a round goes: the request's mode and where the
// worker dies.
type killKind struct {
	stream bool
	at     holdPoint
}

func (k killKind) String() string {
	mode := "buffered"
	if k.stream {
		mode = "streamed"
	}
	if k.at == holdBeforeReply {
		return mode + ", killed before any token"
	}
	return mode + ", killed after the first token"
}

// moves says whether the job must move to another worker: nothing reached
// the client yet. A buffered reply reaches the client only whole, so it
// moves even after the worker sent tokens; a stream that showed a token
// cannot.
func (k killKind) moves() bool { return !k.stream || k.at == holdBeforeReply }

var killKinds = []killKind{
	{stream: false, at: holdBeforeReply},
	{stream: true, at: holdBeforeReply},
	{stream: false, at: holdAfterFirstToken},
	{stream: true, at: holdAfterFirstToken},
}

// clientReply is what the client saw.
type clientReply struct {
	content string
	// errEvents counts error events; errCode is the last one's code.
	errEvents int
	errCode   string
	lastIsErr bool
	done      bool // [DONE] arrived
	err       error
}

const killPrompt, killMaxTokens = "the cat sat on the mat", 48

// killRoundRequest sends the round's chat request. firstToken is closed when the
// first content reaches the client (streams only).
func (e *env) killRoundRequest(stream bool, firstToken chan<- struct{}) clientReply {
	body := fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":%d,"temperature":0,"seed":42,`+
		`"messages":[{"role":"system","content":"be brief"},{"role":"user","content":%q}]}`, tinyModel, stream, killMaxTokens, killPrompt)
	req, err := http.NewRequest(http.MethodPost, e.stack.APIURL+"/chat/completions", strings.NewReader(body))
	if err != nil {
		return clientReply{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+e.apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return clientReply{err: err}
	}
	defer resp.Body.Close()
	if !stream {
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			return clientReply{err: fmt.Errorf("status %d: %s (%v)", resp.StatusCode, b, err)}
		}
		var c struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) != 1 {
			return clientReply{err: fmt.Errorf("reply %s: %v", b, err)}
		}
		return clientReply{content: c.Choices[0].Message.Content}
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return clientReply{err: fmt.Errorf("status %d: %s", resp.StatusCode, b)}
	}
	var r clientReply
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue // blank lines, keep-alive comments
		}
		r.lastIsErr = false
		if data == "[DONE]" {
			r.done = true
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
			Error *struct{ Code string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			r.err = fmt.Errorf("event %s: %w", data, err)
			return r
		}
		if c.Error != nil {
			r.errEvents++
			r.errCode, r.lastIsErr = c.Error.Code, true
			continue
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" && text.Len() == 0 && firstToken != nil {
				close(firstToken)
			}
			text.WriteString(ch.Delta.Content)
		}
	}
	r.content, r.err = text.String(), sc.Err()
	return r
}

// killRounds runs rounds of one request each: the gate holds the reply at
// the round's point, the worker holding the job is killed there, and the
// client's reply and the store's record of the job must show what that
// kill implies. kill kills the worker and returns once the kill is
// observed (the process reaped, the connection refused); before runs ahead
// of each round and after once the job is settled. It returns the jobs
// that completed and those that failed.
func killRounds(t *testing.T, e *env, g *gate, rounds int, ref string,
	before func(round int), kill func(w store.Worker), after func(k killKind)) (done, failed int) {
	t.Helper()
	ctx := context.Background()
	kills := 0
	for i := range rounds {
		k := killKinds[i%len(killKinds)]
		before(i)
		held := g.arm(k.at)
		firstToken := make(chan struct{})
		replies := make(chan clientReply, 1)
		go func() { replies <- e.killRoundRequest(k.stream, firstToken) }()

		waitChan(t, held, fmt.Sprintf("round %d (%s): the worker's backend request to reach the hold point", i, k))
		if k.stream && k.at == holdAfterFirstToken {
			waitChan(t, firstToken, fmt.Sprintf("round %d: the first token to reach the client", i))
		}
		// The job is assigned before its prompt goes to the worker, so the
		// worker whose request is held is the one busy with the job.
		var victim store.Worker
		ws, err := e.store.Workers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if w.State == store.WorkerBusy {
				if victim.Conn != "" {
					t.Fatalf("round %d: two busy workers, one job in flight: %+v", i, ws)
				}
				victim = w
			}
		}
		if victim.Job == "" {
			t.Fatalf("round %d: no busy worker holds a job while its reply is held: %+v", i, ws)
		}
		kill(victim)
		waitFor(t, "the killed worker's record to go", func() bool {
			_, err := e.store.GetWorker(ctx, victim.Conn)
			return errors.Is(err, store.ErrNotFound)
		})
		kills++

		var r clientReply
		select {
		case r = <-replies:
		case <-time.After(time.Minute):
			t.Fatalf("round %d (%s): no reply a minute after the kill", i, k)
		}
		g.releaseHeld()
		var job store.Job
		waitFor(t, "the job to settle", func() bool {
			job, err = e.store.GetJob(ctx, victim.Job)
			return err == nil && (job.State == store.JobDone || job.State == store.JobFailed)
		})

		if k.moves() {
			done++
			if r.err != nil || r.content != ref || r.errEvents != 0 || (k.stream && !r.done) {
				t.Errorf("round %d (%s): the job should have moved and completed: %+v, want content %q", i, k, r, ref)
			}
			if job.State != store.JobDone || job.Refunded || job.Attempts != 2 || job.Worker == victim.Conn {
				t.Errorf("round %d (%s): job %+v, want done on another worker at the second attempt, not refunded", i, k, job)
			}
		} else {
			failed++
			if r.err != nil || r.errEvents != 1 || !r.lastIsErr || r.errCode != "worker_lost" || r.done ||
				r.content == "" || r.content == ref || !strings.HasPrefix(ref, r.content) {
				t.Errorf("round %d (%s): want the first tokens, then exactly one worker_lost error event, last, no [DONE]: %+v", i, k, r)
			}
			if job.State != store.JobFailed || !job.Refunded || job.FailReason != "worker_lost" || job.Attempts != 1 {
				t.Errorf("round %d (%s): job %+v, want failed as worker_lost and refunded", i, k, job)
			}
		}
		after(k)
		if t.Failed() {
			t.FailNow() // one round's state would spill into the next
		}
	}
	if kills != rounds {
		t.Fatalf("%d kills in %d rounds", kills, rounds)
	}
	return done, failed
}

// checkLedger: every completed job charged once, every failed one refunded
// once, and the worker account (the same account here) earned its share of
// each completed job.
func checkLedger(t *testing.T, e *env, credits, price int64, done, failed int) {
	t.Helper()
	share := price * api.DefaultLimits().WorkerSharePercent / 100
	a := e.balance()
	spent := int64(done) * price
	if a.Credits != credits-spent || a.TotalSpent != spent || a.Earned != int64(done)*share {
		t.Errorf("credits %d spent %d earned %d; want %d, %d and %d after %d completed and %d refunded jobs",
			a.Credits, a.TotalSpent, a.Earned, credits-spent, spent, int64(done)*share, done, failed)
	}
	st, err := e.store.Stats(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.JobsCompleted != int64(done) || len(st.QueueByModel) != 0 {
		t.Errorf("stats %+v, want %d jobs completed and nothing queued", st, done)
	}
}

func waitChan(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// referenceReply is the reply of the round's request when nothing fails:
// with temperature 0 every worker over the same Ollama gives it.
func referenceReply(t *testing.T, e *env) string {
	t.Helper()
	r := e.killRoundRequest(false, nil)
	if r.err != nil || r.content == "" {
		t.Fatalf("reference reply: %+v", r)
	}
	return r.content
}

// TestWorkerKilledMidStream kills the worker holding a job at a known point
// of the reply — before any token exists, or after the first token reached
// the worker (and, streamed, the client) — in every round, in two ways: the
// relay drops an in-process worker's connection (a network failure), and
// a real workerd process is SIGKILLed (a crash). A job nothing of which
// reached the client must move to another worker and complete with the
// whole reply, charged once; a stream that showed a token must end with
// the tokens so far and exactly one worker_lost error event, the job
// failed and refunded once. Each round's kill, job state and refund is
// read from the store, and the ledger balances at the end.
func TestWorkerKilledMidStream(t *testing.T) {
	const price, credits = 10, 10_000
	limits := devnet.ScriptedLimits()
	limits.RatePerMinute = 1000 // the rounds are not a rate-limit test
	srv := sharedOllama(t)

	t.Run("connection dropped", func(t *testing.T) {
		const rounds = 40
		e := newEnv(t, envOptions{credits: credits, limits: &limits})
		g := newGate(t, srv.URL())
		for range 3 {
			e.startWorker(ollama.New(g.URL()), map[string]string{tinyModel: tinyModel})
		}
		e.waitWorkers(tinyModel, 3)
		ref := referenceReply(t, e)
		done, failed := killRounds(t, e, g, rounds, ref,
			func(int) {},
			func(w store.Worker) {
				// As a network failure would: the relay closes the
				// connection; the agent reconnects as a new worker.
				if err := e.stack.Conns.Delete(context.Background(), w.Conn); err != nil {
					t.Fatalf("drop %s: %v", w.Conn, err)
				}
			},
			// The dropped agent is back and every worker idle.
			func(killKind) { e.waitWorkers(tinyModel, 3) })
		t.Logf("%d rounds, %d kills: %d jobs moved and completed, %d failed and refunded", rounds, rounds, done, failed)
		checkLedger(t, e, credits, price, done+1, failed) // +1: the reference
	})

	t.Run("workerd process SIGKILLed", func(t *testing.T) {
		const rounds = 8
		bin := buildWorkerd(t)
		e := newEnv(t, envOptions{credits: credits, limits: &limits})
		g := newGate(t, srv.URL())
		// The reference comes from an in-process worker, gone before
		// the rounds: in each round the process is the only worker.
		ref := func() string {
			w := e.startWorker(ollama.New(g.URL()), map[string]string{tinyModel: tinyModel})
			e.waitWorkers(tinyModel, 1)
			defer e.waitNoWorkers()
			defer w.stop()
			return referenceReply(t, e)
		}()
		var proc *workerdProcess
		var fallback *worker
		done, failed := killRounds(t, e, g, rounds, ref,
			func(round int) {
				proc = e.startWorkerd(t, bin, g.URL())
				e.waitWorkers(tinyModel, 1)
				ws, err := e.store.Workers(context.Background())
				if err != nil || len(ws) != 1 || ws[0].Pubkey != proc.pubkey {
					t.Fatalf("round %d: workers %+v (%v), want only the workerd process %s", round, ws, err, proc.pubkey)
				}
			},
			func(w store.Worker) {
				if w.Pubkey != proc.pubkey {
					t.Fatalf("the job is on %+v, not on the workerd process", w)
				}
				proc.sigkill(t)
				// A worker for the job to move to, when it may.
				fallback = e.startWorker(ollama.New(g.URL()), map[string]string{tinyModel: tinyModel})
			},
			func(killKind) {
				fallback.stop()
				e.waitNoWorkers()
			})
		t.Logf("%d rounds, %d workerd processes SIGKILLed: %d jobs moved and completed, %d failed and refunded", rounds, rounds, done, failed)
		checkLedger(t, e, credits, price, done+1, failed)
	})
}

// waitNoWorkers waits until no worker is connected.
func (e *env) waitNoWorkers() {
	e.t.Helper()
	waitFor(e.t, "no worker connected", func() bool {
		ws, err := e.store.Workers(context.Background())
		return err == nil && len(ws) == 0
	})
}

var (
	workerdOnce sync.Once
	workerdBin  string
	workerdErr  error
)

// buildWorkerd builds the real workerd command once per test process.
func buildWorkerd(t testing.TB) string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		testenv.Missing(t, "go command (to build workerd)", err.Error())
	}
	workerdOnce.Do(func() {
		dir, err := os.MkdirTemp("", "c0mpute-workerd-")
		if err != nil {
			workerdErr = err
			return
		}
		workerdBin = filepath.Join(dir, "workerd")
		cmd := exec.Command(goCmd, "build", "-o", workerdBin, "./workerd")
		cmd.Dir = moduleRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			workerdErr = fmt.Errorf("go build ./workerd: %v\n%s", err, out)
		}
	})
	if workerdErr != nil {
		t.Fatal(workerdErr)
	}
	return workerdBin
}

// removeWorkerdBuild deletes the built binary (TestMain).
func removeWorkerdBuild() {
	if workerdBin != "" {
		os.RemoveAll(filepath.Dir(workerdBin))
	}
}

// workerdProcess is a running workerd command.
type workerdProcess struct {
	cmd    *exec.Cmd
	pubkey string
	log    *testenv.Buffer
	waited bool
}

// startWorkerd runs `workerd run` configured the way a contributor does
// (environment variables), serving tinyModel from the Ollama at backendURL
// with the env's worker token and a fresh identity.
func (e *env) startWorkerd(t *testing.T, bin, backendURL string) *workerdProcess {
	t.Helper()
	if e.token == "" {
		tok, err := e.stack.IssueWorkerToken(context.Background(), e.account)
		if err != nil {
			t.Fatal(err)
		}
		e.token = tok
	}
	return e.runWorkerd(t, bin, e.token, "workerd",
		config.EnvBackend+"=ollama",
		config.EnvBackendURL+"="+backendURL,
		config.EnvModels+"="+tinyModel+"="+tinyModel)
}

// runWorkerd starts `workerd run` with a fresh home and identity, the
// stack's relay and token, and settings (NAME=value), nothing inherited
// from this process's C0MPUTE_, OLLAMA_ or HOME variables. The process is
// killed when the test ends, and its log shown if the test failed.
func (e *env) runWorkerd(t testing.TB, bin, token, what string, settings ...string) *workerdProcess {
	t.Helper()
	home := t.TempDir()
	keyFile := filepath.Join(home, "worker-key.json")
	key, err := identity.Create(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	p := &workerdProcess{pubkey: identity.Address(key), log: &testenv.Buffer{}}
	p.cmd = exec.Command(bin, "run")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "C0MPUTE_") && !strings.HasPrefix(kv, "OLLAMA_") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	p.cmd.Env = append(append(env, "HOME="+home,
		config.EnvHome+"="+home,
		config.EnvRelayURL+"="+e.stack.RelayURL,
		config.EnvToken+"="+token,
		config.EnvKeyFile+"="+keyFile,
		config.EnvLogLevel+"=debug"), settings...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.waited {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("%s %s log:\n%s", what, p.pubkey, p.log.String())
		}
	})
	return p
}

// sigkill kills the process with SIGKILL and returns once it is reaped,
// having checked that SIGKILL is what ended it.
func (p *workerdProcess) sigkill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL workerd: %v\n%s", err, p.log.String())
	}
	err := p.cmd.Wait()
	p.waited = true
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("workerd ended with %v, not killed\n%s", err, p.log.String())
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("workerd ended with %v, not by SIGKILL\n%s", err, p.log.String())
	}
}
