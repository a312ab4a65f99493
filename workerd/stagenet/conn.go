package stagenet

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/go-playground/validator/v10"
)

// Defaults and fixed tuning.
const (
	// DefaultMaxPayload bounds one frame's payload: a 2048-token prefill
	// of an 8192-wide model in F32 is 64 MiB; runtimes split longer ones.
	DefaultMaxPayload = 64 << 20
	// DefaultWriteTimeout is how long a Send may wait for a peer that
	// reads nothing before the connection is given up.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultHandshakeTimeout bounds dialling plus the TLS handshake,
	// and how long a listener waits for a silent peer.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultMaxConnsPerPeer bounds a Listener's open connections from
	// one key: a ring member needs one from its previous stage and one
	// per probe, and a redial may briefly overlap the connection it
	// replaces.
	DefaultMaxConnsPerPeer = 4
	// DefaultMaxConns bounds a Listener's open connections in all: a
	// ring has a handful of members, each holding a few connections.
	DefaultMaxConns = 64
	// DefaultIdleTimeout is how long a Listener's connection may send
	// nothing, not even a ping, before it is closed; a dialled
	// connection pings at a quarter of it.
	DefaultIdleTimeout = 2 * time.Minute

	// readBuffer is the fixed read buffer of a connection: large enough
	// that small frames cost one read, small next to a payload.
	readBuffer = 64 << 10
	// oneWrite: a frame up to this size is copied behind its header and
	// written at once (fewer TLS records); larger payloads are written
	// from the caller's slice without a copy.
	oneWrite = 64 << 10
	// maxHandshakes bounds the handshakes a listener runs at once plus
	// the accepted connections waiting for Accept; further peers wait in
	// the kernel's backlog. A ring has a handful of members, so 64 only
	// matters against a flood.
	maxHandshakes = 64
)

// Option configures a Listener or a Dial.
type Option func(*config)

// config is the options, validated once by newConfig.
type config struct {
	MaxPayload       int           `validate:"min=1,max=4294967295"`
	WriteTimeout     time.Duration `validate:"gt=0"`
	HandshakeTimeout time.Duration `validate:"gt=0"`
	MaxConnsPerPeer  int           `validate:"min=1"`
	MaxConns         int           `validate:"min=1"`
	IdleTimeout      time.Duration `validate:"min=1ms"`
	log              *slog.Logger
}

// optionOf names the option behind a config field, for messages.
var optionOf = map[string]string{
	"MaxPayload": "WithMaxPayload", "WriteTimeout": "WithWriteTimeout", "HandshakeTimeout": "WithHandshakeTimeout",
	"MaxConnsPerPeer": "WithMaxConnsPerPeer", "MaxConns": "WithMaxConns", "IdleTimeout": "WithIdleTimeout",
}

var validate = validator.New()

// WithMaxPayload sets the largest payload a connection receives or sends
// (default DefaultMaxPayload; at most 4 GiB−1, the wire's limit). A frame
// over it is refused before anything is allocated.
func WithMaxPayload(n int) Option { return func(c *config) { c.MaxPayload = n } }

// WithWriteTimeout sets how long one Send may block on a peer that does
// not read (default DefaultWriteTimeout).
func WithWriteTimeout(d time.Duration) Option { return func(c *config) { c.WriteTimeout = d } }

// WithHandshakeTimeout bounds connecting and the TLS handshake (default
// DefaultHandshakeTimeout).
func WithHandshakeTimeout(d time.Duration) Option { return func(c *config) { c.HandshakeTimeout = d } }

// WithMaxConnsPerPeer sets how many connections a Listener keeps open
// from one peer key (default DefaultMaxConnsPerPeer); one more is closed
// right after its handshake and reported by Accept. Dial ignores it.
func WithMaxConnsPerPeer(n int) Option { return func(c *config) { c.MaxConnsPerPeer = n } }

// WithMaxConns sets how many connections a Listener keeps open in all,
// taken by Accept or waiting for it (default DefaultMaxConns); one more
// is closed right after its handshake and reported by Accept. Dial
// ignores it.
func WithMaxConns(n int) Option { return func(c *config) { c.MaxConns = n } }

// WithIdleTimeout sets how long a connection a Listener accepted may send
// nothing — no frame, no ping — before it is closed (default
// DefaultIdleTimeout, at least 1ms); its Recv then returns an error
// naming the timeout. A dialled connection is not closed for silence:
// it pings whenever it has sent nothing for a quarter of its own idle
// timeout (it checks at that interval, so the longest silence is half the
// timeout), so that a listener with the same or a longer one keeps it.
func WithIdleTimeout(d time.Duration) Option { return func(c *config) { c.IdleTimeout = d } }

