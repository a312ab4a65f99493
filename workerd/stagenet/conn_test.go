package stagenet_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/stagenet"
)

// member is a ring member's identity for a test.
type member struct {
	key ed25519.PrivateKey
	pub shard.PublicKey
}

func newMember(t *testing.T) member {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return member{key: key, pub: shard.KeyOf(key)}
}

// allowOnly accepts exactly the given members.
func allowOnly(ms ...member) func(shard.PublicKey) bool {
	return func(k shard.PublicKey) bool {
		for _, m := range ms {
			if m.pub == k {
				return true
			}
		}
		return false
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func listen(t *testing.T, m member, allow func(shard.PublicKey) bool, opts ...stagenet.Option) *stagenet.Listener {
	t.Helper()
	l, err := stagenet.Listen("127.0.0.1:0", m.key, allow, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// acceptOne runs Accept once in the background.
func acceptOne(ctx context.Context, l *stagenet.Listener) <-chan acceptResult {
	ch := make(chan acceptResult, 1)
	go func() {
		c, err := l.Accept(ctx)
		ch <- acceptResult{c, err}
	}()
	return ch
}

type acceptResult struct {
	c   *stagenet.Conn
	err error
}

// pair connects client to server's listener and returns both ends.
func pair(t *testing.T, server, client member, sopts, copts []stagenet.Option) (s, c *stagenet.Conn) {
	t.Helper()
	ctx := testCtx(t)
	l := listen(t, server, allowOnly(client), sopts...)
	acc := acceptOne(ctx, l)
	c, err := stagenet.Dial(ctx, l.Addr().String(), client.key, server.pub, copts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return r.c, c
}

// TestExchange: frames of every kind, and a 16 MiB payload, cross an
// authenticated connection both ways intact; each end knows the other's key.
func TestExchange(t *testing.T) {
	ctx := testCtx(t)
	a, b := newMember(t), newMember(t)
	s, c := pair(t, a, b, nil, nil)
	if s.Peer() != b.pub || c.Peer() != a.pub {
		t.Fatalf("peers: server sees %s (want %s), client sees %s (want %s)", s.Peer(), b.pub, c.Peer(), a.pub)
	}
	big := make([]byte, 16<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	var frames []stagenet.Frame
	for _, f := range sampleFrames(t) {
		if f.Kind != stagenet.KindPing && f.Kind != stagenet.KindPong {
			frames = append(frames, f)
		}
	}
	frames = append(frames, stagenet.Frame{Kind: stagenet.KindHidden, Job: "job-big", Step: 9, Pos: 4096, Payload: big})
	for _, dir := range []struct {
		name     string
		from, to *stagenet.Conn
	}{{"client to server", c, s}, {"server to client", s, c}} {
		t.Run(dir.name, func(t *testing.T) {
			// Sending and receiving run apart: the 16 MiB frame is larger
			// than the socket buffers.
			sent := make(chan error, 1)
			go func() {
				for i := range frames {
					f := frames[i]
					if err := dir.from.Send(ctx, &f); err != nil {
						sent <- err
						return
					}
					if f.Hash != sha256.Sum256(f.Payload) {
						sent <- errors.New("Send did not set Hash")
						return
					}
				}
				sent <- nil
			}()
			for _, want := range frames {
				got, err := dir.to.Recv(ctx)
				if err != nil {
					t.Fatal(err)
				}
				want.Hash = sha256.Sum256(want.Payload)
				if !framesEqual(got, want) {
					t.Fatalf("received %s frame (%d bytes) differs from the %s frame (%d bytes) sent", got.Kind, len(got.Payload), want.Kind, len(want.Payload))
				}
				if got.Kind == stagenet.KindHidden && len(got.Payload) < 1024 {
					// The frame hash is the receipt hash of the states.
					if got.Hash != engine.HashHidden(got.Payload) {
						t.Error("hidden frame hash is not engine.HashHidden")
					}
					if _, err := engine.DecodeHidden(got.Payload); err != nil {
						t.Error(err)
					}
				}
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestImpersonation: a dial that expects one key and reaches a server
// holding another fails, naming both; the server reports it too.
func TestImpersonation(t *testing.T) {
	ctx := testCtx(t)
	impostor, victim, client := newMember(t), newMember(t), newMember(t)
	l := listen(t, impostor, allowOnly(client))
	acc := acceptOne(ctx, l)
	c, err := stagenet.Dial(ctx, l.Addr().String(), client.key, victim.pub)
	if err == nil {
		c.Close()
		t.Fatal("dial to a server with the wrong key succeeded")
	}
	for _, want := range []string{"answered as " + impostor.pub.String(), "want " + victim.pub.String(), l.Addr().String()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("dial error %q does not say %q", err, want)
		}
	}
	r := <-acc
	var he *stagenet.HandshakeError
	if !errors.As(r.err, &he) {
		t.Fatalf("Accept: %v, %v; want a HandshakeError", r.c, r.err)
	}
}

// TestRefusedKey: a client whose key allow refuses is reported by Accept,
// and the client's connection fails on first use; the listener goes on
// accepting others.
func TestRefusedKey(t *testing.T) {
	ctx := testCtx(t)
	server, stranger, friend := newMember(t), newMember(t), newMember(t)
	l := listen(t, server, allowOnly(friend))
	acc := acceptOne(ctx, l)
	c, err := stagenet.Dial(ctx, l.Addr().String(), stranger.key, server.pub)
	if err == nil {
		// TLS 1.3: the client's handshake ends before the server has
		// judged its certificate, so the refusal arrives on first read.
		defer c.Close()
		_, err = c.Recv(ctx)
	}
	if err == nil || !strings.Contains(err.Error(), "bad certificate") || !strings.Contains(err.Error(), server.pub.String()) {
		t.Errorf("refused client: %v; want a bad-certificate error naming the server", err)
	}
	r := <-acc
	var he *stagenet.HandshakeError
	if !errors.As(r.err, &he) || !strings.Contains(r.err.Error(), stranger.pub.String()+" at "+he.Addr+": key not allowed") {
		t.Fatalf("Accept: %v; want a HandshakeError naming the refused key", r.err)
	}
	// The listener still serves members it allows.
	acc = acceptOne(ctx, l)
	c2, err := stagenet.Dial(ctx, l.Addr().String(), friend.key, server.pub)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if r := <-acc; r.err != nil || r.c.Peer() != friend.pub {
		t.Fatalf("Accept after a refusal: %v", r.err)
	} else {
		r.c.Close()
	}
}

// TestBadClients: TLS clients that are not proper stage members are
// refused by the listener and fail themselves.
func TestBadClients(t *testing.T) {
	server, client := newMember(t), newMember(t)
	cert, err := stagenet.Certificate(client.key)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		cfg    *tls.Config
		server string // in Accept's error
	}{
		{"no certificate", &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, NextProtos: []string{stagenet.ALPN}}, "certificate"},
		{"TLS 1.2 only", &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12, NextProtos: []string{stagenet.ALPN}, Certificates: []tls.Certificate{cert}}, "unsupported versions"},
		{"no ALPN", &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}, `did not negotiate ALPN "c0mpute-stage/1"`},
		{"other ALPN", &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"}, Certificates: []tls.Certificate{cert}}, "application protocol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			l := listen(t, server, allowOnly(client))
			acc := acceptOne(ctx, l)
			conn, err := tls.Dial("tcp", l.Addr().String(), tc.cfg)
			if err == nil {
				defer conn.Close()
				// The refusal arrives as an alert on first read; the
				// server closes after it.
				_, err = conn.Read(make([]byte, 1))
			}
			if err == nil {
				t.Fatal("refused client read data")
			}
			r := <-acc
			var he *stagenet.HandshakeError
			if !errors.As(r.err, &he) || !strings.Contains(r.err.Error(), tc.server) {
				t.Fatalf("Accept: %v; want a HandshakeError saying %q", r.err, tc.server)
			}
		})
	}
}

// TestSilentPeer: a peer that connects and says nothing is dropped at the
// handshake timeout.
func TestSilentPeer(t *testing.T) {
	ctx := testCtx(t)
	server := newMember(t)
	l := listen(t, server, allowOnly(), stagenet.WithHandshakeTimeout(100*time.Millisecond))
	acc := acceptOne(ctx, l)
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := <-acc
	var he *stagenet.HandshakeError
	if !errors.As(r.err, &he) || !errors.Is(r.err, context.DeadlineExceeded) || !strings.Contains(r.err.Error(), "WithHandshakeTimeout") {
		t.Fatalf("Accept: %v; want a handshake timeout", r.err)
	}
	// The listener closed it: a read ends instead of waiting.
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Error("the silent peer's connection is still open")
	}
}

// TestMalformedFrameCutOff: a peer that sends a frame with a bad hash, or
// a header claiming a payload over the cap, is cut off with ErrFrame, and
// the oversized claim allocates nothing near the cap.
func TestMalformedFrameCutOff(t *testing.T) {
	const limit = 4 << 20
	good := encode(t, stagenet.Frame{Kind: stagenet.KindHidden, Job: "j", Payload: bytes.Repeat([]byte{7}, 1000)})
	oversized := bytes.Clone(good[:stagenet.HeaderSize+1])
	binary.LittleEndian.PutUint32(oversized[16:], math.MaxUint32)
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"bad hash", mutate(good, len(good)-1, 8), "does not match its SHA-256"},
		{"oversized length", oversized, "hidden payload of 4294967295 bytes, over the 4194304-byte limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			a, b := newMember(t), newMember(t)
			s, c := pair(t, a, b, []stagenet.Option{stagenet.WithMaxPayload(limit)}, nil)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			if err := c.WriteRaw(tc.b); err != nil {
				t.Fatal(err)
			}
			_, err := s.Recv(ctx)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, stagenet.ErrFrame) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), b.pub.String()) {
				t.Fatalf("server Recv: %v; want ErrFrame saying %q and naming the peer", err, tc.want)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n >= limit {
				t.Errorf("receiving the frame allocated %d bytes, cap %d", n, limit)
			}
			// Cut off: the sender's side is closed by its peer.
			if _, err := c.Recv(ctx); !errors.Is(err, io.EOF) {
				t.Errorf("client Recv after the cut-off: %v, want io.EOF", err)
			}
			if err := s.Send(ctx, &stagenet.Frame{Kind: stagenet.KindOpen, Job: "j"}); !errors.Is(err, stagenet.ErrFrame) {
				t.Errorf("server Send after the cut-off: %v, want the cut-off's cause", err)
			}
		})
	}
}

