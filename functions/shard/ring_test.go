package shard

import (
	"math/rand/v2"
	"testing"
)

// randomTSP is a ring-ordering instance like real pools: nodes at random
// places (half-RTT grows with distance), an upload term per sender, a
// random subset allowed at the ends, usually a cost per pair of ends, and,
// when holes is set, a few unmeasured pairs.
func randomTSP(rng *rand.Rand, n int, holes bool) *tsp {
	t := &tsp{n: n, hop: make([][]int64, n+1), up: make([]int64, n), end: make([]bool, n)}
	xs, ys := make([]int64, n+1), make([]int64, n+1)
	for i := range n + 1 {
		xs[i], ys[i] = int64(rng.IntN(1000)), int64(rng.IntN(1000))
	}
	for i := range n {
		t.up[i] = int64(rng.IntN(2000))
		t.end[i] = rng.IntN(3) == 0
	}
	// At least two may be at the ends (fewer is no ring; the unmeasured
	// pairs case covers no-tour instances).
	e := rng.IntN(n)
	t.end[e] = true
	if n > 1 {
		t.end[(e+1+rng.IntN(n-1))%n] = true
	}
	// End-dependent costs (the layer split's compute for each pair of
	// ends) on most instances, some pairs infeasible.
	if rng.IntN(4) != 0 {
		t.ends = make([][]int64, n)
		for f := range n {
			t.ends[f] = make([]int64, n)
			for l := range n {
				t.ends[f][l] = 20_000 + int64(rng.IntN(4000))
				if (f == l && n > 1) || rng.IntN(10) == 0 {
					t.ends[f][l] = inf
				}
			}
		}
	}
	for u := range n + 1 {
		t.hop[u] = make([]int64, n+1)
	}
	for u := range n + 1 {
		for v := u + 1; v <= n; v++ {
			d := isqrt((xs[u]-xs[v])*(xs[u]-xs[v])+(ys[u]-ys[v])*(ys[u]-ys[v]))*10 + 500 + int64(rng.IntN(500))
			if holes && rng.IntN(25) == 0 {
				d = inf
			}
			t.hop[u][v], t.hop[v][u] = d, d
		}
		t.hop[u][u] = inf
	}
	return t
}

// brute is the cheapest tour over all n! orders with allowed ends.
func (t *tsp) brute() int64 {
	n := t.n
	a := make([]int, n)
	for i := range a {
		a[i] = i
	}
	best := inf
	visit := func() {
		if n > 1 && (!t.end[a[0]] || !t.end[a[n-1]]) {
			return
		}
		if c := t.tourCost(a); c < best {
			best = c
		}
	}
	c := make([]int, n)
	visit()
	for i := 0; i < n; {
		if c[i] < i {
			if i%2 == 0 {
				a[0], a[i] = a[i], a[0]
			} else {
				a[c[i]], a[i] = a[i], a[c[i]]
			}
			visit()
			c[i]++
			i = 0
		} else {
			c[i] = 0
			i++
		}
	}
	return best
}

func validTour(t *tsp, order []int) bool {
	if len(order) != t.n {
		return false
	}
	seen := make([]bool, t.n)
	for _, v := range order {
		if v < 0 || v >= t.n || seen[v] {
			return false
		}
		seen[v] = true
	}
	return t.n == 1 || (t.end[order[0]] && t.end[order[t.n-1]])
}

// TestHeldKarpMatchesBruteForce: the exact ordering equals brute force on
// thousands of random instances of 1 to 9 nodes, unmeasured pairs
// included.
func TestHeldKarpMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	total := iterations(t, 3000)
	for i := range total {
		n := 1 + i%9
		if n == 9 && i%27 != 8 && (testing.Short() || raceEnabled) {
			n = 8 // 9! is the slow case; keep a third of them under -race
		}
		inst := randomTSP(rng, n, i%4 == 0)
		order, cost := inst.heldKarp()
		want := inst.brute()
		if cost != want {
			t.Fatalf("instance %d (n=%d): Held–Karp %d, brute force %d", i, n, cost, want)
		}
		if cost < inf && (!validTour(inst, order) || inst.tourCost(order) != cost) {
			t.Fatalf("instance %d: order %v is not a valid tour of cost %d", i, order, cost)
		}
	}
}

// TestHeuristicNearExact: on random instances of 10–12 nodes the
// heuristic ring (used above 12) is within 2% of Held–Karp.
func TestHeuristicNearExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	worst := 1.0
	exact := 0
	total := iterations(t, 1000)
	for i := range total {
		n := 10 + i%3
		inst := randomTSP(rng, n, false)
		_, opt := inst.heldKarp()
		order, got := inst.heuristic()
		if opt >= inf {
			if got < inf {
				t.Fatalf("instance %d: heuristic found a tour where none exists", i)
			}
			continue
		}
		if !validTour(inst, order) || inst.tourCost(order) != got {
			t.Fatalf("instance %d: heuristic order %v is not a valid tour of cost %d", i, order, got)
		}
		if got < opt {
			t.Fatalf("instance %d: heuristic %d beats the exact optimum %d", i, got, opt)
		}
		// got ≤ 1.02 × opt, in integers.
		if got*100 > opt*102 {
			t.Fatalf("instance %d (n=%d): heuristic %d is more than 2%% above the optimum %d", i, n, got, opt)
		}
		if got == opt {
			exact++
		}
		worst = max(worst, float64(got)/float64(opt))
	}
	t.Logf("%d instances: %d exact, worst ratio %.4f", total, exact, worst)
}

// TestHeuristicLargeRings: rings above the exact limit are valid tours
// and never worse than the plain nearest-neighbour tour they start from.
func TestHeuristicLargeRings(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	for i := range iterations(t, 100) {
		n := 13 + rng.IntN(40)
		inst := randomTSP(rng, n, false)
		order, got := inst.heuristic()
		if !validTour(inst, order) || inst.tourCost(order) != got {
			t.Fatalf("instance %d: invalid tour", i)
		}
		for s := range n {
			if inst.end[s] {
				if nn := inst.nearest(s); nn != nil && inst.tourCost(nn) < got {
					t.Fatalf("instance %d: improved tour %d worse than a start %d", i, got, inst.tourCost(nn))
				}
			}
		}
	}
}
