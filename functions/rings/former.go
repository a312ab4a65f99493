package rings

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/functions/store"
)

// MaxCandidates bounds the candidates a ring model keeps: its state stays
// bounded whatever members announce, and no ring worth forming needs more
// (relaymsg.MaxRingPeers bounds a probe's and an assignment's peers).
const MaxCandidates = relaymsg.MaxRingPeers

// MaxAttempt bounds the candidates one formation attempt probes and plans
// with, fastest first. The assignment carries every participant's signed
// capability and RTT row — n×(n−1) measurements — plus the plan and the
// manifest, and must fit one relay message (relaymsg.MaxMessage, 128 KiB):
// 32 participants with a full matrix and a MaxManifestBytes manifest do
// (TestLargestAssignmentFits).
const MaxAttempt = 32

// MaxManifestBytes bounds a ring model's manifest as JSON, checked at Load:
// every assignment carries it (about 100 bytes a layer, so 16 KiB is some
// 150 layers, above any open model's).
const MaxManifestBytes = 16 << 10

// RecentPlans is how many served plans per model Settle knows: a job
// settles on the plan it ran on even after that ring was voided.
const RecentPlans = 8

// Defaults of Config's durations.
const (
	DefaultRTTTimeout = 20 * time.Second
	// DefaultReadyTimeout leaves a member time for a big model's first
	// pull: minutes of blobs before it can load and accept.
	DefaultReadyTimeout   = 10 * time.Minute
	DefaultDebounce       = 2 * time.Second
	DefaultMaxWait        = 30 * time.Second
	DefaultRetry          = time.Minute
	DefaultChangeInterval = 30 * time.Second
	DefaultExclusion      = 10 * time.Minute
)

// maxOffers is the most ring models one registration is offered
// (relaymsg.Registered.Ring's bound).
const maxOffers = 16

// timerWork bounds what a deadline or a debounced attempt may spend on
// posts and store calls.
const timerWork = time.Minute

// Error codes of the replies to members' ring messages.
const (
	// CodeNotRegistered: the connection did not register the ring model.
	CodeNotRegistered = "ring_not_registered"
	// CodeBadRecord: a signed record fails its checks or speaks for
	// another identity or model.
	CodeBadRecord = "ring_bad_record"
	// CodeFull: the model has MaxCandidates candidates already.
	CodeFull = "ring_full"
	// CodeStale: the message answers a probe or a plan that is not the
	// current one.
	CodeStale = "ring_stale"
	// CodeStanding: the connection's identity (or its worker token) is
	// quarantined or banned; a ring takes only workers in good standing.
	CodeStanding = "ring_not_in_good_standing"
	// CodeRateLimited: the connection changed its announcement less than
	// Config.ChangeInterval ago.
	CodeRateLimited = "ring_rate_limited"
	// CodeUnavailable: the gateway could not read what it needs to
	// answer (the store failed); the member may send the message again.
	CodeUnavailable = "ring_unavailable"
	// CodeUnexpected: not a message a member sends.
	CodeUnexpected = "unexpected_message"
)

// Poster posts to relay connections (the relay's management API).
type Poster interface {
	Post(ctx context.Context, conn string, data []byte) error
}

// Store is what the Former reads and writes: the worker records of ring
// drivers, and the standing of members (a live worker record's, which is
// the worse of its identity's and its token's, and an identity's
// reputation, which outlives its connection).
type Store interface {
	GetWorker(ctx context.Context, conn string) (store.Worker, error)
	RegisterWorker(ctx context.Context, conn string, models []string, caps map[string]store.Caps) (store.Worker, error)
	GetReputation(ctx context.Context, accountID, pubkey string) (store.Reputation, error)
}

// Dispatcher starts dispatch (as relayroutes.Dispatcher): a ring that
// starts serving takes the model's queued jobs at once.
type Dispatcher interface {
	Dispatch(ctx context.Context, models []string) (int, error)
	Registered(w store.Worker)
}

