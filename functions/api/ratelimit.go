package api

import (
	"errors"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
)

// Rate-limit headers, as OpenAI sends them on every response.
const (
	headerLimitRequests     = "X-Ratelimit-Limit-Requests"
	headerRemainingRequests = "X-Ratelimit-Remaining-Requests"
	headerResetRequests     = "X-Ratelimit-Reset-Requests"
)

// rateLimit is the tighter of the key's and the account's limits: the one
// a client of a single key meets first.
func (s *Server) rateLimit() int64 {
	return min(s.limits.RatePerMinute, s.limits.AccountRatePerMinute)
}

// rateHeaders sets the rate-limit headers after Admit: the limit and
// remaining requests of whichever window (the key's or the account's) has
// fewer left, and when the window resets. A refused request has none left;
// a request refused for another reason is not counted, and its headers say
// so only when Admit counted nothing (a zero Admission): then the limit
// alone is shown.
func (s *Server) rateHeaders(h http.Header, adm store.Admission, err error, window, now time.Time) {
	limit := s.rateLimit()
	remaining := limit
	switch {
	case errors.Is(err, store.ErrRateLimited):
		remaining = 0
	case err == nil:
		keyLeft := s.limits.RatePerMinute - adm.KeyRequests
		acctLeft := s.limits.AccountRatePerMinute - adm.AccountRequests
		if keyLeft <= acctLeft {
			limit, remaining = s.limits.RatePerMinute, keyLeft
		} else {
			limit, remaining = s.limits.AccountRatePerMinute, acctLeft
		}
	default:
		// Not admitted for another reason (credits, key): nothing was
		// counted, and the counts are unknown.
		h.Set(headerLimitRequests, strconv.FormatInt(limit, 10))
		return
	}
	reset := window.Add(time.Minute).Sub(now)
	h.Set(headerLimitRequests, strconv.FormatInt(limit, 10))
	h.Set(headerRemainingRequests, strconv.FormatInt(max(remaining, 0), 10))
	// OpenAI writes a duration: "1s", "6m0s", "120ms".
	h.Set(headerResetRequests, reset.Round(time.Millisecond).String())
}

// goSafe runs fn on its own goroutine, recovering a panic into a log line:
// nothing a peer sends may take the process (and every stream) down.
func (s *Server) goSafe(what string, fn func()) {
	go func() {
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("background work panicked", "what", what, "panic", p, "stack", string(debug.Stack()))
			}
		}()
		fn()
	}()
}
