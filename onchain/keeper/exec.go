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

// ErrOutOfTime means Execute stopped starting transactions because its
// context's deadline was nearer than Executor.Reserve, with the run not
// complete: every transaction it sent was resolved and recorded, nothing
// was sent twice, and what is left stays planned (or recorded under an
// expired signature) in the ledger. The run is safe to re-run: the next
// Execute resumes it from the ledger. It is returned only when nothing
// else went wrong; a transaction whose outcome stayed unknown is
// ErrUnresolved.
var ErrOutOfTime = errors.New("keeper: out of time before the run was complete; re-run to resume it")

// DefaultWindow is how many transactions Execute keeps in flight (sent,
// outcome not known yet) when Executor.Window is 0. A transaction takes
// about 13 s to finalize on mainnet, so the window sets the pace: 64 is
// about 5 transactions a second, a 10,000-staker day's ~556 in under two
// minutes, where one at a time took two hours. It stays well under what the
// cluster takes from one writer (every transaction writes the keeper's USDC
// account: 12M compute units per account per block is ~25 full
// transactions a second) and under an RPC provider's request rate: sends
// go one at a time and the statuses of those in flight are polled together
// (chain.Confirm).
const DefaultWindow = 64

// DefaultReserve is Executor.Reserve when it is 0: what one transaction
// may take to resolve once sent — chain.New's 90 s confirmation timeout —
// and 10 s more to record its outcome and finish the run.
const DefaultReserve = 100 * time.Second

// Chain is what the executor needs from the cluster (chain.Chain).
type Chain interface {
	LatestBlockhash(ctx context.Context) (chain.Blockhash, error)
	Send(ctx context.Context, tx *solana.Transaction) (solana.Signature, error)
	// Confirm is called for every transaction in flight at once; the
	// chain.Chain shares one status poll among them.
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
	// Window is how many transactions may be in flight at once; 0 is
	// DefaultWindow, 1 sends each only once the one before is resolved.
	Window int
	// Reserve is how much time before ctx's deadline Execute stops
	// starting transactions, so that those in flight resolve before it
	// (ErrOutOfTime); 0 is DefaultReserve. Without a deadline there is no
	// limit.
	Reserve time.Duration
	Now     func() time.Time
	Log     *slog.Logger
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

func (x *Executor) window() int {
	if x.Window > 0 {
		return x.Window
	}
	return DefaultWindow
}

func (x *Executor) reserve() time.Duration {
	if x.Reserve > 0 {
		return x.Reserve
	}
	return DefaultReserve
}

// Execute completes a sealed run: it first resolves every transfer that
// holds a signature (confirmed, failed, or expired and so safe to resend),
// then sends what is left in as few transactions as fit, up to Window of
// them in flight, recording each signature before its send. It returns
// ErrUnresolved, having sent nothing twice, when a transaction's outcome
// stays unknown, and ErrOutOfTime when ctx's deadline came too near to
// start the rest (Result then counts the transfers settled so far).
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
	// Confirmations wait in goroutines of their own: whatever ends
	// Execute (an error, a crash) ends them.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Resolve what was sent before (by an earlier, maybe crashed, run),
	// all signatures together.
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
	outs, err := x.resolve(ctx, sigOrder, bySig)
	if err != nil {
		return res, err
	}
	var expired []string
	unresolved := ""
	for i, sig := range sigOrder {
		switch outs[i] {
		case chain.Expired:
			expired = append(expired, sig)
		case chain.Unknown:
			if unresolved == "" {
				unresolved = sig
			}
		default:
			if err := x.settle(ctx, bySig[sig], sig, outs[i], "landed_failed"); err != nil {
				return res, err
			}
		}
	}
	if unresolved != "" {
		return res, fmt.Errorf("%w (%s)", ErrUnresolved, unresolved)
	}
	var queue []batch
	for _, sig := range expired {
		bs, err := x.pack(ctx, bySig[sig], sig)
		if err != nil {
			return res, err
		}
		queue = append(queue, bs...)
	}
	bs, err := x.pack(ctx, planned, "")
	if err != nil {
		return res, err
	}
	queue = append(queue, bs...)
	sendErr := x.sendAll(ctx, queue, &res)
	if sendErr != nil && !errors.Is(sendErr, ErrOutOfTime) {
		return res, sendErr
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
			if sendErr == nil {
				return res, fmt.Errorf("keeper: transfer %s is still %s after execution", t.Key, t.State)
			}
		}
	}
	return res, sendErr
}

