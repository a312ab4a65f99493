package rings_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/rings"
	"github.com/c0mpute/c0mpute/functions/rings/ringtest"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
)

// Load checks a ring model's published files before offering it: each
// failure names the URL at fault, and the model is not offered until a
// later Load finds the files right.
func TestLoadChecksPublishedFiles(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shape  ringtest.Shape
		min    int
		break_ func(p *ringtest.Published)
		want   []string
	}{
		{"no manifest", shape, 1, func(p *ringtest.Published) { p.Set("manifest.json", nil) }, []string{"/manifest.json", "404"}},
		{"no descriptor", shape, 1, func(p *ringtest.Published) { p.Set("model.json", nil) }, []string{"/model.json", "404"}},
		{"manifest altered after signing", shape, 1, func(p *ringtest.Published) {
			m := p.Manifest
			m.Name = "other"
			p.Set("manifest.json", mustMarshal(t, m))
		}, []string{"/manifest.json", "signature"}},
		{"manifest not JSON", shape, 1, func(p *ringtest.Published) { p.Set("manifest.json", []byte("<html>")) }, []string{"/manifest.json", "invalid"}},
		{"descriptor of another manifest", shape, 1, func(p *ringtest.Published) {
			d := p.Model
			d.Hash[0] ^= 1
			d.Sign(p.Publisher)
			p.Set("model.json", mustMarshal(t, d))
		}, []string{"/model.json does not describe", "/manifest.json", "descriptor names model"}},
		{"descriptor by another publisher", shape, 1, func(p *ringtest.Published) {
			d := p.Model
			d.Sign(ringtest.Key("impostor"))
			p.Set("model.json", mustMarshal(t, d))
		}, []string{"/model.json does not describe", "published by"}},
		{"descriptor budgets less than the blobs", shape, 1, func(p *ringtest.Published) {
			d := p.Model
			d.LayerBytes = 100
			d.Sign(p.Publisher)
			p.Set("model.json", mustMarshal(t, d))
		}, []string{"/model.json does not describe", "budgets 100"}},
		{"more min_stages than layers", shape, 7, func(*ringtest.Published) {}, []string{"min_stages 7", "6 layers"}},
		{"a manifest no assignment can carry", ringtest.Shape{Layers: 400, BlobBytes: 8, LayerBytes: 8, EmbedBytes: 8, HeadBytes: 8, ActivationBytes: 8},
			1, func(*ringtest.Published) {}, []string{"/manifest.json", "over the 16384"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub := ringtest.Publish(t, ringModel, tc.shape)
			tc.break_(pub)
			f, _, _ := newFormer(t, pub, tc.min)
			err := f.Load(t.Context())
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if !strings.Contains(err.Error(), pub.URL) && tc.min == 1 {
				t.Errorf("error %q does not name %s", err, pub.URL)
			}
			if o := f.Offers([]string{ringModel}); len(o) != 0 || len(f.Rings()) != 0 {
				t.Fatalf("offered %+v, rings %+v", o, f.Rings())
			}
			if tc.min != 1 || tc.shape.Layers != shape.Layers {
				return
			}
			// Published right, a second Load offers it.
			pub.Set("manifest.json", mustMarshal(t, pub.Manifest))
			pub.Set("model.json", mustMarshal(t, pub.Model))
			if err := f.Load(t.Context()); err != nil {
				t.Fatal(err)
			}
			if o := f.Offers([]string{ringModel}); len(o) != 1 || o[0] != (relaymsg.RingOffer{Model: ringModel, Hash: pub.Manifest.Hash(), BlobURL: pub.URL}) {
				t.Fatalf("offers %+v", o)
			}
		})
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	must(t, err)
	return b
}

func newFormer(t *testing.T, pub *ringtest.Published, minStages int) (*rings.Former, *embedded.Store, *postbox) {
	t.Helper()
	st, err := embedded.Open(t.TempDir()+"/c0.db", embedded.WithNoSync())
	must(t, err)
	t.Cleanup(func() { _ = st.Close() })
	cat, err := catalog.New([]catalog.Model{{ID: ringModel, Price: 30, Ring: &catalog.RingSpec{BlobURL: pub.URL, MinStages: minStages, MaxStages: 8, ContextTokens: 256}}})
	must(t, err)
	posts := &postbox{by: map[string][][]byte{}, sent: make(chan struct{}, 16)}
	f, err := rings.New(rings.Config{Key: ringtest.Key("gateway"), Catalog: cat, Post: posts, Store: st,
		Dispatch: &dispatchLog{}, Log: slog.New(slog.DiscardHandler), Debounce: time.Millisecond, AllowPrivateAddrs: true})
	must(t, err)
	t.Cleanup(f.Close)
	return f, st, posts
}

// With the real clock (time.AfterFunc), a lone member's ring forms once
// the debounce passes.
func TestRealTimers(t *testing.T) {
	ctx := t.Context()
	pub := ringtest.Publish(t, ringModel, shape)
	f, st, posts := newFormer(t, pub, 1)
	must(t, f.Load(ctx))
	m := ringtest.NewMember(0)
	must(t, st.PutWorker(ctx, store.Worker{Conn: m.Conn, AccountID: m.Account, Pubkey: m.Pubkey(), State: store.WorkerIdle, ConnectedAt: t0}))
	w, err := st.RegisterWorker(ctx, m.Conn, nil, nil)
	must(t, err)
	f.Register(ctx, w, []string{ringModel})
	if reply := f.Message(ctx, m.Conn, m.Announce(ringModel, pub.Manifest.Hash(), 9<<20, 100, time.Now())); reply != nil {
		t.Fatalf("announce: %s", reply)
	}
	next := func() any {
		t.Helper()
		select {
		case <-posts.sent:
		case <-time.After(30 * time.Second):
			t.Fatal("nothing posted in 30 s")
		}
		posts.mu.Lock()
		defer posts.mu.Unlock()
		b := posts.by[m.Conn][0]
		posts.by[m.Conn] = posts.by[m.Conn][1:]
		msg, err := relaymsg.Decode(b)
		must(t, err)
		return msg
	}
	a, ok := next().(*relaymsg.RingAssign)
	if !ok {
		t.Fatal("no assignment")
	}
	r, err := m.Accept(a, ringtest.Distance, time.Now())
	must(t, err)
	if reply := f.Message(ctx, m.Conn, r); reply != nil {
		t.Fatalf("ready: %s", reply)
	}
	if _, ok := next().(*relaymsg.RingServe); !ok {
		t.Fatal("no ring_serve")
	}
	if got, err := st.GetWorker(ctx, m.Conn); err != nil || !got.Serves(ringModel) {
		t.Fatalf("record %+v, %v", got, err)
	}
}
