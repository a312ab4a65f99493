package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"
	"github.com/aws/smithy-go"
	"github.com/coder/websocket"
)

// mgmtAPI is the part of the management client both paths serve: the SDK
// client over HTTP and Local.
type mgmtAPI interface {
	PostToConnection(ctx context.Context, in *apigatewaymanagementapi.PostToConnectionInput, opts ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.PostToConnectionOutput, error)
	DeleteConnection(ctx context.Context, in *apigatewaymanagementapi.DeleteConnectionInput, opts ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.DeleteConnectionOutput, error)
}

// paths are the two ways to reach the management API: every case below
// runs on both and must come out the same.
var paths = []struct {
	name string
	api  func(e *env) mgmtAPI
}{
	{"sdk over http", func(e *env) mgmtAPI { return e.client }},
	{"in-process", func(e *env) mgmtAPI { return e.r.Local() }},
}

func localPost(t *testing.T, api mgmtAPI, id string, data []byte) error {
	t.Helper()
	_, err := api.PostToConnection(ctxT(t), &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: aws.String(id), Data: data})
	return err
}

func localDelete(t *testing.T, api mgmtAPI, id string) error {
	t.Helper()
	_, err := api.DeleteConnection(ctxT(t), &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: aws.String(id)})
	return err
}

// TestLocalMatchesManagement runs the management calls the functions make
// (post and delete) through the SDK over HTTP and through Local, and
// checks that each path delivers the same frames and fails with the same
// errors.
func TestLocalMatchesManagement(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			h := &recorder{}
			e := start(t, h)
			api := p.api(e)
			ws := dial(t, e.url, nil)
			id := whoami(t, ws)

			// Text goes as a text frame, bytes that are not UTF-8 as a
			// binary one.
			for _, tt := range []struct {
				data []byte
				typ  websocket.MessageType
			}{
				{[]byte(`{"type":"chunk"}`), websocket.MessageText},
				{[]byte{0xff, 0xfe, 0x00}, websocket.MessageBinary},
				{bytes.Repeat([]byte("a"), MaxMessage), websocket.MessageText},
			} {
				if err := localPost(t, api, id, tt.data); err != nil {
					t.Fatalf("post %d bytes: %v", len(tt.data), err)
				}
				if typ, got := read(t, ws); typ != tt.typ || got != string(tt.data) {
					t.Fatalf("received %v of %d bytes, want %v of %d", typ, len(got), tt.typ, len(tt.data))
				}
			}

			// Over the limit: refused, the connection unharmed.
			var tooLarge *types.PayloadTooLargeException
			if err := localPost(t, api, id, bytes.Repeat([]byte("a"), MaxMessage+1)); !errors.As(err, &tooLarge) {
				t.Fatalf("post over 128 KB: %v, want PayloadTooLargeException", err)
			}
			if err := localPost(t, api, id, []byte("ok")); err != nil {
				t.Fatal(err)
			}
			if _, got := read(t, ws); got != "ok" {
				t.Fatalf("got %q", got)
			}

			// An id never issued is gone; one that cannot be an id is a
			// bad request.
			if err := localPost(t, api, newID(), []byte("x")); !isGone(err) {
				t.Errorf("unknown id: %v, want GoneException", err)
			}
			var apiErr smithy.APIError
			if err := localPost(t, api, "not-an-id", []byte("x")); !errors.As(err, &apiErr) || apiErr.ErrorCode() != "BadRequestException" {
				t.Errorf("malformed id: %v, want BadRequestException", err)
			}

			// Delete closes with 1000 and fires one $disconnect; then the
			// id is gone on both paths.
			if err := localDelete(t, api, id); err != nil {
				t.Fatal(err)
			}
			if code := readClose(t, ws); code != websocket.StatusNormalClosure {
				t.Fatalf("client saw close %v, want 1000", code)
			}
			if ev := h.wait(t, RouteDisconnect, id, 1)[0]; ev.RequestContext.DisconnectStatusCode != 1000 {
				t.Fatalf("disconnect %+v", ev.RequestContext)
			}
			for _, q := range paths {
				if err := localPost(t, q.api(e), id, []byte("late")); !isGone(err) {
					t.Errorf("%s: post after delete: %v, want GoneException", q.name, err)
				}
				if err := localDelete(t, q.api(e), id); !isGone(err) {
					t.Errorf("%s: delete after delete: %v, want GoneException", q.name, err)
				}
			}
		})
	}
}

