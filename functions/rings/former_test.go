package rings_test

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/rings"
	"github.com/c0mpute/c0mpute/functions/rings/ringtest"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/functions/store"
)

// A ring forms end to end: four members announce; after the debounce each
// is probed with the others' addresses; with every row in, the three the
// plan needs get an assignment whose signed inputs recompute to the plan
// (the members' shard.Accept does it), and once all three accept, stage
// 0's worker record serves the model, dispatch starts, and every member
// hears ring_serve. The fourth waits as a candidate.
func TestFormsAndServes(t *testing.T) {
	fx := newFixture(t, shape, defaultSpec())
	for i := range 4 {
		fx.join(i, smallVRAM, int64(100+10*i))
	}
	if st := fx.state(); st.Candidates != 4 || st.Serving || !st.Plan.IsZero() {
		t.Fatalf("after the announcements: %+v", st)
	}
	fx.clock.Advance(debounce - time.Millisecond)
	if got := fx.takeAll(); len(got) != 0 {
		t.Fatalf("probed before the debounce: %v", got)
	}
	fx.clock.Advance(time.Millisecond)
	probes := only[relaymsg.RingProbe](fx, fx.takeAll())
	if len(probes) != 4 {
		t.Fatalf("%d probes for 4 candidates", len(probes))
	}
	for conn, p := range probes {
		var want []relaymsg.RingPeer
		for _, m := range fx.members {
			if m.Conn != conn {
				want = append(want, relaymsg.RingPeer{Node: m.Node, Addr: m.Addr})
			}
		}
		if p.Model != ringModel || !samePeers(p.Peers, want) {
			t.Errorf("probe to %s: %+v, want the other three %+v", conn, p, want)
		}
		fx.ok(conn, fx.members[conn].Answer(p, fx.rtt, fx.clock.Now()))
	}
	assigns := only[relaymsg.RingAssign](fx, fx.takeAll())
	if len(assigns) != 3 {
		t.Fatalf("%d members assigned, want the 3 stages the model needs", len(assigns))
	}
	gw := shard.KeyOf(fx.gw)
	var hash shard.Hash
	for conn, a := range assigns {
		hash = a.Hash
		res, err := shard.NewPlan(a.Inputs)
		if err != nil || res.Hash != a.Hash || res.Plan.Hash() != a.Plan.Hash() {
			t.Fatalf("assignment to %s does not recompute: %v", conn, err)
		}
		p := a.Inputs.Params
		want := shard.Params{Coordinator: gw, Model: fx.hash, Admission: "open", VRAMFloorBytes: 1, ContextTokens: 256,
			MinStages: 1, MaxStages: 8, Pinning: shard.PinNone, Seed: sha256.Sum256([]byte(ringModel)), Time: fx.clock.Now().UnixMilli(), Sig: p.Sig}
		if p != want {
			t.Errorf("params %+v\nwant %+v", p, want)
		}
		var own *shard.RTTRow
		for i := range a.Inputs.RTT {
			if a.Inputs.RTT[i].From == gw {
				own = &a.Inputs.RTT[i]
			}
		}
		if own == nil || len(own.Peers) != 4 || slices.ContainsFunc(own.Peers, func(p shard.RTTPeer) bool { return p.Micros != 1 }) {
			t.Errorf("the gateway's row %+v, want every candidate at 1 µs", own)
		}
		if len(a.Inputs.Capabilities) != 4 || len(a.Inputs.RTT) != 5 {
			t.Errorf("inputs with %d capabilities and %d rows", len(a.Inputs.Capabilities), len(a.Inputs.RTT))
		}
		if a.Manifest.Hash() != fx.hash || a.BlobURL != fx.blobURL || a.Plan.Stages != 3 || a.Model != ringModel {
			t.Errorf("assignment %s: manifest %s, blob url %s, %d stages", conn, a.Manifest.Hash(), a.BlobURL, a.Plan.Stages)
		}
		for _, m := range a.Plan.Members {
			if !slices.Contains(a.Peers, relaymsg.RingPeer{Node: m.Node, Addr: fx.byNode(m.Node).Addr}) {
				t.Errorf("assignment peers %+v miss member %s", a.Peers, m.Node)
			}
		}
	}
	if st := fx.state(); st.Plan != hash || st.Stages != 3 || st.Serving {
		t.Fatalf("assigned: %+v", st)
	}
	if _, ok := fx.f.JobRing(ringModel, "ticket"); ok {
		t.Fatal("JobRing before the ring serves")
	}
	conns := slices.Sorted(maps.Keys(assigns))
	for _, conn := range conns[:2] {
		r, err := fx.members[conn].Accept(assigns[conn], fx.rtt, fx.clock.Now())
		must(t, err)
		fx.ok(conn, r)
	}
	if got := fx.takeAll(); len(got) != 0 || fx.state().Serving {
		t.Fatalf("serving with a member not ready: %v", got)
	}
	r, err := fx.members[conns[2]].Accept(assigns[conns[2]], fx.rtt, fx.clock.Now())
	must(t, err)
	fx.ok(conns[2], r)
	serves := only[relaymsg.RingServe](fx, fx.takeAll())
	if !slices.Equal(slices.Sorted(maps.Keys(serves)), conns) {
		t.Fatalf("ring_serve to %v, want %v", slices.Sorted(maps.Keys(serves)), conns)
	}
	p0, _ := assigns[conns[0]].Plan.Primary(0)
	driver := fx.byNode(p0.Node).Conn
	w, err := fx.st.GetWorker(t.Context(), driver)
	must(t, err)
	if !slices.Equal(w.Models, []string{wholeModel, ringModel}) || w.Caps[ringModel] != (store.Caps{Context: 256}) || !w.Caps[wholeModel].Tools {
		t.Errorf("driver record: models %v, caps %+v", w.Models, w.Caps)
	}
	for _, conn := range conns {
		if conn != driver && fx.serves(conn) {
			t.Errorf("%s, not stage 0, serves the ring model", conn)
		}
	}
	if len(fx.disp.registered) != 1 || fx.disp.registered[0].Conn != driver || !slices.Equal(fx.disp.dispatched, []string{ringModel}) {
		t.Errorf("dispatch: registered %+v, dispatched %v", fx.disp.registered, fx.disp.dispatched)
	}
	if st := fx.state(); !reflect.DeepEqual(st, rings.State{Model: ringModel, Candidates: 4, Plan: hash, Stages: 3, Serving: true,
		Primaries: primaries(assigns[conns[0]].Plan), Layers: layerCounts(assigns[conns[0]].Plan)}) {
		t.Errorf("serving: %+v", st)
	}
	job, ok := fx.f.JobRing("big-alias", "ticket-1")
	if !ok || *job != (relaymsg.RingJob{Plan: hash, Nonce: relaymsg.RingNonce("ticket-1")}) {
		t.Errorf("JobRing = %+v, %v", job, ok)
	}
	// A repeated ready changes nothing.
	fx.ok(conns[2], r)
	if got := fx.takeAll(); len(got) != 0 {
		t.Errorf("a repeated ready posted %v", got)
	}
}

