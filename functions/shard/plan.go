package shard

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// PlanVersion is the version of the placement rules. A member running other
// rules computes another plan and refuses to sign, instead of forming a ring
// on a plan it did not compute.
//
// Version 2: a candidate's per-layer time is the median of the layer
// times other candidates observed for it (RTTPeer.LayerMicros), its own
// claim only when none did.
const PlanVersion = 2

// Role is what a member does for its stage.
type Role string

// Roles.
const (
	// RolePrimary computes the stage on the serving path.
	RolePrimary Role = "primary"
	// RoleVerifier holds the stage's layers to recompute its work.
	RoleVerifier Role = "verifier"
	// RoleStandby holds the stage's layers to take over if the primary
	// drops.
	RoleStandby Role = "standby"
)

func (r Role) rank() int {
	switch r {
	case RolePrimary:
		return 0
	case RoleVerifier:
		return 1
	case RoleStandby:
		return 2
	}
	return 3
}

// Member is one node's place in a ring.
type Member struct {
	Stage      int       `json:"stage"`
	Role       Role      `json:"role"`
	Node       PublicKey `json:"node"`
	LayerStart int       `json:"layer_start"`
	LayerEnd   int       `json:"layer_end"`
	// Prev and Next are the stage's ring neighbours: the primaries of the
	// stages before and after, or the coordinator at either end.
	Prev PublicKey `json:"prev"`
	Next PublicKey `json:"next"`
}

// Plan is a ring: stages in serving order, each with its primary, verifiers
// and standbys, and the per-token latency it predicts.
type Plan struct {
	Version     int       `json:"version"`
	Inputs      Hash      `json:"inputs"`
	Model       Hash      `json:"model"`
	Layers      int       `json:"layers"`
	Coordinator PublicKey `json:"coordinator"`
	Stages      int       `json:"stages"`
	// Members are ordered by stage, then primary, verifiers, standbys.
	Members []Member `json:"members"`
	// ComputeMicros is Σ layers × per-layer time over the primaries.
	ComputeMicros int64 `json:"compute_us"`
	// HopMicros is Σ one-way hop latency (half the RTT) plus activation
	// transfer time around the ring, coordinator included.
	HopMicros int64 `json:"hop_us"`
	// TokenMicros is the predicted per-token latency: compute plus hops.
	TokenMicros int64 `json:"token_us"`
}

func (p *Plan) canonical() []byte {
	e := newEnc(domainPlan)
	e.int(p.Version)
	e.raw32(p.Inputs)
	e.raw32(p.Model)
	e.int(p.Layers)
	e.raw32(p.Coordinator)
	e.int(p.Stages)
	e.count(len(p.Members))
	for _, m := range p.Members {
		e.int(m.Stage)
		e.str(string(m.Role))
		e.raw32(m.Node)
		e.int(m.LayerStart)
		e.int(m.LayerEnd)
		e.raw32(m.Prev)
		e.raw32(m.Next)
	}
	e.i64(p.ComputeMicros)
	e.i64(p.HopMicros)
	e.i64(p.TokenMicros)
	return e.b
}

// Hash is the SHA-256 of the plan's canonical encoding: what members sign
// and receipts name.
func (p *Plan) Hash() Hash { return sha256.Sum256(p.canonical()) }

// Primary returns the primary member of a stage.
func (p *Plan) Primary(stage int) (Member, bool) {
	for _, m := range p.Members {
		if m.Stage == stage && m.Role == RolePrimary {
			return m, true
		}
	}
	return Member{}, false
}