// WithLogger sets the logger; the default discards. Connections log their
// lifecycle and failures, never payloads.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.log = l
		}
	}
}

func newConfig(opts []Option) (config, error) {
	c := config{
		MaxPayload: DefaultMaxPayload, WriteTimeout: DefaultWriteTimeout, HandshakeTimeout: DefaultHandshakeTimeout,
		MaxConnsPerPeer: DefaultMaxConnsPerPeer, MaxConns: DefaultMaxConns, IdleTimeout: DefaultIdleTimeout,
		log: slog.New(slog.DiscardHandler),
	}
	for _, o := range opts {
		o(&c)
	}
	if err := validate.Struct(c); err != nil {
		var ve validator.ValidationErrors
		if !errors.As(err, &ve) {
			return c, fmt.Errorf("stagenet: options: %w", err)
		}
		var msgs []string
		for _, fe := range ve {
			msgs = append(msgs, fmt.Sprintf("%s(%v) must be %s %s", optionOf[fe.Field()], fe.Value(), bound(fe.Tag()), fe.Param()))
		}
		return c, fmt.Errorf("stagenet: invalid options: %s", strings.Join(msgs, "; "))
	}
	return c, nil
}

// bound words a validator tag for a message.
func bound(tag string) string {
	switch tag {
	case "min":
		return "at least"
	case "max":
		return "at most"
	case "gt":
		return "more than"
	}
	return tag
}

// ErrTooManyConns is wrapped by the *HandshakeError Accept returns for a
// connection refused after its handshake because its key, or the
// listener, already holds as many connections as allowed.
var ErrTooManyConns = errors.New("stagenet: too many connections")

// HandshakeError is what Accept returns for a connection whose handshake
// failed: a refused key, a wrong protocol, a silent peer, or a peer over
// the connection limits (wrapping ErrTooManyConns). The listener stays
// open; log it and call Accept again.
type HandshakeError struct {
	// Addr is the peer's address.
	Addr string
	Err  error
}

func (e *HandshakeError) Error() string {
	return "stagenet: handshake with " + e.Addr + ": " + e.Err.Error()
}

// Unwrap returns the handshake's error.
func (e *HandshakeError) Unwrap() error { return e.Err }

// Listener accepts stage connections.
type Listener struct {
	ln    net.Listener
	cert  tls.Certificate
	allow func(shard.PublicKey) bool
	cfg   config

	results chan accepted
	slots   chan struct{}
	// ctx ends with the listener; handshakes in progress stop with it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	cause  error

	// connMu guards the count of open accepted connections, in all and
	// per key: from a handshake's success until the connection closes.
	connMu sync.Mutex
	conns  int
	byPeer map[shard.PublicKey]int
}

// accepted is one handshake's outcome, waiting for Accept.
type accepted struct {
	c   *Conn
	err error
}

// Listen accepts stage connections on addr from peers whose key allow
// accepts. allow is called during each handshake, from the listener's own
// goroutines.
func Listen(addr string, key ed25519.PrivateKey, allow func(shard.PublicKey) bool, opts ...Option) (*Listener, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if allow == nil {
		return nil, errors.New("stagenet: Listen needs an allow function (which peer keys may connect)")
	}
	cert, err := certificate(key)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("stagenet: listen on %s: %w", addr, err)
	}
	l := &Listener{
		ln: ln, cert: cert, allow: allow, cfg: cfg,
		results: make(chan accepted), slots: make(chan struct{}, maxHandshakes),
		byPeer: map[shard.PublicKey]int{},
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// Addr is the address the listener listens on.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Accept returns the next authenticated connection. For a connection
// whose handshake failed, or that would exceed WithMaxConnsPerPeer or
// WithMaxConns (it is closed), it returns a *HandshakeError, and the
// listener goes on; once the listener is closed, an error wrapping
// net.ErrClosed.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	select {
	case r := <-l.results:
		return r.c, r.err
	case <-l.ctx.Done():
		return nil, fmt.Errorf("stagenet: accept on %s: %w", l.ln.Addr(), l.cause)
	case <-ctx.Done():
		return nil, fmt.Errorf("stagenet: accept on %s: %w", l.ln.Addr(), context.Cause(ctx))
	}
}

