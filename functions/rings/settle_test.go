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

// Every tampering is rejected with its own reason, and pays nobody.
func TestSettleRejects(t *testing.T) {
	fx, r := serving(t, 4)
	spare := fx.members["conn-3"]
	for _, m := range r.stages {
		if m == spare {
			t.Fatal("the spare is in the ring")
		}
	}
	started := fx.clock.Now()
	for _, tc := range []struct {
		name   string
		change func(j *rings.SettleJob)
		reason shard.Reason
	}{
		{"a receipt altered after signing", func(j *rings.SettleJob) { j.Done.Receipts[1].Time++ }, shard.ReasonBadSignature},
		{"a receipt from a node outside the ring", func(j *rings.SettleJob) {
			j.Done.Receipts[1] = spare.Receipt(j.Done.Receipts[1])
		}, shard.ReasonWrongSigner},
		{"a broken chain", func(j *rings.SettleJob) {
			rc := j.Done.Receipts[2]
			rc.Input = sha256.Sum256([]byte("elsewhere"))
			j.Done.Receipts[2] = r.stages[2].Receipt(rc)
		}, shard.ReasonBrokenChain},
		{"receipts of another attempt (stale nonce)", func(j *rings.SettleJob) { j.Ticket = "ticket-2" }, shard.ReasonStaleNonce},
		{"a done from a connection that is not stage 0", func(j *rings.SettleJob) { j.Worker = r.stages[1].Conn }, shard.ReasonWrongSigner},
		{"an unknown plan", func(j *rings.SettleJob) { j.Done.Plan = sha256.Sum256([]byte("no plan")) }, shard.ReasonPlanMismatch},
		{"a done without receipts", func(j *rings.SettleJob) { j.Done = nil }, shard.ReasonGap},
		{"a stage missing", func(j *rings.SettleJob) { j.Done.Receipts = j.Done.Receipts[:2] }, shard.ReasonGap},
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
