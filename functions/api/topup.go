package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
	"github.com/gagliardetto/solana-go/rpc/jsonrpc"

	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/x402"
	"github.com/c0mpute/c0mpute/onchain/deposit"
)

// TopUps takes x402 payments on POST /v1/x402/top-up: an agent with only a
// Solana wallet pays USDC to the treasury (Deposits' mint and treasury)
// and its wallet's account is credited. The gateway is its own
// facilitator: it checks the client's partly signed transfer, co-signs
// it as fee payer, sends it and credits it once it is finalized.
type TopUps struct {
	// Network is the cluster's CAIP-2 id (x402.Network).
	Network string
	// FeePayer pays the transactions' fees: a hot wallet holding a
	// little SOL and nothing else.
	FeePayer solana.PrivateKey
	Chain    TopUpChain
	// Wait bounds how long a top-up waits for its transfer to finalize
	// before it answers 202 and leaves the credit to the sweep (default
	// 60 s).
	Wait time.Duration
}

// TopUpChain is the part of the JSON-RPC client a top-up sends through.
type TopUpChain interface {
	SimulateRawTransactionWithOpts(ctx context.Context, txData []byte, opts *rpc.SimulateTransactionOpts) (*rpc.SimulateTransactionResponse, error)
	SendEncodedTransactionWithOpts(ctx context.Context, encodedTx string, opts rpc.TransactionOpts) (solana.Signature, error)
}

// Top-up bounds, in USDC base units: a whole number of credits, at least
// one dollar (the fee payer spends at most x402.MaxFeeLamports on one,
// about 0.4% of it at $200 a SOL; the official client pays $1 a payment
// unless its user raises its cap), at most ten thousand dollars.
const (
	minTopUp = 1_000_000
	maxTopUp = 10_000_000_000
)

// topUpKeyName names the keys top-ups issue.
const topUpKeyName = "x402 top-up"

// topUpJSON is a settled top-up: whose account, what it brought, and,
// when the payment came without one of that account's keys, a new key.
type topUpJSON struct {
	Object    string `json:"object"`
	AccountID string `json:"account_id"`
	Wallet    string `json:"wallet"`
	// State is credited; pending when the transfer was sent but not
	// finalized in time (the sweep credits it if it lands); expired when
	// it can no longer land.
	State       string `json:"state"`
	Transaction string `json:"transaction"`
	AmountUSDC  string `json:"amount_usdc"`
	// CreditedNow is what this call credited: 0 when an earlier call (or
	// the sweep) did.
	CreditedNow int64  `json:"credited_now"`
	Credits     int64  `json:"credits"`
	Balance     *int64 `json:"balance,omitempty"`
	APIKey      string `json:"api_key,omitempty"`
	KeyID       string `json:"key_id,omitempty"`
}

var errTopUpsOff = notConfigured("x402 top-ups are")

// offer is the payment the top-up at r asks for.
func (s *Server) offer(r *http.Request) (x402.Offer, error) {
	raw := r.URL.Query().Get("amount")
	if raw == "" {
		return x402.Offer{}, oaiwire.InvalidRequest("amount", "say how much USDC to top up: POST /v1/x402/top-up?amount=5")
	}
	units, err := parseUSDC([]byte(raw))
	if err != nil {
		return x402.Offer{}, oaiwire.InvalidRequest("amount", strings.ReplaceAll(err.Error(), "amount_usdc", "amount"))
	}
	switch {
	case units%10_000 != 0:
		return x402.Offer{}, oaiwire.InvalidRequest("amount", "amount is a whole number of credits: at most 2 decimals of USDC")
	case units < minTopUp || units > maxTopUp:
		return x402.Offer{}, oaiwire.InvalidRequest("amount", fmt.Sprintf("a top-up is %s to %s USDC", usdcDecimal(minTopUp), usdcDecimal(maxTopUp)))
	}
	return x402.Offer{Network: s.topUps.Network, Amount: uint64(units), Asset: s.deposits.Mint, PayTo: s.deposits.Treasury,
		FeePayer: s.topUps.FeePayer.PublicKey()}, nil
}

