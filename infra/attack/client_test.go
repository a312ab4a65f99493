package attack_test

// Findings 7 (one account's keys share one rate limit) and 8 (slow
// clients are cut off by the servers' timeouts).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/infra/devnet"
)

// TestRateLimitAcrossKeys is finding 7: one account mints five keys and
// spreads its requests across them. With a per-key limit and an account
// limit of N a minute, at most N are admitted in the minute; every
// response, admitted or refused, carries the rate-limit headers, and a 429
// carries Retry-After. Before, each key had its own window: five keys, five
// times the rate.
func TestRateLimitAcrossKeys(t *testing.T) {
	const perKey, perAccount, keys, perKeyRequests = 4, 6, 5, 3
	e := newEnv(t, options{limits: func(l *api.Limits) {
		l.RatePerMinute = perKey
		l.AccountRatePerMinute = perAccount
	}})
	user, honestAcct := e.newAccount("user", 1000), e.newAccount("honest", 0)
	e.honestWorker(honestAcct, words("ok"))
	apiKeys := []string{user.apiKey}
	for len(apiKeys) < keys {
		k, err := e.stack.IssueAPIKey(context.Background(), user.id)
		if err != nil {
			t.Fatal(err)
		}
		apiKeys = append(apiKeys, k)
	}
	// The windows are calendar minutes: start well inside one, so all the
	// requests (a second or two) fall in the same window. Scheduling, not
	// an assertion.
	if s := time.Now().Second(); s > 45 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	admitted, refused := 0, 0
	for i := range keys * perKeyRequests {
		key := apiKeys[i%keys]
		r := e.chat(key, chatBody("rate", false))
		h := r.Header
		var missing []string
		for _, name := range []string{"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"} {
			if h.Get(name) == "" {
				missing = append(missing, name)
			}
		}
		limit, lerr := strconv.Atoi(h.Get("x-ratelimit-limit-requests"))
		remaining, rerr := strconv.Atoi(h.Get("x-ratelimit-remaining-requests"))
		switch {
		case len(missing) > 0:
			t.Errorf("request %d (HTTP %d): no %s", i, r.Status, strings.Join(missing, ", "))
		case lerr != nil || rerr != nil || limit <= 0 || remaining < 0 || remaining > limit:
			t.Errorf("request %d: remaining %q of limit %q", i, h.Get("x-ratelimit-remaining-requests"), h.Get("x-ratelimit-limit-requests"))
		}
		switch r.Status {
		case http.StatusOK:
			admitted++
			if !r.ok() {
				t.Errorf("request %d admitted but failed: %s", i, r)
			}
		case http.StatusTooManyRequests:
			refused++
			if s, err := strconv.Atoi(h.Get("Retry-After")); err != nil || s <= 0 {
				t.Errorf("request %d: 429 with Retry-After %q", i, h.Get("Retry-After"))
			}
			if remaining != 0 {
				t.Errorf("request %d: 429 with %d remaining", i, remaining)
			}
		default:
			t.Errorf("request %d: %s", i, r)
		}
	}
	t.Logf("%d admitted, %d refused across %d keys", admitted, refused, keys)
	if admitted > perAccount {
		t.Errorf("%d requests admitted in one minute across %d keys of one account; want at most %d", admitted, keys, perAccount)
	}
	if admitted == 0 {
		t.Errorf("nothing admitted")
	}
	e.expectCredits(user, 1000-int64(admitted)*price)
}

// serverTimeout is what the slow-client tests shorten the servers'
// timeouts to, and closeWait how long they wait for the close: less than
// the old 10 s header timeout, so only a shortened timeout passes.
const (
	serverTimeout = time.Second
	closeWait     = 8 * time.Second
)

// shortTimeouts shortens the servers' read and idle timeouts.
func shortTimeouts(cfg *devnet.Config) {
	cfg.Timeouts = devnet.Timeouts{ReadHeader: serverTimeout, Read: serverTimeout, Idle: serverTimeout}
}

// hostOf is the host:port of a URL.
func hostOf(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// slowClient dials addr, writes head, then trickles one byte of trickle
// every 100 ms; it reports whether the server closed the connection within
// closeWait, and what it had answered.
func slowClient(t *testing.T, addr, head, trickle string) (closed bool, answer string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for i := 0; i < len(trickle); i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond): // the trickle: pacing, not an assertion
			}
			if _, err := c.Write([]byte{trickle[i]}); err != nil {
				return
			}
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(closeWait))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false, string(b)
	}
	return true, string(b)
}

// TestSlowClients is finding 8: a request body trickled to the API, an
// idle keep-alive connection to the API, and a WebSocket upgrade request
// trickled to the relay, all without credentials, are closed by the server
// once its (shortened) timeouts pass, rather than held open as long as the
// client likes.
func TestSlowClients(t *testing.T) {
	e := newEnv(t, options{config: shortTimeouts})
	apiAddr, relayAddr := hostOf(t, e.stack.APIURL), hostOf(t, e.stack.RelayURL)
	forever := strings.Repeat("a", 1000) // 100 s of trickle
	t.Run("api-trickled-body", func(t *testing.T) {
		head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", apiAddr)
		if closed, answer := slowClient(t, apiAddr, head, forever); !closed {
			t.Errorf("a trickled request body held the API connection open for %s (answer %.80q)", closeWait, answer)
		}
	})
	t.Run("api-trickled-headers", func(t *testing.T) {
		head := fmt.Sprintf("GET /v1/models HTTP/1.1\r\nHost: %s\r\n", apiAddr)
		if closed, _ := slowClient(t, apiAddr, head, "X-Slow: "+forever); !closed {
			t.Errorf("trickled request headers held the API connection open for %s", closeWait)
		}
	})
	t.Run("api-idle-keepalive", func(t *testing.T) {
		head := fmt.Sprintf("GET /v1/models HTTP/1.1\r\nHost: %s\r\n\r\n", apiAddr)
		closed, answer := slowClient(t, apiAddr, head, "")
		if !strings.HasPrefix(answer, "HTTP/1.1 200") {
			t.Errorf("GET /v1/models: %.80q", answer)
		}
		if !closed {
			t.Errorf("an idle keep-alive connection stayed open for %s", closeWait)
		}
	})
	t.Run("relay-trickled-upgrade", func(t *testing.T) {
		head := fmt.Sprintf("GET / HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n", relayAddr)
		if closed, _ := slowClient(t, relayAddr, head, "X-Slow: "+forever); !closed {
			t.Errorf("a trickled upgrade request held the relay connection open for %s", closeWait)
		}
	})
}
