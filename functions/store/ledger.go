package store

import (
	"context"
	"time"
)

// The keeper's ledger: every on-chain transfer the keeper makes (staker
// rewards, auto-compound stakes, worker payouts, buyback and burn) is
// recorded with an idempotency key before it is signed, and its signature
// is recorded before it is sent. A keeper that crashes anywhere re-runs the
// same run from the ledger: a transfer holding a signature is resolved by
// looking the signature up on-chain, never sent again blindly, so nobody is
// paid twice.
//
// A run's life:
//
//	StartRun → ResetPlan, AddTransfers… → SealPlan → MarkSent/Settle… → FinishRun
//
// Until SealPlan the plan may be rebuilt from scratch (nothing was sent);
// after it the plan is fixed and only transfer states move.

// RunState is a keeper run's place in its life.
type RunState string

// Run states.
const (
	// RunPlanning: the plan is being written; nothing was sent.
	RunPlanning RunState = "planning"
	// RunSealed: the plan is complete and fixed; transfers are being sent.
	RunSealed RunState = "sealed"
	// RunDone: every transfer is settled and the carries are written.
	RunDone RunState = "done"
)

// KeeperRun is one scheduled keeper run, e.g. the staker rewards of one
// day. Its ID names the job and the day ("rewards/2026-11-29").
type KeeperRun struct {
	ID    string   `json:"id"`
	State RunState `json:"state"`
	// Transfers is the number of transfers SealPlan fixed.
	Transfers int `json:"transfers"`
	// Summary is a short machine-readable description of the plan (totals),
	// for operators; never user text.
	Summary   string    `json:"summary,omitempty"`
	Created   time.Time `json:"created"`
	Updated   time.Time `json:"updated"`
	Completed time.Time `json:"completed,omitzero"`
}

// TransferState is a transfer's place in its life. Transitions:
//
//	planned → sent → confirmed
//	               → failed
//	          sent → sent       (re-signed after its blockhash expired unseen)
type TransferState string

// Transfer states.
const (
	TransferPlanned   TransferState = "planned"
	TransferSent      TransferState = "sent"
	TransferConfirmed TransferState = "confirmed"
	TransferFailed    TransferState = "failed"
)

