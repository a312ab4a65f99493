package store

import (
	"context"
	"time"
)

// The account ledger: every change to an account's money is a typed entry
// written in the same atomic write as the change itself, so an account's
// entries always add up to its balance, earnings and payouts. Entries hold
// amounts, ids and times, never text a user wrote.

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
	// (Complete, or Judge for a passed canary).
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
