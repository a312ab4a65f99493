package devnet_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/mr-tron/base58"

	"github.com/c0mpute/c0mpute/clients/zerostaking"
	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/siws"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/keeper"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

type earningsAnswer struct {
	PayoutWallet       string `json:"payout_wallet"`
	Earned             int64  `json:"earned"`
	Paid               int64  `json:"paid"`
	Pending            int64  `json:"pending"`
	MinimumPayout      int64  `json:"minimum_payout"`
	WorkerSharePercent int64  `json:"worker_share_percent"`
	NextPayout         struct {
		At      int64  `json:"at"`
		Credits int64  `json:"credits"`
		Reason  string `json:"reason"`
	} `json:"next_payout"`
	StakeBoost struct {
		Active       bool  `json:"active"`
		Until        int64 `json:"until"`
		SharePercent int64 `json:"share_percent"`
	} `json:"stake_boost"`
	Workers []struct {
		Pubkey        string `json:"pubkey"`
		Earned        int64  `json:"earned"`
		JobsCompleted int64  `json:"jobs_completed"`
	} `json:"workers"`
}

// signAs signs a challenge as the solana key would in a wallet: the message
// text with its address filled in.
func signAs(key solana.PrivateKey, in siws.Input) (msg, sig []byte) {
	in.Address = key.PublicKey().String()
	msg = []byte(siws.Message(in))
	return msg, ed25519.Sign(ed25519.PrivateKey(key), msg)
}

