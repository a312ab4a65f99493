package attack_test

// Signed receipts: a worker is paid only for a done whose receipt is
// signed by the identity it connected with and matches, hash for hash,
// the request the gateway sent and the reply it relayed. A worker that
// ends a job without one — none, another key's, another reply's, another
// job's — gets nothing for it and is cut off; the job is refunded once.

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/mr-tron/base58"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/store"
)

// streamed is what the hostile worker sends of every job before its done.
var streamed = []string{"Hello", " world"}

// receiptCase is one way to end a job without a valid receipt: end sends
// the done (or what stands for it) after the worker streamed the job.
type receiptCase struct {
	stream bool
	// served is a job the worker serves honestly first (charged, paid),
	// so that end has a valid receipt of another job to hand.
	served bool
	// why is the job's fail reason: the gateway's rejection, or the
	// worker lost (a done the relay cannot read cuts the worker off).
	why string
	end func(t *testing.T, h *hostile, j *relaymsg.Job, earlier *relaymsg.Receipt) error
}

// runReceiptCase plays c and checks the outcome: the client got the text
// and one error instead of the reply's end (a 502 without streaming), the
// job failed and was refunded once, the worker earned nothing for it and
// was cut off: its connection closed, its record gone.
func runReceiptCase(t *testing.T, c receiptCase) {
	e := newEnv(t, options{})
	user, mallory := e.newAccount("user", 1000), e.newAccount("mallory", 0)
	h := e.hostileWorker(mallory)
	var earlier *relaymsg.Receipt
	charged := int64(0)
	if c.served {
		first := e.start(user.apiKey, chatBody("first", true))
		j := h.nextJob()
		h.serve(j, int64(len(streamed)), streamed...)
		if r := first.wait(t); !r.ok() || r.Content != strings.Join(streamed, "") {
			t.Fatalf("the honest first job: %s", r)
		}
		e.expectCharged(j.Job)
		earlier = h.receipt(j, int64(len(streamed)), int64(len(streamed)))
		charged++
	}

	call := e.start(user.apiKey, chatBody("second", c.stream))
	j := h.nextJob()
	for i, s := range streamed {
		if err := h.chunk(j, int64(i), s); err != nil {
			t.Fatalf("chunk: %v", err)
		}
	}
	if err := c.end(t, h, j, earlier); err != nil {
		t.Fatalf("end: %v", err)
	}
	r := call.wait(t)
	if c.stream {
		if r.Err != nil || r.Status != http.StatusOK || r.Content != strings.Join(streamed, "") ||
			len(r.Errors) != 1 || r.Finish != "" || r.Done {
			t.Errorf("stream: %s; want the text, then one error event, no finish and no [DONE]", r)
		}
	} else if r.Status != http.StatusBadGateway || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], `"receipt_rejected"`) {
		t.Errorf("reply: %s; want 502 receipt_rejected", r)
	}
	for _, doc := range r.Errors {
		var env struct {
			Error struct{ Message, Type, Code string } `json:"error"`
		}
		body := doc
		if c.stream {
			body = `{"error":` + doc + `}`
		}
		if err := json.Unmarshal([]byte(body), &env); err != nil || env.Error.Message == "" || env.Error.Type == "" {
			t.Errorf("error %q is not OpenAI's shape: %v", doc, err)
		}
		if strings.Contains(env.Error.Message, "Hello") {
			t.Errorf("the error quotes the reply: %q", doc)
		}
	}
	job := e.expectRefunded(j.Job)
	if job.FailReason != c.why {
		t.Errorf("job failed as %q, want %q", job.FailReason, c.why)
	}
	if _, err := e.store.GetReceipt(context.Background(), j.Job); err == nil {
		t.Error("a receipt was kept for the rejected job")
	}
	if !h.waitClosed(waitLimit) {
		t.Error("the worker is still connected")
	}
	e.waitFor("the worker's record to go", func() bool {
		return !slices.ContainsFunc(e.workersOf(mallory), func(w store.Worker) bool { return w.Conn == h.conn })
	})
	e.expectCredits(user, 1000-charged*price)
	e.expectEarned(mallory, charged*earning)
}

