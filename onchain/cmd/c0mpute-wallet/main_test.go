package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
	"github.com/c0mpute/c0mpute/infra/devnet"
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
