package relay

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/coder/websocket"
)

// Route keys and event types of API Gateway WebSocket events.
const (
	RouteConnect    = "$connect"
	RouteDefault    = "$default"
	RouteDisconnect = "$disconnect"

	EventConnect    = "CONNECT"
	EventMessage    = "MESSAGE"
	EventDisconnect = "DISCONNECT"
)

// requestTimeLayout is the format of RequestContext.RequestTime.
const requestTimeLayout = "02/Jan/2006:15:04:05 -0700"

// closeCause is why a connection ended: the close code and reason that go
// into the $disconnect event.
type closeCause struct {
	code   websocket.StatusCode
	reason string
}

// conn is one open WebSocket connection.
type conn struct {
	r           *Relay
	id          string
	ws          *websocket.Conn
	connectedAt time.Time
	sourceIP    string
	userAgent   string
	host        string
	lastActive  atomic.Int64 // unix nanoseconds of the last client message

	// writeMu makes each message one uninterrupted write and keeps posts
	// from blocking each other's timeouts in the library.
	writeMu sync.Mutex

	mu    sync.Mutex
	cause *closeCause   // set once, by whoever ends the connection first
	kill  chan struct{} // closed by shut: the supervisor closes the socket

	// peer is the other end of an in-process connection (Local.Connect),
	// which has no socket (ws is nil).
	peer *localPeer
}

// shut ends the connection once: it records the cause, makes the id
// unknown to management calls, and has the supervisor close the socket.
// Later calls do nothing.
func (c *conn) shut(cause closeCause) {
	c.mu.Lock()
	if c.cause != nil {
		c.mu.Unlock()
		return
	}
	c.cause = &cause
	c.mu.Unlock()
	c.r.remove(c)
	close(c.kill)
}

// ended reports whether shut has been called.
func (c *conn) ended() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause != nil
}

func (c *conn) closeCause() closeCause {
	c.mu.Lock()
	defer c.mu.Unlock()
	return *c.cause
}

