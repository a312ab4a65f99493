// Package agent is workerd's connection to the network: it keeps an
// authenticated WebSocket to the relay, registers the models its backend
// serves, runs the jobs it is given and streams their replies back in
// batched chunks. It survives flaky networks (reconnect with backoff and
// jitter), rolls its connection before API Gateway's 2 h cap without
// dropping a job, and drains in-flight jobs on shutdown.
package agent

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/workerd/backend"
)

// Tuning. Each value is set by an API Gateway limit or by what a user sees.
const (
	// rollAfter: API Gateway closes a connection at 2 h; a fresh one is
	// registered well before, and the old one finishes its jobs.
	rollAfter = 110 * time.Minute
	// heartbeatEvery: API Gateway drops a connection idle for 10 min.
	heartbeatEvery = 4 * time.Minute
	// The batching window itself comes from the relay (Registered): a
	// few tens of ms in AWS, where each message is a paid invocation, 0 on
	// one machine. The first delta of a job always goes at once, so
	// time-to-first-token pays no batching delay.
	// batchBytes flushes early: far below the 128 KB message cap even
	// after JSON escaping.
	batchBytes = 16 << 10
	// backoff bounds for reconnecting.
	backoffMin = 250 * time.Millisecond
	backoffMax = 30 * time.Second
	// localBackoffMax bounds the wait while the backend itself is down:
	// it is on this machine, asking it costs nothing, and a backend
	// started later should be served within seconds.
	localBackoffMax = 3 * time.Second
	// modelRefresh: how often the backend's model list is re-read, so a
	// model pulled while workerd runs is offered without a restart.
	modelRefresh = time.Minute
	// drainTimeout bounds how long shutdown waits for in-flight jobs.
	drainTimeout = 5 * time.Minute
)

// Config configures an Agent.
type Config struct {
	RelayURL string
	Token    string
	Key      ed25519.PrivateKey
	Backend  backend.Backend
	// Models maps network model ids to backend model names. Empty means
	// every backend model under its own name.
	Models map[string]string
	Log    *slog.Logger
	// Version goes into the registration's agent string.
	Version string
	// RollAfter and DrainTimeout override the defaults (tests).
	RollAfter    time.Duration
	DrainTimeout time.Duration
	// Observer is told of the connection's state, each job and backend
	// errors (metrics); nil observes nothing.
	Observer Observer
	// Ring, when set, makes this worker a member of rings for the models
	// it offers (workerd --shard): they are registered besides the
	// backend's models, the relay's ring messages go to it, and jobs for
	// a ring model this worker drives run on it.
	Ring Ring
}

// Ring is a ring member (workerd/ringmember), as the agent uses it.
type Ring interface {
	// Attach starts membership on a newly registered connection: offers
	// are the ring models the gateway accepted, send writes a message on
	// that connection. It returns at once.
	Attach(offers []relaymsg.RingOffer, send func(any) error)
	// Handle gets each ring control message from the relay.
	Handle(m any)
	// Drives reports whether this worker is the first stage of a serving
	// ring of the model: the gateway sends it the model's jobs.
	Drives(model string) bool
	// Chat runs a job of a ring model this worker drives and returns the
	// ring's settlement for the job's done.
	Chat(ctx context.Context, job *relaymsg.Job, emit func(oaiwire.Delta) error) (backend.Result, *relaymsg.RingDone, error)
}

// Agent runs until its context ends.
type Agent struct {
	cfg Config
	// jobs counts in-flight jobs across sessions, for draining.
	jobs sync.WaitGroup
}

