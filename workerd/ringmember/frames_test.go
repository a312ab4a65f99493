package ringmember

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/backend/backendtest"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
	"github.com/c0mpute/c0mpute/workerd/speculate"
	"github.com/c0mpute/c0mpute/workerd/stagenet"
)

// peerHarness is a stage server under test with test peers on both
// sides, holding the plan's keys: up is the previous stage's connection
// to the server, down the server's connection to the next stage.
type peerHarness struct {
	t     *testing.T // the test the harness lives for
	tr    *testRing
	srv   *Server
	stage int
	keys  map[int]ed25519.PrivateKey // by stage
	ln    *stagenet.Listener         // the next stage's listener
	up    *stagenet.Conn
	down  *stagenet.Conn
	whole *engine.Model
}

// newPeerHarness serves stage `stage` of an n-stage ring of the model in
// this process; the test plays its neighbours.
func newPeerHarness(t *testing.T, m *testModel, n, stage int) *peerHarness {
	t.Helper()
	return newPeerHarnessWith(t, m, n, stage, planContext)
}

// newPeerHarnessWith is newPeerHarness with the assignment's context.
func newPeerHarnessWith(t *testing.T, m *testModel, n, stage, ctxTokens int) *peerHarness {
	t.Helper()
	keys := memberKeys(m.name+"-peers", n)
	plan, hash := planFor(t, m, keys)
	tr := &testRing{m: m, plan: plan, hash: hash, keys: keys, ctxTokens: ctxTokens}
	h := &peerHarness{t: t, tr: tr, stage: stage, keys: map[int]ed25519.PrivateKey{}}
	for s := range n {
		pm, _ := plan.Primary(s)
		h.keys[s] = keyOf(keys, pm.Node)
	}
	prev, next := h.keys[(stage+n-1)%n], h.keys[(stage+1)%n]
	me := shard.KeyOf(h.keys[stage])
	var err error
	h.ln, err = stagenet.Listen("127.0.0.1:0", next, func(k shard.PublicKey) bool { return k == me })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.ln.Close() })
	h.srv, err = NewServer(h.keys[stage], "127.0.0.1:0", testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.srv.Close() })
	if stage == 0 {
		tr.driver = h.srv
	}
	peers := map[shard.PublicKey]string{shard.KeyOf(next): h.ln.Addr().String(), me: h.srv.Addr().String()}
	if err := h.srv.Serve(tr.assignment(t, stage, peers)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if h.down, err = h.ln.Accept(ctx); err != nil { // the server dials its next stage at Serve
		t.Fatal(err)
	}
	t.Cleanup(func() { h.down.Close() })
	h.dialUp(t, prev)
	f, err := gguf.Open(m.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if h.whole, err = engine.Load(f, 1); err != nil {
		t.Fatal(err)
	}
	return h
}

// dialUp connects as the previous stage, allowed to send more than the
// server takes.
func (h *peerHarness) dialUp(t *testing.T, prev ed25519.PrivateKey) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	var err error
	h.up, err = stagenet.Dial(ctx, h.srv.Addr().String(), prev, h.srv.Key(), stagenet.WithMaxPayload(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	up := h.up
	h.t.Cleanup(func() { up.Close() })
}

func (h *peerHarness) send(t *testing.T, f *stagenet.Frame) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := h.up.Send(ctx, f); err != nil {
		t.Fatal(err)
	}
}

// expect reads the server's next frame to its next stage and requires
// its kind and job.
func (h *peerHarness) expect(t *testing.T, kind stagenet.Kind, job string) stagenet.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	f, err := h.down.Recv(ctx)
	if err != nil {
		t.Fatalf("waiting for a %s frame of job %q: %v", kind, job, err)
	}
	if f.Kind != kind || f.Job != job {
		t.Fatalf("got a %s frame of job %q (payload %q), want a %s frame of job %q", f.Kind, f.Job, truncateForLog(f.Payload), kind, job)
	}
	return f
}

func truncateForLog(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}

