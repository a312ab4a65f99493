package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
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