// New makes an Agent.
func New(cfg Config) *Agent {
	if cfg.RollAfter == 0 {
		cfg.RollAfter = rollAfter
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = drainTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	return &Agent{cfg: cfg}
}

// Run connects and serves until ctx ends, then stops taking jobs, lets the
// running ones finish (up to the drain timeout) and closes. It retries a
// connection that fails for a passing reason, with backoff, and returns a
// *RefusedError when the network refuses the worker for good.
func (a *Agent) Run(ctx context.Context) (err error) {
	log, obs := a.cfg.Log, a.cfg.Observer
	backoff := backoffMin
	var current *session
	var rollAt time.Time // when to roll current (or retry a failed roll)
	var retired []*session
	lost := false // the last connection was lost: the next is a reconnect
	obs.RelayState(RelayConnecting)
	defer func() {
		if refused := (*RefusedError)(nil); errors.As(err, &refused) {
			obs.RelayState(RelayRefused)
		} else {
			obs.RelayState(RelayStopped)
		}
	}()
	defer func() {
		if current != nil {
			current.drain()
		}
		a.waitJobs()
		for _, s := range append(retired, current) {
			if s != nil {
				// Past the drain timeout no one can receive an answer:
				// stop the backend rather than leave it running.
				s.cancelJobs()
				s.close("shutting down")
			}
		}
	}()
	for {
		if ctx.Err() != nil {
			return nil
		}
		if current == nil {
			models, err := a.networkModels(ctx)
			local := err != nil // the backend, not the network
			if err == nil {
				current, err = a.connect(ctx, models)
			}
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				var refused *RefusedError
				if errors.As(err, &refused) {
					return err
				}
				wait := jitter(backoff)
				if local {
					wait = min(wait, localBackoffMax)
				}
				log.Warn("not connected; retrying", "err", err, "in", wait.Round(time.Millisecond))
				backoff = min(backoff*2, backoffMax)
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(wait):
				}
				continue
			}
			backoff = backoffMin
			rollAt = current.born.Add(a.cfg.RollAfter)
			obs.RelayState(RelayConnected)
			if lost {
				obs.Reconnected()
				lost = false
			}
		}
		roll := time.NewTimer(time.Until(rollAt))
		refresh := time.NewTimer(modelRefresh)
		select {
		case <-ctx.Done():
			roll.Stop()
			refresh.Stop()
			return nil
		case <-refresh.C:
			roll.Stop()
			a.refreshModels(ctx, current)
		case <-current.dead:
			roll.Stop()
			refresh.Stop()
			log.Warn("relay connection lost", "conn", current.conn, "err", current.err())
			current.cancelJobs() // the relay told the gateway: they move elsewhere
			current = nil
			lost = true
			obs.RelayState(RelayConnecting)
		case <-roll.C:
			refresh.Stop()
			models, err := a.networkModels(ctx)
			var next *session
			if err == nil {
				next, err = a.connect(ctx, models)
			}
			var refused *RefusedError
			if errors.As(err, &refused) {
				// Revoked or banned since: the current connection is
				// being cut off too. Its jobs drain as Run returns.
				return err
			}
			if err != nil {
				// Retry with backoff: the current connection still serves
				// (until the relay's duration cap ends it).
				wait := jitter(backoff)
				backoff = min(backoff*2, backoffMax)
				rollAt = time.Now().Add(wait)
				log.Warn("could not roll the relay connection yet", "err", err, "retry_in", wait.Round(time.Millisecond))
				continue
			}
			backoff = backoffMin
			log.Info("rolled relay connection", "old", current.conn, "new", next.conn)
			old := current
			current = next
			rollAt = current.born.Add(a.cfg.RollAfter)
			retired = append(slices.DeleteFunc(retired, (*session).closed), old)
			old.drain()
			go func() { old.waitJobs(); old.close("rolled") }()
		}
	}
}

// refreshModels re-registers when the backend's models changed (a model
// pulled or removed while workerd runs).
func (a *Agent) refreshModels(ctx context.Context, s *session) {
	models, err := a.networkModels(ctx)
	if err != nil {
		a.cfg.Log.Warn("backend models", "err", err)
		return
	}
	if maps.Equal(models, s.getModels()) {
		return
	}
	s.setModels(models)
	if err := s.send(a.registration(ctx, models)); err != nil {
		a.cfg.Log.Warn("re-register", "err", err)
	}
}

