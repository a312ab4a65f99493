package rings_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/rings"
	"github.com/c0mpute/c0mpute/functions/rings/ringtest"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
)

const (
	ringModel  = "big"
	wholeModel = "small"
	debounce   = 2 * time.Second
	rttWait    = 20 * time.Second
	readyWait  = 2 * time.Minute
	retry      = time.Minute
)

var t0 = time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)

// The default model: 6 layers of 1 MiB with 4 KiB of KV each at 256
// tokens, a 1 MiB embedding and head. A member with smallVRAM holds two
// layers at an end of the ring and three in the middle, so a ring needs 3
// stages; with bigVRAM two members suffice.
var shape = ringtest.Shape{Layers: 6, BlobBytes: 512, LayerBytes: 1 << 20, KVBytesPerToken: 16,
	EmbedBytes: 1 << 20, HeadBytes: 1 << 20, ActivationBytes: 4096}

const (
	smallVRAM = 3_355_443 // 3.2 MiB
	bigVRAM   = 5 << 20
)

// clock is a manual clock: timers fire, in order, only when the test
// advances it, in the test's goroutine.
type clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
}

type timer struct {
	at   time.Time
	fn   func()
	done bool
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) AfterFunc(d time.Duration, fn func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{at: c.now.Add(d), fn: fn}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.done
		t.done = true
		return was
	}
}

// Advance moves the clock by d, firing every timer due on the way.
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		var next *timer
		for _, t := range c.timers {
			if !t.done && !t.at.After(end) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			break
		}
		next.done = true
		if next.at.After(c.now) {
			c.now = next.at
		}
		c.mu.Unlock()
		next.fn()
		c.mu.Lock()
	}
	c.now = end
	c.mu.Unlock()
}

// pending is how many timers wait.
func (c *clock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.done {
			n++
		}
	}
	return n
}

// postbox records the Former's posts by connection; a connection in gone
// refuses them.
type postbox struct {
	mu   sync.Mutex
	by   map[string][][]byte
	gone map[string]bool
	// sent, when set, gets a token per post (never blocking).
	sent chan struct{}
	// A post to hold, when set, closes held and waits for release: a
	// slow connection.
	hold          string
	held, release chan struct{}
}

func (p *postbox) Post(_ context.Context, conn string, b []byte) error {
	p.mu.Lock()
	if conn == p.hold {
		p.hold = ""
		p.mu.Unlock()
		close(p.held)
		<-p.release
		p.mu.Lock()
	}
	defer p.mu.Unlock()
	if p.gone[conn] {
		return errors.New("connection gone")
	}
	p.by[conn] = append(p.by[conn], slices.Clone(b))
	select {
	case p.sent <- struct{}{}:
	default:
	}
	return nil
}

// dispatchLog records what the Former asks of dispatch.
type dispatchLog struct {
	mu         sync.Mutex
	registered []store.Worker
	dispatched []string
}

func (d *dispatchLog) Dispatch(_ context.Context, models []string) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dispatched = append(d.dispatched, models...)
	return 0, nil
}

func (d *dispatchLog) Registered(w store.Worker) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.registered = append(d.registered, w)
}

type fixture struct {
	t       *testing.T
	f       *rings.Former
	clock   *clock
	posts   *postbox
	st      *embedded.Store
	disp    *dispatchLog
	hash    shard.Hash // the ring model's manifest hash
	blobURL string
	gw      ed25519.PrivateKey
	members map[string]*ringtest.Member // by connection
	rtt     ringtest.RTT
}

// newFixture serves ring model "big" (published with sh; spec as given,
// its blob URL set) and whole model "small", on the embedded store. The
// Former takes the test timers above and private addresses (the members'
// are 10.0.x.x); opts change its config further.
func newFixture(t *testing.T, sh ringtest.Shape, spec catalog.RingSpec, opts ...func(*rings.Config)) *fixture {
	t.Helper()
	pub := ringtest.Publish(t, ringModel, sh)
	return newFixtureAt(t, pub.URL, pub.Manifest.Hash(), spec, opts...)
}

