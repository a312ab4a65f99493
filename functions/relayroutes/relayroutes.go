// Package relayroutes is the relay function: the $connect, $disconnect and
// $default routes of the WebSocket API that workers and API listeners
// connect to. It authenticates connections, registers workers, forwards
// workers' reply chunks to the listener that holds the client, and starts
// dispatch when a worker registers.
//
// The handler is a plain function over API Gateway's event type: the same
// code runs as a Lambda behind API Gateway and in the local relay.
package relayroutes

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/connections"
	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/metrics"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/store"
)

// Store is what the relay routes need from the store.
type Store interface {
	GetWorkerToken(ctx context.Context, hash string) (store.Secret, error)
	UseNonce(ctx context.Context, nonce string, expires time.Time) error
	PutWorker(ctx context.Context, w store.Worker) error
	RegisterWorker(ctx context.Context, conn string, models []string, caps map[string]store.Caps) (store.Worker, error)
	DrainWorker(ctx context.Context, conn string) (store.Worker, error)
	DeleteWorker(ctx context.Context, conn string) (store.Worker, error)
	PutListener(ctx context.Context, l store.Listener) error
	GetListener(ctx context.Context, conn string) (store.Listener, error)
	DeleteListener(ctx context.Context, conn string) error
	GetJob(ctx context.Context, id string) (store.Job, error)
	Fail(ctx context.Context, jobID, reason string, refund bool, at time.Time) (store.Job, error)
	// Stats is read for the network gauges, only with Metrics set.
	Stats(ctx context.Context, now time.Time) (store.Stats, error)
}

// Connections reaches connections through the management API: posts to
// them, and closes a worker's connection that broke the protocol.
type Connections interface {
	Post(ctx context.Context, conn string, data []byte) error
	Delete(ctx context.Context, conn string) error
}

// Dispatcher starts dispatch for models.
type Dispatcher interface {
	Dispatch(ctx context.Context, models []string) (int, error)
	// Registered says a worker now serves its models, so that cached
	// idle lists of this process include it at once.
	Registered(w store.Worker)
}

// Rings forms the rings of the catalogue's ring models (rings.Former):
// it is told of registrations and departures, and handles the members'
// ring messages.
type Rings interface {
	// Offers are the ring models among models it forms rings of.
	Offers(models []string) []relaymsg.RingOffer
	// Register records w's ring models (after its registration) and
	// returns their offers.
	Register(ctx context.Context, w store.Worker, models []string) []relaymsg.RingOffer
	// Message handles ring_announce, ring_rtt, ring_ready and ring_refuse
	// and returns the reply, if any.
	Message(ctx context.Context, conn string, m any) []byte
	// Left says a connection is gone.
	Left(ctx context.Context, conn string)
}

// Handler serves the relay routes.
type Handler struct {
	Store    Store
	Post     Connections
	Dispatch Dispatcher
	Catalog  *catalog.Catalog
	// Rings forms the rings of ring models; nil serves none: ring models
	// in a registration are ignored, and ring messages are answered with
	// an error.
	Rings Rings
	// ListenerSecret authenticates API listener connections.
	ListenerSecret string
	// BatchWindow is what workers are told to gather into one chunk.
	BatchWindow time.Duration
	Log         *slog.Logger
	Now         func() time.Time
	// Metrics receives the relay's metrics: refunds, and the network
	// gauges (see gaugesAfter); nil turns them off.
	Metrics *metrics.Emitter

	// listeners caches known listener connections (for hello), which are
	// few and long-lived, so the check costs no store round trip after the
	// first.
	listeners sync.Map

	ticketsOnce sync.Once
	tickets     *relaymsg.Ticketer

	gaugesOnce sync.Once
	gauges     metrics.Gauges
}

// ticketer checks job tickets, under the key derived from ListenerSecret
// (the API derives the same).
func (h *Handler) ticketer() *relaymsg.Ticketer {
	h.ticketsOnce.Do(func() { h.tickets = relaymsg.NewTicketer(h.ListenerSecret) })
	return h.tickets
}

