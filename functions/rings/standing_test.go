package rings_test

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/rings"
	"github.com/c0mpute/c0mpute/functions/rings/ringtest"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/functions/store"
)

// quarantine strikes m's identity into quarantine, as a rejected job
// does; conn is its live connection ("" when it is gone), whose record
// takes the standing at once.
func (fx *fixture) quarantine(m *ringtest.Member, conn string) {
	fx.t.Helper()
	rep, err := fx.st.Judge(fx.t.Context(), store.Verdict{JobID: "judged-" + m.Conn, Conn: conn, Pubkey: m.Pubkey(), AccountID: m.Account,
		Kind: store.VerdictRejected, Strikes: store.QuarantineStrikes, Reason: "test", At: t0})
	must(fx.t, err)
	if rep.Standing != store.StandingQuarantined {
		fx.t.Fatalf("judged: %+v", rep)
	}
}

// A quarantined connection's announcement is refused, and changes
// nothing.
func TestAnnounceNotInGoodStanding(t *testing.T) {
	fx := newFixture(t, shape, defaultSpec())
	fx.join(0, smallVRAM, 100)
	m := fx.connect(1)
	fx.quarantine(m, m.Conn)
	before := fx.state()
	fx.refused(m.Conn, fx.announce(m, smallVRAM, 100), rings.CodeStanding, "quarantined")
	if st := fx.state(); !reflect.DeepEqual(st, before) {
		t.Fatalf("state %+v, was %+v", st, before)
	}
}

// A candidate quarantined after it announced is left out of the next
// attempt: it is neither probed nor placed.
func TestQuarantinedCandidateLeftOut(t *testing.T) {
	fx := newFixture(t, shape, defaultSpec())
	for i := range 4 {
		fx.join(i, smallVRAM, int64(100+10*i))
	}
	fastest := fx.members["conn-0"]
	fx.quarantine(fastest, fastest.Conn)
	fx.clock.Advance(debounce)
	probes := only[relaymsg.RingProbe](fx, fx.takeAll())
	if len(probes) != 3 || probes[fastest.Conn] != nil {
		t.Fatalf("probed %v, want the three in good standing", slices.Sorted(maps.Keys(probes)))
	}
	for conn, p := range probes {
		if slices.ContainsFunc(p.Peers, func(r relaymsg.RingPeer) bool { return r.Node == fastest.Node }) {
			t.Fatalf("%s probes the quarantined candidate", conn)
		}
		fx.ok(conn, fx.members[conn].Answer(p, fx.rtt, fx.clock.Now()))
	}
	for _, a := range only[relaymsg.RingAssign](fx, fx.takeAll()) {
		if slices.ContainsFunc(a.Plan.Members, func(m shard.Member) bool { return m.Node == fastest.Node }) {
			t.Fatal("the quarantined candidate is in the plan")
		}
	}
}

// A driver quarantined while the plan waits for acceptances does not
// start serving it: the plan is void, and it sits out the next attempt.
func TestQuarantinedDriverNotServed(t *testing.T) {
	fx := newFixture(t, shape, defaultSpec())
	for i := range 4 {
		fx.join(i, smallVRAM, int64(100+10*i))
	}
	assigns := fx.probe()
	var a *relaymsg.RingAssign
	for _, x := range assigns {
		a = x
	}
	p0, _ := a.Plan.Primary(0)
	driver := fx.byNode(p0.Node)
	fx.quarantine(driver, driver.Conn)
	fx.accept(assigns)
	if d := only[relaymsg.RingDisband](fx, fx.takeAll()); len(d) != 3 {
		t.Fatalf("disband to %v, want the three members", slices.Sorted(maps.Keys(d)))
	}
	if fx.serves(driver.Conn) || fx.state().Serving {
		t.Fatal("a quarantined driver serves the ring")
	}
}

// A job whose stage is held by an identity no longer in good standing —
// its live record quarantined, or, once it has left, its identity — is
// rejected: nobody is paid, and that stage is the culprit, not to be
// struck for it.
func TestSettleRefusesStageNotInGoodStanding(t *testing.T) {
	for _, gone := range []bool{false, true} {
		t.Run(map[bool]string{false: "connected", true: "gone"}[gone], func(t *testing.T) {
			fx, r := serving(t, 4)
			started := fx.clock.Now()
			bad := r.stages[2]
			conn := bad.Conn
			if gone {
				fx.leave(bad.Conn)
				fx.takeAll()
				conn = ""
			}
			fx.quarantine(bad, conn)
			got, err := fx.f.Settle(t.Context(), rings.SettleJob{ID: "job-1", Ticket: "ticket-1", Model: ringModel, Plan: r.hash, Started: started,
				Earning: 100, Done: done(r, "job-1", "ticket-1", started, 10), Worker: r.stages[0].Conn})
			var rej *shard.RejectedError
			if !errors.As(err, &rej) || rej.Reason != rings.ReasonStanding || rej.Stage != 2 || !strings.Contains(rej.Detail, "quarantined") {
				t.Fatalf("err %v, want a rejection for stage 2's standing", err)
			}
			c := got.Culprit
			if len(got.Shares) != 0 || c == nil || c.Stage != 2 || c.Node != bad.Node || c.Conn != bad.Conn || c.Account != bad.Account ||
				c.Pubkey != bad.Pubkey() || c.Strike {
				t.Fatalf("settlement %+v, culprit %+v", got, c)
			}
		})
	}
}
