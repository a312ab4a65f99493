package rings

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-playground/validator/v10"

	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/functions/store"
)

var validate = validator.New(validator.WithRequiredStructEnabled())

// SettleJob is a finished job of a ring model, as the gateway saw it.
type SettleJob struct {
	ID string `validate:"required,max=64"`
	// Ticket is the attempt's ticket: its hash is the nonce every stage's
	// receipt must carry (relaymsg.RingNonce).
	Ticket string `validate:"required,max=128"`
	Model  string `validate:"required,max=128"`
	// Plan is the plan the job was dispatched with (the Plan of the
	// relaymsg.RingJob the job message carried): the Done must name it.
	// Zero settles on the plan the Done names.
	Plan shard.Hash `validate:"-"`
	// Started is when the attempt was handed to the ring: the job
	// record's time, around which receipts must be dated.
	Started time.Time `validate:"required"`
	// Earning is what the workers earn for the job, in credits: the
	// stages share it.
	Earning int64 `validate:"min=0"`
	// Done is the ring part of the driver's Done; nil is a done without
	// receipts, which pays nobody.
	Done *relaymsg.RingDone `validate:"-"`
	// Worker is the connection that sent the Done.
	Worker string `validate:"required,max=128"`
}

// ReasonStanding rejects a job one of whose stages is held by an identity
// (or a worker token) that is quarantined or banned: such a worker earns
// nothing from a ring, as dispatch gives it no user job either.
const ReasonStanding shard.Reason = "not_in_good_standing"

// Settlement is a settled ring job: the plan it ran on, the verdict, and
// for a verified job each stage's share of the earning, in stage order,
// to credit as store.Completion.Shares (the amounts add up to the earning
// exactly); for a rejected job, the member held to account, if any.
type Settlement struct {
	Plan    shard.Hash
	Verdict shard.Verdict
	Shares  []store.Share
	// Culprit is set on a rejection that a plan member answers for: the
	// caller passes its stage to Rejected, and strikes its identity when
	// Culprit.Strike says so. Nil when no member can be blamed (the plan
	// is unknown, or the job was dispatched to a connection that is not
	// the plan's stage 0).
	Culprit *Culprit
}

// Culprit is the plan member a rejected settlement is held against, as its
// worker record named it when it announced.
type Culprit struct {
	Stage     int
	Node      shard.PublicKey
	Conn      string
	Account   string
	Pubkey    string
	TokenHash string
	// Strike says the fault is the culprit's own: its signed receipt
	// contradicts what the gateway itself knows (the job, the plan, the
	// model, the nonce, its layer range, the time window), or, for stage
	// 0, its Done carries no receipts or names another plan than the job
	// was dispatched with. Strike its identity. False when the evidence
	// cannot tell the culprit from another member who could have made it
	// look guilty — a broken activation chain or a token count (two
	// members' words against each other), a receipt not signed by its
	// stage, a gap or overlap (any stage relays the receipts) — or when
	// the culprit did nothing wrong in the job but is not in good
	// standing (ReasonStanding): then void and exclude (Rejected), but
	// strike nobody.
	Strike bool
}