// Transfer is one on-chain movement of tokens the keeper owes. Amounts are
// integer base units of Mint.
type Transfer struct {
	// Key is the idempotency key, unique across all runs
	// ("rewards/2026-11-29/reward/<wallet>").
	Key string `json:"key"`
	Run string `json:"run"`
	// Seq orders a run's transfers; RunTransfers returns them by Seq.
	Seq int `json:"seq"`
	// Kind says what the transfer is for: "reward", "compound", "payout",
	// "buyback", "burn", ….
	Kind      string        `json:"kind"`
	Recipient string        `json:"recipient"`
	Mint      string        `json:"mint"`
	Amount    int64         `json:"amount"`
	State     TransferState `json:"state"`
	// Signature is the transaction the transfer was last sent in, recorded
	// before the send; LastValidBlockHeight is its blockhash's, after which
	// a transaction not found can never land.
	Signature            string `json:"signature,omitempty"`
	LastValidBlockHeight uint64 `json:"last_valid_block_height,omitempty"`
	Attempts             int    `json:"attempts"`
	// Reason is a short machine code for a failed transfer.
	Reason  string    `json:"reason,omitempty"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

// MaxTransfersPerAdd is the most transfers one AddTransfers call takes: with
// their index entries and the run's count they fit one DynamoDB transaction
// (100 items).
const MaxTransfersPerAdd = 49

// Ledger is the keeper's crash-safe record. Every method is one atomic
// write (or read).
type Ledger interface {
	// StartRun stores r (State RunPlanning) unless a run with its ID
	// exists, and returns the run as stored; created is false when it
	// already existed.
	StartRun(ctx context.Context, r KeeperRun) (stored KeeperRun, created bool, err error)
	// GetRun returns a run; ErrNotFound.
	GetRun(ctx context.Context, id string) (KeeperRun, error)
	// OpenRuns lists the runs not done (planning or sealed) whose id
	// starts with prefix, by id.
	OpenRuns(ctx context.Context, prefix string) ([]KeeperRun, error)
	// ResetPlan deletes every transfer of a planning run, so that a plan
	// interrupted half-written is rebuilt from scratch. ErrConflict if the
	// run is sealed or done; ErrNotFound if it does not exist.
	ResetPlan(ctx context.Context, run string) error
	// AddTransfers stores planned transfers of a planning run (State
	// TransferPlanned, Run set). ErrConflict if the run is sealed or done;
	// ErrExists if a key is already stored (in this run or another): a
	// key is never reused. At most MaxTransfersPerAdd transfers a call.
	AddTransfers(ctx context.Context, run string, ts []Transfer, at time.Time) error
	// SealPlan fixes the plan: ErrConflict unless the run is planning and
	// holds exactly count transfers (a plan written only in part is never
	// sealed). Sealing a sealed run with the same count is nil.
	SealPlan(ctx context.Context, run string, count int, summary string, at time.Time) error
	// RunTransfers lists a run's transfers by Seq.
	RunTransfers(ctx context.Context, run string) ([]Transfer, error)
	// GetTransfer returns a transfer by its key; ErrNotFound.
	GetTransfer(ctx context.Context, key string) (Transfer, error)
	// MarkSent records, before the send, that the transfers keys go out in
	// transaction sig, valid until lastValid. Each must be planned (prev
	// "") or sent under prev; otherwise ErrConflict and nothing changes.
	// The run must be sealed (ErrConflict).
	MarkSent(ctx context.Context, keys []string, prev, sig string, lastValid uint64, at time.Time) error
	// Settle marks transfers sent under sig as TransferConfirmed or
	// TransferFailed (with reason). Settling again to the same state is
	// nil; a transfer under another signature, or settled otherwise, is
	// ErrConflict and nothing changes.
	Settle(ctx context.Context, keys []string, sig string, state TransferState, reason string, at time.Time) error
	// FinishRun marks a sealed run done and writes carries (name → value)
	// in the same write, so a remainder is carried exactly once. Finishing
	// a done run is nil and changes nothing.
	FinishRun(ctx context.Context, run string, carries map[string]int64, at time.Time) error
	// Carry returns a carried value, 0 if none was ever written.
	Carry(ctx context.Context, name string) (int64, error)
	// SetDailyAllowance sets an account's FreeAllowanceLeft to credits
	// and its AllowanceDay to day, once per (account, day); applied is false when that day's allowance
	// was already set, and nothing changes. ErrNotFound if the account
	// does not exist.
	SetDailyAllowance(ctx context.Context, accountID, day string, credits int64) (applied bool, err error)
	// AllowanceAccounts lists the accounts SetDailyAllowance gave a
	// positive allowance for day, by id: those the next day resets.
	AllowanceAccounts(ctx context.Context, day string) ([]string, error)
}

// Owed is a worker account's earnings not yet paid out, in credits.
type Owed struct {
	AccountID string `json:"account_id"`
	Wallet    string `json:"wallet"`
	Credits   int64  `json:"credits"`
	// Requested says the owner asked for a payout (Account.PayoutRequested).
	Requested bool `json:"requested,omitempty"`
}

// Earnings is what the keeper's worker payouts read and move: what an
// account's workers earned (Account.Earned) against what was paid out
// (Account.PaidOut).
type Earnings interface {
	// OwedEarnings lists the accounts whose Earned - PaidOut is at least
	// min credits (min at least 1), by account id.
	OwedEarnings(ctx context.Context, min int64) ([]Owed, error)
	// AdjustPaidOut adds delta to an account's PaidOut once per
	// idempotency key: a payout reserves what it sends (delta > 0, which
	// also clears PayoutRequested), a payout that failed gives it back
	// (delta < 0). applied is false when
	// the key was used, and nothing changes. ErrInsufficientCredits if
	// PaidOut would exceed Earned or fall below 0; ErrNotFound if there is
	// no such account.
	AdjustPaidOut(ctx context.Context, accountID string, delta int64, key string) (applied bool, err error)
	// MoneyTotals returns the network's running money totals (see Money).
	MoneyTotals(ctx context.Context) (Money, error)
	// RequestPayout marks that the account's owner asked for its earnings
	// now (PayoutRequested, kept if already set) and returns the account;
	// ErrNotFound.
	RequestPayout(ctx context.Context, accountID string, at time.Time) (Account, error)
}

// Money is the network's running totals of credits, kept by the store in
// the same atomic write as every move it counts, so that what the treasury
// owes and what the network earned are read from a few counters, never by
// summing accounts. They start at zero with the store.
//
// A job's price counts here only when the job ends: the paid part of a job
// done, or failed without a refund, is Recognized; a job still running is
// still owed to its customer (it may yet be refunded). The free allowance
// is no one's money and counts nowhere; the earnings of the jobs it paid
// for do.
type Money struct {
	// Deposited is credits bought on-chain (Grant with deposit, CreditDeposit).
	Deposited int64 `json:"deposited"`
	// Granted is credits given (Grant without deposit: the canary budget,
	// an operator's grant, dev credits): owed like bought ones, but
	// backed by nothing, so the network pays for them.
	Granted int64 `json:"granted"`
	// Recognized is the paid credits (Price - FromAllowance) of jobs that
	// ended and were not refunded.
	Recognized int64 `json:"recognized"`
	// Earned is workers' earnings credited (Complete, and Judge for a
	// passed canary).
	Earned int64 `json:"earned"`
	// PaidOut is earnings reserved for payouts or paid, net of payouts
	// given back (AdjustPaidOut).
	PaidOut int64 `json:"paid_out"`
}

// CustomerCredits is what customers may still spend or get back: every
// credit deposited or granted less what ended jobs took. It is at least the
// sum of accounts' Credits, plus the paid part of the jobs running now.
func (m Money) CustomerCredits() int64 { return m.Deposited + m.Granted - m.Recognized }

// UnpaidEarnings is what workers earned and were not paid (nor reserved for
// a payout): the sum of accounts' Earned - PaidOut.
func (m Money) UnpaidEarnings() int64 { return m.Earned - m.PaidOut }

// Revenue is what the network kept, all time: what ended jobs took from
// paid credits, less the workers' share of every job (allowance jobs and
// canaries included) and the credits given away.
func (m Money) Revenue() int64 { return m.Recognized - m.Earned - m.Granted }

// Add returns the field-wise sum of m and d.
func (m Money) Add(d Money) Money {
	return Money{Deposited: m.Deposited + d.Deposited, Granted: m.Granted + d.Granted,
		Recognized: m.Recognized + d.Recognized, Earned: m.Earned + d.Earned, PaidOut: m.PaidOut + d.PaidOut}
}
