package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mr-tron/base58"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/siws"
	"github.com/c0mpute/c0mpute/functions/store"
)

// The way out for contributors: what an account's workers earned, the
// wallet it is paid to (proven by a signature of that wallet, never a bare
// field), and the stake boost.

// PayoutStatement is the line a wallet signs to become the payout wallet of
// an account (%s: the account id): the account is in the signed text, so a
// proof made for one account cannot set another's.
const PayoutStatement = "Pay the earnings of c0mpute account %s to this wallet."

// payoutHourUTC is when the keeper's scheduled payouts run each day
// (terraform/scheduler.tf's payouts schedule).
const payoutHourUTC = 16

// boostTTL is how long an API instance trusts what it read of a worker
// account's stake boost: the keeper renews boosts once a day.
const boostTTL = 5 * time.Minute

// maxBoostCache bounds the accounts whose boost an instance remembers; past
// it the cache starts over.
const maxBoostCache = 4096

// boostCache remembers worker accounts' stake boosts, so that settling a
// job reads the account at most once per boostTTL.
type boostCache struct {
	mu sync.Mutex
	m  map[string]boostSeen
}

type boostSeen struct {
	until, read time.Time
}

// workerShare is the percentage of a job's price a worker account earns at
// now: the boosted share while the account's stake boost lasts. A store
// error pays the base share (the boost is a perk, a completion is not held
// up for it) and is logged.
func (s *Server) workerShare(ctx context.Context, account string, now time.Time) int64 {
	if account == "" || s.limits.BoostedSharePercent <= s.limits.WorkerSharePercent {
		return s.limits.WorkerSharePercent
	}
	c := &s.boosts
	c.mu.Lock()
	seen, ok := c.m[account]
	c.mu.Unlock()
	if !ok || now.Sub(seen.read) >= boostTTL {
		a, err := s.store.GetAccount(ctx, account)
		if err != nil {
			s.log.Warn("stake boost unknown: base share", "account", account, "err", err)
			return s.limits.WorkerSharePercent
		}
		seen = boostSeen{until: a.StakeBoostUntil, read: now}
		c.mu.Lock()
		if c.m == nil || len(c.m) >= maxBoostCache {
			c.m = map[string]boostSeen{}
		}
		c.m[account] = seen
		c.mu.Unlock()
	}
	if now.Before(seen.until) {
		return s.limits.BoostedSharePercent
	}
	return s.limits.WorkerSharePercent
}

// earningFor is a worker account's earning from a job of price at now.
func (s *Server) earningFor(ctx context.Context, price int64, account string, now time.Time) int64 {
	return price * s.workerShare(ctx, account, now) / 100
}

type earningsJSON struct {
	Object    string `json:"object"`
	AccountID string `json:"account_id"`
	// PayoutWallet is where payouts go; "" when the account has none
	// (its earnings wait).
	PayoutWallet string `json:"payout_wallet"`
	// Earned is what the account's workers earned, all time; Paid what was
	// paid out or is on its way; Pending the rest, owed. Credits
	// (1 credit = $0.01).
	Earned        int64          `json:"earned"`
	Paid          int64          `json:"paid"`
	Pending       int64          `json:"pending"`
	MinimumPayout int64          `json:"minimum_payout"`
	NextPayout    nextPayoutJSON `json:"next_payout"`
	// PayoutRequested is when the owner asked for a payout not made yet
	// (Unix seconds; absent when none).
	PayoutRequested int64 `json:"payout_requested,omitempty"`
	// WorkerSharePercent is the share of each job's price the account's
	// workers earn now.
	WorkerSharePercent int64                `json:"worker_share_percent"`
	StakeBoost         stakeBoostJSON       `json:"stake_boost"`
	Workers            []workerEarningsJSON `json:"workers"`
}

type nextPayoutJSON struct {
	// At is when the next scheduled payout runs (Unix seconds); Credits
	// what it would pay, 0 with the Reason when nothing.
	At      int64  `json:"at"`
	Credits int64  `json:"credits"`
	Reason  string `json:"reason,omitempty"`
}

