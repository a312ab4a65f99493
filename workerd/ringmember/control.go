package ringmember

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/shardblob"
	"github.com/c0mpute/c0mpute/workerd/speculate"
)

// MemberConfig configures a ring member's control side.
type MemberConfig struct {
	Key ed25519.PrivateKey
	// Dir caches pulled blobs, one folder per model hash.
	Dir string
	// Memory is the memory in bytes the member gives to layers.
	Memory int64
	// Listen is where the stage listener accepts other stages; Advertise
	// is the address they dial.
	Listen, Advertise string
	// Uplink is the declared upload bandwidth, bits per second.
	Uplink int64
	// Workers is the goroutines a matrix product uses (0: GOMAXPROCS).
	Workers int
	// ProbeTimeout bounds one probe: every peer is dialled at once and
	// retried a few times within it, and the row is sent when it ends
	// (default DefaultProbeTimeout). It also bounds the probe of a
	// plan's neighbours before accepting it.
	ProbeTimeout time.Duration
	// AnnounceRetry is the wait before an announce is sent again when no
	// probe or assignment of its model follows (a relay that refused it
	// says so only in a log line); it doubles each time up to
	// maxAnnounceRetry, for maxAnnounces announces in all (default
	// DefaultAnnounceRetry).
	AnnounceRetry time.Duration
	// LayerMicrosOverride, when positive, is announced as the per-layer
	// time instead of the measured one: for tests and operators who want
	// to state their speed. It buys nothing: peers time this member's
	// bench layer at every probe and the planner places and prices a
	// member at what they observed, its claim only when no one did.
	LayerMicrosOverride int64
	// Draft chooses the drafter this member uses when it drives a ring
	// of a model (speculative decoding; the zero value drafts by lookup).
	Draft speculate.Choice
	HTTP  *http.Client
	Log   *slog.Logger
	Now   func() time.Time
}

// Defaults of MemberConfig.
const (
	// DefaultProbeTimeout is well under the gateway's wait for the rows
	// of a probe (20 s), so a peer that cannot be reached costs the row
	// that peer only, never the member's place in the formation.
	DefaultProbeTimeout = 8 * time.Second
	// DefaultAnnounceRetry is the first wait before announcing again.
	DefaultAnnounceRetry = 2 * time.Second
)

const (
	// maxAnnounceRetry caps the wait between announces of a model.
	maxAnnounceRetry = time.Minute
	// maxAnnounces is how many times a model is announced on one
	// connection unless a probe or an assignment of it comes first.
	maxAnnounces = 10
	// probeTries is how often a peer is tried within a probe's deadline:
	// a peer learns of the probe from its own ring_probe, which may reach
	// it a moment later, and refuses this member until then.
	probeTries = 5
	// firstProbeRetry is the wait before a peer is tried again; it
	// doubles each try.
	firstProbeRetry = 100 * time.Millisecond
	// assignTimeout bounds an assignment: probing the neighbours, pulling
	// the blobs, loading them.
	assignTimeout = 30 * time.Minute
)

// Member is a workerd process's membership in the network's rings: it
// announces itself for every ring model the gateway offers, measures round
// trips when asked, accepts, pulls, loads and serves the stage a plan gives
// it, and drives the ring's jobs when it holds the first stage. The agent
// calls it (agent.Ring).
type Member struct {
	cfg MemberConfig
	srv *Server
	ctx context.Context
	end context.CancelFunc
	wg  sync.WaitGroup
	// opMu serialises the changes of the plan served (Server.Serve and
	// Drop) with the checks, under mu, that decide them: an assignment
	// voided or replaced while it pulled never replaces a newer plan.
	opMu  sync.Mutex
	pulls dirLocks
	// chats counts the Chat calls under way: Close waits for them before
	// it closes the Parts they read.
	chats sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	send      func(any) error
	gen       uint64                        // numbers the tasks below
	offers    map[string]relaymsg.RingOffer // by model id
	manifests map[shard.Hash]*shard.Manifest
	speed     map[shard.Hash]int64 // measured µs per layer
	plans     map[string]*memberPlan
	// The tasks under way, by model id: at most one of each kind per
	// model, a new one cancelling the one before.
	assigns, probes, announces map[string]*task
	// parts are the layer ranges loaded, kept open while the member
	// runs: a driver's job still running on a dropped plan may be using
	// one, and a re-formed ring usually gives a member the same range.
	parts map[partKey]*shardblob.Part
}

