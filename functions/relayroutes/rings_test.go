package relayroutes_test

import (
	"context"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/relayroutes"
	"github.com/c0mpute/c0mpute/functions/rings"
	"github.com/c0mpute/c0mpute/functions/rings/ringtest"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
)

const ringModel = "c0mpute-ring"

// recorder records posts by connection.
type recorder struct {
	mu sync.Mutex
	by map[string][][]byte
}

func (r *recorder) Post(_ context.Context, conn string, b []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.by[conn] = append(r.by[conn], slices.Clone(b))
	return nil
}

func (r *recorder) Delete(context.Context, string) error { return nil }

// take decodes and forgets what was posted to conn.
func (r *recorder) take(t *testing.T, conn string) []any {
	t.Helper()
	r.mu.Lock()
	raw := r.by[conn]
	delete(r.by, conn)
	r.mu.Unlock()
	var out []any
	for _, b := range raw {
		m, err := relaymsg.Decode(b)
		must(t, err)
		out = append(out, m)
	}
	return out
}

// timers holds the Former's timers until the test fires them.
type timers struct {
	mu  sync.Mutex
	fns []func()
}

func (tm *timers) AfterFunc(_ time.Duration, fn func()) func() bool {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	i := len(tm.fns)
	tm.fns = append(tm.fns, fn)
	return func() bool {
		tm.mu.Lock()
		defer tm.mu.Unlock()
		was := tm.fns[i] != nil
		tm.fns[i] = nil
		return was
	}
}

// fire runs every pending timer.
func (tm *timers) fire() {
	tm.mu.Lock()
	fns := slices.Clone(tm.fns)
	for i := range tm.fns {
		tm.fns[i] = nil
	}
	tm.mu.Unlock()
	for _, fn := range fns {
		if fn != nil {
			fn()
		}
	}
}

type ringFixture struct {
	h      *relayroutes.Handler
	f      *rings.Former
	st     *embedded.Store
	posts  *recorder
	timers *timers
	pub    *ringtest.Published
}

// newRingFixture is a relay handler on the embedded store with a Former
// for ring model c0mpute-ring (published on an HTTP server) next to the
// whole model c0mpute-pro.
func newRingFixture(t *testing.T, withRings bool) *ringFixture {
	t.Helper()
	st, err := embedded.Open(t.TempDir()+"/c0.db", embedded.WithNoSync())
	must(t, err)
	t.Cleanup(func() { _ = st.Close() })
	pub := ringtest.Publish(t, ringModel, ringtest.Shape{Layers: 4, BlobBytes: 64, LayerBytes: 1 << 20, KVBytesPerToken: 16,
		EmbedBytes: 1 << 20, HeadBytes: 1 << 20, ActivationBytes: 4096})
	cat, err := catalog.New([]catalog.Model{{ID: served, Price: 10},
		{ID: ringModel, Price: 30, Ring: &catalog.RingSpec{BlobURL: pub.URL, MinStages: 1, MaxStages: 4, ContextTokens: 256}}})
	must(t, err)
	fx := &ringFixture{st: st, posts: &recorder{by: map[string][][]byte{}}, timers: &timers{}, pub: pub}
	fx.h = &relayroutes.Handler{Store: st, Post: fx.posts, Dispatch: noDispatch{}, Catalog: cat, ListenerSecret: secret,
		Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return t0 }}
	if withRings {
		fx.f, err = rings.New(rings.Config{Key: ringtest.Key("gateway"), Catalog: cat, Post: fx.posts, Store: st, Dispatch: noDispatch{},
			AfterFunc: fx.timers.AfterFunc, Log: slog.New(slog.DiscardHandler), AllowPrivateAddrs: true})
		must(t, err)
		t.Cleanup(fx.f.Close)
		must(t, fx.f.Load(t.Context()))
		fx.h.Rings = fx.f
	}
	return fx
}

// connect stores member i's worker record, as $connect does.
func (fx *ringFixture) connect(t *testing.T, i int) *ringtest.Member {
	t.Helper()
	m := ringtest.NewMember(i)
	must(t, fx.st.PutWorker(t.Context(), store.Worker{Conn: m.Conn, AccountID: m.Account, Pubkey: m.Pubkey(), State: store.WorkerIdle, ConnectedAt: t0}))
	return m
}