// Handle routes one event.
func (h *Handler) Handle(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	defer h.gaugesAfter(ctx)
	conn := req.RequestContext.ConnectionID
	switch req.RequestContext.RouteKey {
	case "$connect":
		status, err := h.connect(ctx, conn, req.Headers)
		if err != nil {
			h.Log.Info("connection refused", "conn", conn, "status", status, "reason", err)
			return events.APIGatewayProxyResponse{StatusCode: status, Body: err.Error()}, nil
		}
		return events.APIGatewayProxyResponse{StatusCode: http.StatusOK}, nil
	case "$disconnect":
		h.disconnect(ctx, conn)
		return events.APIGatewayProxyResponse{StatusCode: http.StatusOK}, nil
	default:
		reply := h.message(ctx, conn, []byte(req.Body))
		return events.APIGatewayProxyResponse{StatusCode: http.StatusOK, Body: string(reply)}, nil
	}
}

func (h *Handler) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// header reads a header case-insensitively: API Gateway passes them as sent.
func header(hs map[string]string) func(string) string {
	return func(name string) string {
		if v, ok := hs[name]; ok {
			return v
		}
		for k, v := range hs {
			if strings.EqualFold(k, name) {
				return v
			}
		}
		return ""
	}
}

func (h *Handler) connect(ctx context.Context, conn string, hs map[string]string) (int, error) {
	get := header(hs)
	now := h.now()
	if secret := get(relaymsg.HeaderListener); secret != "" {
		if h.ListenerSecret == "" || subtle.ConstantTimeCompare([]byte(secret), []byte(h.ListenerSecret)) != 1 {
			return http.StatusUnauthorized, errors.New("bad listener secret")
		}
		if err := h.Store.PutListener(ctx, store.Listener{Conn: conn, ConnectedAt: now}); err != nil {
			return http.StatusInternalServerError, fmt.Errorf("store listener: %w", err)
		}
		h.listeners.Store(conn, true)
		return http.StatusOK, nil
	}
	proof, err := relaymsg.VerifyConnect(get, now)
	if err != nil {
		return http.StatusUnauthorized, err
	}
	if !credential.WellFormed(credential.WorkerTokenPrefix, proof.Token) {
		return http.StatusUnauthorized, errors.New("worker token is not a cwt_ token")
	}
	hash := credential.Hash(proof.Token)
	tok, err := h.Store.GetWorkerToken(ctx, hash)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return http.StatusUnauthorized, errors.New("unknown worker token")
	case err != nil:
		return http.StatusInternalServerError, fmt.Errorf("look up worker token: %w", err)
	case !tok.Active():
		return http.StatusForbidden, errors.New("worker token revoked")
	}
	switch err := h.Store.UseNonce(ctx, proof.Nonce, proof.Expires); {
	case errors.Is(err, store.ErrExists):
		return http.StatusUnauthorized, errors.New("connect signature replayed")
	case err != nil:
		return http.StatusInternalServerError, fmt.Errorf("record connect nonce: %w", err)
	}
	w := store.Worker{Conn: conn, AccountID: tok.AccountID, TokenHash: hash, Pubkey: proof.Pubkey,
		State: store.WorkerIdle, ConnectedAt: now}
	switch err := h.Store.PutWorker(ctx, w); {
	case errors.Is(err, store.ErrRevoked):
		return http.StatusForbidden, errors.New("worker token revoked")
	case errors.Is(err, store.ErrBanned):
		return http.StatusForbidden, errors.New("worker banned: this identity or worker token failed the network's checks")
	case errors.Is(err, store.ErrLimit):
		return http.StatusTooManyRequests, fmt.Errorf("this worker token already has %d live connections", store.MaxConnsPerToken)
	case err != nil:
		return http.StatusInternalServerError, fmt.Errorf("store worker: %w", err)
	}
	return http.StatusOK, nil
}

func (h *Handler) disconnect(ctx context.Context, conn string) {
	w, err := h.Store.DeleteWorker(ctx, conn)
	if h.Rings != nil {
		// After the record is gone: a ring it drove is voided and must
		// not write the record back.
		h.Rings.Left(ctx, conn)
	}
	if errors.Is(err, store.ErrNotFound) {
		h.listeners.Delete(conn)
		if err := h.Store.DeleteListener(ctx, conn); err != nil && !errors.Is(err, store.ErrNotFound) {
			h.Log.Error("delete listener", "conn", conn, "err", err)
		}
		return
	}
	if err != nil {
		h.Log.Error("delete worker", "conn", conn, "err", err)
		return
	}
	if w.Job == "" {
		return
	}
	// The worker held a job: its listener decides between moving it to
	// another worker and failing it, since only the listener knows whether
	// a token already reached the client.
	job, err := h.Store.GetJob(ctx, w.Job)
	if err != nil {
		h.Log.Error("job of lost worker", "job", w.Job, "err", err)
		return
	}
	msg, err := relaymsg.Encode(&relaymsg.Lost{Job: job.ID, Worker: conn})
	if err == nil {
		err = h.Post.Post(ctx, job.Listener, msg)
	}
	if err != nil {
		h.failJob(ctx, job.ID, conn, "worker_lost")
	}
}