// task is an assignment, a probe or an announce loop under way for a
// model; a newer one of its kind, a disband of its plan, a new relay
// connection or Close cancels it.
type task struct {
	gen    uint64
	hash   shard.Hash // an assignment's plan
	cancel context.CancelFunc
}

// partKey names a loaded layer range of a model.
type partKey struct {
	model       shard.Hash
	first, last int
}

// memberPlan is the plan a member holds for a model, and the assignment
// (task generation) that installed it.
type memberPlan struct {
	hash    shard.Hash
	gen     uint64
	me      shard.Member
	serving bool
}

// maxManifestBytes bounds a fetched manifest.
const maxManifestBytes = shard.MaxInputsBytes

// NewMember starts a member's stage listener.
func NewMember(cfg MemberConfig) (*Member, error) {
	switch {
	case cfg.ProbeTimeout < 0:
		return nil, fmt.Errorf("ringmember: probe timeout %s: want a positive duration (or 0 for %s)", cfg.ProbeTimeout, DefaultProbeTimeout)
	case cfg.AnnounceRetry < 0:
		return nil, fmt.Errorf("ringmember: announce retry %s: want a positive duration (or 0 for %s)", cfg.AnnounceRetry, DefaultAnnounceRetry)
	case cfg.LayerMicrosOverride < 0 || cfg.LayerMicrosOverride > shard.MaxLayerMicros:
		return nil, fmt.Errorf("ringmember: layer time override %d µs: want 1..%d (or 0 to announce the measured time)", cfg.LayerMicrosOverride, shard.MaxLayerMicros)
	}
	if cfg.ProbeTimeout == 0 {
		cfg.ProbeTimeout = DefaultProbeTimeout
	}
	if cfg.AnnounceRetry == 0 {
		cfg.AnnounceRetry = DefaultAnnounceRetry
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 10 * time.Minute}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	srv, err := NewServer(cfg.Key, cfg.Listen, cfg.Log, WithDraft(cfg.Draft))
	if err != nil {
		return nil, err
	}
	// An advertised port 0 (or none) is the port the listener got.
	if host, port, err := net.SplitHostPort(cfg.Advertise); err != nil || port == "0" || port == "" {
		if err != nil {
			host = cfg.Advertise
		}
		_, got, _ := net.SplitHostPort(srv.Addr().String())
		cfg.Advertise = net.JoinHostPort(host, got)
	}
	ctx, end := context.WithCancel(context.Background())
	m := &Member{cfg: cfg, srv: srv, ctx: ctx, end: end, offers: map[string]relaymsg.RingOffer{},
		manifests: map[shard.Hash]*shard.Manifest{}, speed: map[shard.Hash]int64{}, plans: map[string]*memberPlan{},
		assigns: map[string]*task{}, probes: map[string]*task{}, announces: map[string]*task{},
		parts: map[partKey]*shardblob.Part{}}
	srv.SetBench(m.serveBench)
	return m, nil
}

// Addr is the stage listener's address; Advertise the address announced.
func (m *Member) Addr() string { return m.srv.Addr().String() }

// SpecStats are the counts of the verification loops this member ran as
// a ring's driver (Server.SpecStats), for its metrics.
func (m *Member) SpecStats() *speculate.Stats { return m.srv.SpecStats() }

// Advertise is the address other stages are told to dial.
func (m *Member) Advertise() string { return m.cfg.Advertise }

// Close stops every task and the plan served, waits for the Chat calls
// under way (they end promptly once the ring is stopped), and only then
// closes the layers loaded, which those calls read.
func (m *Member) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	m.end()
	m.wg.Wait()
	err := m.srv.Close()
	m.chats.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.plans = map[string]*memberPlan{}
	for k, p := range m.parts {
		p.Close()
		delete(m.parts, k)
	}
	return err
}

// goSafe runs fn in a goroutine that a panic does not take the daemon
// down with, and that Close waits for; none once the member is closed.
func (m *Member) goSafe(what string, fn func()) {
	m.mu.Lock()
	if m.closed {
		// Close is waiting for the goroutines, or has: start no more.
		m.mu.Unlock()
		return
	}
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		defer func() {
			if p := recover(); p != nil {
				m.cfg.Log.Error("ring member: panic", "in", what, "panic", p)
			}
		}()
		fn()
	}()
}

// startTask starts a task of a kind for model under m.mu, cancelling the
// one before it; timeout > 0 bounds it.
func (m *Member) startTask(tasks map[string]*task, model string, hash shard.Hash, timeout time.Duration) (context.Context, *task) {
	if t := tasks[model]; t != nil {
		t.cancel()
	}
	ctx, cancel := context.WithCancel(m.ctx)
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(m.ctx, timeout)
	}
	m.gen++
	t := &task{gen: m.gen, hash: hash, cancel: cancel}
	tasks[model] = t
	return ctx, t
}

