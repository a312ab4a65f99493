package devnet_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/deposit"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

type depositAnswer struct {
	ID           string   `json:"id"`
	Recipient    string   `json:"recipient"`
	Mint         string   `json:"mint"`
	Reference    string   `json:"reference"`
	AmountUSDC   string   `json:"amount_usdc"`
	SolanaPayURL string   `json:"solana_pay_url"`
	State        string   `json:"state"`
	CreditedUSDC string   `json:"credited_usdc"`
	Credits      int64    `json:"credits"`
	Signatures   []string `json:"signatures"`
	CreditedNow  *int64   `json:"credited_now"`
	Error        *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// withReference is a transfer carrying a Solana Pay reference: the key is
// added to the transfer instruction, read-only and not signing.
func withReference(ix solana.Instruction, ref solana.PublicKey) solana.Instruction {
	data, _ := ix.Data()
	return solana.NewInstruction(ix.ProgramID(), append(ix.Accounts(), solana.Meta(ref)), data)
}

// TestDeposits: a Solana Pay deposit on a real chain (LiteSVM's SPL Token):
// the intent, a transfer that carries its reference, credited exactly
// once at finality whoever reports it; transfers without the reference, to
// another address, or not finalized yet credit nothing; the sweep credits
// a transfer nobody reported; the ledger shows the deposit.
func TestDeposits(t *testing.T) {
	chain := svmtest.NewEnv(t)
	c := chain.Config
	user := svmtest.NewKey(t)
	chain.Airdrop(t, user.PublicKey(), 10_000_000_000)
	userUSDC := chain.MintTo(t, c.USDCMint, onchain.TokenProgram, user.PublicKey(), 100_000_000)
	chain.MintTo(t, c.USDCMint, onchain.TokenProgram, c.Treasury, 0)

	e := newEnv(t, envOptions{deposits: &api.Deposits{Mint: c.USDCMint, Treasury: c.Treasury,
		Verifier: &deposit.Verifier{RPC: chain.RPC, Config: c}, Lister: chain.RPC, Label: "c0mpute"}})
	pay := func(dst solana.PublicKey, amount uint64, ref *solana.PublicKey) solana.Signature {
		ix := onchain.TransferChecked(onchain.TokenProgram, userUSDC, c.USDCMint, dst, user.PublicKey(), amount, 6)
		if ref != nil {
			ix = withReference(ix, *ref)
		}
		return chain.Send(t, []solana.PrivateKey{user}, ix)
	}
	verify := func(id string, sig solana.Signature, key string) (int, depositAnswer) {
		var out depositAnswer
		code := e.sendJSON(http.MethodPost, "/deposits/"+id+"/verify", key, map[string]any{"signature": sig.String()}, &out)
		return code, out
	}

	var d depositAnswer
	if code := e.sendJSON(http.MethodPost, "/deposits", e.apiKey, map[string]any{"amount_usdc": "12.5"}, &d); code != http.StatusCreated ||
		d.Recipient != c.Treasury.String() || d.Mint != c.USDCMint.String() || d.AmountUSDC != "12.5" || d.State != "pending" {
		t.Fatalf("create: %d %+v", code, d)
	}
	u, err := url.Parse(d.SolanaPayURL)
	if err != nil || u.Scheme != "solana" || u.Opaque != c.Treasury.String() || u.Query().Get("reference") != d.Reference ||
		u.Query().Get("spl-token") != c.USDCMint.String() || u.Query().Get("amount") != "12.5" {
		t.Fatalf("solana pay url %q", d.SolanaPayURL)
	}
	ref := solana.MustPublicKeyFromBase58(d.Reference)

	// Landed but not finalized: nothing yet, and a clear retry.
	chain.HoldFinality(t, true)
	sig := pay(c.TreasuryUSDC(), 12_500_000, &ref)
	if code, out := verify(d.ID, sig, e.apiKey); code != http.StatusConflict || out.Error == nil || out.Error.Code != "not_finalized" {
		t.Fatalf("not finalized: %d %+v", code, out.Error)
	}
	chain.Finalize(t)
	chain.HoldFinality(t, false)
	code, out := verify(d.ID, sig, e.apiKey)
	if code != http.StatusOK || out.State != "credited" || out.Credits != 1250 || out.CreditedUSDC != "12.5" || out.CreditedNow == nil || *out.CreditedNow != 1250 {
		t.Fatalf("verify: %d %+v", code, out)
	}
	if code, out := verify(d.ID, sig, e.apiKey); code != http.StatusOK || *out.CreditedNow != 0 || out.Credits != 1250 {
		t.Errorf("the same transfer again: %d %+v; want credited once", code, out)
	}
	if got := e.balance(); got.Credits != 1250 || got.TotalDeposited != 1250 {
		t.Errorf("balance after one deposit: %+v", got)
	}

	// Another account cannot see, or claim through, this intent.
	otherKey, err := e.stack.CreateAccount(context.Background(), "acct-other", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := verify(d.ID, sig, otherKey); code != http.StatusNotFound {
		t.Errorf("another account's verify: %d, want 404", code)
	}
	// A transfer without the reference, or to another address, is not
	// this intent's.
	noRef := pay(c.TreasuryUSDC(), 1_000_000, nil)
	if code, out := verify(d.ID, noRef, e.apiKey); code != http.StatusBadRequest || !strings.Contains(out.Error.Message, "reference") {
		t.Errorf("a transfer without the reference: %d %+v", code, out.Error)
	}
	elsewhere := chain.MintTo(t, c.USDCMint, onchain.TokenProgram, svmtest.NewKey(t).PublicKey(), 0)
	wrongDst := pay(elsewhere, 1_000_000, &ref)
	if code, out := verify(d.ID, wrongDst, e.apiKey); code != http.StatusBadRequest || !strings.Contains(out.Error.Message, "treasury") {
		t.Errorf("a transfer to another address: %d %+v", code, out.Error)
	}
	if got := e.balance().Credits; got != 1250 {
		t.Errorf("balance after refused transfers: %d, want 1250", got)
	}

	// Paid and never reported: the sweep finds it by its reference.
	var d2 depositAnswer
	e.sendJSON(http.MethodPost, "/deposits", e.apiKey, map[string]any{}, &d2)
	ref2 := solana.MustPublicKeyFromBase58(d2.Reference)
	pay(c.TreasuryUSDC(), 3_000_000, &ref2)
	if n, err := e.stack.SweepDeposits(context.Background()); err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v; want 1 credited", n, err)
	}
	if n, err := e.stack.SweepDeposits(context.Background()); err != nil || n != 0 {
		t.Errorf("second sweep: %d, %v; want nothing new", n, err)
	}
	if got := e.balance().Credits; got != 1250+300 {
		t.Errorf("balance after the sweep: %d, want %d", got, 1250+300)
	}
	var list struct {
		Data []depositAnswer `json:"data"`
	}
	e.call(http.MethodGet, "/deposits", e.apiKey, &list)
	if len(list.Data) != 2 || list.Data[0].ID != d2.ID || list.Data[0].Credits != 300 {
		t.Errorf("deposits listed: %+v", list.Data)
	}
	var ledger struct {
		Data []struct {
			Type      string `json:"type"`
			Credits   int64  `json:"credits"`
			Signature string `json:"signature"`
		} `json:"data"`
	}
	e.call(http.MethodGet, "/transactions", e.apiKey, &ledger)
	var deposits []string
	for _, l := range ledger.Data {
		if l.Type == "deposit" {
			deposits = append(deposits, l.Signature)
		}
	}
	if len(deposits) != 2 || deposits[1] != sig.String() {
		t.Errorf("the ledger's deposits: %v; want the two transfers, newest first", deposits)
	}
}
