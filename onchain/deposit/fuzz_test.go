package deposit_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/deposit"
)

// FuzzExtract feeds arbitrary getTransaction responses to Extract: it must
// return a deposit or an error, never panic, and never credit a deposit
// that does not name the treasury's USDC account.
func FuzzExtract(f *testing.F) {
	f.Add([]byte(`{"slot":1,"transaction":["AA==","base64"],"meta":{"err":null}}`))
	f.Add([]byte(`{"slot":1,"transaction":["","base64"],"meta":{"err":null,"preTokenBalances":[{"accountIndex":9,"mint":"11111111111111111111111111111111","uiTokenAmount":{"amount":"1"}}]}}`))
	f.Add([]byte(`{"transaction":null,"meta":null}`))
	cfg := onchain.Config{
		StakingProgram: solana.SystemProgramID, RewardsProgram: solana.SystemProgramID,
		// The seed corpus's real deposit was made with these mints and
		// treasury (see testdata/fuzz/FuzzExtract).
		USDCMint: solana.MustPublicKeyFromBase58(fuzzUSDC), ZeroMint: solana.SystemProgramID,
		Treasury: solana.MustPublicKeyFromBase58(fuzzTreasury),
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var res rpc.GetTransactionResult
		if json.Unmarshal(data, &res) != nil {
			return
		}
		d, err := deposit.Extract(cfg, &res)
		if err != nil {
			return
		}
		if d.Credits <= 0 || uint64(d.Credits) != d.USDC/10_000 || d.Account == "" {
			t.Fatalf("inconsistent deposit %+v", d)
		}
	})
}

// TestRealDepositSeed: the seed recorded from a real deposit on the SVM
// (TestDepositsOnSVM -update) extracts to that deposit, so the fuzzer
// starts from a transaction that passes every check.
func TestRealDepositSeed(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzExtract", "real_deposit"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(b), "\n", 3)
	raw, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	if err != nil {
		t.Fatal(err)
	}
	var res rpc.GetTransactionResult
	if err := json.Unmarshal([]byte(raw), &res); err != nil {
		t.Fatal(err)
	}
	cfg := onchain.Config{USDCMint: solana.MustPublicKeyFromBase58(fuzzUSDC), Treasury: solana.MustPublicKeyFromBase58(fuzzTreasury)}
	d, err := deposit.Extract(cfg, &res)
	if err != nil || d.USDC != 12_345_678 || d.Credits != 1234 || d.Account != "acct_deposit" {
		t.Fatalf("seed deposit = %+v, %v", d, err)
	}
}
