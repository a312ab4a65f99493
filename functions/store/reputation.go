package store

import (
	"errors"
	"fmt"
	"time"
)

// Standing is where a worker identity, or a worker token, stands with the
// gateway.
type Standing string

// Standings. A new identity or token is active. Strikes move it:
//
//	active → quarantined      strikes reach QuarantineStrikes
//	quarantined → active      passed canaries bring strikes back to 0
//	any → banned              strikes reach BanStrikes; a ban is for good
//
// A quarantined worker gets canaries only (no real job, so no user's
// prompt); a banned one cannot connect.
const (
	StandingActive      Standing = "active"
	StandingQuarantined Standing = "quarantined"
	StandingBanned      Standing = "banned"
)

// Strike thresholds and the trust a passed canary earns back.
const (
	// QuarantineStrikes puts an identity in quarantine: one failed canary
	// (CanaryStrikes) or three rejected jobs.
	QuarantineStrikes = 3
	// BanStrikes bans an identity: it kept failing in quarantine.
	BanStrikes = 9
	// CanaryCredit is the strikes one passed canary takes back.
	CanaryCredit = 2
	// BanCanaryFailures bans an identity that failed this many canaries
	// while failing more than one in four of them, whatever its strikes.
	BanCanaryFailures = 4
	// TokenQuarantineStrikes quarantines a worker token, and with it
	// every identity that connects on it, new ones included: the strikes
	// of all the token's identities together. Minting a fresh identity
	// key does not wipe a token's record.
	TokenQuarantineStrikes = 2 * QuarantineStrikes
)

// Strike weights of the checks (see functions/api's checks and
// functions/canary). A reply that merely looks wrong (one a request could
// ask for) weighs nothing: its worker gets a canary instead.
const (
	// CanaryStrikes is a failed canary: a wrong answer to a question with
	// a known answer, or a greedy reply unlike the reference's.
	CanaryStrikes = 3
	// ProofStrikes is work that cannot be real: a reply the worker's own
	// receipt contradicts, usage claims that no reply of that size has,
	// a speed no hardware reaches.
	ProofStrikes = 3
)

// VerdictKind is what a verdict found.
type VerdictKind string

// Verdict kinds. A real job that passes every check is recorded by
// Complete, not by a verdict.
const (
	// VerdictRejected is a real job a check rejected: no earning, and
	// the job was moved or refunded.
	VerdictRejected VerdictKind = "rejected"
	// VerdictCanaryPassed is a canary whose answer checked out: the
	// canary's earning is credited, and CanaryCredit strikes go.
	VerdictCanaryPassed VerdictKind = "canary_passed"
	// VerdictCanaryFailed is a canary answered wrong.
	VerdictCanaryFailed VerdictKind = "canary_failed"
)

// Verdict is the gateway's judgement of one job's work by one worker
// identity. Judge applies it once per (JobID, Pubkey).
type Verdict struct {
	JobID string
	// Conn is the worker's connection: its live record, if it still
	// exists, takes the new standing at once. Other live connections of
	// the same identity take it on their next connect.
	Conn      string
	Pubkey    string
	AccountID string
	TokenHash string
	Kind      VerdictKind
	// Strikes is the weight of a rejection or a failed canary; a passed
	// canary takes CanaryCredit back whatever it says.
	Strikes int64
	// Reason is a short machine code (never text from a reply).
	Reason string
	// Earning is credited to AccountID for a passed canary (canaries
	// complete without one, and earn when their answer is judged).
	Earning int64
	At      time.Time
}

// Check reports what makes a verdict impossible to apply: no job id,
// pubkey or account (a verdict is applied once per job and pubkey, to an
// identity on an account), an unknown kind or a negative earning.
func (v Verdict) Check() error {
	switch {
	case v.JobID == "" || v.Pubkey == "" || v.AccountID == "":
		return errors.New("verdict without a job id, pubkey or account")
	case v.Kind != VerdictRejected && v.Kind != VerdictCanaryPassed && v.Kind != VerdictCanaryFailed:
		return fmt.Errorf("unknown verdict kind %q", v.Kind)
	case v.Earning < 0:
		return fmt.Errorf("negative earning %d", v.Earning)
	}
	return nil
}

