package ringmember

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/shardblob"
	"github.com/c0mpute/c0mpute/workerd/stagenet"
)

// benchModel opens the test model's bench layer (the middle one) as a
// member measuring it would.
func benchModel(t *testing.T, m *testModel) (*engine.Model, int) {
	t.Helper()
	man := &m.pub.Manifest
	k := len(man.Layers) / 2
	p, err := shardblob.Open(stageDir(t, m, k, k+1), man, k, k+1, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p.Model(), k
}

// announced attaches a member offering ring-a and waits for its announce,
// by which time it has measured and keeps its bench layer open.
func announced(t *testing.T, bs *blobServer, mb *Member) (*fakeConn, shard.Capability) {
	t.Helper()
	conn := newFakeConn()
	mb.Attach([]relaymsg.RingOffer{bs.offer("ring-a")}, conn.send)
	conn.wait(t, "the announce", func(msgs []any) bool { return len(msgsOf[*relaymsg.RingAnnounce](msgs)) >= 1 })
	return conn, msgsOf[*relaymsg.RingAnnounce](conn.all())[0].Capability
}

// TestProbeBench: a probe times each peer's bench layer and checks its
// replies bit for bit. An honest member is in the row with a positive
// layer time of the order of its own measurement; a peer whose replies
// differ in one byte, and a peer that answers no bench, are left out of
// the row entirely, as an unreachable peer is.
func TestProbeBench(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	bs := newBlobServer(t, m)
	hash := m.pub.Manifest.Hash()
	key := testKey("bench-prober")
	prober := newTestMember(t, key, nil)
	conn, _ := announced(t, bs, prober)
	honest := newTestMember(t, testKey("bench-honest"), nil)
	_, honestCap := announced(t, bs, honest)
	honest.srv.Allow(shard.KeyOf(key))

	mod, k := benchModel(t, m)
	var liarCalls atomic.Int32
	liar, err := NewServer(testKey("bench-liar"), "127.0.0.1:0", testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer liar.Close()
	liar.SetBench(func(ctx context.Context, model string, payload []byte) ([]byte, error) {
		liarCalls.Add(1)
		out, err := benchForward(ctx, mod, k, payload)
		if err != nil {
			return nil, err
		}
		out[len(out)-1] ^= 1 // one bit of the last value
		return out, nil
	})
	liar.Allow(shard.KeyOf(key))
	mute, err := NewServer(testKey("bench-mute"), "127.0.0.1:0", testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	mute.Allow(shard.KeyOf(key))

	prober.Handle(&relaymsg.RingProbe{Model: "ring-a", Peers: []relaymsg.RingPeer{
		{Node: shard.KeyOf(key), Addr: prober.Advertise()},
		{Node: honest.srv.Key(), Addr: honest.Advertise()},
		{Node: liar.Key(), Addr: liar.Addr().String()},
		{Node: mute.Key(), Addr: mute.Addr().String()},
	}})
	conn.wait(t, "the probe's row", func(msgs []any) bool { return len(msgsOf[*relaymsg.RingRTT](msgs)) == 1 })
	row := msgsOf[*relaymsg.RingRTT](conn.all())[0].Row
	if err := row.Check(); err != nil {
		t.Fatal(err)
	}
	if len(row.Peers) != 1 || row.Peers[0].To != honest.srv.Key() {
		t.Fatalf("row peers %+v, want the honest member only", row.Peers)
	}
	got, own := row.Peers[0].LayerMicros, honestCap.LayerMicros
	t.Logf("honest peer: measured itself at %d µs per layer, observed at %d µs (rtt %d µs); model %s", own, got, row.Peers[0].Micros, hash)
	if got < 1 {
		t.Fatalf("observed layer time %d µs, want a positive one", got)
	}
	// Loose on purpose (a shared, loaded CI machine): the observation is
	// the same layer's time, so of its order, not a fixed figure.
	if got > 20*own+5000 {
		t.Errorf("observed %d µs for a member that measured itself at %d µs: more than 20× + 5 ms", got, own)
	}
	if liarCalls.Load() != 1 {
		t.Errorf("the lying peer ran %d benches, want 1: a wrong reply is final", liarCalls.Load())
	}
}

// TestBenchRefusals: a bench frame is answered only for a model whose
// bench layer the member holds, and only for exactly one token of the
// hidden size, F32, at position 0; anything else is an error frame
// naming what is wrong, and no layer runs.
func TestBenchRefusals(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	bs := newBlobServer(t, m)
	mb := newTestMember(t, testKey("bench-refusals"), nil)
	announced(t, bs, mb)
	hash := m.pub.Manifest.Hash().String()
	dim := 256
	enc := func(h *engine.Hidden, dt engine.DType) []byte {
		b, err := engine.EncodeHidden(h, dt)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	one := enc(&engine.Hidden{Tokens: 1, Dim: dim, Data: make([]float32, dim)}, engine.F32)
	for _, c := range []struct {
		name, model string
		payload     []byte
		want        string
	}{
		{"ok", hash, one, ""},
		{"other model", strings.Repeat("0", 64), one, "no bench layer of that model"},
		{"two tokens", hash, enc(&engine.Hidden{Tokens: 2, Dim: dim, Data: make([]float32, 2*dim)}, engine.F32), "is 2 tokens of 256 values"},
		{"wrong size", hash, enc(&engine.Hidden{Tokens: 1, Dim: 8, Data: make([]float32, 8)}, engine.F32), "want 1 token of the model's hidden size 256"},
		{"position", hash, enc(&engine.Hidden{Pos: 3, Tokens: 1, Dim: dim, Data: make([]float32, dim)}, engine.F32), "at position 3"},
		{"f16", hash, enc(&engine.Hidden{Tokens: 1, Dim: dim, Data: make([]float32, dim)}, engine.F16), "not in F32 wire form"},
		{"garbage", hash, []byte("not hidden states"), "bench input"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := mb.serveBench(t.Context(), c.model, c.payload)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				h, err := engine.DecodeHidden(out)
				if err != nil || h.Tokens != 1 || h.Dim != dim {
					t.Fatalf("reply %v, %v: want one token of %d values", h, err, dim)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// TestBenchLimit: one connection gets at most MaxBenchPerConn bench
// replies; the next bench frame closes it without running the layer.
func TestBenchLimit(t *testing.T) {
	srv, err := NewServer(testKey("bench-limit-server"), "127.0.0.1:0", testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var calls atomic.Int32
	srv.SetBench(func(ctx context.Context, model string, payload []byte) ([]byte, error) {
		calls.Add(1)
		return payload, nil
	})
	client := testKey("bench-limit-client")
	srv.Allow(shard.KeyOf(client))
	ctx := t.Context()
	c, err := stagenet.Dial(ctx, srv.Addr().String(), client, srv.Key(), stagenet.WithMaxPayload(stagenet.MaxBenchPayload))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	model := strings.Repeat("ab", 32)
	for i := range MaxBenchPerConn + 1 {
		if err := c.Send(ctx, &stagenet.Frame{Kind: stagenet.KindBench, Job: model, Step: uint32(i), Payload: []byte{byte(i)}}); err != nil {
			t.Fatalf("bench %d: %v", i, err)
		}
		f, err := c.Recv(ctx)
		if i < MaxBenchPerConn {
			if err != nil || f.Kind != stagenet.KindBenchReply || f.Step != uint32(i) || len(f.Payload) != 1 || f.Payload[0] != byte(i) {
				t.Fatalf("bench %d: %+v, %v: want its reply", i, f, err)
			}
			continue
		}
		if err == nil {
			t.Fatalf("bench %d over the limit was answered: %+v", i, f)
		}
	}
	if n := calls.Load(); n != MaxBenchPerConn {
		t.Fatalf("the bench ran %d times, want %d", n, MaxBenchPerConn)
	}
	// A fresh connection may bench again: the limit is per connection.
	// A reply that differs from what the prober computed is a mismatch.
	prober, err := NewServer(client, "127.0.0.1:0", testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer prober.Close()
	r, err := prober.ProbeBench(ctx, srv.Key(), srv.Addr().String(), &BenchCheck{Model: model, Inputs: [][]byte{{7}}, Want: [][]byte{{7}}})
	if err != nil || r.Layer < 1 || r.RTT < 1 {
		t.Fatalf("a fresh connection's bench: %+v, %v", r, err)
	}
	if _, err := prober.ProbeBench(ctx, srv.Key(), srv.Addr().String(), &BenchCheck{Model: model, Inputs: [][]byte{{7}}, Want: [][]byte{{8}}}); !errors.Is(err, ErrBenchMismatch) {
		t.Fatalf("a reply that differs: %v, want ErrBenchMismatch", err)
	}
	if _, err := prober.ProbeBench(ctx, srv.Key(), srv.Addr().String(), &BenchCheck{Model: model, Inputs: make([][]byte, MaxBenchPerConn+1), Want: make([][]byte, MaxBenchPerConn+1)}); err == nil || !strings.Contains(err.Error(), "want 1..8") {
		t.Fatalf("a probe asking more benches than a connection may: %v", err)
	}
}
