package listener

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
)

// fakeRelay is a relay reached in process (Config.Local) for the
// listener's own tests: it answers hello with a welcome naming a fresh
// connection id, and lets the test post to and end the connection, as
// relay.LocalConn does. The real one is tested in infra/relay and under
// every infra/devnet test.
type fakeRelay struct {
	mu    sync.Mutex
	n     int
	conns []*fakeLink
}

type fakeLink struct {
	id     string
	recv   func([]byte)
	ended  func(int, string)
	mu     sync.Mutex
	closed bool
}

func (r *fakeRelay) connect(_ context.Context, h http.Header, recv func([]byte), ended func(int, string)) (LocalLink, error) {
	if h.Get(relaymsg.HeaderListener) != "secret" {
		return nil, errors.New("401: bad listener secret")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	l := &fakeLink{id: "conn-" + string(rune('a'+r.n)), recv: recv, ended: ended}
	r.conns = append(r.conns, l)
	return l, nil
}

func (r *fakeRelay) last() *fakeLink {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns[len(r.conns)-1]
}

func (l *fakeLink) Send(_ context.Context, data []byte) error {
	m, err := relaymsg.Decode(data)
	if err != nil {
		return err
	}
	if _, ok := m.(*relaymsg.Hello); ok {
		b, _ := relaymsg.Encode(&relaymsg.Welcome{Conn: l.id})
		l.recv(b)
	}
	return nil
}

func (l *fakeLink) Ping(context.Context) error { return nil }

func (l *fakeLink) Close(code int, reason string) error {
	l.mu.Lock()
	was := l.closed
	l.closed = true
	l.mu.Unlock()
	if !was {
		l.ended(code, reason)
	}
	return nil
}

// TestLocalConnection: a listener that joins the relay in process gets
// its id from the welcome, routes what the relay posts to the job's
// mailbox on the poster's goroutine, and when the connection ends tells
// the jobs on it and connects again.
func TestLocalConnection(t *testing.T) {
	relay := &fakeRelay{}
	l, err := Start(context.Background(), Config{Secret: "secret", Local: relay.connect,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	first := relay.last()
	id, err := l.Conn()
	if err != nil || id != first.id {
		t.Fatalf("Conn() = %q, %v; want %q", id, err, first.id)
	}
	box, err := l.Subscribe("job-1", id)
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	chunk, _ := relaymsg.Encode(&relaymsg.Chunk{Job: "job-1", To: id, From: "w", Deltas: []oaiwire.Delta{{Content: "hi"}},
		Ticket: "0123456789abcdef0123456789abcdef0123456789a"})
	first.recv(chunk)
	other, _ := relaymsg.Encode(&relaymsg.Assign{Job: "job-2", Worker: "w"})
	first.recv(other) // no mailbox: dropped
	m, ok := box.Pop()
	if c, isChunk := m.(*relaymsg.Chunk); !ok || !isChunk || c.Deltas[0].Content != "hi" {
		t.Fatalf("mailbox holds %#v, %v; want the chunk, at once", m, ok)
	}
	if _, ok := box.Pop(); ok {
		t.Fatal("another job's message reached the mailbox")
	}

	// The relay ends the connection: the job hears of it, and the
	// listener connects again.
	first.Close(1000, "Connection deleted")
	if m, ok := box.Pop(); !ok || !errors.Is(m.(error), ErrLost) {
		t.Fatalf("mailbox after the end: %#v, %v; want ErrLost", m, ok)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if now, err := l.Conn(); err == nil && now != first.id {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no new connection after the end")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLocalConnectionRefused: a refused in-process connect fails Start.
func TestLocalConnectionRefused(t *testing.T) {
	relay := &fakeRelay{}
	if _, err := Start(context.Background(), Config{Secret: "wrong", Local: relay.connect,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}); err == nil {
		t.Fatal("Start with a refused connect: no error")
	}
}