// failJob ends a job nobody can finish any more, refunded: neither its
// worker nor its listener can be reached, and neither is the user's fault.
// Only a job still assigned to worker, the connection whose event this is,
// is failed: a job that moved on belongs to its new worker, and one that
// ended (done, or failed without a refund because its client left) is
// settled for good — an old ticket must not buy a refund.
func (h *Handler) failJob(ctx context.Context, jobID, worker, reason string) {
	cur, err := h.Store.GetJob(ctx, jobID)
	if err != nil {
		h.Log.Error("fail job: read it", "job", jobID, "err", err)
		return
	}
	if cur.State != store.JobAssigned || cur.Worker != worker {
		h.Log.Info("job no longer with this worker; not failing it", "job", jobID, "state", cur.State)
		return
	}
	at := h.now()
	job, err := h.Store.Fail(ctx, jobID, reason, true, at)
	if err != nil {
		if !errors.Is(err, store.ErrConflict) { // done already: nothing to undo
			h.Log.Error("fail job", "job", jobID, "reason", reason, "err", err)
		}
		return
	}
	h.Log.Info("job failed", "job", jobID, "reason", reason)
	h.putRefund(job, reason, at)
	if _, err := h.Dispatch.Dispatch(ctx, []string{job.Model}); err != nil {
		h.Log.Error("dispatch after failure", "model", job.Model, "err", err)
	}
}

// message handles one $default message and returns the reply to send back
// on the same connection, if any.
func (h *Handler) message(ctx context.Context, conn string, body []byte) []byte {
	m, err := relaymsg.Decode(body)
	if err != nil {
		if typ := relaymsg.PeekType(body); typ == relaymsg.TypeDone || typ == relaymsg.TypeFail {
			// A job's last message that cannot be read (a done without
			// a valid receipt, say) can end no job: left alone, the job
			// would wait for its deadline. The sender broke the
			// protocol and is cut off; its disconnect tells the
			// listener of any job it held, which moves the job or ends
			// it with a refund — the sender earns nothing for it.
			h.cutOff(ctx, conn, "unreadable "+typ, err)
			return errorReply("bad_message", err.Error()+"; the connection is closed")
		}
		return errorReply("bad_message", err.Error())
	}
	switch m := m.(type) {
	case *relaymsg.Register:
		return h.register(ctx, conn, m)
	case *relaymsg.Heartbeat:
		return nil
	case *relaymsg.Hello:
		if !h.isListener(ctx, conn) {
			return errorReply("forbidden", "hello is for listener connections")
		}
		return encode(&relaymsg.Welcome{Conn: conn})
	case *relaymsg.Drain:
		if _, err := h.Store.DrainWorker(ctx, conn); err != nil {
			return errorReply("not_registered", "drain: "+err.Error())
		}
		return nil
	case *relaymsg.Chunk:
		m.From = conn
		return h.forward(ctx, conn, m.Job, m.To, m.Ticket, m)
	case *relaymsg.Done:
		m.From = conn
		return h.forward(ctx, conn, m.Job, m.To, m.Ticket, m)
	case *relaymsg.Fail:
		m.From = conn
		return h.forward(ctx, conn, m.Job, m.To, m.Ticket, m)
	case *relaymsg.RingAnnounce, *relaymsg.RingRTT, *relaymsg.RingReady, *relaymsg.RingRefuse:
		if h.Rings == nil {
			return errorReply("no_rings", "rings are not served by this gateway")
		}
		return h.Rings.Message(ctx, conn, m)
	}
	return errorReply("unexpected_message", fmt.Sprintf("%T is not sent to the relay", m))
}

// maxListed bounds the model ids a no_models refusal lists.
const maxListed = 20

