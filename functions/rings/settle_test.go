package rings_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/rings"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/functions/store"
)

// done is what an honest driver sends for a job on r: every stage's
// receipt, signed by its primary, chained from the driver's input to its
// output, with the attempt's nonce.
func done(r ring, job, ticket string, started time.Time, tokens int64) *relaymsg.RingDone {
	nonce := relaymsg.RingNonce(ticket)
	in := sha256.Sum256([]byte("input:" + job))
	prev := shard.Hash(in)
	var rs []shard.Receipt
	for s, m := range r.stages {
		p, _ := r.plan.Primary(s)
		out := shard.Hash(sha256.Sum256([]byte(fmt.Sprint("output:", job, s))))
		rs = append(rs, m.Receipt(shard.Receipt{Job: job, Plan: r.hash, Stage: s, LayerStart: p.LayerStart, LayerEnd: p.LayerEnd,
			Model: r.plan.Model, Input: prev, Output: out, TokenEnd: tokens, Nonce: nonce, Time: started.Add(time.Second).UnixMilli()}))
		prev = out
	}
	return &relaymsg.RingDone{Plan: r.hash, Input: in, Output: prev, TokenEnd: tokens, Receipts: rs}
}

func serving(t *testing.T, members int) (*fixture, ring) {
	fx := newFixture(t, shape, defaultSpec())
	for i := range members {
		fx.join(i, smallVRAM, int64(100+10*i))
	}
	return fx, fx.form()
}

// Honest receipts settle: one share per stage, to the stage's account and
// identity, split by layers × tokens, adding up to the earning exactly —
// a split the store accepts.
func TestSettleHonest(t *testing.T) {
	fx, r := serving(t, 4)
	started := fx.clock.Now()
	const earning = 1000
	got, err := fx.f.Settle(t.Context(), rings.SettleJob{ID: "job-1", Ticket: "ticket-1", Model: "big-alias", Started: started,
		Earning: earning, Done: done(r, "job-1", "ticket-1", started, 40), Worker: r.stages[0].Conn})
	if err != nil {
		t.Fatal(err)
	}
	if got.Plan != r.hash || !got.Verdict.OK || len(got.Shares) != 3 {
		t.Fatalf("settlement %+v", got)
	}
	var sum int64
	for s, sh := range got.Shares {
		m := r.stages[s]
		p, _ := r.plan.Primary(s)
		exact := earning * int64(p.LayerEnd-p.LayerStart) / int64(r.plan.Layers)
		if sh.Account != m.Account || sh.Pubkey != m.Pubkey() || sh.Amount < exact || sh.Amount > exact+1 {
			t.Errorf("stage %d (%d layers): %+v, want %s/%s about %d", s, p.LayerEnd-p.LayerStart, sh, m.Account, m.Pubkey(), exact)
		}
		sum += sh.Amount
	}
	if sum != earning {
		t.Errorf("shares add up to %d, want %d", sum, earning)
	}
	if err := (store.Completion{Earning: earning, Shares: got.Shares}).CheckShares(); err != nil {
		t.Errorf("the store refuses the split: %v", err)
	}
}

