package keepercli_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/clients/zerostaking"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/keepercli"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

func writeKey(t *testing.T, k solana.PrivateKey, mode os.FileMode) string {
	t.Helper()
	ints := make([]int, len(k))
	for i, b := range k {
		ints[i] = int(b)
	}
	b, _ := json.Marshal(ints)
	path := filepath.Join(t.TempDir(), "keeper.json")
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadKey(t *testing.T) {
	ctx := context.Background()
	k := svmtest.NewKey(t)
	got, err := keepercli.LoadKey(ctx, "file:"+writeKey(t, k, 0o600), nil)
	if err != nil || !got.PublicKey().Equals(k.PublicKey()) {
		t.Fatalf("keypair file: %v", err)
	}
	if _, err := keepercli.LoadKey(ctx, "file:"+writeKey(t, k, 0o644), nil); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable key file: %v", err)
	}
	secrets := func(_ context.Context, kind, name string) (string, error) {
		switch name {
		case "good":
			return k.String(), nil
		case "garbage":
			return "not-a-key-" + k.String()[:20], nil
		}
		return "", errors.New("no such secret")
	}
	for _, kind := range []string{"secretsmanager", "ssm"} {
		if got, err := keepercli.LoadKey(ctx, kind+":good", secrets); err != nil || !got.PublicKey().Equals(k.PublicKey()) {
			t.Fatalf("%s: %v", kind, err)
		}
	}
	_, err = keepercli.LoadKey(ctx, "ssm:garbage", secrets)
	if err == nil || strings.Contains(err.Error(), k.String()[:20]) {
		t.Fatalf("a bad secret must fail without echoing it: %v", err)
	}
	for _, ref := range []string{"env:C0MPUTE_KEY", "file:", k.String()} {
		if _, err := keepercli.LoadKey(ctx, ref, secrets); err == nil {
			t.Fatalf("%q accepted", ref)
		}
	}
}

func writeConfig(t *testing.T, v map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(v)
	path := filepath.Join(t.TempDir(), "keeper-config.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// svmConfig is a configuration for the SVM env e with the keeper's wallet
// kp (as its key, and with treasury, as its treasury too) and the ledger
// at store.
func svmConfig(t *testing.T, e *svmtest.Env, kp solana.PrivateKey, store string, treasury bool) string {
	t.Helper()
	m := map[string]any{"rpc_url": e.URL, "staking_program": e.Config.StakingProgram.String(),
		"rewards_program": e.Config.RewardsProgram.String(), "zero_mint": e.Config.ZeroMint.String(),
		"usdc_mint": e.Config.USDCMint.String(), "store": store, "key": "file:" + writeKey(t, kp, 0o600)}
	if treasury {
		m["treasury"] = kp.PublicKey().String()
	}
	return writeConfig(t, m)
}

// keeperRun runs the command and fails the test unless it exits 0; the
// key is never printed.
func keeperRun(t *testing.T, kp solana.PrivateKey, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := keepercli.Main(context.Background(), args, &out, &errb, nil); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errb.String())
	}
	if strings.Contains(out.String()+errb.String(), kp.String()) {
		t.Fatal("the key was printed")
	}
	return out.String()
}

func decodeReport(t *testing.T, out string) keepercli.Report {
	t.Helper()
	var rep keepercli.Report
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("-json output: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("-json printed more than one document:\n%s", out)
	}
	return rep
}