// write sends one message under the connection's write lock. It never
// uses a caller's context: the library closes a connection whose write is
// cancelled, and a management client giving up must not do that.
func (c *conn) write(typ websocket.MessageType, data []byte) error {
	// The timeout starts once the lock is held: time queued behind
	// another post is not this write's slowness.
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.peer != nil {
		return c.peer.deliver(c, data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.r.writeTimeout)
	defer cancel()
	return c.ws.Write(ctx, typ, data)
}

func (r *Relay) serveWebSocket(w http.ResponseWriter, req *http.Request) {
	if status, msg := checkUpgrade(req); status != 0 {
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "websocket")
		http.Error(w, msg, status)
		return
	}
	id, ok := r.reserve()
	if !ok {
		http.Error(w, "relay is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer r.wg.Done()

	now := time.Now()
	c := &conn{
		r:           r,
		id:          id,
		connectedAt: now,
		sourceIP:    sourceIP(req),
		userAgent:   req.UserAgent(),
		host:        req.Host,
		kill:        make(chan struct{}),
	}
	c.lastActive.Store(now.UnixNano())

	ev := c.event(RouteConnect, EventConnect, now)
	ev.Headers, ev.MultiValueHeaders = headers(req)
	ev.QueryStringParameters, ev.MultiValueQueryStringParameters = query(req)
	resp, err := r.invoke(ev)
	if status := connectStatus(resp, err); status != 0 {
		r.unreserve(id)
		r.log.Info("relay: connect refused", "conn", id, "status", status, "err", err)
		if err != nil {
			resp = events.APIGatewayProxyResponse{
				Headers: map[string]string{"Content-Type": "application/json"},
				Body:    `{"message": "Internal server error"}`,
			}
		}
		writeProxyResponse(w, resp, status)
		return
	}

	opts := &websocket.AcceptOptions{
		// API Gateway checks no Origin; browsers' cross-origin rules are
		// for an authorizer to enforce.
		InsecureSkipVerify: true,
		// API Gateway does not negotiate permessage-deflate.
		CompressionMode: websocket.CompressionDisabled,
	}
	if p := responseHeader(resp, "Sec-WebSocket-Protocol"); p != "" {
		opts.Subprotocols = []string{p}
	}
	ws, err := websocket.Accept(clearDeadlines{w}, req, opts)
	if err != nil {
		// $connect succeeded, so the connection existed for the handler:
		// it gets its $disconnect.
		r.unreserve(id)
		r.log.Warn("relay: accept failed after $connect", "conn", id, "err", err)
		c.cause = &closeCause{code: websocket.StatusAbnormalClosure, reason: "handshake failed"}
		r.disconnect(c)
		return
	}
	ws.SetReadLimit(int64(r.maxMessage))
	c.ws = ws
	if !r.open(c) {
		c.cause = &closeCause{code: websocket.StatusGoingAway, reason: "Going away"}
		_ = ws.Close(websocket.StatusGoingAway, "Going away")
		r.disconnect(c)
		return
	}
	r.log.Info("relay: connected", "conn", id, "source_ip", c.sourceIP)

	supervised := make(chan struct{})
	readDone := make(chan struct{})
	go func() {
		defer close(supervised)
		c.supervise(readDone)
	}()
	c.readLoop()
	close(readDone)
	<-supervised
	_ = ws.CloseNow() // no-op after a close handshake; frees the socket otherwise
	r.disconnect(c)
}

// clearDeadlines hands websocket.Accept a hijacked connection without the
// http.Server's deadlines. The server sets them for the upgrade request
// (ReadTimeout, WriteTimeout) and http.Hijacker says they may survive the
// hijack; coder/websocket does not clear them (v1.8.15: accept.go hijacks
// and wraps the conn as is). Left in place they would end every WebSocket
// ReadTimeout after its upgrade, where a connection lives up to
// MaxDuration; the relay's own timers bound it instead.
type clearDeadlines struct{ http.ResponseWriter }

// Hijack hijacks the underlying connection and clears its deadlines.
func (w clearDeadlines) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		_ = c.Close()
		return nil, nil, fmt.Errorf("relay: clear the deadlines of a hijacked connection: %w", err)
	}
	return c, brw, nil
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w clearDeadlines) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// readLoop turns messages into $default events, one at a time, until the
// connection ends; then it records why, unless someone already did.
func (c *conn) readLoop() {
	for {
		typ, data, err := c.ws.Read(context.Background())
		if err != nil {
			c.shut(readCause(err))
			return
		}
		if c.ended() {
			// Deleted, timed out or shutting down: like AWS, deliver
			// nothing more from a connection that is gone.
			continue
		}
		now := time.Now()
		c.lastActive.Store(now.UnixNano())
		c.message(typ, data, now)
	}
}

func readCause(err error) closeCause {
	if errors.Is(err, websocket.ErrMessageTooBig) {
		return closeCause{code: websocket.StatusMessageTooBig, reason: "Message too big"}
	}
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return closeCause{code: ce.Code, reason: ce.Reason}
	}
	return closeCause{code: websocket.StatusAbnormalClosure, reason: "Connection closed abnormally"}
}

