package shard

import (
	"fmt"
	"math/bits"
	"slices"
	"time"
)

// Reason says why Verify rejected a job; every check has its own.
type Reason string

// Verdict reasons.
const (
	ReasonOK             Reason = "ok"
	ReasonBadPlan        Reason = "bad_plan"       // the plan fails its shape check
	ReasonBadJob         Reason = "bad_job"        // the job record is malformed
	ReasonPlanMismatch   Reason = "plan_mismatch"  // job or receipt names another plan
	ReasonModelMismatch  Reason = "model_mismatch" // job or receipt names another model
	ReasonMalformed      Reason = "malformed"      // a receipt is malformed
	ReasonBadSignature   Reason = "bad_signature"  // a signature does not verify
	ReasonWrongSigner    Reason = "wrong_signer"   // the signer does not hold that stage
	ReasonWrongJob       Reason = "wrong_job"      // a receipt is for another job (replay)
	ReasonGap            Reason = "gap"            // the ranges leave layers uncovered
	ReasonOverlap        Reason = "overlap"        // two ranges cover a layer
	ReasonRangeMismatch  Reason = "range_mismatch" // a range is not its stage's range
	ReasonStaleNonce     Reason = "stale_nonce"    // a receipt carries another nonce
	ReasonTokenMismatch  Reason = "token_mismatch" // a receipt covers other token positions
	ReasonBrokenChain    Reason = "broken_chain"   // activation hashes do not chain
	ReasonBlockWindow    Reason = "block_outside_window"
	ReasonUnknownBlock   Reason = "unknown_blockhash" // the blockhash is not the slot's
	ReasonTimeWindow     Reason = "time_outside_window"
	ReasonNoEarningsUnit Reason = "no_work" // zero layers × tokens to share by
)

// Blocks looks up the blockhash of a Solana slot, from an RPC node or a
// cache of recent blocks. ok is false for a slot it does not know.
type Blocks interface {
	Blockhash(slot uint64) (hash Blockhash, ok bool)
}

// Window is where a receipt's block binding and time may lie around the
// job's.
type Window struct {
	// SlotsBefore and SlotsAfter bound the receipt's slot around the job's.
	SlotsBefore uint64
	SlotsAfter  uint64
	// Skew and MaxDuration bound the receipt's time: no earlier than the
	// job's time less Skew, no later than its time plus MaxDuration.
	Skew        time.Duration
	MaxDuration time.Duration
	// Blocks, when set, must confirm every receipt's blockhash.
	Blocks Blocks
}

// DefaultWindow allows a receipt's block to be 150 slots (about a minute,
// Solana's blockhash lifetime) before the job's and 9000 (about an hour)
// after, and its clock to be a minute early or an hour late.
var DefaultWindow = Window{SlotsBefore: 150, SlotsAfter: 9000, Skew: time.Minute, MaxDuration: time.Hour}

// Share is one stage's part of a job's earnings.
type Share struct {
	Stage  int       `json:"stage"`
	Node   PublicKey `json:"node"`
	Layers int       `json:"layers"`
	Tokens int64     `json:"tokens"`
	Amount int64     `json:"amount"`
}

// Verdict is Verify's answer: OK with every stage's share, or the reason
// the job's receipts were rejected (and nobody is paid).
type Verdict struct {
	OK     bool   `json:"ok"`
	Reason Reason `json:"reason"`
	// Stage is the stage whose receipt failed, or -1.
	Stage  int     `json:"stage"`
	Detail string  `json:"detail,omitempty"`
	Shares []Share `json:"shares,omitempty"`
}

// Err is nil for an accepted job, else a *RejectedError.
func (v Verdict) Err() error {
	if v.OK {
		return nil
	}
	return &RejectedError{Reason: v.Reason, Stage: v.Stage, Detail: v.Detail}
}

// RejectedError is a rejected job, for errors.As.
type RejectedError struct {
	Reason Reason
	Stage  int
	Detail string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("shard: job rejected: %s: %s", e.Reason, e.Detail)
}

func reject(reason Reason, stage int, format string, a ...any) Verdict {
	return Verdict{Reason: reason, Stage: stage, Detail: fmt.Sprintf(format, a...)}
}