// newFixtureAt is newFixture for a model published at blobURL whose
// manifest hashes to hash.
func newFixtureAt(t *testing.T, blobURL string, hash shard.Hash, spec catalog.RingSpec, opts ...func(*rings.Config)) *fixture {
	t.Helper()
	st, err := embedded.Open(t.TempDir()+"/c0.db", embedded.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	spec.BlobURL = blobURL
	cat, err := catalog.New([]catalog.Model{{ID: wholeModel, Price: 1}, {ID: ringModel, Price: 30, Aliases: []string{"big-alias"}, Ring: &spec}})
	if err != nil {
		t.Fatal(err)
	}
	fx := &fixture{t: t, clock: &clock{now: t0}, posts: &postbox{by: map[string][][]byte{}, gone: map[string]bool{}}, st: st,
		disp: &dispatchLog{}, hash: hash, blobURL: blobURL, gw: ringtest.Key("gateway"), members: map[string]*ringtest.Member{}, rtt: ringtest.Distance}
	cfg := rings.Config{Key: fx.gw, Catalog: cat, Post: fx.posts, Store: st, Dispatch: fx.disp,
		Now: fx.clock.Now, AfterFunc: fx.clock.AfterFunc, Log: slog.New(slog.DiscardHandler),
		RTTTimeout: rttWait, ReadyTimeout: readyWait, Debounce: debounce, Retry: retry, AllowPrivateAddrs: true}
	for _, o := range opts {
		o(&cfg)
	}
	fx.f, err = rings.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fx.f.Close)
	if err := fx.f.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	return fx
}

func defaultSpec() catalog.RingSpec {
	return catalog.RingSpec{MinStages: 1, MaxStages: 8, ContextTokens: 256}
}

// connect makes member i's worker record (connected, registered for the
// whole model) and registers it for the ring model with the Former, as
// the relay does.
func (fx *fixture) connect(i int) *ringtest.Member {
	fx.t.Helper()
	m := ringtest.NewMember(i)
	ctx := fx.t.Context()
	must(fx.t, fx.st.PutWorker(ctx, store.Worker{Conn: m.Conn, AccountID: m.Account, Pubkey: m.Pubkey(), State: store.WorkerIdle, ConnectedAt: t0}))
	w, err := fx.st.RegisterWorker(ctx, m.Conn, []string{wholeModel}, map[string]store.Caps{wholeModel: {Tools: true}})
	must(fx.t, err)
	offers := fx.f.Register(ctx, w, []string{wholeModel, ringModel})
	if len(offers) != 1 || offers[0].Model != ringModel || offers[0].Hash != fx.hash || offers[0].BlobURL != fx.blobURL {
		fx.t.Fatalf("offers %+v", offers)
	}
	fx.members[m.Conn] = m
	return m
}

// join connects member i and announces it with vram and per-layer time.
func (fx *fixture) join(i int, vram, us int64) *ringtest.Member {
	fx.t.Helper()
	m := fx.connect(i)
	fx.ok(m.Conn, m.Announce(ringModel, fx.hash, vram, us, fx.clock.Now()))
	return m
}

// direct is a message handed to the Former as is, without the relay's
// decoding (which would refuse it first).
type direct struct{ m any }

// send delivers m from conn as the relay would: encoded, decoded (so it
// fits and validates), then to the Former.
func (fx *fixture) send(conn string, m any) []byte {
	fx.t.Helper()
	if d, ok := m.(direct); ok {
		return fx.f.Message(fx.t.Context(), conn, d.m)
	}
	b, err := relaymsg.Encode(m)
	must(fx.t, err)
	dec, err := relaymsg.Decode(b)
	must(fx.t, err)
	return fx.f.Message(fx.t.Context(), conn, dec)
}

func (fx *fixture) ok(conn string, m any) {
	fx.t.Helper()
	if reply := fx.send(conn, m); reply != nil {
		fx.t.Fatalf("%T from %s: %s", m, conn, reply)
	}
}

// refused requires an error reply with code whose message holds want.
func (fx *fixture) refused(conn string, m any, code, want string) {
	fx.t.Helper()
	reply := fx.send(conn, m)
	msg, err := relaymsg.Decode(reply)
	if err != nil {
		fx.t.Fatalf("%T from %s: reply %q: %v", m, conn, reply, err)
	}
	e, ok := msg.(*relaymsg.Error)
	if !ok || e.Code != code || !strings.Contains(e.Message, want) {
		fx.t.Fatalf("%T from %s: reply %s, want %s containing %q", m, conn, reply, code, want)
	}
}

