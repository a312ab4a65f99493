// Package api is the gateway's OpenAI-compatible HTTP API: chat
// completions, models, balance, stats, job receipts and account-scoped key
// management. It is a plain net/http handler; the Lambda main wraps it with
// lambdaurl and the local runner serves it directly.
package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/cors"
	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/listener"
	"github.com/c0mpute/c0mpute/functions/metrics"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/siws"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/go-playground/validator/v10"
)

// Store is what the API needs from the store.
type Store interface {
	GetAccount(ctx context.Context, id string) (store.Account, error)
	CreateAccount(ctx context.Context, a store.Account) error
	Grant(ctx context.Context, accountID string, credits int64, idemKey string, deposit bool) (bool, error)
	UseNonce(ctx context.Context, nonce string, expires time.Time) error
	GetAPIKey(ctx context.Context, hash string) (store.Secret, error)
	ListAPIKeys(ctx context.Context, accountID string) ([]store.Secret, error)
	PutAPIKey(ctx context.Context, s store.Secret) error
	RevokeAPIKey(ctx context.Context, accountID, id string, at time.Time) error
	UpdateAPIKey(ctx context.Context, accountID, id string, p store.KeyPatch) (store.Secret, error)
	RenameWorkerToken(ctx context.Context, accountID, id, name string) (store.Secret, error)
	PutWorkerToken(ctx context.Context, s store.Secret) error
	ListWorkerTokens(ctx context.Context, accountID string) ([]store.Secret, error)
	RevokeWorkerToken(ctx context.Context, accountID, id string, at time.Time) ([]string, error)
	Admit(ctx context.Context, r store.AdmitRequest) (store.Admission, error)
	GetJob(ctx context.Context, id string) (store.Job, error)
	Requeue(ctx context.Context, jobID, worker string, at time.Time) (store.Job, error)
	Complete(ctx context.Context, c store.Completion) error
	GetReceipt(ctx context.Context, jobID string) (store.Receipt, error)
	Fail(ctx context.Context, jobID, reason string, refund bool, at time.Time) (store.Job, error)
	GetWorker(ctx context.Context, conn string) (store.Worker, error)
	Judge(ctx context.Context, v store.Verdict) (store.Reputation, error)
	GetReputation(ctx context.Context, accountID, pubkey string) (store.Reputation, error)
	Reputations(ctx context.Context, accountID string) ([]store.Reputation, error)
	DeleteWorker(ctx context.Context, conn string) (store.Worker, error)
	Workers(ctx context.Context) ([]store.Worker, error)
	// Stats serves /v1/stats, /v1/models' availability and the
	// network gauges, through a cache of a few seconds (networkStats).
	Stats(ctx context.Context, now time.Time) (store.Stats, error)
	Entries(ctx context.Context, accountID, before string, limit int) ([]store.Entry, error)
	PutDeposit(ctx context.Context, d store.Deposit) error
	GetDeposit(ctx context.Context, accountID, id string) (store.Deposit, error)
	ListDeposits(ctx context.Context, accountID string, limit int) ([]store.Deposit, error)
	OpenDeposits(ctx context.Context, since time.Time, limit int) ([]store.Deposit, error)
	CreditDeposit(ctx context.Context, c store.DepositCredit) (store.Deposit, bool, error)
	SetWallet(ctx context.Context, accountID, wallet string) (store.Account, error)
	GetTransfer(ctx context.Context, key string) (store.Transfer, error)
	RequestPayout(ctx context.Context, accountID string, at time.Time) (store.Account, error)
	// GetWorkerToken authenticates a worker token on the routes it may
	// read (workertoken.go).
	GetWorkerToken(ctx context.Context, hash string) (store.Secret, error)
}

// Dispatcher assigns jobs to workers.
type Dispatcher interface {
	// Admit admits a job (store.Store.Admit), assigning it in the same
	// write when it can (the job comes back JobAssigned).
	Admit(ctx context.Context, r store.AdmitRequest) (store.Admission, error)
	// Assign gives the job to an idle worker other than those excluded.
	Assign(ctx context.Context, job store.Job, exclude ...string) (store.Job, bool, error)
	Dispatch(ctx context.Context, models []string) (int, error)
	// Released says a worker that Assign gave a job to is idle again.
	Released(conn string, milliTokPerSec int64)
	// Forget drops a worker that is gone or cut off from every cache.
	Forget(conn string)
	// Judged updates the cached standing of a worker after a verdict.
	Judged(conn string, standing store.Standing, strikes int64)
}

// Connections posts to and closes relay connections.
type Connections interface {
	Post(ctx context.Context, conn string, data []byte) error
	Delete(ctx context.Context, conn string) error
}