// stopTasks cancels every task of a kind, under m.mu.
func stopTasks(tasks map[string]*task) {
	for model, t := range tasks {
		t.cancel()
		delete(tasks, model)
	}
}

// endTask forgets a task that returned, unless a newer one replaced it.
func (m *Member) endTask(tasks map[string]*task, model string, t *task) {
	m.mu.Lock()
	if tasks[model] == t {
		delete(tasks, model)
	}
	m.mu.Unlock()
	t.cancel()
}

// current reports whether t is still its model's task of its kind (not
// cancelled, nor replaced), under m.mu.
func (m *Member) currentLocked(tasks map[string]*task, model string, t *task) bool {
	return !m.closed && tasks[model] == t
}

func (m *Member) current(tasks map[string]*task, model string, t *task) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.currentLocked(tasks, model, t)
}

// Attach announces the member for each ring model offered on a newly
// registered connection, and sends everything from now on with send.
//
// The plans held go on being served: the agent keeps the connection it
// replaces until that connection's jobs are done (a relay connection is
// rolled every couple of hours), and the gateway voids a plan with a
// disband or replaces it with a new assignment. Only the plans of models
// no longer offered are dropped. What was under way for the old
// connection — assignments, probes, announces — is cancelled: the
// gateway asks again on the new one.
//
// Each model is announced again with backoff (AnnounceRetry, doubling,
// up to maxAnnounceRetry, maxAnnounces in all) until a probe or an
// assignment of it arrives: the relay answers a refused announce with an
// error message that does not reach the member.
func (m *Member) Attach(offers []relaymsg.RingOffer, send func(any) error) {
	type loop struct {
		ctx context.Context
		t   *task
		o   relaymsg.RingOffer
	}
	var loops []loop
	var drop []string
	dropped := map[string]*memberPlan{}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.send = send
	stopTasks(m.assigns)
	stopTasks(m.probes)
	stopTasks(m.announces)
	clear(m.offers)
	for _, o := range offers {
		m.offers[o.Model] = o
	}
	for model, p := range m.plans {
		if _, ok := m.offers[model]; !ok {
			delete(m.plans, model)
			drop = append(drop, model)
			dropped[model] = p
		}
	}
	for _, o := range m.offers {
		ctx, t := m.startTask(m.announces, o.Model, shard.Hash{}, 0)
		loops = append(loops, loop{ctx, t, o})
	}
	m.mu.Unlock()
	for _, model := range drop {
		p := dropped[model]
		m.cfg.Log.Info("ring member: the new connection does not offer a ring model any more; dropping its plan", "model", model, "plan", p.hash)
		m.goSafe("drop", func() { m.dropPlan(model, p) })
	}
	for _, l := range loops {
		m.goSafe("announce", func() {
			defer m.endTask(m.announces, l.o.Model, l.t)
			m.announceLoop(l.ctx, l.o)
		})
	}
}

func (m *Member) sendMsg(msg any) error {
	m.mu.Lock()
	send := m.send
	m.mu.Unlock()
	if send == nil {
		return errors.New("ringmember: not connected")
	}
	return send(msg)
}

// announceLoop announces a model, and again with backoff until ctx ends
// (a probe or an assignment of the model came, or a new connection) or
// maxAnnounces were sent. Every announce carries the same signed
// capability, so the gateway sees the same candidate.
func (m *Member) announceLoop(ctx context.Context, o relaymsg.RingOffer) {
	wait := m.cfg.AnnounceRetry
	var c *shard.Capability
	for try := 1; ; try++ {
		var err error
		if c == nil {
			c, err = m.capability(ctx, o)
		}
		if err == nil {
			if try == 1 {
				m.cfg.Log.Info("ring member: announcing", "model", o.Model, "layer_us", c.LayerMicros, "memory", c.VRAMBytes, "advertise", m.cfg.Advertise)
			} else {
				m.cfg.Log.Debug("ring member: announcing again: no probe or assignment yet", "model", o.Model, "try", try)
			}
			err = m.sendMsg(&relaymsg.RingAnnounce{Model: o.Model, Capability: *c, Advertise: m.cfg.Advertise})
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			m.cfg.Log.Warn("ring member: cannot announce", "model", o.Model, "try", try, "err", err)
		}
		if try >= maxAnnounces || !sleep(ctx, wait) {
			return
		}
		wait = min(2*wait, maxAnnounceRetry)
	}
}