// Config wires a Former.
type Config struct {
	// Key is the gateway's coordinator key: it signs plan parameters, its
	// RTT row and settled jobs.
	Key      ed25519.PrivateKey
	Catalog  *catalog.Catalog
	Post     Poster
	Store    Store
	Dispatch Dispatcher
	// HTTP fetches manifests and descriptors; a client with a 30 s
	// timeout when nil.
	HTTP *http.Client
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// AfterFunc runs f after d and returns a stop function, for deadlines
	// and the debounce; time.AfterFunc when nil. Tests pass a manual
	// clock.
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
	Log       *slog.Logger
	// RTTTimeout is how long a probed candidate has to send its RTT row
	// (default 20 s); ReadyTimeout how long a plan member has to pull,
	// load and accept (default 10 min: a big model's first pull takes
	// minutes); Debounce the quiet after a change of candidates before an
	// attempt (default 2 s); MaxWait caps that quiet: however often the
	// candidates change, an attempt starts at most MaxWait after they
	// first reached min_stages (default 30 s); Retry how long before an
	// attempt that left members out is tried again with everyone
	// (default 1 min). None may be negative; zero takes the default.
	RTTTimeout   time.Duration
	ReadyTimeout time.Duration
	Debounce     time.Duration
	MaxWait      time.Duration
	Retry        time.Duration
	// ChangeInterval is the least time between two changes of one
	// connection's announcement (capability or address): a change sooner
	// is refused (CodeRateLimited), so that no member can hold formation
	// off by announcing again and again (default 30 s). An announcement
	// that repeats the last one changes nothing and is always accepted.
	ChangeInterval time.Duration
	// Exclusion is how long the member of a stage whose job's settlement
	// was rejected (Rejected) sits out formations (default 10 min).
	Exclusion time.Duration
	// AllowPrivateAddrs accepts advertise addresses that other stages
	// can reach only on the same machine or network: loopback, private,
	// link-local, shared (carrier-grade NAT), unspecified or multicast
	// IPs, and host names. Only a dev network or a test sets it; off
	// (the default), an announcement must advertise a public IP literal,
	// so that probing cannot be pointed at the members' own networks.
	AllowPrivateAddrs bool
}

// Former forms and settles the rings of a catalogue's ring models. It is
// safe for concurrent use.
type Former struct {
	cfg    Config
	key    shard.PublicKey
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	models map[string]*ringModel    // by catalog id, added by Load
	regs   map[string]*registration // by connection
}

// registration is a connection that registered ring models: its identity,
// account, token and connection time, from its worker record, and the
// models.
type registration struct {
	account   string
	pubkey    string
	tokenHash string
	connected time.Time
	node      shard.PublicKey
	models    map[string]bool
}

// ringModel is one ring model's formation state.
type ringModel struct {
	id       string
	spec     catalog.RingSpec
	offer    relaymsg.RingOffer
	manifest shard.Manifest
	desc     shard.Model
	seed     shard.Hash

	// live is the serving plan, snap the model's state and recent the
	// last RecentPlans served, oldest first, all read without mu
	// (JobRing, Rings, Settle): a slow post under mu must not hold up a
	// request or a settlement. recent is replaced, never changed, under
	// mu.
	live   atomic.Pointer[formed]
	snap   atomic.Pointer[State]
	recent atomic.Pointer[[]*formed]

	mu      sync.Mutex
	cands   map[string]*candidate // by connection
	seq     uint64                // announcements so far
	exclude map[string]bool       // connections left out of the next attempt
	// benched are identities left out of every attempt until the time
	// given: their stage's settlement was rejected (Rejected).
	benched map[shard.PublicKey]time.Time
	probe   *probing
	cur     *formed // the plan assigned or serving
	// wait is the pending attempt (debounce or retry), deadline the
	// current phase's; each is stopped when what it waits for changes.
	wait     func() bool
	deadline func() bool
	waitGen  uint64
	attempts uint64
	// since is when the candidates reached min_stages with no plan, the
	// start of the wait MaxWait caps; zero when none is running. late
	// says a change came while a probe past MaxWait ran on: the next
	// attempt follows that probe.
	since time.Time
	late  bool
	// after runs once mu is released: dispatch, which may ask JobRing.
	after []func()
}

// candidate is one connection's announcement for a ring model. It is
// replaced, never changed: plans hold the one they were formed from.
type candidate struct {
	conn      string
	account   string
	pubkey    string
	tokenHash string
	connected time.Time // the connection's, from its worker record
	node      shard.PublicKey
	cap       shard.Capability
	addr      string
	// changed is when this connection's announcement last changed (its
	// first included), for ChangeInterval.
	changed time.Time
}