// openFrame is a valid Open of job for the harness's plan.
func (h *peerHarness) openFrame(t *testing.T, job string) *stagenet.Frame {
	t.Helper()
	o := openMsg{Job: job, Plan: h.tr.hash, Nonce: relaymsg.RingNonce(job), Prompt: 3}
	b, err := json.Marshal(&o)
	if err != nil {
		t.Fatal(err)
	}
	return &stagenet.Frame{Kind: stagenet.KindOpen, Job: job, Payload: b}
}

// hidden is a well-formed batch of hidden states at pos (embeddings:
// what a stage checks is their shape and position, not their history).
func (h *peerHarness) hidden(t *testing.T, job string, step uint32, pos, n int) *stagenet.Frame {
	t.Helper()
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(testmodel.EOSID + 1 + i)
	}
	hs, err := h.whole.Embed(toks, pos)
	if err != nil {
		t.Fatal(err)
	}
	wire, err := engine.EncodeHidden(hs, engine.F32)
	if err != nil {
		t.Fatal(err)
	}
	return &stagenet.Frame{Kind: stagenet.KindHidden, Job: job, Step: step, Pos: uint32(pos), Payload: wire}
}

// verifyFrame is a well-formed verify frame at pos: the embeddings of a
// last token and the drafts after it.
func (h *peerHarness) verifyFrame(t *testing.T, job string, step uint32, pos int, drafts []int32) *stagenet.Frame {
	t.Helper()
	hs, err := h.whole.Embed(append([]int32{testmodel.EOSID + 1}, drafts...), pos)
	if err != nil {
		t.Fatal(err)
	}
	wire, err := engine.EncodeHidden(hs, engine.F32)
	if err != nil {
		t.Fatal(err)
	}
	return &stagenet.Frame{Kind: stagenet.KindVerify, Job: job, Step: step, Pos: uint32(pos), Payload: encodeVerify(drafts, wire)}
}

