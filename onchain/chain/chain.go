// Package chain sends transactions to a Solana cluster over JSON-RPC and
// finds out what became of them.
//
// A confirmation that times out is Unknown, never a failure: the
// transaction may still land. What became of a signature is decided by
// looking it up, and a transaction that is not found is only known never
// to land once the cluster's block height has passed its blockhash's last
// valid height. Callers that must not pay twice (the keeper) record the
// signature and that height before sending, and resolve Unknown with
// Lookup after a crash.
package chain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
	"github.com/gagliardetto/solana-go/rpc/jsonrpc"
)

// Outcome is what became of a transaction.
type Outcome int

// Outcomes.
const (
	// Unknown: not seen yet and its blockhash is still valid, so it may
	// still land. Never treat it as a failure.
	Unknown Outcome = iota
	// Landed: executed successfully at the asked commitment.
	Landed
	// Failed: executed with an error (the fee was paid, nothing moved).
	Failed
	// Expired: not found, and its blockhash expired: it can never land, so
	// sending the same transfer again is safe.
	Expired
)

func (o Outcome) String() string {
	switch o {
	case Landed:
		return "landed"
	case Failed:
		return "failed"
	case Expired:
		return "expired"
	default:
		return "unknown"
	}
}

// Client is the part of the JSON-RPC client this package uses.
type Client interface {
	GetLatestBlockhash(ctx context.Context, commitment rpc.CommitmentType) (*rpc.GetLatestBlockhashResult, error)
	GetBlockHeight(ctx context.Context, commitment rpc.CommitmentType) (uint64, error)
	SendTransactionWithOpts(ctx context.Context, tx *solana.Transaction, opts rpc.TransactionOpts) (solana.Signature, error)
	GetSignatureStatuses(ctx context.Context, searchTransactionHistory bool, sigs ...solana.Signature) (*rpc.GetSignatureStatusesResult, error)
	GetRecentPrioritizationFees(ctx context.Context, accounts solana.PublicKeySlice) ([]rpc.PriorizationFeeResult, error)
}

// Chain talks to one cluster.
type Chain struct {
	rpc Client
	// Commitment a transfer must reach before it counts as Landed.
	Commitment rpc.CommitmentType
	// Poll is the interval between status lookups while confirming; the
	// Confirm calls waiting at the same time share each lookup.
	Poll time.Duration
	// ConfirmTimeout bounds Confirm; past it the outcome is Unknown.
	ConfirmTimeout time.Duration
	// MaxPriorityFee caps the priority fee PriorityFee suggests, in
	// micro-lamports per compute unit, so a fee spike cannot drain the
	// fee payer.
	MaxPriorityFee uint64
	Log            *slog.Logger

	// watch holds the signatures Confirm calls are waiting on.
	watch watcher
}

// New returns a Chain with production defaults: finalized commitment, a
// 400 ms poll (one slot) and a 90 s confirmation timeout (a blockhash
// lives about 60-90 s, so a transaction not seen by then is usually
// Expired on the next lookup).
func New(c Client) *Chain {
	return &Chain{
		rpc:            c,
		Commitment:     rpc.CommitmentFinalized,
		Poll:           400 * time.Millisecond,
		ConfirmTimeout: 90 * time.Second,
		MaxPriorityFee: 1_000_000,
		Log:            slog.Default(),
	}
}

// Blockhash is a recent blockhash and the last block height at which a
// transaction using it can land.
type Blockhash struct {
	Hash                 solana.Hash
	LastValidBlockHeight uint64
}

// LatestBlockhash fetches a blockhash to build transactions with.
func (c *Chain) LatestBlockhash(ctx context.Context) (Blockhash, error) {
	res, err := c.rpc.GetLatestBlockhash(ctx, rpc.CommitmentConfirmed)
	if err != nil {
		return Blockhash{}, fmt.Errorf("chain: latest blockhash: %w", err)
	}
	if res == nil || res.Value == nil {
		return Blockhash{}, errors.New("chain: latest blockhash: empty response")
	}
	return Blockhash{Hash: res.Value.Blockhash, LastValidBlockHeight: res.Value.LastValidBlockHeight}, nil
}

// PriorityFee suggests a priority fee from the recent fees paid to write
// the given accounts: the median of the non-zero ones, capped at
// MaxPriorityFee; 0 when the cluster is quiet.
func (c *Chain) PriorityFee(ctx context.Context, writable solana.PublicKeySlice) (uint64, error) {
	fees, err := c.rpc.GetRecentPrioritizationFees(ctx, writable)
	if err != nil {
		return 0, fmt.Errorf("chain: recent prioritization fees: %w", err)
	}
	var nz []uint64
	for _, f := range fees {
		if f.PrioritizationFee > 0 {
			nz = append(nz, f.PrioritizationFee)
		}
	}
	if len(nz) == 0 {
		return 0, nil
	}
	slices.Sort(nz)
	return min(nz[len(nz)/2], c.MaxPriorityFee), nil
}