// Close stops listening, stops handshakes in progress and closes accepted
// connections no Accept has taken. Connections Accept returned stay open.
func (l *Listener) Close() error {
	err := l.shut(net.ErrClosed)
	l.wg.Wait()
	return err
}

func (l *Listener) shut(cause error) error {
	var err error
	l.once.Do(func() {
		l.cause = cause
		l.cancel()
		if cerr := l.ln.Close(); cerr != nil {
			err = fmt.Errorf("stagenet: close listener on %s: %w", l.ln.Addr(), cerr)
		}
	})
	return err
}

// acceptLoop takes TCP connections and hands each to a handshake
// goroutine, at most maxHandshakes at a time.
func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	defer func() {
		if p := recover(); p != nil {
			l.cfg.log.Error("stage listener panicked", "addr", l.ln.Addr().String(), "panic", p)
			_ = l.shut(fmt.Errorf("stagenet: listener panicked: %v", p))
		}
	}()
	backoff := time.Duration(0)
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.ctx.Done():
			return
		}
		raw, err := l.ln.Accept()
		if err != nil {
			<-l.slots
			if l.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				_ = l.shut(net.ErrClosed)
				return
			}
			// Out of file descriptors and the like: wait and retry, as
			// net/http does, rather than give up the stage.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			l.cfg.log.Warn("stage listener: accept failed", "addr", l.ln.Addr().String(), "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-l.ctx.Done():
				t.Stop()
				return
			}
			continue
		}
		backoff = 0
		l.wg.Add(1)
		go l.handshake(raw)
	}
}

// handshake authenticates one connection and hands the outcome to Accept.
func (l *Listener) handshake(raw net.Conn) {
	defer l.wg.Done()
	defer func() { <-l.slots }()
	addr := raw.RemoteAddr().String()
	var r accepted
	defer func() {
		if p := recover(); p != nil {
			l.cfg.log.Error("stage handshake panicked", "addr", addr, "panic", p)
			_ = raw.Close()
		}
	}()
	var peer shard.PublicKey
	tc := tls.Server(raw, serverConfig(l.cert, addr, l.allow, &peer))
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.HandshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err == nil {
		err = l.admit(peer)
	}
	if err != nil {
		_ = raw.Close()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no handshake within %s (WithHandshakeTimeout): %w", l.cfg.HandshakeTimeout, err)
		}
		l.cfg.log.Debug("stage handshake failed", "addr", addr, "err", err)
		r.err = &HandshakeError{Addr: addr, Err: err}
	} else {
		r.c = newConn(tc, peer, addr, l.cfg, func() { l.release(peer) })
	}
	select {
	case l.results <- r:
	case <-l.ctx.Done():
		if r.c != nil {
			_ = r.c.Close()
		}
	}
}

// admit counts a new connection from peer, or refuses it when peer or the
// listener already holds as many as allowed.
func (l *Listener) admit(peer shard.PublicKey) error {
	l.connMu.Lock()
	defer l.connMu.Unlock()
	if n := l.byPeer[peer]; n >= l.cfg.MaxConnsPerPeer {
		return fmt.Errorf("peer %s: %w: it already has %d open, the most one key may hold (WithMaxConnsPerPeer)", peer, ErrTooManyConns, n)
	}
	if l.conns >= l.cfg.MaxConns {
		return fmt.Errorf("peer %s: %w: the listener already holds %d, its limit (WithMaxConns)", peer, ErrTooManyConns, l.conns)
	}
	l.conns++
	l.byPeer[peer]++
	return nil
}

// release uncounts a closed connection from peer.
func (l *Listener) release(peer shard.PublicKey) {
	l.connMu.Lock()
	defer l.connMu.Unlock()
	l.conns--
	if l.byPeer[peer]--; l.byPeer[peer] <= 0 {
		delete(l.byPeer, peer)
	}
}

// Dial connects to addr and requires the server to prove it holds peer's
// key. Connecting and the handshake together are bounded by the handshake
// timeout and ctx; ctx does not outlive Dial.
func Dial(ctx context.Context, addr string, key ed25519.PrivateKey, peer shard.PublicKey, opts ...Option) (*Conn, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if peer.IsZero() {
		return nil, fmt.Errorf("stagenet: dial %s: no peer key to expect", addr)
	}
	cert, err := certificate(key)
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, cfg.HandshakeTimeout)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(hctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("stagenet: dial peer %s at %s: %w", peer, addr, err)
	}
	tc := tls.Client(raw, clientConfig(cert, addr, peer))
	if err := tc.HandshakeContext(hctx); err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("stagenet: handshake with peer %s at %s: %w", peer, addr, err)
	}
	return newConn(tc, peer, addr, cfg, nil), nil
}