// rawHidden encodes hidden states of any shape.
func rawHidden(t *testing.T, pos, tokens, dim int, fill float32) []byte {
	t.Helper()
	hs := &engine.Hidden{Pos: pos, Tokens: tokens, Dim: dim, Data: make([]float32, tokens*dim)}
	for i := range hs.Data {
		hs.Data[i] = fill
	}
	b, err := engine.EncodeHidden(hs, engine.F32)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStageRefusesBadFrames: frames that break the protocol, sent by a
// connected previous stage, end their job — the failure is passed on to
// the next stage — and the stage goes on serving the next job.
func TestStageRefusesBadFrames(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	h := newPeerHarness(t, m, 3, 1)
	dim := h.whole.Config().Embd
	prev := h.keys[0]
	cases := []struct {
		name string
		// run sends the case's frames for job and reads what is passed on
		// before the failure; cut says the server drops the connection.
		run func(t *testing.T, job string)
		cut bool
	}{
		{"wrong job id", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, h.hidden(t, "another-job", 1, 0, 2))
		}, false},
		{"replayed step", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, h.hidden(t, job, 1, 0, 2))
			h.expect(t, stagenet.KindHidden, job)
			h.send(t, h.hidden(t, job, 1, 2, 1))
		}, false},
		{"step going back", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, h.hidden(t, job, 5, 0, 2))
			h.expect(t, stagenet.KindHidden, job)
			h.send(t, h.hidden(t, job, 4, 2, 1))
		}, false},
		{"position past the cache", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, h.hidden(t, job, 1, 3, 1))
		}, false},
		{"frame position disagrees with the states'", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			f := h.hidden(t, job, 1, 2, 1)
			f.Pos = 0
			h.send(t, f)
		}, false},
		{"garbled payload", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, &stagenet.Frame{Kind: stagenet.KindHidden, Job: job, Step: 1, Payload: []byte("C0HS not hidden states at all")})
		}, false},
		{"non-finite states", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, &stagenet.Frame{Kind: stagenet.KindHidden, Job: job, Step: 1, Payload: rawHidden(t, 0, 1, dim, float32(math.Inf(1)))})
		}, false},
		{"wrong width", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, &stagenet.Frame{Kind: stagenet.KindHidden, Job: job, Step: 1, Payload: rawHidden(t, 0, 1, dim/2, 0.5)})
		}, false},
		{"more positions than a chunk", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, &stagenet.Frame{Kind: stagenet.KindHidden, Job: job, Step: 1, Payload: rawHidden(t, 0, MaxChunk+1, dim, 0.5)})
		}, false},
		{"payload over the connection's limit", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			// Refused by the stage connection before it is read: the
			// connection is cut, which ends the job it carried.
			_ = h.up.Send(context.Background(), &stagenet.Frame{Kind: stagenet.KindHidden, Job: job, Step: 1, Payload: make([]byte, maxPayload(maxModelDim)+1)})
		}, true},
		{"tokens frame at a middle stage", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, &stagenet.Frame{Kind: stagenet.KindTokens, Job: job, Step: 1, Payload: encodeTokens([]int32{5})})
		}, false},
		{"truncate past the cache", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, h.hidden(t, job, 1, 0, 2))
			h.expect(t, stagenet.KindHidden, job)
			h.send(t, &stagenet.Frame{Kind: stagenet.KindTruncate, Job: job, Step: 2, Pos: 3})
		}, false},
		{"close at the wrong position", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, h.hidden(t, job, 1, 0, 2))
			h.expect(t, stagenet.KindHidden, job)
			h.send(t, &stagenet.Frame{Kind: stagenet.KindClose, Job: job, Step: 2, Pos: 1, Payload: []byte("[]")})
		}, false},
		{"close with garbled receipts", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, h.hidden(t, job, 1, 0, 2))
			h.expect(t, stagenet.KindHidden, job)
			h.send(t, &stagenet.Frame{Kind: stagenet.KindClose, Job: job, Step: 2, Pos: 2, Payload: []byte(`[{"job":1}]`)})
		}, false},
		{"verify with no drafts", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, h.hidden(t, job, 1, 0, 3))
			h.expect(t, stagenet.KindHidden, job)
			f := h.verifyFrame(t, job, 2, 3, nil)
			h.send(t, f)
		}, false},
		{"verify of more drafts than a loop verifies", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, h.hidden(t, job, 1, 0, 3))
			h.expect(t, stagenet.KindHidden, job)
			h.send(t, h.verifyFrame(t, job, 2, 3, make([]int32, speculate.MaxGamma+1)))
		}, false},
		{"verify of a draft outside the vocabulary", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, h.hidden(t, job, 1, 0, 3))
			h.expect(t, stagenet.KindHidden, job)
			f := h.verifyFrame(t, job, 2, 3, []int32{5, 6})
			binary.LittleEndian.PutUint32(f.Payload[8:], uint32(h.whole.Config().Vocab))
			h.send(t, f)
		}, false},
		{"verify whose rows are not its drafts and one", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, h.hidden(t, job, 1, 0, 3))
			h.expect(t, stagenet.KindHidden, job)
			f := h.verifyFrame(t, job, 2, 3, []int32{5, 6})
			f.Payload = encodeVerify([]int32{5, 6, 7}, f.Payload[12:])
			h.send(t, f)
		}, false},
		{"verify inside the prompt", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, h.hidden(t, job, 1, 0, 2))
			h.expect(t, stagenet.KindHidden, job)
			h.send(t, h.verifyFrame(t, job, 2, 2, []int32{5}))
		}, false},
		{"rewind past a verify's first row", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, h.hidden(t, job, 1, 0, 3))
			h.expect(t, stagenet.KindHidden, job)
			h.send(t, h.verifyFrame(t, job, 2, 3, []int32{5, 6}))
			h.expect(t, stagenet.KindVerify, job)
			h.send(t, h.hidden(t, job, 3, 3, 1))
		}, false},
		{"rewind with no verify before", func(t *testing.T, job string) {
			h.send(t, h.openFrame(t, job))
			h.expect(t, stagenet.KindOpen, job)
			h.send(t, h.hidden(t, job, 1, 0, 3))
			h.expect(t, stagenet.KindHidden, job)
			h.send(t, h.hidden(t, job, 2, 2, 1))
		}, false},
		{"open with an unknown field", func(t *testing.T, job string) {
			h.send(t, &stagenet.Frame{Kind: stagenet.KindOpen, Job: job, Payload: []byte(`{"job":"` + job + `","prompt":3,"text":"x"}`)})
		}, false},
		{"open naming another job", func(t *testing.T, job string) {
			f := h.openFrame(t, "someone-else")
			f.Job = job
			h.send(t, f)
		}, false},
		{"open for another plan", func(t *testing.T, job string) {
			o := openMsg{Job: job, Plan: shard.Hash{1}, Prompt: 3}
			b, _ := json.Marshal(&o)
			h.send(t, &stagenet.Frame{Kind: stagenet.KindOpen, Job: job, Payload: b})
		}, false},
		{"open over its size bound", func(t *testing.T, job string) {
			h.send(t, &stagenet.Frame{Kind: stagenet.KindOpen, Job: job, Payload: []byte(`{"job":"` + job + `","x":"` + strings.Repeat("a", maxOpenBytes) + `"}`)})
		}, false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			job := "bad-" + strings.ReplaceAll(c.name, " ", "-")
			c.run(t, job)
			f := h.expect(t, stagenet.KindError, job)
			t.Logf("passed on: %s", f.Payload)
			if c.cut {
				h.dialUp(t, prev)
			}
			// The stage serves the next job: open, states, and a close
			// that comes back with its signed receipt.
			next := "good-" + string(rune('a'+i))
			h.send(t, h.openFrame(t, next))
			h.expect(t, stagenet.KindOpen, next)
			h.send(t, h.hidden(t, next, 1, 0, 3))
			if g := h.expect(t, stagenet.KindHidden, next); g.Step != 1 || g.Pos != 0 {
				t.Fatalf("passed on step %d pos %d, want 1 and 0", g.Step, g.Pos)
			}
			h.send(t, &stagenet.Frame{Kind: stagenet.KindClose, Job: next, Step: 2, Pos: 3, Payload: []byte("[]")})
			cl := h.expect(t, stagenet.KindClose, next)
			rs, err := shard.DecodeReceipts(cl.Payload)
			if err != nil || len(rs) != 1 {
				t.Fatalf("close carries %d receipts, %v", len(rs), err)
			}
			if err := rs[0].Check(); err != nil || rs[0].Stage != 1 || rs[0].TokenEnd != 3 || rs[0].Job != next {
				t.Fatalf("receipt %+v: %v", rs[0], err)
			}
		})
	}
}

