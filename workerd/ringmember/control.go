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
	"sync"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/shardblob"
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
	HTTP    *http.Client
	Log     *slog.Logger
	Now     func() time.Time
}

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

	mu        sync.Mutex
	send      func(any) error
	offers    map[string]relaymsg.RingOffer // by model id
	manifests map[shard.Hash]*shard.Manifest
	speed     map[shard.Hash]int64 // measured µs per layer
	plans     map[string]*memberPlan
	// parts are the layer ranges loaded, kept open while the member
	// runs: a driver's job still running on a dropped plan may be using
	// one, and a re-formed ring usually gives a member the same range.
	parts map[partKey]*shardblob.Part
}

// partKey names a loaded layer range of a model.
type partKey struct {
	model       shard.Hash
	first, last int
}

// memberPlan is the plan a member holds for a model.
type memberPlan struct {
	hash    shard.Hash
	me      shard.Member
	serving bool
}

// maxManifestBytes bounds a fetched manifest.
const maxManifestBytes = shard.MaxInputsBytes

// probeTries is how often a probe of a peer is tried: a peer learns of the
// probe from its own ring_probe, which may reach it a moment later.
const probeTries = 10

// NewMember starts a member's stage listener.
func NewMember(cfg MemberConfig) (*Member, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 10 * time.Minute}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	srv, err := NewServer(cfg.Key, cfg.Listen, cfg.Log)
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
	return &Member{cfg: cfg, srv: srv, ctx: ctx, end: end, offers: map[string]relaymsg.RingOffer{},
		manifests: map[shard.Hash]*shard.Manifest{}, speed: map[shard.Hash]int64{}, plans: map[string]*memberPlan{},
		parts: map[partKey]*shardblob.Part{}}, nil
}

// Addr is the stage listener's address; Advertise the address announced.
func (m *Member) Addr() string { return m.srv.Addr().String() }

// Advertise is the address other stages are told to dial.
func (m *Member) Advertise() string { return m.cfg.Advertise }

