package relay

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/coder/websocket"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// normalise replaces what differs from run to run (ids, times, the port,
// the handshake key) with fixed values, so an event can be compared with a
// golden file.
func normalise(ev events.APIGatewayWebsocketProxyRequest, host string) events.APIGatewayWebsocketProxyRequest {
	rc := &ev.RequestContext
	rc.ConnectionID = "CONNECTION0000A="
	rc.RequestID = "REQUEST00000000="
	rc.ExtendedRequestID = rc.RequestID
	if rc.MessageID != nil {
		rc.MessageID = "MESSAGE00000000="
	}
	rc.ConnectedAt = 1700000000000
	rc.RequestTimeEpoch = 1700000000123
	rc.RequestTime = "14/Nov/2023:22:13:20 +0000"
	fix := func(k, v string) string {
		switch {
		case strings.EqualFold(k, "Sec-WebSocket-Key"):
			return "*"
		case v == host:
			return "127.0.0.1:8080"
		}
		return v
	}
	if rc.DomainName == host {
		rc.DomainName = "127.0.0.1:8080"
	}
	for k, v := range ev.Headers {
		ev.Headers[k] = fix(k, v)
	}
	for k, vs := range ev.MultiValueHeaders {
		for i, v := range vs {
			vs[i] = fix(k, v)
		}
	}
	return ev
}

func TestGoldenEvents(t *testing.T) {
	h := &recorder{}
	e := start(t, h)
	ws := dial(t, e.url+"?model=llama3&model=qwen3", &websocket.DialOptions{
		HTTPHeader: http.Header{"User-Agent": {"workerd/golden"}, "X-C0mpute-Pubkey": {"pk"}},
	})
	id := whoami(t, ws)
	if err := ws.Write(ctxT(t), websocket.MessageText, []byte(`{"v":1,"type":"heartbeat"}`)); err != nil {
		t.Fatal(err)
	}
	h.wait(t, RouteDefault, id, 2)
	if err := ws.Close(websocket.StatusNormalClosure, "bye"); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		file string
		ev   events.APIGatewayWebsocketProxyRequest
	}{
		{"connect.json", h.wait(t, RouteConnect, id, 1)[0]},
		{"default.json", h.wait(t, RouteDefault, id, 2)[1]},
		{"disconnect.json", h.wait(t, RouteDisconnect, id, 1)[0]},
	} {
		t.Run(tt.file, func(t *testing.T) {
			ev := normalise(tt.ev, e.host)
			got, err := json.MarshalIndent(ev, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", "events", tt.file)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s differs from the golden file (run with -update after checking):\n%s", path, got)
			}
			// The golden file decodes back to the same event, as Lambda's
			// runtime would decode it.
			var back events.APIGatewayWebsocketProxyRequest
			if err := json.Unmarshal(want, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, ev) {
				t.Fatalf("golden file does not decode to the event:\n%+v\n%+v", back, ev)
			}
		})
	}
}
