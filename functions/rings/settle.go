package rings

import (
	"context"
	"errors"
	"fmt"
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

// Settlement is a verified ring job: the plan it ran on, the verdict, and
// each stage's share of the earning, in stage order, to credit as
// store.Completion.Shares. The amounts add up to the earning exactly.
type Settlement struct {
	Plan    shard.Hash
	Verdict shard.Verdict
	Shares  []store.Share
}

// Settle verifies a ring job's stage receipts and splits its earning. It
// finds the plan by Done.Plan among the model's recent plans (a member
// that left since is still paid, to the account it announced from), checks
// that the Done came from that plan's stage 0, signs the job record as the
// plan's coordinator — nonce from the ticket, time from Started, input and
// output chains and token positions from the Done — and runs shard.Verify
// with shard.DefaultWindow (no block table: the gateway runs without a
// chain). A rejected job is a *shard.RejectedError: nobody is paid.
// Another error means the job itself is malformed.
func (f *Former) Settle(ctx context.Context, job SettleJob) (Settlement, error) {
	if err := validate.Struct(job); err != nil {
		return Settlement{}, fmt.Errorf("rings: settle job %q: %w", job.ID, err)
	}
	rm, ok := f.model(job.Model)
	if !ok {
		return Settlement{}, fmt.Errorf("rings: settle job %q: %q is not a ring model of this gateway", job.ID, job.Model)
	}
	d := job.Done
	if d == nil {
		return f.reject(rm, job, shard.Hash{}, shard.ReasonGap, -1, "the done of a ring job carries no ring settlement (no receipts)")
	}
	var fm *formed
	rm.mu.Lock()
	for _, r := range rm.recent {
		if r.hash == d.Plan {
			fm = r
		}
	}
	rm.mu.Unlock()
	if fm == nil {
		return f.reject(rm, job, d.Plan, shard.ReasonPlanMismatch, -1, fmt.Sprintf("plan %s is not one of the last %d plans %q served", d.Plan, RecentPlans, rm.id))
	}
	if job.Worker != fm.driver {
		return f.reject(rm, job, d.Plan, shard.ReasonWrongSigner, 0, fmt.Sprintf("the done came from connection %s, stage 0 of plan %s is connection %s", job.Worker, fm.hash, fm.driver))
	}
	rec := shard.Job{ID: job.ID, Plan: fm.hash, Model: fm.plan.Model, Nonce: relaymsg.RingNonce(job.Ticket),
		Input: d.Input, Output: d.Output, TokenStart: d.TokenStart, TokenEnd: d.TokenEnd,
		Time: job.Started.UnixMilli(), Earnings: job.Earning}
	rec.Sign(f.cfg.Key)
	v := shard.Verify(&fm.plan, &rec, d.Receipts, shard.DefaultWindow)
	if !v.OK {
		f.logRejected(rm, job, fm.hash, v)
		return Settlement{Plan: fm.hash, Verdict: v}, v.Err()
	}
	out := Settlement{Plan: fm.hash, Verdict: v}
	for _, sh := range v.Shares {
		c, ok := fm.members[sh.Node]
		if !ok { // Verify pays only the plan's primaries
			return Settlement{}, fmt.Errorf("rings: settle job %q: internal error: stage %d's %s has no record", job.ID, sh.Stage, sh.Node)
		}
		out.Shares = append(out.Shares, store.Share{Account: c.account, Pubkey: c.pubkey, Amount: sh.Amount})
	}
	f.log.Info("ring job settled", "job", job.ID, "model", rm.id, "plan", fm.hash, "stages", len(out.Shares), "earning", job.Earning)
	return out, nil
}

func (f *Former) reject(rm *ringModel, job SettleJob, plan shard.Hash, reason shard.Reason, stage int, detail string) (Settlement, error) {
	v := shard.Verdict{Reason: reason, Stage: stage, Detail: detail}
	f.logRejected(rm, job, plan, v)
	return Settlement{Plan: plan, Verdict: v}, v.Err()
}

// logRejected flags a rejected ring job. The detail names keys, hashes,
// stages and connections, never text.
func (f *Former) logRejected(rm *ringModel, job SettleJob, plan shard.Hash, v shard.Verdict) {
	f.log.Warn("ring job rejected: nobody is paid", "job", job.ID, "model", rm.id, "plan", plan, "worker", job.Worker,
		"reason", string(v.Reason), "stage", v.Stage, "detail", v.Detail)
}

// IsRejected reports whether err is a verdict rejecting the job (as
// opposed to a malformed call).
func IsRejected(err error) bool {
	var r *shard.RejectedError
	return errors.As(err, &r)
}
