package devnet_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/devnet"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
	"github.com/c0mpute/c0mpute/infra/ollamatest"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/agent"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/backend/ollama"
)

// tinyModel is the name of the generated model on the test Ollama and in
// the test catalogue.
const tinyModel = "tiny"

func TestMain(m *testing.M) {
	code := m.Run()
	ollamatest.StopShared()
	removeWorkerdBuild()
	os.Exit(code)
}

// sharedOllama returns the package's Ollama with the tiny model created.
func sharedOllama(t testing.TB) *ollamatest.Server {
	t.Helper()
	return ollamatest.TinyModel(t, tinyModel, testmodel.Options{Seed: 7})
}

func testLog(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// env is a running network: gateway stack, one account with an API key,
// and an OpenAI SDK client for it.
type env struct {
	t       testing.TB
	stack   *devnet.Stack
	store   store.Store
	account string
	apiKey  string
	client  openai.Client
	// token is the worker token the env's workers share, as one
	// contributor's several GPUs would.
	token string
	// started counts the workers started; extraTokens holds the tokens
	// of further contributor accounts, by account.
	started     int
	extraTokens map[string]string
}

type envOptions struct {
	credits int64
	limits  *api.Limits
	models  []catalog.Model
	// store, if set, is the store to run on instead of openStore's.
	store store.Store
	// cors are the browser origins the API allows.
	cors []string
	// deposits takes USDC deposits on a chain.
	deposits *api.Deposits
	// topUps takes x402 top-ups (with deposits).
	topUps *api.TopUps
	// staking serves the staking routes.
	staking *api.Staking
	// rings tunes ring formation (ring models in models).
	rings devnet.RingTimeouts
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	st := o.store
	if st == nil {
		st = openStore(t)
	}
	limits := devnet.ScriptedLimits()
	if o.limits != nil {
		limits = *o.limits
	}
	models := o.models
	if models == nil {
		models = []catalog.Model{{ID: tinyModel, Price: 10}}
	}
	stack, err := devnet.Start(context.Background(), devnet.Config{Store: st, APIAddr: "127.0.0.1:0",
		RelayAddr: "127.0.0.1:0", Models: models, Limits: limits, BatchWindow: devnet.DevBatchWindow, Log: testLog(t),
		CORSOrigins: o.cors, Deposits: o.deposits, TopUps: o.topUps, Staking: o.staking, RingTimeouts: o.rings,
		// Tests count what a sweep credits: they sweep themselves.
		ManualSweep: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stack.Close() })
	e := &env{t: t, stack: stack, store: st, account: "acct-" + t.Name()}
	e.apiKey, err = stack.CreateAccount(context.Background(), e.account, o.credits, "test-grant")
	if err != nil {
		t.Fatal(err)
	}
	e.client = openai.NewClient(option.WithBaseURL(stack.APIURL+"/"), option.WithAPIKey(e.apiKey), option.WithMaxRetries(0))
	return e
}

// openStore opens the store the suite runs on: the embedded store, or with
// C0MPUTE_STORE=dynamodb a fresh table on DynamoDB Local.
func openStore(t testing.TB) store.Store { return dynamotest.SuiteStore(t) }

// worker is an in-process workerd.
type worker struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startWorker runs a workerd agent against the backend until the test ends
// or stop is called.
func (e *env) startWorker(be backend.Backend, models map[string]string) *worker {
	e.t.Helper()
	if e.token == "" {
		tok, err := e.stack.IssueWorkerToken(context.Background(), e.account)
		if err != nil {
			e.t.Fatal(err)
		}
		e.token = tok
	}
	tok := e.token
	// A token holds at most store.MaxConnsPerToken connections (a worker
	// briefly holds two when it rolls): past half that, workers run on
	// tokens of further contributor accounts (the benchmarks' 200).
	if n := e.started / (store.MaxConnsPerToken / 2); n > 0 {
		ctx := context.Background()
		id := fmt.Sprintf("%s-contributor-%d", e.account, n)
		if err := e.store.CreateAccount(ctx, store.Account{ID: id, CreatedAt: time.Now()}); err != nil && !errors.Is(err, store.ErrExists) {
			e.t.Fatal(err)
		}
		if e.extraTokens == nil {
			e.extraTokens = map[string]string{}
		}
		if e.extraTokens[id] == "" {
			t, err := e.stack.IssueWorkerToken(ctx, id)
			if err != nil {
				e.t.Fatal(err)
			}
			e.extraTokens[id] = t
		}
		tok = e.extraTokens[id]
	}
	e.started++
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker{cancel: cancel, done: make(chan struct{})}
	a := agent.New(agent.Config{RelayURL: e.stack.RelayURL, Token: tok, Key: key, Backend: be, Models: models,
		Log: testLog(e.t).With("worker", e.t.Name()), Version: "test", DrainTimeout: 5 * time.Second})
	go func() { defer close(w.done); _ = a.Run(ctx) }()
	e.t.Cleanup(w.stop)
	return w
}

func (w *worker) stop() {
	w.cancel()
	<-w.done
}

// waitWorkers waits until n workers are registered for the model.
func (e *env) waitWorkers(model string, n int) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ws, err := e.store.IdleWorkers(context.Background(), model)
		if err != nil {
			e.t.Fatal(err)
		}
		if len(ws) >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("fewer than %d workers registered for %s after 20 s", n, model)
}

// ollamaWorker starts a workerd in front of the shared Ollama.
func (e *env) ollamaWorker() (*worker, *ollamatest.Server) {
	srv := sharedOllama(e.t)
	w := e.startWorker(ollamaBackend(srv), map[string]string{tinyModel: tinyModel})
	e.waitWorkers(tinyModel, 1)
	return w, srv
}

// workerLeft records a worker that served model and left a moment ago, as
// one that lost its connection does: requests for the model then wait in
// the queue for a worker, where for a model nobody served lately they
// fail at once.
func (e *env) workerLeft(model string) {
	e.t.Helper()
	ctx := context.Background()
	conn := fmt.Sprintf("gone-%s-%d", model, time.Now().UnixNano())
	err := e.store.PutWorker(ctx, store.Worker{Conn: conn, AccountID: e.account, State: store.WorkerIdle, ConnectedAt: time.Now()})
	if err == nil {
		_, err = e.store.RegisterWorker(ctx, conn, []string{model}, nil)
	}
	if err == nil {
		_, err = e.store.DeleteWorker(ctx, conn)
	}
	if err != nil {
		e.t.Fatalf("a worker of %s that left: %v", model, err)
	}
}

func (e *env) balance() store.Account {
	e.t.Helper()
	a, err := e.store.GetAccount(context.Background(), e.account)
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

func ollamaBackend(srv *ollamatest.Server) backend.Backend { return ollama.New(srv.URL()) }

// waitFor polls cond until it holds, failing the test after 20 s (a
// liveness bound, not a timing).
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after 20 s waiting for %s", what)
		}
	}
}
