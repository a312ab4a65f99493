package attack_test

// Findings 2 and 4: a worker's usage claim is the worker's word; the
// gateway must bound it by what it relayed before it counts anywhere
// (stored tokens, measured speed, dispatch weight).

import (
	"context"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"
)

// usageClaims are completion_tokens values no honest worker sends.
var usageClaims = []int64{1 << 62, math.MaxInt64, -1, math.MinInt64, 9_000_000_000, math.MaxInt64 / 1000, 1 << 62, math.MaxInt64}

// relayedTexts is what a claiming worker streams: three one-byte deltas.
var relayedTexts = []string{"a", "b", "c"}

// maxMilliTokPerSec bounds the speed the gateway may measure from a reply
// of n relayed bytes: at most one token per byte, all of them within the
// clock's resolution of a microsecond.
func maxMilliTokPerSec(n int64) int64 { return n * 1_000_000 * 1000 }

// TestHugeUsageClaims is finding 2: workers answer done with
// completion_tokens of 2^62, MaxInt64, negative values. Before, the speed
// computed from them overflowed, and the dispatch weights summed past
// MaxInt64 made the weighted draw panic on a goroutine of its own,
// crashing the gateway. Now the process lives on, and the stored tokens
// and speeds stay within what was relayed. The test runs in a child
// process so that a crash fails it alone.
func TestHugeUsageClaims(t *testing.T) {
	if !isolated(t) {
		return
	}
	e := newEnv(t, options{})
	user, mallory, honestAcct := e.newAccount("user", 10_000), e.newAccount("mallory", 0), e.newAccount("honest", 0)
	var hs []*hostile
	var mu sync.Mutex
	next := 0
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 3 {
		h := e.hostileWorker(mallory)
		hs = append(hs, h)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-h.closed:
					return
				case j := <-h.jobs:
					mu.Lock()
					claim := usageClaims[next%len(usageClaims)]
					next++
					mu.Unlock()
					// All at once, so the gateway sees the first chunk
					// and the done within a microsecond or so.
					for i, s := range relayedTexts {
						_ = h.chunk(j, int64(i), s)
					}
					_ = h.done(j, int64(len(relayedTexts)), claim)
				}
			}
		})
	}
	var ids []string
	for i := range 2 * len(usageClaims) {
		r := e.chat(user.apiKey, chatBody("claim", false))
		if r.Err != nil || r.Status != http.StatusOK {
			t.Errorf("request %d: %s", i, r)
			continue
		}
		ids = append(ids, r.ID)
		if r.Usage != nil {
			t.Logf("request %d: client saw usage %+v", i, *r.Usage)
		}
	}
	close(stop)
	wg.Wait()
	for _, id := range ids {
		j := e.settled(id)
		if j.CompletionTokens < 0 || j.CompletionTokens > int64(len(relayedTexts)) {
			t.Errorf("job %s: stored completion_tokens %d; want 0..%d (what was relayed)", id, j.CompletionTokens, len(relayedTexts))
		}
	}
	for _, w := range e.workersOf(mallory) {
		if w.MilliTokPerSec < 0 || w.MilliTokPerSec > maxMilliTokPerSec(int64(len(relayedTexts))) {
			t.Errorf("worker %s: measured speed %d milli-tokens/s; want 0..%d", w.Conn, w.MilliTokPerSec, maxMilliTokPerSec(int64(len(relayedTexts))))
		}
	}
	st, err := e.store.Stats(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.TokensServed < 0 || st.TokensServed > int64(len(ids)*len(relayedTexts)) {
		t.Errorf("stats: tokens served %d; want 0..%d", st.TokensServed, len(ids)*len(relayedTexts))
	}
	// The gateway still serves: the claimers leave, an honest worker comes.
	for _, h := range hs {
		h.ws.CloseNow()
	}
	e.honestWorker(honestAcct, words("still", " alive"))
	if r := e.chat(user.apiKey, chatBody("after", true)); !r.ok() || r.Content != "still alive" {
		t.Errorf("request after the claims: %s", r)
	}
	resp, err := e.http.Get(e.stack.APIURL + "/stats")
	if err != nil {
		t.Fatalf("stats after the claims: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/stats after the claims: %d", resp.StatusCode)
	}
}

// TestSpeedClaimMonopoly is finding 4: a worker that once claimed
// 1,000,001 completion tokens for one tiny delta was measured as the
// fastest worker by far, and weighted dispatch gave it every job (the honest
// worker got 0 of 40). Now the claim is bounded by what was relayed and the
// honest worker gets a fair share.
//
// The claimer serves its first job alone, so its claim is measured; then
// the honest worker registers and requests go until it has served one —
// the dispatcher's idle list is a cache, re-read every few seconds, so a
// new worker is not seen at once — and then 40 are counted.
func TestSpeedClaimMonopoly(t *testing.T) {
	const requests, fairShare, claim = 40, 10, 1_000_001
	e := newEnv(t, options{})
	user, mallory, honestAcct := e.newAccount("user", 100_000), e.newAccount("mallory", 0), e.newAccount("honest", 0)
	h := e.hostileWorker(mallory)
	go func() {
		for {
			select {
			case <-h.closed:
				return
			case j := <-h.jobs:
				_ = h.chunk(j, 0, "x")
				_ = h.done(j, 1, claim)
			}
		}
	}()
	if r := e.chat(user.apiKey, chatBody("measure me", false)); r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("the claiming worker's first job: %s", r)
	}
	e.honestWorker(honestAcct, words("one", " two", " three", " four"))
	seen := false
	warmup := 0
	for deadline := time.Now().Add(15 * time.Second); !seen && time.Now().Before(deadline); warmup++ {
		r := e.chat(user.apiKey, chatBody("anyone else?", false))
		if r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("request %d: %s", warmup, r)
		}
		seen = e.settled(r.ID).WorkerAccount == honestAcct.id
	}
	if !seen {
		t.Fatalf("the honest worker served none of %d jobs over 15 s: the claiming worker (speed %v) took them all", warmup, speedsOf(e, mallory))
	}
	honestJobs := 0
	for i := range requests {
		r := e.chat(user.apiKey, chatBody("who serves", false))
		if r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("request %d: %s", i, r)
		}
		if e.settled(r.ID).WorkerAccount == honestAcct.id {
			honestJobs++
		}
	}
	speeds := speedsOf(e, mallory)
	t.Logf("after %d requests to find the honest worker, it served %d of %d; the claiming worker's measured speed %v milli-tokens/s", warmup, honestJobs, requests, speeds)
	if honestJobs < fairShare {
		t.Errorf("the honest worker served %d of %d jobs; want at least %d", honestJobs, requests, fairShare)
	}
	for _, s := range speeds {
		if s > maxMilliTokPerSec(1) {
			t.Errorf("the claiming worker's measured speed %d exceeds what one relayed byte allows (%d)", s, maxMilliTokPerSec(1))
		}
	}
}

// speedsOf lists the measured speeds of an account's workers.
func speedsOf(e *env, acct *account) []int64 {
	var out []int64
	for _, w := range e.workersOf(acct) {
		out = append(out, w.MilliTokPerSec)
	}
	return out
}
