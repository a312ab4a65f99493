package ringmember

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"time"

	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/workerd/backend/builtin"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/sample"
	"github.com/c0mpute/c0mpute/workerd/shardblob"
	"github.com/c0mpute/c0mpute/workerd/speculate"
	"github.com/c0mpute/c0mpute/workerd/stagenet"
)

// Assignment is one plan a member serves: the plan and the model's
// manifest, where the other members' stage listeners are, and the layers
// this member loaded for its place in the plan (found by its key).
type Assignment struct {
	// Model is the ring model's id, for logs.
	Model string
	// Hash is the plan's hash (shard.Plan.Hash), which jobs and receipts
	// name.
	Hash     shard.Hash
	Plan     shard.Plan
	Manifest shard.Manifest
	// Peers are the stage listener addresses of the plan's members
	// (relaymsg.RingAssign.Peers); this member needs its next stage's.
	Peers map[shard.PublicKey]string
	// Part is this member's loaded layers: the plan's range for it, with
	// the embedding on stage 0 and the head on the last stage.
	Part *shardblob.Part
	// Workers is the matrix-product goroutines Part was opened with
	// (shardblob.Open's workers); the Part's Model already uses them, and
	// Serve only logs it.
	Workers int
	// ContextTokens is the plan's context length
	// (shard.Params.ContextTokens): the positions every stage reserved KV
	// memory for. The driver caps each reply so the prompt and the reply
	// fit in it (a prompt that does not is refused), and every stage
	// refuses a frame whose positions would go past it. The model's own
	// context length caps it in turn.
	ContextTokens int
}

// Defaults.
const (
	// DefaultStepTimeout bounds how long a member waits on one step of a
	// job: the driver for its answer from the last stage, any member for
	// a send to its next stage. A step is a prompt chunk of at most
	// MaxChunk positions through every stage, or one token: well under a
	// minute on any ring worth serving; a ring that takes longer has a
	// stage that is gone.
	DefaultStepTimeout = 60 * time.Second
	// maxModelDim bounds the hidden size of a ring model (the widest open
	// models have 16384), and with it the payload a stage listener
	// accepts before it knows the plan: MaxChunk positions of F32.
	maxModelDim = 1 << 14
	// maxContextTokens bounds an assignment's context, as
	// shard.Params.ContextTokens is bounded.
	maxContextTokens = 1 << 24
	// redial backoff of a member's connection to its next stage.
	minRedial = 20 * time.Millisecond
	maxRedial = 2 * time.Second
	// endedJobs is how many ended job ids a member remembers, so frames
	// of a job already ended (sent before the sender learnt it) are
	// dropped rather than taken for a protocol error.
	endedJobs = 16
)

type options struct {
	stepTimeout time.Duration
	chunk       int
	now         func() time.Time
	draft       speculate.Choice
}

// Option configures NewServer.
type Option func(*options)

// WithStepTimeout sets how long a member waits on one step of a job
// (default DefaultStepTimeout).
func WithStepTimeout(d time.Duration) Option { return func(o *options) { o.stepTimeout = d } }

// WithPromptChunk sets the most prompt positions the driver sends in one
// frame, 1 to MaxChunk (default MaxChunk). Smaller chunks start the next
// stage sooner on long prompts; tests use them to cross chunk boundaries
// with tiny models.
func WithPromptChunk(n int) Option { return func(o *options) { o.chunk = n } }

// WithClock sets the clock receipts are dated by (default time.Now).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithDraft sets the drafter the driver uses per ring model (speculative
// decoding; default lookup for every model).
func WithDraft(c speculate.Choice) Option { return func(o *options) { o.draft = c } }

// ErrNotServing is returned by Chat when this member serves no plan, or
// not the plan a job names, or is not its first stage.
var ErrNotServing = errors.New("ringmember: not serving that ring")

// Server is a ring member's stage server: it listens for the other
// members' stage connections and serves its stage of one plan at a time.
type Server struct {
	key  ed25519.PrivateKey
	self shard.PublicKey
	log  *slog.Logger
	o    options
	ln   *stagenet.Listener

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	allowed map[shard.PublicKey]bool
	ring    *ring
	closed  bool
	// chats counts the driver's Chat calls under way: Close waits for
	// them, so that a caller may close the Parts once Close returns (a
	// Chat's embedding and layers read them). waiting says Close is at
	// that wait (for tests).
	chats   sync.WaitGroup
	waiting bool
	// bench answers peers' bench frames (SetBench); nil answers none.
	bench BenchFunc
	// spec counts the driver's verification loops (SpecStats).
	spec speculate.Stats
}

// SpecStats are the counts of the verification loops this member ran as
// a ring's driver, for its metrics.
func (s *Server) SpecStats() *speculate.Stats { return &s.spec }

// BenchFunc runs a model's bench layer for a peer that times this member
// at probe: model is the bench frame's job id (the manifest hash in hex),
// payload its one-token hidden state. It returns the KindBenchReply
// payload, or an error the peer is told (ErrNoBench when this member
// holds no bench layer of that model).
type BenchFunc func(ctx context.Context, model string, payload []byte) ([]byte, error)

// ErrNoBench means this member holds no bench layer of the model a bench
// frame names.
var ErrNoBench = errors.New("ringmember: no bench layer of that model here")

// MaxBenchPerConn is how many bench frames one accepted connection may
// send: a probe sends benchRuns, and a peer cannot use the listener to
// burn this member's CPU without limit (the listener also bounds the
// connections per peer, and admits only probe peers and plan members).
const MaxBenchPerConn = 8

// SetBench registers what answers bench frames (see BenchFunc); nil stops
// answering them.
func (s *Server) SetBench(fn BenchFunc) {
	s.mu.Lock()
	s.bench = fn
	s.mu.Unlock()
}