// Check verifies a plan's shape: one primary per stage, primaries' ranges
// tile [0, Layers) in stage order, every backup holds its stage's range,
// neighbours link the ring through the coordinator, no node twice. It does
// not say the plan is the one Plan computes; Accept does.
func (p *Plan) Check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: plan: %s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	if p.Version != PlanVersion {
		return bad("version %d, want %d", p.Version, PlanVersion)
	}
	if p.Layers < 1 || p.Stages < 1 || p.Stages > p.Layers {
		return bad("%d stages for %d layers", p.Stages, p.Layers)
	}
	if p.Coordinator.IsZero() {
		return bad("coordinator missing")
	}
	prim := make([]*Member, p.Stages)
	seen := map[PublicKey]bool{p.Coordinator: true}
	for i := range p.Members {
		m := &p.Members[i]
		if m.Stage < 0 || m.Stage >= p.Stages {
			return bad("member %d names stage %d of %d", i, m.Stage, p.Stages)
		}
		if m.Role.rank() > 2 {
			return bad("member %d has role %q", i, m.Role)
		}
		if m.Node.IsZero() {
			return bad("member %d has no node key", i)
		}
		if seen[m.Node] {
			return bad("node %s appears twice (or is the coordinator)", m.Node)
		}
		seen[m.Node] = true
		if i > 0 {
			q := &p.Members[i-1]
			if q.Stage > m.Stage || (q.Stage == m.Stage && q.Role.rank() > m.Role.rank()) {
				return bad("members out of order at %d", i)
			}
		}
		if m.Role == RolePrimary {
			if prim[m.Stage] != nil {
				return bad("stage %d has two primaries", m.Stage)
			}
			prim[m.Stage] = m
		}
	}
	next := 0
	for s, m := range prim {
		if m == nil {
			return bad("stage %d has no primary", s)
		}
		if m.LayerStart != next || m.LayerEnd <= m.LayerStart {
			return bad("stage %d holds [%d,%d), want it to start at %d", s, m.LayerStart, m.LayerEnd, next)
		}
		next = m.LayerEnd
		prev, nxt := p.Coordinator, p.Coordinator
		if s > 0 {
			prev = prim[s-1].Node
		}
		if s+1 < p.Stages {
			nxt = prim[s+1].Node
		}
		for _, b := range p.Members {
			if b.Stage == s && (b.Prev != prev || b.Next != nxt || b.LayerStart != m.LayerStart || b.LayerEnd != m.LayerEnd) {
				return bad("member %s of stage %d disagrees with its primary on range or neighbours", b.Node, s)
			}
		}
	}
	if next != p.Layers {
		return bad("stages cover [0,%d) of %d layers", next, p.Layers)
	}
	if p.TokenMicros != p.ComputeMicros+p.HopMicros {
		return bad("token_us is not compute_us + hop_us")
	}
	return nil
}

// PlanDoc is a plan as the CLI writes it: the plan, its hash and the
// candidates left out (not hashed: they are for the operator).
type PlanDoc struct {
	Hash     Hash        `json:"hash"`
	Plan     Plan        `json:"plan"`
	Excluded []Exclusion `json:"excluded,omitempty"`
}

// DecodePlan parses a PlanDoc, checks the plan's shape and that the hash is
// the plan's.
func DecodePlan(b []byte) (Plan, error) {
	var d PlanDoc
	if err := decodeJSON(b, MaxInputsBytes, &d, "plan"); err != nil {
		return Plan{}, err
	}
	if err := d.Plan.Check(); err != nil {
		return Plan{}, err
	}
	if h := d.Plan.Hash(); h != d.Hash {
		return Plan{}, fmt.Errorf("%w: plan hash is %s, document says %s", ErrInvalid, h, d.Hash)
	}
	return d.Plan, nil
}

// ErrNoRing means no ring can be formed from the inputs; the message says
// what is missing.
var ErrNoRing = errors.New("shard: no ring")

// AdmissionPolicy decides whether a node may join rings. It returns nil to
// admit, or an error saying why not. Policies are named in Params, so every
// party computing a plan applies the same one.
type AdmissionPolicy func(c *Capability, p *Params) error