// Conn is an authenticated stage connection. Send is safe for concurrent
// use; Recv is for one goroutine at a time; Ping may run alongside both.
// A connection that carries large frames both ways should Send and Recv
// from different goroutines: two members that each block in Send, neither
// reading, wait for each other until the write timeout.
//
// A connection a Listener accepted is closed when its peer sends nothing
// for the idle timeout while this side reads; a dialled one pings when it
// has sent nothing for a quarter of its idle timeout (at most half of it
// passes without a frame), which keeps it open at a listener whose idle
// timeout is no shorter.
type Conn struct {
	tc   *tls.Conn
	peer shard.PublicKey
	addr string
	cfg  config

	// wsem is a one-slot lock that a cancelled context can give up
	// waiting for.
	wsem chan struct{}
	wbuf []byte

	frames chan Frame
	pongs  chan [nonceSize]byte
	closed chan struct{}
	once   sync.Once
	cause  error // why the connection closed; set before closed is
	wg     sync.WaitGroup

	pingMu sync.Mutex
	pings  map[uint64]chan struct{}
	nonce  atomic.Uint64

	// release uncounts the connection at its listener when it closes;
	// nil for a dialled connection. accepted: release is set.
	release  func()
	accepted bool
	// sent counts the frames written, for the keep-alive.
	sent atomic.Uint64
	// waiting is the payload bytes the reader still awaits inside a
	// frame; 0 between frames.
	waiting atomic.Int64
}

// newConn starts a connection's goroutines. release is the listener's
// count of an accepted connection, nil for a dialled one.
func newConn(tc *tls.Conn, peer shard.PublicKey, addr string, cfg config, release func()) *Conn {
	c := &Conn{
		tc: tc, peer: peer, addr: addr, cfg: cfg,
		wsem: make(chan struct{}, 1), wbuf: make([]byte, 0, HeaderSize+MaxJob+oneWrite),
		frames: make(chan Frame), pongs: make(chan [nonceSize]byte, 1), closed: make(chan struct{}),
		pings:   map[uint64]chan struct{}{},
		release: release, accepted: release != nil,
	}
	c.cfg.log = cfg.log.With("peer", peer.String(), "addr", addr)
	c.cfg.log.Debug("stage connection open")
	c.wg.Add(2)
	go c.readLoop()
	go c.pongLoop()
	if !c.accepted {
		c.wg.Add(1)
		go c.keepAlive()
	}
	return c
}

// Peer is the key the peer proved it holds.
func (c *Conn) Peer() shard.PublicKey { return c.peer }

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.tc.RemoteAddr() }

// errf makes an error that names the peer and its address.
func (c *Conn) errf(format string, args ...any) error {
	return fmt.Errorf("stagenet: peer %s at %s: "+format, append([]any{c.peer, c.addr}, args...)...)
}

// Send writes one frame and sets f.Hash. It blocks while the peer does not
// read (TCP back-pressure), until ctx ends or the write timeout passes. A
// Send that fails once it has begun writing closes the connection: the
// peer could not find the next frame in what would follow. Ping and pong
// frames are the connection's own: use Ping.
func (c *Conn) Send(ctx context.Context, f *Frame) error {
	if f.Kind == KindPing || f.Kind == KindPong {
		return c.errf("send: %s frames are the connection's own; call Ping", f.Kind)
	}
	return c.send(ctx, f)
}

