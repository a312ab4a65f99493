// Package listener is an API instance's connection to the relay. The API
// holds each client's prompt in memory and the worker streams the reply to
// the listener connection the job names; the listener hands each message to
// the request waiting for that job. In AWS the API function joins API
// Gateway's WebSocket API this way; on one machine it joins the local relay.
package listener

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/c0mpute/c0mpute/functions/relaymsg"
)

// ErrLost is delivered to a job's mailbox when the connection its replies
// were addressed to closed: nothing more will arrive for it.
var ErrLost = errors.New("listener: relay connection lost")

// ErrOverflow is delivered to a job's mailbox, in place of everything queued,
// when more messages arrived for the job than a mailbox holds unread (its
// client reads too slowly, or a worker floods small messages); later
// messages are dropped. The job cannot be relayed whole and must end.
var ErrOverflow = errors.New("listener: mailbox overflow")

// ErrFlooded is ErrOverflow for text: more arrived unread than any reply
// holds (mailboxBytes is twice the text of a million tokens), which only a
// worker breaking the protocol sends.
var ErrFlooded = fmt.Errorf("%w: more text than any reply", ErrOverflow)

// A mailbox holds at most this much unread. The reader hands each message
// to its request at once and the request writes it to its client, so an
// honest reply waits here only while a client is slow; what piles up past
// these bounds is a flood (or a client that stopped reading), and holding
// it would let one job grow the process without limit.
const (
	mailboxMessages = 4096
	mailboxBytes    = 8 << 20
)

// rollAfter is when a connection is replaced: API Gateway closes
// connections at 2 h, so a fresh one takes new jobs well before, and the
// old one lives on for the jobs addressed to it.
const rollAfter = 110 * time.Minute

// heartbeatEvery keeps the connection inside API Gateway's 10 min idle
// timeout even when no job runs.
const heartbeatEvery = 4 * time.Minute

// Config configures a Listener.
type Config struct {
	URL    string // ws:// or wss:// of the relay
	Secret string // the relay's listener secret
	Log    *slog.Logger
	// RollAfter overrides rollAfter (tests).
	RollAfter time.Duration
	// Local, when set, connects in process to a relay running in this
	// process (the dev stack's: relay.Local.Connect) instead of dialing
	// URL: the relay hands each message to the listener on the poster's
	// goroutine, with no socket, frame or reader goroutine between them.
	// The connection is otherwise the same — hello and welcome, ids,
	// heartbeats, rolling, loss — so the rest of the listener cannot
	// tell. recv must not block; ended is called once when the
	// connection ends.
	Local func(ctx context.Context, h http.Header, recv func([]byte), ended func(code int, reason string)) (LocalLink, error)
}

// LocalLink is an in-process connection to the relay (relay.LocalConn).
type LocalLink interface {
	// Send sends one message to the relay.
	Send(ctx context.Context, data []byte) error
	// Ping fails once the connection has ended.
	Ping(ctx context.Context) error
	// Close ends the connection with a WebSocket close code and reason.
	Close(code int, reason string) error
}

// link is what the listener does with its relay connection: a WebSocket
// (*websocket.Conn), or an in-process connection (localLink).
type link interface {
	Write(ctx context.Context, typ websocket.MessageType, p []byte) error
	Ping(ctx context.Context) error
	Close(code websocket.StatusCode, reason string) error
	CloseNow() error
}

// localLink is a LocalLink as a link.
type localLink struct{ LocalLink }

func (l localLink) Write(ctx context.Context, _ websocket.MessageType, p []byte) error {
	return l.Send(ctx, p)
}

func (l localLink) Close(code websocket.StatusCode, reason string) error {
	return l.LocalLink.Close(int(code), reason)
}

func (l localLink) CloseNow() error {
	return l.LocalLink.Close(int(websocket.StatusGoingAway), "closed")
}

// Listener keeps a relay connection up and routes messages to jobs.
type Listener struct {
	cfg Config

	mu      sync.Mutex
	current *conn
	boxes   map[string]*Mailbox
	closed  bool

	cancel context.CancelFunc
	done   chan struct{}
}

type conn struct {
	ws   link
	id   string
	born time.Time
	jobs int // mailboxes addressed to this connection
	dead bool
	// seen is when the relay was last heard on this connection (a
	// message or a pong), in Unix nanoseconds.
	seen atomic.Int64
}