// probing is an attempt waiting for its participants' RTT rows.
type probing struct {
	id    uint64
	conns []string // participants, fastest first
	nodes map[shard.PublicKey]string
	rows  map[string]shard.RTTRow
	// partial says some candidates were left out (excluded, or over
	// MaxAttempt): an attempt that forms no ring is retried with
	// everyone.
	partial bool
}

// formed is a plan: assigned to its members, then serving.
type formed struct {
	model   string
	hash    shard.Hash
	plan    shard.Plan
	members map[shard.PublicKey]*candidate // by node, as announced
	driver  string                         // connection of stage 0's primary

	// Guarded by ringModel.mu.
	accepted   map[shard.PublicKey]shard.Acceptance
	serving    bool
	registered bool // the ring model is on the driver's worker record
}

func (fm *formed) memberConn(conn string) (*candidate, bool) {
	for _, c := range fm.members {
		if c.conn == conn {
			return c, true
		}
	}
	return nil, false
}

// role is node's role in the plan.
func (fm *formed) role(node shard.PublicKey) shard.Role {
	for _, m := range fm.plan.Members {
		if m.Node == node {
			return m.Role
		}
	}
	return ""
}

// State is a ring model's state, for /v1/models and operators.
type State struct {
	Model string
	// Candidates is how many connected members announced for the model.
	Candidates int
	// Plan and Stages are the current plan's (assigned or serving); zero
	// when there is none.
	Plan   shard.Hash
	Stages int
	// Serving says the ring takes jobs.
	Serving bool
	// Primaries are the identities of the stages' primaries, in stage
	// order (the first is the driver); nil when there is no plan.
	Primaries []shard.PublicKey
	// Layers is how many layers each stage holds, in stage order.
	Layers []int
}

