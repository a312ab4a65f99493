// Package devnet runs the gateway on one machine, in one process: the
// embedded store, the local API Gateway-compatible relay with the relay
// function behind it, the API listener and the OpenAI-compatible API. The
// same handlers run in AWS; only the wiring differs.
//
// Three HTTP servers listen: the API, the relay's worker-facing WebSocket
// endpoint and the relay's @connections management API. The last is bound
// to loopback and takes only calls signed with credentials made afresh for
// each Stack, which only the stack's own posters hold, so nothing that can
// reach the worker port can post to, read or drop a connection. Every
// server bounds how long a client may take (Timeouts). The stack's own
// relay traffic — its posts and its API listener — stays in the process
// (relay.Local), with the same events, calls and errors; Config.Loopback
// sends it through the sockets instead, as another process's goes.
package devnet

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/canary"
	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/connections"
	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/dispatch"
	"github.com/c0mpute/c0mpute/functions/listener"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/relayroutes"
	"github.com/c0mpute/c0mpute/functions/rings"
	"github.com/c0mpute/c0mpute/functions/siws"
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
	// ManagementAddr is the relay management API's listen address
	// (default DefaultManagementAddr). Keep it on loopback: although
	// every call must be signed, nothing off the machine needs it.
	ManagementAddr string
	// Timeouts bound the servers' patience with clients; zero fields
	// take the defaults.
	Timeouts Timeouts
	Models   []catalog.Model
	Limits   api.Limits
	Log      *slog.Logger
	// BatchWindow is the workers' chunk batching window: a delta goes at
	// once unless the job's last chunk left less than a window ago. 0
	// sends every delta on its own. DevBatchWindow suits one machine; in
	// AWS, where each message is a paid invocation, tens of milliseconds.
	BatchWindow time.Duration
	// RelayOptions tune the relay (tests shorten its timeouts).
	RelayOptions []relay.Option
	// CORSOrigins are the browser origins allowed to call the API; none
	// turns CORS off.
	CORSOrigins []string
	// Deposits, when set, takes USDC deposits on its chain; the stack
	// sweeps for unreported ones every DepositSweepEvery.
	Deposits *api.Deposits
	// TopUps, when set (with Deposits), takes x402 top-ups into the same
	// treasury.
	TopUps *api.TopUps
	// Staking, when set, serves the staking routes on its chain.
	Staking *api.Staking
	// ManualSweep turns the periodic deposit sweep off: a test that counts
	// what SweepDeposits credits runs it itself.
	ManualSweep bool
	// Canaries, when set, runs the canary runner in the API process
	// (functions/canary) with these settings; Store, Gateway, Catalog,
	// Secret and Log are the stack's.
	Canaries *canary.Config
	// Loopback makes the stack's own relay traffic cross loopback
	// sockets, as another process's (and AWS's) does: its posts (the
	// API's, the relay function's, dispatch's) go through the
	// apigatewaymanagementapi client to the relay's HTTP management API,
	// SigV4-signed, and the API listener joins the relay over a
	// WebSocket. By default both stay in the process (relay.Local): the
	// same calls, events and errors without the HTTP round trip, the
	// SDK's middleware, the signature and the WebSocket frames, which
	// guard or cross a boundary that one process does not have.
	Loopback bool
	// APIConnections, when set, wraps what the API reaches relay
	// connections with (tests: a management API that answers late).
	APIConnections func(api.Connections) api.Connections
	// RingKey is the gateway's ring coordinator key (it signs plan
	// parameters and settled ring jobs); a fresh one when nil. The stack
	// forms rings only when its catalogue has ring models.
	RingKey ed25519.PrivateKey
	// RingTimeouts tune ring formation (tests shorten them); zero fields
	// take rings.Config's defaults.
	RingTimeouts RingTimeouts
}

// RingTimeouts are rings.Config's formation timers.
type RingTimeouts struct {
	RTT, Ready, Debounce, Retry time.Duration
}

// ScriptedLimits are api.DefaultLimits for a network whose workers answer
// from a script or a tiny test model: faster than any hardware serves a
// real model, so the speed check (Limits.MaxTokPerSec) is off.
func ScriptedLimits() api.Limits {
	l := api.DefaultLimits()
	l.MaxTokPerSec = 0
	return l
}

// DefaultManagementAddr is where the management API listens by default: a
// free loopback port.
const DefaultManagementAddr = "127.0.0.1:0"