// Reputation is what the gateway knows of one worker identity (an ed25519
// pubkey) on one account: counts, strikes and the standing they give.
type Reputation struct {
	Pubkey    string `json:"pubkey"`
	AccountID string `json:"account_id"`
	// TokenHash is the worker token it last connected with.
	TokenHash string   `json:"token_hash"`
	Standing  Standing `json:"standing"`
	Strikes   int64    `json:"strikes"`
	// Trusted identities are the operator's reference workers: their
	// canary answers are the reference others are compared with.
	Trusted        bool  `json:"trusted,omitempty"`
	JobsCompleted  int64 `json:"jobs_completed"`
	JobsRejected   int64 `json:"jobs_rejected"`
	CanariesPassed int64 `json:"canaries_passed"`
	CanariesFailed int64 `json:"canaries_failed"`
	// EarnedCredits is what this identity's jobs and canaries earned.
	EarnedCredits int64 `json:"earned_credits"`
	// MilliTokPerSec is the speed the gateway last measured.
	MilliTokPerSec int64 `json:"milli_tok_per_sec"`
	// LastReason is the reason code of the last strike.
	LastReason string    `json:"last_reason,omitempty"`
	FirstSeen  time.Time `json:"first_seen"`
	LastSeen   time.Time `json:"last_seen"`
}

// Judged returns r after verdict v, without the counts Complete keeps:
// the policy both stores apply (the conformance suite holds them to it).
func (r Reputation) Judged(v Verdict) Reputation {
	switch v.Kind {
	case VerdictRejected:
		r.JobsRejected++
		r.Strikes += max(v.Strikes, 0)
		r.LastReason = v.Reason
	case VerdictCanaryFailed:
		r.CanariesFailed++
		r.Strikes += max(v.Strikes, 0)
		r.LastReason = v.Reason
	case VerdictCanaryPassed:
		r.CanariesPassed++
		r.Strikes = max(r.Strikes-CanaryCredit, 0)
		if r.Standing != StandingBanned {
			// A canary that was in flight when its worker was banned
			// passes, but earns a banned identity nothing.
			r.EarnedCredits += max(v.Earning, 0)
		}
	}
	r.Standing = StandingAfter(r.Standing, r.Strikes, QuarantineStrikes)
	if r.CanariesFailed >= BanCanaryFailures && 3*r.CanariesFailed > r.CanariesPassed {
		// Passed canaries lift a quarantine, so a cheater could fail,
		// pass its way out and cheat again for ever without reaching
		// BanStrikes: failing canaries again and again is a ban.
		r.Standing = StandingBanned
	}
	return r
}

// StandingAfter is the standing an identity (quarantine at
// QuarantineStrikes) or a token (at TokenQuarantineStrikes) has with
// strikes, coming from standing from.
func StandingAfter(from Standing, strikes, quarantineAt int64) Standing {
	switch {
	case from == StandingBanned || strikes >= BanStrikes:
		return StandingBanned
	case strikes >= quarantineAt:
		return StandingQuarantined
	case from == StandingQuarantined && strikes > 0:
		return StandingQuarantined // trust comes back in full, or not at all
	default:
		return StandingActive
	}
}

// Worse is the worse of two standings.
func Worse(a, b Standing) Standing {
	rank := func(s Standing) int {
		switch s {
		case StandingBanned:
			return 2
		case StandingQuarantined:
			return 1
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	if a == "" {
		return StandingActive
	}
	return a
}

// TokenStanding is a worker token's standing after one of its identities
// was judged: banned with the identity, else quarantined while the strikes
// of all its identities together (tokenStrikes) say so, with the same
// hysteresis as an identity's. Strikes alone never ban a token: a
// contributor's other GPUs are not banned for one bad machine, only for a
// banned one.
func TokenStanding(from Standing, tokenStrikes int64, identity Standing) Standing {
	if from == StandingBanned || identity == StandingBanned {
		return StandingBanned
	}
	switch {
	case tokenStrikes >= TokenQuarantineStrikes:
		return StandingQuarantined
	case from == StandingQuarantined && tokenStrikes > 0:
		return StandingQuarantined
	default:
		return StandingActive
	}
}

// TokenJudged is a worker token's standing and strikes after one of its
// identities was judged, going from before to after: the token takes the
// strikes the identity took (a rejection's, a failed canary's) and gives
// back those a passed canary actually took back from it, never going below
// 0; its standing follows TokenStanding.
func TokenJudged(standing Standing, strikes int64, before, after Reputation) (Standing, int64) {
	strikes = max(strikes+after.Strikes-before.Strikes, 0)
	return TokenStanding(standing, strikes, after.Standing), strikes
}
