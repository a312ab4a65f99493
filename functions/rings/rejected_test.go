package rings_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/rings"
	"github.com/c0mpute/c0mpute/functions/rings/ringtest"
	"github.com/c0mpute/c0mpute/functions/shard"
)

// Rejected acts on a rejected settlement: the plan is void (every member
// hears ring_disband, stage 0 stops serving the model), the culprit's
// identity sits out formations for Exclusion, and once that is over it
// takes part again.
func TestRejectedVoidsAndExcludes(t *testing.T) {
	fx, r := serving(t, 4)
	started := fx.clock.Now()
	d := done(r, "job-1", "ticket-1", started, 10)
	rc := d.Receipts[1]
	rc.Time = started.Add(-time.Hour).UnixMilli() // signed for this attempt, and false: stage 1's own word
	d.Receipts[1] = r.stages[1].Receipt(rc)
	got, err := fx.f.Settle(t.Context(), rings.SettleJob{ID: "job-1", Ticket: "ticket-1", Model: ringModel, Plan: r.hash, Started: started,
		Earning: 100, Done: d, Worker: r.stages[0].Conn})
	if !rings.IsRejected(err) || got.Culprit == nil || got.Culprit.Stage != 1 || !got.Culprit.Strike {
		t.Fatalf("settle: %v, culprit %+v", err, got.Culprit)
	}
	culprit := r.stages[1]
	fx.f.Rejected(ringModel, got.Plan, got.Culprit.Stage)
	disbands := only[relaymsg.RingDisband](fx, fx.takeAll())
	if len(disbands) != 3 || disbands[culprit.Conn] == nil || !strings.Contains(disbands[culprit.Conn].Reason, "rejected at stage 1") {
		t.Fatalf("disband %+v, want the three members", disbands)
	}
	if fx.serves(r.stages[0].Conn) || fx.state().Serving {
		t.Fatal("the ring serves on after a rejected settlement")
	}
	if _, ok := fx.f.JobRing(ringModel, "t"); ok {
		t.Fatal("JobRing after a rejected settlement")
	}
	// The next rings form without it, until Exclusion is over.
	fx.clock.Advance(debounce)
	probes := only[relaymsg.RingProbe](fx, fx.takeAll())
	if len(probes) != 3 || probes[culprit.Conn] != nil {
		t.Fatalf("the next attempt probed %v, want the three others", slices.Sorted(maps.Keys(probes)))
	}
	for conn, p := range probes {
		fx.ok(conn, fx.members[conn].Answer(p, fx.rtt, fx.clock.Now()))
	}
	assigns := only[relaymsg.RingAssign](fx, fx.takeAll())
	fx.accept(assigns)
	only[relaymsg.RingServe](fx, fx.takeAll())
	var second ring
	for _, a := range assigns {
		second.plan = a.Plan
	}
	for s := range second.plan.Stages {
		p, _ := second.plan.Primary(s)
		second.stages = append(second.stages, fx.byNode(p.Node))
	}
	fx.clock.Advance(rings.DefaultExclusion - debounce)
	fx.leave(second.stages[2].Conn)
	only[relaymsg.RingDisband](fx, fx.takeAll())
	fx.clock.Advance(debounce - time.Millisecond)
	fx.clock.Advance(time.Millisecond)
	probes = only[relaymsg.RingProbe](fx, fx.takeAll())
	if probes[culprit.Conn] == nil {
		t.Fatalf("after the exclusion, probed %v without the culprit %s", slices.Sorted(maps.Keys(probes)), culprit.Conn)
	}
	// A rejection naming a plan the gateway does not know changes
	// nothing.
	fx.f.Rejected(ringModel, shard.Hash{1}, 0)
	if got := fx.takeAll(); len(got) != 0 {
		t.Fatalf("a rejection of an unknown plan posted %v", got)
	}
}

// Settle takes the plan the job was dispatched with: a Done naming
// another plan the model served — with receipts valid for that one — is
// stage 0's fault, and pays nobody.
func TestSettlePinsThePlan(t *testing.T) {
	fx, first := serving(t, 4)
	fx.ok(first.stages[1].Conn, &relaymsg.RingRefuse{Model: ringModel, Hash: first.hash, Code: "leaving"})
	fx.takeAll()
	second := fx.form()
	started := fx.clock.Now()
	job := rings.SettleJob{ID: "job-1", Ticket: "ticket-1", Model: ringModel, Plan: first.hash, Started: started, Earning: 100,
		Done: done(second, "job-1", "ticket-1", started, 10), Worker: first.stages[0].Conn}
	got, err := fx.f.Settle(t.Context(), job)
	if !rings.IsRejected(err) || got.Verdict.Reason != shard.ReasonPlanMismatch || got.Culprit == nil ||
		got.Culprit.Stage != 0 || got.Culprit.Node != first.stages[0].Node || !got.Culprit.Strike {
		t.Fatalf("a done of plan %s for a job of plan %s: %v, %+v", second.hash, first.hash, err, got)
	}
	// The plan the Done names settles when the job names it.
	job.Plan, job.Worker = second.hash, second.stages[0].Conn
	if _, err := fx.f.Settle(t.Context(), job); err != nil {
		t.Fatal(err)
	}
}