// registration is the Register message for models (network id → backend
// name), with what the backend says each supports. A model whose
// capabilities the backend cannot tell is registered as plain chat.
func (a *Agent) registration(ctx context.Context, models map[string]string) *relaymsg.Register {
	reg := &relaymsg.Register{Models: sortedKeys(models), Agent: a.agentString(), Ring: a.cfg.Ring != nil}
	capable, ok := a.cfg.Backend.(backend.Capable)
	if !ok {
		return reg
	}
	for _, id := range reg.Models {
		c, err := capable.Capabilities(ctx, models[id])
		if err != nil {
			a.cfg.Log.Warn("model capabilities unknown; registering it as plain chat", "model", id, "err", backend.SafeText(err))
			continue
		}
		reg.Caps = append(reg.Caps, relaymsg.ModelCaps{Model: id, Vision: c.Vision, Tools: c.Tools,
			ResponseFormat: c.ResponseFormat, Context: c.Context, Image: c.Image})
	}
	return reg
}

// jitter spreads a backoff wait over ±50 %.
func jitter(backoff time.Duration) time.Duration { return backoff/2 + rand.N(backoff) }

func (a *Agent) agentString() string { return "workerd/" + a.cfg.Version + " " + a.cfg.Backend.Name() }

func sortedKeys(m map[string]string) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (a *Agent) waitJobs() {
	done := make(chan struct{})
	go func() { a.jobs.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(a.cfg.DrainTimeout):
		a.cfg.Log.Warn("drain timeout: closing with jobs still running")
	}
}

// networkModels maps the backend's models to network ids.
func (a *Agent) networkModels(ctx context.Context) (map[string]string, error) {
	have, err := a.cfg.Backend.Models(ctx)
	if err != nil {
		a.cfg.Observer.BackendError("")
		return nil, fmt.Errorf("backend %s: %w", a.cfg.Backend.Name(), err)
	}
	out := map[string]string{}
	if len(a.cfg.Models) == 0 {
		for _, m := range have {
			out[ShortName(m)] = m
		}
	} else {
		for id, name := range a.cfg.Models {
			if i := slices.IndexFunc(have, func(h string) bool { return h == name || ShortName(h) == name }); i >= 0 {
				out[id] = have[i]
			} else {
				a.cfg.Log.Warn("configured model not on the backend", "model", id, "backend_model", name)
			}
		}
	}
	if len(out) == 0 && a.cfg.Ring != nil {
		// A ring member need not serve a whole model.
		return out, nil
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("backend %s serves no model (pull one, or check the models setting)", a.cfg.Backend.Name())
	}
	return out, nil
}

// drives reports whether a job of model runs on this worker's ring.
func (a *Agent) drives(model string) bool {
	return a.cfg.Ring != nil && a.cfg.Ring.Drives(model)
}

// ShortName drops Ollama's default ":latest" tag: users and the network
// name "llama3.2", Ollama lists "llama3.2:latest".
func ShortName(model string) string { return strings.TrimSuffix(model, ":latest") }

// connect opens and registers a session.
// RefusedError is the network refusing this worker for a reason that
// trying again does not change — an unknown or revoked token, a banned
// identity, no model the network serves: Run stops with it, and it says
// what to do.
type RefusedError struct {
	Reason, Fix string
}

func (e *RefusedError) Error() string { return e.Reason + "; " + e.Fix }

const revokedFix = "create a new worker token (POST /v1/worker-tokens with your API key) and run with it"

// refusedAtConnect is the relay's 401 or 403 to a connect, with the
// relay's reason where one came through (API Gateway may pass none).
func refusedAtConnect(status int, why string) *RefusedError {
	switch {
	case strings.Contains(why, "banned"):
		return &RefusedError{Reason: fmt.Sprintf("the relay refused the worker (HTTP %d): %s", status, why),
			Fix: "this identity or token failed the network's checks; GET /v1/workers shows each identity's standing and last reason"}
	case status == http.StatusForbidden:
		if why == "" {
			why = "the worker token was revoked, or this worker is banned"
		}
		return &RefusedError{Reason: fmt.Sprintf("the relay refused the worker (HTTP 403): %s", why), Fix: revokedFix}
	}
	if why == "" {
		why = "an unknown or malformed worker token, or a connect signature out of time"
	}
	return &RefusedError{Reason: fmt.Sprintf("the relay refused the worker (HTTP %d): %s", status, why),
		Fix: "check the worker token (--token or C0MPUTE_WORKER_TOKEN: a cwt_… token made with POST /v1/worker-tokens) and that this machine's clock is right (connects are signed with the time)"}
}

