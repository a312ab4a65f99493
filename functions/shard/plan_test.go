package shard

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
)

// ref recomputes, from the raw inputs and independently of the planner,
// what a plan's properties must be.
type ref struct {
	in       *Inputs
	caps     map[PublicKey]*Capability
	rtt      map[[2]PublicKey]int64
	perLayer int64
}

func newRef(in *Inputs) *ref {
	r := &ref{in: in, caps: map[PublicKey]*Capability{}, rtt: map[[2]PublicKey]int64{}}
	for i := range in.Capabilities {
		r.caps[in.Capabilities[i].Node] = &in.Capabilities[i]
	}
	for _, row := range in.RTT {
		for _, p := range row.Peers {
			for _, k := range [][2]PublicKey{{row.From, p.To}, {p.To, row.From}} {
				r.rtt[k] = max(r.rtt[k], p.Micros)
			}
		}
	}
	r.perLayer = in.Model.LayerBytes + in.Model.KVBytesPerToken*in.Params.ContextTokens
	return r
}

func (r *ref) eligible(c *Capability) bool {
	p := &r.in.Params
	return p.Pinning == PinNone || c.Trusted || (p.PinMinStake > 0 && c.Stake >= p.PinMinStake)
}

// boundaryCapable: may hold either end of a ring (a layer plus the
// embedding, and a layer plus the head).
func (r *ref) boundaryCapable(c *Capability) bool {
	m, p := &r.in.Model, &r.in.Params
	room := c.VRAMBytes - p.ReserveBytes - r.perLayer
	return r.eligible(c) && room >= m.EmbedBytes && room >= m.HeadBytes
}

func (r *ref) hop(a, b PublicKey) (int64, bool) {
	v, ok := r.rtt[[2]PublicKey{a, b}]
	return (v + 1) / 2, ok
}

func (r *ref) xfer(c *Capability) int64 {
	bits := r.in.Model.ActivationBytes * 8 * 1_000_000
	return (bits + c.UplinkBps - 1) / c.UplinkBps
}

// ringCost is coordinator → nodes… → coordinator: half-RTT hops plus each
// non-tail stage's upload time.
func (r *ref) ringCost(nodes []PublicKey) (int64, bool) {
	coord := r.in.Params.Coordinator
	total, ok := r.hop(coord, nodes[0])
	if !ok {
		return 0, false
	}
	for i := 1; i < len(nodes); i++ {
		h, ok := r.hop(nodes[i-1], nodes[i])
		if !ok {
			return 0, false
		}
		total += h + r.xfer(r.caps[nodes[i-1]])
	}
	h, ok := r.hop(nodes[len(nodes)-1], coord)
	if !ok {
		return 0, false
	}
	return total + h, true
}

// split is the least compute for a ring order: each stage holds what fits
// beside the embedding (first), the head (last) or both (alone); every
// stage takes one layer and the rest go to the fastest. ok is false if the
// model does not fit.
func (r *ref) split(nodes []PublicKey) (int64, bool) {
	m, p := &r.in.Model, &r.in.Params
	n := len(nodes)
	caps := make([]int64, n)
	for i, k := range nodes {
		room := r.caps[k].VRAMBytes - p.ReserveBytes
		if i == 0 {
			room -= m.EmbedBytes
		}
		if i == n-1 {
			room -= m.HeadBytes
		}
		if room < r.perLayer {
			return 0, false
		}
		caps[i] = min(room/r.perLayer, int64(m.Layers))
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return r.caps[nodes[idx[a]]].LayerMicros < r.caps[nodes[idx[b]]].LayerMicros })
	left := int64(m.Layers - n)
	var cost int64
	for _, i := range idx {
		take := min(left, caps[i]-1)
		left -= take
		cost += (1 + take) * r.caps[nodes[i]].LayerMicros
	}
	return cost, left == 0
}

