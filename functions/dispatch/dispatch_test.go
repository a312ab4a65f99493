package dispatch

import (
	"math"
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
	want := int64(2*MaxMilliTokPerSec + MinMilliTokPerSec + 50_000)
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
	c.drop(gone, true) // lent out
	c.release("gone", 0)
	d.Forget("gone")
	d.Released("gone", 1) // a late release of a forgotten worker is ignored
	for _, m := range []string{"a", "b"} {
		for _, w := range d.idle.take(m, now) {
			if w.Conn == "gone" {
				t.Errorf("model %s still offers the forgotten worker", m)
			}
		}
	}
	if got := d.idle.take("a", now); len(got) != 1 || got[0].Conn != "live" {
		t.Errorf("model a offers %v, want the live worker only", got)
	}
}
