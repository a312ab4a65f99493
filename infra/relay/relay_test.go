package relay

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"
	"github.com/aws/smithy-go"
	"github.com/coder/websocket"
)

// liveness bounds every wait; nothing is asserted about how fast anything is.
const liveness = 20 * time.Second

// recorder is a test Handler: it records every event and answers with the
// per-route functions, if set. Without one, it answers 200 and no body,
// except that a $default message "whoami" gets the connection id back.
type recorder struct {
	connect func(events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error)
	message func(events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error)

	mu     sync.Mutex
	events []events.APIGatewayWebsocketProxyRequest
}

func (h *recorder) Handle(_ context.Context, ev events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
	h.mu.Lock()
	h.events = append(h.events, ev)
	h.mu.Unlock()
	switch ev.RequestContext.RouteKey {
	case RouteConnect:
		if h.connect != nil {
			return h.connect(ev)
		}
	case RouteDefault:
		if h.message != nil {
			return h.message(ev)
		}
		if ev.Body == "whoami" {
			return events.APIGatewayProxyResponse{StatusCode: 200, Body: ev.RequestContext.ConnectionID}, nil
		}
	}
	return events.APIGatewayProxyResponse{StatusCode: 200}, nil
}

// all returns the recorded events matching route and connection id (any
// id when id is "").
func (h *recorder) all(route, id string) []events.APIGatewayWebsocketProxyRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []events.APIGatewayWebsocketProxyRequest
	for _, ev := range h.events {
		if ev.RequestContext.RouteKey == route && (id == "" || ev.RequestContext.ConnectionID == id) {
			out = append(out, ev)
		}
	}
	return out
}

// checkDisconnectOnce asserts, once the relay is closed, that every
// connection that got a message got exactly one $disconnect, and no
// connection more than one.
func (h *recorder) checkDisconnectOnce(t *testing.T) {
	t.Helper()
	messaged := map[string]bool{}
	for _, ev := range h.all(RouteDefault, "") {
		messaged[ev.RequestContext.ConnectionID] = true
	}
	disconnects := map[string]int{}
	for _, ev := range h.all(RouteDisconnect, "") {
		disconnects[ev.RequestContext.ConnectionID]++
	}
	for id, n := range disconnects {
		if n > 1 {
			t.Errorf("connection %s got %d $disconnect events", id, n)
		}
	}
	for id := range messaged {
		if disconnects[id] != 1 {
			t.Errorf("connection %s got %d $disconnect events, want 1", id, disconnects[id])
		}
	}
}

// wait returns the events of route and id once there are at least n.
func (h *recorder) wait(t *testing.T, route, id string, n int) []events.APIGatewayWebsocketProxyRequest {
	t.Helper()
	deadline := time.Now().Add(liveness)
	for {
		if evs := h.all(route, id); len(evs) >= n {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d %s events of %q; have %d", n, route, id, len(h.all(route, id)))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type env struct {
	r      *Relay
	srv    *httptest.Server // the worker-facing endpoint
	mgmt   *httptest.Server // the management API
	url    string           // ws://127.0.0.1:port/
	host   string           // 127.0.0.1:port
	client *apigatewaymanagementapi.Client
}

// The management API's credentials in tests.
const (
	testKeyID  = "AKIAC0MPUTETESTKEY01"
	testSecret = "c0mpute-test-secret-access-key-0000000000"
)

func newClient(endpoint, akid, secret string) *apigatewaymanagementapi.Client {
	return apigatewaymanagementapi.New(apigatewaymanagementapi.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider(akid, secret, ""),
		// A refusal must show on the first answer.
		RetryMaxAttempts: 1,
	})
}

// start serves a relay with the test credentials (opts may replace them)
// on two test servers: the worker-facing endpoint and the management API.
func start(t *testing.T, h Handler, opts ...Option) *env {
	t.Helper()
	r := New(h, append([]Option{WithCredentials(testKeyID, testSecret)}, opts...)...)
	srv := httptest.NewServer(r)
	mgmt := httptest.NewServer(r.Management())
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		srv.Close()
		mgmt.Close()
		if rec, ok := h.(*recorder); ok {
			rec.checkDisconnectOnce(t)
		}
	})
	host := strings.TrimPrefix(srv.URL, "http://")
	return &env{r: r, srv: srv, mgmt: mgmt, url: "ws://" + host + "/", host: host,
		client: newClient(mgmt.URL, testKeyID, testSecret)}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), liveness)
	t.Cleanup(cancel)
	return ctx
}

