// Package devnet runs the gateway on one machine, in one process: the
// embedded store, the local API Gateway-compatible relay with the relay
// function behind it, the API listener and the OpenAI-compatible API. The
// same handlers run in AWS; only the wiring differs.
package devnet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/connections"
	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/dispatch"
	"github.com/c0mpute/c0mpute/functions/listener"
	"github.com/c0mpute/c0mpute/functions/relayroutes"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/relay"
)

// Config configures a Stack.
type Config struct {
	// Store is the store to run on (embedded or DynamoDB); the stack does
	// not close it.
	Store store.Store
	// APIAddr and RelayAddr are listen addresses; ":0" picks a port.
	APIAddr   string
	RelayAddr string
	Models    []catalog.Model
	Limits    api.Limits
	Log       *slog.Logger
	// BatchWindow is the workers' chunk batching window: a delta goes at
	// once unless the job's last chunk left less than a window ago. 0
	// sends every delta on its own. DevBatchWindow suits one machine; in
	// AWS, where each message is a paid invocation, tens of milliseconds.
	BatchWindow time.Duration
	// RelayOptions tune the relay (tests shorten its timeouts).
	RelayOptions []relay.Option
}

// DevBatchWindow is the batching window of the local network: tokens
// slower than 200/s per stream go one by one, faster bursts are gathered so
// hundreds of streams do not flood the relay with one message per token.
const DevBatchWindow = 5 * time.Millisecond

// Stack is a running gateway.
type Stack struct {
	Store   store.Store
	Catalog *catalog.Catalog
	// APIURL is the OpenAI base URL (…/v1); RelayURL the workers'
	// WebSocket URL.
	APIURL   string
	RelayURL string
	// Conns reaches relay connections (tests use it to drop workers).
	Conns *connections.Client

	relay     *relay.Relay
	relaySrv  *http.Server
	apiSrv    *http.Server
	listener  *listener.Listener
	serveErrs chan error
}

// Start brings the stack up. Close it when done.
func Start(ctx context.Context, cfg Config) (_ *Stack, err error) {
	log := cfg.Log
	cat, err := catalog.New(cfg.Models)
	if err != nil {
		return nil, err
	}
	relayLn, err := net.Listen("tcp", cfg.RelayAddr)
	if err != nil {
		return nil, fmt.Errorf("devnet: relay listen: %w", err)
	}
	apiLn, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		relayLn.Close()
		return nil, fmt.Errorf("devnet: api listen: %w", err)
	}
	s := &Stack{Store: cfg.Store, Catalog: cat, serveErrs: make(chan error, 2),
		RelayURL: "ws://" + relayLn.Addr().String(), APIURL: "http://" + apiLn.Addr().String() + "/v1"}
	s.Conns = connections.NewLocal("http://" + relayLn.Addr().String())
	disp := dispatch.New(cfg.Store, s.Conns, log)
	secret := randomHex(32)
	routes := &relayroutes.Handler{Store: cfg.Store, Post: s.Conns, Dispatch: disp, Catalog: cat,
		ListenerSecret: secret, BatchWindow: cfg.BatchWindow, Log: log.With("component", "relay-function")}
	s.relay = relay.New(routes, append([]relay.Option{relay.WithLogger(log.With("component", "relay"))}, cfg.RelayOptions...)...)
	s.relaySrv = &http.Server{Handler: s.relay, ReadHeaderTimeout: 10 * time.Second}
	go func() { s.serveErrs <- serve(s.relaySrv, relayLn) }()
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.listener, err = listener.Start(ctx, listener.Config{URL: s.RelayURL, Secret: secret, Log: log.With("component", "listener")})
	if err != nil {
		apiLn.Close()
		return nil, err
	}
	a, err := api.New(api.Config{Store: cfg.Store, Dispatcher: disp, Connections: s.Conns, Relay: s.listener,
		Catalog: cat, Limits: cfg.Limits, Log: log.With("component", "api")})
	if err != nil {
		apiLn.Close()
		return nil, err
	}
	// No WriteTimeout: streams last as long as the job deadline allows.
	s.apiSrv = &http.Server{Handler: a, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { s.serveErrs <- serve(s.apiSrv, apiLn) }()
	return s, nil
}

func serve(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Listener is the API's relay listener (tests drop its connection).
func (s *Stack) Listener() *listener.Listener { return s.listener }

// Errors reports a server that stopped on its own.
func (s *Stack) Errors() <-chan error { return s.serveErrs }

// Close stops the API (letting requests finish for a few seconds), the
// listener and the relay.
func (s *Stack) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	if s.apiSrv != nil {
		errs = append(errs, s.apiSrv.Shutdown(ctx))
	}
	if s.listener != nil {
		errs = append(errs, s.listener.Close())
	}
	errs = append(errs, s.relay.Close(), s.relaySrv.Shutdown(ctx))
	return errors.Join(errs...)
}

// CreateAccount makes an account (if new), grants credits once per
// idempotency key, and issues a fresh API key.
func (s *Stack) CreateAccount(ctx context.Context, id string, credits int64, grantKey string) (apiKey string, err error) {
	if err := s.Store.CreateAccount(ctx, store.Account{ID: id, CreatedAt: time.Now()}); err != nil && !errors.Is(err, store.ErrExists) {
		return "", fmt.Errorf("devnet: create account: %w", err)
	}
	if credits > 0 {
		if _, err := s.Store.Grant(ctx, id, credits, grantKey, false); err != nil {
			return "", fmt.Errorf("devnet: grant credits: %w", err)
		}
	}
	return s.IssueAPIKey(ctx, id)
}

// IssueAPIKey issues an API key for an account.
func (s *Stack) IssueAPIKey(ctx context.Context, account string) (string, error) {
	secret, hash, id := credential.New(credential.APIKeyPrefix)
	if err := s.Store.PutAPIKey(ctx, store.Secret{Hash: hash, ID: id, AccountID: account, CreatedAt: time.Now()}); err != nil {
		return "", fmt.Errorf("devnet: api key: %w", err)
	}
	return secret, nil
}

// IssueWorkerToken issues a worker token for an account.
func (s *Stack) IssueWorkerToken(ctx context.Context, account string) (string, error) {
	secret, hash, id := credential.New(credential.WorkerTokenPrefix)
	if err := s.Store.PutWorkerToken(ctx, store.Secret{Hash: hash, ID: id, AccountID: account, CreatedAt: time.Now()}); err != nil {
		return "", fmt.Errorf("devnet: worker token: %w", err)
	}
	return secret, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