type stakeBoostJSON struct {
	Active bool `json:"active"`
	// Until is when the boost lapses unless the keeper renews it (Unix
	// seconds; absent when never boosted).
	Until int64 `json:"until,omitempty"`
	// SharePercent is the boosted share.
	SharePercent int64 `json:"share_percent"`
}

// workerEarningsJSON is one worker identity of the account.
type workerEarningsJSON struct {
	Pubkey         string `json:"pubkey"`
	Earned         int64  `json:"earned"`
	JobsCompleted  int64  `json:"jobs_completed"`
	CanariesPassed int64  `json:"canaries_passed"`
	Standing       string `json:"standing"`
	LastSeen       int64  `json:"last_seen"`
}

// nextPayoutAt is the first scheduled payout after now.
func nextPayoutAt(now time.Time) time.Time {
	day := now.UTC().Truncate(24 * time.Hour)
	at := day.Add(payoutHourUTC * time.Hour)
	if !now.Before(at) {
		at = at.Add(24 * time.Hour)
	}
	return at
}

// earnings serves GET /v1/earnings: the caller's account's earnings, by
// worker identity, with the payout wallet, the next payout and the boost.
func (s *Server) earnings(w http.ResponseWriter, r *http.Request) error {
	account := who(r).account
	a, err := s.store.GetAccount(r.Context(), account)
	if err != nil {
		return err
	}
	reps, err := s.store.Reputations(r.Context(), account)
	if err != nil {
		return err
	}
	now := s.now()
	out := earningsJSON{Object: "earnings", AccountID: a.ID, PayoutWallet: a.Wallet, Earned: a.Earned, Paid: a.PaidOut,
		Pending: a.Earned - a.PaidOut, MinimumPayout: store.MinPayoutCredits, WorkerSharePercent: s.limits.WorkerSharePercent,
		StakeBoost: stakeBoostJSON{Active: a.Boosted(now), SharePercent: s.limits.BoostedSharePercent},
		Workers:    []workerEarningsJSON{}}
	if a.Boosted(now) {
		out.WorkerSharePercent = s.limits.BoostedSharePercent
	}
	if !a.StakeBoostUntil.IsZero() {
		out.StakeBoost.Until = a.StakeBoostUntil.Unix()
	}
	if !a.PayoutRequested.IsZero() {
		out.PayoutRequested = a.PayoutRequested.Unix()
	}
	out.NextPayout.At = nextPayoutAt(now).Unix()
	if out.NextPayout.Reason = payoutBlocked(a); out.NextPayout.Reason == "" {
		out.NextPayout.Credits = out.Pending
	}
	for _, rep := range reps {
		out.Workers = append(out.Workers, workerEarningsJSON{Pubkey: rep.Pubkey, Earned: rep.EarnedCredits,
			JobsCompleted: rep.JobsCompleted, CanariesPassed: rep.CanariesPassed, Standing: string(rep.Standing),
			LastSeen: rep.LastSeen.Unix()})
	}
	return writeJSON(w, http.StatusOK, out)
}

// payoutBlocked says why a's earnings would not be paid now: no payout
// wallet, or less than the minimum pending; "" when they would.
func payoutBlocked(a store.Account) string {
	if b, err := base58.Decode(a.Wallet); err != nil || len(b) != 32 {
		return "no_payout_wallet"
	}
	if a.Earned-a.PaidOut < store.MinPayoutCredits {
		return "below_minimum"
	}
	return ""
}

// requestedPayoutMinute is the minute past each hour the keeper pays the
// payouts asked for (terraform/scheduler.tf's requested-payouts).
const requestedPayoutMinute = 30

// nextRequestedPayoutAt is the first requested-payouts run after now.
func nextRequestedPayoutAt(now time.Time) time.Time {
	at := now.UTC().Truncate(time.Hour).Add(requestedPayoutMinute * time.Minute)
	if !now.Before(at) {
		at = at.Add(time.Hour)
	}
	return at
}

type payoutRequestJSON struct {
	Object      string `json:"object"`
	AccountID   string `json:"account_id"`
	Wallet      string `json:"wallet"`
	Credits     int64  `json:"credits"`
	RequestedAt int64  `json:"requested_at"`
	// RunsAt is when the keeper's next requested-payouts run starts.
	RunsAt int64 `json:"runs_at"`
}