// bruteForce is the least per-token latency (hops plus compute) over every
// order of nodes whose ends are boundary-capable (Heap's algorithm).
func (r *ref) bruteForce(nodes []PublicKey) int64 {
	a := append([]PublicKey(nil), nodes...)
	best := int64(-1)
	visit := func() {
		if len(a) > 1 && (!r.boundaryCapable(r.caps[a[0]]) || !r.boundaryCapable(r.caps[a[len(a)-1]])) {
			return
		}
		c, ok := r.ringCost(a)
		compute, fits := r.split(a)
		if ok && fits && (best < 0 || c+compute < best) {
			best = c + compute
		}
	}
	n := len(a)
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

// checkPlan asserts every property a plan must have.
func checkPlan(t *testing.T, in *Inputs, res Result, bruteMax int) {
	t.Helper()
	p := &res.Plan
	if err := p.Check(); err != nil {
		t.Fatalf("plan fails its check: %v", err)
	}
	if res.Hash != p.Hash() {
		t.Fatal("result hash is not the plan's hash")
	}
	r := newRef(in)
	m, par := &in.Model, &in.Params
	if p.Stages < par.MinStages || p.Stages > par.MaxStages {
		t.Fatalf("%d stages outside [%d,%d]", p.Stages, par.MinStages, par.MaxStages)
	}
	var primaries []PublicKey
	var compute int64
	for _, mem := range p.Members {
		c := r.caps[mem.Node]
		if c == nil {
			t.Fatalf("member %s is not a candidate", mem.Node)
		}
		if c.VRAMBytes < par.VRAMFloorBytes {
			t.Fatalf("member %s is below the VRAM floor", mem.Node)
		}
		need := par.ReserveBytes + int64(mem.LayerEnd-mem.LayerStart)*r.perLayer
		if mem.LayerStart == 0 {
			need += m.EmbedBytes
		}
		if mem.LayerEnd == m.Layers {
			need += m.HeadBytes
		}
		if need > c.VRAMBytes {
			t.Fatalf("member %s stage %d needs %d bytes, has %d", mem.Node, mem.Stage, need, c.VRAMBytes)
		}
		if (mem.Stage == 0 || mem.Stage == p.Stages-1) && !r.eligible(c) {
			t.Fatalf("boundary stage %d on %s, which is neither trusted nor staked", mem.Stage, mem.Node)
		}
		if mem.Role == RolePrimary {
			primaries = append(primaries, mem.Node)
			compute += int64(mem.LayerEnd-mem.LayerStart) * c.LayerMicros
		}
	}
	if compute != p.ComputeMicros {
		t.Fatalf("compute_us %d, recomputed %d", p.ComputeMicros, compute)
	}
	hop, ok := r.ringCost(primaries)
	if !ok || hop != p.HopMicros {
		t.Fatalf("hop_us %d, recomputed %d (closed %v)", p.HopMicros, hop, ok)
	}
	if best, ok := r.split(primaries); !ok || best != compute {
		t.Fatalf("layer split costs %d µs, the best for this order is %d (fits %v)", compute, best, ok)
	}
	if len(primaries) <= bruteMax {
		if best := r.bruteForce(primaries); best != p.TokenMicros {
			t.Fatalf("ring of %d predicts %d µs per token, brute force finds %d", len(primaries), p.TokenMicros, best)
		}
	}
}

// TestPlanProperties plans thousands of random pools and checks each plan
// tiles the layers, fits VRAM, pins boundaries, predicts its latency
// exactly, splits layers optimally for its order, orders its ring for the
// least per-token latency (against brute force over every order up to 9
// stages) and is byte-identical under any permutation of its inputs.
func TestPlanProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := iterations(t, 3000)
	planned, byStages := 0, map[int]int{}
	for i := range n {
		shape := poolShape{n: 2 + rng.IntN(30), maxStagesHint: 1 + rng.IntN(10), backups: i%3 == 0, missingRTT: i%7 == 0}
		in := randomInputs(rng, shape)
		res, err := planUnchecked(in)
		if err != nil {
			if !errors.Is(err, ErrNoRing) {
				t.Fatalf("pool %d: %v", i, err)
			}
			continue
		}
		planned++
		byStages[res.Plan.Stages]++
		checkPlan(t, &in, res, 9)
		want, _ := json.Marshal(res.Plan)
		for range 2 {
			again, err := planUnchecked(shuffled(rng, in))
			if err != nil {
				t.Fatalf("pool %d shuffled: %v", i, err)
			}
			got, _ := json.Marshal(again.Plan)
			if again.Hash != res.Hash || !bytes.Equal(got, want) {
				t.Fatalf("pool %d: shuffled inputs give another plan", i)
			}
		}
	}
	t.Logf("%d pools, %d planned; plans by stage count: %v", n, planned, byStages)
	if planned < n/2 {
		t.Fatalf("only %d of %d pools planned: the generator is off", planned, n)
	}
}

