package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/onchain/deposit"
)

// Deposits is what the deposit routes need: the chain's USDC mint and the
// treasury that receives deposits, a verifier of transfers and a lister of
// the transfers that name an address. Nil turns the routes off.
type Deposits struct {
	// Mint is the USDC mint, Treasury the wallet whose USDC account
	// receives deposits (onchain.Config's).
	Mint, Treasury solana.PublicKey
	Verifier       DepositVerifier
	Lister         SignatureLister
	// Label names the recipient in wallets (Solana Pay's label).
	Label string
}

// DepositVerifier reads a finalized transfer that carries a reference
// (onchain/deposit's Verifier).
type DepositVerifier interface {
	VerifyReference(ctx context.Context, sig solana.Signature, reference solana.PublicKey) (deposit.Deposit, error)
	// VerifyTransfer reads a transfer the gateway sent itself (an x402
	// top-up), with no reference.
	VerifyTransfer(ctx context.Context, sig solana.Signature) (deposit.Deposit, error)
}

// SignatureLister lists the transactions that name an address, newest
// first (the JSON-RPC client).
type SignatureLister interface {
	GetSignaturesForAddressWithOpts(ctx context.Context, account solana.PublicKey, opts *rpc.GetSignaturesForAddressOpts) ([]*rpc.TransactionSignature, error)
}

// depositJSON is a deposit intent as its owner sees it: where to pay, how
// (a Solana Pay transfer request) and what it brought.
type depositJSON struct {
	Object string `json:"object"`
	ID     string `json:"id"`
	// Kind is solana_pay (a transfer request) or x402 (a top-up).
	Kind      string `json:"kind"`
	Recipient string `json:"recipient"`
	Mint      string `json:"mint"`
	Reference string `json:"reference,omitempty"`
	Memo      string `json:"memo,omitempty"`
	// Transaction is an x402 top-up's transaction.
	Transaction string `json:"transaction,omitempty"`
	// AmountUSDC is the amount asked for, in USDC ("12.5"), if any.
	AmountUSDC   string   `json:"amount_usdc,omitempty"`
	SolanaPayURL string   `json:"solana_pay_url,omitempty"`
	State        string   `json:"state"`
	CreditedUSDC string   `json:"credited_usdc"`
	Credits      int64    `json:"credits"`
	Signatures   []string `json:"signatures"`
	Created      int64    `json:"created"`
	// CreditedNow is what this verify call credited (0 when the transfer
	// was credited already).
	CreditedNow *int64 `json:"credited_now,omitempty"`
}

// usdcDecimal writes base units as an exact decimal ("12.5", "0.000001").
func usdcDecimal(units int64) string {
	s := fmt.Sprintf("%d.%06d", units/1_000_000, units%1_000_000)
	return strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
}

// parseUSDC reads an amount of USDC ("12.5" or 12.5) into base units,
// exactly: at most 6 decimals, never through a float.
func parseUSDC(raw json.RawMessage) (int64, error) {
	s := strings.Trim(strings.TrimSpace(string(raw)), `"`)
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || len(frac) > 6 || strings.Trim(whole, "0123456789") != "" || strings.Trim(frac, "0123456789") != "" {
		return 0, errors.New("amount_usdc is a number of USDC with at most 6 decimals, like 12.5")
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > 1_000_000_000 {
		return 0, errors.New("amount_usdc is too large")
	}
	f, _ := strconv.ParseInt((frac + "000000")[:6], 10, 64)
	return w*1_000_000 + f, nil
}

func (s *Server) depositJSON(d store.Deposit) depositJSON {
	out := depositJSON{Object: "deposit", ID: d.ID, Kind: "solana_pay", Recipient: s.deposits.Treasury.String(), Mint: s.deposits.Mint.String(),
		Reference: d.Reference, Memo: d.ID, State: string(d.State), CreditedUSDC: usdcDecimal(d.CreditedUSDC),
		Credits: d.Credits, Signatures: append([]string{}, d.Signatures...), Created: d.Created.Unix()}
	q := url.Values{}
	if d.AmountUSDC > 0 {
		out.AmountUSDC = usdcDecimal(d.AmountUSDC)
		q.Set("amount", out.AmountUSDC)
	}
	if d.Kind == store.DepositX402 {
		out.Kind, out.Transaction, out.Reference, out.Memo = "x402", d.Reference, "", ""
		if d.State == store.DepositPending && s.now().Sub(d.Created) > topUpSweepAge {
			out.State = "expired" // its transaction never landed, or failed
		}
		return out
	}
	q.Set("spl-token", out.Mint)
	q.Set("reference", d.Reference)
	q.Set("label", s.deposits.Label)
	q.Set("message", "c0mpute credits")
	q.Set("memo", d.ID)
	out.SolanaPayURL = "solana:" + out.Recipient + "?" + q.Encode()
	return out
}

var errDepositsOff = notConfigured("Deposits are")

// createDeposit serves POST /v1/deposits: a Solana Pay transfer request
// with a fresh reference bound to the caller's account.
func (s *Server) createDeposit(w http.ResponseWriter, r *http.Request) error {
	if s.deposits == nil {
		return errDepositsOff
	}
	var req struct {
		AmountUSDC json.RawMessage `json:"amount_usdc"`
	}
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	var amount int64
	if len(req.AmountUSDC) > 0 && string(req.AmountUSDC) != "null" {
		var err error
		if amount, err = parseUSDC(req.AmountUSDC); err != nil {
			return oaiwire.InvalidRequest("amount_usdc", err.Error())
		}
		if amount < 10_000 {
			return oaiwire.InvalidRequest("amount_usdc", "the smallest deposit is 0.01 USDC (one credit)")
		}
	}
	open, err := s.store.ListDeposits(r.Context(), who(r).account, maxOpenDeposits+1)
	if err != nil {
		return err
	}
	pending := 0
	for _, d := range open {
		if d.Kind == store.DepositSolanaPay && d.State == store.DepositPending && s.now().Sub(d.Created) < depositSweepAge {
			pending++
		}
	}
	if pending >= maxOpenDeposits {
		return oaiwire.InvalidRequest("", fmt.Sprintf("this account has %d deposits waiting for a transfer: pay one of them (GET /v1/deposits) before making another", pending))
	}
	ref := solana.NewWallet().PublicKey()
	var b [12]byte
	_, _ = rand.Read(b[:])
	now := s.now()
	d := store.Deposit{ID: "dep_" + base64.RawURLEncoding.EncodeToString(b[:]), AccountID: who(r).account,
		Reference: ref.String(), AmountUSDC: amount, State: store.DepositPending, Created: now, Updated: now}
	if err := s.store.PutDeposit(r.Context(), d); err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, s.depositJSON(d))
}