func dial(t *testing.T, url string, opts *websocket.DialOptions) *websocket.Conn {
	t.Helper()
	ws, resp, err := websocket.Dial(ctxT(t), url, opts)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	if resp.Body != nil {
		_ = resp.Body.Close()
	}
	ws.SetReadLimit(1 << 20)
	t.Cleanup(func() { _ = ws.CloseNow() })
	return ws
}

// whoami asks the default handler for the connection's id.
func whoami(t *testing.T, ws *websocket.Conn) string {
	t.Helper()
	if err := ws.Write(ctxT(t), websocket.MessageText, []byte("whoami")); err != nil {
		t.Fatalf("write whoami: %v", err)
	}
	_, b, err := ws.Read(ctxT(t))
	if err != nil {
		t.Fatalf("read whoami: %v", err)
	}
	return string(b)
}

func read(t *testing.T, ws *websocket.Conn) (websocket.MessageType, string) {
	t.Helper()
	typ, b, err := ws.Read(ctxT(t))
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return typ, string(b)
}

// readClose reads until the connection ends and returns the close status.
func readClose(t *testing.T, ws *websocket.Conn) websocket.StatusCode {
	t.Helper()
	for {
		_, _, err := ws.Read(ctxT(t))
		if err != nil {
			return websocket.CloseStatus(err)
		}
	}
}

func post(t *testing.T, e *env, id string, data []byte) error {
	t.Helper()
	_, err := e.client.PostToConnection(ctxT(t), &apigatewaymanagementapi.PostToConnectionInput{
		ConnectionId: aws.String(id), Data: data,
	})
	return err
}

func isGone(err error) bool {
	var gone *types.GoneException
	return errors.As(err, &gone)
}

