package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
	"github.com/c0mpute/c0mpute/infra/devnet"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/chain"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
	"github.com/c0mpute/c0mpute/workerd/identity"
)

func TestUSDCUnits(t *testing.T) {
	for in, want := range map[string]uint64{"5": 5_000_000, "2.5": 2_500_000, "0.000001": 1, "10.50": 10_500_000} {
		if got, err := usdcUnits(in); err != nil || got != want {
			t.Errorf("usdcUnits(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "1.0000001", "-1", "1e3"} {
		if _, err := usdcUnits(in); err == nil {
			t.Errorf("usdcUnits(%q) accepted", in)
		}
	}
}

// TestDepositRefusesAnotherAmount: a gateway that asks for more than the
// user typed (or another mint than dev.env names) gets nothing sent; the
// chain is never called.
func TestDepositRefusesAnotherAmount(t *testing.T) {
	for name, c := range map[string]struct{ amount, mint, want string }{
		"more USDC":    {"50", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", "asks for 50 USDC"},
		"another mint": {"5", "So11111111111111111111111111111111111111112", "names mint"},
		"not a number": {"lots", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", "want a number"},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, `{"id":"dep_1","recipient":"11111111111111111111111111111111","mint":%q,"reference":"11111111111111111111111111111111","memo":"dep_1","amount_usdc":%q}`, c.mint, c.amount)
			}))
			defer srv.Close()
			t.Setenv("C0MPUTE_USDC_MINT", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v")
			g := &gateway{base: srv.URL, key: "sk-test", client: srv.Client()}
			err := deposit(context.Background(), g, rpc.New("http://127.0.0.1:1"), solana.NewWallet().PrivateKey, "5", io.Discard)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want it to say %q", err, c.want)
			}
		})
	}
}

// TestPayoutWallet: the command makes its keypair (a workerd identity file
// here) the payout wallet of the account whose key it holds, on a running
// gateway, by the wallet's own signature; without the key it refuses.
func TestPayoutWallet(t *testing.T) {
	st, err := embedded.Open(filepath.Join(t.TempDir(), "store.db"), embedded.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stack, err := devnet.Start(ctx, devnet.Config{Store: st, APIAddr: "127.0.0.1:0", RelayAddr: "127.0.0.1:0",
		Models: []catalog.Model{{ID: "m", Price: 1}}, Limits: devnet.ScriptedLimits(), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer stack.Close()
	apiKey, err := stack.CreateAccount(ctx, "contributor", 0, "grant")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "worker-key.json")
	key, err := identity.Create(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-key", keyFile, "-api", stack.APIURL, "payout-wallet"}
	t.Setenv("OPENAI_API_KEY", "")
	if err := run(args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Fatalf("without a key: %v", err)
	}
	t.Setenv("OPENAI_API_KEY", apiKey)
	var out, shown strings.Builder
	if err := run(args, &out, &shown); err != nil {
		t.Fatal(err)
	}
	wallet := identity.Address(key)
	if want := "the earnings of account contributor are paid to " + wallet + "\n"; out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
	if !strings.Contains(shown.String(), "Pay the earnings of c0mpute account contributor to this wallet.") {
		t.Errorf("did not show what it signs: %q", shown.String())
	}
	if a, err := st.GetAccount(ctx, "contributor"); err != nil || a.Wallet != wallet {
		t.Fatalf("account %+v, %v; want its payout wallet %s", a, err, wallet)
	}
}

// stakingEnv sets the programs and mints the staking commands sign for.
func stakingEnv(t *testing.T, c onchain.Config) {
	t.Setenv("C0MPUTE_STAKING_PROGRAM", c.StakingProgram.String())
	t.Setenv("C0MPUTE_REWARDS_PROGRAM", c.RewardsProgram.String())
	t.Setenv("C0MPUTE_ZERO_MINT", c.ZeroMint.String())
	t.Setenv("C0MPUTE_USDC_MINT", c.USDCMint.String())
}

// TestStakeSignsOnlyWhatItBuilds: a gateway whose staking transaction is
// not the one the command builds itself — another program, another
// amount, an extra instruction — gets nothing signed or sent.
func TestStakeSignsOnlyWhatItBuilds(t *testing.T) {
	key := solana.NewWallet().PrivateKey
	cfg := onchain.Config{StakingProgram: solana.NewWallet().PublicKey(), RewardsProgram: solana.NewWallet().PublicKey(),
		ZeroMint: solana.NewWallet().PublicKey(), USDCMint: solana.NewWallet().PublicKey()}
	stakingEnv(t, cfg)
	elsewhere := cfg
	elsewhere.StakingProgram = solana.NewWallet().PublicKey()
	extra := func() *solana.Transaction {
		ix, _ := cfg.Stake(key.PublicKey(), key.PublicKey(), cfg.ZeroATA(key.PublicKey()), 1_500_000)
		steal := onchain.TransferChecked(onchain.Token2022Program, cfg.ZeroATA(key.PublicKey()), cfg.ZeroMint,
			solana.NewWallet().PublicKey(), key.PublicKey(), 1, 6)
		tx, _ := onchain.NewTx(key.PublicKey(), []solana.Instruction{ix, steal}, solana.Hash{7}, onchain.Fees{ComputeUnits: 120_000}, nil)
		tx.Message.SetVersion(solana.MessageVersionV0)
		return tx
	}
	for name, c := range map[string]struct {
		tx     func() *solana.Transaction
		amount string
	}{
		"another program": {func() *solana.Transaction {
			tx, _ := elsewhere.StakingTx(key.PublicKey(), onchain.ActionStake, 1_500_000, false, solana.Hash{7})
			return tx
		}, "1500000"},
		"another amount": {func() *solana.Transaction {
			tx, _ := cfg.StakingTx(key.PublicKey(), onchain.ActionStake, 15_000_000, false, solana.Hash{7})
			return tx
		}, "15000000"},
		"an extra instruction": {extra, "1500000"},
	} {
		t.Run(name, func(t *testing.T) {
			b64, err := onchain.Unsigned(c.tx())
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, `{"amount":%q,"transaction":%q,"last_valid_block_height":10}`, c.amount, b64)
			}))
			defer srv.Close()
			g := &gateway{base: srv.URL, key: "sk-test", client: srv.Client()}
			// A chain nobody listens on: a send would fail otherwise.
			err = stake(context.Background(), g, chain.New(rpc.New("http://127.0.0.1:1")), cfg, key, onchain.ActionStake, []string{"1.5"}, io.Discard)
			if err == nil || !strings.Contains(err.Error(), "nothing was signed") {
				t.Fatalf("err %v, want nothing signed", err)
			}
		})
	}
}