// Relay is the listener connection replies arrive on.
type Relay interface {
	Conn() (string, error)
	Subscribe(job, conn string) (*listener.Mailbox, error)
}

// Limits are the tunable deadlines and quotas. Defaults in DefaultLimits.
type Limits struct {
	// RatePerMinute is the per-key request limit.
	RatePerMinute int64 `validate:"min=1"`
	// AccountRatePerMinute caps all of an account's keys together, so
	// minting keys does not multiply the rate; 0 makes it RatePerMinute.
	AccountRatePerMinute int64 `validate:"min=0"`
	// QueueWait is how long a job may wait for a worker before 503.
	QueueWait time.Duration `validate:"min=1"`
	// FirstToken is how long an assigned worker may take to send the
	// first chunk before 504.
	FirstToken time.Duration `validate:"min=1"`
	// Job is the whole job's deadline from admission.
	Job time.Duration `validate:"min=1"`
	// ImageRender is how long an assigned worker may take to deliver an
	// image before it is cut off and the job moves (an image comes whole,
	// after it is rendered: there is no first token to wait for); 0
	// leaves only the job's deadline.
	ImageRender time.Duration `validate:"min=0"`
	// KeepAliveAfter is when a waiting stream commits to 200 and starts
	// sending ": keep-alive" comments; errors before it keep their real
	// HTTP status.
	KeepAliveAfter time.Duration `validate:"min=1"`
	// KeepAliveEvery spaces the comments.
	KeepAliveEvery time.Duration `validate:"min=1"`
	// WorkerSharePercent is the worker's share of a job's price;
	// BoostedSharePercent that of an account with the stake boost.
	WorkerSharePercent  int64 `validate:"min=0,max=100"`
	BoostedSharePercent int64 `validate:"min=0,max=100"`
	// MaxAttempts bounds how often a job moves to another worker.
	MaxAttempts int `validate:"min=1"`
	// MaxTokPerSec is the fastest single stream, in tokens per second, a
	// worker's hardware can decode, as measured from the job's post to
	// its done: a reply faster than it was not generated, and is
	// rejected. 0 turns the check off (a test network whose workers
	// answer from a script at memory speed).
	MaxTokPerSec int64 `validate:"min=0"`
}

// DefaultLimits returns production defaults.
func DefaultLimits() Limits {
	return Limits{
		RatePerMinute:       60,
		QueueWait:           30 * time.Second,
		FirstToken:          60 * time.Second,
		Job:                 10 * time.Minute,
		ImageRender:         5 * time.Minute,
		KeepAliveAfter:      2 * time.Second,
		KeepAliveEvery:      10 * time.Second,
		WorkerSharePercent:  70,
		BoostedSharePercent: 80,
		MaxAttempts:         3,
		MaxTokPerSec:        1000,
	}
}

// Server is the API.
type Server struct {
	store    Store
	dispatch Dispatcher
	conns    Connections
	relay    Relay
	catalog  *catalog.Catalog
	limits   Limits
	log      *slog.Logger
	now      func() time.Time
	handler  http.Handler
	keys     keyCache
	tickets  *relaymsg.Ticketer
	roster   roster
	signIn   *siws.Issuer
	deposits *Deposits
	topUps   *TopUps
	stakers  *Staking
	boosts   boostCache
	// metrics receives the API's metrics; nil is off. gauges paces the
	// network gauges, and statsCache the counters they and /v1/stats
	// read.
	metrics    *metrics.Emitter
	gauges     metrics.Gauges
	statsCache statsCache
	// suspects is called with a worker whose reply looked wrong.
	suspects atomic.Pointer[func(conn string)]
	// rings forms and settles the ring models' rings; nil if none.
	rings Rings
}

