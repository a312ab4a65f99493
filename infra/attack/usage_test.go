package attack_test

// Findings 2 and 4: a worker's usage claim is the worker's word; the
// gateway must bound it by what it relayed before it counts anywhere
// (stored tokens, measured speed, dispatch weight).

import (
	"context"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/store"
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
// crashing the gateway. Now the process lives on; a claim above what the
// gateway relayed is rejected (issue 12's usage check: the job is refunded,
// the worker unpaid and struck into quarantine), and what is stored of the
// others stays within what was relayed. Each claim comes from a worker of
// its own account, as a quarantined one gets no more jobs. The test runs in
// a child process so that a crash fails it alone.
func TestHugeUsageClaims(t *testing.T) {
	if !isolated(t) {
		return
	}
	e := newEnv(t, options{limits: func(l *api.Limits) { l.QueueWait = time.Second }})
	user, honestAcct := e.newAccount("user", 10_000), e.newAccount("honest", 0)
	var ids []string
	var mallories []*account
	for i := range 2 * len(usageClaims) {
		claim := usageClaims[i%len(usageClaims)]
		mallory := e.newAccount("mallory", 0)
		mallories = append(mallories, mallory)
		h := e.hostileWorker(mallory)
		go func() {
			select {
			case <-h.closed:
			case j := <-h.jobs:
				// All at once, so the gateway sees the first chunk and
				// the done within a microsecond or so.
				for i, s := range relayedTexts {
					_ = h.chunk(j, int64(i), s)
				}
				_ = h.done(j, int64(len(relayedTexts)), claim)
			}
		}()
		r := e.chat(user.apiKey, chatBody("claim", false))
		switch {
		case claim > int64(len(relayedTexts)):
			if r.Err != nil || r.ok() || r.Status < 500 {
				t.Errorf("request %d claiming %d tokens for %d relayed: %s; want it rejected", i, claim, len(relayedTexts), r)
			}
			rep := e.reputationOf(mallory)
			if rep.Standing != store.StandingQuarantined || rep.JobsRejected != 1 || rep.LastReason != "usage_inflated" {
				t.Errorf("claimer %d after its claim: %+v; want quarantined for usage_inflated", i, rep)
			}
		case r.Err != nil || r.Status != http.StatusOK:
			t.Errorf("request %d: %s", i, r)
		default:
			ids = append(ids, r.ID)
			if r.Usage != nil {
				t.Logf("request %d: client saw usage %+v", i, *r.Usage)
			}
		}
		h.ws.CloseNow()
	}
	for _, id := range ids {
		j := e.settled(id)
		if j.CompletionTokens < 0 || j.CompletionTokens > int64(len(relayedTexts)) {
			t.Errorf("job %s: stored completion_tokens %d; want 0..%d (what was relayed)", id, j.CompletionTokens, len(relayedTexts))
		}
	}
	for _, m := range mallories {
		for _, w := range e.workersOf(m) {
			if w.MilliTokPerSec < 0 || w.MilliTokPerSec > maxMilliTokPerSec(int64(len(relayedTexts))) {
				t.Errorf("worker %s: measured speed %d milli-tokens/s; want 0..%d", w.Conn, w.MilliTokPerSec, maxMilliTokPerSec(int64(len(relayedTexts))))
			}
		}
	}
	// Only the accepted claims were charged: each rejected one was
	// refunded.
	e.expectCredits(user, 10_000-int64(len(ids))*price)
	st, err := e.store.Stats(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.TokensServed < 0 || st.TokensServed > int64(len(ids)*len(relayedTexts)) {
		t.Errorf("stats: tokens served %d; want 0..%d", st.TokensServed, len(ids)*len(relayedTexts))
	}
	// The gateway still serves: an honest worker comes.
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
// worker got 0 of 40). Now the claim moves no weight — speed is the
// gateway's measurement, bounded by what it relayed — and the claim itself
// is rejected (the usage check): the claimer's job is refunded, it is
// quarantined, and the honest worker serves every job after.
func TestSpeedClaimMonopoly(t *testing.T) {
	const requests, claim = 40, 1_000_001
	e := newEnv(t, options{limits: func(l *api.Limits) { l.QueueWait = time.Second }})
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
	if r := e.chat(user.apiKey, chatBody("measure me", false)); r.Err != nil || r.ok() || r.Status < 500 {
		t.Fatalf("the claiming worker's first job: %s; want it rejected", r)
	}
	e.expectCredits(user, 100_000)
	if rep := e.reputationOf(mallory); rep.Standing != store.StandingQuarantined || rep.LastReason != "usage_inflated" {
		t.Fatalf("the claimer after its claim: %+v; want quarantined for usage_inflated", rep)
	}
	e.honestWorker(honestAcct, words("one", " two", " three", " four"))
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
	t.Logf("the honest worker served %d of %d; the claiming worker's measured speed %v milli-tokens/s", honestJobs, requests, speeds)
	if honestJobs != requests {
		t.Errorf("the honest worker served %d of %d jobs; want all: the claimer is quarantined", honestJobs, requests)
	}
	for _, s := range speeds {
		if s > maxMilliTokPerSec(1) {
			t.Errorf("the claiming worker's measured speed %d exceeds what one relayed byte allows (%d)", s, maxMilliTokPerSec(1))
		}
	}
	if got := e.account(mallory.id).Earned; got != 0 {
		t.Errorf("the claimer earned %d credits for a rejected reply", got)
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
