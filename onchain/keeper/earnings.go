package keeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/functions/store"
)

// creditUnits is USDC base units per credit (1 credit = $0.01).
const creditUnits = 10_000

// EarningsRun is the ledger run id of the earnings payouts of at's day.
func EarningsRun(at time.Time) string { return "earnings/" + Day(at) }

// RequestedRun is the ledger run id of the requested payouts of at's hour.
func RequestedRun(at time.Time) string {
	return fmt.Sprintf("%s/requested-%02d", EarningsRun(at), at.UTC().Hour())
}

// earningsRuns is what every earnings run id starts with.
const earningsRuns = "earnings/"

// EarningsPayouts pays every worker account its earnings not yet paid out
// (store.Earnings), in USDC to the account's payout wallet, once a day:
// accounts owed at least MinPayout, each transfer keyed by day and
// account. After the plan is sealed each payout is reserved in the store
// (PaidOut grows, once per key) before anything is sent, and a payout that
// failed is given back (once) before the run finishes; every other sealed
// earnings run is finished first. A crash anywhere, re-run, neither pays
// twice nor leaves a reservation behind; a run that cannot finish makes
// every later run fail with its reason until it can. Without execute it
// only plans.
func (k *Keeper) EarningsPayouts(ctx context.Context, at time.Time, execute bool) ([]store.Transfer, Result, error) {
	rep, err := k.PayEarnings(ctx, at, false, execute)
	return rep.Transfers, rep.Result, err
}

// RequestedPayouts is EarningsPayouts for the accounts whose owners asked
// for a payout (POST /v1/payouts), run each hour (RequestedRun): the same
// ledger, keys and guarantees.
func (k *Keeper) RequestedPayouts(ctx context.Context, at time.Time, execute bool) ([]store.Transfer, Result, error) {
	rep, err := k.PayEarnings(ctx, at, true, execute)
	return rep.Transfers, rep.Result, err
}

// PayEarnings is EarningsPayouts (requested false: the day's run) or
// RequestedPayouts (true: the hour's), reporting also whom the run leaves
// out and why: accounts owed less than MinPayout, and accounts without a
// payout wallet (for requested payouts, only among those that asked).
func (k *Keeper) PayEarnings(ctx context.Context, at time.Time, requested, execute bool) (PayoutsReport, error) {
	run := EarningsRun(at)
	if requested {
		run = RequestedRun(at)
	}
	rep, err := k.payEarnings(ctx, run, requested, execute)
	rep.Run = run
	if rep.Transfers == nil {
		rep.Transfers = []store.Transfer{}
	}
	if rep.Skipped == nil {
		rep.Skipped = []Skip{}
	}
	return rep, err
}

func (k *Keeper) payEarnings(ctx context.Context, run string, requestedOnly, execute bool) (PayoutsReport, error) {
	var rep PayoutsReport
	if k.Earnings == nil {
		return rep, errors.New("keeper: earnings payouts need a store with earnings")
	}
	if execute {
		if err := k.finishOpenEarnings(ctx, run); err != nil {
			return rep, err
		}
	}
	r, err := k.Ledger.GetRun(ctx, run)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return rep, err
	}
	if err == nil && r.State != store.RunPlanning {
		rep.Sealed = true
		if !execute {
			rep.Transfers, err = k.Ledger.RunTransfers(ctx, run)
			return rep, err
		}
		rep.Transfers, rep.Result, err = k.settleEarnings(ctx, run)
		return rep, err
	}
	// Every account owed anything, so that those below the minimum are
	// reported; the plan keeps those owed at least MinPayout.
	owed, err := k.Earnings.OwedEarnings(ctx, 1)
	if err != nil {
		return rep, err
	}
	var ts []store.Transfer
	var total int64
	for _, o := range owed {
		if requestedOnly && !o.Requested {
			continue
		}
		if o.Credits*creditUnits < MinPayout {
			rep.Skipped = append(rep.Skipped, Skip{Wallet: o.Wallet, Account: o.AccountID, Reason: SkipBelowMinimum, Credits: o.Credits})
			continue
		}
		if _, err := solana.PublicKeyFromBase58(o.Wallet); err != nil {
			// No payout wallet on the account: its earnings wait.
			rep.Skipped = append(rep.Skipped, Skip{Wallet: o.Wallet, Account: o.AccountID, Reason: SkipNoPayoutWallet, Credits: o.Credits})
			continue
		}
		ts = append(ts, store.Transfer{Key: run + "/" + KindPayout + "/" + o.AccountID, Seq: len(ts), Kind: KindPayout,
			Recipient: o.Wallet, Mint: k.Config.USDCMint.String(), Amount: o.Credits * creditUnits})
		total += o.Credits
	}
	sortSkips(rep.Skipped)
	rep.Transfers = ts
	if !execute {
		return rep, nil
	}
	if err := k.sealRaw(ctx, run, ts, fmt.Sprintf(`{"payouts":%d,"credits":%d}`, len(ts), total)); err != nil {
		return rep, err
	}
	rep.Transfers, rep.Result, err = k.settleEarnings(ctx, run)
	return rep, err
}