// TestStakeThroughTheGateway: against a running gateway on a local chain,
// the command gets the stake transaction, finds it is the one it builds,
// signs it and sends it; the chain evaluates it (the staking program is not
// deployed on the test chain, so it refuses it, naming the program).
func TestStakeThroughTheGateway(t *testing.T) {
	chainEnv := svmtest.NewEnv(t)
	cfg := chainEnv.Config
	st, err := embedded.Open(filepath.Join(t.TempDir(), "store.db"), embedded.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stack, err := devnet.Start(ctx, devnet.Config{Store: st, APIAddr: "127.0.0.1:0", RelayAddr: "127.0.0.1:0",
		Models: []catalog.Model{{ID: "m", Price: 1}}, Limits: devnet.ScriptedLimits(), Log: slog.New(slog.DiscardHandler),
		Staking: &api.Staking{Config: cfg, Chain: chainEnv.RPC}})
	if err != nil {
		t.Fatal(err)
	}
	defer stack.Close()
	staker := svmtest.NewKey(t)
	chainEnv.Airdrop(t, staker.PublicKey(), 1_000_000_000)
	apiKey, err := stack.CreateAccount(ctx, "staker", 0, "grant")
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "wallet.json")
	raw, _ := json.Marshal(func() []int {
		out := make([]int, len(staker))
		for i, b := range staker {
			out[i] = int(b)
		}
		return out
	}())
	if err := os.WriteFile(keyFile, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	stakingEnv(t, cfg)
	t.Setenv("OPENAI_API_KEY", apiKey)
	before := chainEnv.TransactionCount(t)
	err = run([]string{"-key", keyFile, "-api", stack.APIURL, "-rpc", chainEnv.URL, "stake", "1.5"}, io.Discard, io.Discard)
	if err == nil || !errors.Is(err, chain.ErrPreflight) {
		t.Fatalf("err %v; want the chain's refusal in preflight (no staking program on the test chain)", err)
	}
	if n := chainEnv.TransactionCount(t) - before; n != 0 {
		t.Fatalf("%d transactions landed", n)
	}
}