// Every tampering is rejected with its own reason, and pays nobody. The
// culprit is the stage whose own signed word is at fault (struck), stage
// 0 for what only the Done shows (struck when it can only be stage 0's
// doing), the stage Verify names without a strike when another member
// could have framed it, and nobody when no member of the plan answers for
// it.
func TestSettleRejects(t *testing.T) {
	fx, r := serving(t, 4)
	spare := fx.members["conn-3"]
	for _, m := range r.stages {
		if m == spare {
			t.Fatal("the spare is in the ring")
		}
	}
	started := fx.clock.Now()
	resign := func(j *rings.SettleJob, s int, change func(*shard.Receipt)) {
		rc := j.Done.Receipts[s]
		change(&rc)
		j.Done.Receipts[s] = r.stages[s].Receipt(rc)
	}
	const none = -1
	for _, tc := range []struct {
		name   string
		change func(j *rings.SettleJob)
		reason shard.Reason
		stage  int // the culprit's; none for no culprit
		strike bool
	}{
		{"a receipt altered after signing", func(j *rings.SettleJob) { j.Done.Receipts[1].Time++ }, shard.ReasonBadSignature, 0, false},
		{"a receipt from a node outside the ring", func(j *rings.SettleJob) {
			j.Done.Receipts[1] = spare.Receipt(j.Done.Receipts[1])
		}, shard.ReasonWrongSigner, 0, false},
		{"a broken chain", func(j *rings.SettleJob) {
			resign(j, 2, func(rc *shard.Receipt) { rc.Input = sha256.Sum256([]byte("elsewhere")) })
		}, shard.ReasonBrokenChain, 2, false},
		{"a done whose output is not the tail's", func(j *rings.SettleJob) { j.Done.Output[0] ^= 1 }, shard.ReasonBrokenChain, 2, false},
		// A receipt of another attempt may be its signer's true word about
		// that attempt, replayed by any stage after it: held against
		// stage 0, struck against nobody.
		{"receipts of another attempt (stale nonce)", func(j *rings.SettleJob) { j.Ticket = "ticket-2" }, shard.ReasonStaleNonce, 0, false},
		{"one stage's receipt of another attempt", func(j *rings.SettleJob) {
			resign(j, 1, func(rc *shard.Receipt) { rc.Nonce = relaymsg.RingNonce("ticket-0") })
		}, shard.ReasonStaleNonce, 0, false},
		{"a stage claiming another range", func(j *rings.SettleJob) {
			resign(j, 1, func(rc *shard.Receipt) { rc.LayerEnd++ })
		}, shard.ReasonOverlap, 0, false},
		{"a stage dated outside the window", func(j *rings.SettleJob) {
			resign(j, 2, func(rc *shard.Receipt) { rc.Time = started.Add(-time.Hour).UnixMilli() })
		}, shard.ReasonTimeWindow, 2, true},
		{"a done from a connection that is not stage 0", func(j *rings.SettleJob) { j.Worker = r.stages[1].Conn }, shard.ReasonWrongSigner, none, false},
		{"an unknown plan", func(j *rings.SettleJob) { j.Done.Plan = sha256.Sum256([]byte("no plan")) }, shard.ReasonPlanMismatch, none, false},
		{"a done without receipts", func(j *rings.SettleJob) { j.Done = nil }, shard.ReasonGap, none, false},
		{"a stage missing", func(j *rings.SettleJob) { j.Done.Receipts = j.Done.Receipts[:2] }, shard.ReasonGap, 0, false},
		// The job names the plan it was dispatched with.
		// A done without its ring part can be an accident (a ring that
		// could not close at the deadline): held against stage 0, no
		// strike.
		{"a done without receipts, the plan known", func(j *rings.SettleJob) { j.Plan, j.Done = r.hash, nil }, shard.ReasonGap, 0, false},
		{"a done naming another plan", func(j *rings.SettleJob) {
			j.Plan = r.hash
			j.Done.Plan = sha256.Sum256([]byte("no plan"))
		}, shard.ReasonPlanMismatch, 0, true},
		{"a job dispatched with an unknown plan", func(j *rings.SettleJob) { j.Plan = sha256.Sum256([]byte("no plan")) }, shard.ReasonPlanMismatch, none, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := rings.SettleJob{ID: "job-1", Ticket: "ticket-1", Model: ringModel, Started: started, Earning: 1000,
				Done: done(r, "job-1", "ticket-1", started, 40), Worker: r.stages[0].Conn}
			tc.change(&j)
			got, err := fx.f.Settle(t.Context(), j)
			var rej *shard.RejectedError
			if !errors.As(err, &rej) || rej.Reason != tc.reason || !rings.IsRejected(err) {
				t.Fatalf("err %v, want a rejection for %s", err, tc.reason)
			}
			if len(got.Shares) != 0 || got.Verdict.OK {
				t.Fatalf("a rejected job pays: %+v", got)
			}
			c := got.Culprit
			if tc.stage == none {
				if c != nil {
					t.Fatalf("culprit %+v, want none", c)
				}
				return
			}
			m := r.stages[tc.stage]
			want := rings.Culprit{Stage: tc.stage, Node: m.Node, Conn: m.Conn, Account: m.Account, Pubkey: m.Pubkey(), Strike: tc.strike}
			if c == nil || *c != want {
				t.Fatalf("culprit %+v, want %+v", c, want)
			}
		})
	}
}