// Send submits a signed transaction with preflight, and returns its
// signature. An error does not mean the transaction did not land (the
// response may have been lost): callers that must know Lookup the
// signature, which is tx.Signatures[0] whether Send failed or not.
func (c *Chain) Send(ctx context.Context, tx *solana.Transaction) (solana.Signature, error) {
	if len(tx.Signatures) == 0 {
		return solana.Signature{}, errors.New("chain: send: transaction is not signed")
	}
	sig, err := c.rpc.SendTransactionWithOpts(ctx, tx, rpc.TransactionOpts{
		PreflightCommitment: rpc.CommitmentConfirmed,
		// The caller decides when to retry, with a fresh blockhash and
		// its ledger updated first; the node must not rebroadcast.
		MaxRetries: ptr(uint(0)),
	})
	if err != nil {
		var rerr *jsonrpc.RPCError
		if errors.As(err, &rerr) && rerr.Code == preflightFailure {
			err = fmt.Errorf("%w: %s", ErrPreflight, rerr.Message)
		}
		return tx.Signatures[0], fmt.Errorf("chain: send %s: %w", tx.Signatures[0], err)
	}
	return sig, nil
}

// preflightFailure is the JSON-RPC error code of a send whose simulation
// failed (or whose blockhash the node does not know).
const preflightFailure = -32002

// ErrPreflight means the node refused the transaction in preflight and did
// not forward it. The signed bytes never left this process, so the
// transaction cannot land: it is safe to settle it as failed.
var ErrPreflight = errors.New("chain: refused in preflight")

func ptr[T any](v T) *T { return &v }

// MaxStatuses is how many signatures one getSignatureStatuses call may
// name (the RPC method's limit).
const MaxStatuses = 256

// Lookup says what became of sig, given the last valid block height of the
// blockhash it was signed with.
func (c *Chain) Lookup(ctx context.Context, sig solana.Signature, lastValid uint64) (Outcome, error) {
	out, err := c.LookupAll(ctx, []solana.Signature{sig}, []uint64{lastValid})
	if err != nil {
		return Unknown, err
	}
	return out[0], nil
}

// LookupAll is Lookup for many signatures at once, lastValid[i] being
// sigs[i]'s: one getSignatureStatuses call per MaxStatuses signatures, and
// one getBlockHeight when any of them is not found.
func (c *Chain) LookupAll(ctx context.Context, sigs []solana.Signature, lastValid []uint64) ([]Outcome, error) {
	if len(sigs) != len(lastValid) {
		return nil, fmt.Errorf("chain: lookup: %d signatures but %d last valid heights", len(sigs), len(lastValid))
	}
	out := make([]Outcome, len(sigs))
	var missing []int
	for from := 0; from < len(sigs); from += MaxStatuses {
		chunk := sigs[from:min(from+MaxStatuses, len(sigs))]
		what := chunk[0].String()
		if len(chunk) > 1 {
			what = fmt.Sprintf("%d signatures from %s", len(chunk), chunk[0])
		}
		res, err := c.rpc.GetSignatureStatuses(ctx, true, chunk...)
		if err != nil {
			return nil, fmt.Errorf("chain: status of %s: %w", what, err)
		}
		// An answer that does not match the question is never read as
		// "not found": that could call a landed transaction expired.
		if res == nil || len(res.Value) != len(chunk) {
			return nil, fmt.Errorf("chain: status of %s: malformed response", what)
		}
		for i, st := range res.Value {
			switch {
			case st == nil:
				missing = append(missing, from+i)
			case !reached(st.ConfirmationStatus, c.Commitment):
				// A result counts only once it is as final as a
				// landing must be: a failure seen on a fork that is
				// dropped could be followed by the same transaction
				// landing, and settling it failed would pay it again.
				out[from+i] = Unknown
			case st.Err != nil:
				out[from+i] = Failed
			default:
				out[from+i] = Landed
			}
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	// Not found. The height is read after the statuses, so a transaction
	// that landed just before the expiry is seen by the status call. It
	// is read at finalized commitment, which lags the confirmed height the
	// blockhash expires by, so a node slightly behind another cannot call
	// a transaction expired that the other saw land; the RPC endpoint must
	// keep the transaction history the lookups reach back to.
	h, err := c.rpc.GetBlockHeight(ctx, rpc.CommitmentFinalized)
	if err != nil {
		return nil, fmt.Errorf("chain: block height: %w", err)
	}
	for _, i := range missing {
		if h > lastValid[i] {
			out[i] = Expired
		}
	}
	return out, nil
}

func reached(got rpc.ConfirmationStatusType, want rpc.CommitmentType) bool {
	rank := func(s string) int {
		switch s {
		case "processed":
			return 1
		case "confirmed":
			return 2
		case "finalized":
			return 3
		}
		return 0
	}
	return rank(string(got)) >= rank(string(want))
}
