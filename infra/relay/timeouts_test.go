package relay

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// serverTimeout is the http.Server timeout the tests below outlive many
// times over.
const serverTimeout = 150 * time.Millisecond

// TestWebSocketOutlivesServerTimeouts serves the relay with every
// http.Server timeout short, as the dev stack sets them (longer) against
// slow clients, and keeps a WebSocket busy and quiet well past them: the
// deadlines the server set for the upgrade request must not reach the
// WebSocket, which lives up to MaxDuration.
func TestWebSocketOutlivesServerTimeouts(t *testing.T) {
	h := &recorder{}
	r := New(h, WithCredentials(testKeyID, testSecret))
	srv := httptest.NewUnstartedServer(r)
	srv.Config.ReadHeaderTimeout = serverTimeout
	srv.Config.ReadTimeout = serverTimeout
	srv.Config.WriteTimeout = serverTimeout
	srv.Config.IdleTimeout = serverTimeout
	srv.Start()
	mgmt := httptest.NewServer(r.Management())
	t.Cleanup(func() {
		_ = r.Close()
		srv.Close()
		mgmt.Close()
	})
	e := &env{r: r, srv: srv, mgmt: mgmt, client: newClient(mgmt.URL, testKeyID, testSecret)}
	ws := dial(t, "ws"+strings.TrimPrefix(srv.URL, "http")+"/", nil)
	id := whoami(t, ws)
	for i := range 4 {
		// The scenario, not an assertion: quiet for longer than any of
		// the server's timeouts.
		time.Sleep(2 * serverTimeout)
		if got := whoami(t, ws); got != id {
			t.Fatalf("round %d: whoami %q, want %q", i, got, id)
		}
		msg := fmt.Sprintf("post %d", i)
		if err := post(t, e, id, []byte(msg)); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if _, got := read(t, ws); got != msg {
			t.Fatalf("round %d: received %q", i, got)
		}
	}
	if n := len(h.all(RouteDisconnect, id)); n != 0 {
		t.Fatal("the connection ended")
	}
}

// deadlineAfterHijack is a ResponseWriter whose hijacked connection keeps
// a read and write deadline, as http.Hijacker allows a server to leave it.
type deadlineAfterHijack struct {
	http.ResponseWriter
	d time.Duration
}

func (w deadlineAfterHijack) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	return c, brw, c.SetDeadline(time.Now().Add(w.d))
}

// TestRelayClearsHijackedDeadlines checks that the relay itself clears the
// deadlines of the connection it hijacks, rather than relying on net/http
// to: the Hijacker contract leaves that to the caller.
func TestRelayClearsHijackedDeadlines(t *testing.T) {
	h := &recorder{}
	r := New(h)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.ServeHTTP(deadlineAfterHijack{w, serverTimeout}, req)
	}))
	t.Cleanup(func() {
		_ = r.Close()
		srv.Close()
	})
	ws := dial(t, "ws"+strings.TrimPrefix(srv.URL, "http")+"/", nil)
	id := whoami(t, ws)
	time.Sleep(3 * serverTimeout) // past the deadline left on the connection
	if got := whoami(t, ws); got != id {
		t.Fatalf("whoami %q after the hijacked deadline, want %q", got, id)
	}
}