// TestPlanLargeRings: pools whose rings pass the exact-ordering limit
// (the heuristic path) keep every property but brute-force optimality.
func TestPlanLargeRings(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	large := 0
	for i := range iterations(t, 100) {
		in := randomInputs(rng, poolShape{n: 30 + rng.IntN(40), maxStagesHint: 25 + rng.IntN(20), backups: i%2 == 0})
		res, err := planUnchecked(in)
		if err != nil {
			if !errors.Is(err, ErrNoRing) {
				t.Fatal(err)
			}
			continue
		}
		if res.Plan.Stages > exactRingMax {
			large++
		}
		checkPlan(t, &in, res, 0)
		again, err := planUnchecked(shuffled(rng, in))
		if err != nil || again.Hash != res.Hash {
			t.Fatalf("pool %d: shuffled inputs give another plan (%v)", i, err)
		}
	}
	if large == 0 {
		t.Fatal("no pool needed a ring above the exact limit: the generator is off")
	}
	t.Logf("%d plans above %d stages", large, exactRingMax)
}

// TestPlanSigned runs the full path (signature checks included) and
// shows a member's shuffled copy of the signed inputs hashes the same.
func TestPlanSigned(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	done, want := 0, iterations(t, 40)
	for i := 0; done < want && i < 400; i++ {
		in := randomInputs(rng, poolShape{n: 3 + rng.IntN(12), maxStagesHint: 4, sign: true})
		res, err := NewPlan(in)
		if errors.Is(err, ErrNoRing) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, &in, res, 8)
		again, err := NewPlan(shuffled(rng, in))
		if err != nil || again.Hash != res.Hash {
			t.Fatalf("shuffled signed inputs: %v", err)
		}
		done++
	}
	// The generator plans about two pools in three (TestPlanProperties), so
	// 400 draws always reach the size: fewer plans means it is off.
	if done < want {
		t.Fatalf("%d pools planned in 400 draws, want %d: the generator is off", done, want)
	}
}

// TestPlanTamperedInput shows a changed signed field is caught before
// planning.
func TestPlanTamperedInput(t *testing.T) {
	in := fixedInputs(t)
	in.Capabilities[1].VRAMBytes++
	if _, err := NewPlan(in); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("got %v, want ErrBadSignature", err)
	}
}

// fixedInputs is a small signed pool that plans.
func fixedInputs(t testing.TB) Inputs {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 7))
	for {
		in := randomInputs(rng, poolShape{n: 8, maxStagesHint: 3, sign: true})
		if _, err := NewPlan(in); err == nil {
			return in
		}
	}
}

