package relay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"
	"github.com/coder/websocket"
)

func TestParseConnectionPath(t *testing.T) {
	tests := []struct {
		path string
		id   string
		ok   bool
	}{
		{"/@connections/TWegAcC4EowCHnA=", "TWegAcC4EowCHnA=", true},
		{"/prod/@connections/TWegAcC4EowCHnA=", "TWegAcC4EowCHnA=", true},
		{"/a/b/@connections/x/", "x", true},
		{"/@connections/", "", false},
		{"/@connections//", "", false},
		{"/@connections/a/b", "", false},
		{"/@connections", "", false},
		{"/", "", false},
		{"/connections/abc", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		id, ok := parseConnectionPath(tt.path)
		if id != tt.id || ok != tt.ok {
			t.Errorf("parseConnectionPath(%q) = %q, %v; want %q, %v", tt.path, id, ok, tt.id, tt.ok)
		}
	}
}

func TestValidID(t *testing.T) {
	for range 1000 {
		if id := newID(); !validID(id) {
			t.Fatalf("newID() = %q is not valid", id)
		}
	}
	for _, id := range []string{"", "short=", "TWegAcC4EowCHnA", "TWegAcC4EowCHnAA", "TWegAcC4Eow/HnA=", "TWegAcC4Eow+HnA=", "TWegAcC4EowCHnA==", "TWégAcC4EowCHn="} {
		if validID(id) {
			t.Errorf("validID(%q) = true", id)
		}
	}
}

// FuzzConnectionPath checks the management path parser on any path: it
// never panics, an id it returns is exactly the last path segment after
// /@connections/, and every id without a slash parses back from its path.
func FuzzConnectionPath(f *testing.F) {
	for _, s := range []string{
		"/@connections/TWegAcC4EowCHnA=", "/prod/@connections/abc", "/@connections/", "/@connections/a/b",
		"/@connections/@connections/x", "//@connections//x", "/x/@connections/%2F", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		id, ok := parseConnectionPath(path)
		if !ok {
			if id != "" {
				t.Fatalf("no match but id %q", id)
			}
		} else {
			if id == "" || strings.Contains(id, "/") {
				t.Fatalf("parseConnectionPath(%q) = %q", path, id)
			}
			if !strings.HasSuffix(path, connectionsSegment+id) && !strings.HasSuffix(path, connectionsSegment+id+"/") {
				t.Fatalf("parseConnectionPath(%q) = %q, not the path's last segment", path, id)
			}
		}
		if path != "" && !strings.Contains(path, "/") {
			for _, prefix := range []string{"", "/stage"} {
				if got, ok := parseConnectionPath(prefix + connectionsSegment + path); !ok || got != path {
					t.Fatalf("id %q parsed back as %q, %v", path, got, ok)
				}
			}
		}
		_ = validID(id)
	})
}

// signed builds a management call signed as the SDK signs one: SigV4 with
// the given key, at the given time, for service in us-east-1.
func signed(t *testing.T, method, url string, body []byte, creds aws.Credentials, at time.Time, service string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), service, "us-east-1", at); err != nil {
		t.Fatal(err)
	}
	return req
}

// apiError is a management API error response.
type apiError struct {
	status int
	code   string
	msg    string
}

