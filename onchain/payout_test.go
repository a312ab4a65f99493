package onchain_test

import (
	"testing"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// TestPayoutAndBurnOnSVM runs the token instructions on the real SPL Token,
// Token-2022 and ATA programs: a USDC payout to a wallet with no USDC
// account (created idempotently, twice), and a ZERO burn_checked.
func TestPayoutAndBurnOnSVM(t *testing.T) {
	e := svmtest.NewEnv(t)
	c := e.Config
	treasury := e.Treasury.PublicKey()
	from := e.MintTo(t, c.USDCMint, onchain.TokenProgram, treasury, 10_000_000)
	worker := svmtest.NewKey(t).PublicKey()

	for i, amount := range []uint64{1_234_567, 1} {
		ixs, err := c.USDCPayout(treasury, treasury, from, worker, amount)
		if err != nil {
			t.Fatal(err)
		}
		e.Send(t, []solana.PrivateKey{e.Treasury}, ixs...)
		if i == 0 {
			if got := e.TokenBalance(t, c.USDCATA(worker)); got != 1_234_567 {
				t.Fatalf("worker USDC = %d, want 1234567", got)
			}
		}
	}
	if got := e.TokenBalance(t, c.USDCATA(worker)); got != 1_234_568 {
		t.Fatalf("worker USDC = %d, want 1234568", got)
	}
	if got := e.TokenBalance(t, from); got != 10_000_000-1_234_568 {
		t.Fatalf("treasury USDC = %d", got)
	}

	zero := e.MintTo(t, c.ZeroMint, onchain.Token2022Program, treasury, 5_000_000)
	burn, err := c.BurnZero(zero, treasury, 1_999_999)
	if err != nil {
		t.Fatal(err)
	}
	e.Send(t, []solana.PrivateKey{e.Treasury}, burn)
	if got := e.TokenBalance(t, zero); got != 3_000_001 {
		t.Fatalf("ZERO after burn = %d, want 3000001", got)
	}
	if got := e.MintSupply(t, c.ZeroMint); got != 3_000_001 {
		t.Fatalf("ZERO supply = %d, want 3000001", got)
	}
	// Burning more than the balance fails on-chain and changes nothing.
	over, _ := c.BurnZero(zero, treasury, 3_000_002)
	if _, out := e.Try(t, []solana.PrivateKey{e.Treasury}, over); out.String() == "landed" {
		t.Fatal("over-burn landed")
	}
}
