package lambdatest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/c0mpute/c0mpute/functions/cmd/keeper/keeperfn"
	"github.com/c0mpute/c0mpute/infra/testenv"
)

var update = flag.Bool("update", false, "rewrite testdata/events from the captures and the edits in fixtures")

// awsModule is the module whose captured events our fixtures start from.
// testdata/aws-lambda-go/ holds verbatim copies of files of this version
// under their paths in the module (TestCapturesAreVerbatim checks them);
// testdata/README.md says where each fixture comes from.
const (
	awsModule        = "github.com/aws/aws-lambda-go"
	awsModuleVersion = "v1.55.1"
)

// edit sets a field (a dotted path into the JSON document) of a capture to
// a value: what must differ for our functions to act on the event.
type edit struct {
	path  string
	value any
}

// chatBody is the request the chat fixture carries in place of the
// capture's {"hello": "world"}.
const chatBody = `{"model":"c0mpute-pro","messages":[{"role":"user","content":"Say hello"}],"stream":true,"max_tokens":8,"temperature":0}`

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// fixtures is every payload the functions accept or return, with the Go
// type that carries it: the Function URL request and response (api), the
// WebSocket proxy request and response (relay), the Scheduler event
// (keeper). Each comes from a capture of a real AWS event in
// aws-lambda-go with the edits listed, except where source is empty: AWS
// has no capture of that payload (see testdata/README.md).
var fixtures = []struct {
	file string
	typ  any
	// source is the capture's path in the aws-lambda-go module, copied
	// under testdata/aws-lambda-go/.
	source string
	edits  []edit
	// ignored are fields of the real payload (dotted paths) the type has
	// no field for, each with why losing it is harmless.
	ignored []string
}{
	{
		file: "function-url-models.json", typ: events.LambdaFunctionURLRequest{},
		source: "lambdaurl/testdata/function-url-domain-only-get-request.json",
		edits: []edit{
			{"rawPath", "/v1/models"},
			{"requestContext.http.path", "/v1/models"},
		},
		ignored: urlIgnored,
	},
	{
		file: "function-url-chat.json", typ: events.LambdaFunctionURLRequest{},
		source: "lambdaurl/testdata/function-url-request-with-headers-and-cookies-and-text-body.json",
		edits: []edit{
			{"rawPath", "/v1/chat/completions"},
			{"requestContext.http.path", "/v1/chat/completions"},
			{"body", chatBody},
			// The headers that describe the body follow it.
			{"headers.content-length", strconv.Itoa(len(chatBody))},
			{"headers.x-amz-content-sha256", sha256Hex(chatBody)},
			// Tests put a real API key here.
			{"headers.authorization", "Bearer sk-c0mpute-REPLACED-IN-TEST"},
		},
		ignored: urlIgnored,
	},
	{
		file: "function-url-response.json", typ: events.LambdaFunctionURLResponse{},
		source: "events/testdata/lambda-urls-response.json",
	},
	{
		file: "websocket-connect.json", typ: events.APIGatewayWebsocketProxyRequest{},
		source: "events/testdata/apigw-websocket-request.json",
		edits: []edit{
			// The API's listener authenticates with this header (tests put
			// the stack's secret in it).
			{"headers.X-C0mpute-Listener", "REPLACED-IN-TEST"},
			{"multiValueHeaders.X-C0mpute-Listener", []any{"REPLACED-IN-TEST"}},
			// The connection of the $default and $disconnect captures, so
			// the three events are one connection's life.
			{"requestContext.connectionId", "R1kmxc2VNjMCFIA="},
			{"requestContext.connectedAt", json.Number("1705751697419")},
		},
	},
	{
		file: "websocket-default.json", typ: events.APIGatewayWebsocketProxyRequest{},
		source: "events/testdata/apigw-websocket-request-send-message.json",
	},
	{
		file: "websocket-disconnect.json", typ: events.APIGatewayWebsocketProxyRequest{},
		source: "events/testdata/apigw-websocket-request-disconnect.json",
	},
	{
		file: "websocket-response.json", typ: events.APIGatewayProxyResponse{},
		source: "events/testdata/apigw-response.json",
	},
	// Ours: Scheduler sends the target input terraform/scheduler.tf
	// writes, with its context attributes filled in
	// (TestKeeperEventIsTheSchedulesInput).
	{file: "scheduler-keeper.json", typ: keeperfn.Event{}},
}

