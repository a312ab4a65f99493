package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"
	"github.com/aws/smithy-go"
	"github.com/coder/websocket"
)

// Local is the management API for code in the relay's own process: the
// PostToConnection and DeleteConnection calls of the
// apigatewaymanagementapi client (the methods connections.API names),
// served by calling the relay directly. A post or delete does what the
// management handler does for the same call — the same connection
// lookup, size limit, frame choice, write and close — and fails with the
// same errors the SDK returns for the handler's answers
// (*types.GoneException, *types.PayloadTooLargeException, a
// BadRequestException for a malformed id), so the code that posts
// (connections.Client and every caller of it) behaves the same on either
// path.
//
// What it leaves out is the HTTP round trip to the loopback listener, the
// SDK's middleware stack and the SigV4 signature and its verification:
// together about 190 µs of each post on the dev machine, two of them on
// every token's way from a worker to its client. They guard a network
// boundary that an in-process call does not cross: only code holding the
// *Relay can call Local. The HTTP management API (Management) stays the
// path of every other process, and of AWS, and is tested as such
// (management_test.go; infra/lambdatest runs the functions through it).
type Local struct{ r *Relay }

// Local returns the relay's in-process management API.
func (r *Relay) Local() *Local { return &Local{r: r} }

// localConn resolves a call's connection id as serveManagement does: a
// missing id is the SDK's own validation error, a malformed one the
// handler's BadRequestException, an unknown one GoneException.
func (l *Local) localConn(ctx context.Context, op string, id *string) (*conn, error) {
	if id == nil || *id == "" {
		return nil, fmt.Errorf("relay: %s: ConnectionId is required", op)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("relay: %s %s: %w", op, *id, err)
	}
	if !validID(*id) {
		return nil, &smithy.GenericAPIError{Code: errBadRequest, Message: "Invalid connectionId: " + *id, Fault: smithy.FaultClient}
	}
	c := l.r.lookup(*id)
	if c == nil {
		return nil, &types.GoneException{}
	}
	return c, nil
}

// PostToConnection sends in.Data to the connection as one message, as the
// management API's POST does. The options are the SDK client's and are
// ignored: there is no request to configure.
func (l *Local) PostToConnection(ctx context.Context, in *apigatewaymanagementapi.PostToConnectionInput, _ ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.PostToConnectionOutput, error) {
	if in == nil {
		return nil, errors.New("relay: PostToConnection: nil input")
	}
	c, err := l.localConn(ctx, "PostToConnection", in.ConnectionId)
	if err != nil {
		return nil, err
	}
	if len(in.Data) > l.r.maxMessage {
		return nil, &types.PayloadTooLargeException{Message: aws.String("Request entity too large")}
	}
	if err := c.write(frameType(in.Data), in.Data); err != nil {
		// As for an HTTP post: a failed or timed-out write leaves the
		// socket closed, so the connection ends (and $disconnect fires).
		c.shut(closeCause{code: websocket.StatusAbnormalClosure, reason: "Write failed"})
		l.r.log.Debug("relay: post failed", "conn", c.id, "err", err)
		return nil, &types.GoneException{}
	}
	return &apigatewaymanagementapi.PostToConnectionOutput{}, nil
}

// DeleteConnection closes the connection (1000, "Connection deleted"; its
// $disconnect follows), as the management API's DELETE does.
func (l *Local) DeleteConnection(ctx context.Context, in *apigatewaymanagementapi.DeleteConnectionInput, _ ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.DeleteConnectionOutput, error) {
	if in == nil {
		return nil, errors.New("relay: DeleteConnection: nil input")
	}
	c, err := l.localConn(ctx, "DeleteConnection", in.ConnectionId)
	if err != nil {
		return nil, err
	}
	c.shut(closeCause{code: websocket.StatusNormalClosure, reason: "Connection deleted"})
	return &apigatewaymanagementapi.DeleteConnectionOutput{}, nil
}

// ErrLocalClosed is the error of a Send on an in-process connection that
// has ended.
var ErrLocalClosed = errors.New("relay: in-process connection closed")

// localPeer is the client end of an in-process connection.
type localPeer struct {
	recv  func([]byte)
	ended func(code int, reason string)
	// sendMu makes the connection's events run one at a time, in order,
	// as a WebSocket's read loop does.
	sendMu sync.Mutex
}

// deliver hands a posted message or a route response to the peer; the
// connection's write lock is held, so messages arrive in order. A
// connection that has ended takes nothing, as a closed socket does.
func (p *localPeer) deliver(c *conn, data []byte) error {
	if c.ended() {
		return ErrLocalClosed
	}
	p.recv(bytes.Clone(data))
	return nil
}

