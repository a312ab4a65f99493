package attack_test

// Extras: sequence numbers a worker gets wrong on purpose, and message
// types that only the relay may send, sent by a worker.

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
)

// TestWrongSequenceNumbers: a worker serving its own job sends a duplicate
// seq, a negative seq (refused as bad_message) and a seq far ahead. None
// of what they carry reaches the client, and the gateway lives on: the
// reply is the in-order text, or an error that ends the job with a refund.
func TestWrongSequenceNumbers(t *testing.T) {
	e := newEnv(t, options{})
	user, mallory := e.newAccount("user", 1000), e.newAccount("mallory", 0)
	h := e.hostileWorker(mallory)
	c := e.start(user.apiKey, chatBody("count", true))
	j := h.nextJob()
	send := func(seq int64, text string) {
		t.Helper()
		if err := h.chunk(j, seq, text); err != nil {
			t.Fatalf("chunk %d: %v", seq, err)
		}
	}
	send(0, "a")
	send(0, "DUP")
	h.drainErrors()
	send(-1, "NEG")
	if e, _ := h.waitError(5 * time.Second); e == nil || e.Code != "bad_message" {
		t.Errorf("negative seq: error reply %+v; want bad_message", e)
	}
	send(1<<40, "FAR")
	send(1<<62, "FARTHER")
	send(1, "b")
	if !h.isClosed() {
		_ = h.done(j, 2, 2)
	}
	r := c.wait(t)
	for _, bad := range []string{"DUP", "NEG", "FAR"} {
		if strings.Contains(r.Content, bad) {
			t.Errorf("the client got %q: %s", bad, r)
		}
	}
	job := e.settled(j.Job)
	switch {
	case r.ok():
		if r.Content != "ab" || job.State != "done" || job.Refunded {
			t.Errorf("reply %s, job %s refunded %v; want \"ab\", charged", r, job.State, job.Refunded)
		}
	default:
		t.Logf("the job ended with an error: %s", r)
		if job.State != "failed" || !job.Refunded {
			t.Errorf("job %s refunded %v; want failed with a refund", job.State, job.Refunded)
		}
	}
}

// TestForgedRelayMessages: a worker sends the relay messages only the
// relay or a listener sends — assign, lost, welcome, job, cancel, hello,
// registered, error. Each is refused with an error reply and changes
// nothing: an honest job in flight completes, charged.
func TestForgedRelayMessages(t *testing.T) {
	f := stageFreeRide(t, false)
	h, v := f.h, f.victimID
	var req oaiwire.ChatRequest
	req.Model = model
	req.Messages = []oaiwire.Message{{Role: "user", Content: oaiwire.Content{Text: "forged"}}}
	forged := []any{
		&relaymsg.Assign{Job: v, Worker: h.conn},
		&relaymsg.Lost{Job: v, Worker: h.conn},
		&relaymsg.Welcome{Conn: h.conn},
		&relaymsg.Job{Job: v, ReplyTo: f.own.ReplyTo, Model: model, Request: req, Deadline: time.Now().Add(time.Minute), Ticket: f.own.Ticket},
		&relaymsg.Cancel{Job: v},
		&relaymsg.Hello{},
		&relaymsg.Registered{Conn: h.conn, Models: []string{model}},
		&relaymsg.Error{Code: "forged", Message: "from a worker"},
	}
	for _, m := range forged {
		b, err := relaymsg.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.sendRaw(b); err != nil {
			t.Fatalf("%T: send: %v", m, err)
		}
		e, closed := h.waitError(5 * time.Second)
		switch {
		case e != nil:
		case closed:
			t.Logf("%T: the relay closed the connection (%v)", m, h.err())
		default:
			t.Errorf("%T sent by a worker: no error reply", m)
		}
		if closed {
			break
		}
	}
	f.finish(t)
}

// TestImagePartsInAChatReply: a worker that answers a chat job with an
// image part (one that is not the first message, which a chat reply would
// hold as out-of-order text) is cut off for it; the job goes to an honest
// worker, charged once, and the cheat earns nothing.
func TestImagePartsInAChatReply(t *testing.T) {
	// No first-token timeout to fall back on: only the cut moves the job.
	e := newEnv(t, options{limits: func(l *api.Limits) { l.FirstToken = time.Hour }})
	user, mallory, contributor := e.newAccount("user", 1000), e.newAccount("mallory", 0), e.newAccount("contributor", 0)
	h := e.hostileWorker(mallory)
	c := e.start(user.apiKey, chatBody("hello", false))
	j := h.nextJob()
	e.honestWorker(contributor, words("fine", " thanks"))
	part := bytes.Repeat([]byte{0x89}, relaymsg.ImagePartBytes)
	if err := h.send(&relaymsg.Chunk{Job: j.Job, To: j.ReplyTo, Seq: 1, Ticket: j.Ticket,
		Image: &relaymsg.ImagePart{Parts: 256, Data: part}}); err != nil {
		t.Fatal(err)
	}
	if r := c.wait(t); !r.ok() || r.Content != "fine thanks" {
		t.Errorf("reply %s; want the honest worker's", r)
	}
	// Cut off, not merely timed out (a worker that is only slow keeps its
	// connection).
	if !h.waitClosed(waitLimit) {
		t.Error("the worker that sent an image part in a chat reply is still connected")
	}
	e.expectCharged(j.Job)
	e.expectCredits(user, 1000-price)
	e.expectEarned(mallory, 0)
	e.expectEarned(contributor, earning)
}
