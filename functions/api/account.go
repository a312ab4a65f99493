package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/store"
)

// creditsPerUSD: 1 credit = $0.01.
const creditsPerUSD = 100

type balanceJSON struct {
	Object            string `json:"object"`
	Credits           int64  `json:"credits"`
	USD               string `json:"usd"`
	TotalDeposited    int64  `json:"total_deposited"`
	TotalSpent        int64  `json:"total_spent"`
	FreeAllowanceLeft int64  `json:"free_allowance_left"`
}

// usd formats credits as exact dollars ("12.34"), never through a float.
func usd(credits int64) string {
	sign := ""
	if credits < 0 {
		sign, credits = "-", -credits
	}
	return fmt.Sprintf("%s%d.%02d", sign, credits/creditsPerUSD, credits%creditsPerUSD)
}

func (s *Server) balance(w http.ResponseWriter, r *http.Request) error {
	a, err := s.store.GetAccount(r.Context(), who(r).account)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, balanceJSON{Object: "balance", Credits: a.Credits, USD: usd(a.Credits),
		TotalDeposited: a.TotalDeposited, TotalSpent: a.TotalSpent, FreeAllowanceLeft: a.FreeAllowanceLeft})
}

type secretJSON struct {
	Object  string `json:"object"`
	ID      string `json:"id"`
	Created int64  `json:"created"`
	Revoked bool   `json:"revoked"`
	// Secret is shown once, in the response that creates it.
	Secret string `json:"secret,omitempty"`
}

type listJSON[T any] struct {
	Object string `json:"object"`
	Data   []T    `json:"data"`
}

func secretsJSON(object string, ss []store.Secret) listJSON[secretJSON] {
	out := listJSON[secretJSON]{Object: "list", Data: []secretJSON{}}
	for _, s := range ss {
		out.Data = append(out.Data, secretJSON{Object: object, ID: s.ID, Created: s.CreatedAt.Unix(), Revoked: !s.Active()})
	}
	return out
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) error {
	keys, err := s.store.ListAPIKeys(r.Context(), who(r).account)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, secretsJSON("api_key", keys))
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) error {
	return s.createSecret(w, r, credential.APIKeyPrefix, "api_key", s.store.PutAPIKey)
}

func (s *Server) createWorkerToken(w http.ResponseWriter, r *http.Request) error {
	return s.createSecret(w, r, credential.WorkerTokenPrefix, "worker_token", s.store.PutWorkerToken)
}

func (s *Server) createSecret(w http.ResponseWriter, r *http.Request, prefix, object string,
	put func(ctx context.Context, s store.Secret) error) error {
	secret, hash, id := credential.New(prefix)
	now := s.now()
	err := put(r.Context(), store.Secret{Hash: hash, ID: id, AccountID: who(r).account, CreatedAt: now})
	if errors.Is(err, store.ErrLimit) {
		return oaiwire.InvalidRequest("", "this account already has the maximum of 5 active "+object+"s; revoke one first")
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, secretJSON{Object: object, ID: id, Created: now.Unix(), Secret: secret})
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) error {
	err := s.store.RevokeAPIKey(r.Context(), who(r).account, r.PathValue("id"), s.now())
	if errors.Is(err, store.ErrNotFound) {
		return notFound("api key", r.PathValue("id"))
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"object": "api_key.deleted", "id": r.PathValue("id"), "deleted": true})
}

func (s *Server) listWorkerTokens(w http.ResponseWriter, r *http.Request) error {
	toks, err := s.store.ListWorkerTokens(r.Context(), who(r).account)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, secretsJSON("worker_token", toks))
}

// revokeWorkerToken revokes a token and disconnects the workers live on it
// at once (a revoked token must not keep serving, or earning).
func (s *Server) revokeWorkerToken(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	conns, err := s.store.RevokeWorkerToken(r.Context(), who(r).account, id, s.now())
	if errors.Is(err, store.ErrNotFound) {
		return notFound("worker token", id)
	}
	if err != nil {
		return err
	}
	for _, c := range conns {
		if err := s.conns.Delete(r.Context(), c); err != nil {
			s.log.Error("disconnect revoked worker", "conn", c, "err", err)
		}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"object": "worker_token.deleted", "id": id, "deleted": true,
		"disconnected": len(conns)})
}

func notFound(what, id string) *oaiwire.Error {
	return &oaiwire.Error{Status: http.StatusNotFound, Type: oaiwire.TypeInvalidRequest, Code: "not_found",
		Message: "No " + what + " with id " + id + " on this account."}
}
