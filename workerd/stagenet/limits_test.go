package stagenet_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/workerd/stagenet"
)

// waitFor polls cond until it holds, failing the test after 20 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// headerOnly is a hidden frame's header (and job id) announcing an
// n-byte payload, with no payload after it.
func headerOnly(n uint32) []byte {
	b := raw(byte(stagenet.KindHidden), "flood", nil, nil)
	binary.LittleEndian.PutUint32(b[16:], n)
	return b
}

// acceptAll runs Accept n times in the background.
func acceptAll(ctx context.Context, l *stagenet.Listener, n int) <-chan acceptResult {
	ch := make(chan acceptResult, n)
	go func() {
		for range n {
			c, err := l.Accept(ctx)
			ch <- acceptResult{c, err}
		}
	}()
	return ch
}

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestHeaderFlood is the review's measurement: 40 connections from one
// allowed key, each sending only a header that announces a 16 MiB payload.
// With the default limits 4 are accepted and 36 refused by name; even with
// all 40 accepted, each costs one small chunk, not 16 MiB (before payloads
// were read in chunks, 40 such headers grew the heap by 652 MiB).
func TestHeaderFlood(t *testing.T) {
	const (
		dials     = 40
		announced = 16 << 20
		maxHeap   = 32 << 20
	)
	for _, tc := range []struct {
		name     string
		opts     []stagenet.Option
		accepted int
	}{
		{"default limits", nil, stagenet.DefaultMaxConnsPerPeer},
		{"all accepted", []stagenet.Option{stagenet.WithMaxConnsPerPeer(dials)}, dials},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			server, attacker := newMember(t), newMember(t)
			// The ring member's listener limit: 16 MiB + 20 bytes.
			opts := append([]stagenet.Option{stagenet.WithMaxPayload(announced + 20)}, tc.opts...)
			l := listen(t, server, allowOnly(attacker), opts...)
			acc := acceptAll(ctx, l, dials)
			before := heapInUse()
			for range dials {
				c, err := stagenet.Dial(ctx, l.Addr().String(), attacker.key, server.pub, stagenet.WithIdleTimeout(time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				// A refused connection may already be closed: its write
				// may fail, which is the point.
				_ = c.WriteRaw(headerOnly(announced))
			}
			var conns []*stagenet.Conn
			refused := 0
			for range dials {
				r := <-acc
				if r.err == nil {
					t.Cleanup(func() { r.c.Close() })
					conns = append(conns, r.c)
					continue
				}
				var he *stagenet.HandshakeError
				if !errors.As(r.err, &he) || !errors.Is(r.err, stagenet.ErrTooManyConns) ||
					!strings.Contains(r.err.Error(), attacker.pub.String()) || !strings.Contains(r.err.Error(), "WithMaxConnsPerPeer") {
					t.Fatalf("Accept: %v; want a HandshakeError wrapping ErrTooManyConns naming the key and WithMaxConnsPerPeer", r.err)
				}
				refused++
			}
			if len(conns) != tc.accepted || refused != dials-tc.accepted {
				t.Fatalf("%d connections accepted and %d refused, want %d and %d", len(conns), refused, tc.accepted, dials-tc.accepted)
			}
			// Every accepted reader has taken its header and waits inside
			// the payload, its first chunk allocated.
			waitFor(t, "the readers to block inside the announced payloads", func() bool {
				for _, c := range conns {
					if c.PayloadWaiting() != announced {
						return false
					}
				}
				return true
			})
			after := heapInUse()
			grew := int64(after) - int64(before)
			t.Logf("%d connections (%d accepted) announcing %d MiB each: heap in use grew %d KiB", dials, len(conns), announced>>20, grew>>10)
			if grew >= maxHeap {
				t.Errorf("heap in use grew %d bytes, want under %d", grew, maxHeap)
			}
		})
	}
}

// TestConnLimits: a connection over the per-key or the total limit is
// refused after its handshake with an error naming its key and the option,
// its client sees the connection end, and a slot frees when a connection
// closes, from either end.
func TestConnLimits(t *testing.T) {
	t.Run("per key", func(t *testing.T) {
		ctx := testCtx(t)
		server, a := newMember(t), newMember(t)
		l := listen(t, server, allowOnly(a), stagenet.WithMaxConnsPerPeer(1))
		first := dialAccepted(t, ctx, l, a, server)
		second, he := dialRefused(t, ctx, l, a, server)
		if !strings.Contains(he.Error(), "peer "+a.pub.String()+": stagenet: too many connections: it already has 1 open, the most one key may hold (WithMaxConnsPerPeer)") {
			t.Errorf("refusal %q does not name the key and the limit", he)
		}
		if _, err := second.Recv(ctx); !errors.Is(err, io.EOF) {
			t.Errorf("refused client's Recv: %v, want io.EOF", err)
		}
		// The peer closes its first connection: once the server's end
		// has seen it end, the key may connect again.
		if err := first.client.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := first.server.Recv(ctx); !errors.Is(err, io.EOF) {
			t.Fatalf("server Recv after the peer closed: %v, want io.EOF", err)
		}
		dialAccepted(t, ctx, l, a, server)
	})
	t.Run("total", func(t *testing.T) {
		ctx := testCtx(t)
		server, a, b, c := newMember(t), newMember(t), newMember(t), newMember(t)
		l := listen(t, server, allowOnly(a, b, c), stagenet.WithMaxConns(2))
		first := dialAccepted(t, ctx, l, a, server)
		dialAccepted(t, ctx, l, b, server)
		_, he := dialRefused(t, ctx, l, c, server)
		if !strings.Contains(he.Error(), "peer "+c.pub.String()+": stagenet: too many connections: the listener already holds 2, its limit (WithMaxConns)") {
			t.Errorf("refusal %q does not name the key and the limit", he)
		}
		// This side closes one: the slot is free at once.
		if err := first.server.Close(); err != nil {
			t.Fatal(err)
		}
		dialAccepted(t, ctx, l, c, server)
	})
}

