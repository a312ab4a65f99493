package relay

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/coder/websocket"

	"github.com/c0mpute/c0mpute/infra/testenv"
)

// The captures the relay's events are held against: API Gateway WebSocket
// events that aws-lambda-go ships in events/testdata, copied verbatim
// under testdata/aws-lambda-go/ (testdata/README.md says what each is).
const (
	awsModule        = "github.com/aws/aws-lambda-go"
	awsModuleVersion = "v1.55.1"
	captureDir       = "testdata/aws-lambda-go/events/testdata"
)

// eventShapes pairs each route with its capture. absent lists fields of
// the capture the local relay does not send, each with the reason; every
// other field of the capture must be in the relay's event with the same
// JSON type, and the relay's event has no field the capture lacks.
var eventShapes = []struct {
	route, capture string
	// real is false for a capture that is not one AWS event as sent: its
	// values are not held to AWS's formats.
	real   bool
	absent map[string]string
}{
	{
		route: RouteConnect, capture: "apigw-websocket-request.json",
		// aws-lambda-go's only $connect fixture is a REST API proxy
		// request with the WebSocket context fields added (its requestId
		// is a UUID, requestTimeEpoch 0, "error" and "status" are "*"):
		// the REST fields below are not part of a WebSocket event.
		absent: map[string]string{
			"resource":                          restOnly,
			"path":                              restOnly,
			"httpMethod":                        restOnly,
			"pathParameters":                    restOnly,
			"stageVariables":                    restOnly,
			"requestContext.resourceId":         restOnly,
			"requestContext.resourcePath":       restOnly,
			"requestContext.httpMethod":         restOnly,
			"requestContext.accountId":          restOnly,
			"requestContext.error":              restOnly,
			"requestContext.status":             restOnly,
			"requestContext.integrationLatency": restOnly,
			"body":                              "a $connect is the HTTP upgrade: it has no body",
			"requestContext.authorizer":         "set by a Lambda authorizer; the relay's routes authorise in the $connect handler",
			"requestContext.identity.cognitoIdentityPoolId":         cognito,
			"requestContext.identity.cognitoIdentityId":             cognito,
			"requestContext.identity.cognitoAuthenticationType":     cognito,
			"requestContext.identity.cognitoAuthenticationProvider": cognito,
			"requestContext.identity.accountId":                     iamCaller,
			"requestContext.identity.caller":                        iamCaller,
			"requestContext.identity.accessKey":                     iamCaller,
			"requestContext.identity.userArn":                       iamCaller,
			"requestContext.identity.user":                          iamCaller,
			"requestContext.identity.apiKey":                        "API keys are a REST API feature",
			"requestContext.identity.apiKeyId":                      "API keys are a REST API feature",
		},
	},
	{route: RouteDefault, capture: "apigw-websocket-request-send-message.json", real: true},
	{route: RouteDisconnect, capture: "apigw-websocket-request-disconnect.json", real: true},
}

const (
	restOnly  = "a REST API proxy field the aws-lambda-go $connect fixture carries; WebSocket events have none"
	cognito   = "Cognito identity, only with an IAM-authorised route; the relay's routes are not"
	iamCaller = "the IAM caller, only with an IAM-authorised route; the relay's routes are not"
)

// dataMaps are objects whose keys are data (header names, parameters), not
// fields: their presence is compared, not their keys.
var dataMaps = []string{"headers", "multiValueHeaders", "queryStringParameters", "multiValueQueryStringParameters",
	"pathParameters", "stageVariables", "requestContext.authorizer"}