// urlIgnored: routeKey and stage are always "$default" on a Function URL
// and the API routes by rawPath; the authorizer is the IAM caller of the
// URL the capture was taken from (redacted to {} by aws-lambda-go's
// gen-events.sh) — ours has auth type NONE and the API authenticates the
// bearer key itself.
var urlIgnored = []string{"routeKey", "requestContext.routeKey", "requestContext.stage", "requestContext.authorizer"}

// TestFixturesFromCaptures: each fixture is its capture with exactly the
// listed edits, nothing else changed.
func TestFixturesFromCaptures(t *testing.T) {
	for _, f := range fixtures {
		if f.source == "" {
			continue
		}
		t.Run(f.file, func(t *testing.T) {
			doc := readJSON(t, filepath.Join("testdata", "aws-lambda-go", filepath.FromSlash(f.source)))
			for _, e := range f.edits {
				if err := setPath(doc, strings.Split(e.path, "."), e.value); err != nil {
					t.Fatalf("edit %s: %v", e.path, err)
				}
			}
			want, err := json.MarshalIndent(doc, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, '\n')
			path := filepath.Join("testdata", "events", f.file)
			if *update {
				if err := os.WriteFile(path, want, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !sameJSON(t, got, want) {
				t.Fatalf("%s is not %s with the listed edits (run with -update to rewrite it):\n%s", path, f.source, want)
			}
		})
	}
}

// TestFunctionURLBodyHeaders: in every Function URL request the headers
// that describe the body (its length and the SigV4 payload hash) match it,
// as they do in a real request.
func TestFunctionURLBodyHeaders(t *testing.T) {
	for _, f := range fixtures {
		if _, ok := f.typ.(events.LambdaFunctionURLRequest); !ok {
			continue
		}
		var ev events.LambdaFunctionURLRequest
		loadEvent(t, f.file, &ev)
		if ev.IsBase64Encoded {
			t.Fatalf("%s: base64 bodies are not used", f.file)
		}
		if n, ok := ev.Headers["content-length"]; ok && n != strconv.Itoa(len(ev.Body)) {
			t.Errorf("%s: content-length %s, body %d bytes", f.file, n, len(ev.Body))
		}
		if h := ev.Headers["x-amz-content-sha256"]; h != sha256Hex(ev.Body) {
			t.Errorf("%s: x-amz-content-sha256 %s does not hash the body", f.file, h)
		}
	}
}

// TestCapturesAreVerbatim: every file under testdata/aws-lambda-go/ is
// byte for byte the file at that path in the aws-lambda-go module go.mod
// requires, which must still be awsModuleVersion.
func TestCapturesAreVerbatim(t *testing.T) {
	root := filepath.Join("testdata", "aws-lambda-go")
	n := testenv.VerbatimCopies(t, awsModule, awsModuleVersion, root)
	// Every fixture's source is among the copies.
	for _, f := range fixtures {
		if f.source != "" {
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(f.source))); err != nil {
				t.Errorf("%s: source %v", f.file, err)
			}
		}
	}
	t.Logf("%d captures match %s@%s", n, awsModule, awsModuleVersion)
}