// TestLocalRefusesBadCalls: a call without a connection id, or whose
// context has ended, reaches no connection.
func TestLocalRefusesBadCalls(t *testing.T) {
	e := start(t, &recorder{})
	ws := dial(t, e.url, nil)
	id := whoami(t, ws)
	l := e.r.Local()
	if _, err := l.PostToConnection(ctxT(t), &apigatewaymanagementapi.PostToConnectionInput{Data: []byte("x")}); err == nil {
		t.Error("post without a connection id: no error")
	}
	if _, err := l.DeleteConnection(ctxT(t), &apigatewaymanagementapi.DeleteConnectionInput{}); err == nil {
		t.Error("delete without a connection id: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.PostToConnection(ctx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: aws.String(id), Data: []byte("x")}); !errors.Is(err, context.Canceled) {
		t.Errorf("post with an ended context: %v, want context.Canceled", err)
	}
	// Nothing reached the connection: the next message is the next post.
	if err := localPost(t, l, id, []byte("next")); err != nil {
		t.Fatal(err)
	}
	if _, got := read(t, ws); got != "next" {
		t.Fatalf("got %q, want next", got)
	}
}

// peer is the client side of an in-process connection in tests: what it
// received, and how it ended.
type peer struct {
	mu    sync.Mutex
	got   []string
	ends  []string
	ended chan struct{}
}

func newPeer() *peer { return &peer{ended: make(chan struct{})} }

func (p *peer) recv(b []byte) {
	p.mu.Lock()
	p.got = append(p.got, string(b))
	p.mu.Unlock()
}

func (p *peer) end(code int, reason string) {
	p.mu.Lock()
	p.ends = append(p.ends, fmt.Sprint(code, " ", reason))
	p.mu.Unlock()
	close(p.ended) // a second call panics: ended is called once
}

func (p *peer) received() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.got)
}

