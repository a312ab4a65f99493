package api

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/dispatch"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/rings"
	"github.com/c0mpute/c0mpute/functions/rings/ringtest"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
)

// The C0mpute-Speculation header: on or off in any case and with space
// around it; anything else, an empty value or the header twice is a 400 in
// OpenAI's shape naming the header and its values.
func TestSpeculationHeader(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string // nil: no header
		off    bool
		bad    bool
	}{
		{name: "absent"},
		{name: "on", values: []string{"on"}},
		{name: "ON", values: []string{"ON"}},
		{name: "off", values: []string{"off"}, off: true},
		{name: "OFF", values: []string{"OFF"}, off: true},
		{name: "Off", values: []string{"Off"}, off: true},
		{name: "spaced off", values: []string{" off "}, off: true},
		{name: "tab and on", values: []string{"\ton"}},
		{name: "empty", values: []string{""}, bad: true},
		{name: "blank", values: []string{"  "}, bad: true},
		{name: "false", values: []string{"false"}, bad: true},
		{name: "zero", values: []string{"0"}, bad: true},
		{name: "disabled", values: []string{"disabled"}, bad: true},
		{name: "list", values: []string{"off, on"}, bad: true},
		{name: "twice the same", values: []string{"off", "off"}, bad: true},
		{name: "twice differing", values: []string{"on", "off"}, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.values {
				h.Add("c0mpute-speculation", v) // canonicalized as a client's would be
			}
			off, err := speculationOff(h)
			if !tc.bad {
				if err != nil || off != tc.off {
					t.Fatalf("speculationOff = %v, %v; want %v, nil", off, err, tc.off)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted %q (off %v)", tc.values, off)
			}
			w := httptest.NewRecorder()
			oaiwire.WriteError(w, err)
			var body struct {
				Error map[string]*string `json:"error"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			e := body.Error
			if w.Code != http.StatusBadRequest || len(e) != 4 || e["type"] == nil || *e["type"] != oaiwire.TypeInvalidRequest ||
				e["param"] == nil || *e["param"] != "C0mpute-Speculation" || e["code"] == nil || *e["code"] != "invalid_request" ||
				e["message"] == nil || !strings.Contains(*e["message"], `must be "on" or "off"`) {
				t.Fatalf("answer %d %s", w.Code, w.Body)
			}
		})
	}
}

// ringDetails keeps a ring driver's completion_tokens_details within what
// the gateway knows: accepted at most the completion tokens, rejected at
// most the signed token positions past the prompt, never negative; nil
// stays nil.
func TestRingDetails(t *testing.T) {
	usage := oaiwire.Usage{PromptTokens: 20, CompletionTokens: 30, TotalTokens: 50}
	done := &relaymsg.RingDone{TokenEnd: 60} // 40 positions past the prompt
	d := func(accepted, rejected int64) *oaiwire.CompletionTokensDetails {
		return &oaiwire.CompletionTokensDetails{AcceptedPredictionTokens: accepted, RejectedPredictionTokens: rejected}
	}
	for _, tc := range []struct {
		name  string
		claim *oaiwire.CompletionTokensDetails
		usage oaiwire.Usage
		done  *relaymsg.RingDone
		want  *oaiwire.CompletionTokensDetails
	}{
		{"no claim", nil, usage, done, nil},
		{"no ring part", d(3, 4), usage, nil, nil},
		{"within bounds", d(25, 12), usage, done, d(25, 12)},
		{"zero", d(0, 0), usage, done, d(0, 0)},
		{"at the bounds", d(30, 40), usage, done, d(30, 40)},
		{"accepted past the completion tokens", d(31, 0), usage, done, d(30, 0)},
		{"rejected past the signed positions", d(0, 41), usage, done, d(0, 40)},
		{"both huge", d(1<<62, 1<<62), usage, done, d(30, 40)},
		{"negative", d(-1, -7), usage, done, d(0, 0)},
		{"most negative", d(-1<<63, -1<<63), usage, done, d(0, 0)},
		{"positions short of the prompt", d(5, 5), usage, &relaymsg.RingDone{TokenEnd: 10}, d(5, 0)},
		{"no completion tokens", d(5, 5), oaiwire.Usage{PromptTokens: 20}, done, d(0, 5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before oaiwire.CompletionTokensDetails
			if tc.claim != nil {
				before = *tc.claim
			}
			got := ringDetails(tc.claim, tc.usage, tc.done)
			switch {
			case (got == nil) != (tc.want == nil):
				t.Fatalf("got %+v, want %+v", got, tc.want)
			case got != nil && *got != *tc.want:
				t.Fatalf("got %+v, want %+v", *got, *tc.want)
			case got != nil && got == tc.claim:
				t.Fatal("returned the worker's claim itself")
			case tc.claim != nil && *tc.claim != before:
				t.Fatalf("changed the claim to %+v", *tc.claim)
			}
		})
	}
}

const specRingModel = "c0mpute-ring"

// posts records what the Former and dispatch post to connections.
type posts struct {
	mu sync.Mutex
	by map[string][][]byte
}

func (p *posts) Post(_ context.Context, conn string, b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.by[conn] = append(p.by[conn], slices.Clone(b))
	return nil
}

func (p *posts) Delete(context.Context, string) error { return nil }

// take decodes and forgets what was posted to conn.
func (p *posts) take(t *testing.T, conn string) []any {
	t.Helper()
	p.mu.Lock()
	raw := p.by[conn]
	delete(p.by, conn)
	p.mu.Unlock()
	var out []any
	for _, b := range raw {
		m, err := relaymsg.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// heldTimers holds the Former's timers until the test fires them.
type heldTimers struct {
	mu  sync.Mutex
	fns []func()
}

func (h *heldTimers) AfterFunc(_ time.Duration, fn func()) func() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := len(h.fns)
	h.fns = append(h.fns, fn)
	return func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		was := h.fns[i] != nil
		h.fns[i] = nil
		return was
	}
}

func (h *heldTimers) fire() {
	h.mu.Lock()
	fns := slices.Clone(h.fns)
	clear(h.fns)
	h.mu.Unlock()
	for _, fn := range fns {
		if fn != nil {
			fn()
		}
	}
}

// ringServer is a Server on the suite's store (embedded, or DynamoDB
// Local with C0MPUTE_STORE=dynamodb) with a real rings.Former whose ring
// model is served by a ring of one member, formed through the Former's own
// messages with records the member signs (ringtest), and a whole model.
type ringServer struct {
	s      *Server
	st     store.Store
	member *ringtest.Member
	plan   shard.Plan
	hash   shard.Hash
	key    string // an API key's hash, of account "payer"
}

func newRingServer(t *testing.T) *ringServer {
	t.Helper()
	ctx := t.Context()
	now := time.Now()
	log := slog.New(slog.DiscardHandler)
	st := dynamotest.SuiteStore(t)
	pub := ringtest.Publish(t, specRingModel, ringtest.Shape{Layers: 4, BlobBytes: 64, LayerBytes: 1 << 20, KVBytesPerToken: 16,
		EmbedBytes: 1 << 20, HeadBytes: 1 << 20, ActivationBytes: 4096})
	cat, err := catalog.New([]catalog.Model{{ID: "c0mpute-pro", Price: 10},
		{ID: specRingModel, Price: 30, Ring: &catalog.RingSpec{BlobURL: pub.URL, MinStages: 1, MaxStages: 4, ContextTokens: 256}}})
	if err != nil {
		t.Fatal(err)
	}
	out := &posts{by: map[string][][]byte{}}
	disp := dispatch.New(st, out, log)
	timers := &heldTimers{}
	f, err := rings.New(rings.Config{Key: ringtest.Key("gateway"), Catalog: cat, Post: out, Store: st, Dispatch: disp,
		AfterFunc: timers.AfterFunc, Log: log, AllowPrivateAddrs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	if err := f.Load(ctx); err != nil {
		t.Fatal(err)
	}
	m := ringtest.NewMember(0)
	// The member's account, which its stage's share of an earning goes to.
	if err := st.CreateAccount(ctx, store.Account{ID: m.Account, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutWorker(ctx, store.Worker{Conn: m.Conn, AccountID: m.Account, Pubkey: m.Pubkey(), State: store.WorkerIdle, ConnectedAt: now}); err != nil {
		t.Fatal(err)
	}
	w, err := st.RegisterWorker(ctx, m.Conn, []string{"c0mpute-pro"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if offers := f.Register(ctx, w, []string{"c0mpute-pro", specRingModel}); len(offers) != 1 {
		t.Fatalf("offers %+v", offers)
	}
	if reply := f.Message(ctx, m.Conn, m.Announce(specRingModel, pub.Manifest.Hash(), 9<<20, 100, now)); reply != nil {
		t.Fatalf("announce: %s", reply)
	}
	timers.fire()
	posted := out.take(t, m.Conn)
	if len(posted) != 1 {
		t.Fatalf("posted %+v, want one ring_assign", posted)
	}
	a, ok := posted[0].(*relaymsg.RingAssign)
	if !ok {
		t.Fatalf("posted %T, want ring_assign", posted[0])
	}
	ready, err := m.Accept(a, ringtest.Distance, now)
	if err != nil {
		t.Fatal(err)
	}
	if reply := f.Message(ctx, m.Conn, ready); reply != nil {
		t.Fatalf("ready: %s", reply)
	}
	if st := f.Rings(); len(st) != 1 || !st[0].Serving {
		t.Fatalf("the ring does not serve: %+v", st)
	}
	if err := st.CreateAccount(ctx, store.Account{ID: "payer", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Grant(ctx, "payer", 1000, "grant", false); err != nil {
		t.Fatal(err)
	}
	_, keyHash, keyID := credential.New(credential.APIKeyPrefix)
	if err := st.PutAPIKey(ctx, store.Secret{Hash: keyHash, ID: keyID, AccountID: "payer", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	s := &Server{store: st, dispatch: disp, conns: out, catalog: cat, limits: DefaultLimits(), log: log, now: time.Now,
		tickets: relaymsg.NewTicketer(strings.Repeat("ab", 32)), rings: f}
	return &ringServer{s: s, st: st, member: m, plan: a.Plan, hash: a.Hash, key: keyHash}
}

// job admits a job of model and assigns it to the ring's driver, as chat
// and waitForWorker do, and posts it as runOnWorker does up to the post:
// the attempt's ticket and ring part, and its time.
func (rs *ringServer) job(t *testing.T, model string, req *oaiwire.ChatRequest, noSpeculation bool) (*jobRun, []byte) {
	t.Helper()
	ctx := t.Context()
	m, ok := rs.s.catalog.Resolve(model)
	if !ok {
		t.Fatalf("no model %s", model)
	}
	now := time.Now()
	adm, err := rs.st.Admit(ctx, store.AdmitRequest{KeyHash: rs.key, Window: now.Truncate(time.Minute), Limit: 100, AccountLimit: 100,
		Job: store.Job{ID: newCompletionID(), AccountID: "payer", Model: m.ID, Price: m.Price, State: store.JobQueued,
			Listener: "listener", Created: now, Updated: now}})
	if err != nil {
		t.Fatal(err)
	}
	j := &jobRun{s: rs.s, req: req, job: adm.Job, model: m, noSpeculation: noSpeculation}
	assigned, ok, err := rs.s.dispatch.Assign(ctx, j.job)
	if err == nil && !ok {
		// A dispatch run after the last job's end may have assigned it
		// already: adopt that, as waitForWorker's recheck does.
		assigned, err = rs.st.GetJob(ctx, j.job.ID)
		ok = err == nil && assigned.State == store.JobAssigned
	}
	if err != nil || !ok || assigned.Worker != rs.member.Conn {
		t.Fatalf("assign: %+v, %v, %v", assigned, ok, err)
	}
	j.worker, j.workerPubkey, j.workerAccount = assigned.Worker, assigned.WorkerPubkey, assigned.WorkerAccount
	j.ticket = rs.s.tickets.Issue(j.job.ID, j.worker, j.job.Listener)
	msg, err := relaymsg.Encode(&relaymsg.Job{Job: j.job.ID, ReplyTo: j.job.Listener, Model: m.ID, Request: *req,
		Deadline: now.Add(time.Minute), Ticket: j.ticket, Ring: rs.s.ringJob(j, j.ticket)})
	if err != nil {
		t.Fatal(err)
	}
	j.jobBytes, j.postedAt = len(msg), now
	return j, msg
}

// end frees the driver of j for the next job: a job still assigned fails
// (refunded), as the handler settles a job it ends.
func (rs *ringServer) end(t *testing.T, j *jobRun) {
	t.Helper()
	cur, err := rs.st.GetJob(t.Context(), j.job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cur.State == store.JobAssigned {
		if _, err := rs.st.Fail(t.Context(), j.job.ID, "test_end", true, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	rs.s.dispatch.Released(j.worker, 0)
}

// done is what an honest one-stage ring's driver sends for j: its signed
// receipt of tokens positions, and usage with details.
func (rs *ringServer) done(j *jobRun, tokens int64, usage oaiwire.Usage) *relaymsg.Done {
	in := shard.Hash(sha256.Sum256([]byte("input:" + j.job.ID)))
	out := shard.Hash(sha256.Sum256([]byte("output:" + j.job.ID)))
	p, _ := rs.plan.Primary(0)
	r := rs.member.Receipt(shard.Receipt{Job: j.job.ID, Plan: rs.hash, Stage: 0, LayerStart: p.LayerStart, LayerEnd: p.LayerEnd,
		Model: rs.plan.Model, Input: in, Output: out, TokenEnd: tokens, Nonce: relaymsg.RingNonce(j.ticket),
		Time: j.postedAt.Add(time.Second).UnixMilli()})
	return &relaymsg.Done{Job: j.job.ID, FinishReason: oaiwire.FinishStop, Usage: usage,
		Ring: &relaymsg.RingDone{Plan: rs.hash, Input: in, Output: out, TokenEnd: tokens, Receipts: []shard.Receipt{r}}}
}

// The job message of a ring model carries the client's switch to its
// driver, and the request's prediction reaches the worker as sent (the
// receipt's request hash agrees on both sides); a whole model's job has no
// ring part, whatever the header said.
func TestRingJobMessage(t *testing.T) {
	rs := newRingServer(t)
	req := &oaiwire.ChatRequest{Model: specRingModel, Messages: []oaiwire.Message{{Role: "user", Content: oaiwire.Content{Text: "rename x"}}},
		Prediction: &oaiwire.Prediction{Type: "content", Content: oaiwire.Content{IsParts: true,
			Parts: []oaiwire.Part{{Type: "text", Text: "let y = 1;\n"}, {Type: "text", Text: "print(y)"}}}}}
	for _, tc := range []struct {
		name          string
		model         string
		noSpeculation bool
		wantRing      bool
	}{
		{"ring, speculation on", specRingModel, false, true},
		{"ring, speculation off", specRingModel, true, true},
		{"whole model, speculation off", "c0mpute-pro", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, msg := rs.job(t, tc.model, req, tc.noSpeculation)
			defer rs.end(t, j)
			decoded, err := relaymsg.Decode(msg)
			if err != nil {
				t.Fatal(err)
			}
			job, ok := decoded.(*relaymsg.Job)
			if !ok {
				t.Fatalf("decoded %T", decoded)
			}
			switch {
			case !tc.wantRing && job.Ring != nil:
				t.Fatalf("a whole model's job has a ring part %+v", job.Ring)
			case tc.wantRing && job.Ring == nil:
				t.Fatal("a ring model's job has no ring part")
			case tc.wantRing && (job.Ring.NoSpeculation != tc.noSpeculation || job.Ring.Plan != rs.hash || job.Ring.Plan != j.ringPlan):
				t.Fatalf("ring part %+v, want no_speculation %v on plan %s", job.Ring, tc.noSpeculation, rs.hash)
			}
			if got := strings.Contains(string(msg), `"no_speculation":true`); got != (tc.wantRing && tc.noSpeculation) {
				t.Errorf("no_speculation in the message: %v\n%s", got, msg)
			}
			p := job.Request.Prediction
			if p == nil || p.Type != "content" || !p.Content.IsParts || p.Content.String() != "let y = 1;\nprint(y)" {
				t.Fatalf("prediction on the worker's side: %+v", p)
			}
			sent, err := relaymsg.RequestHash(req)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := relaymsg.RequestHash(&job.Request); err != nil || got != sent {
				t.Fatalf("request hash on the worker's side %s, %v; the gateway's %s", got, err, sent)
			}
		})
	}
}

// complete reports a ring driver's completion_tokens_details, bounded,
// only once its stage receipts verified; never for a ring whose receipts
// do not, nor for a whole model's worker. The money is the same with or
// without them.
func TestCompleteReportsRingDetails(t *testing.T) {
	rs := newRingServer(t)
	req := &oaiwire.ChatRequest{Model: specRingModel, Messages: []oaiwire.Message{{Role: "user", Content: oaiwire.Content{Text: "hi"}}}}
	details := func(accepted, rejected int64) *oaiwire.CompletionTokensDetails {
		return &oaiwire.CompletionTokensDetails{AcceptedPredictionTokens: accepted, RejectedPredictionTokens: rejected}
	}
	for _, tc := range []struct {
		name    string
		model   string
		claim   *oaiwire.CompletionTokensDetails
		tamper  bool // break the driver's receipt
		want    *oaiwire.CompletionTokensDetails
		wantErr error
	}{
		{name: "ring, honest", model: specRingModel, claim: details(6, 3), want: details(6, 3)},
		{name: "ring, inflated", model: specRingModel, claim: details(500, 500), want: details(8, 12)},
		{name: "ring, no details", model: specRingModel},
		{name: "whole model", model: "c0mpute-pro", claim: details(6, 3)},
		// Last: a rejection voids the ring's plan.
		{name: "ring, receipts rejected", model: specRingModel, claim: details(6, 3), tamper: true, wantErr: errRingRejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, _ := rs.job(t, tc.model, req, false)
			// The gateway relayed 8 deltas of 8 bytes, so no more than 8
			// completion tokens count; the prompt claim of 4 leaves 12 of
			// the 16 signed positions for rejected drafts.
			j.deltas, j.replyBytes = 8, 8
			m := rs.done(j, 16, oaiwire.Usage{PromptTokens: 4, CompletionTokens: 8, TotalTokens: 12, CompletionTokensDetails: tc.claim})
			if tc.model != specRingModel {
				m.Ring = nil
			}
			if tc.tamper {
				m.Ring.Receipts[0].TokenEnd++ // no longer what the member signed
			}
			usage, err := j.complete(m)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("complete: %v, want %v", err, tc.wantErr)
			}
			if usage.PromptTokens != 4 || usage.CompletionTokens != 8 || usage.TotalTokens != 12 {
				t.Errorf("usage %+v", usage)
			}
			got := usage.CompletionTokensDetails
			if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
				t.Fatalf("details %+v, want %+v", got, tc.want)
			}
			// The money is the job's price, whatever the details say: a
			// settled job is complete in the store, a rejected one not.
			stored, err := rs.st.GetJob(t.Context(), j.job.ID)
			if err != nil {
				t.Fatal(err)
			}
			if wantState := store.JobDone; tc.wantErr == nil && stored.State != wantState || tc.wantErr != nil && stored.State == wantState {
				t.Errorf("job state %s after complete (err %v)", stored.State, err)
			}
			rs.end(t, j)
		})
	}
}

// Only what complete bounds reaches the client: both sinks write the
// details they are given, under usage, and leave the key out when there
// are none.
func TestSinksWriteDetails(t *testing.T) {
	with := oaiwire.Usage{PromptTokens: 4, CompletionTokens: 8,
		CompletionTokensDetails: &oaiwire.CompletionTokensDetails{AcceptedPredictionTokens: 6, RejectedPredictionTokens: 3}}
	without := oaiwire.Usage{PromptTokens: 4, CompletionTokens: 8}
	const wantDetails = `"completion_tokens_details":{"accepted_prediction_tokens":6,"rejected_prediction_tokens":3}`
	for _, tc := range []struct {
		name   string
		stream bool
		usage  oaiwire.Usage
		want   string // the usage object as written
	}{
		{"buffered with details", false, with, `{"prompt_tokens":4,"completion_tokens":8,"total_tokens":12,` + wantDetails + `}`},
		{"buffered without", false, without, `{"prompt_tokens":4,"completion_tokens":8,"total_tokens":12}`},
		{"stream with details", true, with, `{"prompt_tokens":4,"completion_tokens":8,"total_tokens":12,` + wantDetails + `}`},
		{"stream without", true, without, `{"prompt_tokens":4,"completion_tokens":8,"total_tokens":12}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			var out sink
			if tc.stream {
				out = newStreamSink(w, "chatcmpl-x", "m", time.Unix(1, 0), true, nil)
			} else {
				out = newBufferSink(w, "chatcmpl-x", "m", time.Unix(1, 0))
			}
			if err := out.delta(oaiwire.Delta{Content: "hello"}); err != nil {
				t.Fatal(err)
			}
			if err := out.finish(oaiwire.FinishStop, tc.usage); err != nil {
				t.Fatal(err)
			}
			doc := w.Body.String()
			if tc.stream {
				// The usage chunk is the last event before [DONE].
				events := strings.Split(strings.TrimSpace(doc), "\n\n")
				if len(events) < 2 || events[len(events)-1] != "data: [DONE]" {
					t.Fatalf("stream %q", doc)
				}
				doc = strings.TrimPrefix(events[len(events)-2], "data: ")
			}
			var v struct {
				Usage json.RawMessage `json:"usage"`
			}
			if err := json.Unmarshal([]byte(doc), &v); err != nil {
				t.Fatalf("%v: %s", err, doc)
			}
			if string(v.Usage) != tc.want {
				t.Fatalf("usage %s, want %s", v.Usage, tc.want)
			}
		})
	}
}