// NewServer listens for stage connections on listen (host:port; port 0
// picks one) with the member's identity key. log may be nil (discard).
func NewServer(key ed25519.PrivateKey, listen string, log *slog.Logger, opts ...Option) (*Server, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("ringmember: the identity key is %d bytes, want an ed25519 private key of %d", len(key), ed25519.PrivateKeySize)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := options{stepTimeout: DefaultStepTimeout, chunk: MaxChunk, now: time.Now}
	for _, f := range opts {
		f(&o)
	}
	switch {
	case o.stepTimeout <= 0:
		return nil, fmt.Errorf("ringmember: WithStepTimeout(%s): want a positive duration", o.stepTimeout)
	case o.chunk < 1 || o.chunk > MaxChunk:
		return nil, fmt.Errorf("ringmember: WithPromptChunk(%d): want 1 to %d", o.chunk, MaxChunk)
	case o.now == nil:
		return nil, errors.New("ringmember: WithClock(nil): want a clock")
	}
	s := &Server{key: key, self: shard.KeyOf(key), log: log, o: o, allowed: map[shard.PublicKey]bool{}}
	ln, err := stagenet.Listen(listen, key, s.allow, stagenet.WithMaxPayload(maxPayload(maxModelDim)), stagenet.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("ringmember: %w", err)
	}
	s.ln = ln
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.goSafe("accept", s.acceptLoop)
	return s, nil
}

// Addr is the stage listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Key is this member's identity.
func (s *Server) Key() shard.PublicKey { return s.self }

// Allow sets the keys, besides the current plan's members, that may
// connect to the stage listener: the peers of the last probe, which
// measure their round trip to this member. It replaces the previous set;
// Allow() clears it. Such a peer's connection answers pings and bench
// frames only (at most MaxBenchPerConn of them): a data
// frame from anyone but this stage's previous stage closes it.
func (s *Server) Allow(peers ...shard.PublicKey) {
	m := make(map[shard.PublicKey]bool, len(peers))
	for _, p := range peers {
		m[p] = true
	}
	s.mu.Lock()
	s.allowed = m
	s.mu.Unlock()
}

// allow is the listener's admission check, run during each handshake.
func (s *Server) allow(k shard.PublicKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	return s.allowed[k] || (s.ring != nil && s.ring.members[k])
}

// Probe measures the round trip to a member's stage listener: it dials
// addr, requiring the key peer, and returns the least of three pings.
func (s *Server) Probe(ctx context.Context, peer shard.PublicKey, addr string) (time.Duration, error) {
	r, err := s.ProbeBench(ctx, peer, addr, nil)
	return r.RTT, err
}

// BenchCheck is the bench part of a probe: one KindBench frame per input,
// each reply required to equal the matching Want bit for bit (what this
// member computed itself for that input).
type BenchCheck struct {
	// Model is the model's manifest hash in hex: the frames' job id.
	Model string
	// Inputs are one-token hidden states in F32 wire form; Want the
	// bench layer's output for each, in the same form.
	Inputs, Want [][]byte
}

// ProbeResult is what a probe measured.
type ProbeResult struct {
	// RTT is the least of three pings.
	RTT time.Duration
	// Layer is the peer's bench layer time: the least over the bench
	// frames of (round trip − baseline), at least 1 µs, where the
	// baseline is the least of RTT and of a TCP connect's time; 0 when no
	// bench was asked.
	Layer time.Duration
}

// ErrBenchMismatch means a peer's bench reply was not the layer's output
// for the input sent: it computes something else than the model, and
// cannot be trusted with layers.
var ErrBenchMismatch = errors.New("ringmember: bench reply differs from this member's own result")

// ErrBenchRefused means a peer answered a bench frame with an error frame
// (it holds no bench layer of the model, or refused the input).
var ErrBenchRefused = errors.New("ringmember: the peer refused the bench")

// ProbeBench is Probe, then, when b is not nil, the bench: each of
// b.Inputs is sent as a KindBench frame and its round trip timed; every
// reply must be a KindBenchReply equal to the matching b.Want (else the
// error wraps ErrBenchMismatch, or says what the peer answered instead).
// At most MaxBenchPerConn inputs.
func (s *Server) ProbeBench(ctx context.Context, peer shard.PublicKey, addr string, b *BenchCheck) (ProbeResult, error) {
	if err := validate.Var(addr, "required,hostname_port,max=256"); err != nil {
		return ProbeResult{}, fmt.Errorf("ringmember: probe %s: address %q is not host:port", peer, addr)
	}
	if b != nil && (len(b.Inputs) == 0 || len(b.Inputs) > MaxBenchPerConn || len(b.Want) != len(b.Inputs)) {
		return ProbeResult{}, fmt.Errorf("ringmember: probe %s: %d bench inputs and %d results, want 1..%d of each", peer, len(b.Inputs), len(b.Want), MaxBenchPerConn)
	}
	maxIn := stagenet.MaxErrorPayload
	if b != nil {
		maxIn = stagenet.MaxBenchPayload
	}
	c, err := stagenet.Dial(ctx, addr, s.key, peer, stagenet.WithMaxPayload(maxIn), stagenet.WithLogger(s.log))
	if err != nil {
		return ProbeResult{}, fmt.Errorf("ringmember: probe: %w", err)
	}
	defer c.Close()
	best := time.Duration(math.MaxInt64)
	for range 3 {
		d, err := c.Ping(ctx)
		if err != nil {
			return ProbeResult{}, fmt.Errorf("ringmember: probe: %w", err)
		}
		best = min(best, d)
	}
	res := ProbeResult{RTT: best}
	if b == nil {
		return res, nil
	}
	// The bench's baseline is the least of the pings and of TCP connects:
	// a peer's kernel answers a connect, so a peer that delays its pongs
	// on purpose (to have its layer look faster, the round trip less a
	// longer RTT) or is too busy to answer them promptly cannot inflate it.
	kernel, err := connectRTT(ctx, addr, 3)
	if err != nil {
		return ProbeResult{}, fmt.Errorf("ringmember: probe %s: %w", peer, err)
	}
	base := min(best, kernel)
	layer := time.Duration(math.MaxInt64)
	for i, in := range b.Inputs {
		start := time.Now()
		if err := c.Send(ctx, &stagenet.Frame{Kind: stagenet.KindBench, Job: b.Model, Step: uint32(i), Payload: in}); err != nil {
			return ProbeResult{}, fmt.Errorf("ringmember: bench %s: %w", peer, err)
		}
		f, err := c.Recv(ctx)
		if err != nil {
			return ProbeResult{}, fmt.Errorf("ringmember: bench %s: no reply: %w", peer, err)
		}
		took := time.Since(start)
		switch {
		case f.Kind == stagenet.KindError:
			return ProbeResult{}, fmt.Errorf("%w: peer %s said %q", ErrBenchRefused, peer, f.Payload)
		case f.Kind != stagenet.KindBenchReply || f.Job != b.Model || f.Step != uint32(i):
			return ProbeResult{}, fmt.Errorf("ringmember: bench %s: got a %s frame for %q step %d, want the bench reply for %s step %d", peer, f.Kind, f.Job, f.Step, b.Model, i)
		case !bytes.Equal(f.Payload, b.Want[i]):
			return ProbeResult{}, fmt.Errorf("%w: peer %s, bench %d", ErrBenchMismatch, peer, i)
		}
		layer = min(layer, took-base)
	}
	res.Layer = max(layer, time.Microsecond)
	return res, nil
}

