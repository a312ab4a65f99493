package devnet_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/clients/zerostaking"
	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

type stakingAnswer struct {
	Wallet       string `json:"wallet"`
	StakeAccount string `json:"stake_account"`
	Staked       string `json:"staked"`
	Matured      string `json:"matured"`
	Maturing     string `json:"maturing"`
	Deposits     []struct {
		Amount    string `json:"amount"`
		Time      int64  `json:"time"`
		MaturesAt int64  `json:"matures_at"`
		Matured   bool   `json:"matured"`
	} `json:"deposits"`
	Autocompound   bool   `json:"autocompound"`
	RewardVault    string `json:"reward_vault"`
	Rewards        string `json:"rewards"`
	AllowanceToday int64  `json:"allowance_today"`
	Decimals       int    `json:"decimals"`
}

type stakingTx struct {
	Action               string `json:"action"`
	Wallet               string `json:"wallet"`
	Amount               string `json:"amount"`
	Transaction          string `json:"transaction"`
	LastValidBlockHeight uint64 `json:"last_valid_block_height"`
	Error                *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// TestStakingThroughTheAPI: a staker reads its stake from the chain through
// GET /v1/staking (each deposit with when it matures, the reward vault's
// USDC, today's allowance), and asks POST /v1/staking/transactions for each
// action; @solana/web3.js signs every unsigned v0 transaction as a wallet
// does (infra/sdktest/node/staking.test.mjs), the signature verifies over
// the bytes the gateway built, and each program instruction is byte for
// byte what @coral-xyz/anchor builds from the IDL for the same action (its
// data and accounts, in order, each with the privileges Anchor asks).
// Malformed requests get a clear 400 and nothing else.
func TestStakingThroughTheAPI(t *testing.T) {
	node, dir := nodeHarness(t, "@solana/web3.js")
	ctx := context.Background()
	chain := svmtest.NewEnv(t)
	cfg := chain.Config
	e := newEnv(t, envOptions{staking: &api.Staking{Config: cfg, Chain: chain.RPC}})
	staker := svmtest.NewKey(t)
	owner := staker.PublicKey()
	if _, err := e.store.SetWallet(ctx, e.account, owner.String()); err != nil {
		t.Fatal(err)
	}
	// A stake account as the program leaves it: one deposit two days old,
	// one an hour old; auto-compound on. And 2.5 USDC of rewards.
	now := time.Now()
	old, fresh := now.Add(-48*time.Hour).Unix(), now.Add(-time.Hour).Unix()
	acct := zerostaking.StakeAccount{Owner: owner, Bump: 254, Autocompound: true, Total: 7_000_000,
		Deposits: []zerostaking.Deposit{{Amount: 5_000_000, Time: old}, {Amount: 2_000_000, Time: fresh}}}
	data, err := acct.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	chain.SetAccount(t, cfg.StakePDA(owner), cfg.StakingProgram, append(zerostaking.Account_StakeAccount[:], data...))
	chain.MintTo(t, cfg.USDCMint, onchain.TokenProgram, cfg.RewardPDA(owner), 2_500_000)

	var got stakingAnswer
	if code := e.call(http.MethodGet, "/staking", e.apiKey, &got); code != http.StatusOK {
		t.Fatalf("GET /v1/staking: %d", code)
	}
	if got.Wallet != owner.String() || got.StakeAccount != cfg.StakePDA(owner).String() || got.Staked != "7000000" ||
		got.Matured != "5000000" || got.Maturing != "2000000" || !got.Autocompound || got.Rewards != "2500000" ||
		got.RewardVault != cfg.RewardVault(owner).String() || got.Decimals != 6 || len(got.Deposits) != 2 ||
		!got.Deposits[0].Matured || got.Deposits[1].Matured || got.Deposits[1].MaturesAt != fresh+86400 {
		t.Fatalf("staking %+v", got)
	}
	// Another wallet's stake reads as none.
	got = stakingAnswer{}
	if code := e.call(http.MethodGet, "/staking?wallet="+svmtest.NewKey(t).PublicKey().String(), e.apiKey, &got); code != http.StatusOK ||
		got.Staked != "0" || len(got.Deposits) != 0 || got.Rewards != "0" {
		t.Fatalf("a wallet without stake: %d %+v", code, got)
	}

	// Each action, and what Anchor builds for it.
	type action struct {
		body   map[string]any
		amount string
		anchor svmtest.Case
		idl    string
	}
	actions := []action{
		{map[string]any{"action": "stake", "amount": "1500000"}, "1500000", svmtest.Case{Kind: "instruction", Name: "stake",
			Args: map[string]any{"amount": "1500000"}, Accounts: map[string]string{"payer": owner.String(), "owner": owner.String(),
				"payer_token_account": cfg.ZeroATA(owner).String(), "zero_mint": cfg.ZeroMint.String()}}, "zero_staking"},
		{map[string]any{"action": "unstake", "amount": "2000000"}, "2000000", svmtest.Case{Kind: "instruction", Name: "unstake",
			Args: map[string]any{"amount": "2000000"}, Accounts: map[string]string{"owner": owner.String(),
				"owner_token_account": cfg.ZeroATA(owner).String(), "zero_mint": cfg.ZeroMint.String()}}, "zero_staking"},
		{map[string]any{"action": "claim", "amount": "all"}, "2500000", svmtest.Case{Kind: "instruction", Name: "claim",
			Args: map[string]any{"amount": "2500000"}, Accounts: map[string]string{"owner": owner.String(),
				"owner_token_account": cfg.USDCATA(owner).String(), "usdc_mint": cfg.USDCMint.String()}}, "zero_rewards"},
		{map[string]any{"action": "set_autocompound", "enabled": false}, "", svmtest.Case{Kind: "instruction", Name: "set_autocompound",
			Args: map[string]any{"enabled": false}, Accounts: map[string]string{"owner": owner.String()}}, "zero_staking"},
	}
	var txs []string
	var unsigned []*solana.Transaction
	for _, a := range actions {
		var tx stakingTx
		if code := e.sendJSON(http.MethodPost, "/staking/transactions", e.apiKey, a.body, &tx); code != http.StatusOK ||
			tx.Wallet != owner.String() || tx.Amount != a.amount || tx.LastValidBlockHeight == 0 {
			t.Fatalf("%v: %d %+v", a.body, code, tx)
		}
		parsed, err := solana.TransactionFromBase64(tx.Transaction)
		if err != nil {
			t.Fatalf("%v: %v", a.body, err)
		}
		if parsed.Message.GetVersion() != solana.MessageVersionV0 || !parsed.Message.AccountKeys[0].Equals(owner) {
			t.Fatalf("%v: version %d, payer %s", a.body, parsed.Message.GetVersion(), parsed.Message.AccountKeys[0])
		}
		// The program's instruction is the last; Anchor's for the same
		// action must match it byte for byte.
		program := cfg.StakingProgram
		if a.idl == "zero_rewards" {
			program = cfg.RewardsProgram
		}
		want := svmtest.Encode(t, svmtest.IDL(a.idl), program.String(), []svmtest.Case{a.anchor})[0]
		last := parsed.Message.Instructions[len(parsed.Message.Instructions)-1]
		metas, err := last.ResolveInstructionAccounts(&parsed.Message)
		if err != nil {
			t.Fatal(err)
		}
		if id := parsed.Message.AccountKeys[last.ProgramIDIndex]; id.String() != want.Program || hex.EncodeToString(last.Data) != want.Data || len(metas) != len(want.Keys) {
			t.Fatalf("%v: program %s data %x (%d keys); Anchor: %s %s (%d keys)", a.body, id, []byte(last.Data), len(metas), want.Program, want.Data, len(want.Keys))
		}
		// A compiled message keeps each account once, with the strongest
		// privileges any instruction or the fee payer needs: the same
		// accounts in Anchor's order, each with at least its privileges.
		for i, m := range metas {
			if w := want.Keys[i]; m.PublicKey.String() != w.Pubkey || w.Signer && !m.IsSigner || w.Writable && !m.IsWritable {
				t.Errorf("%v: key %d %s signer %v writable %v; Anchor %+v", a.body, i, m.PublicKey, m.IsSigner, m.IsWritable, w)
			}
		}
		txs = append(txs, tx.Transaction)
		unsigned = append(unsigned, parsed)
	}

	// The wallet signs them with @solana/web3.js.
	out := filepath.Join(t.TempDir(), "signed.json")
	list, _ := json.Marshal(txs)
	runNodeTest(t, node, dir, "staking.test.mjs", 1, "C0MPUTE_TXS="+string(list), "C0MPUTE_WALLET_KEY="+keypairJSON(staker), "C0MPUTE_OUT="+out)
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var signed []struct{ Signed, Message string }
	if err := json.Unmarshal(raw, &signed); err != nil || len(signed) != len(txs) {
		t.Fatalf("signed %d of %d: %v", len(signed), len(txs), err)
	}
	for i, s := range signed {
		msg, _ := base64.StdEncoding.DecodeString(s.Message)
		ours, err := unsigned[i].Message.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if string(msg) != string(ours) {
			t.Errorf("%v: web3.js signed other bytes than the gateway built", actions[i].body)
		}
		tx, err := solana.TransactionFromBase64(s.Signed)
		if err != nil || len(tx.Signatures) != 1 || !ed25519.Verify(ed25519.PublicKey(owner[:]), ours, tx.Signatures[0][:]) {
			t.Errorf("%v: the wallet's signature does not verify over the transaction (%v)", actions[i].body, err)
		}
	}

	// Refusals.
	for _, bad := range []map[string]any{
		{"action": "burn", "amount": "1"},
		{"action": "stake", "amount": "0"},
		{"action": "stake", "amount": "1.5"},
		{"action": "stake", "amount": strconv.Quote("99999999999999999999999")},
		{"action": "set_autocompound"},
		{"action": "stake", "amount": "1", "wallet": "not-a-wallet"},
		{"action": "stake", "amount": "1", "extra": true},
	} {
		var tx stakingTx
		if code := e.sendJSON(http.MethodPost, "/staking/transactions", e.apiKey, bad, &tx); code != http.StatusBadRequest || tx.Error == nil {
			t.Errorf("%v: %d %+v; want 400", bad, code, tx.Error)
		}
	}
}