func samePeers(a, b []relaymsg.RingPeer) bool {
	key := func(p relaymsg.RingPeer) string { return p.Node.String() + "@" + p.Addr }
	x, y := make([]string, len(a)), make([]string, len(b))
	for i := range a {
		x[i] = key(a[i])
	}
	for i := range b {
		y[i] = key(b[i])
	}
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// A member that holds the whole model serves alone: no peer to probe, so
// the plan is assigned straight after the debounce.
func TestLoneMember(t *testing.T) {
	fx := newFixture(t, shape, defaultSpec())
	m := fx.join(0, 9<<20, 100)
	fx.clock.Advance(debounce)
	a := only[relaymsg.RingAssign](fx, fx.takeAll())[m.Conn]
	if a == nil || a.Plan.Stages != 1 || len(a.Inputs.RTT) != 1 {
		t.Fatalf("assignment %+v", a)
	}
	fx.accept(map[string]*relaymsg.RingAssign{m.Conn: a})
	only[relaymsg.RingServe](fx, fx.takeAll())
	if !fx.serves(m.Conn) || fx.state().Stages != 1 {
		t.Fatalf("lone member: serves %v, %+v", fx.serves(m.Conn), fx.state())
	}
}

// A plan member leaving before the ring serves voids the plan: the other
// members hear ring_disband, and the ring re-forms from the three still
// connected.
func TestLeaveMidFormation(t *testing.T) {
	fx := newFixture(t, shape, defaultSpec())
	for i := range 4 {
		fx.join(i, smallVRAM, int64(100+10*i))
	}
	assigns := fx.probe()
	var a *relaymsg.RingAssign
	for _, x := range assigns {
		a = x
	}
	p1, _ := a.Plan.Primary(1)
	leaver := fx.byNode(p1.Node)
	fx.leave(leaver.Conn)
	disbands := only[relaymsg.RingDisband](fx, fx.takeAll())
	if len(disbands) != 2 || disbands[leaver.Conn] != nil {
		t.Fatalf("disband to %v, want the two other plan members", slices.Sorted(maps.Keys(disbands)))
	}
	for conn, d := range disbands {
		if assigns[conn] == nil || d.Hash != a.Hash || !strings.Contains(d.Reason, "left") {
			t.Errorf("disband to %s: %+v", conn, d)
		}
	}
	if st := fx.state(); st.Candidates != 3 || !st.Plan.IsZero() || st.Serving {
		t.Fatalf("after the leave: %+v", st)
	}
	r := fx.form()
	if r.hash == a.Hash || len(r.stages) != 3 || slices.Contains(r.stages, leaver) {
		t.Fatalf("re-formed ring %s with %v", r.hash, r.stages)
	}
	if !fx.serves(r.stages[0].Conn) {
		t.Error("the new stage 0 does not serve the model")
	}
}

// leave is the relay's disconnect: the worker record goes, then Left.
func (fx *fixture) leave(conn string) {
	fx.t.Helper()
	if _, err := fx.st.DeleteWorker(fx.t.Context(), conn); err != nil {
		fx.t.Fatal(err)
	}
	fx.f.Left(fx.t.Context(), conn)
	delete(fx.members, conn)
}

// A member leaving a serving ring voids it: the rest hear ring_disband,
// stage 0's record stops serving the model, and a new ring forms from the
// candidates left; when stage 0 leaves that one and too few remain, the
// ring model waits for candidates.
func TestLeaveWhileServing(t *testing.T) {
	fx := newFixture(t, shape, defaultSpec())
	for i := range 4 {
		fx.join(i, smallVRAM, int64(100+10*i))
	}
	first := fx.form()
	leaver := first.stages[1]
	fx.leave(leaver.Conn)
	disbands := only[relaymsg.RingDisband](fx, fx.takeAll())
	if len(disbands) != 2 || disbands[first.stages[0].Conn] == nil || disbands[first.stages[2].Conn] == nil {
		t.Fatalf("disband to %v", slices.Sorted(maps.Keys(disbands)))
	}
	if fx.serves(first.stages[0].Conn) {
		t.Fatal("stage 0 still serves the ring model after the ring was voided")
	}
	w, _ := fx.st.GetWorker(t.Context(), first.stages[0].Conn)
	if !slices.Equal(w.Models, []string{wholeModel}) || w.Caps[ringModel] != (store.Caps{}) {
		t.Errorf("stage 0's record after the void: %v %+v", w.Models, w.Caps)
	}
	if _, ok := fx.f.JobRing(ringModel, "t"); ok || fx.state().Serving {
		t.Fatal("a voided ring still takes jobs")
	}
	second := fx.form()
	if len(second.stages) != 3 || slices.Contains(second.stages, leaver) || !fx.serves(second.stages[0].Conn) {
		t.Fatalf("second ring %v", second.stages)
	}
	fx.leave(second.stages[0].Conn)
	disbands = only[relaymsg.RingDisband](fx, fx.takeAll())
	if len(disbands) != 2 {
		t.Fatalf("disband to %v", slices.Sorted(maps.Keys(disbands)))
	}
	// Two members of 3.2 MiB cannot hold the model: probed, no ring.
	fx.clock.Advance(debounce)
	probes := only[relaymsg.RingProbe](fx, fx.takeAll())
	for conn, p := range probes {
		fx.ok(conn, fx.members[conn].Answer(p, fx.rtt, fx.clock.Now()))
	}
	if got := fx.takeAll(); len(got) != 0 {
		t.Fatalf("assigned a ring that cannot hold the model: %v", got)
	}
	if st := fx.state(); st.Candidates != 2 || !st.Plan.IsZero() {
		t.Fatalf("%+v", st)
	}
}

// A refusal voids the plan; the refuser sits out the next attempt.
func TestRefusal(t *testing.T) {
	fx := newFixture(t, shape, defaultSpec())
	for i := range 4 {
		fx.join(i, smallVRAM, int64(100+10*i))
	}
	assigns := fx.probe()
	refuser := slices.Sorted(maps.Keys(assigns))[0]
	fx.ok(refuser, &relaymsg.RingRefuse{Model: ringModel, Hash: assigns[refuser].Hash, Code: "rtt_mismatch", Message: "neighbour too far"})
	disbands := only[relaymsg.RingDisband](fx, fx.takeAll())
	if len(disbands) != 2 || disbands[refuser] != nil {
		t.Fatalf("disband to %v", slices.Sorted(maps.Keys(disbands)))
	}
	r := fx.form()
	if slices.ContainsFunc(r.stages, func(m *ringtest.Member) bool { return m.Conn == refuser }) {
		t.Fatal("the refuser is in the next ring")
	}
}

// An acceptance signed by another key voids the plan (the members hear
// it, the sender sits out the next attempt).
func TestInvalidAcceptance(t *testing.T) {
	fx := newFixture(t, shape, defaultSpec())
	for i := range 4 {
		fx.join(i, smallVRAM, int64(100+10*i))
	}
	assigns := fx.probe()
	conns := slices.Sorted(maps.Keys(assigns))
	other, err := fx.members[conns[1]].Accept(assigns[conns[1]], fx.rtt, fx.clock.Now())
	must(t, err)
	fx.refused(conns[0], other, rings.CodeBadRecord, "signed by")
	if disbands := only[relaymsg.RingDisband](fx, fx.takeAll()); len(disbands) != 3 {
		t.Fatalf("disband to %v", slices.Sorted(maps.Keys(disbands)))
	}
	r := fx.form()
	if slices.ContainsFunc(r.stages, func(m *ringtest.Member) bool { return m.Conn == conns[0] }) {
		t.Fatal("the member that sent another's acceptance is in the next ring")
	}
}

// A candidate that sends no RTT row in time voids the attempt and sits
// out the next one, which forms without it.
func TestRTTDeadline(t *testing.T) {
	fx := newFixture(t, shape, catalog.RingSpec{MinStages: 2, MaxStages: 4, ContextTokens: 256})
	for i := range 3 {
		fx.join(i, bigVRAM, int64(100+10*i))
	}
	fx.clock.Advance(debounce)
	probes := only[relaymsg.RingProbe](fx, fx.takeAll())
	silent := "conn-0"
	for conn, p := range probes {
		if conn != silent {
			fx.ok(conn, fx.members[conn].Answer(p, fx.rtt, fx.clock.Now()))
		}
	}
	fx.clock.Advance(rttWait - time.Millisecond)
	if got := fx.takeAll(); len(got) != 0 {
		t.Fatalf("posted %v before the deadline", got)
	}
	fx.clock.Advance(time.Millisecond)
	late := probes[silent]
	r := fx.form()
	if slices.ContainsFunc(r.stages, func(m *ringtest.Member) bool { return m.Conn == silent }) || len(r.stages) != 2 {
		t.Fatalf("ring %v", r.stages)
	}
	// Its late row answers a probe that is gone.
	fx.refused(silent, fx.members[silent].Answer(late, fx.rtt, fx.clock.Now()), rings.CodeStale, "no probe")
}

// A plan member that never becomes ready voids the plan at ReadyTimeout;
// the ring forms without it.
func TestReadyDeadline(t *testing.T) {
	fx := newFixture(t, shape, catalog.RingSpec{MinStages: 2, MaxStages: 4, ContextTokens: 256})
	for i := range 3 {
		fx.join(i, bigVRAM, int64(100+10*i))
	}
	assigns := fx.probe()
	if len(assigns) != 2 {
		t.Fatalf("%d assigned", len(assigns))
	}
	conns := slices.Sorted(maps.Keys(assigns))
	r, err := fx.members[conns[0]].Accept(assigns[conns[0]], fx.rtt, fx.clock.Now())
	must(t, err)
	fx.ok(conns[0], r)
	fx.clock.Advance(readyWait)
	if d := only[relaymsg.RingDisband](fx, fx.takeAll()); len(d) != 2 || !strings.Contains(d[conns[0]].Reason, "not ready") {
		t.Fatalf("disband %+v", d)
	}
	ring := fx.form()
	if slices.ContainsFunc(ring.stages, func(m *ringtest.Member) bool { return m.Conn == conns[1] }) {
		t.Fatal("the member that was never ready is in the next ring")
	}
}

// When leaving out a late member leaves too few candidates, the attempt
// is retried with everyone after Retry.
func TestRetryWithEveryone(t *testing.T) {
	fx := newFixture(t, shape, catalog.RingSpec{MinStages: 2, MaxStages: 4, ContextTokens: 256})
	for i := range 2 {
		fx.join(i, bigVRAM, int64(100+10*i))
	}
	fx.clock.Advance(debounce)
	probes := only[relaymsg.RingProbe](fx, fx.takeAll())
	fx.ok("conn-1", fx.members["conn-1"].Answer(probes["conn-1"], fx.rtt, fx.clock.Now()))
	fx.clock.Advance(rttWait + debounce)
	if got := fx.takeAll(); len(got) != 0 {
		t.Fatalf("probed 1 candidate of the 2 needed: %v", got)
	}
	fx.clock.Advance(retry - debounce) // the retry is due `retry` after the attempt
	if got := fx.take("conn-0"); len(got) != 0 {
		t.Fatalf("early: %v", got)
	}
	fx.clock.Advance(debounce)
	probes = only[relaymsg.RingProbe](fx, fx.takeAll())
	if len(probes) != 2 {
		t.Fatalf("retry probed %v", slices.Sorted(maps.Keys(probes)))
	}
}

// Hostile or mistaken members: each message is refused with a reply that
// says what is wrong, and nothing changes — the candidates, the pending
// attempt's timing, the probe and the plan stay as they were.
func TestHostileMessages(t *testing.T) {
	fx := newFixture(t, shape, defaultSpec())
	for i := range 4 {
		fx.join(i, smallVRAM, int64(100+10*i))
	}
	hash := fx.hash
	m0, m1 := fx.members["conn-0"], fx.members["conn-1"]
	outsider := fx.connect(9) // registered, never announced
	bystander := ringtest.NewMember(8)
	must(t, fx.st.PutWorker(t.Context(), store.Worker{Conn: bystander.Conn, AccountID: "x", Pubkey: bystander.Pubkey(), ConnectedAt: t0}))
	w, err := fx.st.RegisterWorker(t.Context(), bystander.Conn, []string{wholeModel}, nil)
	must(t, err)
	if offers := fx.f.Register(t.Context(), w, []string{wholeModel}); len(offers) != 0 {
		t.Fatalf("offers for a whole model: %+v", offers)
	}
	fx.clock.Advance(time.Second)
	before := fx.state()
	tampered := m0.Announce(ringModel, hash, smallVRAM, 100, t0)
	tampered.Capability.VRAMBytes *= 4
	bad := m0.Announce(ringModel, hash, smallVRAM, 100, t0)
	bad.Advertise = "10.0.0.1"
	unknown := m1.Announce(ringModel, hash, smallVRAM, 100, t0)
	unknown.Model = "no-such-model"
	for _, tc := range []struct {
		name, conn string
		msg        any
		code, want string
	}{
		{"capability signed by another key", m0.Conn, m1.Announce(ringModel, hash, smallVRAM, 100, t0), rings.CodeBadRecord, "signed by " + m1.Node.String()},
		{"capability for another model hash", m0.Conn, m0.Announce(ringModel, sha256.Sum256([]byte("other")), smallVRAM, 100, t0), rings.CodeBadRecord, "measures model"},
		{"capability altered after signing", m0.Conn, tampered, rings.CodeBadRecord, "signature"},
		// relaymsg.Decode refuses it already; the Former checks on its own.
		{"advertise without a port", m0.Conn, direct{bad}, rings.CodeBadRecord, "not host:port"},
		{"connection that did not register the model", bystander.Conn, bystander.Announce(ringModel, hash, smallVRAM, 100, t0), rings.CodeNotRegistered, "did not register"},
		{"unknown connection", "conn-unknown", m0.Announce(ringModel, hash, smallVRAM, 100, t0), rings.CodeNotRegistered, "did not register"},
		{"a whole model", m0.Conn, m0.Announce(wholeModel, hash, smallVRAM, 100, t0), rings.CodeNotRegistered, "not a ring model"},
		{"an unknown model", m1.Conn, unknown, rings.CodeNotRegistered, "not a ring model"},
		{"an rtt row with no probe", m0.Conn, m0.Answer(&relaymsg.RingProbe{Model: ringModel, Peers: []relaymsg.RingPeer{{Node: m1.Node, Addr: m1.Addr}}}, fx.rtt, t0), rings.CodeStale, "no probe"},
		{"a ready with no plan", m0.Conn, &relaymsg.RingReady{Model: ringModel, Acceptance: shard.Acceptance{Plan: hash}}, rings.CodeStale, "current plan is none"},
		{"a refusal with no plan", m0.Conn, &relaymsg.RingRefuse{Model: ringModel, Hash: hash, Code: "x"}, rings.CodeStale, "current plan is none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx.t = t
			fx.refused(tc.conn, tc.msg, tc.code, tc.want)
			if st := fx.state(); !reflect.DeepEqual(st, before) {
				t.Errorf("state changed: %+v, was %+v", st, before)
			}
		})
	}
	fx.t = t
	if got := fx.takeAll(); len(got) != 0 {
		t.Fatalf("refused messages posted %v", got)
	}
	// The debounce still fires when the last good announcement set it: no
	// refused announcement restarted it.
	fx.clock.Advance(debounce - time.Second)
	probes := only[relaymsg.RingProbe](fx, fx.takeAll())
	if len(probes) != 4 {
		t.Fatalf("%d probes", len(probes))
	}
	for _, tc := range []struct {
		name, conn string
		msg        any
		code, want string
	}{
		{"an rtt row of another identity", m0.Conn, m1.Answer(probes[m1.Conn], fx.rtt, t0), rings.CodeBadRecord, "measured by " + m1.Node.String()},
		{"an rtt row measuring a node not probed", m0.Conn, m0.Answer(&relaymsg.RingProbe{Model: ringModel, Peers: []relaymsg.RingPeer{{Node: outsider.Node, Addr: outsider.Addr}}}, fx.rtt, t0), rings.CodeBadRecord, "did not list"},
		{"an rtt row from a connection not probed", outsider.Conn, outsider.Answer(probes[m0.Conn], fx.rtt, t0), rings.CodeStale, "no probe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx.t = t
			fx.refused(tc.conn, tc.msg, tc.code, tc.want)
		})
	}
	fx.t = t
	for conn, p := range probes {
		fx.ok(conn, fx.members[conn].Answer(p, fx.rtt, fx.clock.Now()))
	}
	assigns := only[relaymsg.RingAssign](fx, fx.takeAll())
	conns := slices.Sorted(maps.Keys(assigns))
	spare := ""
	for conn := range fx.members {
		if assigns[conn] == nil && conn != outsider.Conn {
			spare = conn
		}
	}
	// An acceptance of another plan: the same members, other parameters.
	a := assigns[conns[0]]
	otherIn := a.Inputs
	otherIn.Params.Time++
	otherIn.Params.Sign(fx.gw)
	res, err := shard.NewPlan(otherIn)
	must(t, err)
	otherA := *a
	otherA.Inputs, otherA.Hash, otherA.Plan = otherIn, res.Hash, res.Plan
	otherReady, err := fx.members[conns[0]].Accept(&otherA, fx.rtt, fx.clock.Now())
	must(t, err)
	before = fx.state()
	for _, tc := range []struct {
		name, conn string
		msg        any
		code, want string
	}{
		{"an acceptance of another plan", conns[0], otherReady, rings.CodeStale, "current plan is " + a.Hash.String()},
		{"a ready from a candidate outside the plan", spare, &relaymsg.RingReady{Model: ringModel, Acceptance: shard.Acceptance{Plan: a.Hash}}, rings.CodeStale, "holds no place"},
		{"a refusal from a candidate outside the plan", spare, &relaymsg.RingRefuse{Model: ringModel, Hash: a.Hash, Code: "x"}, rings.CodeStale, "holds no place"},
		{"a refusal of another plan", conns[0], &relaymsg.RingRefuse{Model: ringModel, Hash: res.Hash, Code: "x"}, rings.CodeStale, "current plan is"},
		{"a ready from a connection that did not register", bystander.Conn, otherReady, rings.CodeNotRegistered, "did not register"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx.t = t
			fx.refused(tc.conn, tc.msg, tc.code, tc.want)
			if st := fx.state(); !reflect.DeepEqual(st, before) {
				t.Errorf("state changed: %+v, was %+v", st, before)
			}
		})
	}
	fx.t = t
	if got := fx.takeAll(); len(got) != 0 {
		t.Fatalf("refused messages posted %v", got)
	}
	// The plan is intact: the members' acceptances make it serve.
	fx.accept(assigns)
	if serves := only[relaymsg.RingServe](fx, fx.takeAll()); len(serves) != 3 || !fx.state().Serving {
		t.Fatalf("after the hostile messages the ring did not serve: %v", serves)
	}
}