// Timeouts bound how long the stack's HTTP servers wait on a client, so
// that a client sending headers or a body a byte at a time, or holding an
// idle keep-alive connection, cannot hold a connection (and its goroutine)
// for ever. A zero field takes the default for each server; a non-zero
// field applies to every server it concerns. Tests shorten them.
type Timeouts struct {
	// ReadHeader bounds reading a request's headers (every server).
	ReadHeader time.Duration
	// Read bounds reading a whole request, body included (every server;
	// for the relay's WebSocket endpoint, the upgrade request).
	Read time.Duration
	// Write bounds writing an API response (the API only). WebSockets
	// and management calls bound their writes themselves.
	Write time.Duration
	// Idle bounds how long a keep-alive connection may wait for its
	// next request (every server).
	Idle time.Duration
}

// Default server timeouts. None is an AWS figure: API Gateway and
// Function URLs enforce their own; these are local choices.
const (
	// DefaultReadHeaderTimeout gives a client 10 s to send its headers:
	// far more than any real client on a working link needs, short enough
	// that headers sent a byte at a time hold a connection only briefly.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultAPIReadTimeout bounds a whole API request: the largest body
	// the API accepts (oaiwire.MaxBody, 8 MiB) arrives within a minute at
	// 150 KB/s. The chat handler lifts its own read deadline once it has
	// the body, because the server would otherwise cancel a stream's
	// context when its background read hits this deadline.
	DefaultAPIReadTimeout = time.Minute
	// DefaultRelayReadTimeout bounds a relay request: a WebSocket upgrade
	// (no body) or a management call (at most relay.MaxMessage). The
	// relay clears it on the hijacked connection of a WebSocket, which
	// lives up to relay.MaxDuration under the relay's own timers.
	DefaultRelayReadTimeout = 30 * time.Second
	// DefaultIdleTimeout closes keep-alive connections idle for 2
	// minutes: clients reuse a connection within seconds when they reuse
	// it at all.
	DefaultIdleTimeout = 2 * time.Minute
	// writeAfterJob is how much longer than the job deadline an API
	// response may take to write: a stream lasts up to the job deadline,
	// then its last events and the accounting's error, if any, go out.
	writeAfterJob = time.Minute
	// maxHeaderBytes caps request headers at 64 KiB (net/http's default
	// is 1 MiB): an API key, a worker token and the usual headers take a
	// few hundred bytes.
	maxHeaderBytes = 64 << 10
)

// or returns d, or def when d is zero.
func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// apiServer is the API's http.Server.
func (t Timeouts) apiServer(h http.Handler, job time.Duration) *http.Server {
	return &http.Server{Handler: h, MaxHeaderBytes: maxHeaderBytes,
		ReadHeaderTimeout: or(t.ReadHeader, DefaultReadHeaderTimeout),
		ReadTimeout:       or(t.Read, DefaultAPIReadTimeout),
		WriteTimeout:      or(t.Write, job+writeAfterJob),
		IdleTimeout:       or(t.Idle, DefaultIdleTimeout)}
}

// relayServer is the http.Server of the relay's WebSocket endpoint or of
// its management API. No WriteTimeout: WebSockets and management calls
// bound their writes themselves (relay.WithWriteTimeout).
func (t Timeouts) relayServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, MaxHeaderBytes: maxHeaderBytes,
		ReadHeaderTimeout: or(t.ReadHeader, DefaultReadHeaderTimeout),
		ReadTimeout:       or(t.Read, DefaultRelayReadTimeout),
		IdleTimeout:       or(t.Idle, DefaultIdleTimeout)}
}

// DevBatchWindow is the batching window of the local network: tokens
// slower than 1,000/s per stream go one by one, faster bursts are gathered
// so hundreds of streams do not flood the relay with one message per
// token. A worker sends at most one chunk per window, so a token that
// comes less than a window after the last chunk waits, and at a steady
// rate near the window each waits nearly a window (5 ms, the window
// before, added 5 ms to every token of a 200 tok/s stream); 1 ms is far
// below any model's pace, and unpaced streams cost the gateway the same CPU
// per token with it as with 5 ms (BenchmarkAddedLatency,
// infra/devnet/PROFILE.md).
const DevBatchWindow = time.Millisecond