// listDeposits serves GET /v1/deposits.
func (s *Server) listDeposits(w http.ResponseWriter, r *http.Request) error {
	if s.deposits == nil {
		return errDepositsOff
	}
	ds, err := s.store.ListDeposits(r.Context(), who(r).account, 100)
	if err != nil {
		return err
	}
	out := listJSON[depositJSON]{Object: "list", Data: []depositJSON{}}
	for _, d := range ds {
		out.Data = append(out.Data, s.depositJSON(d))
	}
	return writeJSON(w, http.StatusOK, out)
}

// verifyDeposit serves POST /v1/deposits/{id}/verify {signature}: the fast
// path of a deposit (the sweep finds the ones never reported). The
// transfer must be finalized, bring USDC to the treasury and carry this
// intent's reference; it is credited once, whoever reports it.
func (s *Server) verifyDeposit(w http.ResponseWriter, r *http.Request) error {
	if s.deposits == nil {
		return errDepositsOff
	}
	var req struct {
		Signature string `json:"signature" validate:"required,max=128"`
	}
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	sig, err := solana.SignatureFromBase58(req.Signature)
	if err != nil {
		return oaiwire.InvalidRequest("signature", "signature is a transaction signature (base58)")
	}
	d, err := s.store.GetDeposit(r.Context(), who(r).account, r.PathValue("id"))
	if errors.Is(err, store.ErrNotFound) {
		return notFound("deposit", r.PathValue("id"))
	}
	if err != nil {
		return err
	}
	var credited int64
	if d.Kind == store.DepositX402 {
		if req.Signature != d.Reference {
			return oaiwire.InvalidRequest("signature", "this deposit is an x402 top-up, paid by transaction "+d.Reference+" only")
		}
		credited, d, err = s.creditTopUp(r.Context(), d, sig)
		if errors.Is(err, deposit.ErrNotFinalized) || errors.Is(err, deposit.ErrNotFound) {
			return &oaiwire.Error{Status: http.StatusConflict, Type: oaiwire.TypeInvalidRequest, Code: "not_finalized",
				Message: "The top-up's transaction is not finalized yet: retry shortly. Nothing was credited."}
		}
	} else {
		credited, d, err = s.creditTransfer(r.Context(), d, sig)
	}
	if err != nil {
		return err
	}
	out := s.depositJSON(d)
	out.CreditedNow = &credited
	return writeJSON(w, http.StatusOK, out)
}