// Config wires a Server. Every field but Now is required.
type Config struct {
	Store       Store
	Dispatcher  Dispatcher
	Connections Connections
	Relay       Relay
	Catalog     *catalog.Catalog
	// Tickets issues the job tickets the relay checks; made from the
	// listener secret the relay function holds too.
	Tickets *relaymsg.Ticketer
	// SignIn issues and verifies Sign-In With Solana; nil turns the
	// sign-in routes off.
	SignIn *siws.Issuer
	// Deposits takes USDC deposits (Solana Pay transfer requests); nil
	// turns the deposit routes off.
	Deposits *Deposits
	// TopUps takes x402 top-ups into the same treasury; it needs
	// Deposits. Nil turns the route off.
	TopUps *TopUps
	// Staking reads stakes and builds staking transactions; nil turns the
	// staking routes off.
	Staking *Staking
	// CORSOrigins are the browser origins allowed to call the API
	// (cors.ParseOrigins); none turns CORS off.
	CORSOrigins []string
	Limits      Limits
	Log         *slog.Logger
	// Metrics receives the API's metrics (see metrics.go); nil turns
	// them off.
	Metrics *metrics.Emitter
	// Rings forms and settles the rings of ring models (rings.Former);
	// nil when this gateway forms none.
	Rings Rings
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

var validate = validator.New(validator.WithRequiredStructEnabled())

// New builds the API handler.
func New(cfg Config) (*Server, error) {
	// Checked by hand: the validator reads through pointers, and the
	// dependencies are live objects other goroutines are using.
	if cfg.Store == nil || cfg.Dispatcher == nil || cfg.Connections == nil || cfg.Relay == nil ||
		cfg.Catalog == nil || cfg.Tickets == nil || cfg.Log == nil {
		return nil, errors.New("api: Store, Dispatcher, Connections, Relay, Catalog, Tickets and Log are required")
	}
	if err := validate.Struct(cfg.Limits); err != nil {
		return nil, err
	}
	if cfg.Limits.AccountRatePerMinute == 0 {
		cfg.Limits.AccountRatePerMinute = cfg.Limits.RatePerMinute
	}
	s := &Server{store: cfg.Store, dispatch: cfg.Dispatcher, conns: cfg.Connections, relay: cfg.Relay,
		catalog: cfg.Catalog, limits: cfg.Limits, log: cfg.Log, now: cfg.Now, tickets: cfg.Tickets, signIn: cfg.SignIn, deposits: cfg.Deposits, topUps: cfg.TopUps, stakers: cfg.Staking,
		metrics: cfg.Metrics, rings: cfg.Rings}
	s.gauges.Emitter = cfg.Metrics
	if s.now == nil {
		s.now = time.Now
	}
	if s.topUps != nil && (s.deposits == nil || s.topUps.Chain == nil || len(s.topUps.FeePayer) != 64 || s.topUps.Network == "") {
		return nil, errors.New("api: TopUps needs Deposits, a Chain, a FeePayer key and a Network")
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/chat/completions", s.authedCached(s.chat))
	mux.Handle("POST /v1/images/generations", s.authedCached(s.images))
	mux.Handle("GET /v1/models", handler(s.models))
	mux.Handle("GET /v1/models/{id...}", handler(s.model))
	mux.Handle("GET /v1/balance", s.authed(s.balance))
	mux.Handle("GET /v1/transactions", s.authed(s.transactions))
	mux.Handle("POST /v1/deposits", s.authed(s.createDeposit))
	mux.Handle("GET /v1/deposits", s.authed(s.listDeposits))
	mux.Handle("POST /v1/deposits/{id}/verify", s.authed(s.verifyDeposit))
	mux.Handle("POST /v1/x402/top-up", handler(s.topUp))
	mux.Handle("GET /v1/earnings", s.readable(s.earnings))
	mux.Handle("POST /v1/payouts", s.managing(s.requestPayout))
	mux.Handle("GET /v1/staking", s.authed(s.staking))
	mux.Handle("POST /v1/staking/transactions", s.authed(s.stakingTransaction))
	mux.Handle("POST /v1/payout-wallet/challenge", s.managing(s.payoutWalletChallenge))
	mux.Handle("POST /v1/payout-wallet", s.managing(s.setPayoutWallet))
	mux.Handle("GET /v1/stats", handler(s.stats))
	mux.Handle("GET /v1/receipts/{id}", s.authed(s.receipt))
	mux.Handle("GET /v1/workers", s.readable(s.workers))
	mux.Handle("POST /v1/auth/siws/challenge", handler(s.challenge))
	mux.Handle("POST /v1/auth/siws/verify", handler(s.verifySignIn))
	mux.Handle("GET /v1/keys", s.managing(s.listKeys))
	mux.Handle("POST /v1/keys", s.managing(s.createKey))
	mux.Handle("PATCH /v1/keys/{id}", s.managing(s.updateKey))
	mux.Handle("DELETE /v1/keys/{id}", s.managing(s.revokeKey))
	mux.Handle("GET /v1/key", s.authed(s.currentKey))
	mux.Handle("GET /v1/worker-tokens", s.managing(s.listWorkerTokens))
	mux.Handle("POST /v1/worker-tokens", s.managing(s.createWorkerToken))
	mux.Handle("PATCH /v1/worker-tokens/{id}", s.managing(s.renameWorkerToken))
	mux.Handle("DELETE /v1/worker-tokens/{id}", s.managing(s.revokeWorkerToken))
	mux.Handle("/", handler(func(w http.ResponseWriter, r *http.Request) error {
		return &oaiwire.Error{Status: http.StatusNotFound, Type: oaiwire.TypeInvalidRequest, Code: "unknown_url",
			Message: "Unknown request URL: " + r.Method + " " + r.URL.Path}
	}))
	s.handler = cors.Handler(cfg.CORSOrigins, withRequestID(s.observe(mux)))
	return s, nil
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// headerRequestID names every response, so a user can quote it and an
// operator find the request in the logs.
const headerRequestID = "x-request-id"

// withRequestID gives every response a fresh x-request-id.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b [12]byte
		_, _ = rand.Read(b[:])
		w.Header().Set(headerRequestID, "req_"+base64.RawURLEncoding.EncodeToString(b[:]))
		next.ServeHTTP(w, r)
	})
}