// TestVerifyRewind: a middle stage runs a verify frame's rows and passes
// its drafts on with its states; the next frame's position rolls its
// cache back to the rows the last stage accepted (here one of two
// drafts); its receipt counts every row it ran.
func TestVerifyRewind(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	h := newPeerHarness(t, m, 3, 1)
	job := "verify-rewind"
	h.send(t, h.openFrame(t, job))
	h.expect(t, stagenet.KindOpen, job)
	h.send(t, h.hidden(t, job, 1, 0, 3))
	h.expect(t, stagenet.KindHidden, job)
	drafts := []int32{5, 6}
	h.send(t, h.verifyFrame(t, job, 2, 3, drafts))
	v := h.expect(t, stagenet.KindVerify, job)
	got, wire, err := decodeVerify(v.Payload, h.whole.Config().Vocab)
	if err != nil || v.Pos != 3 || v.Step != 2 || len(got) != 2 || got[0] != 5 || got[1] != 6 {
		t.Fatalf("passed on pos %d step %d drafts %v: %v", v.Pos, v.Step, got, err)
	}
	if hs, err := engine.DecodeHidden(wire); err != nil || hs.Tokens != 3 || hs.Pos != 3 {
		t.Fatalf("passed on states %v: %v", hs, err)
	}
	// One draft accepted: the next token is at position 5.
	h.send(t, h.hidden(t, job, 3, 5, 1))
	if f := h.expect(t, stagenet.KindHidden, job); f.Pos != 5 {
		t.Fatalf("passed on a step at %d, want 5", f.Pos)
	}
	h.send(t, &stagenet.Frame{Kind: stagenet.KindClose, Job: job, Step: 4, Pos: 6, Payload: []byte("[]")})
	cl := h.expect(t, stagenet.KindClose, job)
	rs, err := shard.DecodeReceipts(cl.Payload)
	if err != nil || len(rs) != 1 {
		t.Fatalf("close carries %d receipts, %v", len(rs), err)
	}
	if rs[0].TokenEnd != 7 {
		t.Fatalf("the receipt covers %d positions, want the 7 rows run (3 prompt, 3 verify, 1 step)", rs[0].TokenEnd)
	}
}