// A model keeps at most MaxCandidates candidates (the next is refused and
// changes nothing), and an attempt takes the MaxAttempt fastest. The
// largest assignment — MaxAttempt participants with a full RTT matrix, as
// many stages, and a manifest at MaxManifestBytes — fits one relay
// message.
func TestLargestAssignmentFits(t *testing.T) {
	layers := 1
	for {
		m := shard.Manifest{Name: ringModel, Layers: make([]shard.Blob, layers+1)}
		b, err := relaymsg.Encode(&relaymsg.RingAssign{Manifest: m})
		must(t, err)
		empty, _ := relaymsg.Encode(&relaymsg.RingAssign{})
		if len(b)-len(empty) > rings.MaxManifestBytes-512 {
			break
		}
		layers++
	}
	sh := ringtest.Shape{Layers: layers, BlobBytes: 16, LayerBytes: 1 << 20, KVBytesPerToken: 16, EmbedBytes: 1 << 20, HeadBytes: 1 << 20, ActivationBytes: 4096}
	fx := newFixture(t, sh, catalog.RingSpec{MinStages: rings.MaxAttempt, MaxStages: rings.MaxAttempt, ContextTokens: 256})
	for i := range rings.MaxCandidates {
		fx.join(i, 12<<20, int64(1000-i)) // the later, the faster
	}
	extra := fx.connect(rings.MaxCandidates)
	fx.refused(extra.Conn, extra.Announce(ringModel, fx.hash, 12<<20, 1, t0), rings.CodeFull, fmt.Sprintf("%d candidates", rings.MaxCandidates))
	if st := fx.state(); st.Candidates != rings.MaxCandidates {
		t.Fatalf("%d candidates", st.Candidates)
	}
	fx.clock.Advance(debounce)
	probes := only[relaymsg.RingProbe](fx, fx.takeAll())
	if len(probes) != rings.MaxAttempt {
		t.Fatalf("%d probed", len(probes))
	}
	for i := rings.MaxCandidates - rings.MaxAttempt; i < rings.MaxCandidates; i++ {
		if probes[fmt.Sprint("conn-", i)] == nil {
			t.Fatalf("conn-%d, among the %d fastest, was not probed", i, rings.MaxAttempt)
		}
	}
	for conn, p := range probes {
		fx.ok(conn, fx.members[conn].Answer(p, fx.rtt, fx.clock.Now()))
	}
	fx.posts.mu.Lock()
	largest := 0
	for _, bs := range fx.posts.by {
		for _, b := range bs {
			largest = max(largest, len(b))
		}
	}
	fx.posts.mu.Unlock()
	assigns := only[relaymsg.RingAssign](fx, fx.takeAll())
	if len(assigns) != rings.MaxAttempt {
		t.Fatalf("%d assigned", len(assigns))
	}
	for _, a := range assigns {
		if a.Plan.Stages != rings.MaxAttempt || len(a.Manifest.Layers) != layers {
			t.Fatalf("%d stages, %d layers", a.Plan.Stages, len(a.Manifest.Layers))
		}
		break
	}
	t.Logf("%d layers: the assignment is %d bytes of the relay's %d", layers, largest, relaymsg.MaxMessage)
}

// primaries are a plan's stage primaries in stage order.
// layerCounts is each stage's layer count, in stage order.
func layerCounts(p shard.Plan) []int {
	var out []int
	for s := range p.Stages {
		m, _ := p.Primary(s)
		out = append(out, m.LayerEnd-m.LayerStart)
	}
	return out
}

func primaries(p shard.Plan) []shard.PublicKey {
	var out []shard.PublicKey
	for s := range p.Stages {
		m, _ := p.Primary(s)
		out = append(out, m.Node)
	}
	return out
}