// connectRTT is the least time of n TCP connects to addr, each closed at
// once: a round trip the peer's kernel answers, whatever its process
// does. (The peer's listener sees a connection that ends before its
// handshake, and drops it.)
func connectRTT(ctx context.Context, addr string, n int) (time.Duration, error) {
	var d net.Dialer
	best := time.Duration(math.MaxInt64)
	for range n {
		start := time.Now()
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return 0, fmt.Errorf("time a connect to %s: %w", addr, err)
		}
		best = min(best, time.Since(start))
		c.Close()
	}
	return best, nil
}

// Serve starts serving this member's stage of a's plan, replacing any
// plan served before (its jobs end, its connections close). It checks the
// assignment: the plan's shape and hash, the manifest's hash against the
// plan's model, this member's place in the plan, that the Part holds that
// place's layers (and the embedding or head it needs), and the next
// stage's address. The connection to the next stage (the first stage,
// for the last) is dialled at once and redialled with backoff while the
// plan is served; the previous stage's connection is accepted.
//
// A standby or verifier assignment is held — its members may connect, to
// probe — but not served: nothing is dialled and no frame is taken.
func (s *Server) Serve(a *Assignment) error {
	r, err := s.newRing(a)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		r.cancel()
		r.closeDrafts()
		return errors.New("ringmember: server closed")
	}
	old := s.ring
	s.ring = r
	s.mu.Unlock()
	if old != nil {
		old.stop()
	}
	r.start()
	return nil
}

// Drop stops serving the plan hash, if it is the one served: its jobs end
// and its connections close. A Chat running on it returns promptly, but
// Drop does not wait for it (the Chat's emit may be its caller): Close
// does, so Parts may be closed once Close returns, not before.
func (s *Server) Drop(hash shard.Hash) {
	s.mu.Lock()
	r := s.ring
	if r == nil || r.hash != hash {
		s.mu.Unlock()
		return
	}
	s.ring = nil
	s.mu.Unlock()
	r.stop()
}

// Close stops the listener and the plan served, and waits for every
// goroutine of the server and every Chat call under way (which returns
// promptly once its ring is stopped): once Close returns, nothing of the
// server reads an Assignment's Part any more.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	r := s.ring
	s.ring = nil
	s.mu.Unlock()
	s.cancel()
	err := s.ln.Close()
	if r != nil {
		r.stop()
	}
	s.wg.Wait()
	s.mu.Lock()
	s.waiting = true
	s.mu.Unlock()
	s.chats.Wait()
	if r != nil {
		r.closeDrafts()
	}
	if err != nil {
		return fmt.Errorf("ringmember: %w", err)
	}
	return nil
}

func (s *Server) current() *ring {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ring
}

// startChat returns the plan served and counts a Chat on it, which must
// call s.chats.Done when it returns; nil when none is served or the
// server is closed (nothing counted then).
func (s *Server) startChat() *ring {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.ring == nil {
		return nil
	}
	s.chats.Add(1)
	return s.ring
}

// waitingForChats reports whether Close is waiting for Chat calls.
func (s *Server) waitingForChats() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

// goSafe runs fn in a goroutine the server waits for at Close; a panic
// is logged and ends that goroutine only.
func (s *Server) goSafe(what string, fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("ringmember: goroutine panicked", "what", what, "panic", p)
			}
		}()
		fn()
	}()
}

func (s *Server) acceptLoop() {
	for {
		c, err := s.ln.Accept(s.ctx)
		if err != nil {
			var hs *stagenet.HandshakeError
			if errors.As(err, &hs) {
				// A refused key or a failed handshake: the listener goes on.
				s.log.Debug("ringmember: stage connection refused", "err", err)
				continue
			}
			if s.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				s.log.Error("ringmember: the stage listener stopped", "err", err)
			}
			return
		}
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			c.Close()
			return
		}
		s.goSafe("conn", func() { s.handle(c) })
	}
}

// handle reads an accepted connection. Data frames from this stage's
// previous stage go to the ring; anyone else's close the connection.
// Pings are answered by the connection itself, which is all a probe
// needs.
func (s *Server) handle(c *stagenet.Conn) {
	defer c.Close()
	peer := c.Peer()
	var bound *ring
	defer func() {
		if bound != nil {
			bound.dropConn(c)
		}
	}()
	benches := 0
	for {
		f, err := c.Recv(s.ctx)
		if err != nil {
			if bound != nil {
				bound.push(inEvent{conn: c, err: fmt.Errorf("ringmember: the connection from stage %d's member %s ended: %w", bound.prevStage, peer, err)})
			}
			return
		}
		if f.Kind == stagenet.KindBench {
			if benches++; benches > MaxBenchPerConn {
				s.log.Warn("ringmember: peer sent more bench frames than one connection may; closing its connection",
					"peer", peer.String(), "limit", MaxBenchPerConn)
				return
			}
			if err := s.answerBench(c, &f); err != nil {
				s.log.Debug("ringmember: bench reply not sent; closing the connection", "peer", peer.String(), "err", err)
				return
			}
			continue
		}
		r := s.current()
		if r == nil || r.held || peer != r.prev {
			s.log.Warn("ringmember: data frame from a member that is not this stage's previous stage; closing its connection",
				"peer", peer.String(), "kind", f.Kind.String())
			return
		}
		if bound != r {
			if bound != nil {
				bound.dropConn(c)
			}
			if !r.addConn(c) {
				return
			}
			bound = r
		}
		if !bound.push(inEvent{conn: c, f: f}) {
			return
		}
	}
}