// paymentRequired answers 402 with the offer: v2's in the PAYMENT-REQUIRED
// header, v1's in the body, so that clients of either version read theirs
// (a v2 client reads the header first).
func (s *Server) paymentRequired(w http.ResponseWriter, r *http.Request, o x402.Offer, why string) error {
	req := x402.Required{X402Version: 2, Error: why,
		Resource: x402.Resource{URL: s.resourceURL(r), Description: fmt.Sprintf("%s USDC of c0mpute credits", usdcDecimal(int64(o.Amount))),
			MimeType: "application/json"},
		Accepts: []x402.Requirements{o.Requirements(int(s.topUpWait().Seconds()))}}
	w.Header().Set(x402.HeaderRequired, x402.Encode(req))
	return writeJSON(w, http.StatusPaymentRequired, req.RequiredV1())
}

// resourceURL is the URL the client called, as far as the request tells.
func (s *Server) resourceURL(r *http.Request) string {
	scheme := "https"
	if r.TLS == nil && (strings.HasPrefix(r.Host, "127.0.0.1") || strings.HasPrefix(r.Host, "localhost")) {
		scheme = "http"
	}
	return scheme + "://" + r.Host + r.URL.RequestURI()
}

func (s *Server) topUpWait() time.Duration {
	if s.topUps.Wait > 0 {
		return s.topUps.Wait
	}
	return time.Minute
}

// topUp serves POST /v1/x402/top-up?amount=USDC. Without a payment it
// answers 402 with the offer; with one (PAYMENT-SIGNATURE, or v1's
// X-PAYMENT) it checks it, co-signs, sends, waits for finality and
// credits the paying wallet's account (made if new) once per transaction.
// Every step may be retried with the same payment: the transaction's id
// is fixed before anything is written, and each write is idempotent.
func (s *Server) topUp(w http.ResponseWriter, r *http.Request) error {
	if s.topUps == nil || s.deposits == nil {
		return errTopUpsOff
	}
	o, err := s.offer(r)
	if err != nil {
		return err
	}
	header, version := r.Header.Get(x402.HeaderSignature), 2
	if header == "" {
		header, version = r.Header.Get(x402.HeaderV1Payment), 1
	}
	if header == "" {
		return s.paymentRequired(w, r, o, "")
	}
	refuse := func(reason string, err error) error {
		s.settled(w, version, x402.Settlement{Success: false, ErrorReason: reason, Network: o.Network})
		return s.paymentRequired(w, r, o, strings.TrimPrefix(err.Error(), "x402: "))
	}
	p, err := x402.Decode(header)
	if err != nil {
		return refuse("invalid_payload", err)
	}
	t, err := x402.Check(p, o)
	if err != nil {
		return refuse("invalid_exact_svm_payload", err)
	}
	wire, sig, err := t.Sign(s.topUps.FeePayer)
	if err != nil {
		return err
	}
	ctx := context.WithoutCancel(r.Context()) // a client that hangs up must not leave a send half done
	intent := store.Deposit{ID: "x402_" + sig.String(), AccountID: t.Payer.String(), Kind: store.DepositX402, Reference: sig.String(),
		AmountUSDC: int64(t.Amount), Created: s.now(), Updated: s.now()}
	// created: this call wrote the intent, so it is the one that moves
	// the money. Only it may issue a key: a payment's bytes are public
	// once it lands (anyone can copy them off the chain and blank the fee
	// payer's signature), so presenting them again proves nothing.
	created := false
	d, err := s.store.GetDeposit(ctx, intent.AccountID, intent.ID)
	switch {
	case err == nil && d.State == store.DepositCredited:
		// Settled before: answer as then, crediting nothing.
		return s.topUpSettled(w, r, version, o, t, d, 0, false)
	case err == nil && s.now().Sub(d.Created) > topUpLanding:
		// Its blockhash has expired: it landed (and the sweep credits it)
		// or it never will. Nothing to send or wait for.
		return s.topUpSettled(w, r, version, o, t, d, 0, false)
	case err == nil:
		// Written by an earlier try that may not have sent it: send again
		// (a cluster takes one transaction once).
	case errors.Is(err, store.ErrNotFound):
		reason, err := s.simulate(ctx, wire)
		if err != nil {
			return err
		}
		if reason != "" {
			// A concurrent try of the same payment may have sent it
			// meanwhile (a landed transaction no longer simulates): its
			// intent, written before its send, says so.
			if _, gerr := s.store.GetDeposit(ctx, intent.AccountID, intent.ID); gerr != nil {
				return refuse("transaction_simulation_failed", errors.New("the transfer would fail: "+reason))
			}
			break
		}
		busy, mine, err := s.settlingTopUp(ctx, intent)
		if err != nil {
			return err
		}
		if mine {
			break // a concurrent try of this payment wrote it: go on with it
		}
		if busy {
			return refuse("settlement_pending", errors.New("another top-up from this wallet is settling: retry when it is done (a minute at most)"))
		}
		if err := s.store.CreateAccount(ctx, store.Account{ID: intent.AccountID, Wallet: intent.AccountID, CreatedAt: s.now()}); err != nil && !errors.Is(err, store.ErrExists) {
			return err
		}
		switch err := s.store.PutDeposit(ctx, intent); {
		case err == nil:
			created = true
		case !errors.Is(err, store.ErrExists):
			return err
		}
	default:
		return err
	}
	if _, err := s.topUps.Chain.SendEncodedTransactionWithOpts(ctx, base64.StdEncoding.EncodeToString(wire),
		rpc.TransactionOpts{PreflightCommitment: rpc.CommitmentConfirmed}); err != nil && !alreadyLanded(err) {
		// A refused send may still have landed (the answer lost): the
		// intent stays, and the sweep or a retry credits what landed.
		s.log.Warn("x402 top-up: send failed", "account", intent.AccountID, "transaction", sig.String(), "err", err)
	}
	n, d, err := s.awaitTopUp(ctx, intent, sig)
	if errors.Is(err, deposit.ErrFailed) {
		// Landed and failed (the payer's funds moved after the
		// simulation): nothing was credited, and nothing will be.
		return refuse("transaction_failed", errors.New("the transfer failed on-chain: nothing was credited"))
	}
	if err != nil {
		return err
	}
	return s.topUpSettled(w, r, version, o, t, d, n, created)
}

