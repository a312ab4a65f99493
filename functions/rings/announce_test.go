package rings_test

import (
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
	"github.com/c0mpute/c0mpute/functions/store"
)

// announce is m's signed announcement of vram and per-layer time, made
// now, from its address.
func (fx *fixture) announce(m *ringtest.Member, vram, us int64) *relaymsg.RingAnnounce {
	return m.Announce(ringModel, fx.hash, vram, us, fx.clock.Now())
}

// A re-announcement that says what the last one said changes nothing: the
// debounce is not restarted, and a probe in progress is not dropped.
func TestReannounceUnchanged(t *testing.T) {
	fx := newFixture(t, shape, defaultSpec())
	for i := range 4 {
		fx.join(i, smallVRAM, int64(100+10*i))
	}
	fx.clock.Advance(time.Second)
	m0 := fx.members["conn-0"]
	// A new record (a later time, a new signature) of the same capability.
	fx.ok(m0.Conn, fx.announce(m0, smallVRAM, 100))
	fx.clock.Advance(debounce - time.Second)
	probes := only[relaymsg.RingProbe](fx, fx.takeAll())
	if len(probes) != 4 {
		t.Fatalf("%d probes at the first announcements' debounce, want 4: the repeat restarted the wait", len(probes))
	}
	m1 := fx.members["conn-1"]
	fx.ok(m1.Conn, fx.announce(m1, smallVRAM, 110))
	for _, conn := range slices.Sorted(maps.Keys(probes)) {
		fx.ok(conn, fx.members[conn].Answer(probes[conn], fx.rtt, fx.clock.Now()))
	}
	if assigns := only[relaymsg.RingAssign](fx, fx.takeAll()); len(assigns) != 3 {
		t.Fatalf("%d assigned after a repeat during the probe, want 3", len(assigns))
	}
}

// A changed announcement counts at most once per ChangeInterval per
// connection: sooner, it is refused and changes nothing (no new wait);
// after, it is taken.
func TestReannounceRateLimited(t *testing.T) {
	fx := newFixture(t, shape, catalog.RingSpec{MinStages: 2, MaxStages: 4, ContextTokens: 256})
	m := fx.join(0, bigVRAM, 100)
	for _, tc := range []struct {
		after  time.Duration
		vram   int64
		refuse string // "" to accept
	}{
		{time.Second, bigVRAM + 1, "announce again in 29s"},
		{28 * time.Second, bigVRAM + 1, "announce again in 1s"},
		{0, bigVRAM, ""}, // unchanged: always taken
		{time.Second, bigVRAM + 1, ""},
		{time.Second, bigVRAM + 2, "announce again in 29s"},
		{29 * time.Second, bigVRAM + 2, ""},
	} {
		fx.clock.Advance(tc.after)
		if tc.refuse != "" {
			fx.refused(m.Conn, fx.announce(m, tc.vram, 100), rings.CodeRateLimited, tc.refuse)
		} else {
			fx.ok(m.Conn, fx.announce(m, tc.vram, 100))
		}
	}
	// A refused change does not restart the wait: with a second member
	// the attempt comes Debounce after the last change taken.
	fx.join(1, bigVRAM, 110)
	fx.clock.Advance(time.Second)
	fx.refused(m.Conn, fx.announce(m, bigVRAM+3, 100), rings.CodeRateLimited, "announce again in 29s")
	fx.clock.Advance(debounce - time.Second)
	if probes := only[relaymsg.RingProbe](fx, fx.takeAll()); len(probes) != 2 {
		t.Fatalf("%d probes, want 2", len(probes))
	}
}