// TestDoneWithoutReceipt: a done with no receipt is refused by the relay,
// which cuts the sender off (a job's last message it cannot read could
// end no job); its disconnect tells the listener, which ends the job: the
// client already has the text, so one error event and a refund.
func TestDoneWithoutReceipt(t *testing.T) {
	runReceiptCase(t, receiptCase{stream: true, why: "worker_lost",
		end: func(t *testing.T, h *hostile, j *relaymsg.Job, _ *relaymsg.Receipt) error {
			return h.doneWith(j, int64(len(streamed)), 2, nil)
		}})
}

// TestReceiptSignedByAnotherKey: a receipt valid in itself but not signed
// by the identity the worker connected with — a receipt of another key's,
// naming that key, and one naming the worker's own key but signed by
// another.
func TestReceiptSignedByAnotherKey(t *testing.T) {
	_, other, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("naming the other key", func(t *testing.T) {
		runReceiptCase(t, receiptCase{stream: true, why: "receipt_rejected",
			end: func(t *testing.T, h *hostile, j *relaymsg.Job, _ *relaymsg.Receipt) error {
				r := h.receipt(j, int64(len(streamed)), 2)
				return h.doneWith(j, int64(len(streamed)), 2, h.sign(r, other))
			}})
	})
	t.Run("naming its own key", func(t *testing.T) {
		runReceiptCase(t, receiptCase{stream: true, why: "receipt_rejected",
			end: func(t *testing.T, h *hostile, j *relaymsg.Job, _ *relaymsg.Receipt) error {
				r := h.sign(h.receipt(j, int64(len(streamed)), 2), other)
				r.Worker = base58.Encode(h.key.Public().(ed25519.PublicKey))
				if relaymsg.VerifyReceipt(r) == nil {
					t.Fatal("a receipt signed by another key verifies under the worker's")
				}
				return h.doneWith(j, int64(len(streamed)), 2, r)
			}})
	})
}

// TestReceiptOutputMismatch: a receipt signed by the right key whose output
// hash is not the hash of what the worker streamed (it signs for a reply
// it did not send), streamed and not.
func TestReceiptOutputMismatch(t *testing.T) {
	lie := func(t *testing.T, h *hostile, j *relaymsg.Job, _ *relaymsg.Receipt) error {
		var out relaymsg.OutputHasher
		for _, s := range []string{"Hello", " there"} {
			out.Add(oaiwire.Delta{Content: s})
		}
		r := h.receipt(j, int64(len(streamed)), 2)
		r.OutputSHA256, r.Deltas = out.Sum(), out.Deltas()
		return h.doneWith(j, int64(len(streamed)), 2, h.sign(r, h.key))
	}
	for _, stream := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "non-stream"}[stream], func(t *testing.T) {
			runReceiptCase(t, receiptCase{stream: stream, why: "receipt_rejected", end: lie})
		})
	}
	t.Run("delta count", func(t *testing.T) {
		runReceiptCase(t, receiptCase{stream: true, why: "receipt_rejected",
			end: func(t *testing.T, h *hostile, j *relaymsg.Job, _ *relaymsg.Receipt) error {
				r := h.receipt(j, int64(len(streamed)), 2)
				r.Deltas++
				return h.doneWith(j, int64(len(streamed)), 2, h.sign(r, h.key))
			}})
	})
}

// TestReceiptReplayed: the worker serves one job honestly (charged, paid)
// and ends the next, which it streamed the same text for, with the first
// job's receipt — valid, signed by its key, the same output hash.
func TestReceiptReplayed(t *testing.T) {
	runReceiptCase(t, receiptCase{stream: true, served: true, why: "receipt_rejected",
		end: func(t *testing.T, h *hostile, j *relaymsg.Job, earlier *relaymsg.Receipt) error {
			if earlier.OutputSHA256 != h.receipt(j, int64(len(streamed)), 2).OutputSHA256 {
				t.Fatal("the two jobs' replies differ: the replay would not be a replay")
			}
			return h.doneWith(j, int64(len(streamed)), 2, earlier)
		}})
}