// supervise enforces the idle timeout and duration cap and performs the
// close handshake of a connection the relay ends.
func (c *conn) supervise(readDone <-chan struct{}) {
	r := c.r
	maxTimer := time.NewTimer(r.maxDuration)
	defer maxTimer.Stop()
	idleTimer := time.NewTimer(r.idleTimeout)
	defer idleTimer.Stop()
	for {
		select {
		case <-readDone:
			return
		case <-c.kill:
		case <-maxTimer.C:
			r.log.Info("relay: connection duration limit", "conn", c.id)
			c.shut(closeCause{code: websocket.StatusGoingAway, reason: "Connection duration limit reached"})
		case <-idleTimer.C:
			idle := time.Since(time.Unix(0, c.lastActive.Load()))
			if idle < r.idleTimeout {
				idleTimer.Reset(r.idleTimeout - idle)
				continue
			}
			r.log.Info("relay: idle timeout", "conn", c.id)
			c.shut(closeCause{code: websocket.StatusGoingAway, reason: "Connection idle timeout"})
		}
		cause := c.closeCause()
		if c.peer != nil {
			return // no socket: Local.Connect's supervisor tells the peer
		}
		// Close waits (boundedly) for the client's close frame, which the
		// read loop may be the one to receive.
		if err := c.ws.Close(cause.code, cause.reason); err != nil {
			r.log.Debug("relay: close handshake", "conn", c.id, "err", err)
		}
		return
	}
}

// message handles one data message: the $default event, then the route
// response or the integration error API Gateway would send back.
func (c *conn) message(typ websocket.MessageType, data []byte, now time.Time) {
	ev := c.event(RouteDefault, EventMessage, now)
	ev.RequestContext.MessageID = newID()
	if typ == websocket.MessageBinary {
		ev.Body = base64.StdEncoding.EncodeToString(data)
		ev.IsBase64Encoded = true
	} else {
		ev.Body = string(data)
	}
	resp, err := c.r.invoke(ev)
	var out []byte
	switch {
	case err != nil:
		c.r.log.Warn("relay: $default handler failed", "conn", c.id, "err", err)
		out, _ = json.Marshal(integrationError{
			Message:      "Internal server error",
			ConnectionID: c.id,
			RequestID:    ev.RequestContext.RequestID,
		})
	case resp.Body == "":
		return
	case resp.IsBase64Encoded:
		b, derr := base64.StdEncoding.DecodeString(resp.Body)
		if derr != nil {
			c.r.log.Warn("relay: $default response is not base64", "conn", c.id, "err", derr)
			return
		}
		out = b
	default:
		out = []byte(resp.Body)
	}
	if len(out) > c.r.maxMessage {
		c.r.log.Warn("relay: $default response over the message limit, dropped", "conn", c.id, "bytes", len(out))
		return
	}
	if err := c.write(frameType(out), out); err != nil {
		c.r.log.Debug("relay: route response not delivered", "conn", c.id, "err", err)
	}
}

// integrationError is what API Gateway sends a client whose message's
// integration failed.
type integrationError struct {
	Message      string `json:"message"`
	ConnectionID string `json:"connectionId"`
	RequestID    string `json:"requestId"`
}

// disconnect sends the connection's one $disconnect event.
func (r *Relay) disconnect(c *conn) {
	cause := c.closeCause()
	ev := c.event(RouteDisconnect, EventDisconnect, time.Now())
	ev.Headers = map[string]string{"Host": c.host}
	ev.MultiValueHeaders = map[string][]string{"Host": {c.host}}
	ev.RequestContext.DisconnectStatusCode = int64(cause.code)
	reason := cause.reason
	ev.RequestContext.DisconnectReason = &reason
	if _, err := r.invoke(ev); err != nil {
		r.log.Warn("relay: $disconnect handler failed", "conn", c.id, "err", err)
	}
	r.log.Info("relay: disconnected", "conn", c.id, "code", int(cause.code))
}

// event builds the part every event of the connection shares.
func (c *conn) event(route, typ string, now time.Time) events.APIGatewayWebsocketProxyRequest {
	reqID := newID()
	domain := c.r.domainName
	if domain == "" {
		domain = c.host
	}
	return events.APIGatewayWebsocketProxyRequest{
		RequestContext: events.APIGatewayWebsocketProxyRequestContext{
			RouteKey:          route,
			EventType:         typ,
			ExtendedRequestID: reqID,
			RequestID:         reqID,
			RequestTime:       now.UTC().Format(requestTimeLayout),
			RequestTimeEpoch:  now.UnixMilli(),
			MessageDirection:  "IN",
			Stage:             c.r.stage,
			ConnectedAt:       c.connectedAt.UnixMilli(),
			Identity: events.APIGatewayRequestIdentity{
				SourceIP:  c.sourceIP,
				UserAgent: c.userAgent,
			},
			DomainName:   domain,
			ConnectionID: c.id,
			APIID:        c.r.apiID,
		},
	}
}