// TestPayoutsDryRunThenExecute drives the command against the SVM: the dry
// run prints the plan (text, or one JSON document) and moves nothing;
// -execute pays once, and a second -execute pays nothing more.
func TestPayoutsDryRunThenExecute(t *testing.T) {
	e := svmtest.NewEnv(t)
	kp := svmtest.NewKey(t)
	e.Airdrop(t, kp.PublicKey(), 10_000_000_000)
	e.MintTo(t, e.Config.USDCMint, onchain.TokenProgram, kp.PublicKey(), 50_000_000)
	worker, small := svmtest.NewKey(t).PublicKey(), svmtest.NewKey(t).PublicKey()
	owed := filepath.Join(t.TempDir(), "owed.json")
	if err := os.WriteFile(owed, []byte(fmt.Sprintf(`[{"owner":%q,"amount":1500000},{"owner":%q,"amount":999999}]`, worker, small)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := svmConfig(t, e, kp, filepath.Join(t.TempDir(), "ledger.db"), false)

	text := keeperRun(t, kp, "-config", cfg, "-id", "w1", "-owed", owed, "payouts")
	for _, want := range []string{"DRY RUN", worker.String(), "1.500000", small.String(), "below minimum", "fee estimate"} {
		if !strings.Contains(text, want) {
			t.Errorf("the dry run's text lacks %q:\n%s", want, text)
		}
	}
	rep := decodeReport(t, keeperRun(t, kp, "payouts", "-json", "-config", cfg, "-owed", owed, "-id", "w1"))
	p := rep.Payouts
	if rep.Execute || p == nil || len(p.Transfers) != 1 || p.Transfers[0].Recipient != worker.String() || p.Transfers[0].Amount != "1.500000" ||
		p.Transfers[0].State != "planned" || len(p.Skipped) != 1 || p.Skipped[0].Reason != "below_minimum" || p.FeeEstimate == nil || p.FeeEstimate.Transactions != 1 {
		t.Fatalf("dry run report: %+v", p)
	}
	if rep.Treasury.Wallet != kp.PublicKey().String() || rep.Treasury.USDC != "50.000000" || rep.Treasury.SOL != "10.000000000" {
		t.Fatalf("treasury %+v", rep.Treasury)
	}
	if got := e.TokenBalance(t, e.Config.USDCATA(worker)); got != 0 {
		t.Fatalf("dry run paid %d", got)
	}
	rep = decodeReport(t, keeperRun(t, kp, "-config", cfg, "-json", "-execute", "-id", "w1", "-owed", owed, "payouts"))
	if p := rep.Payouts; p.Result == nil || p.Result.Confirmed != 1 || p.Transfers[0].State != "confirmed" || p.Transfers[0].Signature == "" {
		t.Fatalf("execute report: %+v %+v", p, p.Result)
	}
	keeperRun(t, kp, "-config", cfg, "-execute", "-id", "w1", "-owed", owed, "payouts")
	if got := e.TokenBalance(t, e.Config.USDCATA(worker)); got != 1_500_000 {
		t.Fatalf("worker paid %d, want 1500000 once", got)
	}
	// A dry run of the paid run shows the ledger's transfers, paid.
	rep = decodeReport(t, keeperRun(t, kp, "-config", cfg, "-json", "-id", "w1", "-owed", owed, "payouts"))
	if p := rep.Payouts; !p.Sealed || len(p.Transfers) != 1 || p.Transfers[0].State != "confirmed" {
		t.Fatalf("dry run after execution: %+v", p)
	}
}

// rewardsWorld is a ledger whose customer deposited 12 credits and spent
// 10 on a job that ended: 0.10 USDC of revenue, 0.02 owed; the treasury
// holds those 0.12, the operator's reserve of 100 units and 0.5 USDC sent
// by someone. A staker holds 5 matured units, another 3 units staked now.
func rewardsWorld(t *testing.T, e *svmtest.Env, kp solana.PrivateKey) (ledgerPath string, owner solana.PublicKey) {
	t.Helper()
	e.Airdrop(t, kp.PublicKey(), 10_000_000_000)
	e.MintTo(t, e.Config.USDCMint, onchain.TokenProgram, kp.PublicKey(), 120_000+100+500_000)
	ledgerPath = filepath.Join(t.TempDir(), "ledger.db")
	st, err := embedded.Open(ledgerPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	if err := st.CreateAccount(ctx, store.Account{ID: "customer", CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Grant(ctx, "customer", 12, "deposit-1", true); err != nil {
		t.Fatal(err)
	}
	if err := st.PutAPIKey(ctx, store.Secret{Hash: "h", ID: "h", AccountID: "customer", CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Admit(ctx, store.AdmitRequest{KeyHash: "h", Window: at, Limit: 1, Job: store.Job{ID: "j", Model: "m", Price: 10, Listener: "l", Created: at}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Fail(ctx, "j", "client_gone", false, at); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	owner = svmtest.NewKey(t).PublicKey()
	for _, s := range []zerostaking.StakeAccount{
		{Owner: owner, Total: 5, Deposits: []zerostaking.Deposit{{Amount: 5, Time: 1}}},
		{Owner: svmtest.NewKey(t).PublicKey(), Total: 3, Deposits: []zerostaking.Deposit{{Amount: 3, Time: at.Add(4 * time.Hour).Unix()}}},
	} {
		data, _ := s.Marshal()
		e.SetAccount(t, e.Config.StakePDA(s.Owner), e.Config.StakingProgram, append(zerostaking.Account_StakeAccount[:], data...))
	}
	return ledgerPath, owner
}

// TestRewardsDryRun: the dry run reads the stake accounts and the treasury
// from the chain and the revenue from the store, and prints the books and
// the split of the revenue, never of what customers are owed or the
// reserve, and the staker whose stake is not matured as skipped; with
// flags after the command too. Executing without a PumpSwap pool
// configured is refused.
func TestRewardsDryRun(t *testing.T) {
	e := svmtest.NewEnv(t)
	kp := svmtest.NewKey(t)
	ledgerPath, owner := rewardsWorld(t, e, kp)
	cfg := svmConfig(t, e, kp, ledgerPath, false)
	rep := decodeReport(t, keeperRun(t, kp, "rewards", "-config", cfg, "-reserve", "100", "-at", "2026-11-29", "-json"))
	r := rep.Rewards
	if r == nil || r.Split == nil || r.Books == nil {
		t.Fatalf("report %+v", rep)
	}
	if s := r.Split; s.SplitUSDC != "0.100000" || s.RewardPotUSDC != "0.050000" || s.BurnPotUSDC != "0.050000" ||
		len(r.Stakers) != 1 || r.Stakers[0].Owner != owner.String() || r.Stakers[0].USDC != "0.050000" || r.Stakers[0].MaturedZERO != "0.000005" {
		t.Fatalf("split %+v, stakers %+v", s, r.Stakers)
	}
	wantBooks := keepercli.BooksView{TreasuryUSDC: "0.620100", CustomerCreditsUSDC: "0.020000", UnpaidEarningsUSDC: "0.000000",
		ReserveUSDC: "0.000100", LiabilitiesUSDC: "0.020100", CarriedRewardsUSDC: "0.000000", RevenueCredits: 10,
		InflowsUSDC: "0.000000", RevenueUSDC: "0.100000", AboveBooksUSDC: "0.500000"}
	if *r.Books != wantBooks {
		t.Fatalf("books = %+v\nwant    %+v", *r.Books, wantBooks)
	}
	if len(r.Skipped) != 1 || r.Skipped[0].Reason != "stake_not_matured" || r.Skipped[0].StakeZERO != "0.000003" {
		t.Fatalf("skipped %+v", r.Skipped)
	}
	if f := r.FeeEstimate; f == nil || f.Transactions != 2 || f.UnbuiltSwaps != 1 || f.NewAccounts != 1 {
		t.Fatalf("fee estimate %+v", f)
	}
	text := keeperRun(t, kp, "-config", cfg, "rewards", "-at", "2026-11-29", "-reserve", "100")
	for _, want := range []string{"rewards, day 2026-11-29: DRY RUN", "above the books", "0.500000", owner.String(), "stake not matured", "buyback and burn"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	var out, errb bytes.Buffer
	if code := keepercli.Main(context.Background(), []string{"-config", cfg, "-execute", "rewards"}, &out, &errb, nil); code != 1 || !strings.Contains(errb.String(), "pumpswap_pool") {
		t.Fatalf("execute without a pool: exit %d, %s", code, errb.String())
	}
}

func fileState(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return fmt.Sprintf("%x %v %v", sum, st.ModTime(), st.Mode())
}

// TestDryRunNeedsOnlyThePublicKeyAndWritesNothing: with "treasury" and no
// "key", every dry run works, and the ledger file is neither changed nor,
// where it does not exist, created; -execute then says the key is
// missing, and a key that is not the treasury's is refused.
func TestDryRunNeedsOnlyThePublicKeyAndWritesNothing(t *testing.T) {
	e := svmtest.NewEnv(t)
	kp := svmtest.NewKey(t)
	ledgerPath, _ := rewardsWorld(t, e, kp)
	missing := filepath.Join(t.TempDir(), "no-ledger-yet.db")
	for _, path := range []string{ledgerPath, missing} {
		m := map[string]any{"rpc_url": e.URL, "staking_program": e.Config.StakingProgram.String(),
			"rewards_program": e.Config.RewardsProgram.String(), "zero_mint": e.Config.ZeroMint.String(),
			"usdc_mint": e.Config.USDCMint.String(), "store": path, "treasury": kp.PublicKey().String(),
			"fee_source": svmtest.NewKey(t).PublicKey().String()}
		cfg := writeConfig(t, m)
		before := fileState(t, path)
		owed := writeFile(t, "owed.json", "[]")
		for _, args := range [][]string{
			{"rewards", "-at", "2026-11-29"},
			{"allowance", "-at", "2026-11-29"},
			{"payouts", "-at", "2026-11-29"},
			{"requested-payouts", "-at", "2026-11-29T07:30:00Z"},
			{"payouts", "-id", "x", "-owed", owed},
		} {
			rep := decodeReport(t, keeperRun(t, kp, append([]string{"-config", cfg, "-json"}, args...)...))
			wantAccess := "read_only"
			if path == missing {
				wantAccess = "empty"
			}
			if rep.Ledger.Access != wantAccess || rep.Treasury.Wallet != kp.PublicKey().String() {
				t.Errorf("%v: ledger %+v, treasury %+v", args, rep.Ledger, rep.Treasury)
			}
		}
		if after := fileState(t, path); after != before {
			t.Errorf("dry runs changed %s: %s, then %s", path, before, after)
		}
		var out, errb bytes.Buffer
		if code := keepercli.Main(context.Background(), []string{"-config", cfg, "-execute", "payouts"}, &out, &errb, nil); code != 1 ||
			!strings.Contains(errb.String(), `-execute needs "key"`) {
			t.Errorf("execute without a key: exit %d, %s", code, errb.String())
		}
		m["key"] = "file:" + writeKey(t, svmtest.NewKey(t), 0o600)
		cfg = writeConfig(t, m)
		errb.Reset()
		if code := keepercli.Main(context.Background(), []string{"-config", cfg, "-execute", "payouts"}, &out, &errb, nil); code != 1 ||
			!strings.Contains(errb.String(), "must be the same wallet") {
			t.Errorf("execute with another wallet's key: exit %d, %s", code, errb.String())
		}
		if after := fileState(t, path); after != before {
			t.Errorf("refused executions changed %s", path)
		}
	}
}