// connPair is both ends of an accepted connection.
type connPair struct{ server, client *stagenet.Conn }

func dialAccepted(t *testing.T, ctx context.Context, l *stagenet.Listener, from, to member) connPair {
	t.Helper()
	acc := acceptOne(ctx, l)
	c, err := stagenet.Dial(ctx, l.Addr().String(), from.key, to.pub)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := <-acc
	if r.err != nil {
		t.Fatalf("Accept: %v", r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	if r.c.Peer() != from.pub {
		t.Fatalf("accepted %s, want %s", r.c.Peer(), from.pub)
	}
	return connPair{r.c, c}
}

func dialRefused(t *testing.T, ctx context.Context, l *stagenet.Listener, from, to member) (*stagenet.Conn, *stagenet.HandshakeError) {
	t.Helper()
	acc := acceptOne(ctx, l)
	// TLS 1.3: the client's handshake ends before the server counts it,
	// so Dial succeeds and the refusal is the connection's end.
	c, err := stagenet.Dial(ctx, l.Addr().String(), from.key, to.pub)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := <-acc
	var he *stagenet.HandshakeError
	if !errors.As(r.err, &he) || !errors.Is(r.err, stagenet.ErrTooManyConns) {
		if r.c != nil {
			r.c.Close()
		}
		t.Fatalf("Accept: %v; want a HandshakeError wrapping ErrTooManyConns", r.err)
	}
	return c, he
}

// TestIdleTimeout: an accepted connection whose peer sends nothing, between
// frames or inside a payload, is closed at the idle timeout; Recv says so,
// naming the peer, and the peer sees the connection end.
func TestIdleTimeout(t *testing.T) {
	const idle = 150 * time.Millisecond
	for _, tc := range []struct {
		name string
		sent []byte
		want string
	}{
		{"between frames", nil, "recv: peer sent nothing for 150ms, not even a ping (WithIdleTimeout)"},
		{"inside a payload", headerOnly(1 << 20), "recv: stagenet: hidden frame payload: 0 of 1048576 bytes read: peer sent nothing for 150ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			a, b := newMember(t), newMember(t)
			// The client's own keep-alive is far off: it stays silent.
			s, c := pair(t, a, b, []stagenet.Option{stagenet.WithIdleTimeout(idle)}, []stagenet.Option{stagenet.WithIdleTimeout(time.Hour)})
			if tc.sent != nil {
				if err := c.WriteRaw(tc.sent); err != nil {
					t.Fatal(err)
				}
			}
			_, err := s.Recv(ctx)
			if !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), b.pub.String()) {
				t.Fatalf("server Recv: %v; want an idle timeout saying %q and naming the peer", err, tc.want)
			}
			if _, err := c.Recv(ctx); !errors.Is(err, io.EOF) {
				t.Errorf("client Recv after the idle timeout: %v, want io.EOF", err)
			}
		})
	}
}