// A malformed call is an error, not a verdict.
func TestSettleMalformed(t *testing.T) {
	fx, r := serving(t, 3)
	started := fx.clock.Now()
	good := rings.SettleJob{ID: "job-1", Ticket: "ticket-1", Model: ringModel, Started: started, Earning: 10,
		Done: done(r, "job-1", "ticket-1", started, 4), Worker: r.stages[0].Conn}
	for name, change := range map[string]func(*rings.SettleJob){
		"no id":              func(j *rings.SettleJob) { j.ID = "" },
		"no ticket":          func(j *rings.SettleJob) { j.Ticket = "" },
		"no start":           func(j *rings.SettleJob) { j.Started = time.Time{} },
		"negative earning":   func(j *rings.SettleJob) { j.Earning = -1 },
		"no worker":          func(j *rings.SettleJob) { j.Worker = "" },
		"not a ring model":   func(j *rings.SettleJob) { j.Model = wholeModel },
		"not a model at all": func(j *rings.SettleJob) { j.Model = "gpt-4" },
	} {
		j := good
		change(&j)
		if _, err := fx.f.Settle(t.Context(), j); err == nil || rings.IsRejected(err) {
			t.Errorf("%s: %v, want an error that is not a verdict", name, err)
		}
	}
	if _, err := fx.f.Settle(t.Context(), good); err != nil {
		t.Fatal(err)
	}
}

// A member that left after the job is still paid, to the account it
// announced from; a plan more than RecentPlans served plans ago is
// unknown.
func TestSettleAfterTheRingIsGone(t *testing.T) {
	fx, first := serving(t, 5)
	started := fx.clock.Now()
	d := done(first, "job-1", "ticket-1", started, 10)
	left := first.stages[2]
	fx.leave(left.Conn)
	fx.takeAll()
	got, err := fx.f.Settle(t.Context(), rings.SettleJob{ID: "job-1", Ticket: "ticket-1", Model: ringModel, Started: started,
		Earning: 99, Done: d, Worker: first.stages[0].Conn})
	if err != nil {
		t.Fatal(err)
	}
	if sh := got.Shares[2]; sh.Account != left.Account || sh.Pubkey != left.Pubkey() || sh.Amount == 0 {
		t.Fatalf("the member that left: %+v", sh)
	}
	// Serve RecentPlans more rings (each voided by a refusal, the refuser
	// sitting out the next attempt): the first plan is forgotten.
	var last ring
	for range rings.RecentPlans {
		last = fx.form()
		fx.ok(last.stages[1].Conn, &relaymsg.RingRefuse{Model: ringModel, Hash: last.hash, Code: "leaving"})
		fx.takeAll()
	}
	_, err = fx.f.Settle(t.Context(), rings.SettleJob{ID: "job-1", Ticket: "ticket-1", Model: ringModel, Started: started,
		Earning: 99, Done: d, Worker: first.stages[0].Conn})
	var rej *shard.RejectedError
	if !errors.As(err, &rej) || rej.Reason != shard.ReasonPlanMismatch {
		t.Fatalf("a plan %d plans ago: %v", rings.RecentPlans, err)
	}
	started = fx.clock.Now()
	if _, err := fx.f.Settle(t.Context(), rings.SettleJob{ID: "job-2", Ticket: "ticket-2", Model: ringModel, Started: started,
		Earning: 99, Done: done(last, "job-2", "ticket-2", started, 10), Worker: last.stages[0].Conn}); err != nil {
		t.Fatalf("the last plan: %v", err)
	}
}