func (c *Conn) send(ctx context.Context, f *Frame) error {
	if err := f.check(); err != nil {
		return c.errf("send %s frame: %w", f.Kind, err)
	}
	if len(f.Payload) > c.cfg.MaxPayload {
		return c.errf("send %s frame: %w: payload of %d bytes, over the %d-byte limit (WithMaxPayload)", f.Kind, ErrFrame, len(f.Payload), c.cfg.MaxPayload)
	}
	select {
	case c.wsem <- struct{}{}:
	case <-c.closed:
		return c.errf("send %s frame: %w", f.Kind, c.cause)
	case <-ctx.Done():
		return c.errf("send %s frame: %w", f.Kind, context.Cause(ctx))
	}
	defer func() { <-c.wsem }()
	select {
	case <-c.closed:
		return c.errf("send %s frame: %w", f.Kind, c.cause)
	default:
	}
	if ctx.Err() != nil {
		return c.errf("send %s frame: %w", f.Kind, context.Cause(ctx))
	}
	f.Hash = sha256.Sum256(f.Payload)
	deadline, byCtx := time.Now().Add(c.cfg.WriteTimeout), false
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline, byCtx = d, true
	}
	err := c.tc.SetWriteDeadline(deadline)
	if err == nil {
		// A past deadline wakes a blocked write when ctx ends.
		stop := context.AfterFunc(ctx, func() { _ = c.tc.SetWriteDeadline(time.Unix(1, 0)) })
		err = c.write(f)
		stop()
	}
	if err == nil {
		return nil
	}
	switch {
	case ctx.Err() != nil || byCtx && errors.Is(err, os.ErrDeadlineExceeded):
		// The context's deadline was the write deadline: the socket may
		// report it before the context does.
		cause := context.Cause(ctx)
		if cause == nil {
			cause = context.DeadlineExceeded
		}
		err = fmt.Errorf("send %s frame: stopped part-way: %w (%w)", f.Kind, cause, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = fmt.Errorf("send %s frame: peer read nothing for %s (WithWriteTimeout): %w", f.Kind, c.cfg.WriteTimeout, err)
	default:
		err = fmt.Errorf("send %s frame: %w", f.Kind, err)
	}
	c.shut(err)
	return c.errf("%w", err)
}

// write puts a checked frame whose Hash is set on the wire. The caller
// holds wsem.
func (c *Conn) write(f *Frame) error {
	b := appendHeader(c.wbuf[:0], f)
	if len(f.Payload) <= oneWrite {
		b = append(b, f.Payload...)
		if _, err := c.tc.Write(b); err != nil {
			return err
		}
	} else {
		if _, err := c.tc.Write(b); err != nil {
			return err
		}
		if _, err := c.tc.Write(f.Payload); err != nil {
			return err
		}
	}
	c.sent.Add(1)
	return nil
}

// Recv returns the next frame, whose payload is at most the connection's
// MaxPayload. Ping and pong frames are handled by the connection and never
// returned. Once the connection is closed, Recv returns why: an error
// wrapping ErrFrame if the peer sent a malformed frame, io.EOF if the peer
// closed, net.ErrClosed if Close was called.
func (c *Conn) Recv(ctx context.Context) (Frame, error) {
	select {
	case f := <-c.frames:
		return f, nil
	case <-c.closed:
		return Frame{}, c.errf("recv: %w", c.cause)
	case <-ctx.Done():
		return Frame{}, c.errf("recv: %w", context.Cause(ctx))
	}
}

// Ping measures the round trip of a ping and its pong. It may be called
// while another goroutine is in Recv or Send; its ping waits behind a Send
// in progress, which the measure then includes.
func (c *Conn) Ping(ctx context.Context) (time.Duration, error) {
	n := c.nonce.Add(1)
	got := make(chan struct{}, 1)
	c.pingMu.Lock()
	c.pings[n] = got
	c.pingMu.Unlock()
	defer func() {
		c.pingMu.Lock()
		delete(c.pings, n)
		c.pingMu.Unlock()
	}()
	var nonce [nonceSize]byte
	binary.LittleEndian.PutUint64(nonce[:], n)
	start := time.Now()
	if err := c.send(ctx, &Frame{Kind: KindPing, Payload: nonce[:]}); err != nil {
		return 0, err
	}
	select {
	case <-got:
		return time.Since(start), nil
	case <-c.closed:
		return 0, c.errf("ping: %w", c.cause)
	case <-ctx.Done():
		return 0, c.errf("ping: no pong: %w", context.Cause(ctx))
	}
}

// Close closes the connection and waits for its goroutines to end. It
// unblocks a pending Recv, Send and Ping.
func (c *Conn) Close() error {
	err := c.shut(fmt.Errorf("closed by this member: %w", net.ErrClosed))
	c.wg.Wait()
	if err != nil {
		return c.errf("close: %w", err)
	}
	return nil
}