// capability fetches the model's manifest, measures a layer, and signs
// the capability announced.
func (m *Member) capability(ctx context.Context, o relaymsg.RingOffer) (*shard.Capability, error) {
	man, err := m.manifest(ctx, o)
	if err != nil {
		return nil, err
	}
	us, err := m.measure(ctx, o, man)
	if err != nil {
		return nil, err
	}
	if m.cfg.LayerMicrosOverride > 0 {
		us = m.cfg.LayerMicrosOverride
	}
	c := shard.Capability{Model: o.Hash, VRAMBytes: m.cfg.Memory, LayerMicros: us, UplinkBps: m.cfg.Uplink, Time: m.cfg.Now().UnixMilli()}
	c.Sign(m.cfg.Key)
	return &c, nil
}

// manifest fetches, checks and caches a ring model's signed manifest.
func (m *Member) manifest(ctx context.Context, o relaymsg.RingOffer) (*shard.Manifest, error) {
	m.mu.Lock()
	man := m.manifests[o.Hash]
	m.mu.Unlock()
	if man != nil {
		return man, nil
	}
	u, err := url.JoinPath(o.BlobURL, "manifest.json")
	if err != nil {
		return nil, fmt.Errorf("ringmember: manifest url: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("ringmember: manifest url: %w", err)
	}
	resp, err := m.cfg.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ringmember: fetch %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("ringmember: fetch %s: HTTP %s", u, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("ringmember: fetch %s: %w", u, err)
	}
	if len(b) > maxManifestBytes {
		return nil, fmt.Errorf("ringmember: %s is larger than %d bytes", u, maxManifestBytes)
	}
	got, err := shard.DecodeManifest(b)
	if err != nil {
		return nil, fmt.Errorf("ringmember: %s: %w", u, err)
	}
	if got.Hash() != o.Hash {
		return nil, fmt.Errorf("ringmember: %s hashes to %s, the gateway offers %s", u, got.Hash(), o.Hash)
	}
	m.mu.Lock()
	m.manifests[o.Hash] = &got
	m.mu.Unlock()
	return &got, nil
}

// dir is where a model's blobs are cached.
func (m *Member) dir(h shard.Hash) string { return filepath.Join(m.cfg.Dir, h.String()) }

// measureRuns is how many timed forwards a layer's speed is the median of.
const measureRuns = 7

// measure times one of the model's layers on a one-token batch: the
// LayerMicros of the capability. It pulls the middle layer's blob (kept in
// the cache: a member of a ring is likely to hold it) and keeps the layer
// open: it is the bench layer peers time this member on at probe, and
// this member them (see bench.go).
func (m *Member) measure(ctx context.Context, o relaymsg.RingOffer, man *shard.Manifest) (int64, error) {
	m.mu.Lock()
	us, ok := m.speed[o.Hash]
	m.mu.Unlock()
	if ok {
		return us, nil
	}
	k := len(man.Layers) / 2
	blobs, err := man.Blobs(k, k+1)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := m.pull(ctx, shard.HTTPSource{Base: o.BlobURL, Client: m.cfg.HTTP}, m.dir(o.Hash), blobs); err != nil {
		return 0, fmt.Errorf("ringmember: pull layer %d to measure it: %w", k, err)
	}
	part, err := m.part(m.dir(o.Hash), man, o.Hash, k, k+1)
	if err != nil {
		return 0, fmt.Errorf("ringmember: open layer %d: %w", k, err)
	}
	model := part.Model()
	dim := model.Config().Embd
	times := make([]int64, 0, measureRuns)
	for range measureRuns {
		st, err := model.NewStage(k, k+1)
		if err != nil {
			return 0, err
		}
		h := &engine.Hidden{Pos: 0, Tokens: 1, Dim: dim, Data: make([]float32, dim)}
		var seed [4]byte
		_, _ = rand.Read(seed[:])
		for i := range h.Data {
			h.Data[i] = float32(int(seed[i%4])-128) / 256
		}
		start := time.Now()
		if err := st.Forward(ctx, h); err != nil {
			return 0, fmt.Errorf("ringmember: measure layer %d: %w", k, err)
		}
		times = append(times, max(time.Since(start).Microseconds(), 1))
	}
	slices.Sort(times)
	us = times[len(times)/2]
	m.mu.Lock()
	m.speed[o.Hash] = us
	m.mu.Unlock()
	return us, nil
}

// Handle acts on a ring control message from the relay. It returns at
// once (it runs on the relay's read goroutine): probes, assignments and
// drops run in goroutines of their own.
func (m *Member) Handle(msg any) {
	switch msg := msg.(type) {
	case *relaymsg.RingProbe:
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return
		}
		if t := m.announces[msg.Model]; t != nil {
			t.cancel()
			delete(m.announces, msg.Model)
		}
		ctx, t := m.startTask(m.probes, msg.Model, shard.Hash{}, m.cfg.ProbeTimeout)
		m.mu.Unlock()
		m.goSafe("probe", func() {
			defer m.endTask(m.probes, msg.Model, t)
			m.probe(ctx, t, msg)
		})
	case *relaymsg.RingAssign:
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return
		}
		if t := m.announces[msg.Model]; t != nil {
			t.cancel()
			delete(m.announces, msg.Model)
		}
		_, offered := m.offers[msg.Model]
		other := m.busyWith(msg.Model)
		var ctx context.Context
		var t *task
		if offered && other == "" {
			ctx, t = m.startTask(m.assigns, msg.Model, msg.Hash, assignTimeout)
		}
		m.mu.Unlock()
		switch {
		case !offered:
			m.goSafe("refuse", func() {
				m.refuse(msg, "not_offered", fmt.Errorf("model %q was not offered to this connection", msg.Model))
			})
		case other != "":
			m.goSafe("refuse", func() {
				m.refuse(msg, "busy", fmt.Errorf("this member holds a plan of ring model %q (or is taking one), and serves one ring at a time", other))
			})
		default:
			m.goSafe("assign", func() {
				defer m.endTask(m.assigns, msg.Model, t)
				m.assign(ctx, t, msg)
			})
		}
	case *relaymsg.RingServe:
		m.mu.Lock()
		if p := m.plans[msg.Model]; p != nil && p.hash == msg.Hash {
			p.serving = true
			m.cfg.Log.Info("ring member: the ring serves", "model", msg.Model, "plan", msg.Hash, "stage", p.me.Stage)
		}
		m.mu.Unlock()
	case *relaymsg.RingDisband:
		m.mu.Lock()
		if t := m.assigns[msg.Model]; t != nil && t.hash == msg.Hash {
			t.cancel()
			delete(m.assigns, msg.Model)
			m.cfg.Log.Info("ring member: plan disbanded while being taken", "model", msg.Model, "plan", msg.Hash, "reason", msg.Reason)
		}
		p := m.plans[msg.Model]
		if p != nil && p.hash == msg.Hash {
			delete(m.plans, msg.Model)
			m.cfg.Log.Info("ring member: plan disbanded", "model", msg.Model, "plan", msg.Hash, "reason", msg.Reason)
		} else {
			p = nil
		}
		m.mu.Unlock()
		if p != nil {
			m.goSafe("disband", func() { m.dropPlan(msg.Model, p) })
		}
	}
}