// OpenAdmission is the default policy: any node whose proven VRAM is at or
// above the floor.
func OpenAdmission(c *Capability, p *Params) error {
	if c.VRAMBytes < p.VRAMFloorBytes {
		return fmt.Errorf("proven VRAM %d bytes is below the floor of %d", c.VRAMBytes, p.VRAMFloorBytes)
	}
	return nil
}

// StakedAdmission admits only trusted nodes and nodes staking at least
// PinMinStake, on top of the VRAM floor.
func StakedAdmission(c *Capability, p *Params) error {
	if err := OpenAdmission(c, p); err != nil {
		return err
	}
	if !c.Trusted && (p.PinMinStake == 0 || c.Stake < p.PinMinStake) {
		return fmt.Errorf("neither trusted nor staking %d", p.PinMinStake)
	}
	return nil
}

// Option changes how Plan runs.
type Option func(*planConfig)

type planConfig struct{ policies map[string]AdmissionPolicy }

func newConfig() planConfig {
	return planConfig{policies: map[string]AdmissionPolicy{"open": OpenAdmission, "staked": StakedAdmission}}
}

// WithAdmission registers a named admission policy, for Params.Admission to
// select. "open" and "staked" are built in.
func WithAdmission(name string, policy AdmissionPolicy) Option {
	return func(c *planConfig) { c.policies[name] = policy }
}

// Exclusion is a candidate Plan did not admit, and why.
type Exclusion struct {
	Node   PublicKey `json:"node"`
	Reason string    `json:"reason"`
}

// Result is a plan with its hash and the candidates left out of the pool.
// Only Plan is hashed: exclusions are for the operator.
type Result struct {
	Plan     Plan        `json:"plan"`
	Hash     Hash        `json:"hash"`
	Excluded []Exclusion `json:"excluded"`
}

// cand is an admitted node with what placement needs to know about it.
type cand struct {
	c    *Capability
	rank Hash // SHA-256(seed ‖ node): the public tie-break
	// Layer capacities as a middle, first, last or only stage (clipped
	// to the model's layer count).
	mid, first, last, solo int
	// mayPin: the node may hold a boundary stage (trusted/staked or no
	// pinning) and has room for one.
	mayPin bool
	// sc is the capacity selection counts it at: as a boundary stage if it
	// may be one (so any two of them fit at the ends), else as a middle.
	sc   int
	xfer int64 // µs to send one token's activation to the next stage
	// us is the per-layer time placement uses: the median of what other
	// candidates observed, else the node's own claim (effectiveMicros).
	us int64
}

// NewPlan computes the ring for the inputs (the network's shard.plan). It
// is a pure function: the same inputs, in any order, give the same plan and
// hash on any machine. Inputs are checked (records and signatures) first.
// The ring order and the layer split together minimise the predicted
// per-token latency for the nodes selected (see README.md for the steps).
func NewPlan(in Inputs, opts ...Option) (Result, error) {
	cfg := newConfig()
	for _, o := range opts {
		o(&cfg)
	}
	h, err := in.checkHash()
	if err != nil {
		return Result{}, err
	}
	return newPlan(&in, &cfg, h)
}

