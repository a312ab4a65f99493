package keeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/chain"
)

// ErrUnresolved means a sent transaction's outcome is still unknown: it
// may land until its blockhash expires. Nothing is resent; re-run later
// and the ledger resolves it by looking the signature up.
var ErrUnresolved = errors.New("keeper: a sent transaction's outcome is unknown; re-run to resolve it")

// Chain is what the executor needs from the cluster (chain.Chain).
type Chain interface {
	LatestBlockhash(ctx context.Context) (chain.Blockhash, error)
	Send(ctx context.Context, tx *solana.Transaction) (solana.Signature, error)
	Confirm(ctx context.Context, sig solana.Signature, lastValid uint64) (chain.Outcome, error)
	TokenDelta(ctx context.Context, sig solana.Signature, account solana.PublicKey) (int64, error)
}

// Builder turns a ledger transfer into the instructions that make it.
type Builder func(ctx context.Context, t store.Transfer) (onchain.Group, error)

// Executor sends a sealed run's transfers through the ledger.
type Executor struct {
	Ledger store.Ledger
	Chain  Chain
	// Keeper signs every transaction and pays its fees.
	Keeper solana.PrivateKey
	Build  Builder
	// Prepare, when set, is called with the transfers about to be built
	// (the keeper reads whether their destination accounts exist).
	Prepare func(ctx context.Context, ts []store.Transfer) error
	// PriorityFee is the price per compute unit, in micro-lamports.
	PriorityFee uint64
	// Tables, when set, are address lookup tables (already created and
	// extended on-chain) the transactions load addresses from: v0
	// transactions then carry about four times more transfers each.
	Tables onchain.Tables
	// MaxResends bounds how often one batch is re-signed after its
	// blockhash expired unseen, within one Execute.
	MaxResends int
	Now        func() time.Time
	Log        *slog.Logger
}

// Result counts a run's transfers by final state.
type Result struct {
	Confirmed, Failed int
	// Transactions is how many were signed and sent by this Execute;
	// Fees their base and priority fees, in lamports.
	Transactions int
	Fees         uint64
}

func (x *Executor) now() time.Time {
	if x.Now != nil {
		return x.Now()
	}
	return time.Now()
}

func (x *Executor) log() *slog.Logger {
	if x.Log != nil {
		return x.Log
	}
	return slog.Default()
}

// Execute completes a sealed run: it first resolves every transfer that
// holds a signature (confirmed, failed, or expired and so safe to resend),
// then sends what is left in as few transactions as fit, recording each
// signature before its send. It returns ErrUnresolved, having sent nothing
// twice, when a transaction's outcome stays unknown.
func (x *Executor) Execute(ctx context.Context, run string) (Result, error) {
	var res Result
	r, err := x.Ledger.GetRun(ctx, run)
	if err != nil {
		return res, fmt.Errorf("keeper: run %s: %w", run, err)
	}
	if r.State == store.RunPlanning {
		return res, fmt.Errorf("keeper: run %s is not sealed", run)
	}
	ts, err := x.Ledger.RunTransfers(ctx, run)
	if err != nil {
		return res, err
	}
	// Resolve what was sent before (by an earlier, maybe crashed, run).
	resend := map[string][]store.Transfer{} // previous signature → transfers
	var planned []store.Transfer
	bySig := map[string][]store.Transfer{}
	var sigOrder []string
	for _, t := range ts {
		switch t.State {
		case store.TransferPlanned:
			planned = append(planned, t)
		case store.TransferSent:
			if _, ok := bySig[t.Signature]; !ok {
				sigOrder = append(sigOrder, t.Signature)
			}
			bySig[t.Signature] = append(bySig[t.Signature], t)
		}
	}
	for _, sig := range sigOrder {
		group := bySig[sig]
		out, err := x.resolve(ctx, sig, group[0].LastValidBlockHeight)
		if err != nil {
			return res, err
		}
		switch out {
		case chain.Expired:
			resend[sig] = group
		case chain.Unknown:
			return res, fmt.Errorf("%w (%s)", ErrUnresolved, sig)
		default:
			if err := x.settle(ctx, group, sig, out, "landed_failed"); err != nil {
				return res, err
			}
		}
	}
	for _, sig := range sigOrder {
		if g, ok := resend[sig]; ok {
			if err := x.sendAll(ctx, g, sig, &res); err != nil {
				return res, err
			}
		}
	}
	if err := x.sendAll(ctx, planned, "", &res); err != nil {
		return res, err
	}
	final, err := x.Ledger.RunTransfers(ctx, run)
	if err != nil {
		return res, err
	}
	for _, t := range final {
		switch t.State {
		case store.TransferConfirmed:
			res.Confirmed++
		case store.TransferFailed:
			res.Failed++
		default:
			return res, fmt.Errorf("keeper: transfer %s is still %s after execution", t.Key, t.State)
		}
	}
	return res, nil
}

func (x *Executor) resolve(ctx context.Context, sig string, lastValid uint64) (chain.Outcome, error) {
	s, err := solana.SignatureFromBase58(sig)
	if err != nil {
		return chain.Unknown, fmt.Errorf("keeper: ledger holds a bad signature %q: %w", sig, err)
	}
	return x.Chain.Confirm(ctx, s, lastValid)
}