func (fx *ringFixture) send(t *testing.T, conn string, m any) any {
	t.Helper()
	b, err := relaymsg.Encode(m)
	must(t, err)
	var ev events.APIGatewayWebsocketProxyRequest
	ev.RequestContext.ConnectionID, ev.RequestContext.RouteKey, ev.Body = conn, "$default", string(b)
	resp, err := fx.h.Handle(t.Context(), ev)
	must(t, err)
	if resp.Body == "" {
		return nil
	}
	reply, err := relaymsg.Decode([]byte(resp.Body))
	must(t, err)
	return reply
}

func (fx *ringFixture) disconnect(t *testing.T, conn string) {
	t.Helper()
	var ev events.APIGatewayWebsocketProxyRequest
	ev.RequestContext.ConnectionID, ev.RequestContext.RouteKey = conn, "$disconnect"
	_, err := fx.h.Handle(t.Context(), ev)
	must(t, err)
}

func (fx *ringFixture) candidates(t *testing.T) rings.State {
	t.Helper()
	st := fx.f.Rings()
	if len(st) != 1 {
		t.Fatalf("Rings() = %+v", st)
	}
	return st[0]
}

// A registration with ring models is accepted: they are offered in
// Registered.Ring with their manifest hash and blob URL, not registered as
// served; a worker registering only ring models is fine.
func TestRegisterRingModels(t *testing.T) {
	fx := newRingFixture(t, true)
	a, b, c, d := fx.connect(t, 0), fx.connect(t, 1), fx.connect(t, 2), fx.connect(t, 3)
	offer := relaymsg.RingOffer{Model: ringModel, Hash: fx.pub.Manifest.Hash(), BlobURL: fx.pub.URL}
	for _, tc := range []struct {
		conn   string
		models []string
		member bool // Register.Ring: a member of any ring
		want   relaymsg.Registered
	}{
		{a.Conn, []string{served, ringModel, "gpt-4"}, false, relaymsg.Registered{Models: []string{served}, Ignored: []string{"gpt-4"}, Ring: []relaymsg.RingOffer{offer}}},
		{b.Conn, []string{ringModel}, false, relaymsg.Registered{Models: nil, Ring: []relaymsg.RingOffer{offer}}},
		{c.Conn, nil, true, relaymsg.Registered{Models: nil, Ring: []relaymsg.RingOffer{offer}}},
		{d.Conn, []string{served, ringModel}, true, relaymsg.Registered{Models: []string{served}, Ring: []relaymsg.RingOffer{offer}}},
	} {
		reg, ok := fx.send(t, tc.conn, &relaymsg.Register{Models: tc.models, Ring: tc.member}).(*relaymsg.Registered)
		if !ok || !slices.Equal(reg.Models, tc.want.Models) || !slices.Equal(reg.Ignored, tc.want.Ignored) || !slices.Equal(reg.Ring, tc.want.Ring) {
			t.Fatalf("register %v: %+v", tc.models, reg)
		}
		w, err := fx.st.GetWorker(t.Context(), tc.conn)
		must(t, err)
		if w.Serves(ringModel) || !w.Registered {
			t.Errorf("record after registering %v: %+v", tc.models, w)
		}
	}
}

// Without a Former, ring models are ignored (a worker offering only them
// is told what the network serves), and ring messages get an error.
func TestNoRings(t *testing.T) {
	fx := newRingFixture(t, false)
	m := fx.connect(t, 0)
	if e, ok := fx.send(t, m.Conn, &relaymsg.Register{Models: []string{ringModel}}).(*relaymsg.Error); !ok || e.Code != "no_models" {
		t.Fatalf("register only a ring model: %+v", e)
	}
	if e, ok := fx.send(t, m.Conn, &relaymsg.Register{Ring: true}).(*relaymsg.Error); !ok || e.Code != "no_models" ||
		!strings.HasSuffix(e.Message, "this gateway forms no ring a member could join") {
		t.Fatalf("register as a ring member: %+v", e)
	}
	reg, ok := fx.send(t, m.Conn, &relaymsg.Register{Models: []string{served, ringModel}}).(*relaymsg.Registered)
	if !ok || !slices.Equal(reg.Ignored, []string{ringModel}) || len(reg.Ring) != 0 {
		t.Fatalf("registered %+v", reg)
	}
	e, ok := fx.send(t, m.Conn, m.Announce(ringModel, fx.pub.Manifest.Hash(), 9<<20, 100, t0)).(*relaymsg.Error)
	if !ok || e.Code != "no_rings" || e.Message != "rings are not served by this gateway" {
		t.Fatalf("announce: %+v", e)
	}
}