// Candidates that keep changing cannot hold formation off: the attempt
// comes at most MaxWait after the candidates first reached min_stages,
// and past MaxWait a newcomer does not drop the probe (it waits for the
// next formation).
func TestMaxWait(t *testing.T) {
	const maxWait = 10 * time.Second
	fx := newFixture(t, shape, defaultSpec(), func(c *rings.Config) {
		c.MaxWait, c.ChangeInterval = maxWait, time.Second
	})
	for i := range 4 {
		fx.join(i, smallVRAM, int64(100+10*i))
	}
	m0 := fx.members["conn-0"]
	step := 1500 * time.Millisecond // under the 2 s debounce
	var elapsed time.Duration
	for i := 0; elapsed+step < maxWait; i++ {
		fx.clock.Advance(step)
		elapsed += step
		if got := fx.takeAll(); len(got) != 0 {
			t.Fatalf("posted %v after %v, while the candidates kept changing", got, elapsed)
		}
		fx.ok(m0.Conn, fx.announce(m0, smallVRAM, int64(101+i%2)))
	}
	fx.clock.Advance(maxWait - elapsed)
	probes := only[relaymsg.RingProbe](fx, fx.takeAll())
	if len(probes) != 4 {
		t.Fatalf("%d probes at MaxWait, want 4", len(probes))
	}
	// A newcomer past MaxWait waits: the probe runs to its end.
	fx.join(4, smallVRAM, 90)
	for _, conn := range slices.Sorted(maps.Keys(probes)) {
		fx.ok(conn, fx.members[conn].Answer(probes[conn], fx.rtt, fx.clock.Now()))
	}
	assigns := only[relaymsg.RingAssign](fx, fx.takeAll())
	if len(assigns) != 3 || assigns["conn-4"] != nil {
		t.Fatalf("assigned %v", slices.Sorted(maps.Keys(assigns)))
	}
}

// Unless AllowPrivateAddrs, an advertise address must be a public IP
// literal: loopback, private, link-local, shared, unspecified, multicast
// and broadcast IPs and host names are refused with the reason. (IPv6
// addresses go to the Former directly: relaymsg's hostname_port check
// refuses them first.)
func TestAdvertiseMustBePublic(t *testing.T) {
	fx := newFixture(t, shape, defaultSpec(), func(c *rings.Config) { c.AllowPrivateAddrs = false })
	for i, tc := range []struct {
		addr   string
		direct bool
		want   string // "" when accepted
	}{
		{"203.0.113.7:7443", false, ""},
		{"[2001:db8::1]:7443", true, ""},
		{"127.0.0.1:7000", false, "loopback"},
		{"[::1]:7000", true, "loopback"},
		{"[::ffff:127.0.0.1]:7000", true, "loopback"},
		{"10.0.0.1:7000", false, "private"},
		{"172.16.4.2:7000", false, "private"},
		{"192.168.1.10:7000", false, "private"},
		{"[fd00::1]:7000", true, "private"},
		{"169.254.169.254:80", false, "link-local"},
		{"[fe80::1]:7000", true, "link-local"},
		{"[fe80::1%eth0]:7000", true, "not an IP address"},
		{"100.64.0.1:7000", false, "shared"},
		{"0.0.0.0:7000", false, "unspecified"},
		{"0.1.2.3:7000", false, "unspecified"},
		{"239.1.2.3:7000", false, "multicast"},
		{"224.0.0.1:7000", false, "link-local"},
		{"255.255.255.255:7000", false, "broadcast"},
		{"localhost:7000", false, "not an IP address"},
		{"member.example.com:7000", false, "not an IP address"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			fx.t = t
			m := fx.connect(i)
			a := fx.announce(m, smallVRAM, 100)
			a.Advertise = tc.addr
			var msg any = a
			if tc.direct {
				msg = direct{a}
			}
			before := fx.state().Candidates
			if tc.want == "" {
				fx.ok(m.Conn, msg)
				if fx.state().Candidates != before+1 {
					t.Fatal("accepted, but not a candidate")
				}
				return
			}
			fx.refused(m.Conn, msg, rings.CodeBadRecord, tc.want)
			if fx.state().Candidates != before {
				t.Fatal("refused, but a candidate")
			}
		})
	}
}