// TestPing: Ping measures a positive round trip while both ends sit in
// Recv, and neither Recv sees ping or pong frames.
func TestPing(t *testing.T) {
	ctx := testCtx(t)
	a, b := newMember(t), newMember(t)
	s, c := pair(t, a, b, nil, nil)
	got := make(chan stagenet.Frame, 2)
	for _, conn := range []*stagenet.Conn{s, c} {
		go func() {
			f, err := conn.Recv(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- f
		}()
	}
	for _, p := range []*stagenet.Conn{c, s, c} {
		d, err := p.Ping(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d <= 0 {
			t.Errorf("Ping = %v, want a positive round trip", d)
		}
	}
	for _, p := range []*stagenet.Conn{c, s} {
		if err := p.Send(ctx, &stagenet.Frame{Kind: stagenet.KindClose, Job: "after-ping"}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if f := <-got; f.Kind != stagenet.KindClose || f.Job != "after-ping" {
			t.Errorf("Recv returned a %s frame of job %q, want the close frame sent after the pings", f.Kind, f.Job)
		}
	}
	if err := c.Send(ctx, &stagenet.Frame{Kind: stagenet.KindPing, Payload: make([]byte, 8)}); err == nil || !strings.Contains(err.Error(), "call Ping") {
		t.Errorf("Send of a ping frame: %v, want a refusal", err)
	}
}

// TestSendWriteTimeout: Send to a peer that never reads blocks on TCP
// back-pressure, then fails at the write timeout and closes the connection.
func TestSendWriteTimeout(t *testing.T) {
	ctx := testCtx(t)
	a, b := newMember(t), newMember(t)
	const timeout = 200 * time.Millisecond
	_, c := pair(t, a, b, nil, []stagenet.Option{stagenet.WithWriteTimeout(timeout)})
	payload := make([]byte, 16<<20)
	var err error
	// The peer holds one frame for its Recv and the socket buffers take
	// a few MiB; far fewer than 16 frames fill both.
	for i := 0; i < 16 && err == nil; i++ {
		err = c.Send(ctx, &stagenet.Frame{Kind: stagenet.KindHidden, Job: "stalled", Step: uint32(i), Payload: payload})
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "WithWriteTimeout") || !strings.Contains(err.Error(), a.pub.String()) {
		t.Fatalf("Send to a peer that never reads: %v; want a write timeout naming the peer", err)
	}
	if err := c.Send(ctx, &stagenet.Frame{Kind: stagenet.KindOpen, Job: "next"}); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Send after the timeout: %v; want the connection closed by it", err)
	}
	if _, err := c.Recv(ctx); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Recv after the timeout: %v; want the connection closed by it", err)
	}
}

// TestSendContext: a Send blocked on a peer that never reads ends with its
// context, well before a long write timeout.
func TestSendContext(t *testing.T) {
	a, b := newMember(t), newMember(t)
	_, c := pair(t, a, b, nil, []stagenet.Option{stagenet.WithWriteTimeout(time.Hour)})
	ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
	defer cancel()
	payload := make([]byte, 16<<20)
	var err error
	for i := 0; i < 16 && err == nil; i++ {
		err = c.Send(ctx, &stagenet.Frame{Kind: stagenet.KindHidden, Job: "stalled", Payload: payload})
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send with an expiring context: %v", err)
	}
}

// TestCloseUnblocksRecv: Close ends a pending Recv with net.ErrClosed, and
// the peer's Recv with io.EOF.
func TestCloseUnblocksRecv(t *testing.T) {
	ctx := testCtx(t)
	a, b := newMember(t), newMember(t)
	s, c := pair(t, a, b, nil, nil)
	done := make(chan error, 2)
	go func() { _, err := c.Recv(ctx); done <- err }()
	go func() { _, err := s.Recv(ctx); done <- err }()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		err := <-done
		if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
			t.Errorf("Recv after Close: %v; want net.ErrClosed here, io.EOF at the peer", err)
		}
	}
	if _, err := c.Recv(ctx); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Recv on a closed connection: %v", err)
	}
}