// The ring messages reach the Former through the relay, and a
// disconnect tells it: a lone member's ring forms over the relay
// messages, serves from its worker record, survives the member
// registering again, and is gone with its connection.
func TestRingMessagesRouted(t *testing.T) {
	fx := newRingFixture(t, true)
	m, outsider := fx.connect(t, 0), fx.connect(t, 1)
	fx.send(t, m.Conn, &relaymsg.Register{Models: []string{served, ringModel}})
	fx.send(t, outsider.Conn, &relaymsg.Register{Models: []string{served}})
	hash := fx.pub.Manifest.Hash()
	if e, ok := fx.send(t, outsider.Conn, outsider.Announce(ringModel, hash, 9<<20, 100, t0)).(*relaymsg.Error); !ok || e.Code != rings.CodeNotRegistered {
		t.Fatalf("announce from a connection that did not register the model: %+v", e)
	}
	for _, msg := range []any{
		&relaymsg.RingRTT{Model: ringModel},
		&relaymsg.RingReady{Model: ringModel},
		&relaymsg.RingRefuse{Model: ringModel, Code: "x"},
	} {
		if e, ok := fx.send(t, m.Conn, msg).(*relaymsg.Error); !ok || (e.Code != rings.CodeStale && e.Code != rings.CodeBadRecord) {
			t.Fatalf("%T before any probe: %+v", msg, e)
		}
	}
	if reply := fx.send(t, m.Conn, m.Announce(ringModel, hash, 9<<20, 100, t0)); reply != nil {
		t.Fatalf("announce: %+v", reply)
	}
	if st := fx.candidates(t); st.Candidates != 1 {
		t.Fatalf("%+v", st)
	}
	fx.timers.fire()
	posted := fx.posts.take(t, m.Conn)
	a, ok := posted[0].(*relaymsg.RingAssign)
	if len(posted) != 1 || !ok {
		t.Fatalf("posted %+v", posted)
	}
	ready, err := m.Accept(a, ringtest.Distance, t0)
	must(t, err)
	if reply := fx.send(t, m.Conn, ready); reply != nil {
		t.Fatalf("ready: %+v", reply)
	}
	if posted := fx.posts.take(t, m.Conn); len(posted) != 1 {
		t.Fatalf("posted %+v, want ring_serve", posted)
	} else if _, ok := posted[0].(*relaymsg.RingServe); !ok {
		t.Fatalf("posted %T, want ring_serve", posted[0])
	}
	w, err := fx.st.GetWorker(t.Context(), m.Conn)
	must(t, err)
	if !slices.Equal(w.Models, []string{served, ringModel}) {
		t.Fatalf("driver serves %v", w.Models)
	}
	// Registering again keeps the ring model on the driver's record.
	fx.send(t, m.Conn, &relaymsg.Register{Models: []string{served, ringModel}})
	if w, _ := fx.st.GetWorker(t.Context(), m.Conn); !slices.Equal(w.Models, []string{served, ringModel}) || !fx.candidates(t).Serving {
		t.Fatalf("after registering again: %v, %+v", w.Models, fx.candidates(t))
	}
	// Registering without the ring model leaves the ring.
	fx.send(t, m.Conn, &relaymsg.Register{Models: []string{served}})
	if w, _ := fx.st.GetWorker(t.Context(), m.Conn); !slices.Equal(w.Models, []string{served}) || !reflect.DeepEqual(fx.candidates(t), rings.State{Model: ringModel}) {
		t.Fatalf("after dropping the ring model: %v, %+v", w.Models, fx.candidates(t))
	}
	fx.posts.take(t, m.Conn)
	// Back in, formed again, then gone with the connection.
	fx.send(t, m.Conn, &relaymsg.Register{Models: []string{served, ringModel}})
	fx.send(t, m.Conn, m.Announce(ringModel, hash, 9<<20, 100, t0))
	fx.timers.fire()
	a = fx.posts.take(t, m.Conn)[0].(*relaymsg.RingAssign)
	ready, err = m.Accept(a, ringtest.Distance, t0)
	must(t, err)
	fx.send(t, m.Conn, ready)
	if !fx.candidates(t).Serving {
		t.Fatalf("%+v", fx.candidates(t))
	}
	fx.disconnect(t, m.Conn)
	if st := fx.candidates(t); !reflect.DeepEqual(st, rings.State{Model: ringModel}) {
		t.Fatalf("after the disconnect: %+v", st)
	}
	if _, ok := fx.f.JobRing(ringModel, "t"); ok {
		t.Fatal("a ring whose only member left still takes jobs")
	}
}