// resolve confirms the recorded signatures sigOrder all at once and
// returns their outcomes, in order.
func (x *Executor) resolve(ctx context.Context, sigOrder []string, bySig map[string][]store.Transfer) ([]chain.Outcome, error) {
	type answer struct {
		i   int
		out chain.Outcome
		err error
	}
	answers := make(chan answer, len(sigOrder))
	for i, sig := range sigOrder {
		s, err := solana.SignatureFromBase58(sig)
		if err != nil {
			return nil, fmt.Errorf("keeper: ledger holds a bad signature %q: %w", sig, err)
		}
		go func() {
			out, err := x.Chain.Confirm(ctx, s, bySig[sig][0].LastValidBlockHeight)
			answers <- answer{i, out, err}
		}()
	}
	outs := make([]chain.Outcome, len(sigOrder))
	var first error
	for range sigOrder {
		a := <-answers
		outs[a.i] = a.out
		if a.err != nil && first == nil {
			first = fmt.Errorf("keeper: resolve %s: %w", sigOrder[a.i], a.err)
		}
	}
	return outs, first
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

// batch is the transfers of one transaction: all planned (prev ""), or all
// sent under prev, whose transaction expired unseen (attempt times in
// this Execute) or was refused in preflight.
type batch struct {
	ts      []store.Transfer
	groups  []onchain.Group
	prev    string
	attempt int
}

// pack packs ts (all planned, or all sent under prev) into transactions.
func (x *Executor) pack(ctx context.Context, ts []store.Transfer, prev string) ([]batch, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	if x.Prepare != nil {
		if err := x.Prepare(ctx, ts); err != nil {
			return nil, err
		}
	}
	groups := make([]onchain.Group, len(ts))
	for i, t := range ts {
		g, err := x.Build(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("keeper: build transfer %s: %w", t.Key, err)
		}
		groups[i] = g
	}
	fees := onchain.Fees{ComputeUnits: 1, MicroLamportsPerCU: x.PriorityFee}
	packed, err := onchain.Pack(x.Keeper.PublicKey(), groups, fees, x.Tables)
	if err != nil {
		return nil, fmt.Errorf("keeper: pack: %w", err)
	}
	out := make([]batch, len(packed))
	for i, p := range packed {
		out[i].prev = prev
		for _, j := range p {
			out[i].ts = append(out[i].ts, ts[j])
			out[i].groups = append(out[i].groups, groups[j])
		}
	}
	return out, nil
}

// flight is a batch sent and waiting for its outcome.
type flight struct {
	batch
	sig       solana.Signature
	lastValid uint64
	out       chain.Outcome
	err       error
}

// sendAll sends the batches in order, up to Window of them in flight. Every
// step that changes something — a ledger write, a send — happens here, in
// the caller's goroutine and in order, as one at a time did: only the
// waits for outcomes run alongside. A refused batch is sent again one
// transfer at a time, and an expired one re-signed, ahead of the rest. It
// stops starting batches at the first error or when ctx's deadline is
// nearer than Reserve, and returns once those in flight are resolved.
func (x *Executor) sendAll(ctx context.Context, queue []batch, res *Result) error {
	window := x.window()
	// At most window confirmations are running, so none blocks on this.
	resolved := make(chan flight, window)
	inFlight := 0
	var failed error
	fail := func(err error) {
		if failed == nil {
			failed = err
		}
	}
	outOfTime := false
	for {
		for failed == nil && !outOfTime && inFlight < window && len(queue) > 0 {
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < x.reserve() {
				outOfTime = true
				x.log().Warn("keeper: out of time, stopping before the run is complete",
					"left", time.Until(dl).Round(time.Millisecond).String(), "reserve", x.reserve().String(),
					"in_flight", inFlight, "batches_left", len(queue))
				break
			}
			b := queue[0]
			queue = queue[1:]
			sig, lastValid, refused, err := x.send(ctx, b, res)
			if err != nil {
				fail(err)
				break
			}
			if refused {
				if len(b.ts) == 1 {
					if err := x.settle(ctx, b.ts, sig.String(), chain.Failed, "preflight"); err != nil {
						fail(err)
					}
					continue
				}
				// One recipient's transfer (a frozen account, a closed
				// one) must not fail the others with it: a refused
				// transaction never left this process, so each transfer
				// is sent again alone, and only the bad one fails.
				alone := make([]batch, len(b.ts))
				for i := range b.ts {
					alone[i] = batch{ts: b.ts[i : i+1], groups: b.groups[i : i+1], prev: sig.String()}
				}
				queue = append(alone, queue...)
				continue
			}
			inFlight++
			go func(f flight) {
				f.out, f.err = x.Chain.Confirm(ctx, f.sig, f.lastValid)
				resolved <- f
			}(flight{batch: b, sig: sig, lastValid: lastValid})
		}
		if inFlight == 0 {
			break
		}
		f := <-resolved
		inFlight--
		switch {
		case f.err != nil:
			fail(fmt.Errorf("keeper: confirm %s: %w", f.sig, f.err))
		case f.out == chain.Landed || f.out == chain.Failed:
			if err := x.settle(ctx, f.ts, f.sig.String(), f.out, "landed_failed"); err != nil {
				fail(err)
			}
		case f.out == chain.Unknown:
			fail(fmt.Errorf("%w (%s)", ErrUnresolved, f.sig))
		case f.attempt >= x.MaxResends:
			fail(fmt.Errorf("%w (%s expired %d times)", ErrUnresolved, f.sig, f.attempt+1))
		default:
			// Expired unseen: it can never land, so it is re-signed
			// with a fresh blockhash, next.
			queue = append([]batch{{ts: f.ts, groups: f.groups, prev: f.sig.String(), attempt: f.attempt + 1}}, queue...)
		}
	}
	if failed != nil {
		return failed
	}
	if outOfTime {
		return ErrOutOfTime
	}
	return nil
}

// send signs b's transaction with a fresh blockhash, records its signature
// in the ledger and sends it. refused says the node refused it in
// preflight: it never left this process.
func (x *Executor) send(ctx context.Context, b batch, res *Result) (sig solana.Signature, lastValid uint64, refused bool, err error) {
	var ixs []solana.Instruction
	var units uint32
	for _, g := range b.groups {
		ixs = append(ixs, g.Instructions...)
		units += g.ComputeUnits
	}
	fees := onchain.Fees{ComputeUnits: units, MicroLamportsPerCU: x.PriorityFee}
	bh, err := x.Chain.LatestBlockhash(ctx)
	if err != nil {
		return sig, 0, false, err
	}
	tx, err := onchain.NewTx(x.Keeper.PublicKey(), ixs, bh.Hash, fees, x.Tables.For(ixs))
	if err != nil {
		return sig, 0, false, err
	}
	if err := x.sign(tx); err != nil {
		return sig, 0, false, err
	}
	sig = tx.Signatures[0]
	// The signature is on record before the transaction exists anywhere
	// else: whatever happens next, a re-run looks it up.
	if err := x.Ledger.MarkSent(ctx, keys(b.ts), b.prev, sig.String(), bh.LastValidBlockHeight, x.now()); err != nil {
		return sig, 0, false, fmt.Errorf("keeper: record send: %w", err)
	}
	res.Transactions++
	res.Fees += fees.LamportsFor(1)
	_, sendErr := x.Chain.Send(ctx, tx)
	if errors.Is(sendErr, chain.ErrPreflight) {
		x.log().Warn("keeper: transaction refused in preflight", "signature", sig.String(), "transfers", len(b.ts), "err", sendErr)
		return sig, bh.LastValidBlockHeight, true, nil
	}
	if sendErr != nil {
		// The response may be lost while the transaction landed: never
		// a failure, look it up.
		x.log().Warn("keeper: send failed; confirming by signature", "signature", sig.String(), "err", sendErr)
	}
	return sig, bh.LastValidBlockHeight, false, nil
}