// frameType sends text when it can: API Gateway posts text frames, and a
// text frame must hold UTF-8.
func frameType(b []byte) websocket.MessageType {
	if utf8.Valid(b) {
		return websocket.MessageText
	}
	return websocket.MessageBinary
}

// checkUpgrade validates the handshake before $connect runs, so a request
// the WebSocket library would refuse never reaches the handler. It returns
// 0 for a valid request.
func checkUpgrade(req *http.Request) (int, string) {
	if !headerHasToken(req.Header, "Connection", "upgrade") || !headerHasToken(req.Header, "Upgrade", "websocket") {
		return http.StatusUpgradeRequired, "this endpoint takes WebSocket upgrades only"
	}
	if req.Method != http.MethodGet {
		return http.StatusMethodNotAllowed, "a WebSocket handshake must be a GET"
	}
	if req.Header.Get("Sec-WebSocket-Version") != "13" {
		return http.StatusBadRequest, "unsupported Sec-WebSocket-Version (want 13)"
	}
	keys := req.Header.Values("Sec-WebSocket-Key")
	if len(keys) != 1 {
		return http.StatusBadRequest, "need exactly one Sec-WebSocket-Key"
	}
	if k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(keys[0])); err != nil || len(k) != 16 {
		return http.StatusBadRequest, "invalid Sec-WebSocket-Key"
	}
	return 0, ""
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// connectStatus is the status that refuses the connection, or 0 to accept.
func connectStatus(resp events.APIGatewayProxyResponse, err error) int {
	switch {
	case err != nil:
		return http.StatusInternalServerError
	case resp.StatusCode == 0 || (resp.StatusCode >= 200 && resp.StatusCode < 300):
		return 0
	case resp.StatusCode < 300 || resp.StatusCode > 599:
		// Not a status an HTTP response can carry (1xx would not end
		// the exchange): API Gateway reports a malformed Lambda response.
		return http.StatusBadGateway
	}
	return resp.StatusCode
}

func writeProxyResponse(w http.ResponseWriter, resp events.APIGatewayProxyResponse, status int) {
	for k, vs := range resp.MultiValueHeaders {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		if b, err := base64.StdEncoding.DecodeString(resp.Body); err == nil {
			body = b
		}
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func responseHeader(resp events.APIGatewayProxyResponse, name string) string {
	for k, v := range resp.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	for k, vs := range resp.MultiValueHeaders {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0]
		}
	}
	return ""
}

// headers returns the request's headers as API Gateway passes them: Host
// included, the single-value map holding each header's last value.
func headers(req *http.Request) (map[string]string, map[string][]string) {
	single := map[string]string{"Host": req.Host}
	multi := map[string][]string{"Host": {req.Host}}
	for k, vs := range req.Header {
		if len(vs) == 0 {
			continue
		}
		single[k] = vs[len(vs)-1]
		multi[k] = append([]string(nil), vs...)
	}
	return single, multi
}

// query returns the query parameters as API Gateway passes them, nil when
// there are none.
func query(req *http.Request) (map[string]string, map[string][]string) {
	q := req.URL.Query()
	if len(q) == 0 {
		return nil, nil
	}
	single := make(map[string]string, len(q))
	multi := make(map[string][]string, len(q))
	for k, vs := range q {
		single[k] = vs[len(vs)-1]
		multi[k] = vs
	}
	return single, multi
}

func sourceIP(req *http.Request) string {
	host, _, err := net.SplitHostPort(req.RemoteAddr)
	if err != nil {
		return req.RemoteAddr
	}
	return host
}
