package shard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// rttMatrix is the combined RTT matrix. A pair's RTT is the larger of the
// two nodes' reports (or the one report there is): a node cannot make
// itself look close by under-reporting, because its peer's own row counts
// too, and members re-probe their neighbours before they sign. Nodes are
// indexed once so a lookup is two map reads and an array read.
type rttMatrix struct {
	idx map[PublicKey]int
	n   int
	v   []int64 // n×n, 0 = unmeasured
}

func newRTT(rows []RTTRow) *rttMatrix {
	m := &rttMatrix{idx: make(map[PublicKey]int, len(rows)+1)}
	id := func(k PublicKey) int {
		i, ok := m.idx[k]
		if !ok {
			i = len(m.idx)
			m.idx[k] = i
		}
		return i
	}
	type entry struct {
		a, b int
		v    int64
	}
	total := 0
	for _, r := range rows {
		total += len(r.Peers)
	}
	entries := make([]entry, 0, total)
	for _, r := range rows {
		a := id(r.From)
		for _, p := range r.Peers {
			entries = append(entries, entry{a, id(p.To), p.Micros})
		}
	}
	m.n = len(m.idx)
	m.v = make([]int64, m.n*m.n)
	for _, e := range entries {
		for _, k := range [2]int{e.a*m.n + e.b, e.b*m.n + e.a} {
			m.v[k] = max(m.v[k], e.v)
		}
	}
	return m
}

// get is the RTT between a and b in µs, or inf when neither measured it.
func (m *rttMatrix) get(a, b PublicKey) int64 {
	i, ok1 := m.idx[a]
	j, ok2 := m.idx[b]
	if !ok1 || !ok2 || m.v[i*m.n+j] == 0 {
		return inf
	}
	return m.v[i*m.n+j]
}

// hop is the one-way latency of a pair, half its RTT rounded up.
func (m *rttMatrix) hop(a, b PublicKey) int64 {
	v := m.get(a, b)
	if v >= inf {
		return inf
	}
	return (v + 1) / 2
}

// inf marks an unmeasured pair. It is far above any real ring's cost
// (hops ≤ 5·10⁷ µs, uploads ≤ 2⁴⁰ µs, ≤ 4097 hops: < 2⁵³) and a sum of a
// few of them cannot overflow, so O(1) move deltas stay exact.
const inf = int64(1) << 56

// exactRingMax is the largest ring ordered exactly (Held–Karp); above it a
// heuristic runs. At 12 the exact search, once per first stage, is about
// 12·2¹¹·12² ≈ 3.5M steps (a few ms); each extra node more than doubles it.
const exactRingMax = 12

// tsp is a ring-ordering instance: n stage nodes 0..n-1 and the
// coordinator at index n. hop is the symmetric one-way latency (inf when
// unmeasured); up[u] is stage u's time to upload one token's activation,
// paid on every hop between stages, so by every stage but the last; end[u]
// says u may be the first or the last stage.
type tsp struct {
	n   int
	hop [][]int64
	up  []int64
	end []bool
	// ends[f][l] is the cost that depends on which stages are first and
	// last: the compute of the best layer split with f first and l last
	// (their capacities shrink by the embedding and the head), inf when
	// no split fits. nil means none.
	ends [][]int64
}

func (t *tsp) endCost(f, l int) int64 {
	if t.ends == nil {
		return 0
	}
	return t.ends[f][l]
}

// endDelta is the change in cost when the ends go from (f, l) to (nf, nl):
// the end-dependent cost, and the last stage's upload, which is not paid.
func (t *tsp) endDelta(f, l, nf, nl int) int64 {
	return t.endCost(nf, nl) - t.up[nl] - t.endCost(f, l) + t.up[l]
}

// add saturates at inf, so a tour through an unmeasured pair stays inf.
func add(a, b int64) int64 {
	if a >= inf || b >= inf {
		return inf
	}
	return a + b
}

// tourCost is coordinator → order… → coordinator.
func (t *tsp) tourCost(order []int) int64 {
	n := len(order)
	c := t.hop[t.n][order[0]]
	for i := 1; i < n; i++ {
		c = add(c, add(t.hop[order[i-1]][order[i]], t.up[order[i-1]]))
	}
	c = add(c, t.hop[order[n-1]][t.n])
	return add(c, t.endCost(order[0], order[n-1]))
}

// hopCost is tourCost without the end-dependent term.
func (t *tsp) hopCost(order []int) int64 {
	ends := t.ends
	t.ends = nil
	c := t.tourCost(order)
	t.ends = ends
	return c
}