// Settle verifies a ring job's stage receipts and splits its earning. It
// takes the plan the job was dispatched with (job.Plan; the Done's when
// zero) from the model's recent plans — a member that left since is still
// paid, to the account it announced from — without waiting for formation.
// It checks that the Done came from that plan's stage 0 and names that
// plan, signs the job record as the plan's coordinator — nonce from the
// ticket, time from Started, input and output chains and token positions
// from the Done — runs shard.Verify with shard.DefaultWindow (no block
// table: the gateway runs without a chain), and last requires every
// stage's identity to be in good standing (ReasonStanding). A rejected job
// is a *shard.RejectedError: nobody is paid, and the Settlement names the
// Culprit to pass to Rejected. Another error means the job itself is
// malformed, or a member's standing could not be read.
func (f *Former) Settle(ctx context.Context, job SettleJob) (Settlement, error) {
	if err := validate.Struct(job); err != nil {
		return Settlement{}, fmt.Errorf("rings: settle job %q: %w", job.ID, err)
	}
	rm, ok := f.model(job.Model)
	if !ok {
		return Settlement{}, fmt.Errorf("rings: settle job %q: %q is not a ring model of this gateway", job.ID, job.Model)
	}
	d := job.Done
	want := job.Plan
	if want.IsZero() && d != nil {
		want = d.Plan
	}
	fm := rm.recentPlan(want)
	switch {
	case fm == nil && d == nil:
		return f.reject(rm, job, want, shard.Verdict{Reason: shard.ReasonGap, Stage: -1, Detail: "the done of a ring job carries no ring settlement (no receipts)"}, nil)
	case fm == nil:
		return f.reject(rm, job, want, shard.Verdict{Reason: shard.ReasonPlanMismatch, Stage: -1,
			Detail: fmt.Sprintf("plan %s is not one of the last %d plans %q served", want, RecentPlans, rm.id)}, nil)
	case job.Worker != fm.driver:
		return f.reject(rm, job, fm.hash, shard.Verdict{Reason: shard.ReasonWrongSigner, Stage: -1,
			Detail: fmt.Sprintf("the done came from connection %s, stage 0 of plan %s is connection %s", job.Worker, fm.hash, fm.driver)}, nil)
	case d == nil:
		return f.reject(rm, job, fm.hash, shard.Verdict{Reason: shard.ReasonGap, Stage: 0,
			Detail: "the done of a ring job carries no ring settlement (no receipts)"}, fm.culprit(0, false))
	case d.Plan != fm.hash:
		return f.reject(rm, job, fm.hash, shard.Verdict{Reason: shard.ReasonPlanMismatch, Stage: 0,
			Detail: fmt.Sprintf("the done names plan %s, the job was dispatched with plan %s", d.Plan, fm.hash)}, fm.culprit(0, true))
	}
	rec := shard.Job{ID: job.ID, Plan: fm.hash, Model: fm.plan.Model, Nonce: relaymsg.RingNonce(job.Ticket),
		Input: d.Input, Output: d.Output, TokenStart: d.TokenStart, TokenEnd: d.TokenEnd,
		Time: job.Started.UnixMilli(), Earnings: job.Earning}
	rec.Sign(f.cfg.Key)
	v := shard.Verify(&fm.plan, &rec, d.Receipts, shard.DefaultWindow)
	if !v.OK {
		return f.reject(rm, job, fm.hash, v, fm.culprit(blame(fm, d, v, &rec)))
	}
	out := Settlement{Plan: fm.hash, Verdict: v}
	for _, sh := range v.Shares {
		c, ok := fm.members[sh.Node]
		if !ok { // Verify pays only the plan's primaries
			return Settlement{}, fmt.Errorf("rings: settle job %q: internal error: stage %d's %s has no record", job.ID, sh.Stage, sh.Node)
		}
		st, err := f.standing(ctx, c.conn, c.account, c.pubkey)
		if err != nil {
			return Settlement{}, fmt.Errorf("rings: settle job %q: stage %d: %w", job.ID, sh.Stage, err)
		}
		if st != store.StandingActive {
			return f.reject(rm, job, fm.hash, shard.Verdict{Reason: ReasonStanding, Stage: sh.Stage,
				Detail: fmt.Sprintf("stage %d's identity %s is %s", sh.Stage, sh.Node, st)}, fm.culprit(sh.Stage, false))
		}
		out.Shares = append(out.Shares, store.Share{Account: c.account, Pubkey: c.pubkey, Amount: sh.Amount})
	}
	f.log.Info("ring job settled", "job", job.ID, "model", rm.id, "plan", fm.hash, "stages", len(out.Shares), "earning", job.Earning)
	return out, nil
}

// recentPlan is the served plan h among the model's recent ones, or nil;
// it reads the snapshot, not rm.mu.
func (rm *ringModel) recentPlan(h shard.Hash) *formed {
	if h.IsZero() {
		return nil
	}
	for _, fm := range *rm.recent.Load() {
		if fm.hash == h {
			return fm
		}
	}
	return nil
}

// culprit is the primary of stage as a Culprit, or nil when the plan has
// no such stage.
func (fm *formed) culprit(stage int, strike bool) *Culprit {
	p, ok := fm.plan.Primary(stage)
	if !ok {
		return nil
	}
	c := fm.members[p.Node]
	return &Culprit{Stage: stage, Node: p.Node, Conn: c.conn, Account: c.account, Pubkey: c.pubkey, TokenHash: c.tokenHash, Strike: strike}
}