// Settle does not wait for formation: while a void's post to a slow
// member holds the model's formation, a job settles.
func TestSettleDoesNotWaitForFormation(t *testing.T) {
	fx, r := serving(t, 4)
	started := fx.clock.Now()
	d := done(r, "job-1", "ticket-1", started, 10)
	fx.posts.mu.Lock()
	fx.posts.hold, fx.posts.held, fx.posts.release = r.stages[2].Conn, make(chan struct{}), make(chan struct{})
	fx.posts.mu.Unlock()
	_, err := fx.st.DeleteWorker(t.Context(), r.stages[1].Conn)
	must(t, err)
	left := make(chan struct{})
	go func() {
		defer close(left)
		fx.f.Left(t.Context(), r.stages[1].Conn) // voids the ring: posts ring_disband under the formation lock
	}()
	<-fx.posts.held
	settled := make(chan error, 1)
	go func() {
		_, err := fx.f.Settle(t.Context(), rings.SettleJob{ID: "job-1", Ticket: "ticket-1", Model: ringModel, Plan: r.hash, Started: started,
			Earning: 100, Done: d, Worker: r.stages[0].Conn})
		settled <- err
	}()
	select {
	case err := <-settled:
		must(t, err)
	case <-time.After(30 * time.Second):
		close(fx.posts.release)
		t.Fatal("Settle waited 30 s for a formation post")
	}
	close(fx.posts.release)
	<-left
}

// By default a plan member has ReadyTimeout = 10 min to pull, load and
// accept: a member still pulling after 2 min keeps its place.
func TestDefaultReadyTimeout(t *testing.T) {
	fx := newFixture(t, shape, catalog.RingSpec{MinStages: 2, MaxStages: 4, ContextTokens: 256}, func(c *rings.Config) { c.ReadyTimeout = 0 })
	for i := range 3 {
		fx.join(i, bigVRAM, int64(100+10*i))
	}
	if assigns := fx.probe(); len(assigns) != 2 {
		t.Fatalf("%d assigned", len(assigns))
	}
	fx.clock.Advance(10*time.Minute - time.Millisecond)
	if got := fx.takeAll(); len(got) != 0 || fx.state().Plan.IsZero() {
		t.Fatalf("voided before 10 min: %v", got)
	}
	fx.clock.Advance(time.Millisecond)
	if d := only[relaymsg.RingDisband](fx, fx.takeAll()); len(d) != 2 {
		t.Fatalf("disband to %v at 10 min", slices.Sorted(maps.Keys(d)))
	}
}

// A standby that leaves a serving ring does not void it: only primaries
// carry its jobs. The primary leaving does.
func TestStandbyLeavesServingRing(t *testing.T) {
	fx := newFixture(t, shape, catalog.RingSpec{MinStages: 1, MaxStages: 1, Standbys: 1, ContextTokens: 256})
	for i := range 2 {
		fx.join(i, 9<<20, int64(100+10*i))
	}
	r := fx.form()
	var standby *ringtest.Member
	for _, m := range r.plan.Members {
		if m.Role == shard.RoleStandby {
			standby = fx.byNode(m.Node)
		}
	}
	if standby == nil || len(r.plan.Members) != 2 {
		t.Fatalf("plan members %+v, want a primary and a standby", r.plan.Members)
	}
	fx.leave(standby.Conn)
	if got := fx.takeAll(); len(got) != 0 {
		t.Fatalf("a standby's leaving posted %v", got)
	}
	if st := fx.state(); !st.Serving || st.Plan != r.hash || !fx.serves(r.stages[0].Conn) {
		t.Fatalf("the ring stopped serving when its standby left: %+v", st)
	}
	fx.leave(r.stages[0].Conn)
	if st := fx.state(); st.Serving || !st.Plan.IsZero() {
		t.Fatalf("the ring serves on without its primary: %+v", st)
	}
}