// register registers the whole models of m as served. Ring models — those
// it names, and every one the gateway forms rings of when it offers itself
// as a ring member (m.Ring) — are accepted without being served (a ring's
// first stage serves its model once the ring forms) and offered in
// Registered.Ring.
func (h *Handler) register(ctx context.Context, conn string, m *relaymsg.Register) []byte {
	var models, ringNames, ignored []string
	for _, name := range m.Models {
		model, ok := h.Catalog.Resolve(name)
		switch {
		case !ok || (model.Ring != nil && h.Rings == nil):
			ignored = append(ignored, name)
		case model.Ring != nil:
			ringNames = append(ringNames, name)
		case !slices.Contains(models, model.ID):
			models = append(models, model.ID)
		}
	}
	named := len(ringNames)
	if m.Ring && h.Rings != nil {
		for _, model := range h.Catalog.Models() {
			if model.Ring != nil {
				ringNames = append(ringNames, model.ID)
			}
		}
	}
	var ring []string
	if h.Rings != nil {
		offers := h.Rings.Offers(ringNames)
		for i, name := range ringNames {
			model, _ := h.Catalog.Resolve(name)
			switch {
			case slices.ContainsFunc(offers, func(o relaymsg.RingOffer) bool { return o.Model == model.ID }):
				if !slices.Contains(ring, model.ID) {
					ring = append(ring, model.ID)
				}
			case i < named:
				ignored = append(ignored, name) // its published files did not load
			}
		}
	}
	if len(models) == 0 && len(ring) == 0 {
		offered := h.Catalog.IDs()
		if len(offered) > maxListed {
			offered = append(offered[:maxListed], "…")
		}
		msg := "this network serves " + strings.Join(offered, ", ") + " (and their aliases)"
		if m.Ring {
			msg += "; this gateway forms no ring a member could join"
		}
		return errorReply("no_models", msg)
	}
	w, err := h.Store.RegisterWorker(ctx, conn, models, h.caps(m))
	switch {
	case errors.Is(err, store.ErrRevoked), errors.Is(err, store.ErrNotFound):
		// The token was revoked while this connection was being made (the
		// revoke's disconnect could not see it yet), or the connection was
		// dropped: it must not live on.
		h.cutOff(ctx, conn, "registration refused", err)
		return errorReply("revoked", "the worker token was revoked; the connection is closed")
	case err != nil:
		return errorReply("not_registered", "register: "+err.Error())
	}
	var offers []relaymsg.RingOffer
	if h.Rings != nil {
		// Also with none: a registration replaces the ring models of one
		// before it.
		offers = h.Rings.Register(ctx, w, ring)
	}
	h.Log.Info("worker registered", "conn", conn, "pubkey", w.Pubkey, "models", models, "ring", ring, "agent", m.Agent)
	// A worker that registers takes the oldest waiting job at once, and
	// is seen by this process's next request without waiting for its
	// cached idle lists to expire.
	h.Dispatch.Registered(w)
	if _, err := h.Dispatch.Dispatch(ctx, models); err != nil {
		h.Log.Error("dispatch on registration", "conn", conn, "err", err)
	}
	return encode(&relaymsg.Registered{Conn: conn, Models: models, Ignored: ignored,
		BatchMillis: int(h.BatchWindow / time.Millisecond), Ring: offers})
}

// caps are a registration's capabilities by catalog model id, for the
// models it registered (an entry for another is ignored).
func (h *Handler) caps(m *relaymsg.Register) map[string]store.Caps {
	out := map[string]store.Caps{}
	for _, c := range m.Caps {
		model, ok := h.Catalog.Resolve(c.Model)
		if !ok || !slices.Contains(m.Models, c.Model) {
			continue
		}
		out[model.ID] = store.Caps{Vision: c.Vision, Tools: c.Tools, ResponseFormat: c.ResponseFormat, Context: c.Context, Image: c.Image}
	}
	return out
}