// shut closes the connection once, recording why; the first cause wins.
// It returns the TLS close error of the call that closed.
func (c *Conn) shut(cause error) error {
	var err error
	c.once.Do(func() {
		c.cause = cause
		// Uncounted before closed is: whoever sees the connection
		// closed may connect again at once.
		if c.release != nil {
			c.release()
		}
		close(c.closed)
		// The TCP connection, not the TLS one: tls.Conn.Close first
		// sends close_notify, which can block five seconds on a peer
		// that stopped reading. Frames delimit themselves and a job ends
		// with KindClose, so the peer loses nothing by its absence: it
		// sees io.EOF at a frame boundary.
		err = c.tc.NetConn().Close()
		if errors.Is(cause, ErrFrame) {
			c.cfg.log.Warn("stage connection cut off: peer sent a malformed frame", "err", cause)
		} else {
			c.cfg.log.Debug("stage connection closed", "cause", cause)
		}
	})
	return err
}

// readLoop reads frames until the connection closes: data frames go to
// Recv one at a time, pings to pongLoop, pongs to Ping.
func (c *Conn) readLoop() {
	defer c.wg.Done()
	defer func() {
		if p := recover(); p != nil {
			c.cfg.log.Error("stage connection reader panicked", "panic", p)
			c.shut(fmt.Errorf("internal error: reader panicked: %v", p))
		}
	}()
	var src io.Reader = c.tc
	if c.accepted {
		src = idleReader{c}
	}
	br := bufio.NewReaderSize(src, readBuffer)
	for {
		f, err := readFrame(br, c.cfg.MaxPayload, &c.waiting)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("connection closed by the peer: %w", err)
			}
			c.shut(err)
			return
		}
		switch f.Kind {
		case KindPing:
			// One pong in flight at most: a ping flood costs the peer
			// its own answers, and never blocks this loop.
			select {
			case c.pongs <- [nonceSize]byte(f.Payload):
			default:
			}
		case KindPong:
			c.pingMu.Lock()
			got := c.pings[binary.LittleEndian.Uint64(f.Payload)]
			c.pingMu.Unlock()
			if got != nil {
				select {
				case got <- struct{}{}:
				default:
				}
			}
		default:
			select {
			case c.frames <- f:
			case <-c.closed:
				return
			}
		}
	}
}

// pongLoop answers pings. It writes apart from readLoop so that a Send
// blocked on a peer that is itself blocked never stops this side reading.
func (c *Conn) pongLoop() {
	defer c.wg.Done()
	defer func() {
		if p := recover(); p != nil {
			c.cfg.log.Error("stage connection ponger panicked", "panic", p)
			c.shut(fmt.Errorf("internal error: ponger panicked: %v", p))
		}
	}()
	for {
		select {
		case n := <-c.pongs:
			if err := c.send(context.Background(), &Frame{Kind: KindPong, Payload: n[:]}); err != nil {
				return
			}
		case <-c.closed:
			return
		}
	}
}

// idleReader reads an accepted connection: each read must bring bytes
// within the idle timeout. The deadline is set afresh before every read,
// so a frame that arrives slowly in small pieces is not cut off, and time
// this side spends not reading (its application not in Recv) never
// counts against the peer.
type idleReader struct{ c *Conn }

func (r idleReader) Read(p []byte) (int, error) {
	if err := r.c.tc.SetReadDeadline(time.Now().Add(r.c.cfg.IdleTimeout)); err != nil {
		return 0, err
	}
	n, err := r.c.tc.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("peer sent nothing for %s, not even a ping (WithIdleTimeout): %w", r.c.cfg.IdleTimeout, err)
	}
	return n, err
}

// keepAlive pings a dialled connection when it has sent nothing since the
// last check, every quarter of the idle timeout (so no more than half of
// it passes without a frame), so that the listener, which closes a
// connection that sends nothing for its idle timeout, keeps it open. The
// pong, matching no Ping, is dropped by readLoop.
func (c *Conn) keepAlive() {
	defer c.wg.Done()
	defer func() {
		if p := recover(); p != nil {
			c.cfg.log.Error("stage connection keep-alive panicked", "panic", p)
			c.shut(fmt.Errorf("internal error: keep-alive panicked: %v", p))
		}
	}()
	t := time.NewTicker(c.cfg.IdleTimeout / 4)
	defer t.Stop()
	last := c.sent.Load()
	for {
		select {
		case <-t.C:
		case <-c.closed:
			return
		}
		if n := c.sent.Load(); n != last {
			last = n
			continue
		}
		var nonce [nonceSize]byte
		binary.LittleEndian.PutUint64(nonce[:], c.nonce.Add(1))
		if err := c.send(context.Background(), &Frame{Kind: KindPing, Payload: nonce[:]}); err != nil {
			return
		}
		last = c.sent.Load()
	}
}