// newPlan is NewPlan on inputs already checked, whose hash is h.
func newPlan(in *Inputs, cfg *planConfig, h Hash) (Result, error) {
	policy, ok := cfg.policies[in.Params.Admission]
	if !ok {
		return Result{}, fmt.Errorf("%w: unknown admission policy %q", ErrInvalid, in.Params.Admission)
	}
	m, p := &in.Model, &in.Params
	L := m.Layers

	cands, excluded := admit(in, policy)
	if len(cands) == 0 {
		return Result{Excluded: excluded}, fmt.Errorf("%w: none of the %d candidates was admitted%s", ErrNoRing, len(in.Capabilities), firstReasons(excluded))
	}
	rtt := newRTT(in.RTT)

	chosen, err := selectPrimaries(cands, p, L)
	if err != nil {
		return Result{Excluded: excluded}, err
	}
	order, hop, err := orderRing(chosen, rtt, p.Coordinator, L)
	if err != nil {
		return Result{Excluded: excluded}, err
	}
	ring := make([]*cand, len(order))
	for i, j := range order {
		ring[i] = chosen[j]
	}
	layers, compute, err := allocate(ring, L)
	if err != nil {
		return Result{Excluded: excluded}, err
	}
	plan := Plan{
		Version: PlanVersion, Inputs: h, Model: m.Hash, Layers: L,
		Coordinator: p.Coordinator, Stages: len(ring),
		ComputeMicros: compute, HopMicros: hop, TokenMicros: compute + hop,
	}
	backups, err := chooseBackups(cands, ring, layers, p, rtt)
	if err != nil {
		return Result{Excluded: excluded}, err
	}
	start := 0
	for s, c := range ring {
		prev, next := p.Coordinator, p.Coordinator
		if s > 0 {
			prev = ring[s-1].c.Node
		}
		if s+1 < len(ring) {
			next = ring[s+1].c.Node
		}
		mem := Member{Stage: s, Role: RolePrimary, Node: c.c.Node, LayerStart: start, LayerEnd: start + layers[s], Prev: prev, Next: next}
		plan.Members = append(plan.Members, mem)
		for _, b := range backups[s] {
			mem.Role, mem.Node = b.role, b.c.c.Node
			plan.Members = append(plan.Members, mem)
		}
		start += layers[s]
	}
	if err := plan.Check(); err != nil {
		// A bug, not bad input: say so rather than hand out a broken ring.
		return Result{Excluded: excluded}, fmt.Errorf("shard: internal error, plan fails its own check: %w", err)
	}
	return Result{Plan: plan, Hash: plan.Hash(), Excluded: excluded}, nil
}

func firstReasons(ex []Exclusion) string {
	var b strings.Builder
	for i, e := range ex {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(ex)-3)
			break
		}
		fmt.Fprintf(&b, "; %s: %s", e.Node, e.Reason)
	}
	return b.String()
}

// admit applies the policy and computes each admitted node's capacities,
// in speed order: fastest per-layer time first, then the seeded tie-break.
func admit(in *Inputs, policy AdmissionPolicy) ([]*cand, []Exclusion) {
	m, p := &in.Model, &in.Params
	L := m.Layers
	perLayer := m.LayerBytes + m.KVBytesPerToken*p.ContextTokens
	capacity := func(c *Capability, extra int64) int {
		room := c.VRAMBytes - p.ReserveBytes - extra
		if room < perLayer {
			return 0
		}
		return int(min(room/perLayer, int64(L)))
	}
	var cands []*cand
	var excluded []Exclusion
	observed := observations(in)
	caps := make([]*Capability, len(in.Capabilities))
	for i := range in.Capabilities {
		caps[i] = &in.Capabilities[i]
	}
	slices.SortFunc(caps, func(a, b *Capability) int { return bytes.Compare(a.Node[:], b.Node[:]) })
	for _, c := range caps {
		reason := ""
		switch {
		case c.Node == p.Coordinator:
			reason = "is the coordinator"
		case c.Model != m.Hash:
			reason = fmt.Sprintf("measured model %s, not %s", c.Model, m.Hash)
		}
		if reason == "" {
			if err := policy(c, p); err != nil {
				reason = err.Error()
			}
		}
		x := &cand{c: c, us: effectiveMicros(c.LayerMicros, observed[c.Node]), mid: capacity(c, 0), first: capacity(c, m.EmbedBytes), last: capacity(c, m.HeadBytes), solo: capacity(c, m.EmbedBytes+m.HeadBytes)}
		if reason == "" && x.mid == 0 {
			reason = fmt.Sprintf("%d bytes of VRAM less %d reserved hold no layer (%d bytes with KV for %d tokens)", c.VRAMBytes, p.ReserveBytes, perLayer, p.ContextTokens)
		}
		if reason != "" {
			excluded = append(excluded, Exclusion{Node: c.Node, Reason: reason})
			continue
		}
		eligible := p.Pinning == PinNone || c.Trusted || (p.PinMinStake > 0 && c.Stake >= p.PinMinStake)
		x.mayPin = eligible && min(x.first, x.last) >= 1
		x.sc = x.mid
		if x.mayPin {
			x.sc = min(x.first, x.last)
		}
		if !eligible {
			x.solo = 0 // a lone stage holds both boundaries
		}
		// Bits to send over the uplink, in µs, rounded up; capped so sums
		// over a ring cannot overflow.
		x.xfer = min((m.ActivationBytes*8*1_000_000+c.UplinkBps-1)/c.UplinkBps, int64(1)<<40)
		h := sha256.New()
		h.Write(p.Seed[:])
		h.Write(c.Node[:])
		copy(x.rank[:], h.Sum(nil))
		cands = append(cands, x)
	}
	slices.SortFunc(cands, func(a, b *cand) int {
		if a.us != b.us {
			return cmpInt(a.us, b.us)
		}
		return bytes.Compare(a.rank[:], b.rank[:])
	})
	return cands, excluded
}