// requestPayout serves POST /v1/payouts: the account's pending earnings,
// at least the minimum, are paid to its payout wallet at the keeper's next
// hourly run instead of the daily one. The request names no amount or
// wallet: the keeper pays what the store says is owed, where the account's
// proven wallet is.
func (s *Server) requestPayout(w http.ResponseWriter, r *http.Request) error {
	a, err := s.store.GetAccount(r.Context(), who(r).account)
	if err != nil {
		return err
	}
	switch payoutBlocked(a) {
	case "no_payout_wallet":
		return &oaiwire.Error{Status: http.StatusConflict, Type: oaiwire.TypeInvalidRequest, Code: "no_payout_wallet",
			Message: "This account has no payout wallet: sign in with a wallet, or prove one (POST /v1/payout-wallet)."}
	case "below_minimum":
		return &oaiwire.Error{Status: http.StatusConflict, Type: oaiwire.TypeInvalidRequest, Code: "below_minimum",
			Message: fmt.Sprintf("%d credits are pending; a payout is at least %d credits ($1).", a.Earned-a.PaidOut, store.MinPayoutCredits)}
	}
	now := s.now()
	if a, err = s.store.RequestPayout(r.Context(), a.ID, now); err != nil {
		return err
	}
	s.log.Info("payout requested", "account", a.ID, "credits", a.Earned-a.PaidOut)
	return writeJSON(w, http.StatusAccepted, payoutRequestJSON{Object: "payout_request", AccountID: a.ID, Wallet: a.Wallet,
		Credits: a.Earned - a.PaidOut, RequestedAt: a.PayoutRequested.Unix(), RunsAt: nextRequestedPayoutAt(now).Unix()})
}

var errPayoutWalletsOff = notConfigured("Setting a payout wallet is")

// payoutIssuer is the sign-in issuer for the payout-wallet proofs of an
// account.
func (s *Server) payoutIssuer(account string) (*siws.Issuer, error) {
	if s.signIn == nil {
		return nil, errPayoutWalletsOff
	}
	return s.signIn.WithStatement(fmt.Sprintf(PayoutStatement, account))
}

// payoutWalletChallenge serves POST /v1/payout-wallet/challenge {wallet}:
// a Sign-In With Solana input for that wallet whose statement names the
// caller's account, valid 5 minutes, answerable once.
func (s *Server) payoutWalletChallenge(w http.ResponseWriter, r *http.Request) error {
	var req challengeRequest
	if err := decodeSignIn(r, &req); err != nil {
		return err
	}
	if b, err := base58.Decode(req.Wallet); err != nil || len(b) != 32 {
		return oaiwire.InvalidRequest("wallet", "wallet must be the Solana address (base58 of 32 bytes) to be paid to")
	}
	iss, err := s.payoutIssuer(who(r).account)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, iss.Challenge(req.Wallet, s.now()))
}

type payoutWalletJSON struct {
	Object    string `json:"object"`
	AccountID string `json:"account_id"`
	Wallet    string `json:"wallet"`
}

// setPayoutWallet serves POST /v1/payout-wallet: the challenge signed by
// the wallet (either form sign-in takes) makes it the caller's account's
// payout wallet.
func (s *Server) setPayoutWallet(w http.ResponseWriter, r *http.Request) error {
	account := who(r).account
	iss, err := s.payoutIssuer(account)
	if err != nil {
		return err
	}
	wallet, err := s.provenWallet(r, iss, payoutWalletRefused, "this message was used already; ask for a new challenge")
	if err != nil {
		return err
	}
	if _, err := s.store.SetWallet(r.Context(), account, wallet); err != nil {
		return err
	}
	s.log.Info("payout wallet set", "account", account, "wallet", wallet)
	return writeJSON(w, http.StatusOK, payoutWalletJSON{Object: "payout_wallet", AccountID: account, Wallet: wallet})
}

func payoutWalletRefused(why string) *oaiwire.Error {
	return &oaiwire.Error{Status: http.StatusBadRequest, Type: oaiwire.TypeInvalidRequest, Code: "invalid_wallet_proof",
		Message: "Payout wallet not set: " + strings.TrimPrefix(why, "siws: ") + "."}
}