// topUpLanding is how long after its intent a top-up's transaction can
// still land: its blockhash lives about 150 blocks (60 to 90 s). Past it
// a pending intent landed or never will, and the sweep stops looking.
const topUpLanding = 3 * time.Minute

// settlingTopUp reports whether the payer has another top-up still
// settling (busy), or this one already (mine: written by a concurrent try
// of the same payment). A wallet pays one top-up at a time, so that
// payments made to fail after their simulation (funds moved away
// meanwhile) cost the fee payer one fee at a time, not one per request.
func (s *Server) settlingTopUp(ctx context.Context, intent store.Deposit) (busy, mine bool, err error) {
	ds, err := s.store.ListDeposits(ctx, intent.AccountID, maxOpenDeposits+1)
	if err != nil {
		return false, false, err
	}
	for _, d := range ds {
		switch {
		case d.ID == intent.ID:
			return false, true, nil
		case d.Kind == store.DepositX402 && d.State == store.DepositPending && s.now().Sub(d.Created) < topUpLanding:
			busy = true
		}
	}
	return busy, false, nil
}

// alreadyLanded is a send refused because the transaction is there
// already: a retry of one that landed.
func alreadyLanded(err error) bool {
	return strings.Contains(err.Error(), "AlreadyProcessed") || strings.Contains(err.Error(), "already been processed")
}

// simulate runs the co-signed transaction on the cluster's current state:
// a reason when it would fail, so that a payment that cannot land costs
// no write and no fee.
func (s *Server) simulate(ctx context.Context, wire []byte) (string, error) {
	res, err := s.topUps.Chain.SimulateRawTransactionWithOpts(ctx, wire, &rpc.SimulateTransactionOpts{SigVerify: true, Commitment: rpc.CommitmentConfirmed})
	var rpcErr *jsonrpc.RPCError
	if errors.As(err, &rpcErr) && (rpcErr.Code == -32002 || rpcErr.Code == -32602 || rpcErr.Code == -32003) {
		// Preflight failure, a transaction the node cannot take, a
		// signature that fails: the payment's fault, not ours.
		return rpcErr.Message, nil
	}
	if err != nil {
		return "", fmt.Errorf("x402 top-up: simulate: %w", err)
	}
	if res == nil || res.Value == nil {
		return "", errors.New("x402 top-up: simulate: empty answer")
	}
	if res.Value.Err != nil {
		return fmt.Sprint(res.Value.Err), nil
	}
	return "", nil
}