// observations collects, per node, the layer times other candidates
// observed for it (RTTPeer.LayerMicros > 0). Only rows measured by a node
// with a capability record for this model count, and never a node's
// observation of itself (rows cannot hold one): the coordinator's nominal
// row observes nothing. Each list is sorted, so the result does not depend
// on the order of rows or peers.
func observations(in *Inputs) map[PublicKey][]int64 {
	cand := make(map[PublicKey]bool, len(in.Capabilities))
	for i := range in.Capabilities {
		c := &in.Capabilities[i]
		if c.Model == in.Model.Hash && c.Node != in.Params.Coordinator {
			cand[c.Node] = true
		}
	}
	out := make(map[PublicKey][]int64)
	for i := range in.RTT {
		r := &in.RTT[i]
		if !cand[r.From] {
			continue
		}
		for _, p := range r.Peers {
			if p.LayerMicros > 0 && p.To != r.From {
				out[p.To] = append(out[p.To], p.LayerMicros)
			}
		}
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

// effectiveMicros is the per-layer time a candidate is placed and priced
// at: the median of the observations (the lower median for an even
// count, so one slow observer cannot raise an honest node on its own),
// or its own claim when no other candidate observed it. The claim is not
// a floor: with it as one, claiming 1 µs would never cost a node anything
// and would gain it whenever its own measurement ran slower than its
// peers' (a cold or busy self-measurement), so an honest claim could only
// lose against a lie. A node that claims to be faster than its peers
// measured it gets the layers of the node it is.
func effectiveMicros(claim int64, observed []int64) int64 {
	if len(observed) == 0 {
		return claim
	}
	return observed[(len(observed)-1)/2]
}

func cmpInt[T int | int64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// selectPrimaries picks as few nodes as fit the model, fastest first.
//
// One node serves alone if it can hold everything (and may hold boundary
// layers). Otherwise k ≥ 2 nodes form the ring, two of which may hold a
// boundary stage. The smallest feasible k is found with the largest nodes;
// then the k nodes are taken in speed order, skipping a node only when
// taking it would leave no way to fit the model with the slower ones.
func selectPrimaries(cands []*cand, p *Params, L int) ([]*cand, error) {
	if p.MinStages <= 1 {
		for _, x := range cands {
			if x.solo >= L {
				return []*cand{x}, nil
			}
		}
	}
	n := len(cands)
	pins := 0
	for _, x := range cands {
		if x.mayPin {
			pins++
		}
	}
	// bySC: capacity-descending order for feasibility bounds.
	bySC := slices.Clone(cands)
	slices.SortStableFunc(bySC, func(a, b *cand) int { return cmpInt(b.sc, a.sc) })
	pos := make(map[*cand]int, n)
	for i, x := range cands {
		pos[x] = i
	}
	// best returns the most layers r more nodes from speed positions ≥ from
	// can add while bringing at least needPins boundary-capable nodes.
	best := func(r, needPins, from int) (int, bool) {
		total, taken, pinTaken := 0, 0, 0
		used := make([]bool, n)
		for _, x := range bySC {
			if pinTaken == needPins {
				break
			}
			if x.mayPin && pos[x] >= from {
				used[pos[x]] = true
				total += x.sc
				pinTaken++
				taken++
			}
		}
		if pinTaken < needPins || taken > r {
			return 0, false
		}
		for _, x := range bySC {
			if taken == r {
				break
			}
			if pos[x] >= from && !used[pos[x]] {
				total += x.sc
				taken++
			}
		}
		return total, taken == r
	}
	if pins < 2 {
		if p.Pinning == PinNone {
			return nil, fmt.Errorf("%w: a ring needs 2 nodes with room for a boundary stage (a layer plus the embedding or the head); the pool has %d", ErrNoRing, pins)
		}
		return nil, fmt.Errorf("%w: boundary pinning needs 2 nodes that are trusted or stake at least %d and can hold a boundary stage; the pool has %d",
			ErrNoRing, p.PinMinStake, pins)
	}
	lo := max(2, p.MinStages)
	k := -1
	for kk := lo; kk <= min(p.MaxStages, n); kk++ {
		if got, ok := best(kk, 2, 0); ok && got >= L {
			k = kk
			break
		}
	}
	if k < 0 {
		if lo > n {
			return nil, fmt.Errorf("%w: min_stages is %d but only %d nodes were admitted", ErrNoRing, p.MinStages, n)
		}
		all, _ := best(n, 2, 0)
		if all < L {
			return nil, fmt.Errorf("%w: the %d admitted nodes hold at most %d of the model's %d layers; add nodes with room for %d more layers",
				ErrNoRing, n, all, L, L-all)
		}
		need := lo
		for ; need <= n; need++ {
			if got, ok := best(need, 2, 0); ok && got >= L {
				break
			}
		}
		return nil, fmt.Errorf("%w: the model needs %d stages on this pool but max_stages is %d", ErrNoRing, need, p.MaxStages)
	}
	var chosen []*cand
	have, havePins := 0, 0
	for i, x := range cands {
		if len(chosen) == k {
			break
		}
		r := k - len(chosen) - 1
		addPins := havePins
		if x.mayPin {
			addPins++
		}
		rest, ok := best(r, max(0, 2-addPins), i+1)
		if ok && have+x.sc+rest >= L {
			chosen = append(chosen, x)
			have += x.sc
			havePins = addPins
		}
	}
	if len(chosen) != k {
		return nil, fmt.Errorf("shard: internal error: selected %d of %d stages", len(chosen), k)
	}
	return chosen, nil
}

// allocate gives each ring position at least one layer, then the rest to
// the fastest nodes up to what they hold: the split that minimises Σ
// layers × per-layer time.
func allocate(ring []*cand, L int) ([]int, int64, error) {
	k := len(ring)
	capOf := func(i int) int {
		switch {
		case k == 1:
			return ring[i].solo
		case i == 0:
			return ring[i].first
		case i == k-1:
			return ring[i].last
		}
		return ring[i].mid
	}
	layers := make([]int, k)
	left := L
	for i := range ring {
		if capOf(i) < 1 {
			return nil, 0, fmt.Errorf("%w: node %s cannot hold a layer at ring position %d", ErrNoRing, ring[i].c.Node, i)
		}
		layers[i] = 1
		left--
	}
	idx := make([]int, k)
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmpInt(ring[a].us, ring[b].us) })
	for _, i := range idx {
		add := min(left, capOf(i)-1)
		layers[i] += add
		left -= add
	}
	if left > 0 {
		return nil, 0, fmt.Errorf("%w: the ring holds %d of %d layers", ErrNoRing, L-left, L)
	}
	var compute int64
	for i, c := range ring {
		compute += int64(layers[i]) * c.us
	}
	return layers, compute, nil
}

type backup struct {
	c    *cand
	role Role
}

// chooseBackups fills every stage's verifier and standby slots with nodes
// that can hold its range (and its boundary, if it has one) and reach its
// neighbours. It is a maximum bipartite matching (augmenting paths), slots
// in stage order, candidates tried fastest first, so one stage taking the
// only node another stage could use is undone when needed.
func chooseBackups(cands []*cand, ring []*cand, layers []int, p *Params, rtt *rttMatrix) ([][]backup, error) {
	k := len(ring)
	out := make([][]backup, k)
	per := p.Verifiers + p.Standbys
	if per == 0 {
		return out, nil
	}
	primary := make(map[*cand]bool, k)
	for _, c := range ring {
		primary[c] = true
	}
	var pool []*cand
	for _, c := range cands {
		if !primary[c] {
			pool = append(pool, c)
		}
	}
	type slot struct {
		stage int
		role  Role
	}
	var slots []slot
	adj := [][]int{}
	for s := range k {
		prev, next := p.Coordinator, p.Coordinator
		if s > 0 {
			prev = ring[s-1].c.Node
		}
		if s+1 < k {
			next = ring[s+1].c.Node
		}
		var fits []int
		for j, x := range pool {
			room := x.mid
			switch {
			case k == 1:
				room = x.solo
			case s == 0:
				room = x.first
			case s == k-1:
				room = x.last
			}
			boundary := s == 0 || s == k-1
			if room < layers[s] || (boundary && !x.mayPin) || (k == 1 && x.solo < layers[s]) {
				continue
			}
			if rtt.get(x.c.Node, prev) >= inf || rtt.get(x.c.Node, next) >= inf {
				continue
			}
			fits = append(fits, j)
		}
		for v := range per {
			role := RoleVerifier
			if v >= p.Verifiers {
				role = RoleStandby
			}
			slots = append(slots, slot{s, role})
			adj = append(adj, fits)
		}
	}
	owner := make([]int, len(pool)) // pool index → slot, -1 free
	for i := range owner {
		owner[i] = -1
	}
	var try func(sl int, seen []bool) bool
	try = func(sl int, seen []bool) bool {
		for _, j := range adj[sl] {
			if seen[j] {
				continue
			}
			seen[j] = true
			if owner[j] < 0 || try(owner[j], seen) {
				owner[j] = sl
				return true
			}
		}
		return false
	}
	for sl := range slots {
		if !try(sl, make([]bool, len(pool))) {
			s := slots[sl].stage
			return nil, fmt.Errorf("%w: stage %d (%d layers%s) needs %d verifiers and %d standbys; only %d other nodes can hold it and reach its neighbours, and stages compete for them",
				ErrNoRing, s, layers[s], boundaryNote(s, k), p.Verifiers, p.Standbys, len(adj[sl]))
		}
	}
	bySlot := make([]int, len(slots))
	for j, sl := range owner {
		if sl >= 0 {
			bySlot[sl] = j
		}
	}
	for sl, j := range bySlot {
		out[slots[sl].stage] = append(out[slots[sl].stage], backup{c: pool[j], role: slots[sl].role})
	}
	// Within a stage and role, list backups fastest first.
	for s := range out {
		slices.SortStableFunc(out[s], func(a, b backup) int {
			if a.role != b.role {
				return cmpInt(a.role.rank(), b.role.rank())
			}
			if a.c.us != b.c.us {
				return cmpInt(a.c.us, b.c.us)
			}
			return bytes.Compare(a.c.rank[:], b.c.rank[:])
		})
	}
	return out, nil
}

func boundaryNote(s, k int) string {
	if s == 0 || s == k-1 {
		return ", a boundary stage: trusted or staked nodes only"
	}
	return ""
}