// busyWith names the other ring model, besides model, whose plan this
// member holds or is taking (the Server serves one plan at a time), or
// is "". Called under m.mu.
func (m *Member) busyWith(model string) string {
	for other := range m.plans {
		if other != model {
			return other
		}
	}
	for other := range m.assigns {
		if other != model {
			return other
		}
	}
	return ""
}

// dropPlan stops serving a plan that m.plans no longer holds, unless a
// newer assignment installed the same plan again since.
func (m *Member) dropPlan(model string, p *memberPlan) {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.mu.Lock()
	q := m.plans[model]
	m.mu.Unlock()
	if q != nil && q.hash == p.hash && q.gen > p.gen {
		return
	}
	m.srv.Drop(p.hash)
}

// probe measures the round trip to every peer at once, within ctx's
// deadline (ProbeTimeout), times each peer's bench layer (benchRuns
// frames of random hidden states, every reply checked bit for bit
// against this member's own result), and sends the signed row, unless a
// newer probe of the model (or a new connection) replaced this one. A
// peer that cannot be reached, or whose bench replies are wrong or
// missing, is left out of the row: the plan cannot put it next to this
// member, and a peer every row leaves out is in no plan.
func (m *Member) probe(ctx context.Context, t *task, p *relaymsg.RingProbe) {
	keys := make([]shard.PublicKey, len(p.Peers))
	for i, peer := range p.Peers {
		keys[i] = peer.Node
	}
	m.srv.Allow(keys...)
	m.mu.Lock()
	offer, offered := m.offers[p.Model]
	m.mu.Unlock()
	self := shard.KeyOf(m.cfg.Key)
	rtt := make([]int64, len(p.Peers))   // 0: not reached
	layer := make([]int64, len(p.Peers)) // 0: not timed
	var wg sync.WaitGroup
	for i, peer := range p.Peers {
		if peer.Node == self {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					m.cfg.Log.Error("ring member: panic", "in", "probe peer", "panic", p)
				}
			}()
			var check *BenchCheck
			if offered {
				var err error
				if check, err = m.benchCheck(ctx, offer.Hash); err != nil {
					m.cfg.Log.Warn("ring member: cannot bench peers; timing round trips only", "model", p.Model, "err", err)
					check = nil
				}
			}
			res, err := m.probePeerBench(ctx, peer.Node, peer.Addr, check)
			if err != nil {
				if m.current(m.probes, p.Model, t) {
					m.cfg.Log.Warn("ring member: peer left out of the row", "model", p.Model, "peer", peer.Node, "addr", peer.Addr, "err", err)
				}
				return
			}
			rtt[i] = min(max(res.RTT.Microseconds(), 1), shard.MaxRTTMicros)
			if check != nil {
				layer[i] = min(max(res.Layer.Microseconds(), 1), shard.MaxLayerMicros)
			}
		}()
	}
	wg.Wait()
	if !m.current(m.probes, p.Model, t) {
		m.cfg.Log.Debug("ring member: probe replaced by a newer one; its row is not sent", "model", p.Model)
		return
	}
	row := shard.RTTRow{}
	for i, peer := range p.Peers {
		if rtt[i] > 0 {
			row.Peers = append(row.Peers, shard.RTTPeer{To: peer.Node, Micros: rtt[i], LayerMicros: layer[i]})
		}
	}
	row.Time = m.cfg.Now().UnixMilli()
	row.Sign(m.cfg.Key)
	if err := m.sendMsg(&relaymsg.RingRTT{Model: p.Model, Row: row}); err != nil {
		m.cfg.Log.Warn("ring member: send rtt", "err", err)
	}
}

