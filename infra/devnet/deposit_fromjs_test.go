package devnet_test

import (
	"context"
	"testing"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/deposit"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// TestDepositFromJS: a user holding a Solana wallet (SOL and test USDC on
// a local LiteSVM chain) goes from nothing to a completion through a
// Solana Pay deposit, with the official client libraries
// (infra/sdktest/node/deposit.test.mjs): it signs in with a
// @solana/web3.js keypair and tweetnacl, pays the intent's transfer
// request as a wallet does with @solana/pay (parseURL, createTransfer),
// has the gateway verify it, chats through the OpenAI SDK on the sign-in's
// key and reads its ledger; a forged or replayed sign-in, a transfer
// verified twice, sent elsewhere, without the reference or not finalized
// yet, each gets a clear error and no credit. Afterwards the chain and the
// store agree: every USDC that moved is where the transfers sent it, and
// the account holds exactly the two credited deposits, once each, less one
// completion.
func TestDepositFromJS(t *testing.T) {
	node, dir := nodeHarness(t, "@solana/pay", "@solana/kit", "@solana/web3.js", "@solana/wallet-standard-util", "tweetnacl", "openai")
	chain := svmtest.NewEnv(t)
	cfg := chain.Config
	const funded = 10_000_000 // 10 USDC
	user := svmtest.NewKey(t)
	chain.Airdrop(t, user.PublicKey(), 1_000_000_000) // fees
	userUSDC := chain.MintTo(t, cfg.USDCMint, onchain.TokenProgram, user.PublicKey(), funded)
	chain.MintTo(t, cfg.USDCMint, onchain.TokenProgram, cfg.Treasury, 0)
	elsewhere := svmtest.NewKey(t).PublicKey()
	elsewhereUSDC := chain.MintTo(t, cfg.USDCMint, onchain.TokenProgram, elsewhere, 0)

	verifier := &deposit.Verifier{RPC: chain.RPC, Config: cfg}
	e := newEnv(t, envOptions{deposits: &api.Deposits{Mint: cfg.USDCMint, Treasury: cfg.Treasury,
		Verifier: verifier, Lister: chain.RPC, Label: "c0mpute"}})
	e.ollamaWorker()

	runNodeTest(t, node, dir, "deposit.test.mjs", 5, "C0MPUTE_API="+e.stack.APIURL, "C0MPUTE_RPC_URL="+chain.URL,
		"C0MPUTE_WALLET_KEY="+keypairJSON(user), "C0MPUTE_ELSEWHERE="+elsewhere.String(), "C0MPUTE_MODEL="+tinyModel)

	// The chain: 2.5 + 1.5 USDC credited and 1 USDC paid without the
	// reference reached the treasury; 1 USDC went elsewhere.
	if got := chain.TokenBalance(t, cfg.TreasuryUSDC()); got != 5_000_000 {
		t.Errorf("treasury holds %d USDC units, want 5000000", got)
	}
	if got := chain.TokenBalance(t, elsewhereUSDC); got != 1_000_000 {
		t.Errorf("the other wallet holds %d USDC units, want 1000000", got)
	}
	if got := chain.TokenBalance(t, userUSDC); got != funded-6_000_000 {
		t.Errorf("the user holds %d USDC units, want %d", got, funded-6_000_000)
	}

	// The store: the wallet's account, its three intents (the last
	// finalized late, one never paid properly, the first), the two
	// credited each by exactly the transfer the chain shows.
	bg := context.Background()
	wallet := user.PublicKey().String()
	acct, err := e.store.GetAccount(bg, wallet)
	if err != nil {
		t.Fatal(err)
	}
	price := e.stack.Catalog.Models()[0].Price
	if acct.Wallet != wallet || acct.TotalDeposited != 400 || acct.Credits != 400-price {
		t.Errorf("the wallet's account %+v, want 400 deposited and one completion of %d spent", acct, price)
	}
	intents, err := e.store.ListDeposits(bg, wallet, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		state         store.DepositState
		asked, usdc   int64
		credits, sigs int
	}{{store.DepositCredited, 1_500_000, 1_500_000, 150, 1}, {store.DepositPending, 1_000_000, 0, 0, 0}, {store.DepositCredited, 2_500_000, 2_500_000, 250, 1}}
	if len(intents) != len(want) {
		t.Fatalf("%d intents, want %d: %+v", len(intents), len(want), intents)
	}
	refs := map[string]int64{} // each credited transfer's ledger ref → its credits
	for i, w := range want {
		d := intents[i]
		if d.State != w.state || d.AmountUSDC != w.asked || d.CreditedUSDC != w.usdc || d.Credits != int64(w.credits) || len(d.Signatures) != w.sigs {
			t.Errorf("intent %d: %+v, want %+v", i, d, w)
			continue
		}
		for _, s := range d.Signatures {
			sig := solana.MustSignatureFromBase58(s)
			onChain, err := verifier.VerifyReference(bg, sig, solana.MustPublicKeyFromBase58(d.Reference))
			if err != nil || int64(onChain.USDC) != d.CreditedUSDC || onChain.Credits != d.Credits {
				t.Errorf("intent %s's transfer %s on-chain: %+v, %v; want %d USDC units with its reference", d.ID, s, onChain, err, d.CreditedUSDC)
			}
			// The request's memo, which @solana/pay put before the
			// transfer, names the intent.
			if memo, err := verifier.Verify(bg, sig); err != nil || memo.Account != d.ID {
				t.Errorf("intent %s's transfer %s: memo %q, %v; want the intent's id", d.ID, s, memo.Account, err)
			}
			refs[deposit.IdempotencyKey(sig)] = d.Credits
		}
	}
	entries, err := e.store.Entries(bg, wallet, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var deposits, charges int
	for _, en := range entries {
		switch en.Kind {
		case store.EntryDeposit:
			deposits++
			if c, ok := refs[en.Ref]; !ok || en.Credits != c {
				t.Errorf("deposit entry %+v: not one credited transfer's credits, once", en)
			}
			delete(refs, en.Ref)
		case store.EntryCharge:
			charges++
			if en.Credits != -price {
				t.Errorf("charge entry %+v, want %d", en, -price)
			}
		}
	}
	if deposits != 2 || len(refs) != 0 || charges != 1 {
		t.Errorf("ledger: %d deposit entries (uncredited transfers left %v), %d charges; want each credited transfer once and one charge: %+v",
			deposits, refs, charges, entries)
	}
	// The sweep finds nothing more: the refused transfers stay refused.
	if n, err := e.stack.SweepDeposits(bg); err != nil || n != 0 {
		t.Errorf("sweep after the test: %d credited, %v; want none", n, err)
	}
	if a, _ := e.store.GetAccount(bg, wallet); a.Credits != acct.Credits {
		t.Errorf("credits after the sweep: %d, want %d", a.Credits, acct.Credits)
	}
}