// answerBench runs a bench frame through the registered BenchFunc and
// sends the reply (or an error frame saying why there is none), within
// the step timeout. It returns only a failure to send.
func (s *Server) answerBench(c *stagenet.Conn, f *stagenet.Frame) error {
	s.mu.Lock()
	fn := s.bench
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, s.o.stepTimeout)
	defer cancel()
	out := &stagenet.Frame{Kind: stagenet.KindBenchReply, Job: f.Job, Step: f.Step}
	var err error
	if fn == nil {
		err = ErrNoBench
	} else {
		out.Payload, err = fn(ctx, f.Job, f.Payload)
	}
	if err != nil {
		out = &stagenet.Frame{Kind: stagenet.KindError, Job: f.Job, Step: f.Step, Payload: reason(err)}
	}
	return c.Send(ctx, out)
}

// inEvent is what a ring's goroutine takes in: a frame from the previous
// stage's connection, or the loss of a connection.
type inEvent struct {
	conn *stagenet.Conn // the connection it came on; nil for the outbound link
	f    stagenet.Frame
	err  error // a connection ended
	out  bool  // the connection to the next stage ended
}

// ring is one plan as this member serves it.
type ring struct {
	s     *Server
	a     *Assignment
	hash  shard.Hash
	me    shard.Member
	log   *slog.Logger
	model *engine.Model
	cfg   engine.Config
	// held: a standby or verifier assignment, not served.
	held   bool
	stages int
	driver bool // stage 0
	tail   bool // the last stage
	// prev is who dials this member (the previous stage's primary; the
	// last stage's for stage 0); next is whom it dials.
	prev, next           shard.PublicKey
	prevStage, nextStage int
	members              map[shard.PublicKey]bool
	text                 *builtin.Text // stage 0
	drafts               *drafts       // stage 0
	out                  *link         // nil for a one-stage ring
	maxPayload           int
	// ctxTokens is the most positions a job's cache may hold: the
	// plan's context, capped by the model's.
	ctxTokens int

	inbox  chan inEvent
	ended  *recent
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	stopped bool
	conns   map[*stagenet.Conn]bool
	busy    chan struct{} // the driver runs one job at a time
	job     *driverJob
}

func (s *Server) newRing(a *Assignment) (*ring, error) {
	if a == nil {
		return nil, errors.New("ringmember: serve: no assignment")
	}
	switch {
	case a.Model == "" || len(a.Model) > 128:
		return nil, fmt.Errorf("ringmember: serve: the assignment's model id %q: want 1 to 128 characters", a.Model)
	case a.Part == nil:
		return nil, errors.New("ringmember: serve: the assignment has no loaded part: open its layers with shardblob.Open first")
	case a.Workers < 0:
		return nil, fmt.Errorf("ringmember: serve: the assignment's workers is %d, want 0 or more", a.Workers)
	case a.ContextTokens < 1 || a.ContextTokens > maxContextTokens:
		return nil, fmt.Errorf("ringmember: serve: the assignment's context is %d tokens, want 1 to %d (the plan's params' context_tokens)", a.ContextTokens, maxContextTokens)
	case len(a.Peers) > relaymsg.MaxRingPeers:
		return nil, fmt.Errorf("ringmember: serve: the assignment lists %d peers, at most %d", len(a.Peers), relaymsg.MaxRingPeers)
	}
	for k, addr := range a.Peers {
		if err := validate.Var(addr, "required,hostname_port,max=256"); err != nil {
			return nil, fmt.Errorf("ringmember: serve: member %s's address %q is not host:port", k, addr)
		}
	}
	if err := a.Plan.Check(); err != nil {
		return nil, fmt.Errorf("ringmember: serve: %w", err)
	}
	if h := a.Plan.Hash(); h != a.Hash {
		return nil, fmt.Errorf("ringmember: serve: the plan hashes to %s, the assignment says %s", h, a.Hash)
	}
	if err := a.Manifest.Check(); err != nil {
		return nil, fmt.Errorf("ringmember: serve: %w", err)
	}
	if h := a.Manifest.Hash(); h != a.Plan.Model {
		return nil, fmt.Errorf("ringmember: serve: the manifest hashes to %s, the plan is for model %s", h, a.Plan.Model)
	}
	if len(a.Manifest.Layers) != a.Plan.Layers {
		return nil, fmt.Errorf("ringmember: serve: the manifest lists %d layers, the plan %d", len(a.Manifest.Layers), a.Plan.Layers)
	}
	r := &ring{s: s, a: a, hash: a.Hash, stages: a.Plan.Stages, members: map[shard.PublicKey]bool{},
		inbox: make(chan inEvent, 1), ended: &recent{}, conns: map[*stagenet.Conn]bool{}, busy: make(chan struct{}, 1)}
	found := false
	for _, m := range a.Plan.Members {
		r.members[m.Node] = true
		if m.Node == s.self && !found {
			r.me, found = m, true
		}
	}
	if !found {
		return nil, fmt.Errorf("ringmember: serve: this member (%s) is not in plan %s", s.self, a.Hash)
	}
	r.log = s.log.With("model", a.Model, "plan", a.Hash.String()[:12], "stage", r.me.Stage)
	if r.me.Role != shard.RolePrimary {
		r.held = true
		r.ctx, r.cancel = context.WithCancel(s.ctx)
		return r, nil
	}
	r.model = a.Part.Model()
	r.cfg = r.model.Config()
	first, last, embed, head := r.model.Holds()
	r.driver, r.tail = r.me.Stage == 0, r.me.Stage == r.stages-1
	switch {
	case r.cfg.Layers != a.Plan.Layers:
		return nil, fmt.Errorf("ringmember: serve: the loaded model has %d layers, the plan %d", r.cfg.Layers, a.Plan.Layers)
	case first > r.me.LayerStart || last < r.me.LayerEnd:
		return nil, fmt.Errorf("ringmember: serve: the loaded part holds layers [%d,%d), stage %d needs [%d,%d)", first, last, r.me.Stage, r.me.LayerStart, r.me.LayerEnd)
	case r.driver && !embed:
		return nil, errors.New("ringmember: serve: the first stage's part lacks the embedding")
	case r.tail && !head:
		return nil, errors.New("ringmember: serve: the last stage's part lacks the head")
	case r.cfg.Embd <= 0 || r.cfg.Embd > maxModelDim:
		return nil, fmt.Errorf("ringmember: serve: hidden size %d, at most %d is served", r.cfg.Embd, maxModelDim)
	}
	r.maxPayload = maxPayload(r.cfg.Embd)
	r.ctxTokens = min(a.ContextTokens, r.cfg.Context)
	if r.driver {
		// The generation loop caps prompt and reply at its config's
		// context: the plan's, which the stages' memory was planned for.
		tc := r.cfg
		tc.Context = r.ctxTokens
		t, err := builtin.NewText(a.Part.Metadata(), tc)
		if err != nil {
			return nil, fmt.Errorf("ringmember: serve: the first stage's metadata: %w", err)
		}
		r.text = t
	}
	if r.stages > 1 {
		r.nextStage = (r.me.Stage + 1) % r.stages
		r.prevStage = (r.me.Stage + r.stages - 1) % r.stages
		nm, _ := a.Plan.Primary(r.nextStage)
		pm, _ := a.Plan.Primary(r.prevStage)
		r.next, r.prev = nm.Node, pm.Node
		addr, ok := a.Peers[r.next]
		if !ok {
			return nil, fmt.Errorf("ringmember: serve: no address for stage %d's member %s among the assignment's peers", r.nextStage, r.next)
		}
		r.out = &link{r: r, peer: r.next, addr: addr, sem: make(chan struct{}, 1), backoff: minRedial}
	}
	if r.driver {
		// Last, after every check that can refuse the assignment: a
		// refused ring is never stopped, so nothing would free it.
		r.drafts = r.newDrafts(a.Part.Metadata())
	}
	r.ctx, r.cancel = context.WithCancel(s.ctx)
	return r, nil
}