// Start dials the relay and keeps a connection up until Close.
func Start(ctx context.Context, cfg Config) (*Listener, error) {
	if cfg.RollAfter == 0 {
		cfg.RollAfter = rollAfter
	}
	l := &Listener{cfg: cfg, boxes: map[string]*Mailbox{}, done: make(chan struct{})}
	c, err := l.dial(ctx)
	if err != nil {
		return nil, err
	}
	l.current = c
	runCtx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.maintain(runCtx)
	return l, nil
}

// Conn returns the connection id new jobs should name.
func (l *Listener) Conn() (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.current == nil || l.current.dead {
		return "", fmt.Errorf("listener: %w", ErrLost)
	}
	return l.current.id, nil
}

// Subscribe opens the mailbox of a job addressed to connection id conn.
// Subscribe before the job can receive anything, and Close the mailbox when
// done.
func (l *Listener) Subscribe(job, connID string) (*Mailbox, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.current == nil || l.current.id != connID || l.current.dead {
		return nil, fmt.Errorf("listener: subscribe %s: %w", job, ErrLost)
	}
	b := &Mailbox{job: job, l: l, conn: l.current, signal: make(chan struct{}, 1)}
	l.current.jobs++
	l.boxes[job] = b
	return b, nil
}

// Close stops the listener and its connections.
func (l *Listener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	<-l.done
	return nil
}

func (l *Listener) dial(ctx context.Context) (*conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if l.cfg.Local != nil {
		return l.connectLocal(dctx)
	}
	ws, _, err := websocket.Dial(dctx, l.cfg.URL, &websocket.DialOptions{
		HTTPHeader: http.Header{relaymsg.HeaderListener: []string{l.cfg.Secret}},
	})
	if err != nil {
		return nil, fmt.Errorf("listener: dial %s: %w", l.cfg.URL, err)
	}
	ws.SetReadLimit(relaymsg.MaxMessage)
	hello, err := relaymsg.Encode(&relaymsg.Hello{})
	if err != nil {
		return nil, err
	}
	if err := ws.Write(dctx, websocket.MessageText, hello); err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("listener: hello: %w", err)
	}
	_, b, err := ws.Read(dctx)
	if err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("listener: welcome: %w", err)
	}
	m, err := relaymsg.Decode(b)
	if err != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("listener: welcome: %w", err)
	}
	w, ok := m.(*relaymsg.Welcome)
	if !ok {
		ws.CloseNow()
		return nil, fmt.Errorf("listener: expected welcome, got %T", m)
	}
	c := &conn{ws: ws, id: w.Conn, born: time.Now()}
	c.seen.Store(time.Now().UnixNano())
	go l.read(c, ws)
	return c, nil
}

// connectLocal opens an in-process connection (Config.Local): the same
// hello and welcome as dial, then every message the relay posts is routed
// on the relay's goroutine.
func (l *Listener) connectLocal(ctx context.Context) (*conn, error) {
	c := &conn{born: time.Now()}
	var ready atomic.Bool
	welcome := make(chan []byte, 1)
	recv := func(b []byte) {
		if !ready.Load() {
			select { // the welcome: nothing else is addressed here yet
			case welcome <- b:
			default:
			}
			return
		}
		l.routeSafely(c, b)
	}
	ended := func(code int, reason string) {
		l.lose(c, fmt.Errorf("in-process relay connection closed: %d %s", code, reason))
	}
	lk, err := l.cfg.Local(ctx, http.Header{relaymsg.HeaderListener: []string{l.cfg.Secret}}, recv, ended)
	if err != nil {
		return nil, fmt.Errorf("listener: connect in process: %w", err)
	}
	c.ws = localLink{lk}
	hello, err := relaymsg.Encode(&relaymsg.Hello{})
	if err != nil {
		return nil, err
	}
	if err := lk.Send(ctx, hello); err != nil {
		c.ws.CloseNow()
		return nil, fmt.Errorf("listener: hello: %w", err)
	}
	var b []byte
	select {
	case b = <-welcome:
	case <-ctx.Done():
		c.ws.CloseNow()
		return nil, fmt.Errorf("listener: welcome: %w", ctx.Err())
	}
	m, err := relaymsg.Decode(b)
	if err != nil {
		c.ws.CloseNow()
		return nil, fmt.Errorf("listener: welcome: %w", err)
	}
	w, ok := m.(*relaymsg.Welcome)
	if !ok {
		c.ws.CloseNow()
		return nil, fmt.Errorf("listener: expected welcome, got %T", m)
	}
	c.id = w.Conn
	c.seen.Store(time.Now().UnixNano())
	ready.Store(true)
	return c, nil
}

