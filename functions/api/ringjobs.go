package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/rings"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/functions/store"
)

// Jobs of ring models (SPEC "Sharding"): a ring's first stage takes the
// model's jobs like any worker, and its done carries every stage's signed
// receipt. The job's earning moves only after the rings package has
// verified them (shard.Verify), and then to the stages' accounts by the
// verdict's shares.

// errRingRejected is a ring job whose stage receipts failed verification.
var errRingRejected = errors.New("api: the ring's stage receipts were rejected")

// errRingUnsettled ends a reply whose ring could not prove its work.
var errRingUnsettled = &oaiwire.Error{Status: http.StatusBadGateway, Type: oaiwire.TypeServer, Code: "ring_rejected",
	Message: "The ring of workers that served this model could not prove its work (its stage receipts did not verify), so the reply was rejected. The request was not charged."}

// ringJob is what a job message for a ring model carries: the plan the
// model's ring serves now, the attempt's nonce, and whether the client
// turned speculative decoding off (headerSpeculation). Nil for any other
// model, or when no ring serves (the first stage then refuses the job and
// it moves or fails by the usual rules).
func (s *Server) ringJob(j *jobRun, ticket string) *relaymsg.RingJob {
	j.ringPlan = shard.Hash{}
	if j.model.Ring == nil || s.rings == nil {
		return nil
	}
	r, ok := s.rings.JobRing(j.model.ID, ticket)
	if !ok {
		return nil
	}
	j.ringPlan = r.Plan
	r.NoSpeculation = j.noSpeculation
	return r
}

// settleRing verifies a ring job's stage receipts and returns the shares
// its earning splits into (one per stage). It is errRingRejected when the
// receipts do not verify, or when a ring model's done carries none.
func (j *jobRun) settleRing(m *relaymsg.Done, earning int64) ([]store.Share, error) {
	s := j.s
	if s.rings == nil {
		return nil, errRingRejected
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	// A done without its ring part settles as one without receipts: it
	// pays nobody, and the first stage answers for it.
	st, err := s.rings.Settle(ctx, rings.SettleJob{ID: j.job.ID, Ticket: j.ticket, Model: j.model.ID, Plan: j.ringPlan,
		Started: j.postedAt, Earning: earning, Done: m.Ring, Worker: j.worker})
	if err != nil {
		s.log.Warn("ring job not settled", "job", j.job.ID, "worker", j.worker, "err", err)
		if c := st.Culprit; c != nil {
			jobID, model, plan := j.job.ID, j.model.ID, st.Plan
			s.goSafe("ring rejected", func() { s.ringRejected(jobID, model, plan, c) })
		}
		return nil, errRingRejected
	}
	return st.Shares, nil
}

// ringRejected acts on a rejected ring settlement: the culprit's plan is
// void and the culprit sits out the model's next rings, and, when the
// fault is its own signed word, its identity takes a strike as for a
// rejected receipt.
func (s *Server) ringRejected(jobID, model string, plan shard.Hash, c *rings.Culprit) {
	s.rings.Rejected(model, plan, c.Stage)
	if !c.Strike {
		return
	}
	if c.Conn == "" || c.Pubkey == "" || c.Account == "" {
		s.log.Warn("ring culprit not struck: its record is incomplete", "job", jobID, "stage", c.Stage)
		return
	}
	s.Judge(store.Verdict{JobID: jobID, Conn: c.Conn, Pubkey: c.Pubkey, AccountID: c.Account, TokenHash: c.TokenHash,
		Kind: store.VerdictRejected, Strikes: store.ProofStrikes, Reason: "ring_rejected", At: s.now()})
}

// rejectRing ends a ring job whose stages could not prove their work:
// nobody is paid, the job is refunded once, and the client gets an error
// instead of the reply's end. The first stage is not judged for it: any
// stage's bad receipt fails the ring (the rings package logs which).
func (j *jobRun) rejectRing(clientCtx context.Context) (outcome, bool, error) {
	j.s.log.Warn("ring job rejected", "job", j.job.ID, "worker", j.worker, "model", j.model.ID)
	return outcomeFailed, true, j.end(clientCtx, "ring_rejected", errRingUnsettled)
}