// start begins serving: the dial to the next stage and the goroutine
// that takes frames in.
func (r *ring) start() {
	if r.held {
		r.log.Info("ringmember: holding a backup assignment (not served)", "role", string(r.me.Role))
		return
	}
	r.log.Info("ringmember: serving", "layers", fmt.Sprintf("[%d,%d)", r.me.LayerStart, r.me.LayerEnd), "stages", r.stages, "workers", r.a.Workers)
	if r.out == nil {
		return
	}
	r.goSafe("dial", func() { _, _ = r.out.get(r.ctx) })
	if r.driver {
		r.goSafe("route", r.route)
	} else {
		r.goSafe("stage", r.runStage)
	}
}

// stop ends the ring: its jobs fail, its connections close, and its
// goroutines are waited for.
func (r *ring) stop() {
	r.mu.Lock()
	r.stopped = true
	conns := make([]*stagenet.Conn, 0, len(r.conns))
	for c := range r.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	r.cancel()
	for _, c := range conns {
		c.Close()
	}
	if r.out != nil {
		r.out.close()
	}
	r.wg.Wait()
	// The draft model is freed once the job on it ends (Close frees it
	// itself after its wait for the Chat calls).
	r.s.goSafe("free the draft model", r.closeDrafts)
	r.log.Info("ringmember: stopped serving")
}

func (r *ring) goSafe(what string, fn func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() {
			if p := recover(); p != nil {
				r.log.Error("ringmember: goroutine panicked", "what", what, "panic", p)
			}
		}()
		fn()
	}()
}

// addConn records an inbound connection, closed when the ring stops.
func (r *ring) addConn(c *stagenet.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return false
	}
	r.conns[c] = true
	return true
}

func (r *ring) dropConn(c *stagenet.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
}