// New checks cfg and returns a Former with no ring model loaded: call Load.
func New(cfg Config) (*Former, error) {
	if len(cfg.Key) != ed25519.PrivateKeySize || cfg.Catalog == nil || cfg.Post == nil || cfg.Store == nil || cfg.Dispatch == nil {
		return nil, errors.New("rings: Key (an ed25519 private key), Catalog, Post, Store and Dispatch are required")
	}
	if cfg.RTTTimeout < 0 || cfg.ReadyTimeout < 0 || cfg.Debounce < 0 || cfg.MaxWait < 0 || cfg.Retry < 0 || cfg.ChangeInterval < 0 || cfg.Exclusion < 0 {
		return nil, errors.New("rings: RTTTimeout, ReadyTimeout, Debounce, MaxWait, Retry, ChangeInterval and Exclusion must not be negative")
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AfterFunc == nil {
		cfg.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&cfg.RTTTimeout, DefaultRTTTimeout}, {&cfg.ReadyTimeout, DefaultReadyTimeout}, {&cfg.Debounce, DefaultDebounce},
		{&cfg.MaxWait, DefaultMaxWait}, {&cfg.Retry, DefaultRetry}, {&cfg.ChangeInterval, DefaultChangeInterval}, {&cfg.Exclusion, DefaultExclusion}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Former{cfg: cfg, key: shard.KeyOf(cfg.Key), log: cfg.Log, ctx: ctx, cancel: cancel,
		models: map[string]*ringModel{}, regs: map[string]*registration{}}, nil
}

// Close stops every timer; the Former answers nothing after it.
func (f *Former) Close() {
	f.cancel()
	f.mu.Lock()
	models := slices.Collect(maps.Values(f.models))
	f.mu.Unlock()
	for _, rm := range models {
		rm.mu.Lock()
		stop(&rm.wait)
		stop(&rm.deadline)
		rm.mu.Unlock()
	}
}

func stop(t *func() bool) {
	if *t != nil {
		(*t)()
		*t = nil
	}
}

// Load fetches and checks the published files of every ring model of the
// catalogue not loaded yet: BlobURL/manifest.json (shard.DecodeManifest)
// and BlobURL/model.json (shard.DecodeModel), which must describe that
// manifest (its hash, publisher, layer count and blob budgets). A model
// whose files fail is logged and not offered; the error joins every
// failure, each naming the URL. Calling Load again retries those.
func (f *Former) Load(ctx context.Context) error {
	var errs []error
	for _, m := range f.cfg.Catalog.Models() {
		if m.Ring == nil {
			continue
		}
		f.mu.Lock()
		_, done := f.models[m.ID]
		f.mu.Unlock()
		if done {
			continue
		}
		rm, err := f.load(ctx, m)
		if err != nil {
			f.log.Error("ring model not offered: its published files failed", "model", m.ID, "err", err)
			errs = append(errs, err)
			continue
		}
		rm.publish()
		f.mu.Lock()
		f.models[m.ID] = rm
		f.mu.Unlock()
		f.log.Info("ring model loaded", "model", m.ID, "manifest", rm.offer.Hash, "layers", rm.desc.Layers)
	}
	return errors.Join(errs...)
}

func (f *Former) load(ctx context.Context, m catalog.Model) (*ringModel, error) {
	spec := *m.Ring
	manURL, err := url.JoinPath(spec.BlobURL, "manifest.json")
	if err != nil {
		return nil, fmt.Errorf("rings: model %q: blob_url %q: %w", m.ID, spec.BlobURL, err)
	}
	descURL, _ := url.JoinPath(spec.BlobURL, "model.json")
	raw, err := f.fetch(ctx, manURL, shard.MaxInputsBytes)
	if err != nil {
		return nil, fmt.Errorf("rings: model %q: %w", m.ID, err)
	}
	man, err := shard.DecodeManifest(raw)
	if err != nil {
		return nil, fmt.Errorf("rings: model %q: %s: %w", m.ID, manURL, err)
	}
	if n := manifestSize(&man); n > MaxManifestBytes {
		return nil, fmt.Errorf("rings: model %q: %s: the manifest is %d bytes of JSON, over the %d every ring assignment can carry (%d layers)",
			m.ID, manURL, n, MaxManifestBytes, len(man.Layers))
	}
	raw, err = f.fetch(ctx, descURL, shard.MaxRecordBytes)
	if err != nil {
		return nil, fmt.Errorf("rings: model %q: %w", m.ID, err)
	}
	desc, err := shard.DecodeModel(raw)
	if err != nil {
		return nil, fmt.Errorf("rings: model %q: %s: %w", m.ID, descURL, err)
	}
	if err := man.Matches(&desc); err != nil {
		return nil, fmt.Errorf("rings: model %q: %s does not describe %s: %w", m.ID, descURL, manURL, err)
	}
	if spec.MinStages > desc.Layers {
		return nil, fmt.Errorf("rings: model %q: min_stages %d is more than the model's %d layers: lower it in the catalogue", m.ID, spec.MinStages, desc.Layers)
	}
	rm := &ringModel{id: m.ID, spec: spec, manifest: man, desc: desc, seed: sha256.Sum256([]byte(m.ID)),
		offer: relaymsg.RingOffer{Model: m.ID, Hash: man.Hash(), BlobURL: spec.BlobURL},
		cands: map[string]*candidate{}, exclude: map[string]bool{}, benched: map[shard.PublicKey]time.Time{}}
	rm.recent.Store(&[]*formed{})
	return rm, nil
}

// manifestSize is how many bytes m adds to a ring assignment.
func manifestSize(m *shard.Manifest) int {
	b, err := relaymsg.Encode(&relaymsg.RingAssign{Manifest: *m})
	if err != nil {
		return relaymsg.MaxMessage
	}
	empty, _ := relaymsg.Encode(&relaymsg.RingAssign{})
	return len(b) - len(empty)
}

// fetch GETs u and reads at most limit bytes of it.
func (f *Former) fetch(ctx context.Context, u string, limit int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	resp, err := f.cfg.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %s: publish the model there (workerd shard publish) or fix blob_url", u, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("GET %s: more than %d bytes", u, limit)
	}
	return b, nil
}

