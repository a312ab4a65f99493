package api

import (
	"net/http"
	"slices"

	"github.com/c0mpute/c0mpute/functions/store"
)

// WorkerView is one worker identity as its contributor (GET /v1/workers)
// and the operator (the operator command) see it.
type WorkerView struct {
	Object string `json:"object"`
	// ID is the worker's identity pubkey (base58).
	ID string `json:"id"`
	// TokenID is the public id of the worker token it last connected
	// with; Wallet is its identity's Solana address (the ID again, kept
	// for clients that read it). Earnings are not paid there but to the
	// account's payout wallet (GET /v1/earnings).
	TokenID string `json:"token_id"`
	Wallet  string `json:"wallet"`
	// AccountID is shown to the operator only.
	AccountID string   `json:"account_id,omitempty"`
	Models    []string `json:"models"`
	// State is active, quarantined, banned or offline (active, and not
	// connected now).
	State          string `json:"state"`
	Strikes        int64  `json:"strikes"`
	Trusted        bool   `json:"trusted,omitempty"`
	JobsCompleted  int64  `json:"jobs_completed"`
	JobsRejected   int64  `json:"jobs_rejected"`
	CanariesPassed int64  `json:"canaries_passed"`
	CanariesFailed int64  `json:"canaries_failed"`
	// TokensPerSecond is the decode speed the gateway last measured.
	TokensPerSecond float64 `json:"tokens_per_second"`
	EarnedCredits   int64   `json:"earned_credits"`
	// LastReason is the check behind the last strike.
	LastReason string `json:"last_reason,omitempty"`
	FirstSeen  int64  `json:"first_seen"`
	LastSeen   int64  `json:"last_seen"`
}

// WorkerViews joins reputations with the live connections (their models
// and the token's standing) and the tokens' public ids (by hash).
func WorkerViews(reps []store.Reputation, live []store.Worker, tokenIDs map[string]string) []WorkerView {
	out := make([]WorkerView, 0, len(reps))
	for _, r := range reps {
		v := WorkerView{Object: "worker", ID: r.Pubkey, TokenID: tokenIDs[r.TokenHash], Wallet: r.Pubkey,
			Models: []string{}, State: string(store.StandingActive), Strikes: r.Strikes, Trusted: r.Trusted,
			JobsCompleted: r.JobsCompleted, JobsRejected: r.JobsRejected, CanariesPassed: r.CanariesPassed,
			CanariesFailed: r.CanariesFailed, TokensPerSecond: float64(r.MilliTokPerSec) / 1000,
			EarnedCredits: r.EarnedCredits, LastReason: r.LastReason, FirstSeen: r.FirstSeen.Unix(), LastSeen: r.LastSeen.Unix()}
		standing, online := r.Standing, false
		for _, w := range live {
			if w.Pubkey != r.Pubkey || w.AccountID != r.AccountID {
				continue
			}
			online = true
			standing = store.Worse(standing, w.Standing)
			for _, m := range w.Models {
				if !slices.Contains(v.Models, m) {
					v.Models = append(v.Models, m)
				}
			}
		}
		slices.Sort(v.Models)
		switch {
		case standing == store.StandingActive && !online:
			v.State = "offline"
		case standing != "":
			v.State = string(standing)
		}
		out = append(out, v)
	}
	return out
}

// workers serves GET /v1/workers: the caller's account's worker
// identities, with their standing, counts, speed and earnings.
func (s *Server) workers(w http.ResponseWriter, r *http.Request) error {
	account := who(r).account
	reps, err := s.store.Reputations(r.Context(), account)
	if err != nil {
		return err
	}
	live, err := s.liveWorkers(r.Context())
	if err != nil {
		return err
	}
	toks, err := s.store.ListWorkerTokens(r.Context(), account)
	if err != nil {
		return err
	}
	ids := make(map[string]string, len(toks))
	for _, t := range toks {
		ids[t.Hash] = t.ID
	}
	return writeJSON(w, http.StatusOK, listJSON[WorkerView]{Object: "list", Data: WorkerViews(reps, live, ids)})
}