// LocalConn is an in-process connection to the relay (Local.Connect): a
// client in the relay's own process — the dev stack's API listener — that
// the relay treats as it treats a WebSocket client, with the same events
// ($connect, $default one at a time and in order, exactly one
// $disconnect), the same management calls on its id (posts, delete, Gone
// once it ended) and the same limits (message size, idle timeout,
// duration), but whose messages cross no socket: what is posted to it is
// handed to its receive function on the poster's goroutine, and what it
// sends runs the $default event on the sender's.
type LocalConn struct{ c *conn }

// Connect opens an in-process connection: a $connect event with header as
// the upgrade request's headers (and Host "in-process"), refused with an
// error naming the status and body when the handler refuses it. recv gets,
// in order, every message posted to the connection and every route
// response, each a fresh slice, on the goroutine that posts: it must not
// block. ended is called once, when the connection ends for any reason,
// from either side, with the close code and reason; recv gets nothing
// after it, and the connection's $disconnect follows.
func (l *Local) Connect(ctx context.Context, header http.Header, recv func([]byte), ended func(code int, reason string)) (*LocalConn, error) {
	if recv == nil || ended == nil {
		return nil, errors.New("relay: Connect: recv and ended are required")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("relay: connect in process: %w", err)
	}
	r := l.r
	id, ok := r.reserve()
	if !ok {
		return nil, errors.New("relay: connect in process: the relay is shutting down")
	}
	now := time.Now()
	c := &conn{r: r, id: id, connectedAt: now, sourceIP: "127.0.0.1", userAgent: "in-process", host: localHost,
		kill: make(chan struct{}), peer: &localPeer{recv: recv, ended: ended}}
	c.lastActive.Store(now.UnixNano())
	ev := c.event(RouteConnect, EventConnect, now)
	req := &http.Request{Host: localHost, Header: header.Clone(), URL: &url.URL{Path: "/"}}
	ev.Headers, ev.MultiValueHeaders = headers(req)
	resp, err := r.invoke(ev)
	if status := connectStatus(resp, err); status != 0 {
		r.unreserve(id)
		r.wg.Done()
		r.log.Info("relay: in-process connect refused", "conn", id, "status", status, "err", err)
		if err != nil {
			return nil, fmt.Errorf("relay: connect in process: %d: %w", status, err)
		}
		return nil, fmt.Errorf("relay: connect in process: %d: %s", status, resp.Body)
	}
	if !r.open(c) {
		c.cause = &closeCause{code: websocket.StatusGoingAway, reason: "Going away"}
		r.disconnect(c)
		r.wg.Done()
		return nil, errors.New("relay: connect in process: the relay is shutting down")
	}
	r.log.Info("relay: connected in process", "conn", id)
	go func() {
		defer r.wg.Done()
		c.supervise(nil)
		cause := c.closeCause()
		// The write lock orders ended after any delivery in progress.
		c.writeMu.Lock()
		c.peer.ended(int(cause.code), cause.reason)
		c.writeMu.Unlock()
		r.disconnect(c)
	}()
	return &LocalConn{c: c}, nil
}

// localHost is the Host of an in-process connection's events.
const localHost = "in-process"

// ID is the connection's id, as management calls name it.
func (lc *LocalConn) ID() string { return lc.c.id }

// Send sends one message as the client: its $default event runs on the
// caller's goroutine (one at a time per connection), and a route response
// goes to recv before Send returns. A message over the size limit ends the
// connection (1009), as it ends a WebSocket.
func (lc *LocalConn) Send(ctx context.Context, data []byte) error {
	c := lc.c
	if err := ctx.Err(); err != nil {
		return err
	}
	c.peer.sendMu.Lock()
	defer c.peer.sendMu.Unlock()
	if c.ended() {
		return ErrLocalClosed
	}
	if len(data) > c.r.maxMessage {
		c.shut(closeCause{code: websocket.StatusMessageTooBig, reason: "Message too big"})
		return fmt.Errorf("relay: in-process message of %d bytes: %w", len(data), websocket.ErrMessageTooBig)
	}
	now := time.Now()
	c.lastActive.Store(now.UnixNano())
	c.message(frameType(data), bytes.Clone(data), now)
	return nil
}

// Ping reports whether the connection is still open.
func (lc *LocalConn) Ping(context.Context) error {
	if lc.c.ended() {
		return ErrLocalClosed
	}
	return nil
}

// Close ends the connection from the client's side with code and reason.
func (lc *LocalConn) Close(code int, reason string) error {
	lc.c.shut(closeCause{code: websocket.StatusCode(code), reason: reason})
	return nil
}