func TestConnectEvent(t *testing.T) {
	h := &recorder{}
	e := start(t, h, WithStage("dev"), WithAPIID("abc123defg"))
	before := time.Now().UnixMilli()
	hdr := http.Header{}
	hdr.Set("User-Agent", "workerd/test")
	hdr.Add("X-Multi", "one")
	hdr.Add("X-Multi", "two")
	ws := dial(t, e.url+"?token=a&token=b&model=m", &websocket.DialOptions{HTTPHeader: hdr})
	id := whoami(t, ws)
	after := time.Now().UnixMilli()

	ev := h.wait(t, RouteConnect, id, 1)[0]
	rc := ev.RequestContext
	checks := []struct {
		name      string
		got, want any
	}{
		{"RouteKey", rc.RouteKey, "$connect"},
		{"EventType", rc.EventType, "CONNECT"},
		{"MessageDirection", rc.MessageDirection, "IN"},
		{"ConnectionID valid", validID(rc.ConnectionID), true},
		{"RequestID valid", validID(rc.RequestID), true},
		{"ExtendedRequestID", rc.ExtendedRequestID, rc.RequestID},
		{"Stage", rc.Stage, "dev"},
		{"APIID", rc.APIID, "abc123defg"},
		{"DomainName", rc.DomainName, e.host},
		{"SourceIP", rc.Identity.SourceIP, "127.0.0.1"},
		{"UserAgent", rc.Identity.UserAgent, "workerd/test"},
		{"ConnectedAt in range", before <= rc.ConnectedAt && rc.ConnectedAt <= after, true},
		{"RequestTimeEpoch", rc.RequestTimeEpoch, rc.ConnectedAt},
		{"RequestTime", rc.RequestTime, time.UnixMilli(rc.ConnectedAt).UTC().Format(requestTimeLayout)},
		{"MessageID", rc.MessageID, nil},
		{"Host", ev.Headers["Host"], e.host},
		{"User-Agent header", ev.Headers["User-Agent"], "workerd/test"},
		{"X-Multi single (last)", ev.Headers["X-Multi"], "two"},
		{"X-Multi multi", fmt.Sprint(ev.MultiValueHeaders["X-Multi"]), "[one two]"},
		{"query single (last)", ev.QueryStringParameters["token"], "b"},
		{"query multi", fmt.Sprint(ev.MultiValueQueryStringParameters["token"]), "[a b]"},
		{"query model", ev.QueryStringParameters["model"], "m"},
		{"Body", ev.Body, ""},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	msg := h.wait(t, RouteDefault, id, 1)[0]
	if msg.RequestContext.ConnectedAt != rc.ConnectedAt || msg.RequestContext.RequestID == rc.RequestID {
		t.Errorf("$default shares ConnectedAt and has its own RequestID: %+v", msg.RequestContext)
	}
}

func TestConnectRefused(t *testing.T) {
	tests := []struct {
		name   string
		resp   events.APIGatewayProxyResponse
		err    error
		status int
	}{
		{"handler error", events.APIGatewayProxyResponse{}, errors.New("boom"), 500},
		{"401", events.APIGatewayProxyResponse{StatusCode: 401, Body: "bad token"}, nil, 401},
		{"403", events.APIGatewayProxyResponse{StatusCode: 403}, nil, 403},
		{"429", events.APIGatewayProxyResponse{StatusCode: 429}, nil, 429},
		{"302", events.APIGatewayProxyResponse{StatusCode: 302, Headers: map[string]string{"Location": "/elsewhere"}}, nil, 302},
		{"invalid status", events.APIGatewayProxyResponse{StatusCode: 42}, nil, 502},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &recorder{connect: func(events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
				return tt.resp, tt.err
			}}
			e := start(t, h)
			ws, resp, err := websocket.Dial(ctxT(t), e.url, &websocket.DialOptions{
				HTTPClient: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
			})
			if err == nil {
				_ = ws.CloseNow()
				t.Fatal("dial succeeded")
			}
			if resp == nil || resp.StatusCode != tt.status {
				t.Fatalf("dial: %v, response %v, want status %d", err, resp, tt.status)
			}
			if tt.resp.Body != "" {
				// the library keeps the first bytes of a refused handshake's body
				b := new(bytes.Buffer)
				_, _ = b.ReadFrom(resp.Body)
				if !strings.Contains(b.String(), tt.resp.Body) {
					t.Errorf("body %q, want %q", b.String(), tt.resp.Body)
				}
			}
			ev := h.wait(t, RouteConnect, "", 1)[0]
			if got := e.r.Len(); got != 0 {
				t.Errorf("Len = %d after refusal", got)
			}
			if err := post(t, e, ev.RequestContext.ConnectionID, []byte("x")); !isGone(err) {
				t.Errorf("post to refused connection: %v, want GoneException", err)
			}
			if err := e.r.Close(); err != nil {
				t.Fatal(err)
			}
			if n := len(h.all(RouteDisconnect, "")); n != 0 {
				t.Errorf("%d $disconnect events for a refused connection", n)
			}
		})
	}
}

func TestConnectZeroStatusAccepts(t *testing.T) {
	h := &recorder{connect: func(events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
		return events.APIGatewayProxyResponse{}, nil
	}}
	e := start(t, h)
	ws := dial(t, e.url, nil)
	if id := whoami(t, ws); !validID(id) {
		t.Fatalf("id %q", id)
	}
}