// Verify settles a sharded job (the network's shard.verify): it checks the
// job against the plan and every stage receipt — signatures, that each
// signer is its stage's primary, that the ranges tile [0, layers), the
// nonce, token positions, the activation chain from the coordinator's input
// to its output, and each receipt's block and time window. Any failure
// rejects the whole job; success splits job.Earnings by layers × tokens.
func Verify(plan *Plan, job *Job, receipts []Receipt, w Window) Verdict {
	if err := plan.Check(); err != nil {
		return reject(ReasonBadPlan, -1, "%v", err)
	}
	if err := job.validFields(); err != nil {
		return reject(ReasonBadJob, -1, "%v", err)
	}
	if err := verifySig(job, "job"); err != nil {
		return reject(ReasonBadSignature, -1, "%v", err)
	}
	if job.Coordinator != plan.Coordinator {
		return reject(ReasonWrongSigner, -1, "job signed by %s, the plan's coordinator is %s", job.Coordinator, plan.Coordinator)
	}
	ph := plan.Hash()
	if job.Plan != ph {
		return reject(ReasonPlanMismatch, -1, "job names plan %s, verifying against %s", job.Plan, ph)
	}
	if job.Model != plan.Model {
		return reject(ReasonModelMismatch, -1, "job names model %s, plan is for %s", job.Model, plan.Model)
	}
	if len(receipts) == 0 {
		return reject(ReasonGap, -1, "no receipts")
	}
	for i := range receipts {
		r := &receipts[i]
		if err := r.validFields(); err != nil {
			return reject(ReasonMalformed, r.Stage, "receipt %d: %v", i, err)
		}
		if err := verifySig(r, "receipt"); err != nil {
			return reject(ReasonBadSignature, r.Stage, "receipt %d: %v", i, err)
		}
		if r.Job != job.ID {
			return reject(ReasonWrongJob, r.Stage, "receipt %d is for job %q, not %q", i, r.Job, job.ID)
		}
		if r.Plan != ph {
			return reject(ReasonPlanMismatch, r.Stage, "receipt %d names plan %s", i, r.Plan)
		}
		if r.Model != plan.Model {
			return reject(ReasonModelMismatch, r.Stage, "receipt %d names model %s", i, r.Model)
		}
		m, ok := plan.Primary(r.Stage)
		if !ok || m.Node != r.Signer {
			return reject(ReasonWrongSigner, r.Stage, "receipt %d is signed by %s, which is not the primary of stage %d", i, r.Signer, r.Stage)
		}
	}
	byStart := make([]*Receipt, len(receipts))
	for i := range receipts {
		byStart[i] = &receipts[i]
	}
	slices.SortStableFunc(byStart, func(a, b *Receipt) int {
		if a.LayerStart != b.LayerStart {
			return cmpInt(a.LayerStart, b.LayerStart)
		}
		return cmpInt(a.LayerEnd, b.LayerEnd)
	})
	next := 0
	for _, r := range byStart {
		if r.LayerStart > next {
			return reject(ReasonGap, r.Stage, "layers [%d,%d) are covered by no receipt", next, r.LayerStart)
		}
		if r.LayerStart < next {
			return reject(ReasonOverlap, r.Stage, "stage %d's [%d,%d) overlaps layers below %d", r.Stage, r.LayerStart, r.LayerEnd, next)
		}
		next = r.LayerEnd
	}
	if next < plan.Layers {
		return reject(ReasonGap, -1, "layers [%d,%d) are covered by no receipt", next, plan.Layers)
	}
	if next > plan.Layers {
		return reject(ReasonOverlap, -1, "receipts cover layers up to %d of %d", next, plan.Layers)
	}
	// The ranges tile and every signer is a primary; each stage has one
	// receipt iff each range is exactly its stage's.
	for _, r := range byStart {
		m, _ := plan.Primary(r.Stage)
		if r.LayerStart != m.LayerStart || r.LayerEnd != m.LayerEnd {
			return reject(ReasonRangeMismatch, r.Stage, "stage %d receipt covers [%d,%d), the plan gives it [%d,%d)", r.Stage, r.LayerStart, r.LayerEnd, m.LayerStart, m.LayerEnd)
		}
	}
	for _, r := range byStart {
		if r.Nonce != job.Nonce {
			return reject(ReasonStaleNonce, r.Stage, "stage %d receipt carries nonce %s, the job's is %s", r.Stage, r.Nonce, job.Nonce)
		}
		if r.TokenStart != job.TokenStart || r.TokenEnd != job.TokenEnd {
			return reject(ReasonTokenMismatch, r.Stage, "stage %d receipt covers tokens [%d,%d), the job [%d,%d)", r.Stage, r.TokenStart, r.TokenEnd, job.TokenStart, job.TokenEnd)
		}
	}
	// byStart is now stage order.
	prev := job.Input
	for _, r := range byStart {
		if r.Input != prev {
			return reject(ReasonBrokenChain, r.Stage, "stage %d took input %s, the previous hop sent %s", r.Stage, r.Input, prev)
		}
		prev = r.Output
	}
	if prev != job.Output {
		return reject(ReasonBrokenChain, len(byStart)-1, "the last stage sent %s, the coordinator received %s", prev, job.Output)
	}
	lo := job.Slot - min(job.Slot, w.SlotsBefore)
	hi := job.Slot + min(w.SlotsAfter, ^uint64(0)-job.Slot)
	early := job.Time - w.Skew.Milliseconds()
	late := job.Time + w.MaxDuration.Milliseconds()
	for _, r := range byStart {
		if r.Slot < lo || r.Slot > hi {
			return reject(ReasonBlockWindow, r.Stage, "stage %d receipt names slot %d, the window is [%d,%d]", r.Stage, r.Slot, lo, hi)
		}
		if w.Blocks != nil {
			if h, ok := w.Blocks.Blockhash(r.Slot); !ok || h != r.Blockhash {
				return reject(ReasonUnknownBlock, r.Stage, "stage %d receipt names blockhash %s, which is not slot %d's", r.Stage, r.Blockhash, r.Slot)
			}
		}
		if r.Time < early || r.Time > late {
			return reject(ReasonTimeWindow, r.Stage, "stage %d receipt is dated %d ms, the window is [%d,%d]", r.Stage, r.Time, early, late)
		}
	}
	shares, err := split(job.Earnings, byStart)
	if err != nil {
		return reject(ReasonNoEarningsUnit, -1, "%v", err)
	}
	return Verdict{OK: true, Reason: ReasonOK, Stage: -1, Shares: shares}
}

