package dispatch

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
)

// TestChooseIsWeightedBySpeed walks every draw of the weighted choice: each
// worker is picked for exactly its weight's share of draws, and a worker
// below the floor weighs the floor.
func TestChooseIsWeightedBySpeed(t *testing.T) {
	ws := []store.Worker{
		{Conn: "slow", MilliTokPerSec: 1_000},  // below the floor: weighs 5,000
		{Conn: "new"},                          // unmeasured: weighs 5,000
		{Conn: "fast", MilliTokPerSec: 40_000}, // weighs 40,000
	}
	var total int64 = 50_000
	counts := map[string]int64{}
	for r := range total {
		d := &Dispatcher{pick: func(n int64) int64 {
			if n != total {
				t.Fatalf("drew from %d, want %d", n, total)
			}
			return r
		}}
		counts[ws[d.choose(ws)].Conn]++
	}
	want := map[string]int64{"slow": 5_000, "new": 5_000, "fast": 40_000}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("%s chosen %d times, want %d", k, counts[k], v)
		}
	}
}

// A speed record no honest measurement produces — a forged or corrupted
// value up to MaxInt64 — weighs at most MaxMilliTokPerSec: the sum cannot
// overflow (rand.Int64N panicked on the negative sum it once made, taking
// the gateway down) and one worker cannot draw every job.
func TestChooseBoundsExtremeSpeeds(t *testing.T) {
	ws := []store.Worker{
		{Conn: "forged", MilliTokPerSec: math.MaxInt64},
		{Conn: "forged2", MilliTokPerSec: math.MaxInt64 / 2},
		{Conn: "negative", MilliTokPerSec: math.MinInt64},
		{Conn: "honest", MilliTokPerSec: 50_000},
	}
	// The negative record counts as unmeasured: it weighs the median of
	// the measured ones, itself bounded.
	want := int64(3*MaxMilliTokPerSec + 50_000)
	counts := map[string]int64{}
	const draws = 10_000
	for i := range int64(draws) {
		d := &Dispatcher{pick: func(n int64) int64 {
			if n != want {
				t.Fatalf("drew from %d, want the bounded sum %d", n, want)
			}
			return i * n / draws
		}}
		counts[ws[d.choose(ws)].Conn]++
	}
	if counts["honest"] == 0 || counts["negative"] == 0 {
		t.Errorf("draws %v: every worker must keep a share", counts)
	}
}

// Forget drops a worker from every cached idle list and from the lent set:
// a worker whose connection is gone is never offered again.
func TestForgetDropsAWorkerEverywhere(t *testing.T) {
	d := &Dispatcher{}
	c := &d.idle
	now := time.Now()
	gone := store.Worker{Conn: "gone", Models: []string{"a", "b"}}
	live := store.Worker{Conn: "live", Models: []string{"a"}}
	c.set("a", []store.Worker{gone, live}, now)
	c.set("b", []store.Worker{gone}, now)
	c.drop(gone, true, 0) // lent out
	c.release("gone", 0)
	d.Forget("gone")
	d.Released("gone", 1) // a late release of a forgotten worker is ignored
	for _, m := range []string{"a", "b"} {
		list, _ := d.idle.take(m, now)
		for _, w := range list {
			if w.Conn == "gone" {
				t.Errorf("model %s still offers the forgotten worker", m)
			}
		}
	}
	if got, _ := d.idle.take("a", now); len(got) != 1 || got[0].Conn != "live" {
		t.Errorf("model a offers %v, want the live worker only", got)
	}
}

// A worker not measured yet weighs the median measured speed, so a new
// honest worker is tried as often as a typical one, not starved at the
// floor beside workers measured fast; excluded workers are never drawn.
func TestUnmeasuredWeighTheMedian(t *testing.T) {
	ws := []store.Worker{
		{Conn: "fast", MilliTokPerSec: 900_000},
		{Conn: "mid", MilliTokPerSec: 50_000},
		{Conn: "slow", MilliTokPerSec: 20_000},
		{Conn: "new"},
	}
	if got := medianSpeed(ws); got != 50_000 {
		t.Fatalf("median %d, want 50,000", got)
	}
	total := int64(900_000 + 50_000 + 20_000 + 50_000)
	counts := draws(t, ws, total)
	if counts["new"] != 50 {
		t.Errorf("the unmeasured worker drew %d of %d, want 50", counts["new"], total/1000)
	}
	if medianSpeed(nil) != MinMilliTokPerSec {
		t.Errorf("median of nothing measured: %d, want the floor", medianSpeed(nil))
	}
}