// routeSafely routes one message of an in-process connection. A bad
// message must not take the relay's goroutine (and the API) down: the
// connection is given up instead, as the reader gives up a WebSocket.
func (l *Listener) routeSafely(c *conn, b []byte) {
	defer func() {
		if p := recover(); p != nil {
			l.cfg.Log.Error("relay listener panicked on a message", "panic", p)
			l.lose(c, fmt.Errorf("listener panicked: %v", p))
			c.ws.CloseNow()
		}
	}()
	c.seen.Store(time.Now().UnixNano())
	l.route(b)
}

// checkAfter is how long a connection may go unheard before Check pings it.
// In Lambda the process is frozen between requests, with its heartbeats;
// API Gateway closes a connection idle for 10 minutes, so a thawed instance
// cannot assume its connection survived.
const checkAfter = 30 * time.Second

// Check makes sure the connection jobs will name is alive: one unheard for
// checkAfter is pinged, and replaced at once if the ping fails. Call it at
// the start of a request in a runtime that freezes idle processes (Lambda);
// a long-running process needs no check, as its reader notices a dead
// connection and maintain replaces it.
func (l *Listener) Check(ctx context.Context) error {
	l.mu.Lock()
	c := l.current
	l.mu.Unlock()
	if c != nil && !c.dead && time.Since(time.Unix(0, c.seen.Load())) < checkAfter {
		return nil
	}
	if c != nil && !c.dead {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.ws.Ping(pctx)
		cancel()
		if err == nil {
			c.seen.Store(time.Now().UnixNano())
			return nil
		}
		l.lose(c, fmt.Errorf("ping: %w", err))
		c.ws.CloseNow()
	}
	next, err := l.dial(ctx)
	if err != nil {
		return err
	}
	l.mu.Lock()
	old := l.current
	l.current = next
	l.mu.Unlock()
	l.cfg.Log.Info("relay listener reconnected", "conn", next.id)
	if old != c { // maintain replaced it meanwhile: keep ours, retire theirs
		l.retire(old)
	}
	return nil
}

// maintain replaces the current connection when it dies or ages, and
// heartbeats it.
func (l *Listener) maintain(ctx context.Context) {
	defer close(l.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastBeat := time.Now()
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			l.mu.Lock()
			c := l.current
			l.mu.Unlock()
			if c != nil {
				c.ws.Close(websocket.StatusNormalClosure, "shutting down")
			}
			return
		case <-tick.C:
		}
		l.mu.Lock()
		c := l.current
		l.mu.Unlock()
		if c != nil && !c.dead && time.Since(c.born) < l.cfg.RollAfter {
			if time.Since(lastBeat) >= heartbeatEvery {
				lastBeat = time.Now()
				if hb, err := relaymsg.Encode(&relaymsg.Heartbeat{}); err == nil {
					wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					_ = c.ws.Write(wctx, websocket.MessageText, hb) // a failure shows up in read
					cancel()
				}
			}
			continue
		}
		next, err := l.dial(ctx)
		if err != nil {
			l.cfg.Log.Warn("relay listener reconnect failed", "err", err, "retry_in", backoff)
			time.Sleep(backoff + rand.N(backoff))
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		l.mu.Lock()
		old := l.current
		l.current = next
		l.mu.Unlock()
		l.cfg.Log.Info("relay listener connected", "conn", next.id)
		l.retire(old)
	}
}

// retire closes an old connection once no job is addressed to it.
func (l *Listener) retire(c *conn) {
	if c == nil {
		return
	}
	l.mu.Lock()
	idle := c.jobs == 0
	l.mu.Unlock()
	if idle {
		c.ws.Close(websocket.StatusNormalClosure, "rolled")
	}
	// Otherwise the last mailbox to close does it (Mailbox.Close).
}

func (l *Listener) read(c *conn, ws *websocket.Conn) {
	defer func() {
		// Whatever a peer sent, a bad message must not take the API (and
		// every stream in it) down: the connection is given up instead,
		// and maintain replaces it.
		if p := recover(); p != nil {
			l.cfg.Log.Error("relay listener reader panicked", "panic", p)
			l.lose(c, fmt.Errorf("reader panicked: %v", p))
			c.ws.CloseNow()
		}
	}()
	for {
		_, b, err := ws.Read(context.Background())
		if err != nil {
			l.lose(c, err)
			return
		}
		c.seen.Store(time.Now().UnixNano())
		l.route(b)
	}
}

