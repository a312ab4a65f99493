package ringmember

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/shardblob"
)

// blobServer serves a model's signed manifest and its blobs, as the blob
// URL a gateway offers does. While a gate is armed, blob requests wait
// for it to be released (or for their client to give up).
type blobServer struct {
	srv      *httptest.Server
	m        *testModel
	manifest []byte

	mu       sync.Mutex
	gate     chan struct{}
	blocked  int            // requests waiting at a gate
	open     map[string]int // blob requests under way, by blob
	requests int            // blob requests in all
	overlap  bool           // two requests of one blob were under way at once
}

func newBlobServer(t *testing.T, m *testModel) *blobServer {
	t.Helper()
	b, err := json.Marshal(&m.pub.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	bs := &blobServer{m: m, manifest: b, open: map[string]int{}}
	bs.srv = httptest.NewServer(http.HandlerFunc(bs.serve))
	t.Cleanup(bs.srv.Close)
	return bs
}

func (bs *blobServer) serve(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/")
	if name == shardblob.ManifestFile {
		_, _ = w.Write(bs.manifest)
		return
	}
	if _, err := hex.DecodeString(name); err != nil || len(name) != 64 {
		http.NotFound(w, r)
		return
	}
	bs.mu.Lock()
	bs.requests++
	if bs.open[name]++; bs.open[name] > 1 {
		bs.overlap = true
	}
	gate := bs.gate
	if gate != nil {
		bs.blocked++
	}
	bs.mu.Unlock()
	defer func() {
		bs.mu.Lock()
		bs.open[name]--
		bs.mu.Unlock()
	}()
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
		}
		bs.mu.Lock()
		bs.blocked--
		bs.mu.Unlock()
		if r.Context().Err() != nil {
			return
		}
	}
	http.ServeFile(w, r, filepath.Join(bs.m.blobs, name))
}

// arm makes blob requests wait until release is called.
func (bs *blobServer) arm(t *testing.T) (release func()) {
	g := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(g) }) }
	t.Cleanup(release) // before the server's Close, which waits for requests
	bs.mu.Lock()
	bs.gate = g
	bs.mu.Unlock()
	return release
}

// disarm lets new requests through (those at the gate still wait).
func (bs *blobServer) disarm() {
	bs.mu.Lock()
	bs.gate = nil
	bs.mu.Unlock()
}

func (bs *blobServer) state() (blocked, requests int, overlap bool) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return bs.blocked, bs.requests, bs.overlap
}

// offer is the ring offer of the model under the id model.
func (bs *blobServer) offer(model string) relaymsg.RingOffer {
	return relaymsg.RingOffer{Model: model, Hash: bs.m.pub.Manifest.Hash(), BlobURL: bs.srv.URL}
}

// fakeConn is a relay connection as a member sees it: it keeps every
// message the member sends, encoded as the agent would encode it.
type fakeConn struct {
	mu   sync.Mutex
	msgs []any
	note chan struct{}
}

func newFakeConn() *fakeConn { return &fakeConn{note: make(chan struct{}, 1)} }

func (c *fakeConn) send(m any) error {
	if _, err := relaymsg.Encode(m); err != nil {
		return err
	}
	c.mu.Lock()
	c.msgs = append(c.msgs, m)
	c.mu.Unlock()
	select {
	case c.note <- struct{}{}:
	default:
	}
	return nil
}

func (c *fakeConn) all() []any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]any(nil), c.msgs...)
}

// wait waits until the messages sent satisfy cond.
func (c *fakeConn) wait(t testing.TB, what string, cond func([]any) bool) {
	t.Helper()
	limit := time.NewTimer(waitLimit)
	defer limit.Stop()
	for !cond(c.all()) {
		select {
		case <-c.note:
		case <-limit.C:
			t.Fatalf("waited %s for %s; sent: %s", waitLimit, what, describeMsgs(c.all()))
		}
	}
}

func describeMsgs(msgs []any) string {
	var b strings.Builder
	for _, m := range msgs {
		switch m := m.(type) {
		case *relaymsg.RingRefuse:
			b.WriteString("refuse(" + m.Model + " " + m.Code + ": " + m.Message + ") ")
		case *relaymsg.RingReady:
			b.WriteString("ready(" + m.Model + ") ")
		default:
			b.WriteString(fmt.Sprintf("%T ", m))
		}
	}
	return b.String()
}

