package devnet_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/x402"
	"github.com/c0mpute/c0mpute/infra/testenv"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/deposit"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// topUpChain is a local chain with a treasury that takes USDC, a fee
// payer with SOL, and a gateway that takes deposits and top-ups on it.
type topUpChain struct {
	*svmtest.Env
	feePayer solana.PrivateKey
}

func newTopUpChain(t *testing.T) *topUpChain {
	chain := svmtest.NewEnv(t)
	c := &topUpChain{Env: chain, feePayer: svmtest.NewKey(t)}
	chain.Airdrop(t, c.feePayer.PublicKey(), 1_000_000_000)
	chain.MintTo(t, chain.Config.USDCMint, onchain.TokenProgram, chain.Config.Treasury, 0)
	return c
}

func (c *topUpChain) options(t *testing.T, wait time.Duration) (*api.Deposits, *api.TopUps) {
	network, err := x402.Network("devnet")
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.Config
	return &api.Deposits{Mint: cfg.USDCMint, Treasury: cfg.Treasury, Verifier: &deposit.Verifier{RPC: c.RPC, Config: cfg},
			Lister: c.RPC, Label: "c0mpute"},
		&api.TopUps{Network: network, FeePayer: c.feePayer, Chain: c.RPC, Wait: wait}
}

// TestX402TopUp: an agent holding only a keypair and USDC — no SOL, no
// account, no key — tops up with the official x402 client (@x402/fetch +
// @x402/svm) and gets a completion from the official OpenAI SDK
// (infra/sdktest/node/x402.test.mjs). Afterwards the chain shows exactly
// one transfer of 2.5 USDC to the treasury, the fee paid by our fee
// payer, and the agent's ledger one deposit of 250 credits.
func TestX402TopUp(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node", "no node on PATH")
	}
	dir := filepath.Join(moduleRoot(t), "infra", "sdktest", "node")
	for _, pkg := range []string{"@x402/fetch", "@x402/svm", "@solana/kit", "openai"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			testenv.Missing(t, "the npm package "+pkg, "run scripts/test (npm ci in infra/sdktest/node)")
		}
	}
	chain := newTopUpChain(t)
	cfg := chain.Config
	agent := svmtest.NewKey(t)
	agentUSDC := chain.MintTo(t, cfg.USDCMint, onchain.TokenProgram, agent.PublicKey(), 10_000_000)
	deposits, topUps := chain.options(t, 20*time.Second)
	e := newEnv(t, envOptions{deposits: deposits, topUps: topUps})
	e.ollamaWorker()
	feeBefore := balanceOf(t, chain, chain.feePayer.PublicKey())

	keyBytes := make([]int, len(agent)) // solana-keygen's form: numbers, not base64
	for i, b := range agent {
		keyBytes[i] = int(b)
	}
	keyJSON, _ := json.Marshal(keyBytes)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=tap", "x402.test.mjs")
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "C0MPUTE_API="+e.stack.APIURL, "C0MPUTE_RPC_URL="+chain.URL,
		"C0MPUTE_AGENT_KEY="+string(keyJSON), "C0MPUTE_MODEL="+tinyModel,
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
	out, err := cmd.CombinedOutput()
	if pass, fail := tapCount(out, "pass"), tapCount(out, "fail"); err != nil || fail != 0 || pass < 3 {
		t.Fatalf("node --test x402.test.mjs: %v; pass %d (want 3), fail %d; output:\n%s", err, pass, fail, out)
	}

	if got := chain.TokenBalance(t, cfg.TreasuryUSDC()); got != 2_500_000 {
		t.Errorf("treasury holds %d USDC units, want 2500000 (one top-up)", got)
	}
	if got := chain.TokenBalance(t, agentUSDC); got != 7_500_000 {
		t.Errorf("agent holds %d USDC units, want 7500000", got)
	}
	// One transaction of the official client's: two signatures at 5,000
	// lamports and 20,000 compute units at 1 micro-lamport (1 lamport,
	// rounded up).
	if fee := feeBefore - balanceOf(t, chain, chain.feePayer.PublicKey()); fee != 10_001 {
		t.Errorf("the fee payer spent %d lamports, want one transaction's fee (10001)", fee)
	}
	if got := balanceOf(t, chain, agent.PublicKey()); got != 0 {
		t.Errorf("the agent holds %d lamports: it needed none", got)
	}
	acct, err := e.store.GetAccount(context.Background(), agent.PublicKey().String())
	if err != nil {
		t.Fatal(err)
	}
	price := e.stack.Catalog.Models()[0].Price
	if acct.Wallet != agent.PublicKey().String() || acct.TotalDeposited != 250 || acct.Credits != 250-price {
		t.Errorf("agent's account %+v, want 250 deposited and one completion of %d spent", acct, price)
	}
	entries, err := e.store.Entries(context.Background(), acct.ID, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	credits := 0
	for _, en := range entries {
		if en.Kind == store.EntryDeposit {
			credits++
			if en.Credits != 250 {
				t.Errorf("deposit entry of %d credits", en.Credits)
			}
		}
	}
	if credits != 1 {
		t.Errorf("%d deposit entries, want 1: %+v", credits, entries)
	}
}

func balanceOf(t *testing.T, chain *topUpChain, k solana.PublicKey) uint64 {
	t.Helper()
	b, err := chain.RPC.GetBalance(context.Background(), k, "")
	if err != nil {
		t.Fatal(err)
	}
	return b.Value
}