// push hands an event to the ring's goroutine, waiting while it is busy
// (which holds the sender back: TCP back-pressure, not memory).
func (r *ring) push(ev inEvent) bool {
	select {
	case r.inbox <- ev:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// send sends a frame to the next stage within the step timeout. Only a
// job's Open may wait for the connection to be (re)dialled: any later
// frame of a job needs the connection its Open went on, since a new one
// reaches a stage that has lost the job.
func (r *ring) send(ctx context.Context, f *stagenet.Frame) error {
	ctx, cancel := context.WithTimeout(ctx, r.s.o.stepTimeout)
	defer cancel()
	var c *stagenet.Conn
	if f.Kind == stagenet.KindOpen {
		var err error
		if c, err = r.out.get(ctx); err != nil {
			return err
		}
	} else if c = r.out.current(); c == nil {
		return fmt.Errorf("ringmember: the connection to stage %d is gone", r.nextStage)
	}
	if err := c.Send(ctx, f); err != nil {
		r.out.drop(c)
		return fmt.Errorf("ringmember: send to stage %d: %w", r.nextStage, err)
	}
	return nil
}

// sendError tells the next stage a job failed, so the failure travels
// the ring to the driver; best effort.
func (r *ring) sendError(job string, err error) {
	if r.out == nil {
		return
	}
	if serr := r.send(r.ctx, &stagenet.Frame{Kind: stagenet.KindError, Job: job, Payload: reason(err)}); serr != nil {
		r.log.Debug("ringmember: could not pass a job's failure on", "job", job, "err", serr)
	}
}

// link is a member's connection to its next stage: dialled at Serve,
// redialled with backoff when lost, and on demand by a send.
type link struct {
	r    *ring
	peer shard.PublicKey
	addr string
	sem  chan struct{} // one dialler at a time

	mu      sync.Mutex
	conn    *stagenet.Conn
	backoff time.Duration
	closed  bool
}

// get returns the connection, dialling (and retrying until ctx ends) if
// there is none.
func (l *link) get(ctx context.Context) (*stagenet.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("ringmember: connect to stage %d: %w", l.r.nextStage, context.Cause(ctx))
	}
	defer func() { <-l.sem }()
	wait := minRedial
	for {
		l.mu.Lock()
		c, closed := l.conn, l.closed
		l.mu.Unlock()
		if closed {
			return nil, fmt.Errorf("ringmember: connect to stage %d: %w", l.r.nextStage, ErrNotServing)
		}
		if c != nil {
			return c, nil
		}
		c, err := stagenet.Dial(ctx, l.addr, l.r.s.key, l.peer, stagenet.WithMaxPayload(l.r.maxPayload), stagenet.WithLogger(l.r.s.log))
		if err == nil {
			l.mu.Lock()
			if l.closed {
				l.mu.Unlock()
				c.Close()
				continue
			}
			l.conn = c
			l.mu.Unlock()
			dialled := time.Now()
			l.r.goSafe("watch", func() { l.watch(c, dialled) })
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("ringmember: connect to stage %d's member at %s: %w", l.r.nextStage, l.addr, err)
		}
		l.r.log.Debug("ringmember: dial next stage failed; retrying", "next", l.peer.String(), "err", err, "retry_in", wait)
		if !sleep(ctx, wait) {
			return nil, fmt.Errorf("ringmember: connect to stage %d's member at %s: %w", l.r.nextStage, l.addr, err)
		}
		wait = min(2*wait, maxRedial)
	}
}

// watch reads the outbound connection, which carries nothing to this
// member but pongs (the connection handles those): a data frame on it is
// the peer's error, and its end is reported to the ring and redialled.
func (l *link) watch(c *stagenet.Conn, dialled time.Time) {
	f, err := c.Recv(l.r.ctx)
	if err == nil {
		err = fmt.Errorf("ringmember: stage %d sent a %s frame on this member's outbound connection", l.r.nextStage, f.Kind)
	}
	l.drop(c)
	if l.r.ctx.Err() != nil {
		return
	}
	l.r.push(inEvent{err: fmt.Errorf("ringmember: the connection to stage %d ended: %w", l.r.nextStage, err), out: true})
	// A connection refused at once (the peer does not serve this plan
	// yet) is retried ever more slowly; one that lived a while at once.
	l.mu.Lock()
	if time.Since(dialled) > maxRedial {
		l.backoff = minRedial
	}
	wait := l.backoff
	l.backoff = min(2*l.backoff, maxRedial)
	l.mu.Unlock()
	if sleep(l.r.ctx, wait) {
		_, _ = l.get(l.r.ctx)
	}
}

// current is the connection, or nil while there is none.
func (l *link) current() *stagenet.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conn
}

// drop forgets c (if it is the link's connection) and closes it.
func (l *link) drop(c *stagenet.Conn) {
	l.mu.Lock()
	if l.conn == c {
		l.conn = nil
	}
	l.mu.Unlock()
	c.Close()
}

func (l *link) close() {
	l.mu.Lock()
	l.closed = true
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// sleep waits d or until ctx ends; false if ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// recent remembers the last few ended job ids.
type recent struct {
	mu  sync.Mutex
	ids [endedJobs]string
	n   int
}

func (e *recent) add(id string) {
	e.mu.Lock()
	e.ids[e.n%endedJobs] = id
	e.n++
	e.mu.Unlock()
}

func (e *recent) has(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, x := range e.ids {
		if x == id && x != "" {
			return true
		}
	}
	return false
}

// stageJob is a job open on a stage other than the driver's.
type stageJob struct {
	account
	src  *stagenet.Conn // the connection its Open came on
	st   *engine.Stage
	smp  *sample.Sampler // the last stage's
	step uint32
	// floor is, after a verify frame, the least position the next frame
	// may roll the cache back to (the verify's first row stays); -1
	// otherwise.
	floor int
}

// rewind takes the position of a data frame that follows a verify frame:
// a verify leaves every stage's cache holding all its rows, and the next
// frame's position (the driver's cache length: the rows the last stage
// accepted) says how many stay. Any other frame's position must be the
// cache's length.
func (j *stageJob) rewind(f *stagenet.Frame) error {
	pos, n := int(f.Pos), j.st.Len()
	floor := j.floor
	j.floor = -1
	switch {
	case pos == n:
		return nil
	case floor >= 0 && pos >= floor && pos < n:
		return j.st.Truncate(pos)
	case floor >= 0:
		return badFrame("job %q: %s frame at position %d after a verify of positions %d..%d", f.Job, f.Kind, pos, floor-1, n)
	}
	return badFrame("job %q: %s frame at position %d, the cache holds %d", f.Job, f.Kind, pos, n)
}

// runStage takes a non-driver stage's frames in order, one job at a time.
func (r *ring) runStage() {
	var j *stageJob
	for {
		select {
		case <-r.ctx.Done():
			return
		case ev := <-r.inbox:
			j = r.stageEvent(j, ev)
		}
	}
}

// stageEvent handles one event and returns the job open after it. A
// frame that breaks the protocol ends its job (the failure is passed on
// toward the driver) and nothing else.
func (r *ring) stageEvent(j *stageJob, ev inEvent) (open *stageJob) {
	cur := j // the job a panic would leave broken
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("ringmember: stage panicked on a frame", "panic", p)
			if cur != nil {
				r.failJob(cur, errors.New("ringmember: internal error"))
			}
			open = nil
		}
	}()
	if ev.err != nil {
		if j != nil && (ev.out || ev.conn == j.src) {
			r.failJob(j, ev.err)
			return nil
		}
		return j
	}
	f := &ev.f
	switch {
	case f.Kind == stagenet.KindOpen:
		if j != nil {
			r.failJob(j, badFrame("job %q opened while job %q was open", f.Job, j.open.Job))
			cur = nil
		}
		nj, err := r.openStageJob(ev)
		if err != nil {
			r.log.Warn("ringmember: refused a job", "job", f.Job, "err", err)
			r.ended.add(f.Job)
			r.sendError(f.Job, err)
			return nil
		}
		return nj
	case f.Kind == stagenet.KindError:
		if j != nil && f.Job == j.open.Job {
			r.log.Info("ringmember: job failed on an earlier stage", "job", f.Job)
			r.ended.add(f.Job)
			r.sendError(f.Job, errors.New(string(f.Payload)))
			return nil
		}
		return j
	case j == nil || f.Job != j.open.Job:
		if r.ended.has(f.Job) {
			return j // a late frame of a job already ended
		}
		err := badFrame("%s frame for job %q, which is not open on stage %d", f.Kind, f.Job, r.me.Stage)
		if j != nil {
			r.failJob(j, err)
			return nil
		}
		r.log.Warn("ringmember: frame for no open job", "job", f.Job, "kind", f.Kind.String())
		r.ended.add(f.Job)
		r.sendError(f.Job, err)
		return nil
	}
	var err error
	switch {
	case ev.conn != j.src:
		err = badFrame("job %q's %s frame came on another connection than its open", f.Job, f.Kind)
	case f.Step <= j.step:
		err = badFrame("job %q: step %d after step %d (replayed or out of order)", f.Job, f.Step, j.step)
	default:
		j.step = f.Step
		switch f.Kind {
		case stagenet.KindHidden:
			err = r.stageHidden(j, f)
		case stagenet.KindVerify:
			err = r.stageVerify(j, f)
		case stagenet.KindTruncate:
			err = r.stageTruncate(j, f)
		case stagenet.KindClose:
			if err = r.stageClose(j, f); err == nil {
				r.ended.add(f.Job)
				return nil
			}
		default:
			err = badFrame("job %q: unexpected %s frame on stage %d", f.Job, f.Kind, r.me.Stage)
		}
	}
	if err != nil {
		r.failJob(j, err)
		return nil
	}
	return j
}