// Stack is a running gateway.
type Stack struct {
	Store   store.Store
	Catalog *catalog.Catalog
	// APIURL is the OpenAI base URL (…/v1); RelayURL the workers'
	// WebSocket URL; ManagementURL the relay's @connections API
	// (http://127.0.0.1:port), which takes only calls signed with the
	// stack's own credentials (which only Conns holds, and uses when
	// Config.Loopback is set).
	APIURL        string
	RelayURL      string
	ManagementURL string
	// Conns reaches relay connections (tests use it to drop workers).
	Conns *connections.Client
	// Canaries is the canary runner, when Config.Canaries asked for one.
	Canaries *canary.Runner
	// Rings forms and settles the rings of the catalogue's ring models;
	// nil when it has none.
	Rings *rings.Former

	stopCanaries context.CancelFunc
	stopSweep    context.CancelFunc
	api          *api.Server
	relay        *relay.Relay
	relaySrv     *http.Server
	mgmtSrv      *http.Server
	apiSrv       *http.Server
	listener     *listener.Listener
	serveErrs    chan error
}

// Start brings the stack up. Close it when done.
func Start(ctx context.Context, cfg Config) (_ *Stack, err error) {
	log := cfg.Log
	cat, err := catalog.New(cfg.Models)
	if err != nil {
		return nil, err
	}
	mgmtAddr := cfg.ManagementAddr
	if mgmtAddr == "" {
		mgmtAddr = DefaultManagementAddr
	}
	var lns []net.Listener
	listen := func(what, addr string) (net.Listener, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, fmt.Errorf("devnet: %s listen on %s: %w", what, addr, err)
		}
		lns = append(lns, ln)
		return ln, nil
	}
	relayLn, err := listen("relay", cfg.RelayAddr)
	if err != nil {
		return nil, err
	}
	mgmtLn, err := listen("relay management", mgmtAddr)
	if err != nil {
		return nil, err
	}
	apiLn, err := listen("api", cfg.APIAddr)
	if err != nil {
		return nil, err
	}
	s := &Stack{Store: cfg.Store, Catalog: cat, serveErrs: make(chan error, 3),
		RelayURL: "ws://" + relayLn.Addr().String(), APIURL: "http://" + apiLn.Addr().String() + "/v1",
		ManagementURL: "http://" + mgmtLn.Addr().String()}
	creds := newCredentials()
	// The relay exists before its function: the in-process management
	// API (relay.Local) the function posts through is the relay's. The
	// relay invokes the function only once a connection arrives, after
	// Start has set routes below.
	var routes *relayroutes.Handler
	opts := append([]relay.Option{relay.WithLogger(log.With("component", "relay"))}, cfg.RelayOptions...)
	// The stack's credentials go after the caller's options, which cannot
	// replace them: only the stack's posters hold them.
	s.relay = relay.New(relay.HandlerFunc(func(ctx context.Context, ev events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
		return routes.Handle(ctx, ev)
	}), append(opts, relay.WithCredentials(creds.AccessKeyID, creds.SecretAccessKey))...)
	if cfg.Loopback {
		s.Conns = connections.NewLocal(s.ManagementURL, creds)
	} else {
		s.Conns = connections.New(s.relay.Local())
	}
	disp := dispatch.New(cfg.Store, s.Conns, log)
	secret := randomHex(32)
	routes = &relayroutes.Handler{Store: cfg.Store, Post: s.Conns, Dispatch: disp, Catalog: cat,
		ListenerSecret: secret, BatchWindow: cfg.BatchWindow, Log: log.With("component", "relay-function")}
	if slices.ContainsFunc(cat.Models(), func(m catalog.Model) bool { return m.Ring != nil }) {
		key := cfg.RingKey
		if key == nil {
			if _, key, err = ed25519.GenerateKey(rand.Reader); err != nil {
				return nil, err
			}
		}
		t := cfg.RingTimeouts
		s.Rings, err = rings.New(rings.Config{Key: key, Catalog: cat, Post: s.Conns, Store: cfg.Store, Dispatch: disp,
			Log: log.With("component", "rings"), RTTTimeout: t.RTT, ReadyTimeout: t.Ready, Debounce: t.Debounce, Retry: t.Retry, AllowPrivateAddrs: true})
		if err != nil {
			return nil, err
		}
		if err := s.Rings.Load(ctx); err != nil {
			// The models whose files could not be read are not offered;
			// the others are.
			log.Warn("ring models", "err", err)
		}
		routes.Rings = s.Rings
	}
	s.relaySrv = cfg.Timeouts.relayServer(s.relay)
	s.mgmtSrv = cfg.Timeouts.relayServer(s.relay.Management())
	go func() { s.serveErrs <- serve(s.relaySrv, relayLn) }()
	go func() { s.serveErrs <- serve(s.mgmtSrv, mgmtLn) }()
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	lcfg := listener.Config{URL: s.RelayURL, Secret: secret, Log: log.With("component", "listener")}
	if !cfg.Loopback {
		local := s.relay.Local()
		lcfg.Local = func(ctx context.Context, h http.Header, recv func([]byte), ended func(int, string)) (listener.LocalLink, error) {
			lc, err := local.Connect(ctx, h, recv, ended)
			if err != nil {
				return nil, err
			}
			return lc, nil
		}
	}
	s.listener, err = listener.Start(ctx, lcfg)
	if err != nil {
		apiLn.Close()
		return nil, err
	}
	// Sign-In With Solana for this stack's own address, on the local chain.
	host := apiLn.Addr().String()
	signIn, err := siws.NewIssuer(secret, host, "http://"+host, "localnet", api.SignInStatement)
	if err != nil {
		apiLn.Close()
		return nil, err
	}
	var apiConns api.Connections = s.Conns
	if cfg.APIConnections != nil {
		apiConns = cfg.APIConnections(apiConns)
	}
	a, err := api.New(api.Config{Store: cfg.Store, Dispatcher: disp, Connections: apiConns, Relay: s.listener,
		Catalog: cat, Tickets: relaymsg.NewTicketer(secret), SignIn: signIn, CORSOrigins: cfg.CORSOrigins, Deposits: cfg.Deposits,
		TopUps: cfg.TopUps, Staking: cfg.Staking, Limits: cfg.Limits, Log: log.With("component", "api"), Rings: ringsOf(s.Rings)})
	if err != nil {
		apiLn.Close()
		return nil, err
	}
	s.apiSrv = cfg.Timeouts.apiServer(a, cfg.Limits.Job)
	s.api = a
	go func() { s.serveErrs <- serve(s.apiSrv, apiLn) }()
	if cfg.Deposits != nil && !cfg.ManualSweep {
		ctx, cancel := context.WithCancel(context.Background())
		s.stopSweep = cancel
		go a.RunDepositSweeps(ctx, DepositSweepEvery, log.With("component", "deposit-sweep"))
	}
	if cfg.Canaries != nil {
		c := *cfg.Canaries
		c.Store, c.Gateway, c.Catalog, c.Secret, c.Log = cfg.Store, a, cat, secret, log.With("component", "canary")
		if s.Canaries, err = canary.New(c); err != nil {
			return nil, err
		}
		a.OnSuspect(s.Canaries.Suspect)
		ctx, cancel := context.WithCancel(context.Background())
		s.stopCanaries = cancel
		go s.Canaries.Run(ctx)
	}
	return s, nil
}