func do(t *testing.T, req *http.Request) apiError {
	t.Helper()
	resp, err := http.DefaultClient.Do(req.WithContext(ctxT(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Message *string `json:"message"`
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatalf("%s %s: body %q: %v", req.Method, req.URL.Path, b, err)
		}
	}
	return apiError{resp.StatusCode, resp.Header.Get("X-Amzn-ErrorType"), aws.ToString(body.Message)}
}

// TestManagementSigV4 sends management calls signed right and wrong, and
// checks each refused one left the connections untouched: the next
// message a connection receives is a later valid post.
func TestManagementSigV4(t *testing.T) {
	h := &recorder{}
	e := start(t, h)
	ws := dial(t, e.url, nil)
	id := whoami(t, ws)
	victimWS := dial(t, e.url, nil)
	victim := whoami(t, victimWS)
	path := e.mgmt.URL + "/@connections/" + id
	good := aws.Credentials{AccessKeyID: testKeyID, SecretAccessKey: testSecret}
	now := time.Now()
	withAuth := func(req *http.Request, f func(string) string) *http.Request {
		req.Header.Set("Authorization", f(req.Header.Get("Authorization")))
		return req
	}

	tests := []struct {
		name string
		req  func() *http.Request
		// delivered is what the call posts to the connection; "" for a
		// refused call.
		delivered string
		msg       string // the refusal's message starts with this
	}{
		{name: "signed", delivered: "hello", req: func() *http.Request {
			return signed(t, "POST", path, []byte("hello"), good, now, "execute-api")
		}},
		{name: "signed four minutes ago", delivered: "late", req: func() *http.Request {
			return signed(t, "POST", path, []byte("late"), good, now.Add(-4*time.Minute), "execute-api")
		}},
		{name: "stage prefix", delivered: "staged", req: func() *http.Request {
			return signed(t, "POST", e.mgmt.URL+"/local/@connections/"+id, []byte("staged"), good, now, "execute-api")
		}},
		{name: "unsigned", msg: msgMissingToken, req: func() *http.Request {
			req, _ := http.NewRequest("POST", path, strings.NewReader("x"))
			return req
		}},
		{name: "wrong key id", msg: msgInvalidToken, req: func() *http.Request {
			return signed(t, "POST", path, []byte("x"), aws.Credentials{AccessKeyID: "AKIASOMEONEELSE00000", SecretAccessKey: testSecret}, now, "execute-api")
		}},
		{name: "wrong secret", msg: "The request signature we calculated does not match", req: func() *http.Request {
			return signed(t, "POST", path, []byte("x"), aws.Credentials{AccessKeyID: testKeyID, SecretAccessKey: "guessed"}, now, "execute-api")
		}},
		{name: "session token", msg: msgInvalidToken, req: func() *http.Request {
			return signed(t, "POST", path, []byte("x"), aws.Credentials{AccessKeyID: testKeyID, SecretAccessKey: testSecret, SessionToken: "tok"}, now, "execute-api")
		}},
		{name: "tampered body", msg: "The request signature we calculated does not match", req: func() *http.Request {
			req := signed(t, "POST", path, []byte("pay 1"), good, now, "execute-api")
			req.Body = io.NopCloser(strings.NewReader("pay 9"))
			return req
		}},
		{name: "tampered path", msg: "The request signature we calculated does not match", req: func() *http.Request {
			req := signed(t, "POST", path, []byte("x"), good, now, "execute-api")
			req.URL.Path = "/@connections/" + victim
			return req
		}},
		{name: "tampered method", msg: "The request signature we calculated does not match", req: func() *http.Request {
			req := signed(t, "GET", path, nil, good, now, "execute-api")
			req.Method = "DELETE"
			return req
		}},
		{name: "tampered signed header", msg: "The request signature we calculated does not match", req: func() *http.Request {
			req := signed(t, "POST", path, []byte("x"), good, now, "execute-api")
			req.Header.Set("Content-Type", "text/plain")
			return req
		}},
		{name: "tampered date", msg: "The request signature we calculated does not match", req: func() *http.Request {
			req := signed(t, "POST", path, []byte("x"), good, now, "execute-api")
			req.Header.Set("X-Amz-Date", now.Add(time.Second).UTC().Format(amzDateLayout))
			return req
		}},
		{name: "stale date", msg: "Signature expired: ", req: func() *http.Request {
			return signed(t, "POST", path, []byte("x"), good, now.Add(-6*time.Minute), "execute-api")
		}},
		{name: "future date", msg: "Signature not yet current: ", req: func() *http.Request {
			return signed(t, "POST", path, []byte("x"), good, now.Add(6*time.Minute), "execute-api")
		}},
		{name: "other service", msg: "Credential should be scoped to correct service", req: func() *http.Request {
			return signed(t, "POST", path, []byte("x"), good, now, "s3")
		}},
		{name: "host not signed", msg: "'Host' must be a 'SignedHeader'", req: func() *http.Request {
			return withAuth(signed(t, "POST", path, []byte("x"), good, now, "execute-api"), func(a string) string {
				return strings.Replace(a, "SignedHeaders=content-length;content-type;host;", "SignedHeaders=content-length;content-type;", 1)
			})
		}},
		{name: "garbled header", msg: msgIncomplete, req: func() *http.Request {
			return withAuth(signed(t, "POST", path, []byte("x"), good, now, "execute-api"), func(string) string {
				return "AWS4-HMAC-SHA256 Credential=" + testKeyID
			})
		}},
		{name: "other scheme", msg: msgIncomplete, req: func() *http.Request {
			return withAuth(signed(t, "POST", path, []byte("x"), good, now, "execute-api"), func(string) string {
				return "Bearer " + testSecret
			})
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := do(t, tt.req())
			if tt.delivered != "" {
				if got.status != http.StatusOK {
					t.Fatalf("refused: %+v", got)
				}
				if _, m := read(t, ws); m != tt.delivered {
					t.Fatalf("received %q, want %q", m, tt.delivered)
				}
			} else if got.status != http.StatusForbidden || got.code != errForbidden || !strings.HasPrefix(got.msg, tt.msg) {
				t.Fatalf("answer %+v, want 403 %s %q…", got, errForbidden, tt.msg)
			}
			// Unharmed, and nothing else arrived: the next message on
			// both connections is this valid post.
			marker := fmt.Sprintf("after %d", i)
			for _, c := range []struct {
				id string
				ws *websocket.Conn
			}{{id, ws}, {victim, victimWS}} {
				if err := post(t, e, c.id, []byte(marker)); err != nil {
					t.Fatalf("post to %s after the call: %v", c.id, err)
				}
				if _, m := read(t, c.ws); m != marker {
					t.Fatalf("connection %s received %q, want %q", c.id, m, marker)
				}
			}
		})
	}
	if n := len(h.all(RouteDisconnect, "")); n != 0 {
		t.Fatalf("%d connections ended", n)
	}
}

// TestManagementSDKCredentials checks the SDK client as callers use it:
// the configured key passes, any other key or secret gets
// ForbiddenException and posts nothing.
func TestManagementSDKCredentials(t *testing.T) {
	e := start(t, &recorder{})
	ws := dial(t, e.url, nil)
	id := whoami(t, ws)
	for _, c := range []struct{ akid, secret string }{{"AKIASOMEONEELSE00000", testSecret}, {testKeyID, "wrong"}} {
		_, err := newClient(e.mgmt.URL, c.akid, c.secret).PostToConnection(ctxT(t),
			&apigatewaymanagementapi.PostToConnectionInput{ConnectionId: aws.String(id), Data: []byte("forged")})
		var forbidden *types.ForbiddenException
		if !errors.As(err, &forbidden) {
			t.Fatalf("key %s: %v, want ForbiddenException", c.akid, err)
		}
		for _, call := range []func() error{
			func() error {
				_, err := newClient(e.mgmt.URL, c.akid, c.secret).GetConnection(ctxT(t), &apigatewaymanagementapi.GetConnectionInput{ConnectionId: aws.String(id)})
				return err
			},
			func() error {
				_, err := newClient(e.mgmt.URL, c.akid, c.secret).DeleteConnection(ctxT(t), &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: aws.String(id)})
				return err
			},
		} {
			if err := call(); !errors.As(err, &forbidden) {
				t.Fatalf("key %s: %v, want ForbiddenException", c.akid, err)
			}
		}
	}
	if err := post(t, e, id, []byte("real")); err != nil {
		t.Fatal(err)
	}
	if _, got := read(t, ws); got != "real" {
		t.Fatalf("got %q", got)
	}
}

