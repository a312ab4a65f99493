package relay

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// API Gateway WebSocket quotas, from "Amazon API Gateway quotas for
// configuring and running a WebSocket API" in the API Gateway developer
// guide (docs.aws.amazon.com/apigateway/latest/developerguide/apigateway-execution-service-websocket-limits-table.html).
const (
	// MaxMessage is the "Message payload size" quota: 128 KB. A larger
	// incoming message closes the connection with 1009; a larger
	// PostToConnection body is refused with 413 PayloadTooLargeException.
	// The quota's other half, "WebSocket frame size" of 32 KB, binds
	// clients (a message over 32 KB must be sent as several frames); the
	// relay reassembles frames and checks only the message.
	MaxMessage = 128 * 1024

	// IdleTimeout is the "Idle Connection Timeout" quota: 10 minutes.
	IdleTimeout = 10 * time.Minute

	// MaxDuration is the "Connection duration for WebSocket API" quota:
	// 2 hours.
	MaxDuration = 2 * time.Hour

	// IntegrationTimeout is the longest a WebSocket route's integration may
	// run ("Integration timeout": 50 milliseconds – 29 seconds); every
	// handler call gets a context with this deadline, as a Lambda does.
	IntegrationTimeout = 29 * time.Second

	// DefaultWriteTimeout bounds one write to a WebSocket (a post, a
	// route response). A client that does not read for this long is cut
	// off rather than allowed to hold management calls; AWS's equivalent
	// is a LimitExceededException once the client's buffer is full. This is
	// a local choice, not an AWS quota.
	DefaultWriteTimeout = 10 * time.Second
)

// Handler handles API Gateway WebSocket events. The relay function
// implements it; in AWS the same method runs behind lambda.Start.
type Handler interface {
	Handle(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	return f(ctx, req)
}

// Option configures a Relay.
type Option func(*Relay)

// WithLogger sets the logger; the default discards. The relay logs
// connection lifecycle and failures, never message contents.
func WithLogger(l *slog.Logger) Option {
	return func(r *Relay) {
		if l != nil {
			r.log = l
		}
	}
}

// WithMaxMessage sets the message size limit (default MaxMessage). A
// non-positive n keeps the default, as do non-positive durations below.
func WithMaxMessage(n int) Option {
	return func(r *Relay) {
		if n > 0 {
			r.maxMessage = n
		}
	}
}

// WithIdleTimeout sets the idle timeout (default IdleTimeout).
func WithIdleTimeout(d time.Duration) Option {
	return func(r *Relay) {
		if d > 0 {
			r.idleTimeout = d
		}
	}
}

// WithMaxDuration sets the connection duration cap (default MaxDuration).
func WithMaxDuration(d time.Duration) Option {
	return func(r *Relay) {
		if d > 0 {
			r.maxDuration = d
		}
	}
}

// WithWriteTimeout sets the timeout of one WebSocket write (default
// DefaultWriteTimeout).
func WithWriteTimeout(d time.Duration) Option {
	return func(r *Relay) {
		if d > 0 {
			r.writeTimeout = d
		}
	}
}

// WithStage sets RequestContext.Stage (default "local").
func WithStage(s string) Option { return func(r *Relay) { r.stage = s } }

// WithDomainName sets RequestContext.DomainName. By default it is the Host
// the client connected to, so that https://{DomainName}/{Stage} — the
// management endpoint in AWS — becomes http://{host:port}/{stage} here,
// which this relay serves.
func WithDomainName(s string) Option { return func(r *Relay) { r.domainName = s } }

// WithAPIID sets RequestContext.APIID (default "local").
func WithAPIID(s string) Option { return func(r *Relay) { r.apiID = s } }

// WithCredentials sets the one AWS access key the management API accepts:
// every management call must carry a SigV4 signature made with this key id
// and secret, as API Gateway requires of IAM-authorised callers. Without
// it (or with an empty id or secret) the management API refuses every
// call: it fails closed.
func WithCredentials(accessKeyID, secretAccessKey string) Option {
	return func(r *Relay) {
		r.accessKeyID, r.secretAccessKey = accessKeyID, secretAccessKey
	}
}

// WithClock sets the clock that a management call's X-Amz-Date is checked
// against (default time.Now). The connection timers (idle, duration, write)
// run on real time regardless.
func WithClock(now func() time.Time) Option {
	return func(r *Relay) {
		if now != nil {
			r.now = now
		}
	}
}

// Relay is a local API Gateway WebSocket API. Serve the relay itself (the
// worker-facing WebSocket endpoint) and Management (the @connections API)
// with two http.Servers, the second on a loopback address; call Close to
// end every connection.
type Relay struct {
	h            Handler
	log          *slog.Logger
	maxMessage   int
	idleTimeout  time.Duration
	maxDuration  time.Duration
	writeTimeout time.Duration
	stage        string
	domainName   string
	apiID        string
	// accessKeyID and secretAccessKey are the management API's one
	// credential; empty, it refuses every call.
	accessKeyID     string
	secretAccessKey string
	now             func() time.Time

	mu      sync.Mutex
	conns   map[string]*conn    // open connections: management calls reach these
	pending map[string]struct{} // ids whose $connect is running
	closed  bool
	wg      sync.WaitGroup // one per WebSocket request being served
	// signer verifies management calls. It caches the signing keys it
	// derives (four HMACs per key id, day, region and service) under the
	// key id alone, which is why it is this relay's, whose credentials are
	// fixed: shared across relays, one relay's secret would answer for
	// another's with the same key id.
	signer *v4.Signer
}

// New returns a relay that sends every event to h.
func New(h Handler, opts ...Option) *Relay {
	r := &Relay{
		h:            h,
		log:          slog.New(slog.DiscardHandler),
		maxMessage:   MaxMessage,
		idleTimeout:  IdleTimeout,
		maxDuration:  MaxDuration,
		writeTimeout: DefaultWriteTimeout,
		stage:        "local",
		apiID:        "local",
		now:          time.Now,
		conns:        make(map[string]*conn),
		signer:       v4.NewSigner(),
		pending:      make(map[string]struct{}),
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

// ServeHTTP serves the worker-facing endpoint: WebSocket upgrades on any
// path. A request for the management API ([/{stage}]/@connections/…) is
// refused with 403 ForbiddenException, as API Gateway answers a route it
// does not have, and never reaches a connection: that API is served only
// by Management, on a listener of its own.
func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if isManagementPath(req.URL.Path) {
		w.Header().Set("X-Amzn-RequestId", newID())
		writeError(w, http.StatusForbidden, errForbidden, "Forbidden")
		return
	}
	r.serveWebSocket(w, req)
}

// Handler returns r as an http.Handler: the worker-facing endpoint.
func (r *Relay) Handler() http.Handler { return r }

// Management returns the @connections management API
// (POST/GET/DELETE [/{stage}]/@connections/{connectionId}). Serve it on its
// own listener, bound to loopback: every call must be SigV4-signed with the
// credentials of WithCredentials, and without them every call is refused.
func (r *Relay) Management() http.Handler {
	if r.accessKeyID == "" || r.secretAccessKey == "" {
		r.log.Warn("relay: no management credentials (WithCredentials): every @connections call will be refused")
	}
	return http.HandlerFunc(r.serveManagement)
}

// Close ends every connection with 1001 (going away), waits until each one's
// $disconnect event has been handled, and refuses new connections with 503.
// It does not stop the http.Server serving r: hijacked WebSocket
// connections are beyond http.Server.Shutdown, which is why this exists.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.closed = true
	open := make([]*conn, 0, len(r.conns))
	for _, c := range r.conns {
		open = append(open, c)
	}
	r.mu.Unlock()
	for _, c := range open {
		c.shut(closeCause{code: 1001, reason: "Going away"})
	}
	r.wg.Wait()
	return nil
}

// Len reports the number of open connections.
func (r *Relay) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}

