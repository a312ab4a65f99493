// Package store holds the records the gateway keeps and the errors its
// stores return. The records carry metadata only: ids, counts, timings and
// hashes. Prompt and completion text never reach a store.
//
// Consumers declare the small interface they need (see functions/api and
// functions/dispatch); every implementation (embedded bbolt, DynamoDB) must
// pass the same conformance suite in functions/store/storetest.
package store

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Implementations wrap them with context; callers match them
// with errors.Is.
var (
	// ErrNotFound means the record does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrExists means a record with that key already exists.
	ErrExists = errors.New("store: already exists")
	// ErrConflict means a conditional write lost: another writer changed the
	// record first (a claimed worker, a job already assigned). It is the
	// normal "someone else won" path, not a failure of the store.
	ErrConflict = errors.New("store: conditional write lost")
	// ErrInsufficientCredits means the balance cannot pay the price.
	ErrInsufficientCredits = errors.New("store: insufficient credits")
	// ErrRateLimited means the key used its requests for the window.
	ErrRateLimited = errors.New("store: rate limit exceeded")
	// ErrRevoked means the API key or worker token was revoked.
	ErrRevoked = errors.New("store: revoked")
	// ErrLimit means an account already holds the maximum number of active
	// keys or worker tokens.
	ErrLimit = errors.New("store: limit reached")
	// ErrBanned means the worker identity or its worker token is banned.
	ErrBanned = errors.New("store: banned")
	// ErrExpired means the API key is past its ExpiresAt.
	ErrExpired = errors.New("store: expired")
	// ErrKeyLimit means the API key's spend in its period would pass its
	// Limit.
	ErrKeyLimit = errors.New("store: key spend limit reached")
	// ErrNotActive means a job's worker identity was quarantined or
	// banned before the job completed: its work is not accepted, and
	// earns nothing.
	ErrNotActive = errors.New("store: worker identity not in good standing")
)

// MaxActiveKeys is the most active API keys or worker tokens one account may
// hold at a time (SPEC: "at most 5 active per account").
const MaxActiveKeys = 5

// MinPayoutCredits is the smallest payout of a worker account's earnings
// (SPEC: $1).
const MinPayoutCredits = 100

// MaxConnsPerToken is the most live worker connections one worker token may
// hold: a contributor's GPUs share a token (several workerd processes, and
// each rolls its connection before API Gateway's 2 h cap, briefly holding
// two), but a token is not a licence to open thousands of connections,
// each a store record and a dispatch candidate.
const MaxConnsPerToken = 32

// Account is a user: a Solana wallet address with a credit balance.
// 1 credit = $0.01. All amounts are integers.
type Account struct {
	ID string `json:"id"`
	// Wallet is the payout wallet: the wallet the account signed in with
	// (its id), or another its owner proved by signing (SetWallet); never
	// a field a client sets. Earnings are paid here.
	Wallet         string `json:"wallet,omitempty"`
	Credits        int64  `json:"credits"`
	TotalDeposited int64  `json:"total_deposited"`
	TotalSpent     int64  `json:"total_spent"`
	// FreeAllowanceLeft is today's unspent staker allowance, drawn before
	// paid credits; AllowanceDay the day (DayOf) the keeper set it for
	// ("" for an allowance given otherwise, which has no day). A refund
	// gives the allowance part back only to the day it came from.
	FreeAllowanceLeft int64  `json:"free_allowance_left"`
	AllowanceDay      string `json:"allowance_day,omitempty"`
	// LastRequest is when the account last made a request that cost
	// something (from credits or the allowance): the staker allowance
	// goes to accounts active in the last 7 days.
	LastRequest time.Time `json:"last_request,omitzero"`
	// Earned is what this account's workers have earned, in credits.
	Earned int64 `json:"earned"`
	// PaidOut is the part of Earned paid out in USDC (or reserved for a
	// payout on its way).
	PaidOut int64 `json:"paid_out"`
	// StakeBoostUntil is when the stake boost ends: the keeper sets it each
	// day it reads enough matured stake in the payout wallet, so it lapses
	// unless renewed. Until then the account's workers earn the boosted
	// share.
	StakeBoostUntil time.Time `json:"stake_boost_until,omitzero"`
	// PayoutRequested is when the owner asked for its earnings to be paid
	// out before the daily payout (RequestPayout); a payout's reservation
	// clears it.
	PayoutRequested time.Time `json:"payout_requested,omitzero"`
	CreatedAt       time.Time `json:"created_at"`
}