// TestManagementFailsClosed checks that a relay without credentials
// refuses every management call, signed with any key or not.
func TestManagementFailsClosed(t *testing.T) {
	for _, opt := range []Option{WithCredentials("", ""), WithCredentials(testKeyID, ""), WithCredentials("", testSecret)} {
		h := &recorder{}
		r := New(h, opt)
		srv := httptest.NewServer(r)
		mgmt := httptest.NewServer(r.Management())
		ws := dial(t, "ws"+strings.TrimPrefix(srv.URL, "http")+"/", nil)
		id := whoami(t, ws)
		_, err := newClient(mgmt.URL, testKeyID, testSecret).PostToConnection(ctxT(t),
			&apigatewaymanagementapi.PostToConnectionInput{ConnectionId: aws.String(id), Data: []byte("x")})
		var forbidden *types.ForbiddenException
		if !errors.As(err, &forbidden) {
			t.Errorf("SDK post: %v, want ForbiddenException", err)
		}
		// What an empty configured secret or key id must not admit: a
		// signature made with the empty one.
		for _, c := range []aws.Credentials{{AccessKeyID: testKeyID}, {SecretAccessKey: testSecret}, {}} {
			req := signed(t, "POST", mgmt.URL+"/@connections/"+id, []byte("x"), c, time.Now(), "execute-api")
			if got := do(t, req); got.status != http.StatusForbidden || got.code != errForbidden {
				t.Errorf("signed with %q/%q: %+v", c.AccessKeyID, c.SecretAccessKey, got)
			}
		}
		anon := apigatewaymanagementapi.New(apigatewaymanagementapi.Options{BaseEndpoint: aws.String(mgmt.URL),
			Region: "us-east-1", Credentials: aws.AnonymousCredentials{}, RetryMaxAttempts: 1})
		if _, err := anon.DeleteConnection(ctxT(t), &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: aws.String(id)}); err == nil {
			t.Error("anonymous delete accepted")
		}
		if got := whoami(t, ws); got != id {
			t.Errorf("connection %s answered %q after refused calls", id, got)
		}
		_ = ws.CloseNow()
		_ = r.Close()
		srv.Close()
		mgmt.Close()
	}
}

