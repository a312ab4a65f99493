package svmtest

import (
	"context"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/programs/system"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/chain"
)

// transfer signs a one-lamport transfer of e's treasury to itself, made
// distinct by lamports (the harness's blockhash stays the same while no
// blocks pass), and returns it with its blockhash.
func transfer(t *testing.T, e *Env, lamports uint64) (*solana.Transaction, chain.Blockhash) {
	t.Helper()
	bh, err := e.Chain.LatestBlockhash(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	kp := e.Treasury
	ix := system.NewTransferInstruction(lamports, kp.PublicKey(), kp.PublicKey()).Build()
	tx, err := onchain.NewTx(kp.PublicKey(), []solana.Instruction{ix}, bh.Hash, onchain.Fees{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := Sign(tx, kp); err != nil {
		t.Fatal(err)
	}
	return tx, bh
}

// TestFinalityDelay: with a finality delay, a landed transaction is
// confirmed at once and finalized only once the delay has passed.
func TestFinalityDelay(t *testing.T) {
	ctx := context.Background()
	e := NewEnv(t)
	const delay = 500 * time.Millisecond
	e.SetFinality(t, delay)
	finalized := chain.New(e.RPC)
	finalized.Poll = 5 * time.Millisecond
	finalized.ConfirmTimeout = 20 * time.Second
	tx, bh := transfer(t, e, 1)
	start := time.Now()
	sig, err := e.Chain.Send(ctx, tx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.RPC.GetSignatureStatuses(ctx, false, sig)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Value[0].ConfirmationStatus; time.Since(start) < delay && got != rpc.ConfirmationStatusConfirmed {
		t.Fatalf("status before the delay passed: %q, want confirmed", got)
	}
	if o, err := finalized.Confirm(ctx, sig, bh.LastValidBlockHeight); err != nil || o != chain.Landed {
		t.Fatalf("finalized: %v, %v", o, err)
	}
	if took := time.Since(start); took < delay {
		t.Fatalf("finalized %s after it was sent, before the %s delay", took, delay)
	}
	// Back to no delay: finalized at once.
	e.SetFinality(t, 0)
	tx, bh = transfer(t, e, 2)
	if sig, err = e.Chain.Send(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if o, err := finalized.Lookup(ctx, sig, bh.LastValidBlockHeight); err != nil || o != chain.Landed {
		t.Fatalf("without a delay: %v, %v; want landed at once", o, err)
	}
}

// TestDropSends: a dropped send answers with its signature, never lands,
// and is expired once its blockhash is.
func TestDropSends(t *testing.T) {
	ctx := context.Background()
	e := NewEnv(t)
	before := e.TransactionCount(t)
	e.DropSends(t, 1)
	tx, bh := transfer(t, e, 1)
	sig, err := e.Chain.Send(ctx, tx)
	if err != nil || sig != tx.Signatures[0] {
		t.Fatalf("dropped send: %s, %v; want its signature and no error", sig, err)
	}
	if o, err := e.Chain.Lookup(ctx, sig, bh.LastValidBlockHeight); err != nil || o != chain.Unknown {
		t.Fatalf("dropped, blockhash valid: %v, %v; want unknown", o, err)
	}
	if n := e.TransactionCount(t); n != before {
		t.Fatalf("%d transactions landed, want none", n-before)
	}
	e.AdvanceBlocks(t, 151)
	if o, err := e.Chain.Lookup(ctx, sig, bh.LastValidBlockHeight); err != nil || o != chain.Expired {
		t.Fatalf("dropped, blockhash expired: %v, %v; want expired", o, err)
	}
}