// waitEnd waits for the connection's end and returns its code and reason.
func (p *peer) waitEnd(t *testing.T) string {
	t.Helper()
	select {
	case <-p.ended:
	case <-time.After(liveness):
		t.Fatal("in-process connection did not end")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ends[0]
}

func connectLocal(t *testing.T, e *env, h http.Header) (*LocalConn, *peer) {
	t.Helper()
	p := newPeer()
	lc, err := e.r.Local().Connect(ctxT(t), h, p.recv, p.end)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	return lc, p
}

// TestLocalConnEvents: an in-process connection gets the events a
// WebSocket gets ($connect with its headers, $default in order with route
// responses, one $disconnect), posts from either management path, and a
// delete ends it as it ends a WebSocket.
func TestLocalConnEvents(t *testing.T) {
	h := &recorder{}
	e := start(t, h)
	lc, p := connectLocal(t, e, http.Header{"X-C0mpute-Listener": {"secret"}})
	id := lc.ID()
	if !validID(id) {
		t.Fatalf("id %q is not one the relay issues", id)
	}
	ev := h.wait(t, RouteConnect, id, 1)[0]
	if got := ev.Headers["X-C0mpute-Listener"]; got != "secret" {
		t.Errorf("$connect header = %q, want secret", got)
	}
	for _, m := range []string{"whoami", "one", "two"} {
		if err := lc.Send(ctxT(t), []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	var bodies []string
	for _, ev := range h.wait(t, RouteDefault, id, 3) {
		bodies = append(bodies, ev.Body)
	}
	if !slices.Equal(bodies, []string{"whoami", "one", "two"}) {
		t.Errorf("$default bodies %q, want in order", bodies)
	}
	for _, path := range paths {
		if err := localPost(t, path.api(e), id, []byte("via "+path.name)); err != nil {
			t.Fatalf("%s post: %v", path.name, err)
		}
	}
	want := []string{id, "via sdk over http", "via in-process"}
	if got := p.received(); !slices.Equal(got, want) {
		t.Errorf("received %q, want %q (route response, then posts)", got, want)
	}
	var tooLarge *types.PayloadTooLargeException
	if err := localPost(t, e.r.Local(), id, bytes.Repeat([]byte("a"), MaxMessage+1)); !errors.As(err, &tooLarge) {
		t.Errorf("post over 128 KB: %v, want PayloadTooLargeException", err)
	}
	if err := localDelete(t, e.r.Local(), id); err != nil {
		t.Fatal(err)
	}
	if got := p.waitEnd(t); got != "1000 Connection deleted" {
		t.Errorf("ended with %q, want 1000 Connection deleted", got)
	}
	if ev := h.wait(t, RouteDisconnect, id, 1)[0]; ev.RequestContext.DisconnectStatusCode != 1000 {
		t.Errorf("$disconnect %+v", ev.RequestContext)
	}
	if err := lc.Send(ctxT(t), []byte("late")); !errors.Is(err, ErrLocalClosed) {
		t.Errorf("send after the end: %v, want ErrLocalClosed", err)
	}
	if err := lc.Ping(ctxT(t)); !errors.Is(err, ErrLocalClosed) {
		t.Errorf("ping after the end: %v, want ErrLocalClosed", err)
	}
	for _, path := range paths {
		if err := localPost(t, path.api(e), id, []byte("late")); !isGone(err) {
			t.Errorf("%s post after the end: %v, want GoneException", path.name, err)
		}
	}
	if n := len(p.received()); n != 3 {
		t.Errorf("%d messages received, want nothing after the end", n)
	}
}

// TestLocalConnEnds: every way an in-process connection ends calls ended
// once with the code a WebSocket would close with, and fires one
// $disconnect.
func TestLocalConnEnds(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []Option
		end  func(t *testing.T, e *env, lc *LocalConn)
		want string
	}{
		{"client close", nil, func(t *testing.T, _ *env, lc *LocalConn) {
			if err := lc.Close(1000, "bye"); err != nil {
				t.Fatal(err)
			}
		}, "1000 bye"},
		{"message too big", []Option{WithMaxMessage(8)}, func(t *testing.T, _ *env, lc *LocalConn) {
			if err := lc.Send(ctxT(t), []byte("nine bytes")); err == nil {
				t.Error("a message over the limit was sent")
			}
		}, "1009 Message too big"},
		{"idle", []Option{WithIdleTimeout(50 * time.Millisecond)}, func(*testing.T, *env, *LocalConn) {}, "1001 Connection idle timeout"},
		{"relay closes", nil, func(t *testing.T, e *env, _ *LocalConn) {
			if err := e.r.Close(); err != nil {
				t.Fatal(err)
			}
		}, "1001 Going away"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := &recorder{}
			e := start(t, h, tt.opts...)
			lc, p := connectLocal(t, e, nil)
			tt.end(t, e, lc)
			if got := p.waitEnd(t); got != tt.want {
				t.Errorf("ended with %q, want %q", got, tt.want)
			}
			h.wait(t, RouteDisconnect, lc.ID(), 1)
			if n := len(h.all(RouteDisconnect, lc.ID())); n != 1 {
				t.Errorf("%d $disconnect events, want 1", n)
			}
		})
	}
}

// TestLocalConnRefused: a $connect the handler refuses opens nothing.
func TestLocalConnRefused(t *testing.T) {
	h := &recorder{connect: func(events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
		return events.APIGatewayProxyResponse{StatusCode: 401, Body: "bad listener secret"}, nil
	}}
	e := start(t, h)
	p := newPeer()
	_, err := e.r.Local().Connect(ctxT(t), nil, p.recv, p.end)
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "bad listener secret") {
		t.Fatalf("refused connect: %v, want the status and body", err)
	}
	if n := e.r.Len(); n != 0 {
		t.Errorf("%d connections open after a refusal", n)
	}
}