// ringsOf is the API's view of the former: a nil interface, not a typed
// nil, when the stack forms no rings.
func ringsOf(f *rings.Former) api.Rings {
	if f == nil {
		return nil
	}
	return f
}

// newCredentials makes the management API's credentials for one stack, in
// the shape of an AWS access key (AKIA and 16 characters; a 40-character
// secret).
func newCredentials() aws.Credentials {
	return aws.Credentials{AccessKeyID: "AKIA" + strings.ToUpper(randomHex(8)), SecretAccessKey: randomHex(20),
		Source: "devnet"}
}

func serve(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// DepositSweepEvery is how often the stack looks on-chain for deposits
// nobody reported.
const DepositSweepEvery = 15 * time.Second

// SweepDeposits looks on-chain for deposits nobody reported and credits
// them now (the stack also does so every DepositSweepEvery).
func (s *Stack) SweepDeposits(ctx context.Context) (int, error) { return s.api.SweepDeposits(ctx) }

// Listener is the API's relay listener (tests drop its connection).
func (s *Stack) Listener() *listener.Listener { return s.listener }

// Errors reports a server that stopped on its own.
func (s *Stack) Errors() <-chan error { return s.serveErrs }

// Close stops the API (letting requests finish for a few seconds), the
// listener, the relay and its management API.
func (s *Stack) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	if s.stopCanaries != nil {
		s.stopCanaries()
		s.Canaries.Wait()
	}
	if s.stopSweep != nil {
		s.stopSweep()
	}
	if s.Rings != nil {
		s.Rings.Close()
	}
	if s.apiSrv != nil {
		errs = append(errs, s.apiSrv.Shutdown(ctx))
	}
	if s.listener != nil {
		errs = append(errs, s.listener.Close())
	}
	errs = append(errs, s.relay.Close(), s.relaySrv.Shutdown(ctx), s.mgmtSrv.Shutdown(ctx))
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
