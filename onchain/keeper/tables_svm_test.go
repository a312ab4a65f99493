package keeper_test

import (
	"context"
	"testing"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/stakes"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// TestKeeperDayThroughLookupTables: the keeper finds it has no lookup
// tables, creates and extends them on the ALT program with every address
// the day's transfers touch, and finds them again (a second upkeep sends
// nothing); the day then runs in v0 transactions that load from them —
// fewer than the same day without tables — and every balance is exact.
func TestKeeperDayThroughLookupTables(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	const stakers = 100
	// The stakers were paid before: their reward vaults exist, so each
	// reward runs two instructions, not an account creation's six.
	vaults := func(w *world) *world {
		for _, o := range w.stakers {
			e.MintTo(t, w.cfg.USDCMint, onchain.TokenProgram, w.cfg.RewardPDA(o), 0)
		}
		return w
	}
	count := func(w *world) int {
		k := w.keeper(nil)
		before := e.TransactionCount(t)
		if err := w.day(k); err != nil {
			t.Fatal(err)
		}
		w.check(t)
		return e.TransactionCount(t) - before
	}
	legacy := count(vaults(newWorldN(t, e, stakers)))

	w := vaults(newWorldN(t, e, stakers))
	k := w.keeper(nil)
	k.TableRPC = e.RPC
	all, err := stakes.Read(ctx, e.RPC, w.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var payees []solana.PublicKey
	for _, p := range w.workers {
		payees = append(payees, p.Owner)
	}
	want := k.TableAddresses(all, payees)
	rep, err := k.EnsureTables(ctx, want, false)
	if err != nil || rep.Tables != 0 || rep.Missing != len(want) || rep.Created != 0 {
		t.Fatalf("dry upkeep %+v, %v; want %d missing, nothing made", rep, err, len(want))
	}
	wantTables := (len(want) + 255) / 256
	if wantTables < 2 {
		t.Fatalf("%d addresses fit one table: the test wants several", len(want))
	}
	// Each new table needs a slot of its own; a run that gets none in time
	// leaves the rest to the next run.
	for run := 1; ; run++ {
		if rep, err = k.EnsureTables(ctx, want, true); err != nil {
			t.Fatal(err)
		}
		if rep.Missing == 0 {
			break
		}
		if run == 5 {
			t.Fatalf("after %d upkeeps %+v", run, rep)
		}
		e.AdvanceBlocks(t, 1)
	}
	if rep.Tables != wantTables || rep.Addresses != len(want) {
		t.Fatalf("upkeep %+v; want %d tables holding %d addresses", rep, wantTables, len(want))
	}
	before := e.TransactionCount(t)
	if rep, err = k.EnsureTables(ctx, want, true); err != nil || rep.Missing != 0 || e.TransactionCount(t) != before {
		t.Fatalf("second upkeep %+v, %v: want nothing missing and nothing sent", rep, err)
	}
	e.AdvanceBlocks(t, 1) // extended addresses are usable from the next slot
	tables, err := k.LookupTables(ctx)
	if err != nil || len(tables) != wantTables {
		t.Fatalf("found %d tables, %v; want %d", len(tables), err, wantTables)
	}
	k.Exec.Tables = tables
	before = e.TransactionCount(t)
	if err := w.day(k); err != nil {
		t.Fatal(err)
	}
	w.check(t)
	v0 := e.TransactionCount(t) - before
	t.Logf("%d stakers and %d workers: %d legacy transactions, %d v0 through lookup tables", stakers, len(w.workers), legacy, v0)
	if v0 >= legacy {
		t.Fatalf("%d transactions through lookup tables, %d without: the tables saved nothing", v0, legacy)
	}
}
