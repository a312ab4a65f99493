package dispatch

import (
	"testing"

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
