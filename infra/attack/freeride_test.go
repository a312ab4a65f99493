package attack_test

// Finding 1 (free ride) and the forgeries around it: a worker addressing a
// job it does not hold.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/relaymsg"
)

// jsonString is s as a JSON string literal.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// rawChunk writes a chunk message by hand, with content placed in the JSON
// string verbatim (it must need no escaping to be valid JSON, which is the
// point: it is small as sent and grows when the relay encodes it again).
// ticket "-" leaves the ticket field out.
func rawChunk(job, to string, seq int64, content, ticket string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"v":1,"type":"chunk","job":%s,"to":%s,"seq":%d,"deltas":[{"content":"`, jsonString(job), jsonString(to), seq)
	b.WriteString(content)
	b.WriteString(`"}]`)
	if ticket != "-" {
		fmt.Fprintf(&b, `,"ticket":%s`, jsonString(ticket))
	}
	b.WriteString("}")
	return b.Bytes()
}

// growing is a chunk payload that fits in one relay message as sent but not
// once the relay decodes and encodes it again.
type growing struct {
	name string
	// content returns the payload for a message whose other bytes take
	// overhead.
	content func(overhead int) string
}

var growingPayloads = []growing{
	// encoding/json's default writes <, > and & as six-byte \u003c.
	{"html-escapes", func(int) string { return strings.Repeat("<", 40<<10) }},
	// U+2028 and U+2029 are escaped by encoding/json whatever its HTML
	// setting: 3 bytes become 6.
	{"line-separators", func(int) string { return strings.Repeat("\u2028", 40<<10) }},
	// Invalid UTF-8 decodes to U+FFFD: 1 byte becomes 3.
	{"invalid-utf8", func(int) string { return strings.Repeat("\xff", 60<<10) }},
	// Plain text two bytes under the limit: the relay's own "from" stamp
	// pushes it over.
	{"near-limit", func(overhead int) string { return strings.Repeat("a", relaymsg.MaxMessage-2-overhead) }},
}

// growingChunk is a chunk of the payload that is as large as the payload
// wants, under MaxMessage as sent.
func growingChunk(t *testing.T, p growing, job, to string, seq int64, ticket string) []byte {
	t.Helper()
	overhead := len(rawChunk(job, to, seq, "", ticket))
	b := rawChunk(job, to, seq, p.content(overhead), ticket)
	if len(b) > relaymsg.MaxMessage {
		t.Fatalf("%s chunk is %d bytes as sent: the attack needs it under %d", p.name, len(b), relaymsg.MaxMessage)
	}
	return b
}

// forgedTicket is well formed and valid for nothing.
func forgedTicket() string { return strings.Repeat("A", relaymsg.TicketLen) }

// alterTicket changes one character of a ticket.
func alterTicket(tk string) string {
	if tk == "" {
		return forgedTicket()
	}
	c := byte('A')
	if tk[0] == 'A' {
		c = 'B'
	}
	return string(c) + tk[1:]
}

// freeRide is the stage of finding 1: the user runs a worker of its own
// (hostile) that served one job of the user's, so it knows the API
// listener's connection (Job.ReplyTo) and has a ticket; it then drains, and
// the user's next request goes to an honest worker, whose backend waits on
// gate after its first delta, so the job is in flight while the attack
// runs.
type freeRide struct {
	e        *env
	user     *account
	honest   *account
	h        *hostile
	own      *relaymsg.Job // the job the hostile worker served
	gate     chan struct{}
	victim   *call
	victimID string
}

func stageFreeRide(t *testing.T, hostileOnUser bool) *freeRide {
	e := newEnv(t, options{})
	f := &freeRide{e: e, user: e.newAccount("user", 1000), honest: e.newAccount("honest", 0), gate: make(chan struct{})}
	owner := f.user
	if !hostileOnUser {
		owner = e.newAccount("mallory", 0)
	}
	f.h = e.hostileWorker(owner)
	c := e.start(f.user.apiKey, chatBody("teach the listener", true))
	f.own = f.h.nextJob()
	f.h.serve(f.own, 1, "ok")
	if r := c.wait(t); !r.ok() {
		t.Fatalf("the hostile worker's own job: %s", r)
	}
	// The hostile worker steps aside: the next job goes to the honest one.
	if err := f.h.send(&relaymsg.Drain{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the hostile worker to drain", func() bool {
		w, err := e.store.GetWorker(context.Background(), f.h.conn)
		return err == nil && w.Draining
	})
	e.honestWorker(f.honest, gated(f.gate, "Hello", " world"))
	f.victim = e.start(f.user.apiKey, chatBody("the victim", true))
	f.victimID = f.victim.waitID(t)
	f.h.drainErrors()
	return f
}

// finish releases the honest worker and checks the victim job ended as if
// nothing had happened: the whole reply, charged, the honest worker paid.
func (f *freeRide) finish(t *testing.T) {
	t.Helper()
	close(f.gate)
	r := f.victim.wait(t)
	if !r.ok() || r.Content != "Hello world" || r.Finish != "stop" {
		t.Errorf("victim reply: %s; want \"Hello world\", stop", r)
	}
	f.e.expectCharged(f.victimID)
	f.e.expectEarned(f.honest, earning)
	f.e.expectCredits(f.user, 1000-2*price)
}

// expectRefused waits for the relay's error reply to a forged message.
func expectRefused(t *testing.T, h *hostile, what string) {
	t.Helper()
	e, closed := h.waitError(5 * time.Second)
	switch {
	case e != nil:
		t.Logf("%s: refused: %s: %.120s", what, e.Code, e.Message)
	case closed:
		t.Errorf("%s: the relay closed the connection (%v) without an error reply", what, h.err())
	default:
		t.Errorf("%s: no error reply: the relay accepted a message for a job the sender does not hold", what)
	}
}

// TestFreeRideOversizedChunk is finding 1: a user's own worker sends, for
// the user's job on an honest worker, a chunk the relay cannot re-encode
// under 128 KB. Before: the relay failed to forward it, failed the job as
// "listener gone" with a refund, while the honest reply still reached the
// user: a free completion and an unpaid worker. Now the relay refuses the
// chunk (the sender holds no ticket for the job), the user is charged and
// the honest worker paid.
func TestFreeRideOversizedChunk(t *testing.T) {
	cases := []struct {
		payload int // index in growingPayloads
		ticket  string
	}{
		{0, "own"}, {0, "none"}, {1, "forged"}, {2, "own"}, {3, "own"}, {3, "altered"},
	}
	for _, c := range cases {
		p := growingPayloads[c.payload]
		t.Run(p.name+"/"+c.ticket+"-ticket", func(t *testing.T) {
			f := stageFreeRide(t, true)
			tk := map[string]string{"own": f.own.Ticket, "none": "-", "forged": forgedTicket(), "altered": alterTicket(f.own.Ticket)}[c.ticket]
			if err := f.h.sendRaw(growingChunk(t, p, f.victimID, f.own.ReplyTo, 1, tk)); err != nil {
				t.Fatalf("send: %v", err)
			}
			expectRefused(t, f.h, "oversized chunk for another worker's job")
			f.finish(t)
			// The user's worker earned for its own job only.
			f.e.expectEarned(f.user, earning)
		})
	}
}

// TestForeignJobMessages: a worker (not the user's) sends chunk, done and
// fail naming another worker's job — with its own ticket from a job it did
// serve, without one, with one altered, or addressed elsewhere. Each is
// refused with an error reply and nothing reaches the victim's client.
func TestForeignJobMessages(t *testing.T) {
	f := stageFreeRide(t, false)
	h, own, v := f.h, f.own, f.victimID
	forgeries := []struct {
		what string
		msg  any
		raw  []byte
	}{
		{what: "chunk with its own ticket", msg: &relaymsg.Chunk{Job: v, To: own.ReplyTo, Seq: 1, Deltas: deltas("INJECTED"), Ticket: own.Ticket}},
		{what: "chunk with an altered ticket", msg: &relaymsg.Chunk{Job: v, To: own.ReplyTo, Seq: 1, Deltas: deltas("INJECTED"), Ticket: alterTicket(own.Ticket)}},
		{what: "chunk with a forged ticket", msg: &relaymsg.Chunk{Job: v, To: own.ReplyTo, Seq: 1, Deltas: deltas("INJECTED"), Ticket: forgedTicket()}},
		{what: "chunk without a ticket", raw: rawChunk(v, own.ReplyTo, 1, "INJECTED", "-")},
		{what: "chunk addressed to a worker", msg: &relaymsg.Chunk{Job: v, To: h.conn, Seq: 1, Deltas: deltas("INJECTED"), Ticket: own.Ticket}},
		{what: "done with its own ticket", msg: &relaymsg.Done{Job: v, To: own.ReplyTo, Seq: 1, FinishReason: "stop", Ticket: own.Ticket,
			Receipt: h.sign(&relaymsg.Receipt{Job: v, Model: model, RequestSHA256: strings.Repeat("0", 64), OutputSHA256: strings.Repeat("0", 64)}, h.key)}},
		{what: "fail with its own ticket", msg: &relaymsg.Fail{Job: v, To: own.ReplyTo, Seq: 1, Code: "backend_error", Ticket: own.Ticket}},
		{what: "fail with a forged ticket", msg: &relaymsg.Fail{Job: v, To: own.ReplyTo, Seq: 1, Code: "backend_error", Ticket: forgedTicket()}},
	}
	for _, fg := range forgeries {
		b := fg.raw
		if b == nil {
			var err error
			if b, err = relaymsg.Encode(fg.msg); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.sendRaw(b); err != nil {
			t.Fatalf("%s: send: %v", fg.what, err)
		}
		expectRefused(t, h, fg.what)
	}
	f.finish(t)
	if j := f.e.job(v); j.Worker == h.conn {
		t.Errorf("the victim job ended assigned to the forger")
	}
}

// TestOversizedChunkOwnJob: a worker's chunk for its own job that cannot be
// re-encoded under 128 KB cuts the worker off; its job moves to another
// worker or fails with a refund, and the honest worker's job in flight is
// untouched.
func TestOversizedChunkOwnJob(t *testing.T) {
	for _, p := range growingPayloads[1:] { // "<" is not escaped by the relay's encoder
		t.Run(p.name, func(t *testing.T) {
			e := newEnv(t, options{})
			user, honestAcct, mallory := e.newAccount("user", 1000), e.newAccount("honest", 0), e.newAccount("mallory", 0)
			gate := make(chan struct{})
			e.honestWorker(honestAcct, gated(gate, "Hello", " world"))
			a := e.start(user.apiKey, chatBody("honest job", true))
			aID := a.waitID(t) // the honest worker is busy with it
			h := e.hostileWorker(mallory)
			b := e.start(user.apiKey, chatBody("hostile job", true))
			jb := h.nextJob()
			if err := h.sendRaw(growingChunk(t, p, jb.Job, jb.ReplyTo, 0, jb.Ticket)); err != nil {
				t.Fatalf("send: %v", err)
			}
			if !h.waitClosed(10 * time.Second) {
				t.Errorf("the worker that sent an oversized chunk for its own job is still connected")
			}
			close(gate)
			if r := a.wait(t); !r.ok() || r.Content != "Hello world" {
				t.Errorf("the honest job: %s", r)
			}
			e.expectCharged(aID)
			rb := b.wait(t)
			jobB := e.settled(jb.Job)
			charged := int64(1)
			switch {
			case rb.ok():
				// Moved to the honest worker.
				if rb.Content != "Hello world" || jobB.State != "done" || jobB.Refunded || jobB.WorkerAccount != honestAcct.id {
					t.Errorf("the hostile worker's job: reply %s; job %+v; want the honest reply, charged, served by the honest worker", rb, jobB)
				}
				charged++
			default:
				t.Logf("the hostile worker's job failed: %s", rb)
				if jobB.State != "failed" || !jobB.Refunded {
					t.Errorf("the hostile worker's job: state %s, refunded %v; want failed with a refund", jobB.State, jobB.Refunded)
				}
			}
			e.expectCredits(user, 1000-charged*price)
			e.expectEarned(honestAcct, charged*earning)
			e.expectEarned(mallory, 0)
		})
	}
}

// TestEscapeHeavyReplyOwnJob: a worker serves its own job with text the
// gateway's client events escape six bytes for one (40 KiB of "<", which
// the relay forwards as it is), then ordinary text. The client gets the
// text exactly, the stream goes on after the big event, the worker's
// receipt (its hash over what it sent) matches what the gateway relayed,
// and the job is charged and paid once.
func TestEscapeHeavyReplyOwnJob(t *testing.T) {
	e := newEnv(t, options{})
	user, mallory := e.newAccount("user", 1000), e.newAccount("mallory", 0)
	h := e.hostileWorker(mallory)
	c := e.start(user.apiKey, chatBody("escape me", true))
	j := h.nextJob()
	big := growingPayloads[0].content(0)
	texts := []string{big, "<b>&\"\n\u2028", "ok"}
	h.serve(j, 3, texts...)
	if r, want := c.wait(t), strings.Join(texts, ""); !r.ok() || r.Content != want {
		t.Fatalf("reply: ok %v, %d bytes of content; want the %d bytes sent", r.ok(), len(r.Content), len(want))
	}
	e.expectCharged(j.Job)
	e.expectCredits(user, 1000-price)
	e.expectEarned(mallory, earning)
}