// take returns and forgets the messages posted to conn, decoded.
func (fx *fixture) take(conn string) []any {
	fx.t.Helper()
	fx.posts.mu.Lock()
	raw := fx.posts.by[conn]
	delete(fx.posts.by, conn)
	fx.posts.mu.Unlock()
	var out []any
	for _, b := range raw {
		m, err := relaymsg.Decode(b)
		if err != nil {
			fx.t.Fatalf("post to %s does not decode: %v", conn, err)
		}
		out = append(out, m)
	}
	return out
}

// takeAll is take for every connection.
func (fx *fixture) takeAll() map[string][]any {
	fx.posts.mu.Lock()
	conns := slices.Sorted(maps.Keys(fx.posts.by))
	fx.posts.mu.Unlock()
	out := map[string][]any{}
	for _, c := range conns {
		out[c] = fx.take(c)
	}
	return out
}

// only returns the single message of type T posted to each connection,
// failing on anything else.
func only[T any](fx *fixture, posted map[string][]any) map[string]*T {
	fx.t.Helper()
	out := map[string]*T{}
	for conn, ms := range posted {
		if len(ms) != 1 {
			fx.t.Fatalf("%d messages to %s, want one %T: %+v", len(ms), conn, new(T), ms)
		}
		m, ok := ms[0].(*T)
		if !ok {
			fx.t.Fatalf("%T to %s, want %T", ms[0], conn, new(T))
		}
		out[conn] = m
	}
	return out
}

// probe fires the debounce and answers every probe; it returns the
// assignments posted once the last row is in.
func (fx *fixture) probe() map[string]*relaymsg.RingAssign {
	fx.t.Helper()
	fx.clock.Advance(debounce)
	probes := only[relaymsg.RingProbe](fx, fx.takeAll())
	for _, conn := range slices.Sorted(maps.Keys(probes)) {
		fx.ok(conn, fx.members[conn].Answer(probes[conn], fx.rtt, fx.clock.Now()))
	}
	return only[relaymsg.RingAssign](fx, fx.takeAll())
}

// accept answers every assignment with the member's acceptance,
// computed with shard.Accept.
func (fx *fixture) accept(assigns map[string]*relaymsg.RingAssign) {
	fx.t.Helper()
	for _, conn := range slices.Sorted(maps.Keys(assigns)) {
		r, err := fx.members[conn].Accept(assigns[conn], fx.rtt, fx.clock.Now())
		must(fx.t, err)
		fx.ok(conn, r)
	}
}

// ring is a serving ring as the test sees it.
type ring struct {
	hash   shard.Hash
	plan   shard.Plan
	stages []*ringtest.Member // primaries by stage
}

// form runs a whole formation from the current candidates and requires
// it to serve.
func (fx *fixture) form() ring {
	fx.t.Helper()
	assigns := fx.probe()
	fx.accept(assigns)
	serves := only[relaymsg.RingServe](fx, fx.takeAll())
	var r ring
	for conn, a := range assigns {
		r.hash, r.plan = a.Hash, a.Plan
		if serves[conn] == nil || serves[conn].Hash != a.Hash {
			fx.t.Fatalf("%s got no ring_serve for %s", conn, a.Hash)
		}
	}
	if len(serves) != len(assigns) {
		fx.t.Fatalf("%d ring_serve for %d members", len(serves), len(assigns))
	}
	for s := range r.plan.Stages {
		p, _ := r.plan.Primary(s)
		r.stages = append(r.stages, fx.byNode(p.Node))
	}
	return r
}

func (fx *fixture) byNode(n shard.PublicKey) *ringtest.Member {
	for _, m := range fx.members {
		if m.Node == n {
			return m
		}
	}
	fx.t.Fatalf("no member %s", n)
	return nil
}

func (fx *fixture) state() rings.State {
	fx.t.Helper()
	st := fx.f.Rings()
	if len(st) != 1 {
		fx.t.Fatalf("Rings() = %+v", st)
	}
	return st[0]
}

// serves reports whether conn's worker record serves the ring model.
func (fx *fixture) serves(conn string) bool {
	fx.t.Helper()
	w, err := fx.st.GetWorker(fx.t.Context(), conn)
	must(fx.t, err)
	return w.Serves(ringModel)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