// TestIdleKeptAlive: pings are activity. A connection that carries only
// pings, the application's or the dialled side's own keep-alive, outlives
// several idle timeouts and then still carries a frame.
func TestIdleKeptAlive(t *testing.T) {
	const idle = time.Second
	for _, tc := range []struct {
		name    string
		client  time.Duration // the client's idle timeout: its keep-alive runs at a quarter
		pinging bool          // the client's application pings
	}{
		{"application pings", time.Hour, true},
		{"keep-alive", idle, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			a, b := newMember(t), newMember(t)
			s, c := pair(t, a, b, []stagenet.Option{stagenet.WithIdleTimeout(idle)}, []stagenet.Option{stagenet.WithIdleTimeout(tc.client)})
			recv := make(chan error, 1)
			go func() {
				f, err := s.Recv(ctx)
				if err == nil && (f.Kind != stagenet.KindOpen || f.Job != "after-idle") {
					err = fmt.Errorf("received a %s frame of job %q, want the open sent after the idle span", f.Kind, f.Job)
				}
				recv <- err
			}()
			stop, pinged := make(chan struct{}), make(chan error, 1)
			if tc.pinging {
				go func() {
					for {
						select {
						case <-stop:
							pinged <- nil
							return
						default:
						}
						if _, err := c.Ping(ctx); err != nil {
							pinged <- err
							return
						}
					}
				}()
			}
			span := time.NewTimer(3 * idle)
			defer span.Stop()
			select {
			case <-span.C:
			case err := <-recv:
				t.Fatalf("the server's Recv ended during the idle span: %v", err)
			}
			close(stop)
			if tc.pinging {
				if err := <-pinged; err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Send(ctx, &stagenet.Frame{Kind: stagenet.KindOpen, Job: "after-idle"}); err != nil {
				t.Fatal(err)
			}
			if err := <-recv; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestKeepAlivePings: a dialled connection whose application sends nothing
// pings at a quarter of its idle timeout; its peer here is a bare TLS
// server that reads frames and answers nothing.
func TestKeepAlivePings(t *testing.T) {
	ctx := testCtx(t)
	server, client := newMember(t), newMember(t)
	cert, err := stagenet.Certificate(server.key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		NextProtos: []string{stagenet.ALPN}, ClientAuth: tls.RequireAnyClientCert,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	frames := make(chan stagenet.Frame, 8)
	readErr := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			readErr <- err
			return
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		for {
			f, err := stagenet.ReadFrame(r, 1<<10)
			if err != nil {
				readErr <- err
				return
			}
			select {
			case frames <- f:
			default:
			}
		}
	}()
	c, err := stagenet.Dial(ctx, ln.Addr().String(), client.key, server.pub, stagenet.WithIdleTimeout(40*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		select {
		case f := <-frames:
			if f.Kind != stagenet.KindPing {
				t.Fatalf("frame %d from an idle client is a %s frame, want a ping", i, f.Kind)
			}
		case err := <-readErr:
			t.Fatalf("reading the idle client: %v", err)
		case <-ctx.Done():
			t.Fatal("the idle client sent no keep-alive ping")
		}
	}
}

// slowReader hands out at most n bytes a read.
type slowReader struct {
	r io.Reader
	n int
}

func (s slowReader) Read(p []byte) (int, error) { return s.r.Read(p[:min(len(p), s.n)]) }

// TestReadFrameChunks: payloads on both sides of the chunk sizes decode
// from a stream that yields a few bytes at a time, and one cut short
// says how much of it arrived.
func TestReadFrameChunks(t *testing.T) {
	const kib, mib = 1 << 10, 1 << 20
	for _, n := range []int{1, 64*kib - 1, 64 * kib, 64*kib + 1, mib + 64*kib, mib + 64*kib + 1, 3*mib + 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			payload := make([]byte, n)
			if _, err := rand.Read(payload); err != nil {
				t.Fatal(err)
			}
			want := stagenet.Frame{Kind: stagenet.KindHidden, Job: "slow", Step: 2, Pos: 9, Payload: payload}
			b := encode(t, want)
			want.Hash = sha256.Sum256(payload)
			got, err := stagenet.ReadFrame(bufio.NewReaderSize(slowReader{bytes.NewReader(b), 4093}, 16), n)
			if err != nil {
				t.Fatal(err)
			}
			if !framesEqual(got, want) {
				t.Fatalf("read a %s frame of %d bytes, differs from the %d-byte frame sent", got.Kind, len(got.Payload), n)
			}
			_, err = stagenet.ReadFrame(bufio.NewReader(bytes.NewReader(b[:len(b)-1])), n)
			if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), fmt.Sprintf("%d of %d bytes read", n-1, n)) {
				t.Errorf("frame cut one byte short: %v, want io.ErrUnexpectedEOF saying %d of %d bytes read", err, n-1, n)
			}
		})
	}
}

// TestSlowPayload: a 3 MiB frame whose bytes arrive in small pieces over
// longer than the listener's idle timeout, never pausing that long, is
// received whole: the idle timeout counts silence, not a frame's duration.
func TestSlowPayload(t *testing.T) {
	const idle = time.Second
	ctx := testCtx(t)
	a, b := newMember(t), newMember(t)
	s, c := pair(t, a, b, []stagenet.Option{stagenet.WithIdleTimeout(idle)}, []stagenet.Option{stagenet.WithIdleTimeout(time.Hour)})
	payload := make([]byte, 3<<20+5)
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	want := stagenet.Frame{Kind: stagenet.KindHidden, Job: "slow", Step: 1, Payload: payload}
	wire := encode(t, want)
	want.Hash = sha256.Sum256(payload)
	got := make(chan error, 1)
	go func() {
		f, err := s.Recv(ctx)
		if err == nil && !framesEqual(f, want) {
			err = fmt.Errorf("received a %s frame of %d bytes, differs from the %d-byte frame sent", f.Kind, len(f.Payload), len(payload))
		}
		got <- err
	}()
	// 16 pieces, a tenth of the idle timeout apart: 1.5 timeouts in all.
	const pieces = 16
	step := (len(wire) + pieces - 1) / pieces
	for i := 0; i < len(wire); i += step {
		if i > 0 {
			time.Sleep(idle / 10)
		}
		if err := c.WriteRaw(wire[i:min(i+step, len(wire))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}
