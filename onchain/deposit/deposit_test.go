package deposit_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/deposit"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// TestDepositsOnSVM sends real transfers through the SPL Token programs in
// LiteSVM and verifies them the way the gateway does.
func TestDepositsOnSVM(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	c := e.Config
	user := svmtest.NewKey(t)
	e.Airdrop(t, user.PublicKey(), 10_000_000_000)
	userUSDC := e.MintTo(t, c.USDCMint, onchain.TokenProgram, user.PublicKey(), 100_000_000)
	userZero := e.MintTo(t, c.ZeroMint, onchain.Token2022Program, user.PublicKey(), 100_000_000)
	// The treasury's USDC account exists before any deposit.
	e.MintTo(t, c.USDCMint, onchain.TokenProgram, c.Treasury, 0)

	st, err := embedded.Open(t.TempDir()+"/c0.db", embedded.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	const account = "acct_deposit"
	if err := st.CreateAccount(ctx, store.Account{ID: account, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	v := &deposit.Verifier{RPC: e.RPC, Config: c}
	memo := func(s string) solana.Instruction {
		ix, err := onchain.Memo(s)
		if err != nil {
			t.Fatal(err)
		}
		return ix
	}
	signers := []solana.PrivateKey{user}
	usdcTo := func(dst solana.PublicKey, amount uint64) solana.Instruction {
		return onchain.TransferChecked(onchain.TokenProgram, userUSDC, c.USDCMint, dst, user.PublicKey(), amount, 6)
	}

	// 12.345678 USDC → 1,234 credits (floor).
	good := e.Send(t, signers, memo(account), usdcTo(c.TreasuryUSDC(), 12_345_678))
	d, err := v.Credit(ctx, st, good)
	if err != nil {
		t.Fatalf("credit: %v", err)
	}
	if d.USDC != 12_345_678 || d.Credits != 1234 || d.Account != account {
		t.Fatalf("deposit = %+v", d)
	}
	if *update {
		writeFuzzSeed(t, e, good)
	}
	if _, err := v.Credit(ctx, st, good); !errors.Is(err, deposit.ErrAlreadyCredited) {
		t.Fatalf("replay: err = %v, want ErrAlreadyCredited", err)
	}
	a, err := st.GetAccount(ctx, account)
	if err != nil {
		t.Fatal(err)
	}
	if a.Credits != 1234 || a.TotalDeposited != 1234 {
		t.Fatalf("account after deposit and replay: credits %d, deposited %d; want 1234, 1234", a.Credits, a.TotalDeposited)
	}

	other := svmtest.NewKey(t).PublicKey()
	failing := func() solana.Signature {
		// Skip preflight so that the failing transaction lands, fee
		// paid, as it can on a real cluster.
		bh, err := e.Chain.LatestBlockhash(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := onchain.NewTx(user.PublicKey(), []solana.Instruction{memo(account), usdcTo(c.TreasuryUSDC(), 1_000_000_000)}, bh.Hash, onchain.Fees{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := svmtest.Sign(tx, user); err != nil {
			t.Fatal(err)
		}
		sig, err := e.RPC.SendTransactionWithOpts(ctx, tx, rpc.TransactionOpts{SkipPreflight: true})
		if err != nil {
			t.Fatal(err)
		}
		return sig
	}
	for _, tc := range []struct {
		name string
		sig  func() solana.Signature
		want error
	}{
		{"wrong mint", func() solana.Signature {
			return e.Send(t, signers, memo(account),
				onchain.CreateATAIdempotent(user.PublicKey(), c.Treasury, c.ZeroMint, onchain.Token2022Program),
				onchain.TransferChecked(onchain.Token2022Program, userZero, c.ZeroMint, c.ZeroATA(c.Treasury), user.PublicKey(), 5_000_000, 6))
		}, deposit.ErrWrongMint},
		{"wrong destination", func() solana.Signature {
			return e.Send(t, signers, memo(account),
				onchain.CreateATAIdempotent(user.PublicKey(), other, c.USDCMint, onchain.TokenProgram),
				usdcTo(c.USDCATA(other), 5_000_000))
		}, deposit.ErrWrongDestination},
		{"no memo", func() solana.Signature { return e.Send(t, signers, usdcTo(c.TreasuryUSDC(), 5_000_000)) }, deposit.ErrMemo},
		{"two memos", func() solana.Signature {
			return e.Send(t, signers, memo(account), memo("acct_other"), usdcTo(c.TreasuryUSDC(), 5_000_000))
		}, deposit.ErrMemo},
		{"below a credit", func() solana.Signature {
			return e.Send(t, signers, memo(account), usdcTo(c.TreasuryUSDC(), 9_999))
		}, deposit.ErrTooSmall},
		{"failed transaction", failing, deposit.ErrFailed},
		{"unknown signature", func() solana.Signature { return solana.Signature{1, 2, 3} }, deposit.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := st.GetAccount(ctx, account)
			_, err := v.Credit(ctx, st, tc.sig())
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			after, _ := st.GetAccount(ctx, account)
			if after.Credits != before.Credits {
				t.Fatalf("credits changed %d → %d on a refused deposit", before.Credits, after.Credits)
			}
		})
	}

	t.Run("unfinalized, then finalized", func(t *testing.T) {
		e.HoldFinality(t, true)
		sig := e.Send(t, signers, memo(account), usdcTo(c.TreasuryUSDC(), 2_000_000))
		if _, err := v.Credit(ctx, st, sig); !errors.Is(err, deposit.ErrNotFinalized) {
			t.Fatalf("err = %v, want ErrNotFinalized", err)
		}
		e.Finalize(t)
		e.HoldFinality(t, false)
		d, err := v.Credit(ctx, st, sig)
		if err != nil || d.Credits != 200 {
			t.Fatalf("after finality: %+v, %v", d, err)
		}
		a, _ := st.GetAccount(ctx, account)
		if a.Credits != 1434 {
			t.Fatalf("credits = %d, want 1434", a.Credits)
		}
	})
}

var update = flag.Bool("update", false, "rewrite the fuzz seed taken from a real deposit")

// writeFuzzSeed stores the node's getTransaction response for a real
// deposit as a FuzzExtract seed, with the mints and treasury it needs.
func writeFuzzSeed(t *testing.T, e *svmtest.Env, sig solana.Signature) {
	var raw json.RawMessage
	if err := e.RPC.RPCCallForInto(context.Background(), &raw, "getTransaction", []any{sig.String(),
		map[string]any{"encoding": "base64", "commitment": "finalized", "maxSupportedTransactionVersion": 0}}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzExtract")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	seed := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", raw)
	if err := os.WriteFile(filepath.Join(dir, "real_deposit"), []byte(seed), 0o644); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf("package deposit_test\n\n// Generated by TestDepositsOnSVM -update: the mints and treasury of the\n// real deposit in testdata/fuzz/FuzzExtract/real_deposit.\nconst (\n\tfuzzUSDC     = %q\n\tfuzzTreasury = %q\n)\n",
		e.Config.USDCMint.String(), e.Config.Treasury.String())
	if err := os.WriteFile("fuzzseed_test.go", []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}