// split divides earnings by layers × tokens, in integer units: each stage
// gets the floor of its exact share, and the units left over go one each
// to the stages with the largest remainders, lower stage first on ties.
// The amounts always sum to earnings.
func split(earnings int64, rs []*Receipt) ([]Share, error) {
	shares := make([]Share, len(rs))
	var total uint64
	for i, r := range rs {
		tokens := r.TokenEnd - r.TokenStart
		shares[i] = Share{Stage: r.Stage, Node: r.Signer, Layers: r.LayerEnd - r.LayerStart, Tokens: tokens}
		hi, w := bits.Mul64(uint64(shares[i].Layers), uint64(tokens))
		var carry uint64
		total, carry = bits.Add64(total, w, 0)
		if hi != 0 || carry != 0 {
			return nil, fmt.Errorf("layers × tokens overflows")
		}
	}
	if total == 0 {
		return nil, fmt.Errorf("no layers × tokens to split by")
	}
	rem := make([]uint64, len(rs))
	var paid int64
	for i := range shares {
		w := uint64(shares[i].Layers) * uint64(shares[i].Tokens)
		hi, lo := bits.Mul64(uint64(earnings), w)
		// w ≤ total, so the quotient fits in 64 bits and hi < total.
		q, r := bits.Div64(hi, lo, total)
		shares[i].Amount = int64(q)
		rem[i] = r
		paid += int64(q)
	}
	left := earnings - paid // < len(rs)
	idx := make([]int, len(rs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		if rem[a] != rem[b] {
			if rem[a] > rem[b] {
				return -1
			}
			return 1
		}
		return cmpInt(shares[a].Stage, shares[b].Stage)
	})
	for _, i := range idx[:left] {
		shares[i].Amount++
	}
	return shares, nil
}