func (x *Executor) settle(ctx context.Context, ts []store.Transfer, sig string, out chain.Outcome, reason string) error {
	state := store.TransferConfirmed
	if out == chain.Failed {
		state = store.TransferFailed
	} else {
		reason = ""
	}
	if err := x.Ledger.Settle(ctx, keys(ts), sig, state, reason, x.now()); err != nil {
		return fmt.Errorf("keeper: settle %s: %w", sig, err)
	}
	x.log().Info("keeper: transfers settled", "signature", sig, "state", string(state), "count", len(ts))
	return nil
}

func keys(ts []store.Transfer) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Key
	}
	return out
}

// sign signs tx with the keeper's key, its only signer.
func (x *Executor) sign(tx *solana.Transaction) error {
	if _, err := tx.Sign(func(pub solana.PublicKey) *solana.PrivateKey {
		if pub == x.Keeper.PublicKey() {
			return &x.Keeper
		}
		return nil
	}); err != nil {
		return fmt.Errorf("keeper: sign: %w", err)
	}
	return nil
}

// sendAll packs ts (all planned, or all sent under prev) into transactions
// and sends them one by one.
func (x *Executor) sendAll(ctx context.Context, ts []store.Transfer, prev string, res *Result) error {
	if len(ts) == 0 {
		return nil
	}
	if x.Prepare != nil {
		if err := x.Prepare(ctx, ts); err != nil {
			return err
		}
	}
	groups := make([]onchain.Group, len(ts))
	for i, t := range ts {
		g, err := x.Build(ctx, t)
		if err != nil {
			return fmt.Errorf("keeper: build transfer %s: %w", t.Key, err)
		}
		groups[i] = g
	}
	fees := onchain.Fees{ComputeUnits: 1, MicroLamportsPerCU: x.PriorityFee}
	batches, err := onchain.Pack(x.Keeper.PublicKey(), groups, fees, x.Tables)
	if err != nil {
		return fmt.Errorf("keeper: pack: %w", err)
	}
	for _, b := range batches {
		var bt []store.Transfer
		var bg []onchain.Group
		for _, i := range b {
			bt = append(bt, ts[i])
			bg = append(bg, groups[i])
		}
		if err := x.sendBatch(ctx, bt, bg, prev, res); err != nil {
			return err
		}
	}
	return nil
}

// sendBatch signs, records and sends one transaction, re-signing it with a
// fresh blockhash while it expires unseen.
func (x *Executor) sendBatch(ctx context.Context, ts []store.Transfer, groups []onchain.Group, prev string, res *Result) error {
	var ixs []solana.Instruction
	var units uint32
	for _, g := range groups {
		ixs = append(ixs, g.Instructions...)
		units += g.ComputeUnits
	}
	fees := onchain.Fees{ComputeUnits: units, MicroLamportsPerCU: x.PriorityFee}
	for attempt := 0; ; attempt++ {
		bh, err := x.Chain.LatestBlockhash(ctx)
		if err != nil {
			return err
		}
		tx, err := onchain.NewTx(x.Keeper.PublicKey(), ixs, bh.Hash, fees, x.Tables.For(ixs))
		if err != nil {
			return err
		}
		if err := x.sign(tx); err != nil {
			return err
		}
		sig := tx.Signatures[0]
		// The signature is on record before the transaction exists
		// anywhere else: whatever happens next, a re-run looks it up.
		if err := x.Ledger.MarkSent(ctx, keys(ts), prev, sig.String(), bh.LastValidBlockHeight, x.now()); err != nil {
			return fmt.Errorf("keeper: record send: %w", err)
		}
		res.Transactions++
		res.Fees += fees.LamportsFor(1)
		_, sendErr := x.Chain.Send(ctx, tx)
		if errors.Is(sendErr, chain.ErrPreflight) {
			x.log().Warn("keeper: transaction refused in preflight", "signature", sig.String(), "transfers", len(ts), "err", sendErr)
			if len(ts) == 1 {
				return x.settle(ctx, ts, sig.String(), chain.Failed, "preflight")
			}
			// One recipient's transfer (a frozen account, a closed
			// one) must not fail the others with it: a refused
			// transaction never left this process, so each transfer
			// is sent again alone, and only the bad one fails.
			for i := range ts {
				if err := x.sendBatch(ctx, ts[i:i+1], groups[i:i+1], sig.String(), res); err != nil {
					return err
				}
			}
			return nil
		}
		if sendErr != nil {
			// The response may be lost while the transaction landed:
			// never a failure, look it up.
			x.log().Warn("keeper: send failed; confirming by signature", "signature", sig.String(), "err", sendErr)
		}
		out, err := x.Chain.Confirm(ctx, sig, bh.LastValidBlockHeight)
		if err != nil {
			return err
		}
		switch out {
		case chain.Landed, chain.Failed:
			return x.settle(ctx, ts, sig.String(), out, "landed_failed")
		case chain.Unknown:
			return fmt.Errorf("%w (%s)", ErrUnresolved, sig)
		}
		if attempt >= x.MaxResends {
			return fmt.Errorf("%w (%s expired %d times)", ErrUnresolved, sig, attempt+1)
		}
		prev = sig.String()
	}
}