// A claim that lost a race on a worker, from a snapshot taken before the
// worker served a whole job and came back, must not drop it: it is idle,
// and dropping it would hide it until the lists expire (one worker of two
// then got every job for up to 5 s under a burst). A claim lost from a
// snapshot that is still current does drop it.
func TestLostClaimKeepsAWorkerThatCameBack(t *testing.T) {
	d := &Dispatcher{}
	c := &d.idle
	now := time.Now()
	w := store.Worker{Conn: "w", Models: []string{"m"}}
	c.set("m", []store.Worker{w, {Conn: "x", Models: []string{"m"}}}, now)
	_, loserGen := c.take("m", now) // a claim in flight on w, from this snapshot

	_, winnerGen := c.take("m", now)
	c.drop(w, true, winnerGen) // another claim wins w...
	c.release("w", 0)          // ...which serves its job and is idle again
	c.drop(w, false, loserGen) // now the first claim's loss arrives
	if list, _ := c.take("m", now); !slices.ContainsFunc(list, func(x store.Worker) bool { return x.Conn == "w" }) {
		t.Fatalf("the worker that came back was dropped: %v", list)
	}

	_, current := c.take("m", now)
	c.drop(w, false, current) // a loss from a current snapshot: taken elsewhere
	if list, _ := c.take("m", now); slices.ContainsFunc(list, func(x store.Worker) bool { return x.Conn == "w" }) {
		t.Fatalf("a worker taken elsewhere stayed listed: %v", list)
	}
	c.release("x", 0) // not lent: nothing happens
	c.set("m", []store.Worker{w}, now)
	c.drop(w, true, 0)
	c.release("w", 0)
	c.release("w", 0)
	if list, _ := c.take("m", now); len(list) != 1 {
		t.Fatalf("list %v, want the worker once", list)
	}
}

// A registration lists the worker in the cached idle lists of its models at
// once, and only once however often it registers again; a busy or draining
// registration lists nothing.
func TestRegisteredListsTheWorkerOnce(t *testing.T) {
	d := &Dispatcher{}
	now := time.Now()
	d.idle.set("m", []store.Worker{{Conn: "old", Models: []string{"m"}}}, now)
	w := store.Worker{Conn: "new", Models: []string{"m", "uncached"}, Registered: true, State: store.WorkerIdle}
	for range 100 {
		d.Registered(w)
	}
	d.Registered(store.Worker{Conn: "busy", Models: []string{"m"}, Registered: true, State: store.WorkerBusy})
	d.Registered(store.Worker{Conn: "draining", Models: []string{"m"}, Registered: true, State: store.WorkerIdle, Draining: true})
	list, _ := d.idle.take("m", now)
	if len(list) != 2 || list[1].Conn != "new" {
		t.Fatalf("cached list %v, want old and new once", list)
	}
	if got, _ := d.idle.take("uncached", now); got != nil {
		t.Errorf("a model with no cached list got one: %v", got)
	}
}

// eligible keeps only the workers that may take a job: not excluded, able
// to serve its needs, the target of a targeted job, and not quarantined
// unless the job is a canary.
func TestEligible(t *testing.T) {
	tools := map[string]store.Caps{"m": {Tools: true, Context: 4096}}
	ws := []store.Worker{
		{Conn: "plain", Models: []string{"m"}},
		{Conn: "tools", Models: []string{"m"}, Caps: tools},
		{Conn: "quarantined", Models: []string{"m"}, Caps: tools, Standing: store.StandingQuarantined},
		{Conn: "other-model", Models: []string{"x"}},
	}
	for _, tc := range []struct {
		name    string
		job     store.Job
		exclude []string
		want    []string
	}{
		{"plain chat", store.Job{Model: "m"}, nil, []string{"plain", "tools"}},
		{"excluded", store.Job{Model: "m"}, []string{"plain"}, []string{"tools"}},
		{"tools", store.Job{Model: "m", Needs: store.Needs{Tools: true}}, nil, []string{"tools"}},
		{"context within", store.Job{Model: "m", Needs: store.Needs{Tools: true, Context: 4096}}, nil, []string{"tools"}},
		{"context beyond", store.Job{Model: "m", Needs: store.Needs{Context: 5000}}, nil, []string{"plain"}},
		{"vision", store.Job{Model: "m", Needs: store.Needs{Vision: true}}, nil, nil},
		{"canary", store.Job{Model: "m", Canary: true}, nil, []string{"plain", "tools", "quarantined"}},
		{"targeted canary", store.Job{Model: "m", Canary: true, Target: "quarantined"}, nil, []string{"quarantined"}},
		{"targeted, excluded", store.Job{Model: "m", Canary: true, Target: "tools"}, []string{"tools"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, w := range eligible(slices.Clone(ws), tc.job, tc.exclude) {
				got = append(got, w.Conn)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("eligible: %v, want %v", got, tc.want)
			}
		})
	}
}

// Strikes divide a worker's weight: under suspicion it draws less.
func TestStrikesLowerWeight(t *testing.T) {
	ws := []store.Worker{{Conn: "clean", MilliTokPerSec: 40_000}, {Conn: "struck", MilliTokPerSec: 40_000, Strikes: 3}}
	counts := draws(t, ws, 40_000+10_000)
	if counts["struck"] != 10 || counts["clean"] != 40 {
		t.Errorf("draws %v, want clean 40 and struck 10", counts)
	}
}

// draws runs the weighted choice over ws once for every thousandth of
// total, the weights' sum, and counts each worker's draws.
func draws(t *testing.T, ws []store.Worker, total int64) map[string]int64 {
	t.Helper()
	counts := map[string]int64{}
	for r := range total / 1000 {
		d := &Dispatcher{pick: func(n int64) int64 {
			if n != total {
				t.Fatalf("drew from %d, want %d", n, total)
			}
			return r * 1000
		}}
		counts[ws[d.choose(ws)].Conn]++
	}
	return counts
}