// msgsOf are the messages of type T.
func msgsOf[T any](msgs []any) []T {
	var out []T
	for _, m := range msgs {
		if v, ok := m.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// has reports whether a message of type T satisfies ok.
func has[T any](msgs []any, ok func(T) bool) bool {
	for _, m := range msgsOf[T](msgs) {
		if ok(m) {
			return true
		}
	}
	return false
}

// newTestMember starts a member with its own blob cache; announces are
// not repeated unless change sets AnnounceRetry.
func newTestMember(t *testing.T, key ed25519.PrivateKey, change func(*MemberConfig)) *Member {
	t.Helper()
	cfg := MemberConfig{Key: key, Dir: t.TempDir(), Memory: 1 << 30, Listen: "127.0.0.1:0", Advertise: "127.0.0.1:0",
		Uplink: 1_000_000_000, Workers: 1, AnnounceRetry: time.Hour, Log: testLog(t)}
	if change != nil {
		change(&cfg)
	}
	mb, err := NewMember(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mb.Close() })
	return mb
}

// tasksOf counts a member's tasks under way: assignments, probes and
// announce loops.
func tasksOf(mb *Member) (assigns, probes, announces int) {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return len(mb.assigns), len(mb.probes), len(mb.announces)
}

// oneStage is a one-stage plan of the model for a member, as a gateway
// assigns it (variant makes another plan), and the testRing to settle
// its jobs with.
func oneStage(t *testing.T, bs *blobServer, model string, key ed25519.PrivateKey, mb *Member, variant string) (*relaymsg.RingAssign, *testRing) {
	t.Helper()
	keys := []ed25519.PrivateKey{key}
	in, plan, hash := planInputs(t, bs.m, keys, 1, 0, variant)
	a := &relaymsg.RingAssign{Model: model, Hash: hash, Plan: plan, Inputs: in, Manifest: bs.m.pub.Manifest, BlobURL: bs.srv.URL,
		Peers: []relaymsg.RingPeer{{Node: shard.KeyOf(key), Addr: mb.Advertise()}}}
	return a, &testRing{m: bs.m, plan: plan, hash: hash, keys: keys}
}

func readyFor(hash shard.Hash) func([]any) bool {
	return func(msgs []any) bool {
		return has(msgs, func(r *relaymsg.RingReady) bool { return r.Acceptance.Plan == hash })
	}
}

func refusedFor(model, code string, n int) func([]any) bool {
	return func(msgs []any) bool {
		k := 0
		for _, r := range msgsOf[*relaymsg.RingRefuse](msgs) {
			if r.Model == model && r.Code == code {
				k++
			}
		}
		return k >= n
	}
}

// mentions reports whether any message names the plan hash.
func mentions(msgs []any, hash shard.Hash) bool {
	return has(msgs, func(r *relaymsg.RingReady) bool { return r.Acceptance.Plan == hash }) ||
		has(msgs, func(r *relaymsg.RingRefuse) bool { return r.Hash == hash })
}

// serveOne has mb take a one-stage plan of model and serve it as the
// ring's driver.
func serveOne(t *testing.T, bs *blobServer, conn *fakeConn, model string, key ed25519.PrivateKey, mb *Member, variant string) *testRing {
	t.Helper()
	a, tr := oneStage(t, bs, model, key, mb, variant)
	mb.Handle(a)
	conn.wait(t, "the member's ready", readyFor(a.Hash))
	mb.Handle(&relaymsg.RingServe{Model: model, Hash: a.Hash})
	if !mb.Drives(model) {
		t.Fatal("the member does not drive the ring it serves")
	}
	return tr
}

// memberJob is a job of the ring model as the relay hands it over.
func memberJob(t *testing.T, tr *testRing, model string, req *oaiwire.ChatRequest) (*relaymsg.Job, Job) {
	t.Helper()
	job, _ := tr.ringJob(t)
	var tk [32]byte
	if _, err := rand.Read(tk[:]); err != nil {
		t.Fatal(err)
	}
	rj := job.Ring
	return &relaymsg.Job{Job: job.ID, ReplyTo: "listener", Model: model, Request: *req, Ticket: base64.RawURLEncoding.EncodeToString(tk[:]), Ring: &rj}, job
}

// TestAttachKeepsPlans: a new relay connection (the agent rolls its
// connection while the old one's jobs drain) neither drops the plan
// served nor the job running on it: the job completes, settles, the
// member still drives the ring, and the new connection gets the
// announce.
func TestAttachKeepsPlans(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	bs := newBlobServer(t, m)
	key := testKey("member-attach")
	mb := newTestMember(t, key, nil)
	conn := newFakeConn()
	mb.Attach([]relaymsg.RingOffer{bs.offer("ring-a")}, conn.send)
	tr := serveOne(t, bs, conn, "ring-a", key, mb, "")
	req := greedy(prompts[0], 12, true)
	rjob, job := memberJob(t, tr, "ring-a", req)
	c := chatResult{job: job, at: time.Now()}
	conn2 := newFakeConn()
	res, done, err := mb.Chat(context.Background(), rjob, func(d oaiwire.Delta) error {
		if c.Deltas = append(c.Deltas, d); len(c.Deltas) == 2 {
			mb.Attach([]relaymsg.RingOffer{bs.offer("ring-a")}, conn2.send)
		}
		return nil
	})
	c.Result, c.done = res, done
	if err != nil {
		c.Error = err.Error()
	}
	if diff := same(c, m.reference(req)); diff != "" {
		t.Fatalf("the job across the new connection: %s", diff)
	}
	tr.verify(t, c)
	if !mb.Drives("ring-a") {
		t.Fatal("the member stopped driving its ring at the new connection")
	}
	conn2.wait(t, "the announce on the new connection", func(msgs []any) bool {
		return has(msgs, func(a *relaymsg.RingAnnounce) bool { return a.Model == "ring-a" })
	})
}

// TestAnnounceRetries: an announce no probe or assignment follows (the
// relay may have refused it) is sent again, the same signed capability
// each time, until a probe of its model comes, and at most maxAnnounces
// times.
func TestAnnounceRetries(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	bs := newBlobServer(t, m)
	announces := func(msgs []any) []*relaymsg.RingAnnounce { return msgsOf[*relaymsg.RingAnnounce](msgs) }
	t.Run("until probed", func(t *testing.T) {
		key := testKey("member-announce-probed")
		mb := newTestMember(t, key, func(c *MemberConfig) { c.AnnounceRetry = 20 * time.Millisecond })
		conn := newFakeConn()
		mb.Attach([]relaymsg.RingOffer{bs.offer("ring-a")}, conn.send)
		conn.wait(t, "a second announce", func(msgs []any) bool { return len(announces(msgs)) >= 2 })
		mb.Handle(&relaymsg.RingProbe{Model: "ring-a", Peers: []relaymsg.RingPeer{{Node: shard.KeyOf(key), Addr: mb.Advertise()}}})
		waitFor(t, "the announce loop to end", func() bool { _, _, n := tasksOf(mb); return n == 0 })
		got := announces(conn.all())
		if len(got) >= maxAnnounces {
			t.Fatalf("%d announces: the probe did not stop them", len(got))
		}
		for _, a := range got[1:] {
			if a.Capability.Sig != got[0].Capability.Sig || a.Advertise != got[0].Advertise {
				t.Fatal("an announce sent again carries another capability")
			}
		}
		conn.wait(t, "the probe's row", func(msgs []any) bool { return len(msgsOf[*relaymsg.RingRTT](msgs)) == 1 })
	})
	t.Run("at most maxAnnounces", func(t *testing.T) {
		mb := newTestMember(t, testKey("member-announce-unanswered"), func(c *MemberConfig) { c.AnnounceRetry = time.Millisecond })
		conn := newFakeConn()
		mb.Attach([]relaymsg.RingOffer{bs.offer("ring-a")}, conn.send)
		waitFor(t, "the announce loop to end", func() bool { _, _, n := tasksOf(mb); return n == 0 })
		if n := len(announces(conn.all())); n != maxAnnounces {
			t.Fatalf("%d announces, want %d", n, maxAnnounces)
		}
	})
}

// TestCloseWaitsForChat: Member.Close waits for a job running on the
// ring it drives before it closes the layers that job reads.
func TestCloseWaitsForChat(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	bs := newBlobServer(t, m)
	key := testKey("member-close")
	mb := newTestMember(t, key, nil)
	conn := newFakeConn()
	mb.Attach([]relaymsg.RingOffer{bs.offer("ring-a")}, conn.send)
	tr := serveOne(t, bs, conn, "ring-a", key, mb, "")
	rjob, _ := memberJob(t, tr, "ring-a", greedy(prompts[0], 24, true))
	closed := make(chan error, 1)
	var returned atomic.Bool
	n := 0
	_, done, err := mb.Chat(context.Background(), rjob, func(oaiwire.Delta) error {
		if n++; n == 2 {
			go func() {
				err := mb.Close()
				returned.Store(true)
				closed <- err
			}()
			waitFor(t, "Close to stop the ring and wait for the job", func() bool { return returned.Load() || mb.srv.waitingForChats() })
			if returned.Load() {
				t.Error("Close returned (and closed the layers) while a job ran on them")
			}
		}
		return nil
	})
	if !errors.Is(err, ErrNotServing) || done != nil {
		t.Fatalf("the job of a closed member: %v, %v; want ErrNotServing", err, done)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Close did not return once the job ended")
	}
	if _, _, err := mb.Chat(context.Background(), rjob, func(oaiwire.Delta) error { return nil }); !errors.Is(err, ErrNotDriving) {
		t.Fatalf("a job after Close: %v", err)
	}
}

// TestAssignments: an assignment voided (disbanded) while it pulls, or
// cancelled by a new relay connection, stops and never serves, so it
// cannot replace the newer plan; while the member holds or takes a plan
// of one ring model, an assignment of another is refused "busy", and is
// taken once that plan is disbanded.
func TestAssignments(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	bs := newBlobServer(t, m)
	key := testKey("member-assignments")
	mb := newTestMember(t, key, nil)
	conn := newFakeConn()
	offers := []relaymsg.RingOffer{bs.offer("ring-a"), bs.offer("ring-b")}
	mb.Attach(offers, conn.send)
	conn.wait(t, "both announces", func(msgs []any) bool { return len(msgsOf[*relaymsg.RingAnnounce](msgs)) == 2 })
	served := func() shard.Hash {
		if r := mb.srv.current(); r != nil {
			return r.hash
		}
		return shard.Hash{}
	}
	noAssigns := func() bool { a, _, _ := tasksOf(mb); return a == 0 }

	release := bs.arm(t)
	p1, _ := oneStage(t, bs, "ring-a", key, mb, "p1")
	mb.Handle(p1)
	waitFor(t, "p1's pull to reach the blob server", func() bool { b, _, _ := bs.state(); return b >= 1 })
	b1, _ := oneStage(t, bs, "ring-b", key, mb, "b1")
	mb.Handle(b1)
	conn.wait(t, "ring-b refused while ring-a is being taken", refusedFor("ring-b", "busy", 1))
	mb.Handle(&relaymsg.RingDisband{Model: "ring-a", Hash: p1.Hash, Reason: "test: a member left"})
	waitFor(t, "p1's assignment to stop", noAssigns)
	bs.disarm()
	p2, _ := oneStage(t, bs, "ring-a", key, mb, "p2")
	mb.Handle(p2)
	conn.wait(t, "p2's ready", readyFor(p2.Hash))
	release() // a p1 still pulling would go on now, and serve
	waitFor(t, "no assignment under way", noAssigns)
	if served() != p2.Hash || mentions(conn.all(), p1.Hash) {
		t.Fatalf("serving %s after p1 was voided; p1 answered: %v", served(), mentions(conn.all(), p1.Hash))
	}
	mb.Handle(b1)
	conn.wait(t, "ring-b refused while ring-a is held", refusedFor("ring-b", "busy", 2))

	// A new connection cancels an assignment under way (its blobs gone
	// from the cache, p3 pulls them again) and keeps the plan served.
	if err := os.RemoveAll(mb.dir(bs.m.pub.Manifest.Hash())); err != nil {
		t.Fatal(err)
	}
	release = bs.arm(t)
	p3, _ := oneStage(t, bs, "ring-a", key, mb, "p3")
	mb.Handle(p3)
	waitFor(t, "p3's pull to reach the blob server", func() bool { b, _, _ := bs.state(); return b >= 1 })
	conn2 := newFakeConn()
	mb.Attach(offers, conn2.send)
	waitFor(t, "p3's assignment to stop", noAssigns)
	bs.disarm()
	release()
	if served() != p2.Hash || mentions(conn.all(), p3.Hash) || mentions(conn2.all(), p3.Hash) {
		t.Fatalf("serving %s after the new connection; p3 answered: %v", served(), mentions(append(conn.all(), conn2.all()...), p3.Hash))
	}

	mb.Handle(&relaymsg.RingDisband{Model: "ring-a", Hash: p2.Hash, Reason: "test: a member left"})
	waitFor(t, "p2 to be dropped", func() bool { return served() == shard.Hash{} })
	b2, _ := oneStage(t, bs, "ring-b", key, mb, "b2")
	mb.Handle(b2)
	conn2.wait(t, "ring-b's ready once ring-a is disbanded", readyFor(b2.Hash))
}

// TestPullsOneAtATime: two pulls into one model directory never fetch a
// blob at once (they would share its .part file): the second waits for
// the first, then finds the blob there.
func TestPullsOneAtATime(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	bs := newBlobServer(t, m)
	mb := newTestMember(t, testKey("member-pulls"), nil)
	blobs, err := m.pub.Manifest.Blobs(2, 3)
	if err != nil {
		t.Fatal(err)
	}
	src := shard.HTTPSource{Base: bs.srv.URL, Client: http.DefaultClient}
	dir := mb.dir(m.pub.Manifest.Hash())
	release := bs.arm(t)
	errs := make(chan error, 2)
	ctx := context.Background()
	go func() { errs <- mb.pull(ctx, src, dir, blobs) }()
	waitFor(t, "the first pull at the blob server", func() bool { b, _, _ := bs.state(); return b == 1 })
	go func() { errs <- mb.pull(ctx, src, dir, blobs) }()
	waitFor(t, "the second pull to wait or fetch", func() bool {
		_, n, _ := bs.state()
		return n > 1 || mb.pulls.waiters(dir) == 1
	})
	if _, n, _ := bs.state(); n > 1 {
		t.Fatal("the second pull fetched the blob while the first was fetching it")
	}
	release()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if _, n, overlap := bs.state(); n != 1 || overlap {
		t.Fatalf("%d requests for one blob (overlapping: %v), want 1", n, overlap)
	}
	if _, err := os.Stat(filepath.Join(dir, blobs[0].Hash.String())); err != nil {
		t.Fatal(err)
	}
}

// blackhole accepts TCP connections and never answers: a peer whose
// address swallows dials.
type blackhole struct {
	ln       net.Listener
	mu       sync.Mutex
	accepted int
	open     int
}

func newBlackhole(t *testing.T) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln}
	var conns sync.WaitGroup
	var mu sync.Mutex
	var all []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range all {
			c.Close()
		}
		mu.Unlock()
		conns.Wait()
	})
	conns.Add(1)
	go func() {
		defer conns.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			all = append(all, c)
			mu.Unlock()
			b.mu.Lock()
			b.accepted++
			b.open++
			b.mu.Unlock()
			conns.Add(1)
			go func() {
				defer conns.Done()
				_, _ = io.Copy(io.Discard, c) // until the dialler gives up
				b.mu.Lock()
				b.open--
				b.mu.Unlock()
			}()
		}
	}()
	return b
}

