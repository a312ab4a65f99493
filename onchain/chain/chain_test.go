package chain_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/chain"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// TestOutcomesOnSVM: what Lookup says of a transaction that landed, one
// that failed on-chain, one refused in preflight, and one never sent,
// before and after its blockhash expires.
func TestOutcomesOnSVM(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	c := e.Config
	kp := e.Treasury
	from := e.MintTo(t, c.USDCMint, onchain.TokenProgram, kp.PublicKey(), 10)
	ch := e.Chain
	build := func(amount uint64) (*solana.Transaction, chain.Blockhash) {
		bh, err := ch.LatestBlockhash(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ixs, _ := c.USDCPayout(kp.PublicKey(), kp.PublicKey(), from, kp.PublicKey(), amount)
		tx, err := onchain.NewTx(kp.PublicKey(), ixs, bh.Hash, onchain.Fees{ComputeUnits: 50_000, MicroLamportsPerCU: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := svmtest.Sign(tx, kp); err != nil {
			t.Fatal(err)
		}
		return tx, bh
	}
	ok, bh := build(1)
	sig, err := ch.Send(ctx, ok)
	if err != nil {
		t.Fatal(err)
	}
	if o, err := ch.Lookup(ctx, sig, bh.LastValidBlockHeight); o != chain.Landed || err != nil {
		t.Fatalf("landed: %v %v", o, err)
	}

	refused, _ := build(1_000)
	if _, err := ch.Send(ctx, refused); !errors.Is(err, chain.ErrPreflight) {
		t.Fatalf("over-spend: err = %v, want ErrPreflight", err)
	}
	failing, bh2 := build(1_000)
	fsig, err := e.RPC.SendTransactionWithOpts(ctx, failing, rpc.TransactionOpts{SkipPreflight: true})
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ch.Lookup(ctx, fsig, bh2.LastValidBlockHeight); o != chain.Failed {
		t.Fatalf("landed with an error: %v, want failed", o)
	}

	never, bh3 := build(2)
	if o, _ := ch.Lookup(ctx, never.Signatures[0], bh3.LastValidBlockHeight); o != chain.Unknown {
		t.Fatalf("never sent, blockhash valid: %v, want unknown", o)
	}
	e.AdvanceBlocks(t, 151)
	if o, _ := ch.Lookup(ctx, never.Signatures[0], bh3.LastValidBlockHeight); o != chain.Expired {
		t.Fatalf("never sent, blockhash expired: %v, want expired", o)
	}
	// The expired transaction can no longer land.
	if _, err := ch.Send(ctx, never); err == nil {
		t.Fatal("a transaction with an expired blockhash was accepted")
	}
	if got, err := ch.TokenBalance(ctx, from); err != nil || got != 10 {
		t.Fatalf("balance = %d, %v; want 10 (the payouts went to itself)", got, err)
	}
	if d, err := ch.TokenDelta(ctx, sig, from); err != nil || d != 0 {
		t.Fatalf("self-transfer delta = %d, %v", d, err)
	}
}

func TestPriorityFeeMedianCapped(t *testing.T) {
	e := svmtest.Start(t)
	ch := chain.New(e.RPC)
	ctx := context.Background()
	if f, err := ch.PriorityFee(ctx, nil); err != nil || f != 0 {
		t.Fatalf("quiet cluster: %d, %v", f, err)
	}
	e.Call(t, "svm_setPrioritizationFees", []uint64{0, 300, 100, 200, 0})
	if f, _ := ch.PriorityFee(ctx, nil); f != 200 {
		t.Fatalf("median of non-zero = %d, want 200", f)
	}
	ch.MaxPriorityFee = 150
	if f, _ := ch.PriorityFee(ctx, nil); f != 150 {
		t.Fatalf("capped = %d, want 150", f)
	}
}