// handler adapts a handler that returns an error: the one place errors
// become OpenAI-shaped responses (and are counted, metricsOf).
type handler func(w http.ResponseWriter, r *http.Request) error

func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h(w, r); err != nil {
		var e *oaiwire.Error
		if !errors.As(err, &e) {
			slog.Default().Error("request failed", "method", r.Method, "path", r.URL.Path, "request_id", w.Header().Get(headerRequestID), "err", err)
		}
		metricsOf(r.Context()).answered(err)
		oaiwire.WriteError(w, err)
	}
}

type principal struct {
	account string
	keyHash string
	// limited is a key with spend controls (a limit or an expiry): it
	// may spend, not manage keys or tokens.
	limited bool
}

type principalKey struct{}

// authed checks the bearer API key before the handler runs.
func (s *Server) authed(next handler) http.Handler { return s.auth(next, false) }

// managing is authed for the routes that manage keys and tokens, which a
// key with spend controls may not use: a limited key handed to an agent
// must not raise its own limit, mint unlimited keys or revoke others.
func (s *Server) managing(next handler) http.Handler {
	return s.authed(func(w http.ResponseWriter, r *http.Request) error {
		if who(r).limited {
			return errLimitedKey
		}
		return next(w, r)
	})
}

// authedCached is authed for a handler that checks the key again itself,
// atomically with what it does (chat: Admit): a key seen active within
// keyCacheTTL skips the lookup, which saves the hot path a round trip.
func (s *Server) authedCached(next handler) http.Handler { return s.auth(next, true) }

func (s *Server) auth(next handler, cached bool) http.Handler {
	return handler(func(w http.ResponseWriter, r *http.Request) error {
		token := credential.Bearer(r.Header.Get("Authorization"))
		if !credential.WellFormed(credential.APIKeyPrefix, token) {
			if credential.WellFormed(credential.WorkerTokenPrefix, token) {
				return errWorkerTokenHere
			}
			return oaiwire.ErrInvalidKey
		}
		hash := credential.Hash(token)
		if cached {
			if account, ok := s.keys.get(hash, s.now()); ok {
				ctx := context.WithValue(r.Context(), principalKey{}, principal{account: account, keyHash: hash})
				return next(w, r.WithContext(ctx))
			}
		}
		key, err := s.liveKey(r.Context(), hash)
		if err != nil {
			return err
		}
		s.keys.put(hash, key.AccountID, s.now())
		ctx := context.WithValue(r.Context(), principalKey{}, principal{account: key.AccountID, keyHash: hash,
			limited: key.Limit > 0 || !key.ExpiresAt.IsZero()})
		return next(w, r.WithContext(ctx))
	})
}

// liveKey reads the API key with hash from the store: an unknown, revoked
// or expired key is the error to answer (and leaves the key cache).
func (s *Server) liveKey(ctx context.Context, hash string) (store.Secret, error) {
	key, err := s.store.GetAPIKey(ctx, hash)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.Secret{}, oaiwire.ErrInvalidKey
	case err != nil:
		return store.Secret{}, err
	case !key.Active():
		s.keys.evict(hash)
		return store.Secret{}, oaiwire.ErrInvalidKey
	case key.Expired(s.now()):
		s.keys.evict(hash)
		return store.Secret{}, errKeyExpired
	}
	return key, nil
}

// notConfigured is the 404 of a route whose feature this gateway runs
// without ("Deposits are").
func notConfigured(what string) *oaiwire.Error {
	return &oaiwire.Error{Status: http.StatusNotFound, Type: oaiwire.TypeInvalidRequest, Code: "unknown_url",
		Message: what + " not configured on this gateway."}
}

func who(r *http.Request) principal {
	p, _ := r.Context().Value(principalKey{}).(principal)
	return p
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err = w.Write(b)
	return err
}