// TestKeeperEventIsTheSchedulesInput: AWS has no capture of a Scheduler
// invocation, because its payload is the schedule's own input. The fixture
// has exactly the keys of the input terraform/scheduler.tf writes, with
// the context attributes filled in as Scheduler documents them (an RFC
// 3339 time, an id, an attempt counter).
func TestKeeperEventIsTheSchedulesInput(t *testing.T) {
	tf, err := os.ReadFile(filepath.Join(RepoRoot(), "terraform", "scheduler.tf"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)input\s*=\s*jsonencode\(\{(.*?)\}\)`).FindSubmatch(tf)
	if block == nil {
		t.Fatal("no input = jsonencode({...}) in terraform/scheduler.tf")
	}
	template := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(\w+)\s*=\s*(.+?)\s*$`).FindAllSubmatch(block[1], -1) {
		template[string(m[1])] = strings.Trim(string(m[2]), `"`)
	}
	var raw map[string]any
	loadEvent(t, "scheduler-keeper.json", &raw)
	ev := map[string]string{}
	for k, v := range raw {
		ev[k] = fmt.Sprint(v)
	}
	if got, want := slices.Sorted(maps.Keys(ev)), slices.Sorted(maps.Keys(template)); !slices.Equal(got, want) {
		t.Fatalf("fixture keys %v, schedule input keys %v", got, want)
	}
	for k, v := range template {
		switch v {
		case "each.key":
			if !strings.Contains(string(tf), ev[k]+" = ") {
				t.Errorf("%s %q is not a scheduled job", k, ev[k])
			}
		case "<aws.scheduler.scheduled-time>":
			if _, err := time.Parse(time.RFC3339, ev[k]); err != nil {
				t.Errorf("%s %q: %v", k, ev[k], err)
			}
		case "<aws.scheduler.execution-id>":
			if !regexp.MustCompile(`^[0-9a-z]{16}$`).MatchString(ev[k]) {
				t.Errorf("%s %q is not shaped like Scheduler's ids (d32c5kddcf5bb8c3)", k, ev[k])
			}
		case "<aws.scheduler.attempt-number>":
			if n, err := strconv.Atoi(ev[k]); err != nil || n < 1 {
				t.Errorf("%s %q is not an attempt number", k, ev[k])
			}
		case "true":
			if raw[k] != true {
				t.Errorf("%s %v, want true", k, raw[k])
			}
		default:
			t.Errorf("schedule input %s = %s: the test does not know this value", k, v)
		}
	}
}

// TestGoldenEventsRoundTrip decodes each payload into its aws-lambda-go (or
// keeperfn) type refusing unknown fields, encodes it again and requires the
// same JSON: every field of the real payload survives the types the
// functions use.
func TestGoldenEventsRoundTrip(t *testing.T) {
	for _, g := range fixtures {
		t.Run(g.file, func(t *testing.T) {
			fields := readJSON(t, filepath.Join("testdata", "events", g.file))
			for _, k := range g.ignored {
				if !deletePath(fields, strings.Split(k, ".")) {
					t.Fatalf("ignored field %q is not in the payload", k)
				}
			}
			raw, _ := json.Marshal(fields)
			v := reflect.New(reflect.TypeOf(g.typ))
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(v.Interface()); err != nil {
				t.Fatalf("decode: %v", err)
			}
			out, err := json.Marshal(v.Interface())
			if err != nil {
				t.Fatal(err)
			}
			if !sameJSON(t, raw, out) {
				t.Fatalf("round trip changed the payload:\nfile:\n%s\nre-encoded:\n%s", raw, out)
			}
		})
	}
}

// readJSON decodes a JSON object keeping numbers as written.
func readJSON(t testing.TB, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// setPath sets a field, creating the last key (not the objects above it).
func setPath(m map[string]any, path []string, v any) error {
	for _, k := range path[:len(path)-1] {
		sub, ok := m[k].(map[string]any)
		if !ok {
			return &fs.PathError{Op: "set", Path: k, Err: fs.ErrNotExist}
		}
		m = sub
	}
	m[path[len(path)-1]] = v
	return nil
}

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