func (a *Agent) connect(ctx context.Context, models map[string]string) (*session, error) {
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	h := http.Header{}
	relaymsg.SignConnect(h, a.cfg.Token, a.cfg.Key, time.Now())
	ws, resp, err := websocket.Dial(dctx, a.cfg.RelayURL, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		if resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
			// The relay says why (a revoked token, a banned identity);
			// API Gateway may say nothing.
			why := ""
			if resp.Body != nil {
				if b, _ := io.ReadAll(io.LimitReader(resp.Body, 512)); len(bytes.TrimSpace(b)) > 0 {
					why = string(bytes.TrimSpace(b))
				}
			}
			if strings.Contains(why, "replayed") {
				// A connect signature seen before: a fresh one is made
				// on the next try.
				return nil, fmt.Errorf("relay refused the worker (HTTP %d): %s: %w", resp.StatusCode, why, err)
			}
			return nil, refusedAtConnect(resp.StatusCode, why)
		}
		return nil, fmt.Errorf("dial relay %s: %w", a.cfg.RelayURL, err)
	}
	ws.SetReadLimit(relaymsg.MaxMessage)
	reg, err := relaymsg.Encode(a.registration(dctx, models))
	if err != nil {
		ws.CloseNow()
		return nil, err
	}
	if err := ws.Write(dctx, websocket.MessageText, reg); err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("register: %w", err)
	}
	// A job may arrive before Registered: the relay dispatches on
	// registration, and API Gateway orders a route response after nothing
	// posted meanwhile. Such messages are kept and handled once registered.
	var early []any
	for {
		_, b, err := ws.Read(dctx)
		if err != nil {
			ws.CloseNow()
			return nil, fmt.Errorf("register: %w", err)
		}
		m, err := relaymsg.Decode(b)
		if err != nil {
			ws.CloseNow()
			return nil, fmt.Errorf("register: %w", err)
		}
		switch m := m.(type) {
		case *relaymsg.Registered:
			if len(m.Ignored) > 0 {
				a.cfg.Log.Warn("the network does not offer some models", "ignored", m.Ignored)
			}
			a.cfg.Log.Info("registered", "conn", m.Conn, "models", m.Models)
			s := newSession(a, ws, m.Conn, models)
			s.batch = time.Duration(m.BatchMillis) * time.Millisecond
			for _, o := range m.Ring {
				s.ringModels[o.Model] = true
			}
			if a.cfg.Ring != nil {
				a.cfg.Ring.Attach(m.Ring, s.send)
			}
			for _, e := range early {
				s.handle(e)
			}
			go s.readLoop()
			go s.heartbeat()
			return s, nil
		case *relaymsg.Error:
			ws.CloseNow()
			switch m.Code {
			case "no_models":
				return nil, &RefusedError{Reason: fmt.Sprintf("the network serves none of this worker's models (%s): %s",
					strings.Join(slices.Sorted(maps.Keys(models)), ", "), m.Message),
					Fix: "serve one of the network's models: --models NETWORK-ID=BACKEND-MODEL (C0MPUTE_MODELS), e.g. --models c0mpute-pro=qwen3:8b"}
			case "revoked":
				return nil, &RefusedError{Reason: "the worker token was revoked", Fix: revokedFix}
			}
			return nil, fmt.Errorf("register refused: %s: %s", m.Code, m.Message)
		case *relaymsg.Job, *relaymsg.ImageJob, *relaymsg.Cancel,
			*relaymsg.RingProbe, *relaymsg.RingAssign, *relaymsg.RingServe, *relaymsg.RingDisband:
			if len(early) >= maxEarly {
				ws.CloseNow()
				return nil, fmt.Errorf("register: %d messages and no registered", len(early))
			}
			early = append(early, m)
		default:
			ws.CloseNow()
			return nil, fmt.Errorf("register: unexpected %T", m)
		}
	}
}

// maxEarly bounds the jobs and cancels kept while waiting for Registered.
const maxEarly = 64

// errClosed is a session's error after an orderly close.
var errClosed = errors.New("session closed")