// failJob ends a job with an error and passes the failure on.
func (r *ring) failJob(j *stageJob, err error) {
	r.log.Warn("ringmember: job failed", "job", j.open.Job, "err", err)
	r.ended.add(j.open.Job)
	r.sendError(j.open.Job, err)
}

// openStageJob starts a job on this stage and passes its Open on.
func (r *ring) openStageJob(ev inEvent) (*stageJob, error) {
	o, err := decodeOpen(&ev.f)
	if err != nil {
		return nil, err
	}
	if o.Plan != r.hash {
		return nil, badFrame("job %q is for plan %s, this member serves %s", o.Job, o.Plan, r.hash)
	}
	if o.Prompt > r.ctxTokens {
		return nil, badFrame("job %q: a prompt of %d positions, past the plan's context of %d", o.Job, o.Prompt, r.ctxTokens)
	}
	st, err := r.model.NewStage(r.me.LayerStart, r.me.LayerEnd)
	if err != nil {
		return nil, err
	}
	j := &stageJob{account: account{open: o}, src: ev.conn, st: st, step: ev.f.Step, floor: -1}
	if r.tail {
		if j.smp, err = sample.New(o.Sampling.params()); err != nil {
			return nil, badFrame("job %q: %v", o.Job, err)
		}
		// The last stage answers on its connection to the driver: have it
		// now (a redial in progress may still be waiting out its backoff),
		// since a job's later frames never wait for one.
		ctx, cancel := context.WithTimeout(r.ctx, r.s.o.stepTimeout)
		defer cancel()
		if _, err := r.out.get(ctx); err != nil {
			return nil, err
		}
		return j, nil
	}
	if err := r.send(r.ctx, &stagenet.Frame{Kind: stagenet.KindOpen, Job: o.Job, Step: ev.f.Step, Payload: ev.f.Payload}); err != nil {
		return nil, err
	}
	return j, nil
}

// stageHidden runs this stage's layers over a batch of hidden states and
// passes them on; the last stage applies the head and samples instead,
// answering the driver with the token (or with none for a prompt chunk
// that is not the prompt's last).
func (r *ring) stageHidden(j *stageJob, f *stagenet.Frame) error {
	h, err := r.runStates(j, f, f.Payload, nil)
	if err != nil {
		return err
	}
	var out *stagenet.Frame
	if !r.tail {
		wire, err := engine.EncodeHidden(h, engine.F32)
		if err != nil {
			return err
		}
		out = &stagenet.Frame{Kind: stagenet.KindHidden, Job: f.Job, Step: f.Step, Pos: f.Pos, Payload: wire, Hash: engine.HashHidden(wire)}
	} else {
		var ids []int32
		if end := h.Pos + h.Tokens; end >= j.open.Prompt {
			last := &engine.Hidden{Pos: end - 1, Tokens: 1, Dim: h.Dim, Data: h.Row(h.Tokens - 1)}
			lg, err := r.model.Head(last)
			if err != nil {
				return fmt.Errorf("ringmember: job %q: %w", f.Job, err)
			}
			ids = []int32{j.smp.Sample(lg.Data)}
		}
		out = tokensFrame(f.Job, f.Step, j.st.Len(), ids)
	}
	if err := r.send(r.ctx, out); err != nil {
		return err
	}
	j.out.addFrame(out)
	return nil
}