// TestListenerClose: Close ends a pending Accept and later ones.
func TestListenerClose(t *testing.T) {
	ctx := testCtx(t)
	l, err := stagenet.Listen("127.0.0.1:0", newMember(t).key, allowOnly())
	if err != nil {
		t.Fatal(err)
	}
	acc := acceptOne(ctx, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if r := <-acc; !errors.Is(r.err, net.ErrClosed) {
		t.Errorf("pending Accept: %v", r.err)
	}
	if _, err := l.Accept(ctx); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v", err)
	}
	if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
		t.Error("closed listener still accepts TCP connections")
	}
}

// TestInputs: bad keys and options are refused with what to fix.
func TestInputs(t *testing.T) {
	ctx := testCtx(t)
	m := newMember(t)
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"listen short key", listenErr(m.key[:10], allowOnly()), "identity key of 10 bytes, want a 64-byte ed25519 private key"},
		{"listen no allow", listenErr(m.key, nil), "needs an allow function"},
		{"listen bad addr", listenErr(m.key, allowOnly(), "no-such-host-or-port"), "stagenet: listen on no-such-host-or-port"},
		{"max payload zero", listenErr(m.key, allowOnly(), stagenet.WithMaxPayload(0)), "WithMaxPayload(0) must be at least 1"},
		{"max payload over wire", listenErr(m.key, allowOnly(), stagenet.WithMaxPayload(1<<32)), "WithMaxPayload(4294967296) must be at most 4294967295"},
		{"write timeout", dialErr(ctx, m.key, m.pub, stagenet.WithWriteTimeout(-time.Second)), "WithWriteTimeout(-1s) must be more than 0"},
		{"handshake timeout", dialErr(ctx, m.key, m.pub, stagenet.WithHandshakeTimeout(0)), "WithHandshakeTimeout(0s) must be more than 0"},
		{"conns per peer", listenErr(m.key, allowOnly(), stagenet.WithMaxConnsPerPeer(0)), "WithMaxConnsPerPeer(0) must be at least 1"},
		{"conns", listenErr(m.key, allowOnly(), stagenet.WithMaxConns(-1)), "WithMaxConns(-1) must be at least 1"},
		{"idle timeout", listenErr(m.key, allowOnly(), stagenet.WithIdleTimeout(time.Microsecond)), "WithIdleTimeout(1µs) must be at least 1ms"},
		{"dial zero peer", dialErr(ctx, m.key, shard.PublicKey{}), "no peer key to expect"},
		{"dial short key", dialErr(ctx, m.key[:32], m.pub), "identity key of 32 bytes"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, tc.err, tc.want)
		}
	}
}

func listenErr(key ed25519.PrivateKey, allow func(shard.PublicKey) bool, rest ...any) error {
	addr := "127.0.0.1:0"
	var opts []stagenet.Option
	for _, r := range rest {
		switch v := r.(type) {
		case string:
			addr = v
		case stagenet.Option:
			opts = append(opts, v)
		}
	}
	l, err := stagenet.Listen(addr, key, allow, opts...)
	if err == nil {
		l.Close()
	}
	return err
}

func dialErr(ctx context.Context, key ed25519.PrivateKey, peer shard.PublicKey, opts ...stagenet.Option) error {
	c, err := stagenet.Dial(ctx, "127.0.0.1:1", key, peer, opts...)
	if err == nil {
		c.Close()
	}
	return err
}