// orderRing orders the chosen nodes to minimise per-token latency: the hops
// around coordinator → stage 0 → … → stage k-1 → coordinator (half the RTT,
// plus, between stages, the sender's time to upload one token's
// activation) and the compute of the best layer split for the ends chosen.
// Stage 0 and stage k-1 must be boundary-capable. It returns the order and
// its hop latency.
func orderRing(chosen []*cand, rtt *rttMatrix, coord PublicKey, L int) ([]int, int64, error) {
	n := len(chosen)
	t := &tsp{n: n, hop: make([][]int64, n+1), up: make([]int64, n), end: make([]bool, n), ends: endCosts(chosen, L)}
	key := func(i int) PublicKey {
		if i == n {
			return coord
		}
		return chosen[i].c.Node
	}
	for u := 0; u <= n; u++ {
		t.hop[u] = make([]int64, n+1)
		for v := 0; v <= n; v++ {
			if u == v {
				t.hop[u][v] = inf
				continue
			}
			t.hop[u][v] = rtt.hop(key(u), key(v))
		}
	}
	for i, c := range chosen {
		t.up[i] = c.xfer
		t.end[i] = c.mayPin || n == 1
	}
	var order []int
	var cost int64
	if n <= exactRingMax {
		order, cost = t.heldKarp()
	} else {
		order, cost = t.heuristic()
	}
	if cost >= inf {
		var missing []string
		for u := 0; u <= n; u++ {
			for v := u + 1; v <= n; v++ {
				if rtt.get(key(u), key(v)) >= inf {
					missing = append(missing, key(u).String()[:8]+"…↔"+key(v).String()[:8]+"…")
				}
			}
		}
		more := ""
		if len(missing) > 5 {
			more = fmt.Sprintf(" and %d more", len(missing)-5)
			missing = missing[:5]
		}
		if len(missing) == 0 {
			return nil, 0, fmt.Errorf("%w: no two boundary-capable nodes at the ends leave room for all %d layers", ErrNoRing, L)
		}
		return nil, 0, fmt.Errorf("%w: no ring closes through the coordinator with the RTTs measured; missing pairs: %s%s",
			ErrNoRing, strings.Join(missing, ", "), more)
	}
	return order, t.hopCost(order), nil
}

// endCosts is, for every ordered pair of chosen nodes (f first, l last),
// the compute of the best layer split (see allocate), or inf when the
// ring cannot hold the model with those ends. O(n³), n ≤ a few dozen.
func endCosts(chosen []*cand, L int) [][]int64 {
	n := len(chosen)
	speed := make([]int, n)
	for i := range speed {
		speed[i] = i
	}
	slices.SortStableFunc(speed, func(a, b int) int { return cmpInt(chosen[a].us, chosen[b].us) })
	out := make([][]int64, n)
	for f := range n {
		out[f] = make([]int64, n)
		for l := range n {
			out[f][l] = inf
			if n == 1 {
				out[f][l] = splitCost(L, speed, chosen, func(int) int { return chosen[0].solo })
				continue
			}
			if f == l {
				continue
			}
			out[f][l] = splitCost(L, speed, chosen, func(i int) int {
				switch i {
				case f:
					return chosen[i].first
				case l:
					return chosen[i].last
				}
				return chosen[i].mid
			})
		}
	}
	return out
}

// splitCost is allocate's compute for one assignment of capacities: one
// layer each, the rest to the fastest first; inf if they do not fit.
func splitCost(L int, speed []int, chosen []*cand, capOf func(int) int) int64 {
	left := L - len(chosen)
	var cost int64
	for _, i := range speed {
		c := capOf(i)
		if c < 1 {
			return inf
		}
		add := min(left, c-1)
		left -= add
		cost += int64(1+add) * chosen[i].us
	}
	if left > 0 {
		return inf
	}
	return cost
}