// route hands one message from the relay to the mailbox of its job.
func (l *Listener) route(b []byte) {
	m, err := relaymsg.Decode(b)
	if err != nil {
		l.cfg.Log.Warn("bad message from relay", "err", err)
		return
	}
	var job string
	switch m := m.(type) {
	case *relaymsg.Assign:
		job = m.Job
	case *relaymsg.Lost:
		job = m.Job
	case *relaymsg.Chunk:
		job = m.Job
	case *relaymsg.Done:
		job = m.Job
	case *relaymsg.Fail:
		job = m.Job
	case *relaymsg.Error:
		l.cfg.Log.Warn("relay reported an error", "code", m.Code, "message", m.Message)
		return
	default:
		return
	}
	l.mu.Lock()
	box := l.boxes[job]
	l.mu.Unlock()
	if box != nil {
		box.put(m, len(b))
	}
}

// lose marks a connection dead and tells every job addressed to it.
func (l *Listener) lose(c *conn, err error) {
	l.mu.Lock()
	c.dead = true
	var lost []*Mailbox
	for _, b := range l.boxes {
		if b.conn == c {
			lost = append(lost, b)
		}
	}
	closed := l.closed
	l.mu.Unlock()
	if !closed {
		l.cfg.Log.Warn("relay listener connection lost", "conn", c.id, "err", err, "jobs", len(lost))
	}
	for _, b := range lost {
		b.put(ErrLost, 0)
	}
}

// Mailbox receives one job's messages in arrival order, so the
// connection's reader never waits on a slow client. It holds at most
// mailboxMessages or mailboxBytes unread; past that it drops what it holds
// and everything after, and holds ErrOverflow instead.
type Mailbox struct {
	job      string
	l        *Listener
	conn     *conn
	mu       sync.Mutex
	queue    []any
	sizes    []int
	bytes    int
	overflow bool
	// worker, once set, is the only sender whose chunk, done and fail
	// messages the mailbox takes: a worker the job moved away from still
	// holds a valid ticket, and must not fill the mailbox (and have the
	// bounds blame the current worker).
	worker string
	signal chan struct{}
}

// Expect tells the mailbox which worker the job is on now: it drops the
// chunk, done and fail messages of any other sender from then on.
func (b *Mailbox) Expect(worker string) {
	b.mu.Lock()
	b.worker = worker
	b.mu.Unlock()
}

func (b *Mailbox) put(m any, size int) {
	b.mu.Lock()
	switch {
	case b.overflow:
		b.mu.Unlock()
		return
	case b.worker != "" && fromOther(m, b.worker):
		b.mu.Unlock()
		return
	case len(b.queue) >= mailboxMessages || b.bytes+size > mailboxBytes:
		// The job cannot be relayed whole any more: what is queued goes,
		// and the marker is all that is left, so the request ends the job
		// at its next look instead of after the backlog.
		marker := ErrOverflow
		if b.bytes+size > mailboxBytes {
			marker = ErrFlooded
		}
		b.overflow = true
		clear(b.queue)
		b.queue, b.sizes, b.bytes = b.queue[:0], b.sizes[:0], 0
		m, size = marker, 0
	}
	b.queue = append(b.queue, m)
	b.sizes = append(b.sizes, size)
	b.bytes += size
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

// fromOther reports whether m is a worker's chunk, done or fail sent by
// someone other than worker.
func fromOther(m any, worker string) bool {
	from, _, ok := relaymsg.Sender(m)
	return ok && from != worker
}

// Pop returns the next message, if one is there: a *relaymsg.Assign, Lost,
// Chunk, Done or Fail, or ErrLost, ErrOverflow or ErrFlooded as a value.
func (b *Mailbox) Pop() (any, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		return nil, false
	}
	m := b.queue[0]
	b.queue[0] = nil
	b.queue = b.queue[1:]
	b.bytes -= b.sizes[0]
	b.sizes = b.sizes[1:]
	return m, true
}

// Ready signals that Pop may have something; select on it with timers.
func (b *Mailbox) Ready() <-chan struct{} { return b.signal }

// Close removes the mailbox; a rolled connection with no job left closes.
func (b *Mailbox) Close() {
	l := b.l
	l.mu.Lock()
	delete(l.boxes, b.job)
	b.conn.jobs--
	retire := b.conn.jobs == 0 && b.conn != l.current && !b.conn.dead
	l.mu.Unlock()
	if retire {
		b.conn.ws.Close(websocket.StatusNormalClosure, "rolled")
	}
}