// forward relays a worker's chunk, done or fail message to the listener
// that holds the job, stamped with the sender. Only the worker the job was
// handed to can send it: the message's ticket must be the one the API issued
// for this job, this sending connection and this listener, so nobody can
// push text into another's reply, finish or fail a job they do not hold, or
// make the relay act on someone else's job. The listener decides what its
// job's messages mean; the relay only delivers them.
func (h *Handler) forward(ctx context.Context, conn, job, to, ticket string, m any) []byte {
	if !h.ticketer().Valid(ticket, job, conn, to) {
		h.Log.Warn("message for a job the sender does not hold", "conn", conn, "job", job)
		return errorReply("forbidden", "this connection holds no such job")
	}
	b, err := relaymsg.Encode(m)
	if err != nil {
		// The sender's own message does not fit once stamped: it broke
		// the protocol (a worker keeps its messages well under the
		// limit). It is cut off; its disconnect tells the listener, which
		// moves the job or ends it — the sender earns nothing for it.
		h.cutOff(ctx, conn, "message too large to relay", err)
		return errorReply("too_large", "message too large to relay; the connection is closed")
	}
	err = h.Post.Post(ctx, to, b)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, connections.ErrGone):
		// The API instance that held the client (and the prompt) is
		// gone: nobody can receive the reply. The ticket proves this
		// is the job's worker and listener, so only the job's own party
		// can trigger this, and the user, who got nothing, is refunded.
		h.listeners.Delete(to)
		h.Log.Warn("listener gone; cancelling job", "job", job, "listener", to)
		h.failJob(ctx, job, conn, "listener_gone")
		return encode(&relaymsg.Cancel{Job: job})
	default:
		// A message lost on the way leaves a gap the listener cannot
		// close: tell it the worker is lost, so it moves the job (nothing
		// reached the client yet) or ends it with an error — the
		// listener's decision, as for a disconnect.
		h.Log.Warn("listener unreachable; reporting the worker lost", "job", job, "listener", to, "err", err)
		if lost, lerr := relaymsg.Encode(&relaymsg.Lost{Job: job, Worker: conn}); lerr == nil {
			if perr := h.Post.Post(ctx, to, lost); perr != nil {
				h.Log.Warn("report lost worker", "job", job, "err", perr)
			}
		}
		return encode(&relaymsg.Cancel{Job: job})
	}
}

// cutOff closes a worker's connection that broke the protocol. Its
// $disconnect follows and settles whatever job it held.
func (h *Handler) cutOff(ctx context.Context, conn, why string, cause error) {
	h.Log.Warn("closing connection", "conn", conn, "why", why, "err", cause)
	if err := h.Post.Delete(ctx, conn); err != nil {
		h.Log.Error("close connection", "conn", conn, "err", err)
	}
}

func (h *Handler) isListener(ctx context.Context, conn string) bool {
	if _, ok := h.listeners.Load(conn); ok {
		return true
	}
	if _, err := h.Store.GetListener(ctx, conn); err != nil {
		return false
	}
	h.listeners.Store(conn, true)
	return true
}

func encode(m any) []byte {
	b, err := relaymsg.Encode(m)
	if err != nil { // our own small messages always encode
		return errorReply("internal", "encode reply")
	}
	return b
}

func errorReply(code, msg string) []byte {
	b, _ := json.Marshal(relaymsg.Error{Header: relaymsg.Header{V: relaymsg.Version, Type: relaymsg.TypeError}, Code: code, Message: msg})
	return b
}

// gaugesAfter writes the network gauges (QueueDepth and OnlineWorkers of
// every catalog model, from the store's counters: two batch reads, never a
// scan) at most once a minute per instance, after an event.
//
// Why here: the relay runs whenever anything happens on the network, and
// while nothing does, for every connection's heartbeat (workers' and API
// listeners', each every 4 minutes), so with workers connected it runs
// several times a minute in a network of any size, where the API runs only
// on requests and the keeper on its schedule. Gauges stop with the
// connections: no data then, which the alarms take as breaching. Written
// in the event's own invocation, since Lambda freezes the instance after
// it: one event a minute waits for the read.
func (h *Handler) gaugesAfter(ctx context.Context) {
	if h.Metrics == nil {
		return
	}
	h.gaugesOnce.Do(func() { h.gauges.Emitter = h.Metrics })
	if !h.gauges.Due(h.now()) {
		return
	}
	st, err := h.Store.Stats(ctx, h.now())
	if err != nil {
		h.Log.Warn("network gauges", "err", err)
		return
	}
	h.gauges.Put(h.Catalog.IDs(), st.QueueByModel, st.WorkersByModel)
}

// putRefund counts a job this relay's Fail (with reason at at) refunded:
// one failed and refunded before comes back with its own reason and time.
// The model is a catalog id or "other", never a string a client chose.
func (h *Handler) putRefund(job store.Job, reason string, at time.Time) {
	if h.Metrics == nil || !job.Refunded || job.Canary || job.FailReason != reason || !job.Updated.Equal(at) {
		return
	}
	model := "other"
	if m, ok := h.Catalog.Resolve(job.Model); ok && m.ID == job.Model {
		model = m.ID
	}
	h.Metrics.Put([]metrics.Dim{{Name: "Model", Value: model}},
		metrics.Metric{Name: metrics.Refunds, Unit: metrics.UnitCount, Value: 1})
}
