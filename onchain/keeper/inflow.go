package keeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/functions/store"
)

// Carries of recorded inflows: all recorded, and the part split so far.
const (
	CarryInflowUSDC  = "inflow_usdc"
	CarryInflowSplit = "inflow_split_usdc"
)

// Inflow is USDC that reached the treasury from outside the store's books —
// the network's 35% share of ZERO trading fees — recorded once per
// transaction and split with the next day's revenue.
type Inflow struct {
	Signature string `json:"signature"`
	// USDC is base units the treasury received from the source.
	USDC uint64 `json:"usdc"`
	// Recorded says this run recorded it (never a dry run); Before that
	// an earlier run did, and USDC is what it recorded.
	Recorded bool `json:"recorded"`
	Before   bool `json:"before"`
}

// InflowRun is the ledger run that records an inflow's transaction.
func InflowRun(sig solana.Signature) string { return "inflow/" + sig.String() }

// RecordInflow records the USDC a landed transaction moved from source (the
// token account the trading fees are collected in) into the treasury's
// USDC account: the smaller of what source lost and what the treasury
// gained, so that a deposit or any other payment into the treasury is
// never taken for revenue. Once per transaction: the run and the carry are
// one ledger write. Without execute it only reads.
func (k *Keeper) RecordInflow(ctx context.Context, sig solana.Signature, source solana.PublicKey, execute bool) (Inflow, error) {
	in := Inflow{Signature: sig.String()}
	run := InflowRun(sig)
	if r, err := k.Ledger.GetRun(ctx, run); err == nil && r.State == store.RunDone {
		var s struct {
			USDC uint64 `json:"usdc"`
		}
		if err := json.Unmarshal([]byte(r.Summary), &s); err != nil {
			return in, fmt.Errorf("keeper: run %s summary: %w", run, err)
		}
		in.USDC, in.Before = s.USDC, true
		return in, nil
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return in, err
	}
	if source.Equals(k.Config.USDCATA(k.keeperPub())) {
		return in, errors.New("keeper: the inflow source is the treasury itself")
	}
	gained, err := k.Exec.Chain.TokenDelta(ctx, sig, k.Config.USDCATA(k.keeperPub()))
	if err != nil {
		return in, err
	}
	lost, err := k.Exec.Chain.TokenDelta(ctx, sig, source)
	if err != nil {
		return in, err
	}
	if gained <= 0 || lost >= 0 {
		return in, fmt.Errorf("keeper: transaction %s moved no USDC from %s into the treasury (treasury %+d, source %+d)", sig, source, gained, lost)
	}
	in.USDC = uint64(min(gained, -lost))
	if !execute {
		return in, nil
	}
	total, err := k.Ledger.Carry(ctx, CarryInflowUSDC)
	if err != nil {
		return in, err
	}
	summary := fmt.Sprintf(`{"usdc":%d}`, in.USDC)
	if err := k.sealRaw(ctx, run, nil, summary); err != nil {
		return in, err
	}
	if err := k.Ledger.FinishRun(ctx, run, map[string]int64{CarryInflowUSDC: total + int64(in.USDC)}, k.Exec.now()); err != nil {
		return in, err
	}
	in.Recorded = true
	return in, nil
}
