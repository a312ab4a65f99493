package lambdatest

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/c0mpute/c0mpute/functions/cmd/keeper/keeperfn"
)

var update = flag.Bool("update", false, "rewrite testdata/events from the decoded events")

// goldenEvents is every payload the functions accept or return, with the
// Go type that carries it: the Function URL request and response (api),
// the WebSocket proxy request and response (relay), the Scheduler event
// (keeper).
var goldenEvents = []struct {
	file string
	typ  any
	// ignored are fields of the real payload (dotted paths) the type has
	// no field for, each with why losing it is harmless.
	ignored []string
}{
	// routeKey and stage are always "$default" on a Function URL; the API
	// routes by rawPath.
	{"function-url-models.json", events.LambdaFunctionURLRequest{}, urlIgnored},
	{"function-url-chat.json", events.LambdaFunctionURLRequest{}, urlIgnored},
	{"function-url-response.json", events.LambdaFunctionURLResponse{}, nil},
	{"websocket-connect.json", events.APIGatewayWebsocketProxyRequest{}, nil},
	{"websocket-default.json", events.APIGatewayWebsocketProxyRequest{}, nil},
	{"websocket-disconnect.json", events.APIGatewayWebsocketProxyRequest{}, nil},
	{"websocket-response.json", events.APIGatewayProxyResponse{}, nil},
	{"scheduler-keeper.json", keeperfn.Event{}, nil},
}

// TestGoldenEventsRoundTrip decodes each payload into its aws-lambda-go (or
// keeperfn) type refusing unknown fields, encodes it again and requires the
// same JSON: every field of the real payload survives the types the
// functions use.
func TestGoldenEventsRoundTrip(t *testing.T) {
	for _, g := range goldenEvents {
		t.Run(g.file, func(t *testing.T) {
			path := filepath.Join("testdata", "events", g.file)
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var fields map[string]any
			if err := json.Unmarshal(raw, &fields); err != nil {
				t.Fatal(err)
			}
			for _, k := range g.ignored {
				if !deletePath(fields, strings.Split(k, ".")) {
					t.Fatalf("ignored field %q is not in the payload", k)
				}
			}
			raw, _ = json.Marshal(fields)
			v := reflect.New(reflect.TypeOf(g.typ))
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(v.Interface()); err != nil {
				t.Fatalf("decode: %v", err)
			}
			out, err := json.MarshalIndent(v.Interface(), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, '\n')
			if *update && g.ignored == nil {
				if err := os.WriteFile(path, out, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if *update {
				return
			}
			if !sameJSON(t, raw, out) {
				t.Fatalf("round trip changed the payload:\nfile:\n%s\nre-encoded:\n%s", raw, out)
			}
		})
	}
}

var urlIgnored = []string{"routeKey", "requestContext.routeKey", "requestContext.stage"}

func deletePath(m map[string]any, path []string) bool {
	if len(path) == 1 {
		_, ok := m[path[0]]
		delete(m, path[0])
		return ok
	}
	sub, ok := m[path[0]].(map[string]any)
	return ok && deletePath(sub, path[1:])
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}

// loadEvent reads a golden payload into v.
func loadEvent(t testing.TB, file string, v any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "events", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatal(err)
	}
}

func FuzzSplitStreamingResponse(f *testing.F) {
	f.Add([]byte(`{"statusCode":200,"headers":{"Content-Type":"text/event-stream"}}` + "\x00\x00\x00\x00\x00\x00\x00\x00" + "data: [DONE]\n\n"))
	f.Add([]byte("no prelude"))
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		status, _, body, err := SplitStreamingResponse(b)
		if err == nil && len(body) > len(b) {
			t.Fatalf("body longer than the input (status %d)", status)
		}
	})
}