// stageVerify runs this stage's layers over the rows of a verify frame
// (the last accepted token and the drafts after it) and passes the
// drafts and the states on; the last stage applies the head to every
// row, accepts drafts by the job's sampler (speculate.Accept), rolls its
// cache back to the rows accepted, and answers the driver with the
// accepted drafts and the token after them, at the accepted length. The
// other stages keep every row until the next frame's position says how
// many stay (rewind).
func (r *ring) stageVerify(j *stageJob, f *stagenet.Frame) error {
	drafts, wire, err := decodeVerify(f.Payload, r.cfg.Vocab)
	if err != nil {
		return fmt.Errorf("job %q: %w", f.Job, err)
	}
	h, err := r.runStates(j, f, wire, func(h *engine.Hidden) error {
		switch {
		case h.Tokens != len(drafts)+1:
			return badFrame("job %q: a verify of %d drafts carries %d positions, want %d", f.Job, len(drafts), h.Tokens, len(drafts)+1)
		case h.Pos < j.open.Prompt:
			return badFrame("job %q: a verify at position %d, inside the prompt of %d", f.Job, h.Pos, j.open.Prompt)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var out *stagenet.Frame
	if !r.tail {
		wire, err := engine.EncodeHidden(h, engine.F32)
		if err != nil {
			return err
		}
		payload := encodeVerify(drafts, wire)
		out = &stagenet.Frame{Kind: stagenet.KindVerify, Job: f.Job, Step: f.Step, Pos: f.Pos, Payload: payload, Hash: sha256.Sum256(payload)}
		j.floor = h.Pos + 1
	} else {
		lg, err := r.model.Head(h)
		if err != nil {
			return fmt.Errorf("ringmember: job %q: %w", f.Job, err)
		}
		ids, err := speculate.Accept(j.smp, lg, drafts)
		if err != nil {
			return fmt.Errorf("ringmember: job %q: %w", f.Job, err)
		}
		kept := h.Pos + len(ids)
		if err := j.st.Truncate(kept); err != nil {
			return err
		}
		out = tokensFrame(f.Job, f.Step, kept, ids)
	}
	if err := r.send(r.ctx, out); err != nil {
		return err
	}
	j.out.addFrame(out)
	return nil
}

// runStates takes the hidden states of a data frame (wire: the hidden
// part of its payload): it checks their size and shape against the
// model, the cache and the plan's context, and extra (the frame kind's
// own rules), rolls the cache back to the frame's position after a
// verify (rewind), takes the frame into the input chain and runs this
// stage's layers over the states.
func (r *ring) runStates(j *stageJob, f *stagenet.Frame, wire []byte, extra func(*engine.Hidden) error) (*engine.Hidden, error) {
	if n := maxHiddenBytes(r.cfg.Embd); len(wire) > n {
		return nil, badFrame("job %q: %s frame's hidden states of %d bytes, the limit is %d (%d positions of %d)", f.Job, f.Kind, len(wire), n, MaxChunk, r.cfg.Embd)
	}
	h, err := engine.DecodeHidden(wire)
	if err != nil {
		return nil, badFrame("job %q: %s frame's hidden states: %v", f.Job, f.Kind, err)
	}
	if err := j.rewind(f); err != nil {
		return nil, err
	}
	switch {
	case h.Dim != r.cfg.Embd:
		return nil, badFrame("job %q: hidden states of width %d, the model's is %d", f.Job, h.Dim, r.cfg.Embd)
	case h.Tokens > MaxChunk:
		return nil, badFrame("job %q: %d positions in one frame, at most %d", f.Job, h.Tokens, MaxChunk)
	case int(f.Pos) != h.Pos || h.Pos != j.st.Len():
		return nil, badFrame("job %q: hidden states at position %d (frame says %d), the cache holds %d", f.Job, h.Pos, f.Pos, j.st.Len())
	case h.Pos+h.Tokens > r.ctxTokens:
		return nil, badFrame("job %q: hidden states up to position %d, past the plan's context of %d", f.Job, h.Pos+h.Tokens, r.ctxTokens)
	}
	if extra != nil {
		if err := extra(h); err != nil {
			return nil, err
		}
	}
	j.in.addFrame(f)
	if err := j.st.Forward(r.ctx, h); err != nil {
		return nil, fmt.Errorf("ringmember: job %q: %w", f.Job, err)
	}
	j.positions += int64(h.Tokens)
	return h, nil
}

// tokensFrame is a KindTokens frame with its hash set.
func tokensFrame(job string, step uint32, pos int, ids []int32) *stagenet.Frame {
	p := encodeTokens(ids)
	f := &stagenet.Frame{Kind: stagenet.KindTokens, Job: job, Step: step, Pos: uint32(pos), Payload: p}
	f.Hash = sha256.Sum256(p) // as Send sets it
	return f
}

// stageTruncate rolls the cache back and passes the truncation on; the
// last stage answers the driver with an empty tokens frame.
func (r *ring) stageTruncate(j *stageJob, f *stagenet.Frame) error {
	j.floor = -1
	n := int(f.Pos)
	if n > j.st.Len() {
		return badFrame("job %q: truncate to %d positions, the cache holds %d", f.Job, n, j.st.Len())
	}
	j.in.addFrame(f)
	if err := j.st.Truncate(n); err != nil {
		return err
	}
	out := &stagenet.Frame{Kind: stagenet.KindTruncate, Job: f.Job, Step: f.Step, Pos: f.Pos}
	out.Hash = sha256.Sum256(nil)
	if r.tail {
		out = tokensFrame(f.Job, f.Step, n, nil)
	}
	if err := r.send(r.ctx, out); err != nil {
		return err
	}
	j.out.addFrame(out)
	return nil
}

// stageClose adds this stage's signed receipt to the Close and passes it
// on (the last stage, back to the driver).
func (r *ring) stageClose(j *stageJob, f *stagenet.Frame) error {
	if err := j.rewind(f); err != nil {
		return err
	}
	rs, err := decodeClose(f.Payload, f.Job, &r.a.Plan, r.me.Stage-1)
	if err != nil {
		return err
	}
	own, err := j.receipt(r.s.key, r.hash, r.a.Plan.Model, r.me, r.s.o.now().UnixMilli())
	if err != nil {
		return err
	}
	payload, err := encodeClose(append(rs, own))
	if err != nil {
		return err
	}
	if err := r.send(r.ctx, &stagenet.Frame{Kind: stagenet.KindClose, Job: f.Job, Step: f.Step, Pos: f.Pos, Payload: payload}); err != nil {
		return err
	}
	r.log.Debug("ringmember: job closed", "job", f.Job, "positions", j.positions)
	return nil
}