// Close stops serving every plan and the listener.
func (m *Member) Close() error {
	m.end()
	m.wg.Wait()
	err := m.srv.Close()
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
// down with.
func (m *Member) goSafe(what string, fn func()) {
	m.wg.Add(1)
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

// Attach announces the member for each ring model offered on a newly
// registered connection. Plans held from an earlier connection are void:
// the gateway dropped them when that connection went.
func (m *Member) Attach(offers []relaymsg.RingOffer, send func(any) error) {
	m.mu.Lock()
	m.send = send
	for model, p := range m.plans {
		m.srv.Drop(p.hash)
		delete(m.plans, model)
	}
	clear(m.offers)
	for _, o := range offers {
		m.offers[o.Model] = o
	}
	m.mu.Unlock()
	for _, o := range offers {
		m.goSafe("announce", func() {
			if err := m.announce(o); err != nil && m.ctx.Err() == nil {
				m.cfg.Log.Warn("ring member: cannot announce", "model", o.Model, "err", err)
			}
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

// announce fetches the model's manifest, measures a layer, and sends the
// signed capability.
func (m *Member) announce(o relaymsg.RingOffer) error {
	man, err := m.manifest(o)
	if err != nil {
		return err
	}
	us, err := m.measure(o, man)
	if err != nil {
		return err
	}
	c := shard.Capability{Model: o.Hash, VRAMBytes: m.cfg.Memory, LayerMicros: us, UplinkBps: m.cfg.Uplink, Time: m.cfg.Now().UnixMilli()}
	c.Sign(m.cfg.Key)
	m.cfg.Log.Info("ring member: announcing", "model", o.Model, "layer_us", us, "memory", m.cfg.Memory, "advertise", m.cfg.Advertise)
	return m.sendMsg(&relaymsg.RingAnnounce{Model: o.Model, Capability: c, Advertise: m.cfg.Advertise})
}

// manifest fetches, checks and caches a ring model's signed manifest.
func (m *Member) manifest(o relaymsg.RingOffer) (*shard.Manifest, error) {
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
	ctx, cancel := context.WithTimeout(m.ctx, time.Minute)
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
// the cache: a member of a ring is likely to hold it).
func (m *Member) measure(o relaymsg.RingOffer, man *shard.Manifest) (int64, error) {
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
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Minute)
	defer cancel()
	if err := shard.Pull(ctx, shard.HTTPSource{Base: o.BlobURL, Client: m.cfg.HTTP}, m.dir(o.Hash), blobs); err != nil {
		return 0, fmt.Errorf("ringmember: pull layer %d to measure it: %w", k, err)
	}
	part, err := shardblob.Open(m.dir(o.Hash), man, k, k+1, m.cfg.Workers)
	if err != nil {
		return 0, fmt.Errorf("ringmember: open layer %d: %w", k, err)
	}
	defer part.Close()
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

// Handle acts on a ring control message from the relay.
func (m *Member) Handle(msg any) {
	switch msg := msg.(type) {
	case *relaymsg.RingProbe:
		m.goSafe("probe", func() { m.probe(msg) })
	case *relaymsg.RingAssign:
		m.goSafe("assign", func() { m.assign(msg) })
	case *relaymsg.RingServe:
		m.mu.Lock()
		if p := m.plans[msg.Model]; p != nil && p.hash == msg.Hash {
			p.serving = true
			m.cfg.Log.Info("ring member: the ring serves", "model", msg.Model, "plan", msg.Hash, "stage", p.me.Stage)
		}
		m.mu.Unlock()
	case *relaymsg.RingDisband:
		m.mu.Lock()
		if p := m.plans[msg.Model]; p != nil && p.hash == msg.Hash {
			m.srv.Drop(p.hash)
			delete(m.plans, msg.Model)
			m.cfg.Log.Info("ring member: plan disbanded", "model", msg.Model, "plan", msg.Hash, "reason", msg.Reason)
		}
		m.mu.Unlock()
	}
}

// probe measures the round trip to each peer and sends the signed row. A
// peer that cannot be reached is left out of the row: the plan cannot put
// it next to this member.
func (m *Member) probe(p *relaymsg.RingProbe) {
	keys := make([]shard.PublicKey, len(p.Peers))
	for i, peer := range p.Peers {
		keys[i] = peer.Node
	}
	m.srv.Allow(keys...)
	row := shard.RTTRow{}
	self := shard.KeyOf(m.cfg.Key)
	for _, peer := range p.Peers {
		if peer.Node == self {
			continue
		}
		d, err := m.probePeer(peer.Node, peer.Addr)
		if err != nil {
			m.cfg.Log.Warn("ring member: peer unreachable", "model", p.Model, "peer", peer.Node, "addr", peer.Addr, "err", err)
			continue
		}
		row.Peers = append(row.Peers, shard.RTTPeer{To: peer.Node, Micros: min(max(d.Microseconds(), 1), shard.MaxRTTMicros)})
	}
	row.Time = m.cfg.Now().UnixMilli()
	row.Sign(m.cfg.Key)
	if err := m.sendMsg(&relaymsg.RingRTT{Model: p.Model, Row: row}); err != nil {
		m.cfg.Log.Warn("ring member: send rtt", "err", err)
	}
}

// probePeer tries a peer's stage listener until it answers.
func (m *Member) probePeer(node shard.PublicKey, addr string) (time.Duration, error) {
	var err error
	for try := range probeTries {
		if try > 0 {
			select {
			case <-m.ctx.Done():
				return 0, m.ctx.Err()
			case <-time.After(time.Duration(try) * 100 * time.Millisecond):
			}
		}
		ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
		var d time.Duration
		d, err = m.srv.Probe(ctx, node, addr)
		cancel()
		if err == nil {
			return d, nil
		}
	}
	return 0, err
}

// refuse tells the gateway this member will not serve a plan.
func (m *Member) refuse(a *relaymsg.RingAssign, code string, err error) {
	m.cfg.Log.Warn("ring member: refusing a plan", "model", a.Model, "plan", a.Hash, "code", code, "err", err)
	msg := err.Error()
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	if serr := m.sendMsg(&relaymsg.RingRefuse{Model: a.Model, Hash: a.Hash, Code: code, Message: msg}); serr != nil {
		m.cfg.Log.Warn("ring member: send refusal", "err", serr)
	}
}

// assign checks a plan (recomputing it from the signed inputs and probing
// this member's neighbours), pulls and loads the member's layers, starts
// serving its stage and says it is ready.
func (m *Member) assign(a *relaymsg.RingAssign) {
	m.mu.Lock()
	offer, ok := m.offers[a.Model]
	m.mu.Unlock()
	switch {
	case !ok:
		m.refuse(a, "not_offered", fmt.Errorf("model %q was not offered to this connection", a.Model))
		return
	case a.Manifest.Check() != nil:
		m.refuse(a, "bad_manifest", fmt.Errorf("manifest: %w", a.Manifest.Check()))
		return
	case a.Manifest.Hash() != offer.Hash || a.Plan.Model != offer.Hash:
		m.refuse(a, "bad_manifest", fmt.Errorf("the plan's model %s or its manifest %s is not the offered %s", a.Plan.Model, a.Manifest.Hash(), offer.Hash))
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
		m.refuse(a, "not_member", fmt.Errorf("%s holds no place in plan %s", self, a.Hash))
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
	for _, nb := range []shard.PublicKey{me.Prev, me.Next} {
		if nb == a.Plan.Coordinator {
			// The gateway coordinates but is off the activation path:
			// its hops are nominal, as its own signed row says.
			measured[nb] = matrixRTT(a.Inputs.RTT, self, nb)
			continue
		}
		addr, ok := peers[nb]
		if !ok {
			m.refuse(a, "no_address", fmt.Errorf("the assignment gives no address for neighbour %s", nb))
			return
		}
		d, err := m.probePeer(nb, addr)
		if err != nil {
			m.refuse(a, "neighbour_unreachable", fmt.Errorf("neighbour %s at %s: %w", nb, addr, err))
			return
		}
		measured[nb] = max(d.Microseconds(), 1)
	}
	acc, err := shard.Accept(m.cfg.Key, a.Inputs, a.Hash, measured, shard.DefaultTolerance, m.cfg.Now())
	if err != nil {
		m.refuse(a, "plan_rejected", err)
		return
	}
	blobs, err := a.Manifest.Blobs(me.LayerStart, me.LayerEnd)
	if err != nil {
		m.refuse(a, "bad_range", err)
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Minute)
	defer cancel()
	dir := m.dir(offer.Hash)
	start := time.Now()
	if err := shard.Pull(ctx, shard.HTTPSource{Base: a.BlobURL, Client: m.cfg.HTTP}, dir, blobs); err != nil {
		m.refuse(a, "pull_failed", err)
		return
	}
	part, err := m.part(dir, &a.Manifest, offer.Hash, me.LayerStart, me.LayerEnd)
	if err != nil {
		m.refuse(a, "load_failed", err)
		return
	}
	m.cfg.Log.Info("ring member: layers loaded", "model", a.Model, "plan", a.Hash, "stage", me.Stage, "role", me.Role,
		"layers", fmt.Sprintf("[%d,%d)", me.LayerStart, me.LayerEnd), "ms", time.Since(start).Milliseconds())
	if err := m.srv.Serve(&Assignment{Model: a.Model, Hash: a.Hash, Plan: a.Plan, Manifest: a.Manifest,
		Peers: peers, Part: part, Workers: m.cfg.Workers}); err != nil {
		m.refuse(a, "serve_failed", err)
		return
	}
	m.mu.Lock()
	m.plans[a.Model] = &memberPlan{hash: a.Hash, me: *me}
	m.mu.Unlock()
	if err := m.sendMsg(&relaymsg.RingReady{Model: a.Model, Acceptance: acc}); err != nil {
		m.cfg.Log.Warn("ring member: send ready", "err", err)
	}
}

// part opens a model's layer range from dir, or returns it if open.
func (m *Member) part(dir string, man *shard.Manifest, model shard.Hash, first, last int) (*shardblob.Part, error) {
	k := partKey{model, first, last}
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.parts[k]; p != nil {
		return p, nil
	}
	p, err := shardblob.Open(dir, man, first, last, m.cfg.Workers)
	if err != nil {
		return nil, err
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
	return p != nil && p.serving && p.me.Stage == 0 && p.me.Role == shard.RolePrimary
}

// ErrNotDriving fails a job of a ring this member does not drive (any
// more): the agent reports it, and the gateway moves the job.
var ErrNotDriving = errors.New("ringmember: this worker does not drive that ring")

// Chat runs a ring job around the ring this member drives.
func (m *Member) Chat(ctx context.Context, job *relaymsg.Job, emit func(oaiwire.Delta) error) (backend.Result, *relaymsg.RingDone, error) {
	m.mu.Lock()
	p := m.plans[job.Model]
	m.mu.Unlock()
	switch {
	case p == nil || !p.serving:
		return backend.Result{}, nil, fmt.Errorf("%w: %s", ErrNotDriving, job.Model)
	case job.Ring == nil:
		return backend.Result{}, nil, fmt.Errorf("ringmember: job %s of ring model %s carries no ring", job.Job, job.Model)
	case job.Ring.Plan != p.hash:
		return backend.Result{}, nil, fmt.Errorf("%w: the job names plan %s, this member serves %s", ErrNotDriving, job.Ring.Plan, p.hash)
	}
	return m.srv.Chat(ctx, Job{ID: job.Job, Ring: *job.Ring}, &job.Request, emit)
}
