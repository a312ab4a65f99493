package api

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/store"
)

// A contributor's workerd holds a worker token (cwt_…), not an API key:
// the routes that only show the account's work to its owner (GET
// /v1/earnings, GET /v1/workers) take either, so `workerd earnings` needs
// no second secret on the worker's machine. A worker token reads its own
// account only, and nothing else: every other route refuses it
// (errWorkerTokenHere), so a leaked worker token spends no credits,
// manages no keys and moves no payout.

// errWorkerTokenHere refuses a worker token on a route that needs an API
// key, saying which routes it may read.
var errWorkerTokenHere = &oaiwire.Error{Status: http.StatusUnauthorized, Type: oaiwire.TypeAuthentication, Code: "invalid_api_key",
	Message: "A worker token (cwt_…) can only read GET /v1/earnings and GET /v1/workers. This route needs an API key: send Authorization: Bearer sk-c0mpute-…"}

// readable is authed for the read-only routes a worker token may also
// read: an API key goes through authed as before; a worker token is
// looked up (one store read, as the relay does at connect) and, while
// active, reads for its account as a limited principal, which no managing
// route accepts.
func (s *Server) readable(next handler) http.Handler {
	byKey := s.authed(next)
	byToken := handler(func(w http.ResponseWriter, r *http.Request) error {
		token := credential.Bearer(r.Header.Get("Authorization"))
		if !credential.WellFormed(credential.WorkerTokenPrefix, token) {
			return oaiwire.ErrInvalidKey
		}
		tok, err := s.store.GetWorkerToken(r.Context(), credential.Hash(token))
		switch {
		case errors.Is(err, store.ErrNotFound):
			return oaiwire.ErrInvalidKey
		case err != nil:
			return err
		case !tok.Active():
			return errRevokedWorkerToken
		}
		ctx := context.WithValue(r.Context(), principalKey{}, principal{account: tok.AccountID, limited: true})
		return next(w, r.WithContext(ctx))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(credential.Bearer(r.Header.Get("Authorization")), credential.WorkerTokenPrefix) {
			byToken.ServeHTTP(w, r)
			return
		}
		byKey.ServeHTTP(w, r)
	})
}

// errRevokedWorkerToken refuses a revoked worker token.
var errRevokedWorkerToken = &oaiwire.Error{Status: http.StatusUnauthorized, Type: oaiwire.TypeAuthentication, Code: "invalid_api_key",
	Message: "This worker token was revoked. Create a new one (POST /v1/worker-tokens with your API key)."}