// awaitTopUp waits for the transfer to finalize and credits it; the
// intent comes back pending when it did not finalize in time.
func (s *Server) awaitTopUp(ctx context.Context, intent store.Deposit, sig solana.Signature) (int64, store.Deposit, error) {
	ctx, cancel := context.WithTimeout(ctx, s.topUpWait())
	defer cancel()
	for {
		n, d, err := s.creditTopUp(ctx, intent, sig)
		if err == nil {
			return n, d, nil
		}
		if !errors.Is(err, deposit.ErrNotFinalized) && !errors.Is(err, deposit.ErrNotFound) {
			return 0, intent, err
		}
		select {
		case <-ctx.Done():
			d, gerr := s.store.GetDeposit(context.WithoutCancel(ctx), intent.AccountID, intent.ID)
			if gerr != nil {
				d = intent
			}
			return 0, d, nil
		case <-time.After(time.Second):
		}
	}
}

// creditTopUp credits a top-up's transfer once, reading what the treasury
// received from the finalized transaction.
func (s *Server) creditTopUp(ctx context.Context, intent store.Deposit, sig solana.Signature) (int64, store.Deposit, error) {
	dep, err := s.deposits.Verifier.VerifyTransfer(ctx, sig)
	if err != nil {
		return 0, intent, err
	}
	d, applied, err := s.store.CreditDeposit(ctx, store.DepositCredit{DepositID: intent.ID, AccountID: intent.AccountID,
		Signature: sig.String(), USDC: int64(dep.USDC), Credits: dep.Credits, At: s.now()})
	if err != nil {
		return 0, intent, err
	}
	if !applied {
		return 0, d, nil
	}
	s.log.Info("x402 top-up credited", "account", intent.AccountID, "transaction", sig.String(), "credits", dep.Credits)
	return dep.Credits, d, nil
}

// topUpSettled answers a top-up: 200 with PAYMENT-RESPONSE once credited,
// 202 while the transfer is not finalized. The call that settled the
// payment (created), if it did not show one of the account's keys, gets a
// new one: the wallet signed a transfer nobody had seen, which proves it
// holds the wallet as a sign-in does. Any other call (a retry, a replay)
// gets none: sign in for one.
func (s *Server) topUpSettled(w http.ResponseWriter, r *http.Request, version int, o x402.Offer, t x402.Transfer, d store.Deposit, n int64, created bool) error {
	out := topUpJSON{Object: "x402_top_up", AccountID: d.AccountID, Wallet: t.Payer.String(), State: string(d.State),
		Transaction: d.Reference, AmountUSDC: usdcDecimal(int64(t.Amount)), CreditedNow: n, Credits: d.Credits}
	status := http.StatusOK
	settlement := x402.Settlement{Success: true, Payer: t.Payer.String(), Transaction: d.Reference, Network: o.Network, Amount: fmt.Sprint(t.Amount)}
	if d.State != store.DepositCredited {
		status, out.State = http.StatusAccepted, "pending"
		settlement.Success, settlement.ErrorReason = false, "settlement_pending"
		if s.now().Sub(d.Created) > topUpSweepAge {
			out.State = "expired"
		}
	}
	if acct, err := s.store.GetAccount(r.Context(), d.AccountID); err == nil {
		out.Balance = &acct.Credits
	}
	if created && !s.holdsKeyOf(r, d.AccountID) {
		secret, hash, id := credential.New(credential.APIKeyPrefix)
		key := store.Secret{Hash: hash, ID: id, AccountID: d.AccountID, CreatedAt: s.now(), Name: topUpKeyName}
		err := s.store.PutAPIKey(r.Context(), key)
		if errors.Is(err, store.ErrLimit) && s.revokeOldestKeyNamed(r.Context(), d.AccountID, topUpKeyName) {
			err = s.store.PutAPIKey(r.Context(), key)
		}
		if err == nil {
			out.APIKey, out.KeyID = secret, id
		} else {
			s.log.Warn("x402 top-up: no key issued", "account", d.AccountID, "err", err)
		}
	}
	s.settled(w, version, settlement)
	return writeJSON(w, status, out)
}

// settled sets the settlement header of the payment's version.
func (s *Server) settled(w http.ResponseWriter, version int, st x402.Settlement) {
	name := x402.HeaderResponse
	if version == 1 {
		name = x402.HeaderV1Response
	}
	w.Header().Set(name, x402.Encode(st))
}

// holdsKeyOf reports whether r carries an active API key of account.
func (s *Server) holdsKeyOf(r *http.Request, account string) bool {
	token := credential.Bearer(r.Header.Get("Authorization"))
	if !credential.WellFormed(credential.APIKeyPrefix, token) {
		return false
	}
	key, err := s.store.GetAPIKey(r.Context(), credential.Hash(token))
	return err == nil && key.Active() && !key.Expired(s.now()) && key.AccountID == account
}
