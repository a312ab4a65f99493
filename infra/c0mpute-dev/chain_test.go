package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
	"github.com/c0mpute/c0mpute/infra/devnet"
	"github.com/c0mpute/c0mpute/infra/testenv"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/keepercli"
)

// TestLocalChain runs C0MPUTE_CHAIN=local's chain as scripts/dev does and
// walks the README's path from its dev wallet to credits with
// c0mpute-wallet: the chain holds what it says (1,000 test USDC and SOL in
// the dev wallet, SOL for the fee payer, a faucet), a restart keeps the
// addresses, and a sign-in then a 5 USDC Solana Pay deposit credit 500.
func TestLocalChain(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		testenv.Missing(t, "node", "no node on PATH")
	}
	dir := filepath.Join("..", "..", "onchain", "svmtest")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "litesvm")); err != nil {
		testenv.Missing(t, "the local chain's npm packages", "npm install in onchain/svmtest")
	}
	ctx := context.Background()
	home := t.TempDir()
	c, err := startChain(ctx, dir, home, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	client := rpc.New(c.URL)
	mint := solana.MustPublicKeyFromBase58(c.Mint)
	wallet := solana.MustPublicKeyFromBase58(c.DevWallet)
	usdc, err := client.GetTokenAccountBalance(ctx, onchain.ATA(wallet, mint, onchain.TokenProgram), rpc.CommitmentFinalized)
	if err != nil || usdc.Value.Amount != "1000000000" || usdc.Value.Decimals != 6 {
		t.Fatalf("dev wallet USDC: %+v %v", usdc, err)
	}
	for who, k := range map[string]string{"dev wallet": c.DevWallet, "fee payer": c.FeePayer} {
		if b, err := client.GetBalance(ctx, solana.MustPublicKeyFromBase58(k), rpc.CommitmentFinalized); err != nil || b.Value < 1_000_000_000 {
			t.Errorf("%s holds %v lamports (%v)", who, b, err)
		}
	}
	fresh := solana.NewWallet().PublicKey()
	if _, err := client.RequestAirdrop(ctx, fresh, 1_000_000_000, rpc.CommitmentFinalized); err != nil {
		t.Fatal(err)
	}
	if b, err := client.GetBalance(ctx, fresh, rpc.CommitmentFinalized); err != nil || b.Value != 1_000_000_000 {
		t.Errorf("after an airdrop of 1 SOL: %v %v", b, err)
	}

	deposits, topUps, err := c.payments()
	if err != nil {
		t.Fatal(err)
	}
	ledger := filepath.Join(home, "c0.db")
	// The network runs, and is stopped, before the keeper opens its store:
	// the embedded store is one process's at a time.
	func() {
		st, err := embedded.Open(ledger, embedded.WithNoSync())
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		stack, err := devnet.Start(ctx, devnet.Config{Store: st, APIAddr: "127.0.0.1:0", RelayAddr: "127.0.0.1:0",
			Models: []catalog.Model{{ID: "m", Price: 10}}, Limits: devnet.ScriptedLimits(), Log: slog.New(slog.DiscardHandler),
			Deposits: deposits, TopUps: topUps})
		if err != nil {
			t.Fatal(err)
		}
		defer stack.Close()
		bin := buildWallet(t)
		env := append(os.Environ(), "OPENAI_BASE_URL="+stack.APIURL, "C0MPUTE_RPC_URL="+c.URL, "C0MPUTE_DEV_WALLET="+c.DevWalletKey)
		out := runWallet(t, bin, env, "signin")
		key, ok := strings.CutPrefix(strings.TrimSpace(out), "OPENAI_API_KEY=")
		if !ok || !strings.HasPrefix(key, "sk-") {
			t.Fatalf("signin printed %q", out)
		}
		out = runWallet(t, bin, append(env, "OPENAI_API_KEY="+key), "deposit", "5")
		if !strings.Contains(out, "500 credits added; balance 500 credits") {
			t.Fatalf("deposit printed %q", out)
		}
		acct, err := st.GetAccount(ctx, c.DevWallet)
		if err != nil || acct.Credits != 500 || acct.TotalDeposited != 500 {
			t.Fatalf("dev wallet's account %+v (%v)", acct, err)
		}
	}()
	checkKeeperConfig(t, c, home, ledger)

	// A restart keeps the keys, so the addresses dev.env names.
	c.Close()
	again, err := startChain(ctx, dir, home, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.Mint != c.Mint || again.Treasury != c.Treasury || again.DevWallet != c.DevWallet || again.FeePayer != c.FeePayer {
		t.Errorf("a restart changed the addresses: %+v then %+v", c, again)
	}
}

func buildWallet(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "c0mpute-wallet")
	cmd := exec.Command("go", "build", "-o", bin, "../../onchain/cmd/c0mpute-wallet")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build c0mpute-wallet: %v\n%s", err, out)
	}
	return bin
}

func runWallet(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("c0mpute-wallet %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.String()
}

// checkKeeperConfig: the keeper.json the dev runner writes for the chain
// loads, names the chain, the store and the treasury's key, and a dry run
// with it reads the 5 USDC deposit: in the treasury, and owed to the
// customer; writing it again keeps the same addresses.
func checkKeeperConfig(t *testing.T, c *localChain, home, ledger string) {
	t.Helper()
	ctx := context.Background()
	path, err := c.writeKeeperConfig(home, ledger)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(home, keeperConfigFile) {
		t.Errorf("keeper config at %s", path)
	}
	cfg, err := keepercli.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RPCURL != c.URL || cfg.USDCMint != c.Mint || cfg.Treasury != c.Treasury || cfg.Store != ledger {
		t.Errorf("keeper config %+v", cfg)
	}
	if k, err := keepercli.LoadKey(ctx, cfg.Key, nil); err != nil || k.PublicKey().String() != c.Treasury {
		t.Errorf("keeper key %q: %v", cfg.Key, err)
	}
	if again, err := c.writeKeeperConfig(home, ledger); err != nil {
		t.Fatal(err)
	} else if cfg2, err := keepercli.LoadConfig(again); err != nil || cfg2 != cfg {
		t.Errorf("written again: %+v (%v), first %+v", cfg2, err, cfg)
	}
	if cmd := keeperCommand(path, ledger); !strings.Contains(cmd, "c0mpute-keeper -config "+path+" payouts") {
		t.Errorf("keeper command %q", cmd)
	}
	for _, command := range []string{"rewards", "payouts", "allowance"} {
		var out, errb bytes.Buffer
		if code := keepercli.Main(ctx, []string{"-config", path, command, "-json"}, &out, &errb, nil); code != 0 {
			t.Fatalf("keeper %s: exit %d: %s", command, code, errb.String())
		}
		var rep keepercli.Report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("keeper %s: %v\n%s", command, err, out.String())
		}
		if rep.Ledger.Access != "read_only" || rep.Treasury.Wallet != c.Treasury || rep.Treasury.USDC != "5.000000" {
			t.Errorf("keeper %s: ledger %+v, treasury %+v", command, rep.Ledger, rep.Treasury)
		}
		if command == "rewards" && (rep.Rewards == nil || rep.Rewards.Books == nil || rep.Rewards.Books.CustomerCreditsUSDC != "5.000000") {
			t.Errorf("keeper rewards: %+v", rep.Rewards)
		}
	}
}