// openEarningsRuns lists the sealed, unfinished earnings runs (daily and
// requested), by id.
func (k *Keeper) openEarningsRuns(ctx context.Context) ([]string, error) {
	runs, err := k.Ledger.OpenRuns(ctx, earningsRuns)
	if err != nil {
		return nil, err
	}
	var open []string
	for _, r := range runs {
		if r.State == store.RunSealed {
			open = append(open, r.ID)
		}
	}
	return open, nil
}

// FinishOpenEarnings finishes every sealed, unfinished earnings run, so
// that the workers' unpaid earnings are exactly what the store says they
// are owed.
func (k *Keeper) FinishOpenEarnings(ctx context.Context) error {
	return k.finishOpenEarnings(ctx, "")
}

func (k *Keeper) finishOpenEarnings(ctx context.Context, except string) error {
	open, err := k.openEarningsRuns(ctx)
	if err != nil {
		return err
	}
	for _, run := range open {
		if run == except {
			continue
		}
		if _, _, err := k.settleEarnings(ctx, run); err != nil {
			return fmt.Errorf("finish %s first: %w", run, err)
		}
	}
	return nil
}

// UnpaidEarnings is the USDC (base units) the treasury owes workers now,
// which the rewards split never touches: earnings not paid out yet,
// plus every payout of an unfinished run that has not left the treasury.
// With a run open it errs on the safe side: a payout whose reservation a
// crash left undone counts twice. After FinishOpenEarnings it is exact.
func (k *Keeper) UnpaidEarnings(ctx context.Context) (uint64, error) {
	owed, err := k.Earnings.OwedEarnings(ctx, 1)
	if err != nil {
		return 0, err
	}
	var units uint64
	for _, o := range owed {
		units += CreditsToUSDC(o.Credits)
	}
	open, err := k.openEarningsRuns(ctx)
	if err != nil {
		return 0, err
	}
	for _, run := range open {
		ts, err := k.Ledger.RunTransfers(ctx, run)
		if err != nil {
			return 0, err
		}
		for _, t := range ts {
			if t.State != store.TransferConfirmed {
				units += uint64(t.Amount)
			}
		}
	}
	return units, nil
}

// settleEarnings takes a sealed earnings run to done: reserve, send, give
// back what failed, finish. Every step is idempotent, so it resumes a run
// stopped anywhere.
func (k *Keeper) settleEarnings(ctx context.Context, run string) ([]store.Transfer, Result, error) {
	ts, err := k.Ledger.RunTransfers(ctx, run)
	if err != nil {
		return nil, Result{}, err
	}
	for _, t := range ts {
		account, credits, err := EarningOf(run, t)
		if err != nil {
			return nil, Result{}, err
		}
		if _, err := k.Earnings.AdjustPaidOut(ctx, account, credits, t.Key); err != nil {
			return nil, Result{}, fmt.Errorf("reserve %s: %w", t.Key, err)
		}
	}
	r, err := k.Ledger.GetRun(ctx, run)
	if err != nil {
		return nil, Result{}, err
	}
	var res Result
	if r.State != store.RunDone {
		if res, err = k.Exec.Execute(ctx, run); err != nil {
			return nil, res, err
		}
		if ts, err = k.Ledger.RunTransfers(ctx, run); err != nil {
			return nil, res, err
		}
		for _, t := range ts {
			if t.State != store.TransferFailed {
				continue
			}
			account, credits, err := EarningOf(run, t)
			if err != nil {
				return nil, res, err
			}
			if _, err := k.Earnings.AdjustPaidOut(ctx, account, -credits, t.Key+"/failed"); err != nil {
				return nil, res, fmt.Errorf("give back %s: %w", t.Key, err)
			}
		}
		if err := k.Ledger.FinishRun(ctx, run, nil, k.Exec.now()); err != nil {
			return nil, res, err
		}
	}
	ts, err = k.Ledger.RunTransfers(ctx, run)
	return ts, res, err
}

// EarningOf reads the account and the credits back from a transfer of the
// earnings run run.
func EarningOf(run string, t store.Transfer) (account string, credits int64, err error) {
	account, ok := strings.CutPrefix(t.Key, run+"/"+KindPayout+"/")
	if !ok || account == "" || t.Amount%creditUnits != 0 {
		return "", 0, fmt.Errorf("keeper: %s is not an earnings payout of %s", t.Key, run)
	}
	return account, t.Amount / creditUnits, nil
}