// reserve picks a fresh connection id and marks it pending, or reports that
// the relay is closed. On success the caller owns one count of r.wg.
func (r *Relay) reserve() (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return "", false
	}
	for {
		id := newID()
		_, open := r.conns[id]
		_, pend := r.pending[id]
		if !open && !pend {
			r.pending[id] = struct{}{}
			r.wg.Add(1)
			return id, true
		}
	}
}

// open turns a pending id into an open connection; it fails if the relay
// closed meanwhile.
func (r *Relay) open(c *conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pending, c.id)
	if r.closed {
		return false
	}
	r.conns[c.id] = c
	return true
}

// unreserve drops a pending id whose connection never opened.
func (r *Relay) unreserve(id string) {
	r.mu.Lock()
	delete(r.pending, id)
	r.mu.Unlock()
}

func (r *Relay) remove(c *conn) {
	r.mu.Lock()
	if r.conns[c.id] == c {
		delete(r.conns, c.id)
	}
	r.mu.Unlock()
}

func (r *Relay) lookup(id string) *conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns[id]
}

// idBytes random bytes encode to 15 base64 characters and one "=", the
// shape of API Gateway's connection, message and request ids. The URL-safe
// alphabet keeps ids path-safe.
const idBytes = 11

// idLen is the length of an id.
const idLen = 16

func newID() string {
	var b [idBytes]byte
	// crypto/rand.Read never fails (it crashes the program instead).
	_, _ = rand.Read(b[:])
	return base64.URLEncoding.EncodeToString(b[:])
}

// invoke calls the handler as Lambda would: with a deadline, and with a
// panic turned into an error.
func (r *Relay) invoke(ev events.APIGatewayWebsocketProxyRequest) (resp events.APIGatewayProxyResponse, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), IntegrationTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("relay: %s handler panicked: %v", ev.RequestContext.RouteKey, p)
		}
	}()
	return r.h.Handle(ctx, ev)
}