// TestEventsMatchAWSCaptures connects a worker, sends a message and closes,
// and holds the three events the relay invoked its handler with against
// the real API Gateway events: the same fields with the same JSON types,
// AWS's formats for times and ids, and the values the client sent.
func TestEventsMatchAWSCaptures(t *testing.T) {
	h := &recorder{}
	e := start(t, h)
	before := time.Now()
	ws := dial(t, e.url+"?model=llama3&model=qwen3", &websocket.DialOptions{
		HTTPHeader: http.Header{"User-Agent": {"workerd/golden"}, "X-C0mpute-Pubkey": {"pk"}},
	})
	id := whoami(t, ws)
	const body = `{"v":1,"type":"heartbeat"}`
	if err := ws.Write(ctxT(t), websocket.MessageText, []byte(body)); err != nil {
		t.Fatal(err)
	}
	h.wait(t, RouteDefault, id, 2)
	if err := ws.Close(websocket.StatusNormalClosure, "bye"); err != nil {
		t.Fatal(err)
	}
	got := map[string]events.APIGatewayWebsocketProxyRequest{
		RouteConnect:    h.wait(t, RouteConnect, id, 1)[0],
		RouteDefault:    h.wait(t, RouteDefault, id, 2)[1],
		RouteDisconnect: h.wait(t, RouteDisconnect, id, 1)[0],
	}
	after := time.Now()

	for _, s := range eventShapes {
		t.Run(s.route, func(t *testing.T) {
			ev := got[s.route]
			raw, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			ours := fieldKinds(t, raw)
			captured, err := os.ReadFile(filepath.Join(captureDir, s.capture))
			if err != nil {
				t.Fatal(err)
			}
			theirs := fieldKinds(t, captured)
			for _, f := range slices.Sorted(maps.Keys(ours)) {
				switch k, ok := theirs[f]; {
				case !ok:
					t.Errorf("%s: the relay sends %s, which AWS's event does not have", s.route, f)
				case k != ours[f]:
					t.Errorf("%s: %s is a JSON %s, AWS sends a %s", s.route, f, ours[f], k)
				}
			}
			for _, f := range slices.Sorted(maps.Keys(theirs)) {
				_, sent := ours[f]
				_, excused := s.absent[f]
				switch {
				case !sent && !excused:
					t.Errorf("%s: AWS sends %s, the relay does not", s.route, f)
				case sent && excused:
					t.Errorf("%s: %s is listed as absent but the relay sends it", s.route, f)
				}
			}
			for f := range s.absent {
				if _, ok := theirs[f]; !ok {
					t.Errorf("%s: absent field %s is not in the capture either", s.route, f)
				}
			}

			// AWS's formats, checked on the relay's event and, where the
			// capture is one real event, on the capture too: the checks
			// describe AWS, not only the relay.
			var capture events.APIGatewayWebsocketProxyRequest
			if err := json.Unmarshal(captured, &capture); err != nil {
				t.Fatal(err)
			}
			checkFormats(t, "relay", ev)
			if s.real {
				checkFormats(t, s.capture, capture)
			}
			rc := ev.RequestContext
			if at := time.UnixMilli(rc.RequestTimeEpoch); at.Before(before.Truncate(time.Millisecond)) || at.After(after) {
				t.Errorf("requestTimeEpoch %d is not the time of the event", rc.RequestTimeEpoch)
			}
			if rc.RouteKey != s.route || rc.EventType != capture.RequestContext.EventType {
				t.Errorf("routeKey %q eventType %q, want %q and AWS's %q", rc.RouteKey, rc.EventType, s.route, capture.RequestContext.EventType)
			}
			if rc.ConnectionID != id || rc.Identity.SourceIP != "127.0.0.1" || rc.Identity.UserAgent != "workerd/golden" {
				t.Errorf("connection %q identity %+v", rc.ConnectionID, rc.Identity)
			}
		})
	}

	// What the client sent arrives as AWS passes it.
	c, m, d := got[RouteConnect], got[RouteDefault], got[RouteDisconnect]
	for _, chk := range []struct {
		name      string
		got, want any
	}{
		{"$connect header", c.Headers["X-C0mpute-Pubkey"], "pk"},
		{"$connect multi-value header", fmt.Sprint(c.MultiValueHeaders["X-C0mpute-Pubkey"]), "[pk]"},
		{"$connect query (last value)", c.QueryStringParameters["model"], "qwen3"},
		{"$connect multi-value query", fmt.Sprint(c.MultiValueQueryStringParameters["model"]), "[llama3 qwen3]"},
		{"$default body", m.Body, body},
		{"$default base64", m.IsBase64Encoded, false},
		{"$default messageId", m.RequestContext.MessageID != nil, true},
		{"$disconnect status", d.RequestContext.DisconnectStatusCode, int64(websocket.StatusNormalClosure)},
		{"$disconnect reason", fmt.Sprint(deref(d.RequestContext.DisconnectReason)), "bye"},
		{"same connectedAt", m.RequestContext.ConnectedAt == c.RequestContext.ConnectedAt && d.RequestContext.ConnectedAt == c.RequestContext.ConnectedAt, true},
	} {
		if chk.got != chk.want {
			t.Errorf("%s = %v, want %v", chk.name, chk.got, chk.want)
		}
	}
}

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// checkFormats holds an event to the formats of AWS's WebSocket events:
// ids of 15 base64 characters and "=" (the ids validID accepts, as the
// management API must accept AWS's), requestId equal to extendedRequestId,
// times in milliseconds with requestTime the same second in API Gateway's
// layout, messageDirection IN, and eventType matching routeKey.
func checkFormats(t *testing.T, who string, ev events.APIGatewayWebsocketProxyRequest) {
	t.Helper()
	rc := ev.RequestContext
	ids := []string{rc.ConnectionID, rc.RequestID, rc.ExtendedRequestID}
	if rc.MessageID != nil {
		s, ok := rc.MessageID.(string)
		if !ok {
			t.Errorf("%s: messageId %v is not a string", who, rc.MessageID)
		}
		ids = append(ids, s)
	}
	for _, id := range ids {
		if !validID(id) {
			t.Errorf("%s: id %q is not shaped like API Gateway's", who, id)
		}
	}
	if rc.RequestID != rc.ExtendedRequestID {
		t.Errorf("%s: requestId %q, extendedRequestId %q", who, rc.RequestID, rc.ExtendedRequestID)
	}
	for _, ms := range []int64{rc.ConnectedAt, rc.RequestTimeEpoch} {
		if ms < 1e12 || ms >= 1e13 {
			t.Errorf("%s: %d is not a time in milliseconds", who, ms)
		}
	}
	if rc.RequestTimeEpoch < rc.ConnectedAt {
		t.Errorf("%s: request at %d before the connection at %d", who, rc.RequestTimeEpoch, rc.ConnectedAt)
	}
	at, err := time.Parse(requestTimeLayout, rc.RequestTime)
	if err != nil || !at.Equal(time.UnixMilli(rc.RequestTimeEpoch).Truncate(time.Second)) {
		t.Errorf("%s: requestTime %q is not requestTimeEpoch %d in %q (%v)", who, rc.RequestTime, rc.RequestTimeEpoch, requestTimeLayout, err)
	}
	if rc.MessageDirection != "IN" {
		t.Errorf("%s: messageDirection %q", who, rc.MessageDirection)
	}
	want := map[string]string{RouteConnect: "CONNECT", RouteDefault: "MESSAGE", RouteDisconnect: "DISCONNECT"}[rc.RouteKey]
	if want == "" || rc.EventType != want {
		t.Errorf("%s: routeKey %q with eventType %q", who, rc.RouteKey, rc.EventType)
	}
}

// fieldKinds flattens a JSON event to its field paths and their JSON
// types; the keys of dataMaps are not fields.
func fieldKinds(t *testing.T, raw []byte) map[string]string {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			p := prefix + k
			if sub, ok := v.(map[string]any); ok && !slices.Contains(dataMaps, p) {
				walk(p+".", sub)
				continue
			}
			out[p] = jsonKind(v)
		}
	}
	walk("", doc)
	return out
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	default:
		return "object"
	}
}

// TestCapturesAreVerbatim: the files under testdata/aws-lambda-go/ are
// byte for byte the files at those paths in the aws-lambda-go module
// go.mod requires, which must still be awsModuleVersion.
func TestCapturesAreVerbatim(t *testing.T) {
	root := filepath.Join("testdata", "aws-lambda-go")
	n := testenv.VerbatimCopies(t, awsModule, awsModuleVersion, root)
	if n != len(eventShapes) {
		t.Errorf("%d captures, %d routes", n, len(eventShapes))
	}
	for _, s := range eventShapes {
		if _, err := os.Stat(filepath.Join(captureDir, s.capture)); err != nil {
			t.Error(err)
		}
	}
}