// TestEarningsPaidToProvenWallet: a contributor's account proves a payout
// wallet by signing with it; that wallet's matured stake on the chain earns
// the account the stake boost from the keeper's daily run, so its worker
// earns 80% of real jobs; GET /v1/earnings shows all of it, and the
// keeper's scheduled payout, then a payout the owner asks for, land exactly
// the earnings in USDC in that wallet on a real chain, once however often
// they run; the ledger rows carry the payouts' signatures. Proofs made for
// another account, replayed, or of another kind set nothing.
func TestEarningsPaidToProvenWallet(t *testing.T) {
	ctx := context.Background()
	chain := svmtest.NewEnv(t)
	e := newEnv(t, envOptions{credits: 1000, models: []catalog.Model{{ID: tinyModel, Price: 100}}})
	now := time.Now()
	var got earningsAnswer
	if code := e.call(http.MethodGet, "/earnings", e.apiKey, &got); code != http.StatusOK {
		t.Fatalf("GET /v1/earnings: %d", code)
	}
	if got.Earned != 0 || got.PayoutWallet != "" || got.NextPayout.Reason != "no_payout_wallet" || got.WorkerSharePercent != 70 ||
		got.StakeBoost.Active || got.StakeBoost.SharePercent != 80 || got.MinimumPayout != 100 ||
		got.NextPayout.At <= now.Unix() || got.NextPayout.At > now.Add(24*time.Hour).Unix() {
		t.Fatalf("earnings of a new account %+v", got)
	}

	// The payout wallet: a Solana key that signs the account's challenge.
	payee := svmtest.NewKey(t)
	var in siws.Input
	if code := e.sendJSON(http.MethodPost, "/payout-wallet/challenge", e.apiKey, map[string]any{"wallet": payee.PublicKey().String()}, &in); code != http.StatusOK ||
		in.Statement != fmt.Sprintf(api.PayoutStatement, e.account) || in.Address != payee.PublicKey().String() {
		t.Fatalf("challenge: %d %+v", code, in)
	}
	msg, sig := signAs(payee, in)
	plain := map[string]any{"wallet": payee.PublicKey().String(), "message": string(msg), "signature": base58.Encode(sig)}
	refused := func(name, key string, body any, why string) {
		t.Helper()
		var out struct {
			Error *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		code := e.sendJSON(http.MethodPost, "/payout-wallet", key, body, &out)
		if code != http.StatusBadRequest || out.Error == nil || out.Error.Code != "invalid_wallet_proof" || !strings.Contains(out.Error.Message, why) {
			t.Errorf("%s: %d %+v; want 400 invalid_wallet_proof mentioning %q", name, code, out.Error, why)
		}
	}
	// Another account cannot use the proof: its statement names ours.
	alice := newWallet(t)
	var aliceIn siws.Input
	e.postJSON("/auth/siws/challenge", map[string]any{}, &aliceIn)
	am, as := alice.sign(aliceIn)
	var signedIn signInAnswer
	if code := e.postJSON("/auth/siws/verify", alice.standardForm(aliceIn, am, as), &signedIn); code != http.StatusOK {
		t.Fatalf("alice signs in: %d %+v", code, signedIn.Error)
	}
	refused("a proof made for another account", signedIn.APIKey, plain, "statement")
	// A sign-in message is no payout proof.
	var signIn siws.Input
	e.postJSON("/auth/siws/challenge", map[string]any{"wallet": payee.PublicKey().String()}, &signIn)
	sm, ss := signAs(payee, signIn)
	refused("a sign-in message", e.apiKey, map[string]any{"wallet": payee.PublicKey().String(), "message": string(sm), "signature": base58.Encode(ss)}, "statement")
	// Signed by another key than the wallet it names.
	_, forged := signAs(svmtest.NewKey(t), in)
	refused("a signature of another key", e.apiKey, map[string]any{"wallet": payee.PublicKey().String(), "message": string(msg), "signature": base58.Encode(forged)}, "signature")

	var set struct {
		AccountID string `json:"account_id"`
		Wallet    string `json:"wallet"`
	}
	if code := e.sendJSON(http.MethodPost, "/payout-wallet", e.apiKey, plain, &set); code != http.StatusOK ||
		set.AccountID != e.account || set.Wallet != payee.PublicKey().String() {
		t.Fatalf("set payout wallet: %d %+v", code, set)
	}
	refused("the same proof again", e.apiKey, plain, "used already")
	if a, _ := e.store.GetAccount(ctx, signedIn.AccountID); a.Wallet != alice.addr {
		t.Errorf("alice's payout wallet %q, want her own", a.Wallet)
	}
	// The payout wallet holds 600,000 ZERO of matured stake on the chain:
	// the keeper's daily run boosts the accounts paid to it.
	k := &keeper.Keeper{Config: chain.Config, Ledger: e.store, Earnings: e.store, Accounts: e.store, Stakes: chain.RPC, Balances: chain.Chain}
	k.Exec = &keeper.Executor{Ledger: e.store, Chain: chain.Chain, Keeper: chain.Treasury, Build: k.Build, PriorityFee: 1000,
		MaxResends: 2, Log: slog.New(slog.DiscardHandler)}
	stake := zerostaking.StakeAccount{Owner: payee.PublicKey(), Bump: 255, Total: 600_000_000_000,
		Deposits: []zerostaking.Deposit{{Amount: 600_000_000_000, Time: now.Add(-48 * time.Hour).Unix()}}}
	data, err := stake.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	chain.SetAccount(t, chain.Config.StakePDA(payee.PublicKey()), chain.Config.StakingProgram, append(zerostaking.Account_StakeAccount[:], data...))
	if boosts, err := k.StakeBoosts(ctx, now, keeper.DefaultBoostMin, true); err != nil || len(boosts) != 1 || boosts[0].Account != e.account {
		t.Fatalf("boosts %+v, %v; want this account's", boosts, err)
	}

	// The account's worker serves two jobs of 100 credits: 80% each.
	e.ollamaWorker()
	for range 2 {
		if _, err := e.client.Chat.Completions.New(ctx, chatParams("hello", 3)); err != nil {
			t.Fatal(err)
		}
	}
	got = earningsAnswer{}
	e.call(http.MethodGet, "/earnings", e.apiKey, &got)
	if got.Earned != 160 || got.Pending != 160 || got.Paid != 0 || got.WorkerSharePercent != 80 || !got.StakeBoost.Active ||
		got.PayoutWallet != payee.PublicKey().String() || got.NextPayout.Credits != 160 || got.NextPayout.Reason != "" ||
		len(got.Workers) != 1 || got.Workers[0].Earned != 160 || got.Workers[0].JobsCompleted != 2 {
		t.Fatalf("earnings %+v", got)
	}

	// The keeper pays it from the treasury, on the chain, once.
	chain.MintTo(t, chain.Config.USDCMint, onchain.TokenProgram, chain.Treasury.PublicKey(), 5_000_000)
	for range 2 {
		ts, _, err := k.EarningsPayouts(ctx, now, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) != 1 || ts[0].Recipient != payee.PublicKey().String() || ts[0].Amount != 1_600_000 {
			t.Fatalf("payouts %+v", ts)
		}
	}
	if bal := chain.TokenBalance(t, chain.Config.USDCATA(payee.PublicKey())); bal != 1_600_000 {
		t.Fatalf("the payout wallet holds %d USDC base units, want 1600000", bal)
	}
	got = earningsAnswer{}
	e.call(http.MethodGet, "/earnings", e.apiKey, &got)
	if got.Paid != 160 || got.Pending != 0 || got.NextPayout.Reason != "below_minimum" {
		t.Fatalf("earnings after the payout: %+v", got)
	}
	var page struct {
		Data []struct {
			Type      string `json:"type"`
			Credits   int64  `json:"credits"`
			Signature string `json:"signature"`
			State     string `json:"state"`
		} `json:"data"`
	}
	e.call(http.MethodGet, "/transactions", e.apiKey, &page)
	var payouts int
	for _, d := range page.Data {
		if d.Type != "payout" {
			continue
		}
		payouts++
		tr, err := e.store.GetTransfer(ctx, keeper.EarningsRun(now)+"/payout/"+e.account)
		if err != nil || d.Credits != 160 || d.State != "confirmed" || d.Signature == "" || d.Signature != tr.Signature {
			t.Errorf("payout row %+v; want 160 credits confirmed under %q (%v)", d, tr.Signature, err)
		}
	}
	if payouts != 1 {
		t.Errorf("%d payout rows, want 1", payouts)
	}

	// On request: nothing pending is refused; once 160 more are earned,
	// the keeper's next hourly run pays them, once.
	var refusal struct {
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if code := e.sendJSON(http.MethodPost, "/payouts", e.apiKey, map[string]any{}, &refusal); code != http.StatusConflict ||
		refusal.Error == nil || refusal.Error.Code != "below_minimum" {
		t.Fatalf("a payout of nothing: %d %+v", code, refusal.Error)
	}
	for range 2 {
		if _, err := e.client.Chat.Completions.New(ctx, chatParams("hello", 3)); err != nil {
			t.Fatal(err)
		}
	}
	var req struct {
		Wallet  string `json:"wallet"`
		Credits int64  `json:"credits"`
		RunsAt  int64  `json:"runs_at"`
	}
	if code := e.sendJSON(http.MethodPost, "/payouts", e.apiKey, map[string]any{}, &req); code != http.StatusAccepted ||
		req.Credits != 160 || req.Wallet != payee.PublicKey().String() || req.RunsAt <= time.Now().Unix() {
		t.Fatalf("payout request: %d %+v", code, req)
	}
	// The daily run of a later day would pay everyone; the hourly run
	// pays only those who asked, and the same hour's run again pays
	// nothing more.
	hour := time.Now().Add(time.Hour)
	for range 2 {
		ts, _, err := k.RequestedPayouts(ctx, hour, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) != 1 || ts[0].Amount != 1_600_000 || ts[0].State != "confirmed" {
			t.Fatalf("requested payouts %+v", ts)
		}
	}
	if bal := chain.TokenBalance(t, chain.Config.USDCATA(payee.PublicKey())); bal != 3_200_000 {
		t.Fatalf("the payout wallet holds %d after the requested payout, want 3200000", bal)
	}
	got = earningsAnswer{}
	e.call(http.MethodGet, "/earnings", e.apiKey, &got)
	if got.Paid != 320 || got.Pending != 0 {
		t.Fatalf("earnings after the requested payout: %+v", got)
	}
	if a, _ := e.store.GetAccount(ctx, e.account); !a.PayoutRequested.IsZero() {
		t.Errorf("the request is still open after its payout: %v", a.PayoutRequested)
	}
}