// DayOf is the UTC day of t, as the keeper names days (2006-01-02).
func DayOf(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// AllowanceBack is what of a refunded job's allowance part goes back to
// account a: all of it while a's allowance is still that of the job's day
// (or has no day), nothing once the day has passed.
func AllowanceBack(a Account, j Job) int64 {
	if a.AllowanceDay == "" || a.AllowanceDay == DayOf(j.Created) {
		return j.FromAllowance
	}
	return 0
}

// Boosted reports whether the account's workers earn the boosted share at
// now.
func (a Account) Boosted(now time.Time) bool { return now.Before(a.StakeBoostUntil) }

// Secret is an API key or a worker token as stored: only the SHA-256 hash of
// the secret is kept.
type Secret struct {
	// Hash is the hex SHA-256 of the full secret string; it is the key.
	Hash string `json:"hash"`
	// ID is a short public id shown to the owner (a prefix of the hash).
	ID        string    `json:"id"`
	AccountID string    `json:"account_id"`
	CreatedAt time.Time `json:"created_at"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	// Name is the owner's label for it.
	Name string `json:"name,omitempty"`

	// The spend controls of an API key (a worker token has none).
	//
	// Limit caps what the key may spend, in credits, in each LimitReset
	// period (a Reset* value; "" is all time); 0 is no cap. ExpiresAt
	// ends the key; zero is never.
	Limit      int64     `json:"limit,omitempty"`
	LimitReset string    `json:"limit_reset,omitempty"`
	ExpiresAt  time.Time `json:"expires_at,omitzero"`
	// Usage is what the key spent, all time, in credits, refunds taken
	// back out. PeriodUsage is the part of it in Period, the PeriodOf
	// key of the last period it spent in.
	Usage       int64  `json:"usage,omitempty"`
	PeriodUsage int64  `json:"period_usage,omitempty"`
	Period      string `json:"period,omitempty"`
}

// Active reports whether the secret may still be used (expiry aside: see
// Expired).
func (s Secret) Active() bool { return s.RevokedAt.IsZero() }

// Expired reports whether an API key is past its ExpiresAt at now.
func (s Secret) Expired(now time.Time) bool { return !s.ExpiresAt.IsZero() && !now.Before(s.ExpiresAt) }

// Spent is what the key spent in the period of now.
func (s Secret) Spent(now time.Time) int64 {
	if s.Period != PeriodOf(s.LimitReset, now) {
		return 0
	}
	return s.PeriodUsage
}

// Limit reset periods (UTC; a week starts on Monday, ISO 8601).
const (
	ResetDaily   = "daily"
	ResetWeekly  = "weekly"
	ResetMonthly = "monthly"
)

// PeriodOf is the key of the reset period containing t: "2026-12-01"
// daily, "2026-W49" weekly, "2026-12" monthly, "" for a limit that never
// resets.
func PeriodOf(reset string, t time.Time) string {
	t = t.UTC()
	switch reset {
	case ResetDaily:
		return t.Format(time.DateOnly)
	case ResetWeekly:
		y, w := t.ISOWeek()
		return fmt.Sprintf("%d-W%02d", y, w)
	case ResetMonthly:
		return t.Format("2006-01")
	}
	return ""
}

// CheckSpendControls reports whether an API key's Limit and LimitReset
// may be stored: the limit not negative, the reset "" or a Reset* value.
func CheckSpendControls(limit int64, reset string) error {
	if limit < 0 {
		return fmt.Errorf("negative key limit %d", limit)
	}
	switch reset {
	case "", ResetDaily, ResetWeekly, ResetMonthly:
		return nil
	}
	return fmt.Errorf("unknown limit reset %q", reset)
}

// Fresh is s as PutAPIKey (apiKey) or PutWorkerToken stores it: usage at
// 0 and, for a worker token, no spend controls. The error says the
// controls are not valid (CheckSpendControls).
func (s Secret) Fresh(apiKey bool) (Secret, error) {
	s.Usage, s.PeriodUsage, s.Period = 0, 0, ""
	if !apiKey {
		s.Limit, s.LimitReset, s.ExpiresAt = 0, "", time.Time{}
	}
	return s, CheckSpendControls(s.Limit, s.LimitReset)
}

// KeyPatch changes an API key's name and spend controls; a nil field is
// left as it is. A zero Limit removes the cap, a zero ExpiresAt the expiry.
type KeyPatch struct {
	Name       *string
	Limit      *int64
	LimitReset *string
	ExpiresAt  *time.Time
}

// Apply changes s as p says (usage and period stay: Spent reads a period
// that no longer matches the reset as nothing spent).
func (p KeyPatch) Apply(s *Secret) {
	if p.Name != nil {
		s.Name = *p.Name
	}
	if p.Limit != nil {
		s.Limit = *p.Limit
	}
	if p.LimitReset != nil {
		s.LimitReset = *p.LimitReset
	}
	if p.ExpiresAt != nil {
		s.ExpiresAt = *p.ExpiresAt
	}
}

// Check reports whether the key p would make may be stored (see
// CheckSpendControls); only the fields p sets are checked.
func (p KeyPatch) Check() error {
	var s Secret
	p.Apply(&s)
	return CheckSpendControls(s.Limit, s.LimitReset)
}

// JobState is a job's place in its life. Transitions:
//
//	queued → assigned → done
//	queued → failed              (queue wait expired, client gone)
//	assigned → queued            (worker lost before the first token)
//	assigned → failed            (worker lost after, timeout, worker error)
type JobState string

// Job states.
const (
	JobQueued   JobState = "queued"
	JobAssigned JobState = "assigned"
	JobDone     JobState = "done"
	JobFailed   JobState = "failed"
)

// Job is one paid request. It never holds the prompt or the completion.
type Job struct {
	ID        string `json:"id"`
	AccountID string `json:"account_id"`
	Model     string `json:"model"`
	// Price is what was debited, in credits.
	Price int64 `json:"price"`
	// FromAllowance is the part of Price drawn from the free allowance; a
	// refund returns it there.
	FromAllowance int64    `json:"from_allowance,omitempty"`
	State         JobState `json:"state"`
	// Listener is the relay connection of the API instance that holds the
	// prompt in memory and streams the reply to the client.
	Listener string `json:"listener"`
	// Worker is the relay connection the job is assigned to, if any.
	Worker string `json:"worker,omitempty"`
	// WorkerAccount is the account of the worker the job is assigned to,
	// recorded by Assign so that Complete can pay the worker even after its
	// connection (and record) is gone.
	WorkerAccount string `json:"worker_account,omitempty"`
	// WorkerPubkey is the identity pubkey (base58) of the worker the job
	// is assigned to, recorded by Assign from the worker's record, so that
	// the gateway checks the job's receipt against the key the worker
	// connected with without reading the worker again.
	WorkerPubkey string    `json:"worker_pubkey,omitempty"`
	Attempts     int       `json:"attempts"`
	Created      time.Time `json:"created"`
	Updated      time.Time `json:"updated"`
	// Refunded is set once the price went back to the account.
	Refunded bool `json:"refunded,omitempty"`
	// FailReason is a short machine code, never user text.
	FailReason       string `json:"fail_reason,omitempty"`
	PromptTokens     int64  `json:"prompt_tokens,omitempty"`
	CompletionTokens int64  `json:"completion_tokens,omitempty"`
	// Canary marks a job the gateway made itself to check a worker's work
	// (functions/canary). Workers never see it; dispatch gives a
	// quarantined worker canaries and nothing else.
	Canary bool `json:"canary,omitempty"`
	// Target, when set, is the only worker connection the job may be
	// assigned to: a canary aimed at the worker under test.
	Target string `json:"target,omitempty"`
	// Needs is what a worker must support to serve the job.
	Needs Needs `json:"needs,omitzero"`
	// KeyHash is the API key the job was admitted with, whose usage a
	// refund takes back.
	KeyHash string `json:"key_hash,omitempty"`
}

// Paid is the part of the job's price paid from credits, not from the
// free allowance.
func (j Job) Paid() int64 { return j.Price - j.FromAllowance }

// Needs is what a request asks of the worker that serves it.
type Needs struct {
	Vision         bool `json:"vision,omitempty"`
	Tools          bool `json:"tools,omitempty"`
	ResponseFormat bool `json:"response_format,omitempty"`
	// Context is the fewest context tokens the request's prompt needs,
	// estimated from its bytes (functions/api's needsOf); 0 means no need
	// known.
	Context int64 `json:"context,omitempty"`
	// Image is an image job's: only a worker whose backend renders the
	// model's images serves it.
	Image bool `json:"image,omitempty"`
}

// Caps is what a worker's backend supports for one model, as the worker
// registered it. A worker that registered none for a model serves plain
// chat only (no vision, tools or response_format; context unknown).
type Caps struct {
	Vision         bool `json:"vision,omitempty"`
	Tools          bool `json:"tools,omitempty"`
	ResponseFormat bool `json:"response_format,omitempty"`
	// Context is the model's context length in tokens; 0 is unknown,
	// which serves any need.
	Context int64 `json:"context,omitempty"`
	// Image says the backend renders the model's images.
	Image bool `json:"image,omitempty"`
}

// Serves reports whether a worker with these capabilities can serve a job
// with needs n.
func (c Caps) Serves(n Needs) bool {
	return (!n.Vision || c.Vision) && (!n.Tools || c.Tools) && (!n.ResponseFormat || c.ResponseFormat) &&
		(c.Context == 0 || n.Context <= c.Context) && (!n.Image || c.Image)
}

// RegisteredCaps is caps restricted to models, the capabilities
// RegisterWorker stores; nil when none is left.
func RegisteredCaps(models []string, caps map[string]Caps) map[string]Caps {
	var out map[string]Caps
	for _, m := range models {
		if c, ok := caps[m]; ok {
			if out == nil {
				out = map[string]Caps{}
			}
			out[m] = c
		}
	}
	return out
}

// WorkerState says whether a worker can take a job.
type WorkerState string

// Worker states.
const (
	WorkerIdle WorkerState = "idle"
	WorkerBusy WorkerState = "busy"
)

// Worker is one live workerd connection.
type Worker struct {
	// Conn is the relay connection id; it is the key.
	Conn      string `json:"conn"`
	AccountID string `json:"account_id"`
	// TokenHash is the hash of the worker token it connected with, so that
	// revoking the token finds its live connections.
	TokenHash string `json:"token_hash"`
	// Pubkey is the worker's ed25519 identity (its Solana payout wallet),
	// base58.
	Pubkey string      `json:"pubkey"`
	Models []string    `json:"models"`
	State  WorkerState `json:"state"`
	Job    string      `json:"job,omitempty"`
	// MilliTokPerSec is the gateway-measured decode speed in thousandths
	// of a token per second; 0 until the first job completes.
	MilliTokPerSec int64 `json:"milli_tok_per_sec"`
	Registered     bool  `json:"registered"`
	// Draining workers finish their job but take no new one: they are
	// rolling their connection or shutting down.
	Draining    bool      `json:"draining,omitempty"`
	ConnectedAt time.Time `json:"connected_at"`
	// Caps are the capabilities the worker registered, per model id.
	Caps map[string]Caps `json:"caps,omitempty"`
	// Standing is the worse of its identity's and its token's standing
	// (active or quarantined: a banned one cannot connect), as of its
	// connect and every verdict on this connection since; Strikes are
	// its identity's. Dispatch reads them: a quarantined worker gets
	// canaries only, and strikes lower its weight.
	Standing Standing `json:"standing,omitempty"`
	Strikes  int64    `json:"strikes,omitempty"`
}

// Serves reports whether the worker registered the model.
func (w Worker) Serves(model string) bool {
	for _, m := range w.Models {
		if m == model {
			return true
		}
	}
	return false
}

// CanServe reports whether the worker registered the model with the
// capabilities a job needs.
func (w Worker) CanServe(model string, n Needs) bool {
	return w.Serves(model) && w.Caps[model].Serves(n)
}

// Quarantined reports whether the worker may take canaries only.
func (w Worker) Quarantined() bool {
	return w.Standing == StandingQuarantined || w.Standing == StandingBanned
}

// Listener is an API instance's relay connection.
type Listener struct {
	Conn        string    `json:"conn"`
	ConnectedAt time.Time `json:"connected_at"`
}

// AdmitRequest is everything the hot path changes in one atomic step before
// dispatch: the key's and the account's rate-limit windows, the debit and
// the queued job.
type AdmitRequest struct {
	KeyHash string
	// Window is the start of the rate-limit window; Limit is the key's
	// request cap in it.
	Window time.Time
	Limit  int64
	// AccountLimit caps the requests of all the account's keys together
	// in Window, so that minting keys does not multiply the rate; 0 means
	// no account-wide cap.
	AccountLimit int64
	Job          Job
}

// Admission is what Admit did: the job as stored and the requests counted
// in the window, this one included, for the rate-limit headers.
type Admission struct {
	Job Job
	// KeyRequests and AccountRequests are the requests the key and the
	// account have made in the window, this one included. A store shared
	// by several processes may report a lower bound (the DynamoDB store
	// counts the requests its own process admitted: a transaction returns
	// nothing on success); the limits themselves are always exact.
	KeyRequests     int64
	AccountRequests int64
}

// Completion is what a finished job reports.
type Completion struct {
	JobID            string
	Worker           string
	PromptTokens     int64
	CompletionTokens int64
	// MilliTokPerSec is the decode speed the gateway measured, or 0 when it
	// could not be measured (too few tokens).
	MilliTokPerSec int64
	// Earning is the worker account's share, in credits.
	Earning int64
	At      time.Time
	// Receipt is the worker's signed receipt of the job, verified by the
	// gateway; it is stored with the completion, in the same write. Nil
	// stores none.
	Receipt *Receipt
	// Shares, when set, split Earning between the accounts of the ring
	// of workers that served the job (a sharded model's stages): each
	// account is credited its shares, in the same write, and
	// Job.WorkerAccount (the ring's coordinator) only what a share names
	// it for. CheckShares says which splits are accepted. Empty credits
	// Earning to Job.WorkerAccount.
	Shares []Share
}

// MaxShares is the most Shares one Completion may carry: a ring of up to
// 32 stages. On DynamoDB a completion is one transaction, of at most 100
// items: the job, the coordinator identity's reputation, the receipt, the
// worker and the two completion counters (6), and for shares one ledger
// entry each and one earnings shard per account (at most 64), so 70 at
// most.
const MaxShares = 32

// maxShareField is the longest Share.Account or Share.Pubkey accepted: an
// account id or a base58 ed25519 key is 44 characters at most, and both
// end up in keys of the store.
const maxShareField = 128

// Share is one stage's part of a ring job's earning, in credits: the
// gateway checks every stage's signed receipt (functions/shard.Verify),
// splits the earning by the work each did, and Complete credits each part
// to its stage's account.
type Share struct {
	// Account is the stage's worker account, credited Amount.
	Account string `json:"account"`
	// Pubkey is the stage's worker identity, base58. It names the share's
	// ledger entry, so the account's operator sees which of its workers
	// earned it.
	Pubkey string `json:"pubkey"`
	Amount int64  `json:"amount"`
}

// CheckShares reports whether c's Shares may be credited: at most
// MaxShares, each naming an account and an identity, none negative, and
// adding up to Earning exactly (so a split neither mints nor keeps a
// credit). No shares is valid: Earning goes to the job's worker account.
func (c Completion) CheckShares() error {
	if len(c.Shares) == 0 {
		return nil
	}
	if len(c.Shares) > MaxShares {
		return fmt.Errorf("%d shares, at most %d: a ring of more stages cannot be paid in one completion", len(c.Shares), MaxShares)
	}
	var sum int64
	for i, sh := range c.Shares {
		switch {
		case sh.Account == "":
			return fmt.Errorf("share %d (identity %q) names no account: give the stage's worker account", i, sh.Pubkey)
		case sh.Pubkey == "":
			return fmt.Errorf("share %d (account %s) names no identity: give the stage's worker pubkey", i, sh.Account)
		case len(sh.Account) > maxShareField || len(sh.Pubkey) > maxShareField:
			return fmt.Errorf("share %d: account or identity longer than %d bytes", i, maxShareField)
		case sh.Amount < 0:
			return fmt.Errorf("share %d (account %s) is negative: %d credits", i, sh.Account, sh.Amount)
		case sh.Amount > c.Earning-sum: // sum ≤ Earning so far: no overflow
			return fmt.Errorf("shares add up to more than the earning %d by share %d: split the earning exactly", c.Earning, i)
		}
		sum += sh.Amount
	}
	if sum != c.Earning {
		return fmt.Errorf("shares add up to %d, the earning is %d: split the earning exactly", sum, c.Earning)
	}
	return nil
}

// IdentityEarning is what c pays the worker identity pubkey of account:
// all of Earning without shares, else the shares naming both. A ring's
// coordinator is counted in its reputation for its own part only, so an
// identity's earnings never show credits that went to other accounts.
func (c Completion) IdentityEarning(account, pubkey string) int64 {
	if len(c.Shares) == 0 {
		return c.Earning
	}
	var e int64
	for _, sh := range c.Shares {
		if sh.Account == account && sh.Pubkey == pubkey {
			e += sh.Amount
		}
	}
	return e
}

// Receipt is a worker's signed receipt of a completed job, as the worker
// signed it (see relaymsg.Receipt, whose fields these are): ids, hashes,
// counts and timings, never text. It is kept so that the job's owner can
// fetch it and verify the signature offline.
type Receipt struct {
	JobID string `json:"job"`
	// AccountID is the account that paid for the job, the one that may
	// read the receipt; the store sets it from the job.
	AccountID        string `json:"account_id"`
	WorkerPubkey     string `json:"worker"`
	Model            string `json:"model"`
	ModelDigest      string `json:"model_digest"`
	RequestSHA256    string `json:"request_sha256"`
	OutputSHA256     string `json:"output_sha256"`
	Deltas           int64  `json:"deltas"`
	PromptTokens     int64  `json:"prompt_tokens"`
	CompletionTokens int64  `json:"completion_tokens"`
	FirstTokenMillis int64  `json:"first_token_ms"`
	TotalMillis      int64  `json:"total_ms"`
	Signature        string `json:"signature"`
}

// SeenMemory is how long at least a store remembers that a worker served
// a model (Stats.RecentModels).
const SeenMemory = time.Hour

// Stats are network-wide figures for GET /v1/stats. Every store keeps them
// as counters that change in the same atomic write as the state they count,
// so reading them costs the same however large the network.
type Stats struct {
	// WorkersOnline counts connected workers, registered or not.
	WorkersOnline int64 `json:"workers_online"`
	// WorkersByModel counts the registered workers serving each model
	// (draining ones too, until they disconnect); QueueByModel the queued
	// jobs of each model. A model with none is left out.
	WorkersByModel map[string]int64 `json:"workers_by_model"`
	QueueByModel   map[string]int64 `json:"queue_by_model"`
	// RecentModels holds the models a registered worker served within
	// SeenMemory at least (the store may remember longer): a model none
	// serves now but one did lately is worth waiting for, one nobody
	// served lately is not.
	RecentModels  map[string]bool `json:"recent_models,omitempty"`
	JobsCompleted int64           `json:"jobs_completed"`
	TokensServed  int64           `json:"tokens_served"`
	// TokensLastMinute is the completion tokens of jobs finished in the
	// last full minute.
	TokensLastMinute int64 `json:"tokens_last_minute"`
}