func TestSubprotocolFromConnectResponse(t *testing.T) {
	h := &recorder{connect: func(events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
		return events.APIGatewayProxyResponse{StatusCode: 200, Headers: map[string]string{"Sec-WebSocket-Protocol": "c0mpute.v1"}}, nil
	}}
	e := start(t, h)
	ws := dial(t, e.url, &websocket.DialOptions{Subprotocols: []string{"c0mpute.v1"}})
	if got := ws.Subprotocol(); got != "c0mpute.v1" {
		t.Fatalf("subprotocol %q", got)
	}
}

func TestNotAnUpgrade(t *testing.T) {
	h := &recorder{}
	e := start(t, h)
	resp, err := http.Get(e.srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if n := len(h.all(RouteConnect, "")); n != 0 {
		t.Fatalf("%d $connect events for a plain GET", n)
	}
}

func TestMessagesSequentialInOrder(t *testing.T) {
	const n = 300
	var inFlight, overlap atomic.Int32
	h := &recorder{}
	h.message = func(ev events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
		if inFlight.Add(1) > 1 {
			overlap.Add(1)
		}
		defer inFlight.Add(-1)
		if ev.Body == "whoami" {
			return events.APIGatewayProxyResponse{Body: ev.RequestContext.ConnectionID}, nil
		}
		time.Sleep(100 * time.Microsecond) // widen any window for overlap
		return events.APIGatewayProxyResponse{}, nil
	}
	e := start(t, h)
	ws := dial(t, e.url, nil)
	id := whoami(t, ws)
	for i := range n {
		if err := ws.Write(ctxT(t), websocket.MessageText, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	evs := h.wait(t, RouteDefault, id, n+1)[1:]
	seen := map[any]bool{}
	for i, ev := range evs {
		if ev.Body != fmt.Sprint(i) {
			t.Fatalf("message %d has body %q", i, ev.Body)
		}
		rc := ev.RequestContext
		if rc.EventType != EventMessage || rc.MessageDirection != "IN" || ev.IsBase64Encoded {
			t.Fatalf("message %d: %+v", i, rc)
		}
		if s, ok := rc.MessageID.(string); !ok || !validID(s) || seen[s] {
			t.Fatalf("message %d: MessageID %v not a fresh id", i, rc.MessageID)
		}
		seen[rc.MessageID] = true
	}
	if overlap.Load() != 0 {
		t.Fatalf("handler ran concurrently for one connection %d times", overlap.Load())
	}
}

func TestBinaryMessageAndRouteResponses(t *testing.T) {
	h := &recorder{}
	h.message = func(ev events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
		switch {
		case ev.IsBase64Encoded:
			return events.APIGatewayProxyResponse{Body: ev.Body, IsBase64Encoded: true}, nil
		case ev.Body == "fail":
			return events.APIGatewayProxyResponse{}, errors.New("handler failed")
		case ev.Body == "panic":
			panic("handler panicked")
		case ev.Body == "silent":
			return events.APIGatewayProxyResponse{StatusCode: 200}, nil
		}
		return events.APIGatewayProxyResponse{StatusCode: 200, Body: "echo:" + ev.Body}, nil
	}
	e := start(t, h)
	ws := dial(t, e.url, nil)
	ctx := ctxT(t)

	if err := ws.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if typ, got := read(t, ws); typ != websocket.MessageText || got != "echo:hi" {
		t.Fatalf("route response %v %q", typ, got)
	}

	bin := []byte{0, 1, 2, 0xff, 0xfe}
	if err := ws.Write(ctx, websocket.MessageBinary, bin); err != nil {
		t.Fatal(err)
	}
	if typ, got := read(t, ws); typ != websocket.MessageBinary || got != string(bin) {
		t.Fatalf("binary route response %v %q", typ, got)
	}
	evs := h.wait(t, RouteDefault, "", 2)
	if ev := evs[1]; !ev.IsBase64Encoded || ev.Body != base64.StdEncoding.EncodeToString(bin) {
		t.Fatalf("binary event: base64 %v body %q", ev.IsBase64Encoded, ev.Body)
	}

	for _, body := range []string{"fail", "panic"} {
		// A silent message first: a response must belong to its message.
		for _, m := range []string{"silent", body} {
			if err := ws.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
				t.Fatal(err)
			}
		}
		_, got := read(t, ws)
		var ie integrationError
		if err := json.Unmarshal([]byte(got), &ie); err != nil {
			t.Fatalf("%s: reply %q: %v", body, got, err)
		}
		last := h.all(RouteDefault, "")
		want := integrationError{"Internal server error", last[0].RequestContext.ConnectionID, last[len(last)-1].RequestContext.RequestID}
		if ie != want {
			t.Fatalf("%s: reply %+v, want %+v", body, ie, want)
		}
	}
	// The connection survives handler failures.
	if err := ws.Write(ctx, websocket.MessageText, []byte("still")); err != nil {
		t.Fatal(err)
	}
	if _, got := read(t, ws); got != "echo:still" {
		t.Fatalf("after failures: %q", got)
	}
}

func TestPostToConnection(t *testing.T) {
	h := &recorder{}
	e := start(t, h)
	ws := dial(t, e.url, nil)
	id := whoami(t, ws)

	for _, tt := range []struct {
		data []byte
		typ  websocket.MessageType
	}{
		{[]byte(`{"v":1,"type":"job"}`), websocket.MessageText},
		{[]byte{}, websocket.MessageText},
		{[]byte{0xff, 0x00, 0xfe}, websocket.MessageBinary},
		{bytes.Repeat([]byte("a"), MaxMessage), websocket.MessageText},
	} {
		if err := post(t, e, id, tt.data); err != nil {
			t.Fatalf("post %d bytes: %v", len(tt.data), err)
		}
		typ, got := read(t, ws)
		if typ != tt.typ || got != string(tt.data) {
			t.Fatalf("received %v of %d bytes, want %v of %d", typ, len(got), tt.typ, len(tt.data))
		}
	}

	// The stage-prefixed endpoint, as a handler builds it in AWS.
	ev := h.wait(t, RouteConnect, id, 1)[0]
	staged := newClient(e.mgmt.URL+"/"+ev.RequestContext.Stage, testKeyID, testSecret)
	if _, err := staged.PostToConnection(ctxT(t), &apigatewaymanagementapi.PostToConnectionInput{
		ConnectionId: aws.String(id), Data: []byte("staged"),
	}); err != nil {
		t.Fatal(err)
	}
	if _, got := read(t, ws); got != "staged" {
		t.Fatalf("staged post: %q", got)
	}
}

func TestPostTooLarge(t *testing.T) {
	e := start(t, &recorder{})
	ws := dial(t, e.url, nil)
	id := whoami(t, ws)
	err := post(t, e, id, bytes.Repeat([]byte("a"), MaxMessage+1))
	var tooLarge *types.PayloadTooLargeException
	if !errors.As(err, &tooLarge) {
		t.Fatalf("post over 128 KB: %v, want PayloadTooLargeException", err)
	}
	// The connection is unharmed.
	if err := post(t, e, id, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if _, got := read(t, ws); got != "ok" {
		t.Fatalf("got %q", got)
	}
}

func TestGetConnection(t *testing.T) {
	h := &recorder{}
	e := start(t, h)
	ws := dial(t, e.url, &websocket.DialOptions{HTTPHeader: http.Header{"User-Agent": {"workerd/1.0"}}})
	id := whoami(t, ws)
	connect := h.wait(t, RouteConnect, id, 1)[0]
	msg := h.wait(t, RouteDefault, id, 1)[0]

	out, err := e.client.GetConnection(ctxT(t), &apigatewaymanagementapi.GetConnectionInput{ConnectionId: aws.String(id)})
	if err != nil {
		t.Fatal(err)
	}
	if out.ConnectedAt == nil || out.ConnectedAt.UnixMilli() != connect.RequestContext.ConnectedAt {
		t.Errorf("ConnectedAt %v, want %d ms", out.ConnectedAt, connect.RequestContext.ConnectedAt)
	}
	if out.LastActiveAt == nil || out.LastActiveAt.UnixMilli() != msg.RequestContext.RequestTimeEpoch {
		t.Errorf("LastActiveAt %v, want the last message's %d ms", out.LastActiveAt, msg.RequestContext.RequestTimeEpoch)
	}
	if out.Identity == nil || aws.ToString(out.Identity.SourceIp) != "127.0.0.1" || aws.ToString(out.Identity.UserAgent) != "workerd/1.0" {
		t.Errorf("Identity %+v", out.Identity)
	}
}

func TestDeleteConnection(t *testing.T) {
	h := &recorder{}
	e := start(t, h)
	ws := dial(t, e.url, nil)
	id := whoami(t, ws)
	if _, err := e.client.DeleteConnection(ctxT(t), &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: aws.String(id)}); err != nil {
		t.Fatal(err)
	}
	if code := readClose(t, ws); code != websocket.StatusNormalClosure {
		t.Fatalf("client saw close %v", code)
	}
	ev := h.wait(t, RouteDisconnect, id, 1)[0]
	if ev.RequestContext.EventType != EventDisconnect || ev.RequestContext.DisconnectStatusCode != 1000 {
		t.Fatalf("disconnect %+v", ev.RequestContext)
	}
	assertGone(t, e, id)
}

func assertGone(t *testing.T, e *env, id string) {
	t.Helper()
	ctx := ctxT(t)
	if err := post(t, e, id, []byte("late")); !isGone(err) {
		t.Errorf("PostToConnection: %v, want GoneException", err)
	}
	if _, err := e.client.GetConnection(ctx, &apigatewaymanagementapi.GetConnectionInput{ConnectionId: aws.String(id)}); !isGone(err) {
		t.Errorf("GetConnection: %v, want GoneException", err)
	}
	if _, err := e.client.DeleteConnection(ctx, &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: aws.String(id)}); !isGone(err) {
		t.Errorf("DeleteConnection: %v, want GoneException", err)
	}
}

func TestGoneAfterClientClose(t *testing.T) {
	h := &recorder{}
	e := start(t, h)
	ws := dial(t, e.url, nil)
	id := whoami(t, ws)
	if err := ws.Close(websocket.StatusNormalClosure, "bye"); err != nil {
		t.Fatal(err)
	}
	ev := h.wait(t, RouteDisconnect, id, 1)[0]
	if rc := ev.RequestContext; rc.DisconnectStatusCode != 1000 || rc.DisconnectReason == nil || *rc.DisconnectReason != "bye" {
		t.Fatalf("disconnect %+v", rc)
	}
	assertGone(t, e, id)

	// An id never issued is gone too; one that cannot be an id is a bad request.
	if err := post(t, e, newID(), []byte("x")); !isGone(err) {
		t.Errorf("unknown id: %v", err)
	}
	var apiErr smithy.APIError
	if err := post(t, e, "not-an-id", []byte("x")); !errors.As(err, &apiErr) || apiErr.ErrorCode() != "BadRequestException" {
		t.Errorf("malformed id: %v", err)
	}
	if err := e.r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(h.all(RouteDisconnect, id)); n != 1 {
		t.Fatalf("%d $disconnect events", n)
	}
}

func TestAbruptClientDisconnect(t *testing.T) {
	h := &recorder{}
	e := start(t, h)
	ws := dial(t, e.url, nil)
	id := whoami(t, ws)
	_ = ws.CloseNow() // no close frame
	ev := h.wait(t, RouteDisconnect, id, 1)[0]
	if ev.RequestContext.DisconnectStatusCode != int64(websocket.StatusAbnormalClosure) {
		t.Fatalf("disconnect code %d", ev.RequestContext.DisconnectStatusCode)
	}
	assertGone(t, e, id)
}

func TestIncomingTooLarge(t *testing.T) {
	h := &recorder{}
	e := start(t, h)
	ws := dial(t, e.url, nil)
	id := whoami(t, ws)
	ctx := ctxT(t)

	exact := bytes.Repeat([]byte("b"), MaxMessage)
	if err := ws.Write(ctx, websocket.MessageText, exact); err != nil {
		t.Fatal(err)
	}
	if ev := h.wait(t, RouteDefault, id, 2)[1]; len(ev.Body) != MaxMessage {
		t.Fatalf("128 KB message arrived with %d bytes", len(ev.Body))
	}
	// The server may close before the client has written it all.
	_ = ws.Write(ctx, websocket.MessageText, append(exact, 'b'))
	if code := readClose(t, ws); code != websocket.StatusMessageTooBig {
		t.Fatalf("client saw close %v, want 1009", code)
	}
	ev := h.wait(t, RouteDisconnect, id, 1)[0]
	if ev.RequestContext.DisconnectStatusCode != 1009 {
		t.Fatalf("disconnect code %d", ev.RequestContext.DisconnectStatusCode)
	}
	if n := len(h.all(RouteDefault, id)); n != 2 {
		t.Fatalf("%d $default events; the oversized message must not be one", n)
	}
	assertGone(t, e, id)
}

func TestIdleTimeout(t *testing.T) {
	h := &recorder{}
	e := start(t, h, WithIdleTimeout(time.Second))

	// Activity keeps a connection open well past the timeout…
	busy := dial(t, e.url, nil)
	busyID := whoami(t, busy)
	for range 50 {
		if err := busy.Write(ctxT(t), websocket.MessageText, []byte("heartbeat")); err != nil {
			t.Fatalf("busy connection closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(h.all(RouteDisconnect, busyID)); n != 0 {
		t.Fatal("an active connection was closed as idle")
	}

	// …and silence ends it with 1001.
	if code := readClose(t, busy); code != websocket.StatusGoingAway {
		t.Fatalf("idle client saw close %v", code)
	}
	ev := h.wait(t, RouteDisconnect, busyID, 1)[0]
	if ev.RequestContext.DisconnectStatusCode != 1001 {
		t.Fatalf("disconnect code %d", ev.RequestContext.DisconnectStatusCode)
	}
	assertGone(t, e, busyID)
}

func TestMaxDuration(t *testing.T) {
	h := &recorder{}
	e := start(t, h, WithMaxDuration(500*time.Millisecond))
	ws := dial(t, e.url, nil)
	id := whoami(t, ws)
	done := make(chan websocket.StatusCode, 1)
	go func() {
		code := websocket.StatusCode(-1)
		for {
			if _, _, err := ws.Read(context.Background()); err != nil {
				code = websocket.CloseStatus(err)
				break
			}
		}
		done <- code
	}()
	// Activity does not extend the cap.
	timeout := time.After(liveness)
	for {
		select {
		case code := <-done:
			if code != websocket.StatusGoingAway {
				t.Fatalf("client saw close %v", code)
			}
			ev := h.wait(t, RouteDisconnect, id, 1)[0]
			if r := ev.RequestContext.DisconnectReason; ev.RequestContext.DisconnectStatusCode != 1001 || r == nil || !strings.Contains(*r, "duration") {
				t.Fatalf("disconnect %+v", ev.RequestContext)
			}
			assertGone(t, e, id)
			return
		case <-timeout:
			t.Fatal("connection outlived its maximum duration")
		case <-time.After(20 * time.Millisecond):
			_ = ws.Write(context.Background(), websocket.MessageText, []byte("heartbeat"))
		}
	}
}

func TestCloseDisconnectsAll(t *testing.T) {
	const n = 20
	h := &recorder{}
	e := start(t, h)
	codes := make(chan websocket.StatusCode, n)
	ids := make([]string, n)
	for i := range n {
		ws := dial(t, e.url, nil)
		ids[i] = whoami(t, ws)
		go func() {
			for {
				if _, _, err := ws.Read(context.Background()); err != nil {
					codes <- websocket.CloseStatus(err)
					return
				}
			}
		}()
	}
	if err := e.r.Close(); err != nil {
		t.Fatal(err)
	}
	// Close returns after every $disconnect was handled.
	for _, id := range ids {
		if got := len(h.all(RouteDisconnect, id)); got != 1 {
			t.Fatalf("%s: %d $disconnect events", id, got)
		}
	}
	for range n {
		select {
		case code := <-codes:
			if code != websocket.StatusGoingAway {
				t.Fatalf("client saw close %v", code)
			}
		case <-time.After(liveness):
			t.Fatal("a client never saw the close")
		}
	}
	_, resp, err := websocket.Dial(ctxT(t), e.url, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("dial after Close: %v %v", err, resp)
	}
	if e.r.Len() != 0 {
		t.Fatalf("Len %d after Close", e.r.Len())
	}
}

func TestManyConnectionsOwnPosts(t *testing.T) {
	const conns, posts = 200, 5
	h := &recorder{}
	e := start(t, h)
	type client struct {
		ws *websocket.Conn
		id string
	}
	clients := make([]client, conns)
	var wg sync.WaitGroup
	errs := make(chan error, conns*posts)
	for i := range conns {
		wg.Go(func() {
			ws, _, err := websocket.Dial(ctxT(t), e.url, nil)
			if err != nil {
				errs <- err
				return
			}
			if err := ws.Write(ctxT(t), websocket.MessageText, []byte("whoami")); err != nil {
				errs <- err
				return
			}
			_, id, err := ws.Read(ctxT(t))
			if err != nil {
				errs <- err
				return
			}
			clients[i] = client{ws, string(id)}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range clients {
			_ = c.ws.CloseNow()
		}
	})
	if got := e.r.Len(); got != conns {
		t.Fatalf("Len = %d", got)
	}

	errs = make(chan error, conns*posts*2)
	for _, c := range clients {
		for p := range posts {
			wg.Go(func() {
				if err := post(t, e, c.id, fmt.Appendf(nil, "%s/%d", c.id, p)); err != nil {
					errs <- err
				}
			})
		}
		wg.Go(func() {
			var got []string
			for range posts {
				_, b, err := c.ws.Read(ctxT(t))
				if err != nil {
					errs <- err
					return
				}
				got = append(got, string(b))
			}
			slices.Sort(got)
			for p, s := range got {
				if want := fmt.Sprintf("%s/%d", c.id, p); s != want {
					errs <- fmt.Errorf("connection %s received %q, want %q", c.id, s, want)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestConcurrentPostsOneConnection(t *testing.T) {
	const n = 100
	e := start(t, &recorder{})
	ws := dial(t, e.url, nil)
	id := whoami(t, ws)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// Large enough to need several TCP writes per message.
			data := bytes.Repeat([]byte{byte('a' + i%26)}, 16*1024+i)
			if err := post(t, e, id, data); err != nil {
				t.Errorf("post %d: %v", i, err)
			}
		})
	}
	seen := map[int]bool{}
	for range n {
		_, b, err := ws.Read(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		i := len(b) - 16*1024
		if i < 0 || i >= n || seen[i] || !bytes.Equal(b, bytes.Repeat([]byte{byte('a' + i%26)}, len(b))) {
			t.Fatalf("interleaved or duplicate message of %d bytes", len(b))
		}
		seen[i] = true
	}
	wg.Wait()
}

func TestSlowClientCutOff(t *testing.T) {
	h := &recorder{}
	e := start(t, h, WithWriteTimeout(200*time.Millisecond))
	ws := dial(t, e.url, nil)
	id := whoami(t, ws)
	// The client stops reading; once the socket buffers are full a post
	// times out, the connection ends and posts answer Gone.
	chunk := bytes.Repeat([]byte("s"), MaxMessage)
	for i := 0; ; i++ {
		err := post(t, e, id, chunk)
		if isGone(err) {
			break
		}
		if err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
		if i == 2000 {
			t.Fatal("250 MB posted to a client that does not read")
		}
	}
	h.wait(t, RouteDisconnect, id, 1)
	assertGone(t, e, id)
}
