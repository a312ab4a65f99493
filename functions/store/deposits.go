package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DepositState is a deposit intent's place in its life.
type DepositState string

// Deposit states. An intent stays open for transfers until it expires: a
// user may pay an intent more than once, and each transfer is credited
// once (by its signature).
const (
	// DepositPending: no transfer credited yet.
	DepositPending DepositState = "pending"
	// DepositCredited: at least one transfer credited.
	DepositCredited DepositState = "credited"
)

// DepositKind is how a deposit intent is paid.
type DepositKind string

// Deposit kinds.
const (
	// DepositSolanaPay: a Solana Pay transfer request, paid by any
	// wallet; its Reference is a fresh public key the transfer carries.
	DepositSolanaPay DepositKind = ""
	// DepositX402: an x402 top-up, a transfer the gateway co-signed and
	// sent itself; its Reference is that transaction's signature, known
	// before it is sent.
	DepositX402 DepositKind = "x402"
)

// Deposit is a deposit intent: a Solana Pay transfer request with a fresh
// reference key bound to one account, or an x402 top-up bound to the
// transaction that pays it. Only the transfer the reference names is
// credited, and only to that account, whoever reports it.
type Deposit struct {
	ID        string      `json:"id"`
	AccountID string      `json:"account_id"`
	Kind      DepositKind `json:"kind,omitempty"`
	// Reference is what the transfer must carry: for Solana Pay the base58
	// public key among its keys (how the sweep finds it on-chain), for
	// x402 its signature. References are unique across intents.
	Reference string `json:"reference"`
	// AmountUSDC is the amount asked for, in USDC base units (1e-6), or 0
	// when the user chooses.
	AmountUSDC int64        `json:"amount_usdc,omitempty"`
	State      DepositState `json:"state"`
	// CreditedUSDC and Credits are what its transfers brought, in total;
	// Signatures are the credited transfers (at most MaxDepositSignatures).
	CreditedUSDC int64     `json:"credited_usdc,omitempty"`
	Credits      int64     `json:"credits,omitempty"`
	Signatures   []string  `json:"signatures,omitempty"`
	Created      time.Time `json:"created"`
	Updated      time.Time `json:"updated"`
}

// MaxDepositSignatures bounds the transfers one intent takes: past it,
// a transfer is refused (the user makes a new intent).
const MaxDepositSignatures = 16

// DepositCredit is one transfer to credit to an intent.
type DepositCredit struct {
	DepositID string
	AccountID string
	Signature string
	USDC      int64
	// Credits is floor(USDC × 100 / 10^6): what the account gets.
	Credits int64
	At      time.Time
}

// Deposits keeps deposit intents and credits their transfers.
type Deposits interface {
	// PutDeposit stores a new intent (as Fresh makes it); ErrExists if
	// its account has an intent with its id, or any intent has its
	// reference.
	PutDeposit(ctx context.Context, d Deposit) error
	// GetDeposit returns the account's intent; ErrNotFound if the account
	// has none with that id.
	GetDeposit(ctx context.Context, accountID, id string) (Deposit, error)
	// ListDeposits lists an account's intents, newest first, at most limit
	// (1 to 1,000).
	ListDeposits(ctx context.Context, accountID string, limit int) ([]Deposit, error)
	// OpenDeposits lists the intents of every account created at or after
	// since, oldest first, at most limit (1 to 1,000): what the sweep
	// looks for on-chain.
	OpenDeposits(ctx context.Context, since time.Time, limit int) ([]Deposit, error)
	// CreditDeposit credits one transfer to an intent, all at once: the
	// account's Credits and TotalDeposited (as Grant with deposit set and
	// idempotency key "deposit:"+Signature, with its EntryDeposit), and
	// the intent's state, totals and signatures. applied is false, and
	// nothing changes, when that signature was credited already (to this
	// intent or any). ErrNotFound if the account has no such intent;
	// ErrLimit if the intent has MaxDepositSignatures already. It returns
	// the intent as stored.
	CreditDeposit(ctx context.Context, c DepositCredit) (d Deposit, applied bool, err error)
}

// MaxDeposits is the most intents one ListDeposits or OpenDeposits call
// returns.
const MaxDeposits = 1000

// CheckDepositsLimit is the error of a ListDeposits or OpenDeposits limit
// out of 1 to MaxDeposits.
func CheckDepositsLimit(limit int) error { return checkLimit("deposits", limit, MaxDeposits) }

// DepositKey is the idempotency key of a transfer's credit: Grant's, with
// deposit set, so that a Grant and a CreditDeposit of one signature apply
// once between them, whichever comes first.
func DepositKey(signature string) string { return "deposit:" + signature }

// Fresh is d as PutDeposit stores it: pending, nothing credited yet,
// whatever d says. The error says it cannot be stored: an id, account or
// reference missing, no Created time, a negative amount.
func (d Deposit) Fresh() (Deposit, error) {
	switch {
	case d.ID == "" || d.AccountID == "" || d.Reference == "":
		return d, errors.New("deposit intent without an id, account or reference")
	case d.Created.IsZero():
		return d, errors.New("deposit intent without a created time")
	case d.AmountUSDC < 0:
		return d, fmt.Errorf("deposit intent of negative amount %d", d.AmountUSDC)
	}
	d.State, d.CreditedUSDC, d.Credits, d.Signatures = DepositPending, 0, 0, nil
	return d, nil
}

// Check reports whether c may be credited: an intent, an account and a
// signature named, USDC above 0, Credits not negative, a time.
func (c DepositCredit) Check() error {
	switch {
	case c.DepositID == "" || c.AccountID == "" || c.Signature == "":
		return errors.New("deposit credit without an intent, account or signature")
	case c.USDC <= 0:
		return fmt.Errorf("deposit credit of %d USDC units, want above 0", c.USDC)
	case c.Credits < 0:
		return fmt.Errorf("deposit credit of negative credits %d", c.Credits)
	case c.At.IsZero():
		return errors.New("deposit credit without a time")
	}
	return nil
}

// Entry is the ledger entry of c: Grant's with deposit set and key
// DepositKey(c.Signature), at c.At.
func (c DepositCredit) Entry() Entry {
	return GrantEntry(c.AccountID, c.Credits, DepositKey(c.Signature), true, c.At)
}

// Credit is d after c: credited, its totals and signatures grown, updated
// at c.At.
func (d Deposit) Credit(c DepositCredit) Deposit {
	d.State = DepositCredited
	d.CreditedUSDC += c.USDC
	d.Credits += c.Credits
	d.Signatures = append(d.Signatures[:len(d.Signatures):len(d.Signatures)], c.Signature)
	d.Updated = c.At
	return d
}