// probePeer tries a peer's stage listener until it answers, a few times
// with a growing wait, until ctx ends.
func (m *Member) probePeer(ctx context.Context, node shard.PublicKey, addr string) (time.Duration, error) {
	res, err := m.probePeerBench(ctx, node, addr, nil)
	return res.RTT, err
}

// probePeerBench is probePeer with the bench b (nil: none). A wrong bench
// reply, or a peer that answers a bench with an error, is final: the peer
// is not tried again.
func (m *Member) probePeerBench(ctx context.Context, node shard.PublicKey, addr string, b *BenchCheck) (ProbeResult, error) {
	var err error
	wait := firstProbeRetry
	for try := range probeTries {
		if try > 0 {
			if !sleep(ctx, wait) {
				break
			}
			wait *= 2
		}
		var res ProbeResult
		if res, err = m.srv.ProbeBench(ctx, node, addr, b); err == nil {
			return res, nil
		}
		if ctx.Err() != nil || errors.Is(err, ErrBenchMismatch) || errors.Is(err, ErrBenchRefused) {
			break
		}
	}
	return ProbeResult{}, err
}

// refuse tells the gateway this member will not serve a plan.
func (m *Member) refuse(a *relaymsg.RingAssign, code string, err error) {
	m.cfg.Log.Warn("ring member: refusing a plan", "model", a.Model, "plan", a.Hash, "code", code, "err", err)
	msg := err.Error()
	if len(msg) > 1024 {
		msg = strings.ToValidUTF8(msg[:1024], "")
	}
	if serr := m.sendMsg(&relaymsg.RingRefuse{Model: a.Model, Hash: a.Hash, Code: code, Message: msg}); serr != nil {
		m.cfg.Log.Warn("ring member: send refusal", "err", serr)
	}
}