// TestWorkerEndpointRefusesManagement checks that the worker-facing
// endpoint answers every @connections call, even one signed with the right
// key, with 403 Forbidden and never touches the connection, and refuses a
// WebSocket upgrade on such a path before $connect.
func TestWorkerEndpointRefusesManagement(t *testing.T) {
	h := &recorder{}
	e := start(t, h)
	ws := dial(t, e.url, nil)
	id := whoami(t, ws)
	good := aws.Credentials{AccessKeyID: testKeyID, SecretAccessKey: testSecret}
	for _, method := range []string{"POST", "GET", "DELETE"} {
		for _, p := range []string{"/@connections/" + id, "/local/@connections/" + id, "/@connections", "/%40connections/" + id} {
			req := signed(t, method, e.srv.URL+p, []byte("forged"), good, time.Now(), "execute-api")
			if got := do(t, req); got != (apiError{http.StatusForbidden, errForbidden, "Forbidden"}) {
				t.Errorf("%s %s on the worker endpoint: %+v", method, p, got)
			}
		}
	}
	_, err := newClient(e.srv.URL, testKeyID, testSecret).PostToConnection(ctxT(t),
		&apigatewaymanagementapi.PostToConnectionInput{ConnectionId: aws.String(id), Data: []byte("forged")})
	var forbidden *types.ForbiddenException
	if !errors.As(err, &forbidden) {
		t.Errorf("SDK post to the worker endpoint: %v, want ForbiddenException", err)
	}

	connects := len(h.all(RouteConnect, ""))
	_, resp, err := websocket.Dial(ctxT(t), e.url+"@connections/"+id, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("upgrade on a management path: %v, %v; want 403", err, resp)
	}
	if n := len(h.all(RouteConnect, "")); n != connects {
		t.Errorf("a management path reached $connect")
	}
	if got := whoami(t, ws); got != id {
		t.Fatalf("connection answered %q", got)
	}
	if n := len(h.all(RouteDefault, id)); n != 2 {
		t.Fatalf("%d $default events; the refused calls must not be any", n)
	}
}

func TestCheckSkew(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		at   time.Time
		want string // "" accepted, else the message's prefix
	}{
		{now, ""},
		{now.Add(-SignatureSkew), ""},
		{now.Add(SignatureSkew), ""},
		{now.Add(-SignatureSkew - time.Second), "Signature expired: 20260301T115459Z is now earlier than 20260301T115500Z (20260301T120000Z - 5 min.)"},
		{now.Add(SignatureSkew + time.Second), "Signature not yet current: 20260301T120501Z is still later than 20260301T120500Z (20260301T120000Z + 5 min.)"},
	}
	for _, tt := range tests {
		ref := checkSkew(tt.at, now)
		switch {
		case tt.want == "" && ref != nil:
			t.Errorf("%v: refused: %s", tt.at, ref.msg)
		case tt.want != "" && (ref == nil || ref.msg != tt.want):
			t.Errorf("%v: %+v, want %q", tt.at, ref, tt.want)
		}
	}
}

