package devnet_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/infra/devnet"
)

// shortTimeout is every server timeout in these tests; closeWithin bounds
// the wait for a server to close a connection. It is many times the
// configured timeout, and below every default (10 s and up), so a close
// within it is the configured timeout at work.
const (
	shortTimeout = 300 * time.Millisecond
	closeWithin  = 5 * time.Second
)

// startShort starts a stack whose servers' timeouts are all shortTimeout.
func startShort(t *testing.T) *devnet.Stack {
	t.Helper()
	stack, err := devnet.Start(context.Background(), devnet.Config{Store: openStore(t), APIAddr: "127.0.0.1:0",
		RelayAddr: "127.0.0.1:0", Models: []catalog.Model{{ID: tinyModel, Price: 10}}, Limits: devnet.ScriptedLimits(),
		Log: testLog(t), Timeouts: devnet.Timeouts{ReadHeader: shortTimeout, Read: shortTimeout, Write: shortTimeout, Idle: shortTimeout},
		// Over loopback: these tests are about the servers, the
		// listener's WebSocket and the signed management API.
		Loopback: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stack.Close() })
	return stack
}

func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// trickle writes one byte of s at a time, every 20 ms, over and over, until
// a write fails (the server closed) or the test ends.
func trickle(t *testing.T, c net.Conn, s string) {
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := c.Write([]byte{s[i%len(s)]}); err != nil {
				return
			}
		}
	}()
}

// waitClosed reads until the server closes the connection (EOF, or a
// reset) and fails the test if it is still open after closeWithin.
func waitClosed(t *testing.T, r io.Reader, c net.Conn) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(closeWithin)); err != nil {
		t.Fatal(err)
	}
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %v", closeWithin)
	}
}

// TestServersCloseSlowClients checks each of the stack's three servers
// against the slow-client attacks that need no credentials: headers or a
// body sent a byte at a time, and a keep-alive connection left idle. Each
// must end with the server closing the connection.
func TestServersCloseSlowClients(t *testing.T) {
	stack := startShort(t)
	servers := []struct {
		name, host, path string
	}{
		{"api", hostOf(t, stack.APIURL), "/v1/chat/completions"},
		{"relay", hostOf(t, stack.RelayURL), "/"},
		{"management", hostOf(t, stack.ManagementURL), "/@connections/TWegAcC4EowCHnA="},
	}
	for _, srv := range servers {
		dial := func(t *testing.T) net.Conn {
			t.Helper()
			c, err := net.Dial("tcp", srv.host)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		t.Run(srv.name+"/trickled headers", func(t *testing.T) {
			c := dial(t)
			if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nX-Slow: ", srv.path, srv.host); err != nil {
				t.Fatal(err)
			}
			trickle(t, c, "abcdefgh")
			waitClosed(t, c, c)
		})
		t.Run(srv.name+"/trickled body", func(t *testing.T) {
			c := dial(t)
			// Small enough that the server would read the rest of an
			// unread body to reuse the connection, rather than close at
			// once.
			if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer sk-none\r\n"+
				"Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"model\":", srv.path, srv.host); err != nil {
				t.Fatal(err)
			}
			trickle(t, c, " ")
			waitClosed(t, c, c)
		})
		t.Run(srv.name+"/idle keep-alive", func(t *testing.T) {
			c := dial(t)
			if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", srv.path, srv.host); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.Close {
				t.Fatalf("%s answered %d with Connection: close; the test needs a keep-alive answer", srv.name, resp.StatusCode)
			}
			waitClosed(t, br, c)
		})
	}
}

// TestDefaultTimeouts checks what a zero Timeouts means: each server's
// defaults, which Start applies through the same code the short ones take.
func TestDefaultTimeouts(t *testing.T) {
	// The defaults are the documented figures; a change here is a change
	// of the stack's contract with clients.
	for _, c := range []struct {
		name      string
		got, want time.Duration
	}{
		{"ReadHeader", devnet.DefaultReadHeaderTimeout, 10 * time.Second},
		{"API Read", devnet.DefaultAPIReadTimeout, time.Minute},
		{"relay Read", devnet.DefaultRelayReadTimeout, 30 * time.Second},
		{"Idle", devnet.DefaultIdleTimeout, 2 * time.Minute},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if !strings.HasPrefix(devnet.DefaultManagementAddr, "127.0.0.1:") {
		t.Errorf("DefaultManagementAddr %q is not loopback", devnet.DefaultManagementAddr)
	}
}

// TestWebSocketOutlivesServerTimeouts checks that the relay server's
// timeouts stop at the WebSocket upgrade: the API's listener connection,
// a WebSocket through that server, stays the same connection long after
// them.
func TestWebSocketOutlivesServerTimeouts(t *testing.T) {
	stack := startShort(t)
	before, err := stack.Listener().Conn()
	if err != nil {
		t.Fatal(err)
	}
	// The scenario, not an assertion: several times every timeout.
	time.Sleep(5 * shortTimeout)
	if after, err := stack.Listener().Conn(); err != nil || after != before {
		t.Fatalf("listener connection %s, %v after the server timeouts; want %s unchanged", after, err, before)
	}
}