// blame is the stage a rejected verdict is held against, and whether the
// evidence is that stage's own (Culprit.Strike). A receipt is the
// evidence only when it is signed by its stage's primary: anything else
// in the Done (a forged, foreign or missing receipt, a gap, an overlap)
// is held against stage 0, which sent the Done, without a strike — any
// stage relays the receipts before it. A receipt of another job or
// attempt (wrong job, stale nonce) is held against stage 0 without a
// strike too: its signer may have signed it truly for that job, and any
// stage after it could have put it in place of a fresh one. A receipt
// signed for this very attempt (this job's id and nonce) that
// contradicts what the gateway knows (plan, model, range, block, time)
// strikes its stage; one that contradicts another member's word (the
// chain, the token count) is held against the stage Verify names,
// without a strike.
func blame(fm *formed, d *relaymsg.RingDone, v shard.Verdict, job *shard.Job) (stage int, strike bool) {
	if len(d.Receipts) == 0 {
		return 0, true // stage 0 adds its own receipt last: none at all is its doing
	}
	p, ok := fm.plan.Primary(v.Stage)
	fresh := false
	if !ok || !slices.ContainsFunc(d.Receipts, func(r shard.Receipt) bool {
		if r.Stage != v.Stage || r.Signer != p.Node || r.Check() != nil {
			return false
		}
		fresh = r.Job == job.ID && r.Nonce == job.Nonce
		return true
	}) {
		return 0, false
	}
	switch v.Reason {
	case shard.ReasonWrongJob, shard.ReasonStaleNonce:
		return 0, false
	case shard.ReasonPlanMismatch, shard.ReasonModelMismatch, shard.ReasonRangeMismatch,
		shard.ReasonBlockWindow, shard.ReasonUnknownBlock, shard.ReasonTimeWindow:
		if fresh {
			return v.Stage, true
		}
		return 0, false
	case shard.ReasonBrokenChain, shard.ReasonTokenMismatch:
		return v.Stage, false
	}
	return 0, false
}

func (f *Former) reject(rm *ringModel, job SettleJob, plan shard.Hash, v shard.Verdict, culprit *Culprit) (Settlement, error) {
	f.log.Warn("ring job rejected: nobody is paid", "job", job.ID, "model", rm.id, "plan", plan, "worker", job.Worker,
		"reason", string(v.Reason), "stage", v.Stage, "detail", v.Detail, "culprit_stage", culpritStage(culprit))
	return Settlement{Plan: plan, Verdict: v, Culprit: culprit}, v.Err()
}

func culpritStage(c *Culprit) int {
	if c == nil {
		return -1
	}
	return c.Stage
}

// Rejected acts on a ring job whose settlement was rejected, for the
// member of stage of plan (Settlement.Culprit.Stage; stage 0 for a Done
// without its ring part): that identity sits out every formation of the
// model for Config.Exclusion, and a plan it holds a place in — the
// current one, whether plan itself or a later one — is void (ring_disband
// to its members, the ring model off stage 0's record, and a new ring
// forms without it). Striking the identity is the caller's (it judges
// workers). An unknown model, plan or stage is logged and changes
// nothing. It posts and takes formation's lock: call it off a reply's
// path.
func (f *Former) Rejected(model string, plan shard.Hash, stage int) {
	rm, ok := f.model(model)
	if !ok {
		f.log.Error("ring rejection for a model that is not a ring model of this gateway", "model", model, "plan", plan)
		return
	}
	ctx, cancel := context.WithTimeout(f.ctx, timerWork)
	defer cancel()
	f.locked(rm, func() {
		fm := rm.recentPlan(plan)
		if fm == nil && rm.cur != nil && rm.cur.hash == plan {
			fm = rm.cur
		}
		if fm == nil {
			f.log.Warn("ring rejection for a plan this gateway no longer knows: nobody excluded", "model", rm.id, "plan", plan, "stage", stage)
			return
		}
		p, ok := fm.plan.Primary(stage)
		if !ok {
			f.log.Error("ring rejection for a stage the plan does not have", "model", rm.id, "plan", plan, "stage", stage)
			return
		}
		until := f.cfg.Now().Add(f.cfg.Exclusion)
		rm.benched[p.Node] = until
		f.log.Warn("ring member excluded: its stage's settlement was rejected", "model", rm.id, "plan", plan, "stage", stage,
			"node", p.Node, "until", until)
		if cur := rm.cur; cur != nil && (cur == fm || cur.members[p.Node] != nil) {
			f.void(ctx, rm, fmt.Sprintf("a job's settlement was rejected at stage %d (%s)", stage, p.Node), "", nil)
		}
	})
}

// IsRejected reports whether err is a verdict rejecting the job (as
// opposed to a malformed call).
func IsRejected(err error) bool {
	var r *shard.RejectedError
	return errors.As(err, &r)
}
