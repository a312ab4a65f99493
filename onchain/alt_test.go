package onchain_test

import (
	"context"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/chain"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// TestPayoutsThroughLookupTableOnSVM creates and extends an address lookup
// table on the real ALT program, then pays many workers in one v0
// transaction that loads their addresses from it: more payouts per
// transaction than a legacy one holds, every balance exact.
func TestPayoutsThroughLookupTableOnSVM(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	c := e.Config
	kp := e.Treasury
	k := kp.PublicKey()
	from := e.MintTo(t, c.USDCMint, onchain.TokenProgram, k, 1_000_000_000)

	const workers = 24
	var wallets []solana.PublicKey
	var addrs []solana.PublicKey
	for range workers {
		w := svmtest.NewKey(t).PublicKey()
		wallets = append(wallets, w)
		// Payout ATAs exist already: the table carries the accounts the
		// transfer touches.
		e.MintTo(t, c.USDCMint, onchain.TokenProgram, w, 0)
		addrs = append(addrs, c.USDCATA(w))
	}
	addrs = append(addrs, c.USDCMint, onchain.TokenProgram, from)

	slot, err := e.RPC.GetSlot(ctx, rpc.CommitmentConfirmed)
	if err != nil {
		t.Fatal(err)
	}
	create, table, err := onchain.CreateLookupTable(k, k, slot)
	if err != nil {
		t.Fatal(err)
	}
	e.Send(t, []solana.PrivateKey{kp}, create)
	for i := 0; i < len(addrs); i += onchain.MaxExtend {
		ext, err := onchain.ExtendLookupTable(table, k, k, addrs[i:min(i+onchain.MaxExtend, len(addrs))])
		if err != nil {
			t.Fatal(err)
		}
		e.Send(t, []solana.PrivateKey{kp}, ext)
	}
	e.AdvanceBlocks(t, 1) // addresses are usable from the next slot

	var groups []onchain.Group
	for i, w := range wallets {
		groups = append(groups, onchain.Group{ComputeUnits: 10_000, Trace: 1, Instructions: []solana.Instruction{
			onchain.TransferChecked(onchain.TokenProgram, from, c.USDCMint, c.USDCATA(w), k, uint64(1_000_000+i), 6)}})
	}
	tables := onchain.Tables{table: addrs}
	legacy, err := onchain.Pack(k, groups, onchain.Fees{ComputeUnits: 1, MicroLamportsPerCU: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	v0, err := onchain.Pack(k, groups, onchain.Fees{ComputeUnits: 1, MicroLamportsPerCU: 1}, tables)
	if err != nil {
		t.Fatal(err)
	}
	if len(v0) >= len(legacy) {
		t.Fatalf("the table packs no more: %d v0 transactions, %d legacy", len(v0), len(legacy))
	}
	t.Logf("%d payouts: %d legacy transactions, %d v0 with a lookup table", workers, len(legacy), len(v0))
	for _, b := range v0 {
		var ixs []solana.Instruction
		for _, i := range b {
			ixs = append(ixs, groups[i].Instructions...)
		}
		bh, err := e.Chain.LatestBlockhash(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := onchain.NewTx(k, ixs, bh.Hash, onchain.Fees{ComputeUnits: uint32(10_000 * len(b)), MicroLamportsPerCU: 1}, tables)
		if err != nil {
			t.Fatal(err)
		}
		if err := svmtest.Sign(tx, kp); err != nil {
			t.Fatal(err)
		}
		sig, err := e.Chain.Send(ctx, tx)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := e.Chain.Confirm(ctx, sig, bh.LastValidBlockHeight); err != nil || out != chain.Landed {
			t.Fatalf("v0 transaction: %v, %v", out, err)
		}
	}
	for i, w := range wallets {
		if got := e.TokenBalance(t, c.USDCATA(w)); got != uint64(1_000_000+i) {
			t.Fatalf("worker %d = %d", i, got)
		}
	}
}