// TestDriverRefusesBadAnswers: answers from the last stage that break the
// protocol fail the job at the driver with a clear error, the driver
// tells the ring, and it runs the next job.
func TestDriverRefusesBadAnswers(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	h := newPeerHarness(t, m, 2, 0)
	vocab := h.whole.Config().Vocab
	cases := []struct {
		name   string
		answer func(job string, promptLen int) *stagenet.Frame
		want   string
	}{
		{"token outside the vocabulary", func(job string, n int) *stagenet.Frame {
			return &stagenet.Frame{Kind: stagenet.KindTokens, Job: job, Step: 1, Pos: uint32(n), Payload: encodeTokens([]int32{int32(vocab)})}
		}, "outside the vocabulary"},
		{"two tokens for one step", func(job string, n int) *stagenet.Frame {
			return &stagenet.Frame{Kind: stagenet.KindTokens, Job: job, Step: 1, Pos: uint32(n), Payload: encodeTokens([]int32{5, 6})}
		}, "answered with 2 tokens"},
		{"no token for the prompt's last chunk", func(job string, n int) *stagenet.Frame {
			return &stagenet.Frame{Kind: stagenet.KindTokens, Job: job, Step: 1, Pos: uint32(n)}
		}, "answered with 0 tokens"},
		{"another step", func(job string, n int) *stagenet.Frame {
			return &stagenet.Frame{Kind: stagenet.KindTokens, Job: job, Step: 2, Pos: uint32(n), Payload: encodeTokens([]int32{5})}
		}, "step 2"},
		{"another position", func(job string, n int) *stagenet.Frame {
			return &stagenet.Frame{Kind: stagenet.KindTokens, Job: job, Step: 1, Pos: uint32(n + 1), Payload: encodeTokens([]int32{5})}
		}, "position"},
		{"another job", func(job string, n int) *stagenet.Frame {
			return &stagenet.Frame{Kind: stagenet.KindTokens, Job: "not-" + job, Step: 1, Pos: uint32(n), Payload: encodeTokens([]int32{5})}
		}, "while job"},
		{"hidden states back", func(job string, n int) *stagenet.Frame {
			return &stagenet.Frame{Kind: stagenet.KindHidden, Job: job, Step: 1, Pos: uint32(n), Payload: rawHidden(t, 0, 1, h.whole.Config().Embd, 1)}
		}, "hidden frame came back"},
		{"a failure on the ring", func(job string, n int) *stagenet.Frame {
			return &stagenet.Frame{Kind: stagenet.KindError, Job: job, Payload: []byte("stage 1 is out of memory")}
		}, ErrStageFailed.Error()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			job, _ := h.tr.ringJob(t)
			errc := make(chan error, 1)
			go func() {
				_, _, err := h.srv.Chat(context.Background(), job, greedy(prompts[0], 8, false), func(oaiwire.Delta) error { return nil })
				errc <- err
			}()
			of := h.expect(t, stagenet.KindOpen, job.ID)
			o, err := decodeOpen(&of)
			if err != nil || o.Plan != h.tr.hash || o.Nonce != job.Ring.Nonce || o.Sampling.Temperature != 0 {
				t.Fatalf("open %+v: %v", o, err)
			}
			hf := h.expect(t, stagenet.KindHidden, job.ID)
			hs, err := engine.DecodeHidden(hf.Payload)
			if err != nil || hf.Step != 1 || hs.Pos != 0 || hs.Tokens != o.Prompt {
				t.Fatalf("first step: step %d, %v, %v", hf.Step, hs, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			h.send(t, c.answer(job.ID, hs.Tokens)) // as the last stage
			select {
			case err = <-errc:
			case <-ctx.Done():
				t.Fatal("the chat did not end")
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("chat error %v, want one mentioning %q", err, c.want)
			}
			if strings.Contains(err.Error(), "out of memory") {
				t.Fatalf("chat error %v echoes the error frame's text", err)
			}
			h.expect(t, stagenet.KindError, job.ID) // the driver drops the job around the ring
		})
	}
}

// TestDriverRefusesBadVerifyAnswers: a last stage's answer to a verify
// step that claims a token the driver did not draft, answers at another
// length than its tokens say, or carries no token or more than the rows
// fails the job at the driver, which tells the ring.
func TestDriverRefusesBadVerifyAnswers(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	h := newPeerHarness(t, m, 2, 0)
	vocab := h.whole.Config().Vocab
	const prediction = "the cat sat on the mat and the dog ran to the big red house"
	predicted := h.srv.current().text.Tokenize(prediction)
	answer := func(job string, step uint32, pos int, ids []int32) *stagenet.Frame {
		return &stagenet.Frame{Kind: stagenet.KindTokens, Job: job, Step: step, Pos: uint32(pos), Payload: encodeTokens(ids)}
	}
	cases := []struct {
		name   string
		answer func(job string, v stagenet.Frame, drafts []int32) *stagenet.Frame
		want   string
	}{
		{"a token accepted that is not the draft", func(job string, v stagenet.Frame, drafts []int32) *stagenet.Frame {
			return answer(job, v.Step, int(v.Pos)+2, []int32{drafts[0] ^ 1, 5})
		}, "which is not the draft"},
		{"an answer at another length", func(job string, v stagenet.Frame, drafts []int32) *stagenet.Frame {
			return answer(job, v.Step, int(v.Pos)+2, []int32{5})
		}, "tokens answered at position"},
		{"no token", func(job string, v stagenet.Frame, drafts []int32) *stagenet.Frame {
			return answer(job, v.Step, int(v.Pos), nil)
		}, "no token"},
		{"more tokens than rows", func(job string, v stagenet.Frame, drafts []int32) *stagenet.Frame {
			ids := append(append([]int32{}, drafts...), 5, 6)
			return answer(job, v.Step, int(v.Pos)+len(ids), ids)
		}, "ids, at most"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			job, _ := h.tr.ringJob(t)
			req := greedy(prompts[0], 8, false)
			req.Prediction = &oaiwire.Prediction{Type: "content", Content: oaiwire.Content{Text: prediction}}
			errc := make(chan error, 1)
			go func() {
				_, _, err := h.srv.Chat(context.Background(), job, req, func(oaiwire.Delta) error { return nil })
				errc <- err
			}()
			h.expect(t, stagenet.KindOpen, job.ID)
			hf := h.expect(t, stagenet.KindHidden, job.ID)
			hs, err := engine.DecodeHidden(hf.Payload)
			if err != nil {
				t.Fatal(err)
			}
			// The prompt's token is the prediction's first: the driver
			// drafts the prediction's next tokens.
			h.send(t, answer(job.ID, hf.Step, hs.Tokens, predicted[:1]))
			v := h.expect(t, stagenet.KindVerify, job.ID)
			drafts, _, err := decodeVerify(v.Payload, vocab)
			if err != nil || int(v.Pos) != hs.Tokens || len(drafts) == 0 || drafts[0] != predicted[1] {
				t.Fatalf("verify at %d with drafts %v (prediction %v): %v", v.Pos, drafts, predicted, err)
			}
			h.send(t, c.answer(job.ID, v, drafts))
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			select {
			case err = <-errc:
			case <-ctx.Done():
				t.Fatal("the chat did not end")
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("chat error %v, want one mentioning %q", err, c.want)
			}
			h.expect(t, stagenet.KindError, job.ID)
		})
	}
}