// heldKarp is the exact dynamic programme over subsets, run once per
// possible first stage f (the end-dependent cost needs both ends):
// dp[S][j] is the cheapest path coordinator → f → … → j through S. Ties
// keep the first found in index order, so the result is deterministic.
func (t *tsp) heldKarp() ([]int, int64) {
	n := t.n
	if n == 1 {
		return []int{0}, t.tourCost([]int{0})
	}
	full := 1<<n - 1
	dp := make([]int64, (full+1)*n)
	par := make([]int8, (full+1)*n)
	best, bestFirst, bestLast := inf, -1, -1
	var bestPar []int8
	for f := range n {
		if !t.end[f] {
			continue
		}
		for i := range dp {
			dp[i] = inf
		}
		dp[(1<<f)*n+f] = t.hop[n][f]
		par[(1<<f)*n+f] = -1
		for s := 1; s <= full; s++ {
			if s&(1<<f) == 0 {
				continue
			}
			for j := range n {
				cur := dp[s*n+j]
				if cur >= inf || s&(1<<j) == 0 {
					continue
				}
				cur += t.up[j]
				row := t.hop[j]
				for v := range n {
					if s&(1<<v) != 0 {
						continue
					}
					c := add(cur, row[v])
					ns := (s | 1<<v) * n
					if c < dp[ns+v] {
						dp[ns+v] = c
						par[ns+v] = int8(j)
					}
				}
			}
		}
		for j := range n {
			if !t.end[j] || j == f {
				continue
			}
			c := add(add(dp[full*n+j], t.hop[j][n]), t.endCost(f, j))
			if c < best {
				best, bestFirst, bestLast = c, f, j
				bestPar = append(bestPar[:0], par...)
			}
		}
	}
	if bestFirst < 0 {
		return nil, inf
	}
	order := make([]int, n)
	s, j := full, bestLast
	for i := n - 1; i >= 0; i-- {
		order[i] = j
		pj := int(bestPar[s*n+j])
		s &^= 1 << j
		j = pj
	}
	return order, best
}

// heuristic builds nearest-neighbour tours from boundary-capable starts,
// improves each by local search, then kicks the best with double bridges
// (iterated local search); the best tour wins, the earliest on ties.
func (t *tsp) heuristic() ([]int, int64) {
	n := t.n
	type local struct {
		tour []int
		cost int64
	}
	var optima []local
	for s := range n {
		if !t.end[s] {
			continue
		}
		// Large rings: polish a bounded number of starts; each polish is
		// ~n² moves per pass.
		if len(optima) == 16 {
			break
		}
		tour := t.nearest(s)
		if tour == nil {
			continue
		}
		t.improve(tour)
		optima = append(optima, local{tour, t.tourCost(tour)})
	}
	if len(optima) == 0 {
		return nil, inf
	}
	slices.SortStableFunc(optima, func(a, b local) int { return cmpInt(a.cost, b.cost) })
	// Iterated local search from the best few local optima: kick with a
	// double bridge (three segments reordered, which no single move
	// undoes), polish, keep what is cheaper. Kicks come from a fixed-seed
	// generator, so every party computes the same ring.
	// The budget shrinks as rings grow (a polish is ~n³ in small rings,
	// ~n² in large ones); 3×60 keeps 10–12-node rings within 2% of the
	// optimum (TestHeuristicNearExact).
	bases, kicks := 3, 60
	switch {
	case n > 64:
		bases, kicks = 1, 10
	case n > 24:
		bases, kicks = 1, 30
	case n > 16:
		bases, kicks = 2, 30
	}
	best, bestCost := optima[0].tour, optima[0].cost
	rng := rand.New(rand.NewPCG(uint64(n), 0x5eed))
	try := make([]int, n)
	for _, o := range optima[:min(bases, len(optima))] {
		cur, curCost := o.tour, o.cost
		for range kicks {
			if n < 8 {
				break
			}
			// Cuts 0 ≤ a < b < c ≤ n: the ends may change too.
			a := rng.IntN(n - 2)
			b := a + 1 + rng.IntN(n-a-1)
			c := b + 1 + rng.IntN(n-b)
			k := copy(try, cur[:a])
			k += copy(try[k:], cur[b:c])
			k += copy(try[k:], cur[a:b])
			copy(try[k:], cur[c:])
			if !t.end[try[0]] || !t.end[try[n-1]] {
				continue
			}
			t.improve(try)
			if cost := t.tourCost(try); cost < curCost {
				cur, curCost = append([]int(nil), try...), cost
			}
		}
		if curCost < bestCost {
			best, bestCost = cur, curCost
		}
	}
	return best, bestCost
}

// nearest is a nearest-neighbour tour from start that keeps one
// boundary-capable node back for the last position.
func (t *tsp) nearest(start int) []int {
	n := t.n
	used := make([]bool, n)
	used[start] = true
	ends := 0
	for i := range n {
		if t.end[i] && i != start {
			ends++
		}
	}
	if ends == 0 && n > 1 {
		return nil
	}
	tour := []int{start}
	cur := start
	for len(tour) < n {
		next := -1
		for v := range n {
			if used[v] {
				continue
			}
			// The last boundary-capable node waits for the last place.
			if t.end[v] && ends == 1 && len(tour) < n-1 {
				continue
			}
			if next < 0 || t.hop[cur][v] < t.hop[cur][next] {
				next = v
			}
		}
		used[next] = true
		if t.end[next] {
			ends--
		}
		tour = append(tour, next)
		cur = next
	}
	return tour
}