// When the RTT deadline passes and the rows that came show a candidate
// that nobody reached, that candidate sits out the next attempt — not the
// late ones, who were still dialling it.
func TestRTTDeadlineBlamesTheUnreachable(t *testing.T) {
	fx := newFixture(t, shape, catalog.RingSpec{MinStages: 2, MaxStages: 4, ContextTokens: 256})
	for i := range 4 {
		fx.join(i, bigVRAM, int64(100+10*i))
	}
	fx.clock.Advance(debounce)
	probes := only[relaymsg.RingProbe](fx, fx.takeAll())
	unreachable, late := fx.members["conn-1"], "conn-3"
	// The unreachable one answers at once, with everyone in its row.
	fx.ok(unreachable.Conn, unreachable.Answer(probes[unreachable.Conn], fx.rtt, fx.clock.Now()))
	// Two honest ones could not reach it: their rows leave it out.
	for _, conn := range []string{"conn-0", "conn-2"} {
		p := *probes[conn]
		p.Peers = slices.DeleteFunc(slices.Clone(p.Peers), func(r relaymsg.RingPeer) bool { return r.Node == unreachable.Node })
		fx.ok(conn, fx.members[conn].Answer(&p, fx.rtt, fx.clock.Now()))
	}
	fx.clock.Advance(rttWait + debounce)
	next := only[relaymsg.RingProbe](fx, fx.takeAll())
	if got := slices.Sorted(maps.Keys(next)); !slices.Equal(got, []string{"conn-0", "conn-2", late}) {
		t.Fatalf("the next attempt probed %v, want every candidate but the unreachable %s", got, unreachable.Conn)
	}
	for conn, p := range next {
		fx.ok(conn, fx.members[conn].Answer(p, fx.rtt, fx.clock.Now()))
	}
	if assigns := only[relaymsg.RingAssign](fx, fx.takeAll()); len(assigns) != 2 {
		t.Fatalf("%d assigned", len(assigns))
	}
}

// A member that rolls its relay connection announces on the new one: the
// new connection replaces the old as candidate, the plan the identity
// held a place in is void and re-forms, and the old connection's later
// disconnect changes nothing. The old connection cannot take the place
// back.
func TestNewConnectionReplaces(t *testing.T) {
	fx := newFixture(t, shape, defaultSpec())
	for i := range 4 {
		fx.join(i, smallVRAM, int64(100+10*i))
	}
	first := fx.form()
	old := first.stages[1]
	moved := *old
	moved.Conn = old.Conn + "-new"
	ctx := t.Context()
	must(t, fx.st.PutWorker(ctx, store.Worker{Conn: moved.Conn, AccountID: moved.Account, Pubkey: moved.Pubkey(), State: store.WorkerIdle,
		ConnectedAt: t0.Add(time.Minute)}))
	w, err := fx.st.RegisterWorker(ctx, moved.Conn, []string{wholeModel}, nil)
	must(t, err)
	fx.f.Register(ctx, w, []string{ringModel})
	delete(fx.members, old.Conn)
	fx.members[moved.Conn] = &moved
	fx.ok(moved.Conn, fx.announce(&moved, smallVRAM, 110))
	disbands := only[relaymsg.RingDisband](fx, fx.takeAll())
	if len(disbands) != 3 || disbands[old.Conn] == nil || !strings.Contains(disbands[old.Conn].Reason, "new connection") {
		t.Fatalf("disband %+v, want the three members of %s", disbands, first.hash)
	}
	if st := fx.state(); st.Candidates != 4 || !st.Plan.IsZero() {
		t.Fatalf("after the move: %+v", st)
	}
	fx.refused(old.Conn, fx.announce(old, smallVRAM, 110), rings.CodeBadRecord, "connected after this one")
	fx.clock.Advance(debounce)
	probes := only[relaymsg.RingProbe](fx, fx.takeAll())
	if probes[moved.Conn] == nil || probes[old.Conn] != nil || len(probes) != 4 {
		t.Fatalf("probed %v, want the new connection and not the old", slices.Sorted(maps.Keys(probes)))
	}
	for conn, p := range probes {
		fx.ok(conn, fx.members[conn].Answer(p, fx.rtt, fx.clock.Now()))
	}
	fx.accept(only[relaymsg.RingAssign](fx, fx.takeAll()))
	only[relaymsg.RingServe](fx, fx.takeAll())
	before := fx.state()
	_, err = fx.st.DeleteWorker(ctx, old.Conn)
	must(t, err)
	fx.f.Left(ctx, old.Conn)
	if got := fx.takeAll(); len(got) != 0 {
		t.Fatalf("the old connection's disconnect posted %v", got)
	}
	if st := fx.state(); !reflect.DeepEqual(st, before) || !st.Serving {
		t.Fatalf("the old connection's disconnect changed the ring: %+v, was %+v", st, before)
	}
}
