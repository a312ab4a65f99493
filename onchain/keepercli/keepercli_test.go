package keepercli_test

import (
	"bytes"
	"context"
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
	"github.com/c0mpute/c0mpute/onchain/keeper"
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

func TestLoadConfigRefusesBadInput(t *testing.T) {
	good := map[string]any{"rpc_url": "http://127.0.0.1:8899", "staking_program": solana.SystemProgramID.String(),
		"rewards_program": solana.SystemProgramID.String(), "zero_mint": solana.SystemProgramID.String(),
		"usdc_mint": solana.SystemProgramID.String(), "store": "/tmp/x.db", "key": "file:/k.json"}
	if _, err := keepercli.LoadConfig(writeConfig(t, good)); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, change := range map[string]func(m map[string]any){
		"bad pubkey":    func(m map[string]any) { m["zero_mint"] = "not base58!" },
		"env key":       func(m map[string]any) { m["key"] = "env:KEEPER_KEY" },
		"no rpc":        func(m map[string]any) { delete(m, "rpc_url") },
		"unknown field": func(m map[string]any) { m["private_key"] = "x" },
		"cap above 100": func(m map[string]any) { m["allowance_cap_bp"] = 10001 },
	} {
		m := map[string]any{}
		for k, v := range good {
			m[k] = v
		}
		change(m)
		if _, err := keepercli.LoadConfig(writeConfig(t, m)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestPayoutsDryRunThenExecute drives the command against the SVM: the dry
// run prints the plan and moves nothing; --execute pays once, and a second
// --execute pays nothing more.
func TestPayoutsDryRunThenExecute(t *testing.T) {
	e := svmtest.NewEnv(t)
	kp := svmtest.NewKey(t)
	e.Airdrop(t, kp.PublicKey(), 10_000_000_000)
	e.MintTo(t, e.Config.USDCMint, onchain.TokenProgram, kp.PublicKey(), 50_000_000)
	worker := svmtest.NewKey(t).PublicKey()
	owed := filepath.Join(t.TempDir(), "owed.json")
	if err := os.WriteFile(owed, []byte(fmt.Sprintf(`[{"owner":%q,"amount":1500000}]`, worker)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, map[string]any{"rpc_url": e.URL, "staking_program": e.Config.StakingProgram.String(),
		"rewards_program": e.Config.RewardsProgram.String(), "zero_mint": e.Config.ZeroMint.String(),
		"usdc_mint": e.Config.USDCMint.String(), "store": filepath.Join(t.TempDir(), "ledger.db"),
		"key": "file:" + writeKey(t, kp, 0o600)})
	run := func(args ...string) string {
		var out, errb bytes.Buffer
		if code := keepercli.Main(context.Background(), append([]string{"-config", cfg}, args...), &out, &errb, nil); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		if strings.Contains(out.String()+errb.String(), kp.String()) {
			t.Fatal("the key was printed")
		}
		return out.String()
	}
	out := run("-id", "w1", "-owed", owed, "payouts")
	if !strings.Contains(out, worker.String()) || !strings.Contains(out, `"planned"`) && !strings.Contains(out, `"amount": 1500000`) {
		t.Fatalf("dry run output lacks the plan:\n%s", out)
	}
	if got := e.TokenBalance(t, e.Config.USDCATA(worker)); got != 0 {
		t.Fatalf("dry run paid %d", got)
	}
	run("-execute", "-id", "w1", "-owed", owed, "payouts")
	run("-execute", "-id", "w1", "-owed", owed, "payouts")
	if got := e.TokenBalance(t, e.Config.USDCATA(worker)); got != 1_500_000 {
		t.Fatalf("worker paid %d, want 1500000 once", got)
	}
}

// TestRewardsDryRun: the dry run reads the stake accounts and the treasury
// from the chain and the revenue from the store, and prints the books and
// the split of the revenue, never of what customers are owed or the
// reserve; executing without a PumpSwap pool configured is refused.
func TestRewardsDryRun(t *testing.T) {
	e := svmtest.NewEnv(t)
	kp := svmtest.NewKey(t)
	e.Airdrop(t, kp.PublicKey(), 10_000_000_000)
	// A customer deposited 12 credits and spent 10 on a job that ended:
	// 0.10 USDC of revenue, 0.02 owed. The treasury holds those 0.12,
	// the operator's reserve of 100 units and 0.5 USDC sent by someone.
	e.MintTo(t, e.Config.USDCMint, onchain.TokenProgram, kp.PublicKey(), 120_000+100+500_000)
	ledgerPath := filepath.Join(t.TempDir(), "ledger.db")
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
	owner := svmtest.NewKey(t).PublicKey()
	acct := zerostaking.StakeAccount{Owner: owner, Total: 5, Deposits: []zerostaking.Deposit{{Amount: 5, Time: 1}}}
	data, _ := acct.Marshal()
	e.SetAccount(t, e.Config.StakePDA(owner), e.Config.StakingProgram, append(zerostaking.Account_StakeAccount[:], data...))
	cfg := writeConfig(t, map[string]any{"rpc_url": e.URL, "staking_program": e.Config.StakingProgram.String(),
		"rewards_program": e.Config.RewardsProgram.String(), "zero_mint": e.Config.ZeroMint.String(),
		"usdc_mint": e.Config.USDCMint.String(), "store": ledgerPath,
		"key": "file:" + writeKey(t, kp, 0o600)})
	var out, errb bytes.Buffer
	if code := keepercli.Main(context.Background(), []string{"-config", cfg, "-reserve", "100", "-at", "2026-11-29", "rewards"}, &out, &errb, nil); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep struct {
		Books keeper.Books `json:"books"`
		Plan  struct {
			Split     uint64                   `json:"split"`
			RewardPot uint64                   `json:"reward_pot"`
			BurnPot   uint64                   `json:"burn_pot"`
			Rewards   []struct{ Owner string } `json:"rewards"`
		} `json:"plan"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("output: %v\n%s", err, out.String())
	}
	if rep.Plan.Split != 100_000 || rep.Plan.RewardPot != 50_000 || rep.Plan.BurnPot != 50_000 || len(rep.Plan.Rewards) != 1 || rep.Plan.Rewards[0].Owner != owner.String() {
		t.Fatalf("plan = %+v", rep.Plan)
	}
	wantBooks := keeper.Books{TreasuryUSDC: 620_100, CustomerCredits: 20_000, Reserved: 100, Liabilities: 20_100,
		RevenueCredits: 10, Revenue: 100_000}
	if rep.Books != wantBooks {
		t.Fatalf("books = %+v\nwant    %+v", rep.Books, wantBooks)
	}
	errb.Reset()
	if code := keepercli.Main(context.Background(), []string{"-config", cfg, "-execute", "rewards"}, &out, &errb, nil); code != 1 || !strings.Contains(errb.String(), "pumpswap_pool") {
		t.Fatalf("execute without a pool: exit %d, %s", code, errb.String())
	}
}