// TestOutsiderCannotConnect: a key that is not in the plan cannot connect
// to a stage listener (nor probe it) unless Allow names it; a member's
// key can.
func TestOutsiderCannotConnect(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	h := newPeerHarness(t, m, 3, 1)
	outsiderKey := testKey("outsider")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	c, err := stagenet.Dial(ctx, h.srv.Addr().String(), outsiderKey, h.srv.Key())
	if err == nil {
		// TLS 1.3: the client's handshake ends before the server checks
		// its certificate; the refusal arrives as the first read.
		_ = c.Send(ctx, h.openFrame(t, "intruder"))
		_, err = c.Recv(ctx)
		c.Close()
	}
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an outsider's connection was not refused: %v", err)
	}
	outsider, err := NewServer(outsiderKey, "127.0.0.1:0", testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer outsider.Close()
	if _, err := outsider.Probe(ctx, h.srv.Key(), h.srv.Addr().String()); err == nil {
		t.Fatal("an outsider probed a stage listener")
	}
	member, err := NewServer(h.keys[2], "127.0.0.1:0", testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	if d, err := member.Probe(ctx, h.srv.Key(), h.srv.Addr().String()); err != nil || d <= 0 {
		t.Fatalf("a member's probe: %v, %v", d, err)
	}
	h.srv.Allow(shard.KeyOf(outsiderKey))
	if d, err := outsider.Probe(ctx, h.srv.Key(), h.srv.Addr().String()); err != nil || d <= 0 {
		t.Fatalf("an allowed probe: %v, %v", d, err)
	}
	h.srv.Allow()
	if _, err := outsider.Probe(ctx, h.srv.Key(), h.srv.Addr().String()); err == nil {
		t.Fatal("a probe after Allow() was cleared")
	}
	// The outsider got no frame through: the stage still serves its own
	// previous stage, and only it.
	h.send(t, h.openFrame(t, "after"))
	h.expect(t, stagenet.KindOpen, "after")
}

// TestTruncate: rolling every stage's cache back and running the same
// tokens again gives the same greedy tokens; the receipts over a job with
// truncations still settle.
func TestTruncate(t *testing.T) {
	m := loadModel(t, "qwen2-q4_k", modelOptions("qwen2", testmodel.Q4_K))
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d-stages", n), func(t *testing.T) {
			tr := startInProcess(t, m, n)
			r := tr.driver.current()
			prompt, params, err := r.text.Request(greedy(prompts[0], 8, false))
			if err != nil {
				t.Fatal(err)
			}
			job, at := tr.ringJob(t)
			ctx := context.Background()
			d, err := r.openJob(ctx, job.ID, job.Ring, len(prompt), params)
			if err != nil {
				t.Fatal(err)
			}
			next := func(tok ...int32) int32 {
				t.Helper()
				id, err := d.Next(d.ctx, tok)
				if err != nil {
					t.Fatal(err)
				}
				return id
			}
			t1 := next(prompt...)
			t2 := next(t1)
			t3 := next(t2)
			if err := d.truncate(ctx, len(prompt)+1); err != nil { // keep the prompt and t1
				t.Fatal(err)
			}
			if again := next(t2); again != t3 {
				t.Fatalf("after truncating to %d: %d, before %d", len(prompt)+1, again, t3)
			}
			if err := d.truncate(ctx, len(prompt)); err != nil {
				t.Fatal(err)
			}
			if again := next(t1); again != t2 {
				t.Fatalf("after truncating to the prompt: %d, before %d", again, t2)
			}
			if err := d.truncate(ctx, len(prompt)+5); err == nil {
				t.Fatal("truncated past the cache")
			}
			done, err := d.finish(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := int64(len(prompt) + 4); done.TokenEnd != want {
				t.Errorf("token end %d, want %d (every position run, truncations notwithstanding)", done.TokenEnd, want)
			}
			c := chatResult{done: done, job: job, at: at}
			c.Result.Usage.PromptTokens, c.Result.Usage.CompletionTokens = int64(len(prompt)), 5 // TokenEnd + 1
			c.Result.Usage.CompletionTokensDetails = &oaiwire.CompletionTokensDetails{}
			tr.verify(t, c)
		})
	}
}

