package store

import (
	"context"
	"time"
)

// Store is the whole set of operations, for wiring and for the conformance
// suite. Consumers depend on smaller interfaces of their own.
//
// Every method that moves credits is atomic and idempotent: a retry after a
// crash or a timeout never applies an effect twice.
type Store interface {
	// CreateAccount stores a new account; ErrExists if the id is taken.
	CreateAccount(ctx context.Context, a Account) error
	// GetAccount returns an account; ErrNotFound if there is none.
	GetAccount(ctx context.Context, id string) (Account, error)
	// Grant adds credits (a deposit, dev credits) once per idempotency
	// key. applied is false when the key was already used; the balance is
	// then unchanged. deposit says whether it counts in TotalDeposited.
	Grant(ctx context.Context, accountID string, credits int64, idemKey string, deposit bool) (applied bool, err error)

	// SetWallet sets an account's payout wallet, which its owner proved
	// (the caller checks the proof), and returns the account;
	// ErrNotFound if there is none.
	SetWallet(ctx context.Context, accountID, wallet string) (Account, error)
	// AccountsPaidTo lists the accounts whose payout wallet is wallet, by
	// id.
	AccountsPaidTo(ctx context.Context, wallet string) ([]Account, error)
	// SetStakeBoost sets an account's StakeBoostUntil; ErrNotFound.
	SetStakeBoost(ctx context.Context, accountID string, until time.Time) error

	// PutAPIKey stores a new key, with its name and spend controls (its
	// usage starts at 0 whatever s says); ErrLimit when the account
	// already has MaxActiveKeys active keys; ErrExists if the hash is
	// taken.
	PutAPIKey(ctx context.Context, s Secret) error
	// GetAPIKey finds a key by hash, revoked or not; ErrNotFound.
	GetAPIKey(ctx context.Context, hash string) (Secret, error)
	// ListAPIKeys lists an account's keys, oldest first.
	ListAPIKeys(ctx context.Context, accountID string) ([]Secret, error)
	// RevokeAPIKey revokes the account's key with that public id;
	// ErrNotFound if the account has no such key. Revoking twice is nil.
	RevokeAPIKey(ctx context.Context, accountID, id string, at time.Time) error
	// UpdateAPIKey applies p to the account's key with that public id and
	// returns it; ErrNotFound if the account has no such key (revoked
	// keys included: their name and controls may still change).
	UpdateAPIKey(ctx context.Context, accountID, id string, p KeyPatch) (Secret, error)
	// RenameWorkerToken sets the name of the account's worker token with
	// that public id; ErrNotFound if the account has none.
	RenameWorkerToken(ctx context.Context, accountID, id, name string) (Secret, error)

	// PutWorkerToken, GetWorkerToken and ListWorkerTokens mirror the API
	// key methods for worker tokens (cwt_…), a separate namespace.
	PutWorkerToken(ctx context.Context, s Secret) error
	GetWorkerToken(ctx context.Context, hash string) (Secret, error)
	ListWorkerTokens(ctx context.Context, accountID string) ([]Secret, error)
	// RevokeWorkerToken revokes the token and returns the relay
	// connections of the workers that are live on it, so the caller can
	// disconnect them at once.
	RevokeWorkerToken(ctx context.Context, accountID, id string, at time.Time) (conns []string, err error)

	// UseNonce records a single-use value until expires; ErrExists if it
	// was already used and has not expired (a replay). Expiry is judged by
	// the store's own clock, as the method takes no "now".
	UseNonce(ctx context.Context, nonce string, expires time.Time) error

	// Admit is the hot path's one write before dispatch, all or nothing:
	// ErrRevoked if the key is revoked, ErrExpired if it is past its
	// ExpiresAt at Job.Created, ErrKeyLimit if the key's spend in the
	// period of Job.Created (Secret.Spent) plus Job.Price would pass its
	// Limit, ErrRateLimited if the key already
	// made Limit requests in Window or the account (all its keys together)
	// AccountLimit (when non-zero), ErrInsufficientCredits if the
	// allowance plus the balance cannot pay Job.Price; otherwise it counts
	// the request against both windows, debits the price (allowance
	// first), adds it to the key's Usage and period usage (Period set to
	// the period of Job.Created), and stores Job as queued with KeyHash
	// set to the key's. It returns the job as stored
	// (FromAllowance set) with the window's counts.
	// ErrNotFound if the key or the account is missing; ErrExists if the
	// job id is taken. Job.AccountID, if set, must be the key's account;
	// empty, it is taken from the key.
	Admit(ctx context.Context, r AdmitRequest) (Admission, error)
	// GetJob returns a job; ErrNotFound.
	GetJob(ctx context.Context, id string) (Job, error)
	// QueuedJobs returns up to limit queued jobs for a model, oldest first.
	QueuedJobs(ctx context.Context, model string, limit int) ([]Job, error)
	// Assign moves a queued job to an idle registered worker that serves
	// its model, both at once; ErrConflict if either lost the race, ErrNotFound
	// if the job or the worker does not exist (a worker that disconnected). It
	// records the worker's account and identity pubkey on the job and counts
	// the attempt.
	Assign(ctx context.Context, jobID, worker string, at time.Time) (Job, error)
	// Requeue puts a job assigned to worker back in the queue (the worker
	// was lost before any token reached the client), clearing its worker
	// fields; ErrConflict if the job is not assigned to that worker.
	Requeue(ctx context.Context, jobID, worker string, at time.Time) (Job, error)
	// Complete marks a job assigned to c.Worker done, frees the worker
	// and records its speed, credits c.Earning to the worker's account
	// (Job.WorkerAccount, so it works after the worker disconnected) and
	// counts the tokens, stores c.Receipt (if any) with the job's
	// account, and counts the job, its earning and the speed (when
	// measured) in the reputation of the worker's identity
	// (Job.WorkerPubkey on Job.WorkerAccount; a canary counts nowhere
	// there: its verdict does), all at once. Completing a done job again is nil and changes
	// nothing, the receipt included; completing a failed job is
	// ErrConflict; an earning above the job's price, or a receipt of
	// another job, is an error and changes nothing. A real job whose
	// worker identity is no longer active (a verdict quarantined or
	// banned it while the job ran) is ErrNotActive and changes nothing:
	// the job stays assigned, for the caller to requeue or fail.
	Complete(ctx context.Context, c Completion) error
	// GetReceipt returns the receipt stored when the job completed;
	// ErrNotFound if the job did not complete with one (or does not exist).
	GetReceipt(ctx context.Context, jobID string) (Receipt, error)
	// Fail ends a queued or assigned job, frees its worker if it still
	// holds the job, and refunds the price exactly once when refund is
	// set — to the account, and out of its key's Usage (and PeriodUsage,
	// while the key's Period is still the period of the job's Created). Failing a failed job again changes nothing except that a
	// refund asked for now and not given before is given; failing a done
	// job is ErrConflict. It returns the job as stored.
	Fail(ctx context.Context, jobID, reason string, refund bool, at time.Time) (Job, error)

	// PutWorker stores a newly connected worker (not yet registered),
	// with the standing of its identity (Pubkey on AccountID) and of its
	// token, the worse of the two (Standing, and Strikes of the identity,
	// are set by the store, whatever w says); ErrBanned if either is
	// banned. It creates the identity's reputation if it is new there
	// (FirstSeen), else sets its LastSeen and TokenHash. ErrExists if the
	// connection is already known, ErrRevoked if its
	// worker token (TokenHash) exists and is revoked — so that a revoke
	// racing a connect never misses the new connection — and ErrLimit if
	// MaxConnsPerToken workers are already connected on that token (the
	// count is exact under concurrency: a connect burst cannot exceed it;
	// a worker without a TokenHash counts against no token).
	PutWorker(ctx context.Context, w Worker) error
	// RegisterWorker records the models a connected worker serves, with
	// their capabilities (caps, by model id; nil or a missing model is
	// plain chat only), and makes it eligible; ErrNotFound if the
	// connection is unknown, ErrRevoked if its worker token was revoked
	// meanwhile (a revoke that raced the connect: the caller closes the
	// connection).
	RegisterWorker(ctx context.Context, conn string, models []string, caps map[string]Caps) (Worker, error)
	// DrainWorker stops new jobs going to a worker; its current job runs
	// on. ErrNotFound if the connection is unknown.
	DrainWorker(ctx context.Context, conn string) (Worker, error)
	// GetWorker returns a worker; ErrNotFound.
	GetWorker(ctx context.Context, conn string) (Worker, error)
	// DeleteWorker removes a worker and returns it as it was; ErrNotFound.
	DeleteWorker(ctx context.Context, conn string) (Worker, error)
	// IdleWorkers lists registered, idle, not draining workers that serve
	// model.
	IdleWorkers(ctx context.Context, model string) ([]Worker, error)
	// Workers lists every connected worker.
	Workers(ctx context.Context) ([]Worker, error)

	// PutListener, GetListener and DeleteListener keep the API instances'
	// relay connections. GetListener and DeleteListener return ErrNotFound
	// for an unknown connection.
	PutListener(ctx context.Context, l Listener) error
	GetListener(ctx context.Context, conn string) (Listener, error)
	DeleteListener(ctx context.Context, conn string) error

	// Judge applies a verdict to the reputation of v.Pubkey on
	// v.AccountID (created if new) and of its token v.TokenHash, at once
	// and once per (v.JobID, v.Pubkey): a retry returns the reputation as
	// it is and changes nothing. The identity's counts and standing follow
	// Reputation.Judged, the token's TokenStanding; a passed canary's
	// Earning is credited to the account (Account.Earned) in the same
	// write; the live worker v.Conn, if it exists, takes the new standing
	// (the worse of identity's and token's) and strikes.
	Judge(ctx context.Context, v Verdict) (Reputation, error)
	// GetReputation returns an identity's reputation on an account;
	// ErrNotFound if it never connected there.
	GetReputation(ctx context.Context, accountID, pubkey string) (Reputation, error)
	// Reputations lists the identities that ever connected on an
	// account, or on every account when accountID is "" (the operator's
	// view), ordered by account then pubkey.
	Reputations(ctx context.Context, accountID string) ([]Reputation, error)
	// SetTrusted marks an identity as one of the operator's reference
	// workers (or unmarks it); ErrNotFound if it never connected there.
	SetTrusted(ctx context.Context, accountID, pubkey string, trusted bool) error

	// Entries reads an account's ledger (see AccountLedger and Entry): every
	// method that moves an account's money writes its entry in the same
	// atomic write, once, as idempotent as the move itself.
	AccountLedger

	// Deposit intents and their credits (see Deposits).
	Deposits

	// The keeper's ledger and the earnings it pays out (see Ledger and
	// Earnings).
	Ledger
	Earnings

	// Stats returns network figures as of now (the last full minute's
	// tokens). It reads counters, never the records: the queue and
	// worker counts change in the same atomic write as the transitions
	// they count (Admit, Assign, Requeue, Fail; PutWorker,
	// RegisterWorker, DeleteWorker). A worker record past its expiry
	// (judged by the store's clock, as IdleWorkers does) stops counting
	// within an hour of it.
	Stats(ctx context.Context, now time.Time) (Stats, error)

	// Close releases the store.
	Close() error
}
