package onchain_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"testing"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/onchain"
)

// TestUnsignedForWallet: the unsigned transaction a wallet receives
// decodes to the same message with empty signatures, and once the wallet
// signs it, the signature verifies.
func TestUnsignedForWallet(t *testing.T) {
	wallet, err := solana.NewRandomPrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	ix, err := idlConfig.Stake(wallet.PublicKey(), wallet.PublicKey(), idlConfig.ZeroATA(wallet.PublicKey()), 5_000_000)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := onchain.NewTx(wallet.PublicKey(), []solana.Instruction{ix}, solana.Hash{7}, onchain.Fees{ComputeUnits: 80_000, MicroLamportsPerCU: 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b64, err := onchain.Unsigned(tx)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := base64.StdEncoding.DecodeString(b64)
	back, err := solana.TransactionFromBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Signatures) != 1 || !back.Signatures[0].IsZero() {
		t.Fatalf("signatures %v; want one empty slot", back.Signatures)
	}
	m1, _ := tx.Message.MarshalBinary()
	m2, _ := back.Message.MarshalBinary()
	if string(m1) != string(m2) {
		t.Fatal("message changed on the way to the wallet")
	}
	if _, err := back.Sign(func(pub solana.PublicKey) *solana.PrivateKey {
		if pub == wallet.PublicKey() {
			return &wallet
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := back.VerifySignatures(); err != nil {
		t.Fatalf("wallet's signature: %v", err)
	}
}

func TestPackRespectsLimits(t *testing.T) {
	payer := key("payer")
	var groups []onchain.Group
	for i := range 40 {
		ix, _ := idlConfig.Fund(payer, idlConfig.USDCATA(payer), key(string(rune('a'+i))), 1)
		groups = append(groups, onchain.Group{Instructions: []solana.Instruction{ix}, ComputeUnits: 60_000})
	}
	groups[5].Solo = true
	batches, err := onchain.Pack(payer, groups, onchain.Fees{ComputeUnits: 1, MicroLamportsPerCU: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, b := range batches {
		var ixs []solana.Instruction
		for _, i := range b {
			if i != seen {
				t.Fatalf("groups out of order: %v", batches)
			}
			seen++
			ixs = append(ixs, groups[i].Instructions...)
			if i == 5 && len(b) != 1 {
				t.Fatalf("solo group shares a transaction: %v", b)
			}
		}
		if _, err := onchain.NewTx(payer, ixs, solana.Hash{}, onchain.Fees{ComputeUnits: 60_000 * uint32(len(b)), MicroLamportsPerCU: 1}, nil); err != nil {
			t.Fatalf("batch %v does not fit: %v", b, err)
		}
	}
	if seen != len(groups) {
		t.Fatalf("packed %d of %d groups", seen, len(groups))
	}
	// One group too large for any transaction.
	big := onchain.Group{}
	for i := range 40 {
		ix, _ := idlConfig.Fund(payer, idlConfig.USDCATA(payer), key(string(rune('A'+i))), 1)
		big.Instructions = append(big.Instructions, ix)
	}
	if _, err := onchain.Pack(payer, []onchain.Group{big}, onchain.Fees{}, nil); !errors.Is(err, onchain.ErrTooLarge) {
		t.Fatalf("oversized group: %v", err)
	}
	// A transaction runs at most 64 instructions, calls included: groups
	// of 10 go 6 to a transaction (with the 2 budget instructions).
	heavy := make([]onchain.Group, 20)
	for i := range heavy {
		heavy[i] = onchain.Group{Instructions: []solana.Instruction{onchain.SetComputeUnitPrice(uint64(i))}, ComputeUnits: 1, Trace: 10}
	}
	if batches, err := onchain.Pack(payer, heavy, onchain.Fees{ComputeUnits: 1}, nil); err != nil || len(batches[0]) != 6 {
		t.Fatalf("traced groups packed %v, %v; want 6 a transaction", batches, err)
	}
	// And locks at most 64 accounts, however small its lookup tables make
	// it: 120 tiny instructions touching an account each, through a
	// table, go 61 to a transaction (with the payer and two programs).
	var wide []onchain.Group
	var addrs solana.PublicKeySlice
	for i := range 120 {
		to := key(fmt.Sprint("dest", i))
		addrs = append(addrs, to)
		wide = append(wide, onchain.Group{ComputeUnits: 1, Trace: 1, Instructions: []solana.Instruction{
			solana.NewInstruction(key("program"), solana.AccountMetaSlice{solana.Meta(to).WRITE()}, nil)}})
	}
	batches, err = onchain.Pack(payer, wide, onchain.Fees{ComputeUnits: 1}, onchain.Tables{key("table"): addrs})
	if err != nil {
		t.Fatal(err)
	}
	if want := onchain.MaxAccountLocks - 3; len(batches[0]) != want {
		t.Fatalf("first batch %d instructions; want the %d the account locks allow", len(batches[0]), want)
	}
	if _, err := onchain.Memo(""); err == nil {
		t.Fatal("empty memo accepted")
	}
	if _, err := idlConfig.Stake(payer, payer, payer, 0); err == nil {
		t.Fatal("zero stake accepted")
	}
}