// TestWireGolden pins the Open payload, the tokens payload and the chain
// hash, which other members (and the gateway, through receipts) must
// compute alike.
func TestWireGolden(t *testing.T) {
	o := openMsg{Job: "job-1", Plan: shard.Hash{1, 2, 3}, Nonce: shard.Hash{4, 5, 6}, Slot: 42, Blockhash: shard.Blockhash{7}, Prompt: 17,
		Sampling: samplingWire{Temperature: 0.8, TopP: 0.95, Seed: 7}}
	open, err := json.Marshal(&o)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeOpen(&stagenet.Frame{Kind: stagenet.KindOpen, Job: "job-1", Payload: open})
	if err != nil || back != o {
		t.Fatalf("open round trip: %+v, %v", back, err)
	}
	var c chain
	c.add(stagenet.KindTokens, 1, 0, sha256Of(encodeTokens([]int32{1, 2, 3})))
	c.add(stagenet.KindHidden, 2, 3, sha256Of([]byte("states")))
	c.add(stagenet.KindTruncate, 3, 2, sha256Of(nil))
	backendtest.Golden(t, "wire.golden.json", map[string]any{
		"open":   json.RawMessage(open),
		"tokens": hex.EncodeToString(encodeTokens([]int32{1, 2, 70000})),
		"chain":  shard.Hash(c),
	})
}