func (b *blackhole) counts() (accepted, open int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.accepted, b.open
}

// TestProbe: a probe dials every peer at once within its deadline and
// answers with a signed row of the peers reached, leaving out those that
// refuse or never answer; a newer probe of the model cancels the one
// under way, whose row is never sent.
func TestProbe(t *testing.T) {
	good, err := NewServer(testKey("probe-good-peer"), "127.0.0.1:0", testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := gone.Addr().String()
	gone.Close()
	goodPeer := relaymsg.RingPeer{Node: good.Key(), Addr: good.Addr().String()}
	rows := func(msgs []any) []*relaymsg.RingRTT { return msgsOf[*relaymsg.RingRTT](msgs) }
	t.Run("unreachable peers left out", func(t *testing.T) {
		key := testKey("member-probe")
		good.Allow(shard.KeyOf(key))
		mb := newTestMember(t, key, func(c *MemberConfig) { c.ProbeTimeout = time.Second })
		conn := newFakeConn()
		mb.Attach(nil, conn.send)
		peers := []relaymsg.RingPeer{{Node: shard.KeyOf(key), Addr: mb.Advertise()}}
		for i := range 3 {
			peers = append(peers, relaymsg.RingPeer{Node: shard.KeyOf(testKey("probe-blackhole-" + string(rune('a'+i)))), Addr: newBlackhole(t).ln.Addr().String()})
		}
		peers = append(peers, relaymsg.RingPeer{Node: shard.KeyOf(testKey("probe-refused")), Addr: refused}, goodPeer)
		mb.Handle(&relaymsg.RingProbe{Model: "ring-a", Peers: peers})
		conn.wait(t, "the probe's row", func(msgs []any) bool { return len(rows(msgs)) == 1 })
		row := rows(conn.all())[0]
		if err := row.Row.Check(); err != nil || row.Row.From != shard.KeyOf(key) || row.Model != "ring-a" {
			t.Fatalf("row %+v: %v", row, err)
		}
		if len(row.Row.Peers) != 1 || row.Row.Peers[0].To != good.Key() || row.Row.Peers[0].Micros < 1 {
			t.Fatalf("row peers %+v, want the reachable peer only", row.Row.Peers)
		}
	})
	t.Run("a newer probe cancels", func(t *testing.T) {
		key := testKey("member-probe-again")
		good.Allow(shard.KeyOf(key))
		mb := newTestMember(t, key, func(c *MemberConfig) { c.ProbeTimeout = time.Minute })
		conn := newFakeConn()
		mb.Attach(nil, conn.send)
		bh := newBlackhole(t)
		mb.Handle(&relaymsg.RingProbe{Model: "ring-a", Peers: []relaymsg.RingPeer{{Node: shard.KeyOf(testKey("probe-blackhole")), Addr: bh.ln.Addr().String()}}})
		waitFor(t, "the first probe's dial", func() bool { a, _ := bh.counts(); return a >= 1 })
		mb.Handle(&relaymsg.RingProbe{Model: "ring-a", Peers: []relaymsg.RingPeer{goodPeer}})
		conn.wait(t, "the second probe's row", func(msgs []any) bool { return len(rows(msgs)) >= 1 })
		waitFor(t, "the first probe's dial to be dropped", func() bool { _, o := bh.counts(); return o == 0 })
		if err := mb.Close(); err != nil {
			t.Fatal(err)
		}
		got := rows(conn.all())
		if len(got) != 1 || len(got[0].Row.Peers) != 1 || got[0].Row.Peers[0].To != good.Key() {
			t.Fatalf("%d rows, the first %+v: want the second probe's only", len(got), got[0].Row)
		}
	})
}

// TestDisbandReturnsAtOnce: a disband is handled without waiting for the
// ring to stop (Handle runs on the relay's read goroutine): the plan is
// forgotten at once, and the ring stops in a goroutine of its own, once
// a change of the plan served under way is done.
func TestDisbandReturnsAtOnce(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	bs := newBlobServer(t, m)
	key := testKey("member-disband")
	mb := newTestMember(t, key, nil)
	conn := newFakeConn()
	mb.Attach([]relaymsg.RingOffer{bs.offer("ring-a")}, conn.send)
	tr := serveOne(t, bs, conn, "ring-a", key, mb, "")
	mb.opMu.Lock() // a change of the plan served, under way
	handled := make(chan struct{})
	go func() {
		mb.Handle(&relaymsg.RingDisband{Model: "ring-a", Hash: tr.hash, Reason: "test: a member left"})
		close(handled)
	}()
	select {
	case <-handled:
	case <-time.After(waitLimit):
		mb.opMu.Unlock()
		t.Fatal("Handle(RingDisband) waited for the ring to stop")
	}
	if mb.Drives("ring-a") {
		t.Error("the disbanded ring is still driven")
	}
	if mb.srv.current() == nil {
		t.Error("the ring stopped while a change of the plan served was under way")
	}
	mb.opMu.Unlock()
	waitFor(t, "the ring to stop", func() bool { return mb.srv.current() == nil })
}

// TestNewMemberRefusesBadConfig: a negative probe timeout or announce
// retry is refused with what to set instead.
func TestNewMemberRefusesBadConfig(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*MemberConfig)
		want   string
	}{
		{"probe timeout", func(c *MemberConfig) { c.ProbeTimeout = -time.Second }, "probe timeout"},
		{"announce retry", func(c *MemberConfig) { c.AnnounceRetry = -time.Second }, "announce retry"},
		{"key", func(c *MemberConfig) { c.Key = c.Key[:7] }, "identity key"},
		{"layer override", func(c *MemberConfig) { c.LayerMicrosOverride = -1 }, "layer time override"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := MemberConfig{Key: testKey("member-config"), Dir: t.TempDir(), Listen: "127.0.0.1:0", Advertise: "127.0.0.1:0"}
			c.change(&cfg)
			mb, err := NewMember(cfg)
			if err == nil {
				mb.Close()
				t.Fatal("a bad config was taken")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want an error about the %s", err, c.want)
			}
		})
	}
}