// TestPlanErrors: each impossible pool fails with ErrNoRing and a message
// naming what is missing.
func TestPlanErrors(t *testing.T) {
	base := func() Inputs {
		in := Inputs{
			Model: Model{Name: "m", Layers: 10, LayerBytes: 1000, ActivationBytes: 8192, EmbedBytes: 500, HeadBytes: 500},
			Params: Params{Admission: "open", VRAMFloorBytes: 1000, ContextTokens: 1, MinStages: 1, MaxStages: 8,
				Pinning: PinBoundary, PinMinStake: 10, Time: 1},
		}
		in.Model.Hash[0] = 1
		in.Params.Model = in.Model.Hash
		in.Params.Coordinator = KeyOf(testKey(0))
		all := []PublicKey{in.Params.Coordinator}
		for i := range 4 {
			c := Capability{Node: KeyOf(testKey(10 + i)), Model: in.Model.Hash, VRAMBytes: 4500, LayerMicros: 100, UplinkBps: 1e9, Time: 1}
			if i < 2 {
				c.Trusted = true
			}
			in.Capabilities = append(in.Capabilities, c)
			all = append(all, c.Node)
		}
		for _, a := range all {
			row := RTTRow{From: a, Time: 1}
			for _, b := range all {
				if a != b {
					row.Peers = append(row.Peers, RTTPeer{To: b, Micros: 2000})
				}
			}
			in.RTT = append(in.RTT, row)
		}
		return in
	}
	if _, err := planUnchecked(base()); err != nil {
		t.Fatalf("base pool: %v", err)
	}
	cases := []struct {
		name   string
		change func(*Inputs)
		want   string
	}{
		{"nobody admitted", func(in *Inputs) { in.Params.VRAMFloorBytes = 1 << 40 }, "none of the 4 candidates was admitted"},
		{"too little VRAM", func(in *Inputs) {
			for i := range in.Capabilities {
				in.Capabilities[i].VRAMBytes = 2000
			}
		}, "hold at most"},
		{"no pinnable nodes", func(in *Inputs) { in.Capabilities[0].Trusted = false }, "boundary pinning needs 2 nodes"},
		{"stake counts", func(in *Inputs) { in.Capabilities[0].Trusted = false; in.Capabilities[0].Stake = 10 }, ""},
		{"max stages", func(in *Inputs) { in.Params.MaxStages = 2 }, "needs 3 stages on this pool but max_stages is 2"},
		{"min stages", func(in *Inputs) { in.Params.MinStages = 5 }, "min_stages is 5 but only 4 nodes"},
		{"missing rtt", func(in *Inputs) { in.RTT = in.RTT[:1]; in.RTT[0].Peers = in.RTT[0].Peers[:1] }, "no ring closes through the coordinator"},
		{"no standby", func(in *Inputs) { in.Params.Standbys = 1 }, "needs 0 verifiers and 1 standbys"},
		{"unknown policy", func(in *Inputs) { in.Params.Admission = "vip" }, "unknown admission policy"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := base()
			c.change(&in)
			_, err := planUnchecked(in)
			if c.want == "" {
				if err != nil {
					t.Fatalf("want a plan, got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestAdmissionPolicy: a registered stricter policy is applied by name.
func TestAdmissionPolicy(t *testing.T) {
	in := fixedInputs(t)
	open, err := NewPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	in.Params.Admission = "fast-only"
	in.Params.Sign(testKey(0))
	fastest := open.Plan.Members[0].Node
	policy := func(c *Capability, p *Params) error {
		if c.Node == fastest {
			return errors.New("banned for the test")
		}
		return OpenAdmission(c, p)
	}
	res, err := NewPlan(in, WithAdmission("fast-only", policy))
	if err != nil {
		t.Skipf("pool cannot plan without that node: %v", err)
	}
	for _, m := range res.Plan.Members {
		if m.Node == fastest {
			t.Fatal("policy ignored")
		}
	}
	found := false
	for _, e := range res.Excluded {
		found = found || (e.Node == fastest && strings.Contains(e.Reason, "banned"))
	}
	if !found {
		t.Fatalf("exclusion not reported: %+v", res.Excluded)
	}
}

// observedPool is three candidates and the coordinator, pinning off, 12
// layers, each node holding at most 10: node 10 claims claim µs per layer,
// nodes 11 and 12 claim 900. obs[i] is the layer time node 11+i reports
// for node 10 (0: not observed); coordObs is what the coordinator's row
// reports for it.
func observedPool(claim int64, obs [2]int64, coordObs int64) Inputs {
	in := Inputs{
		Model: Model{Name: "m", Layers: 12, LayerBytes: 1000, ActivationBytes: 8192, EmbedBytes: 500, HeadBytes: 500},
		Params: Params{Admission: "open", VRAMFloorBytes: 1000, ContextTokens: 1, MinStages: 2, MaxStages: 8,
			Pinning: PinNone, Time: 1},
	}
	in.Model.Hash[0] = 1
	in.Params.Model = in.Model.Hash
	in.Params.Coordinator = KeyOf(testKey(0))
	liar := KeyOf(testKey(10))
	all := []PublicKey{in.Params.Coordinator}
	for i := range 3 {
		us := int64(900)
		if i == 0 {
			us = claim
		}
		c := Capability{Node: KeyOf(testKey(10 + i)), Model: in.Model.Hash, VRAMBytes: 11_000, LayerMicros: us, UplinkBps: 1e9, Time: 1}
		in.Capabilities = append(in.Capabilities, c)
		all = append(all, c.Node)
	}
	for ai, a := range all {
		row := RTTRow{From: a, Time: 1}
		for _, b := range all {
			if a == b {
				continue
			}
			p := RTTPeer{To: b, Micros: 2000}
			if b == liar {
				switch ai {
				case 0:
					p.LayerMicros = coordObs
				case 2, 3:
					p.LayerMicros = obs[ai-2]
				}
			}
			row.Peers = append(row.Peers, p)
		}
		in.RTT = append(in.RTT, row)
	}
	return in
}

// TestPlanObservedLayerTime: a candidate is placed and priced at the
// median of what other candidates observed for it (its claim only when
// none did), so claiming to be fast buys no layers.
func TestPlanObservedLayerTime(t *testing.T) {
	liar := KeyOf(testKey(10))
	layersOf := func(t *testing.T, in Inputs) (map[PublicKey]int, int64) {
		t.Helper()
		res, err := planUnchecked(in)
		if err != nil {
			t.Fatal(err)
		}
		out := map[PublicKey]int{}
		for _, m := range res.Plan.Members {
			if m.Role == RolePrimary {
				out[m.Node] = m.LayerEnd - m.LayerStart
			}
		}
		return out, res.Plan.ComputeMicros
	}
	honest, honestCompute := layersOf(t, observedPool(900, [2]int64{900, 900}, 0))
	cases := []struct {
		name      string
		in        Inputs
		asHonest  bool  // the liar gets what it would as a 900 µs node
		liarTakes int   // else: the layers it gets
		compute   int64 // the plan's compute_us (0: not checked)
	}{
		{"unobserved claim is believed", observedPool(1, [2]int64{}, 0), false, 10, 10*1 + 2*900},
		{"observed by both", observedPool(1, [2]int64{900, 900}, 0), true, 0, honestCompute},
		{"observed by one", observedPool(1, [2]int64{900, 0}, 0), true, 0, honestCompute},
		{"lower median of two", observedPool(1, [2]int64{1, 900}, 0), false, 10, 0},
		{"observations replace a slower claim too", observedPool(900, [2]int64{5, 5}, 0), false, 10, 10*5 + 2*900},
		{"coordinator's row observes nothing", observedPool(1, [2]int64{}, 900), false, 10, 0},
		{"slower than the rest: not selected", observedPool(1, [2]int64{2000, 2000}, 0), false, 0, 12 * 900},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, compute := layersOf(t, c.in)
			if c.asHonest {
				if got[liar] > honest[liar] {
					t.Fatalf("liar holds %d layers, a 900 µs node %d (plan %v, honest %v)", got[liar], honest[liar], got, honest)
				}
				for k, n := range honest {
					if got[k] != n {
						t.Fatalf("layers %v, want the honest split %v", got, honest)
					}
				}
			} else if got[liar] != c.liarTakes {
				t.Fatalf("liar holds %d layers, want %d (plan %v)", got[liar], c.liarTakes, got)
			}
			if c.compute != 0 && compute != c.compute {
				t.Fatalf("compute_us %d, want %d", compute, c.compute)
			}
		})
	}
}

// TestRTTRowLayerMicrosBounds: an observed layer time is 0 (none) or
// within 1..MaxLayerMicros, and it is signed.
func TestRTTRowLayerMicrosBounds(t *testing.T) {
	for _, c := range []struct {
		us int64
		ok bool
	}{{0, true}, {1, true}, {MaxLayerMicros, true}, {-1, false}, {MaxLayerMicros + 1, false}} {
		r := RTTRow{Time: 1, Peers: []RTTPeer{{To: KeyOf(testKey(3)), Micros: 10, LayerMicros: c.us}}}
		r.Sign(testKey(2))
		err := r.Check()
		if (err == nil) != c.ok {
			t.Fatalf("layer_us %d: err %v, want ok=%v", c.us, err, c.ok)
		}
		if c.ok {
			if r.Peers[0].LayerMicros > 1 {
				r.Peers[0].LayerMicros--
			} else {
				r.Peers[0].LayerMicros++
			}
			if err := r.Check(); !errors.Is(err, ErrBadSignature) {
				t.Fatalf("layer_us %d changed after signing: err %v, want ErrBadSignature", c.us, err)
			}
		}
	}
}