func (f *Former) model(name string) (*ringModel, bool) {
	m, ok := f.cfg.Catalog.Resolve(name)
	if !ok || m.Ring == nil {
		return nil, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	rm, ok := f.models[m.ID]
	return rm, ok
}

// Offers are the ring models among models (ids or aliases) that this
// gateway forms rings of, as Registered.Ring lists them: at most 16, each
// once, in the order named. A ring model whose files did not load is not
// offered.
func (f *Former) Offers(models []string) []relaymsg.RingOffer {
	var out []relaymsg.RingOffer
	for _, name := range models {
		rm, ok := f.model(name)
		if !ok || slices.ContainsFunc(out, func(o relaymsg.RingOffer) bool { return o.Model == rm.id }) {
			continue
		}
		if len(out) == maxOffers {
			break
		}
		out = append(out, rm.offer)
	}
	return out
}

// Register records the ring models a worker registered (w is its record
// after the registration) and returns their offers for Registered.Ring. A
// registration replaces the one before: a ring model no longer listed is
// left as by Left. A driver that registers again keeps serving its ring
// model: it is added back to its record.
func (f *Former) Register(ctx context.Context, w store.Worker, models []string) []relaymsg.RingOffer {
	offers := f.Offers(models)
	var node shard.PublicKey
	if err := node.UnmarshalText([]byte(w.Pubkey)); err != nil && len(offers) > 0 {
		f.log.Error("ring registration refused: the worker record's identity is not a key", "conn", w.Conn, "err", err)
		offers = nil
	}
	keep := map[string]bool{}
	for _, o := range offers {
		keep[o.Model] = true
	}
	f.mu.Lock()
	old := f.regs[w.Conn]
	if len(offers) == 0 {
		delete(f.regs, w.Conn)
	} else {
		f.regs[w.Conn] = &registration{account: w.AccountID, pubkey: w.Pubkey, tokenHash: w.TokenHash, connected: w.ConnectedAt,
			node: node, models: keep}
	}
	f.mu.Unlock()
	if old != nil {
		for id := range old.models {
			if rm, ok := f.model(id); ok && (!keep[id] || old.node != node) {
				f.locked(rm, func() { f.leave(ctx, rm, w.Conn) })
			}
		}
	}
	for id := range keep {
		rm, _ := f.model(id)
		f.locked(rm, func() {
			if fm := rm.cur; fm != nil && fm.registered && fm.driver == w.Conn && !w.Serves(rm.id) {
				if err := f.addToDriver(ctx, rm, fm); err != nil {
					f.void(ctx, rm, "stage 0 registered again and its record could not keep the ring model", "", []string{w.Conn})
				}
			}
		})
	}
	return offers
}

// locked runs fn under rm.mu, then what it queued to run after.
func (f *Former) locked(rm *ringModel, fn func()) {
	rm.mu.Lock()
	fn()
	after := rm.after
	rm.after = nil
	rm.publish()
	rm.mu.Unlock()
	for _, a := range after {
		a()
	}
}

// publish refreshes the state Rings reads; under mu.
func (rm *ringModel) publish() {
	st := State{Model: rm.id, Candidates: len(rm.cands)}
	if fm := rm.cur; fm != nil {
		st.Plan, st.Stages, st.Serving = fm.hash, fm.plan.Stages, fm.serving
		for s := range fm.plan.Stages {
			if m, ok := fm.plan.Primary(s); ok {
				st.Primaries = append(st.Primaries, m.Node)
				st.Layers = append(st.Layers, m.LayerEnd-m.LayerStart)
			}
		}
	}
	rm.snap.Store(&st)
}

// Rings is the state of every loaded ring model, in catalogue order.
func (f *Former) Rings() []State {
	var out []State
	for _, m := range f.cfg.Catalog.Models() {
		f.mu.Lock()
		rm, ok := f.models[m.ID]
		f.mu.Unlock()
		if ok {
			out = append(out, *rm.snap.Load())
		}
	}
	return out
}

// JobRing is what a job of the ring model adds to its Job message: the
// serving plan and the nonce of the attempt with this ticket (slot 0 and
// no blockhash: the gateway runs without a chain). ok is false when model
// has no serving ring.
func (f *Former) JobRing(model, ticket string) (*relaymsg.RingJob, bool) {
	rm, ok := f.model(model)
	if !ok {
		return nil, false
	}
	fm := rm.live.Load()
	if fm == nil {
		return nil, false
	}
	return &relaymsg.RingJob{Plan: fm.hash, Nonce: relaymsg.RingNonce(ticket)}, true
}