// improve applies 2-opt (reverse a run), swap (exchange two stages) and
// or-opt (move a run, either way round) moves to tour in
// place while any lowers its cost, keeping boundary-capable nodes at both
// ends. Each move is priced in O(1): hops are symmetric, and the upload
// term only changes with the last stage (the one that does not upload).
func (t *tsp) improve(tour []int) {
	n := len(tour)
	if n < 2 {
		return
	}
	C := t.n
	at := func(i int) int {
		if i < 0 || i >= n {
			return C
		}
		return tour[i]
	}
	h := func(a, b int) int64 { return t.hop[a][b] }
	// Or-opt moves runs of up to three in large rings; small rings move
	// runs of any length (3-opt's segment insertion), which escapes the
	// local optima the fixed ends otherwise create.
	maxRun := 3
	if n <= 24 {
		maxRun = n - 1
	}
	for pass := 0; pass < 1000; pass++ {
		improved := false
		for i := 0; i < n-1; i++ {
			for j := i + 1; j < n; j++ {
				// Both moves below put tour[j] first when i is 0 and
				// tour[i] last when j is the end.
				if (i == 0 && !t.end[tour[j]]) || (j == n-1 && !t.end[tour[i]]) {
					continue
				}
				var ends int64
				if i == 0 || j == n-1 {
					nf, nl := tour[0], tour[n-1]
					if i == 0 {
						nf = tour[j]
					}
					if j == n-1 {
						nl = tour[i]
					}
					ends = t.endDelta(tour[0], tour[n-1], nf, nl)
				}
				u, v := tour[i], tour[j]
				a, b := at(i-1), at(j+1)
				// 2-opt: reverse tour[i..j].
				if d := h(a, v) + h(u, b) - h(a, u) - h(v, b) + ends; d < 0 {
					for x, y := i, j; x < y; x, y = x+1, y-1 {
						tour[x], tour[y] = tour[y], tour[x]
					}
					improved = true
					continue
				}
				// Swap tour[i] and tour[j] (adjacent: the same as 2-opt).
				if j == i+1 {
					continue
				}
				c, e := at(i+1), at(j-1)
				if d := h(a, v) + h(v, c) + h(e, u) + h(u, b) - h(a, u) - h(u, c) - h(e, v) - h(v, b) + ends; d < 0 {
					tour[i], tour[j] = v, u
					improved = true
				}
			}
		}
		for l := 1; l <= maxRun && l < n; l++ {
			for i := 0; i+l <= n; i++ {
				s0, s1 := tour[i], tour[i+l-1]
				a, b := at(i-1), at(i+l)
				remove := h(a, b) - h(a, s0) - h(s1, b)
				// The remainder r is tour without [i, i+l); gap g sits
				// between r[g-1] and r[g], the coordinator at either end.
				m := n - l
				r := func(k int) int {
					if k < 0 || k >= m {
						return C
					}
					if k < i {
						return tour[k]
					}
					return tour[k+l]
				}
				oldFirst, oldLast := tour[0], tour[n-1]
				for g := 0; g <= m; g++ {
					if g == i {
						continue // the same place
					}
					c, e := r(g-1), r(g)
					for rev := 0; rev < 2; rev++ {
						if rev == 1 && l == 1 {
							break
						}
						f, z := s0, s1
						if rev == 1 {
							f, z = s1, s0
						}
						first, last := r(0), r(m-1)
						if g == 0 {
							first = f
						}
						if g == m {
							last = z
						}
						if m == 0 || !t.end[first] || !t.end[last] {
							continue
						}
						d := remove + h(c, f) + h(z, e) - h(c, e)
						// A reversed run's inner hops are unchanged
						// (symmetric); only the end terms move.
						d += t.endDelta(oldFirst, oldLast, first, last)
						if d >= 0 {
							continue
						}
						seg := make([]int, l)
						for q := range l {
							if rev == 1 {
								seg[q] = tour[i+l-1-q]
							} else {
								seg[q] = tour[i+q]
							}
						}
						rest := make([]int, 0, m)
						for k := range m {
							rest = append(rest, r(k))
						}
						out := append(append(append(tour[:0:0], rest[:g]...), seg...), rest[g:]...)
						copy(tour, out)
						improved = true
						goto nextI
					}
				}
			nextI:
			}
		}
		if !improved {
			break
		}
	}
}
