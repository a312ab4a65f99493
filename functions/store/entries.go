package store

import (
	"context"
	"fmt"
	"time"
)

// The account ledger: every change to an account's money is a typed entry
// written in the same atomic write as the change itself, so an account's
// entries always add up to its balance, earnings and payouts. Entries hold
// amounts, ids and times, never text a user wrote. A move of nothing (a
// job priced 0, a grant or an earning of 0) writes no entry.

// EntryKind is what moved an account's money.
type EntryKind string

// Entry kinds, and the store method that writes each.
const (
	// EntryDeposit: credits bought on-chain (Grant with deposit set).
	EntryDeposit EntryKind = "deposit"
	// EntryGrant: credits given (Grant without deposit: dev credits, the
	// canary budget, an operator's grant).
	EntryGrant EntryKind = "grant"
	// EntryCharge: a job's price debited (Admit); Allowance is the part
	// drawn from the free allowance.
	EntryCharge EntryKind = "charge"
	// EntryRefund: a job's price given back (Fail with a refund).
	EntryRefund EntryKind = "refund"
	// EntryAllowance: the day's free allowance set (SetDailyAllowance);
	// Allowance is the new allowance.
	EntryAllowance EntryKind = "allowance"
	// EntryEarning: a worker's share credited to the worker's account
	// (Complete, one entry per share of a ring job, or Judge for a
	// passed canary).
	EntryEarning EntryKind = "earning"
	// EntryPayout: earnings reserved for a USDC payout (AdjustPaidOut
	// with delta > 0), or given back when it failed (delta < 0).
	EntryPayout EntryKind = "payout"
)

// Entry is one line of an account's ledger.
type Entry struct {
	AccountID string `json:"account_id"`
	// ID orders an account's entries in time and is unique in it: a
	// cursor for Entries. The store makes it.
	ID   string    `json:"id"`
	Kind EntryKind `json:"kind"`
	// Credits is the signed change: of the balance (Account.Credits) for
	// deposit, grant, charge and refund; of Account.Earned for earning;
	// of Account.PaidOut for payout.
	Credits int64 `json:"credits"`
	// Allowance is the signed change of the free allowance of a charge
	// or refund; for an allowance entry, the allowance set.
	Allowance int64 `json:"allowance,omitempty"`
	// JobID is the job of a charge, refund or earning.
	JobID string `json:"job_id,omitempty"`
	// Ref is the idempotency key of a grant, deposit, allowance or
	// payout (a deposit's holds the transaction signature).
	Ref string    `json:"ref,omitempty"`
	At  time.Time `json:"at"`
}

// AccountLedger reads account ledgers.
type AccountLedger interface {
	// Entries returns up to limit (1 to 1,000) of an account's entries,
	// newest first, starting after the entry with id before ("" starts
	// at the newest). An account without entries has none, not an error.
	Entries(ctx context.Context, accountID, before string, limit int) ([]Entry, error)
}

// MaxEntries is the most entries one Entries call returns.
const MaxEntries = 1000

// CheckEntriesLimit is the error of an Entries limit out of 1 to MaxEntries.
func CheckEntriesLimit(limit int) error { return checkLimit("entries", limit, MaxEntries) }

// checkLimit is the error of a listing's limit out of 1 to max.
func checkLimit(what string, limit, max int) error {
	if limit < 1 || limit > max {
		return fmt.Errorf("%s limit %d, want 1 to %d", what, limit, max)
	}
	return nil
}

// entryTime is the fixed-width UTC form of an entry's time in its ID, so
// that string order is time order (for years 0 to 9999).
const entryTime = "2006-01-02T15:04:05.000000000Z"

// newEntry makes the entry of a move at a time. Its ID is the time, the
// kind and what the move is about (a job, an idempotency key): all fixed by
// the move, so a retry of it names the same entry, and unique in the
// account, as each move is made once.
func newEntry(accountID string, kind EntryKind, about string, at time.Time) Entry {
	at = at.UTC()
	return Entry{AccountID: accountID, ID: at.Format(entryTime) + "#" + string(kind) + "#" + about, Kind: kind, At: at}
}

// Moves says whether an entry is written: when it moves an amount, and
// always for an allowance set (a move of nothing writes no entry).
func (e Entry) Moves() bool {
	return e.Credits != 0 || e.Allowance != 0 || e.Kind == EntryAllowance
}

// The entries of each move, made the same way by every store, which writes
// one when it Moves.

// GrantEntry is the entry of Grant (a deposit or a grant), at the store's
// time.
func GrantEntry(accountID string, credits int64, idemKey string, deposit bool, at time.Time) Entry {
	kind := EntryGrant
	if deposit {
		kind = EntryDeposit
	}
	e := newEntry(accountID, kind, idemKey, at)
	e.Credits, e.Ref = credits, idemKey
	return e
}

// ChargeEntry is the entry of Admit: j as admitted (AccountID and
// FromAllowance set), at its Created.
func ChargeEntry(j Job) Entry {
	e := newEntry(j.AccountID, EntryCharge, j.ID, j.Created)
	e.Credits, e.Allowance, e.JobID = -(j.Price - j.FromAllowance), -j.FromAllowance, j.ID
	return e
}

// RefundEntry is the entry of Fail refunding j, at the Fail's time, giving
// allowance (AllowanceBack) back to the free allowance.
func RefundEntry(j Job, allowance int64, at time.Time) Entry {
	e := newEntry(j.AccountID, EntryRefund, j.ID, at)
	e.Credits, e.Allowance, e.JobID = j.Price-j.FromAllowance, allowance, j.ID
	return e
}

// EarningEntry is the entry of Complete crediting a worker's earning to
// Job.WorkerAccount, at the completion's time.
func EarningEntry(j Job, earning int64, at time.Time) Entry {
	e := newEntry(j.WorkerAccount, EntryEarning, j.ID, at)
	e.Credits, e.JobID = earning, j.ID
	return e
}

// RingShareEntry is the entry of Complete crediting share i of a ring
// job's earning (Completion.Shares) to the share's account, at the
// completion's time. Its ID names the share's index and identity: an
// account may hold several of one job's shares, each credited once, and a
// retried Complete names the same entries.
func RingShareEntry(j Job, i int, sh Share, at time.Time) Entry {
	e := newEntry(sh.Account, EntryEarning, fmt.Sprintf("%s#%02d#%s", j.ID, i, sh.Pubkey), at)
	e.Credits, e.JobID = sh.Amount, j.ID
	return e
}

// CanaryEarningEntry is the entry of Judge crediting a passed canary's
// earning. Its ID names the identity too, as a verdict is once per job and
// identity.
func CanaryEarningEntry(v Verdict) Entry {
	e := newEntry(v.AccountID, EntryEarning, v.JobID+"#"+v.Pubkey, v.At)
	e.Credits, e.JobID = v.Earning, v.JobID
	return e
}

// AllowanceEntry is the entry of SetDailyAllowance, at the store's time.
func AllowanceEntry(accountID, day string, credits int64, at time.Time) Entry {
	e := newEntry(accountID, EntryAllowance, day, at)
	e.Allowance, e.Ref = credits, day
	return e
}

// PayoutEntry is the entry of AdjustPaidOut, at the store's time.
func PayoutEntry(accountID string, delta int64, key string, at time.Time) Entry {
	e := newEntry(accountID, EntryPayout, key, at)
	e.Credits, e.Ref = delta, key
	return e
}