// assign checks a plan (recomputing it from the signed inputs and probing
// this member's neighbours), pulls and loads the member's layers, starts
// serving its stage and says it is ready. An assignment cancelled on the
// way (its plan disbanded, a newer one of the model, a new connection,
// Close) stops and says nothing: the gateway has moved on.
func (m *Member) assign(ctx context.Context, t *task, a *relaymsg.RingAssign) {
	refuse := func(code string, err error) {
		if ctx.Err() != nil || !m.current(m.assigns, a.Model, t) {
			m.cfg.Log.Info("ring member: assignment cancelled", "model", a.Model, "plan", a.Hash, "at", code)
			return
		}
		m.refuse(a, code, err)
	}
	m.mu.Lock()
	offer := m.offers[a.Model]
	m.mu.Unlock()
	switch {
	case a.Manifest.Check() != nil:
		refuse("bad_manifest", fmt.Errorf("manifest: %w", a.Manifest.Check()))
		return
	case a.Manifest.Hash() != offer.Hash || a.Plan.Model != offer.Hash:
		refuse("bad_manifest", fmt.Errorf("the plan's model %s or its manifest %s is not the offered %s", a.Plan.Model, a.Manifest.Hash(), offer.Hash))
		return
	}
	self := shard.KeyOf(m.cfg.Key)
	var me *shard.Member
	for i := range a.Plan.Members {
		if a.Plan.Members[i].Node == self {
			me = &a.Plan.Members[i]
		}
	}
	if me == nil {
		refuse("not_member", fmt.Errorf("%s holds no place in plan %s", self, a.Hash))
		return
	}
	peers := map[shard.PublicKey]string{}
	for _, p := range a.Peers {
		peers[p.Node] = p.Addr
	}
	keys := make([]shard.PublicKey, 0, len(a.Plan.Members))
	for _, pm := range a.Plan.Members {
		keys = append(keys, pm.Node)
	}
	m.srv.Allow(keys...)
	measured := map[shard.PublicKey]int64{}
	pctx, cancel := context.WithTimeout(ctx, m.cfg.ProbeTimeout)
	defer cancel()
	for _, nb := range []shard.PublicKey{me.Prev, me.Next} {
		if nb == a.Plan.Coordinator {
			// The gateway coordinates but is off the activation path:
			// its hops are nominal, as its own signed row says.
			measured[nb] = matrixRTT(a.Inputs.RTT, self, nb)
			continue
		}
		addr, ok := peers[nb]
		if !ok {
			refuse("no_address", fmt.Errorf("the assignment gives no address for neighbour %s", nb))
			return
		}
		d, err := m.probePeer(pctx, nb, addr)
		if err != nil {
			refuse("neighbour_unreachable", fmt.Errorf("neighbour %s at %s: %w", nb, addr, err))
			return
		}
		measured[nb] = max(d.Microseconds(), 1)
	}
	acc, err := shard.Accept(m.cfg.Key, a.Inputs, a.Hash, measured, shard.DefaultTolerance, m.cfg.Now())
	if err != nil {
		refuse("plan_rejected", err)
		return
	}
	blobs, err := a.Manifest.Blobs(me.LayerStart, me.LayerEnd)
	if err != nil {
		refuse("bad_range", err)
		return
	}
	dir := m.dir(offer.Hash)
	start := time.Now()
	if err := m.pull(ctx, shard.HTTPSource{Base: a.BlobURL, Client: m.cfg.HTTP}, dir, blobs); err != nil {
		refuse("pull_failed", err)
		return
	}
	part, err := m.part(dir, &a.Manifest, offer.Hash, me.LayerStart, me.LayerEnd)
	if err != nil {
		refuse("load_failed", err)
		return
	}
	m.cfg.Log.Info("ring member: layers loaded", "model", a.Model, "plan", a.Hash, "stage", me.Stage, "role", me.Role,
		"layers", fmt.Sprintf("[%d,%d)", me.LayerStart, me.LayerEnd), "ms", time.Since(start).Milliseconds())
	if !m.serve(t, a, &Assignment{Model: a.Model, Hash: a.Hash, Plan: a.Plan, Manifest: a.Manifest,
		Peers: peers, Part: part, Workers: m.cfg.Workers, ContextTokens: int(a.Inputs.Params.ContextTokens)}, *me, refuse) {
		return
	}
	if err := m.sendMsg(&relaymsg.RingReady{Model: a.Model, Acceptance: acc}); err != nil {
		m.cfg.Log.Warn("ring member: send ready", "err", err)
	}
}

// serve starts serving an assignment if t is still its model's current
// one, and records the plan; it reports whether the plan is served (and
// the ready is due).
func (m *Member) serve(t *task, a *relaymsg.RingAssign, as *Assignment, me shard.Member, refuse func(string, error)) bool {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if !m.current(m.assigns, a.Model, t) {
		m.cfg.Log.Info("ring member: assignment cancelled before serving", "model", a.Model, "plan", a.Hash)
		return false
	}
	if err := m.srv.Serve(as); err != nil {
		refuse("serve_failed", err)
		return false
	}
	m.mu.Lock()
	ok := m.currentLocked(m.assigns, a.Model, t)
	if ok {
		m.plans[a.Model] = &memberPlan{hash: a.Hash, gen: t.gen, me: me}
	}
	m.mu.Unlock()
	if !ok {
		// Voided while Serve ran: a disband or a newer assignment
		// cancelled it, and found nothing to drop yet.
		m.srv.Drop(a.Hash)
		m.cfg.Log.Info("ring member: assignment cancelled while serving it", "model", a.Model, "plan", a.Hash)
	}
	return ok
}