// FuzzPeerPayloads: the payload decoders never panic on a peer's bytes,
// and what they accept is within their bounds.
func FuzzPeerPayloads(f *testing.F) {
	f.Add([]byte(`{"job":"j","plan":"` + strings.Repeat("0", 64) + `","nonce":"` + strings.Repeat("0", 64) + `","slot":1,"blockhash":"11111111111111111111111111111111","prompt":3,"sampling":{"temperature":0.5,"top_p":1,"seed":9}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte{1, 0, 0, 0, 2, 0, 0, 0})
	f.Add([]byte(`{"job":"j","prompt":0}`))
	f.Add(encodeVerify([]int32{3, 99}, []byte("C0HS")))
	plan := &shard.Plan{Stages: 3, Members: nil}
	f.Fuzz(func(t *testing.T, b []byte) {
		if o, err := decodeOpen(&stagenet.Frame{Kind: stagenet.KindOpen, Job: "j", Payload: b}); err == nil {
			if o.Job != "j" || o.Prompt < 1 || len(b) > maxOpenBytes {
				t.Fatalf("accepted open %+v", o)
			}
		}
		if ids, err := decodeTokens(b, 2, 100); err == nil {
			if len(ids) > 2 {
				t.Fatalf("%d ids", len(ids))
			}
			for _, id := range ids {
				if id < 0 || id >= 100 {
					t.Fatalf("id %d", id)
				}
			}
		}
		if rs, err := decodeClose(b, "j", plan, 0); err == nil && len(rs) != 0 {
			t.Fatalf("%d receipts", len(rs))
		}
		if drafts, wire, err := decodeVerify(b, 100); err == nil {
			if len(drafts) == 0 || len(drafts) > speculate.MaxGamma || 4+4*len(drafts)+len(wire) != len(b) {
				t.Fatalf("verify: %d drafts and %d bytes of states from %d bytes", len(drafts), len(wire), len(b))
			}
			for _, id := range drafts {
				if id < 0 || id >= 100 {
					t.Fatalf("draft id %d", id)
				}
			}
		}
	})
}

func sha256Of(b []byte) [32]byte { return sha256.Sum256(b) }