// creditTransfer verifies a transfer for an intent and credits it once;
// credited is what it added now (0 when it was credited before).
func (s *Server) creditTransfer(ctx context.Context, d store.Deposit, sig solana.Signature) (int64, store.Deposit, error) {
	ref, err := solana.PublicKeyFromBase58(d.Reference)
	if err != nil {
		return 0, d, fmt.Errorf("deposit %s: reference: %w", d.ID, err)
	}
	dep, err := s.deposits.Verifier.VerifyReference(ctx, sig, ref)
	switch {
	case errors.Is(err, deposit.ErrNotFinalized):
		return 0, d, &oaiwire.Error{Status: http.StatusConflict, Type: oaiwire.TypeInvalidRequest, Code: "not_finalized",
			Message: "The transfer is not finalized yet (about 15 seconds after it lands): retry shortly. Nothing was credited."}
	case errors.Is(err, deposit.ErrNotFound), errors.Is(err, deposit.ErrFailed), errors.Is(err, deposit.ErrWrongMint),
		errors.Is(err, deposit.ErrWrongDestination), errors.Is(err, deposit.ErrNoTransfer), errors.Is(err, deposit.ErrTooSmall),
		errors.Is(err, deposit.ErrNoReference):
		return 0, d, oaiwire.InvalidRequest("signature", strings.TrimPrefix(err.Error(), "deposit: ")+". Nothing was credited.")
	case err != nil:
		return 0, d, err
	}
	stored, applied, err := s.store.CreditDeposit(ctx, store.DepositCredit{DepositID: d.ID, AccountID: d.AccountID,
		Signature: sig.String(), USDC: int64(dep.USDC), Credits: dep.Credits, At: s.now()})
	if errors.Is(err, store.ErrLimit) {
		// The intent holds no more signatures, but the USDC arrived: it
		// is credited all the same, under the same once-per-signature key.
		applied, err = s.store.Grant(ctx, d.AccountID, dep.Credits, deposit.IdempotencyKey(sig), true)
		stored = d
	}
	if err != nil {
		return 0, d, err
	}
	if !applied {
		return 0, stored, nil
	}
	s.log.Info("deposit credited", "account", d.AccountID, "deposit", d.ID, "signature", sig.String(), "credits", dep.Credits)
	return dep.Credits, stored, nil
}

// maxOpenDeposits bounds an account's intents waiting for a transfer: the
// sweep looks for each on-chain.
const maxOpenDeposits = 10

// depositSweepAge is how long after its creation an intent is looked for
// on-chain by the sweep.
const depositSweepAge = 7 * 24 * time.Hour

// SweepDeposits finds the transfers of recent intents that nobody
// reported, by their reference, and credits them: a user who paid and
// closed the page is credited all the same. It returns how many it
// credited. Safe to run anywhere, any number of times at once: a
// transfer is credited once.
func (s *Server) SweepDeposits(ctx context.Context) (int, error) {
	if s.deposits == nil || s.deposits.Lister == nil {
		return 0, nil
	}
	credited := 0
	limit := store.MaxDepositSignatures
	// Page through the week's intents, oldest first, so that a busy week
	// (more than one page) never hides the newest.
	since := s.now().Add(-depositSweepAge)
	for range maxSweepPages {
		ds, err := s.store.OpenDeposits(ctx, since, store.MaxDeposits)
		if err != nil {
			return credited, fmt.Errorf("sweep deposits: %w", err)
		}
		for _, d := range ds {
			if d.Kind == store.DepositX402 {
				// A top-up names its one transaction: credit it if it
				// landed (a pending one is one whose answer was lost),
				// while it still can.
				if sig, err := solana.SignatureFromBase58(d.Reference); err == nil && d.State == store.DepositPending &&
					s.now().Sub(d.Created) < topUpSweepAge {
					if n, _, err := s.creditTopUp(ctx, d, sig); err == nil && n > 0 {
						credited++
					}
				}
				continue
			}
			ref, err := solana.PublicKeyFromBase58(d.Reference)
			if err != nil {
				continue
			}
			sigs, err := s.deposits.Lister.GetSignaturesForAddressWithOpts(ctx, ref, &rpc.GetSignaturesForAddressOpts{
				Limit: &limit, Commitment: rpc.CommitmentFinalized})
			if err != nil {
				return credited, fmt.Errorf("sweep deposits: transfers of %s: %w", d.ID, err)
			}
			for _, ts := range sigs {
				if ts == nil || ts.Err != nil || slices.Contains(d.Signatures, ts.Signature.String()) {
					continue
				}
				n, _, err := s.creditTransfer(ctx, d, ts.Signature)
				if err != nil {
					s.log.Info("sweep: transfer not credited", "deposit", d.ID, "signature", ts.Signature.String(), "why", err)
					continue
				}
				if n > 0 {
					credited++
				}
			}
		}
		if len(ds) < store.MaxDeposits || !ds[len(ds)-1].Created.After(since) {
			return credited, nil
		}
		// The next page starts at the last intent's time: intents made
		// in the same nanosecond are swept twice, which credits nothing
		// twice.
		since = ds[len(ds)-1].Created
	}
	return credited, nil
}

// RunDepositSweeps sweeps every interval until ctx ends (the first sweep
// after one interval). A failed or panicking sweep is logged and the next
// one runs; each sweep gets at most one interval.
func (s *Server) RunDepositSweeps(ctx context.Context, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		func() {
			defer func() {
				if p := recover(); p != nil {
					log.Error("deposit sweep panicked", "panic", p)
				}
			}()
			sctx, cancel := context.WithTimeout(ctx, every)
			defer cancel()
			if n, err := s.SweepDeposits(sctx); err != nil && ctx.Err() == nil {
				log.Warn("deposit sweep", "err", err)
			} else if n > 0 {
				log.Info("deposit sweep credited transfers", "transfers", n)
			}
		}()
	}
}

// maxSweepPages bounds one sweep's pages of intents.
const maxSweepPages = 20

// topUpSweepAge is how long after its intent the sweep looks for a
// top-up's transaction: it lands within topUpLanding or never, and is
// finalized seconds later; the margin covers a sweep that runs late.
const topUpSweepAge = 10 * time.Minute