// TestManagementClock checks the skew against the injected clock.
func TestManagementClock(t *testing.T) {
	clock := time.Now().Add(-time.Hour)
	e := start(t, &recorder{}, WithClock(func() time.Time { return clock }))
	ws := dial(t, e.url, nil)
	id := whoami(t, ws)
	good := aws.Credentials{AccessKeyID: testKeyID, SecretAccessKey: testSecret}
	path := e.mgmt.URL + "/@connections/" + id
	if got := do(t, signed(t, "POST", path, []byte("x"), good, time.Now(), "execute-api")); got.status != http.StatusForbidden || !strings.HasPrefix(got.msg, "Signature not yet current") {
		t.Fatalf("signed at real time, an hour after the relay's clock: %+v", got)
	}
	if got := do(t, signed(t, "POST", path, []byte("on time"), good, clock, "execute-api")); got.status != http.StatusOK {
		t.Fatalf("signed at the relay's time: %+v", got)
	}
	if _, m := read(t, ws); m != "on time" {
		t.Fatalf("received %q", m)
	}
}

func TestParseAuthorization(t *testing.T) {
	a, err := parseAuthorization("AWS4-HMAC-SHA256 Credential=AKID/20260301/eu-west-1/execute-api/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc")
	if err != nil {
		t.Fatal(err)
	}
	want := authorization{"AKID", "20260301", "eu-west-1", "execute-api", "aws4_request", []string{"host", "x-amz-date"}, "abc"}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("%+v, want %+v", a, want)
	}
	for _, h := range []string{
		"", "AWS4-HMAC-SHA256", "AWS4-HMAC-SHA256 ", "Bearer x",
		"AWS4-HMAC-SHA256 Credential=AKID/20260301/r/s/aws4_request, SignedHeaders=host",
		"AWS4-HMAC-SHA256 Credential=AKID/20260301/r/s, SignedHeaders=host, Signature=abc",
		"AWS4-HMAC-SHA256 Credential=/20260301/r/s/aws4_request, SignedHeaders=host, Signature=abc",
		"AWS4-HMAC-SHA256 Credential=AKID/20260301/r/s/aws4_request, SignedHeaders=, Signature=abc",
		"AWS4-HMAC-SHA256 Credential=AKID/20260301/r/s/aws4_request, SignedHeaders=host, Signature=",
		"AWS4-HMAC-SHA256 Credential=AKID/20260301/r/s/aws4_request SignedHeaders=host Signature=abc",
	} {
		if _, err := parseAuthorization(h); err == nil {
			t.Errorf("parseAuthorization(%q) accepted", h)
		}
	}
}

// FuzzParseAuthorization checks the Authorization parser, which reads
// bytes from any caller of the management API: it never panics, and what
// it accepts has every part.
func FuzzParseAuthorization(f *testing.F) {
	f.Add("AWS4-HMAC-SHA256 Credential=AKID/20260301/eu-west-1/execute-api/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc")
	f.Add("AWS4-HMAC-SHA256 Credential=a/b/c/d/e,SignedHeaders=h,Signature=s,Signature=t")
	f.Add("AWS4-HMAC-SHA256 ,,,")
	f.Fuzz(func(t *testing.T, h string) {
		a, err := parseAuthorization(h)
		if err != nil {
			return
		}
		if a.accessKeyID == "" || len(a.signedHeaders) == 0 || a.signature == "" || strings.Contains(a.accessKeyID, "/") {
			t.Fatalf("parseAuthorization(%q) = %+v", h, a)
		}
	})
}

// Two relays whose credentials share a key id but not the secret (the
// Lambda emulator tests run several with one fixed key id) each accept only
// calls signed with their own secret, whichever verified first: a signing
// key cached under the key id alone must not answer for another relay's
// secret.
func TestSigningKeysAreRelaysOwn(t *testing.T) {
	now := time.Now()
	var mgmts []string
	secrets := []string{testSecret, testSecret + "-other"}
	for _, secret := range secrets {
		r := New(&recorder{}, WithCredentials(testKeyID, secret))
		mgmt := httptest.NewServer(r.Management())
		t.Cleanup(mgmt.Close)
		t.Cleanup(func() { _ = r.Close() })
		mgmts = append(mgmts, mgmt.URL)
	}
	for round := range 2 {
		for i, url := range mgmts {
			for j, secret := range secrets {
				req := signed(t, "GET", url+"/@connections/AAAAAAAAAAAAAAA=", nil,
					aws.Credentials{AccessKeyID: testKeyID, SecretAccessKey: secret}, now, "execute-api")
				got := do(t, req)
				if accepted := got.status != http.StatusForbidden; accepted != (i == j) {
					t.Errorf("round %d: relay %d, signed with secret %d: %+v", round, i, j, got)
				}
			}
		}
	}
}