// pull fetches blobs into dir, one pull at a time per directory: two
// pulls of one blob would share its .part file.
func (m *Member) pull(ctx context.Context, src shard.Source, dir string, blobs []shard.Blob) error {
	unlock, err := m.pulls.lock(ctx, dir)
	if err != nil {
		return fmt.Errorf("ringmember: waiting for another pull into %s: %w", dir, err)
	}
	defer unlock()
	return shard.Pull(ctx, src, dir, blobs)
}

// dirLocks serialise the pulls into each model directory.
type dirLocks struct {
	mu    sync.Mutex
	locks map[string]*dirLock
}

type dirLock struct {
	sem     chan struct{}
	waiting int // pulls waiting for the one under way (for tests)
}

// lock takes dir's lock, waiting for the pull that holds it until ctx
// ends.
func (l *dirLocks) lock(ctx context.Context, dir string) (unlock func(), err error) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*dirLock{}
	}
	d := l.locks[dir]
	if d == nil {
		d = &dirLock{sem: make(chan struct{}, 1)}
		l.locks[dir] = d
	}
	d.waiting++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		d.waiting--
		l.mu.Unlock()
	}()
	select {
	case d.sem <- struct{}{}:
		return func() { <-d.sem }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// waiters is how many pulls wait for dir's lock.
func (l *dirLocks) waiters(dir string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := l.locks[dir]; d != nil {
		return d.waiting
	}
	return 0
}

// part opens a model's layer range from dir, or returns it if open.
func (m *Member) part(dir string, man *shard.Manifest, model shard.Hash, first, last int) (*shardblob.Part, error) {
	k := partKey{model, first, last}
	m.mu.Lock()
	p := m.parts[k]
	m.mu.Unlock()
	if p != nil {
		return p, nil
	}
	p, err := shardblob.Open(dir, man, first, last, m.cfg.Workers)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		p.Close()
		return nil, errors.New("ringmember: the member is closed")
	case m.parts[k] != nil:
		// Opened meanwhile by another assignment: keep one.
		p.Close()
		return m.parts[k], nil
	}
	m.parts[k] = p
	return p, nil
}

// matrixRTT is the plan inputs' RTT between a and b, as the planner reads
// it: the larger of the two directions measured.
func matrixRTT(rows []shard.RTTRow, a, b shard.PublicKey) int64 {
	var v int64
	for _, r := range rows {
		for _, p := range r.Peers {
			if (r.From == a && p.To == b) || (r.From == b && p.To == a) {
				v = max(v, p.Micros)
			}
		}
	}
	return v
}

// Drives reports whether this member is the first stage's primary of a
// serving ring of model.
func (m *Member) Drives(model string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.plans[model]
	return !m.closed && p != nil && p.serving && p.me.Stage == 0 && p.me.Role == shard.RolePrimary
}

// ErrNotDriving fails a job of a ring this member does not drive (any
// more): the agent reports it, and the gateway moves the job.
var ErrNotDriving = errors.New("ringmember: this worker does not drive that ring")

// Chat runs a ring job around the ring this member drives (Server.Chat:
// a job whose ctx ends mid-reply still returns the ring's account, with
// the error). Close waits for it.
func (m *Member) Chat(ctx context.Context, job *relaymsg.Job, emit func(oaiwire.Delta) error) (backend.Result, *relaymsg.RingDone, error) {
	m.mu.Lock()
	p := m.plans[job.Model]
	var err error
	switch {
	case m.closed:
		err = fmt.Errorf("%w: the member is closed", ErrNotDriving)
	case p == nil || !p.serving:
		err = fmt.Errorf("%w: %s", ErrNotDriving, job.Model)
	case job.Ring == nil:
		err = fmt.Errorf("ringmember: job %s of ring model %s carries no ring", job.Job, job.Model)
	case job.Ring.Plan != p.hash:
		err = fmt.Errorf("%w: the job names plan %s, this member serves %s", ErrNotDriving, job.Ring.Plan, p.hash)
	default:
		m.chats.Add(1)
	}
	m.mu.Unlock()
	if err != nil {
		return backend.Result{}, nil, err
	}
	defer m.chats.Done()
	return m.srv.Chat(ctx, Job{ID: job.Job, Ring: *job.Ring}, &job.Request, emit)
}
