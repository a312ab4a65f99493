package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/store"
)

// maxKeyBody bounds a key or token request's body.
const maxKeyBody = 4 << 10

// secretJSON is an API key or a worker token as its owner sees it. The
// spend fields are an API key's.
type secretJSON struct {
	Object  string `json:"object"`
	ID      string `json:"id"`
	Name    string `json:"name"`
	Created int64  `json:"created"`
	Revoked bool   `json:"revoked"`
	// Limit is the spend cap in credits per LimitReset period (null: no
	// cap); LimitRemaining what is left of it now; Usage what the key
	// spent, all time, refunds taken back out.
	Limit          *int64 `json:"limit,omitempty"`
	LimitReset     string `json:"limit_reset,omitempty"`
	LimitRemaining *int64 `json:"limit_remaining,omitempty"`
	Usage          *int64 `json:"usage,omitempty"`
	// ExpiresAt is RFC 3339, or absent for a key that does not expire.
	ExpiresAt string `json:"expires_at,omitempty"`
	Expired   bool   `json:"expired,omitempty"`
	// Secret is shown once, in the response that creates it.
	Secret string `json:"secret,omitempty"`
}

type listJSON[T any] struct {
	Object string `json:"object"`
	Data   []T    `json:"data"`
}

// keyJSON is an API key with its spend controls, at now.
func keyJSON(k store.Secret, now time.Time) secretJSON {
	out := secretJSON{Object: "api_key", ID: k.ID, Name: k.Name, Created: k.CreatedAt.Unix(), Revoked: !k.Active(),
		LimitReset: k.LimitReset, Usage: &k.Usage, Expired: k.Expired(now)}
	if k.Limit > 0 {
		left := max(k.Limit-k.Spent(now), 0)
		out.Limit, out.LimitRemaining = &k.Limit, &left
	}
	if !k.ExpiresAt.IsZero() {
		out.ExpiresAt = k.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return out
}

func tokenJSON(t store.Secret) secretJSON {
	return secretJSON{Object: "worker_token", ID: t.ID, Name: t.Name, Created: t.CreatedAt.Unix(), Revoked: !t.Active()}
}

// keyRequest is the body of POST /v1/keys and PATCH /v1/keys/{id}, in
// OpenRouter's shape: a name, a spend limit in credits with its reset
// period, an expiry (RFC 3339). In a PATCH, an absent field stays as it
// is; limit 0 or null removes the cap, expires_at null the expiry.
type keyRequest struct {
	Name       *string          `json:"name" validate:"omitempty,max=64"`
	Limit      *int64           `json:"limit" validate:"omitempty,min=0,max=1000000000000"`
	LimitReset *string          `json:"limit_reset" validate:"omitempty,oneof=daily weekly monthly none"`
	ExpiresAt  *json.RawMessage `json:"expires_at"`
}

// decodeBody reads an optional JSON body (empty is {}), strictly: unknown
// fields are errors, so a misspelt control is never silently ignored.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxKeyBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return oaiwire.InvalidRequest("", "the body is not the JSON this route takes: "+err.Error())
	}
	if err := validate.Struct(v); err != nil {
		return oaiwire.InvalidRequest("", "invalid field: "+err.Error())
	}
	return nil
}

// patch is the request as a store.KeyPatch, at now.
func (k keyRequest) patch(now time.Time) (store.KeyPatch, error) {
	p := store.KeyPatch{Name: k.Name, Limit: k.Limit}
	if k.LimitReset != nil {
		reset := *k.LimitReset
		if reset == "none" {
			reset = ""
		}
		p.LimitReset = &reset
	}
	if k.ExpiresAt != nil {
		var at time.Time
		if s := strings.TrimSpace(string(*k.ExpiresAt)); s != "null" {
			var text string
			if err := json.Unmarshal(*k.ExpiresAt, &text); err != nil {
				return p, oaiwire.InvalidRequest("expires_at", "expires_at is an RFC 3339 time, like 2027-01-31T00:00:00Z, or null")
			}
			t, err := time.Parse(time.RFC3339, text)
			if err != nil {
				return p, oaiwire.InvalidRequest("expires_at", "expires_at is an RFC 3339 time, like 2027-01-31T00:00:00Z, or null")
			}
			if !t.After(now) {
				return p, oaiwire.InvalidRequest("expires_at", "expires_at is in the past")
			}
			at = t.UTC()
		}
		p.ExpiresAt = &at
	}
	return p, nil
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) error {
	keys, err := s.store.ListAPIKeys(r.Context(), who(r).account)
	if err != nil {
		return err
	}
	out := listJSON[secretJSON]{Object: "list", Data: []secretJSON{}}
	now := s.now()
	for _, k := range keys {
		out.Data = append(out.Data, keyJSON(k, now))
	}
	return writeJSON(w, http.StatusOK, out)
}

// keyPatch reads a key request's body as a patch, at now.
func (s *Server) keyPatch(r *http.Request) (store.KeyPatch, time.Time, error) {
	var req keyRequest
	if err := decodeBody(r, &req); err != nil {
		return store.KeyPatch{}, time.Time{}, err
	}
	now := s.now()
	p, err := req.patch(now)
	return p, now, err
}

// createKey serves POST /v1/keys: a new key with an optional name, spend
// limit and expiry, shown once.
func (s *Server) createKey(w http.ResponseWriter, r *http.Request) error {
	p, now, err := s.keyPatch(r)
	if err != nil {
		return err
	}
	secret, hash, id := credential.New(credential.APIKeyPrefix)
	k := store.Secret{Hash: hash, ID: id, AccountID: who(r).account, CreatedAt: now}
	p.Apply(&k)
	if err := s.putSecret(r.Context(), k, "api_key", s.store.PutAPIKey); err != nil {
		return err
	}
	out := keyJSON(k, now)
	out.Secret = secret
	return writeJSON(w, http.StatusCreated, out)
}

// updateKey serves PATCH /v1/keys/{id}.
func (s *Server) updateKey(w http.ResponseWriter, r *http.Request) error {
	p, now, err := s.keyPatch(r)
	if err != nil {
		return err
	}
	k, err := s.store.UpdateAPIKey(r.Context(), who(r).account, r.PathValue("id"), p)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("api key", r.PathValue("id"))
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, keyJSON(k, now))
}

// currentKey serves GET /v1/key: the calling key's own limit, what is left
// of it and its usage.
func (s *Server) currentKey(w http.ResponseWriter, r *http.Request) error {
	k, err := s.store.GetAPIKey(r.Context(), who(r).keyHash)
	if err != nil {
		return err
	}
	out := keyJSON(k, s.now())
	out.Object = "key"
	return writeJSON(w, http.StatusOK, out)
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

// tokenRequest is the body of POST and PATCH /v1/worker-tokens.
type tokenRequest struct {
	Name *string `json:"name" validate:"omitempty,max=64"`
}

func (s *Server) listWorkerTokens(w http.ResponseWriter, r *http.Request) error {
	toks, err := s.store.ListWorkerTokens(r.Context(), who(r).account)
	if err != nil {
		return err
	}
	out := listJSON[secretJSON]{Object: "list", Data: []secretJSON{}}
	for _, t := range toks {
		out.Data = append(out.Data, tokenJSON(t))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) createWorkerToken(w http.ResponseWriter, r *http.Request) error {
	var req tokenRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	secret, hash, id := credential.New(credential.WorkerTokenPrefix)
	t := store.Secret{Hash: hash, ID: id, AccountID: who(r).account, CreatedAt: s.now()}
	if req.Name != nil {
		t.Name = *req.Name
	}
	if err := s.putSecret(r.Context(), t, "worker_token", s.store.PutWorkerToken); err != nil {
		return err
	}
	out := tokenJSON(t)
	out.Secret = secret
	return writeJSON(w, http.StatusCreated, out)
}

// renameWorkerToken serves PATCH /v1/worker-tokens/{id}.
func (s *Server) renameWorkerToken(w http.ResponseWriter, r *http.Request) error {
	var req tokenRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if req.Name == nil {
		return oaiwire.InvalidRequest("name", "send the token's new name")
	}
	t, err := s.store.RenameWorkerToken(r.Context(), who(r).account, r.PathValue("id"), *req.Name)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("worker token", r.PathValue("id"))
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, tokenJSON(t))
}

// putSecret stores a new key or token, with the account's cap as a 400.
func (s *Server) putSecret(ctx context.Context, sec store.Secret, object string, put func(context.Context, store.Secret) error) error {
	err := put(ctx, sec)
	if errors.Is(err, store.ErrLimit) {
		return oaiwire.InvalidRequest("", fmt.Sprintf("this account already has the maximum of %d active %ss; revoke one first", store.MaxActiveKeys, object))
	}
	return err
}

// keyLimitReached is the 402 of a key whose spend limit the request would
// pass.
func keyLimitReached(k store.Secret, price int64, now time.Time) *oaiwire.Error {
	period := "in all"
	if k.LimitReset != "" {
		period = map[string]string{store.ResetDaily: "per day", store.ResetWeekly: "per week", store.ResetMonthly: "per month"}[k.LimitReset]
	}
	return &oaiwire.Error{Status: http.StatusPaymentRequired, Type: oaiwire.TypeInsufficient, Code: "key_limit_exceeded",
		Message: fmt.Sprintf("This API key's spend limit of %d credits %s is reached (%d spent; this request costs %d). The account's owner can raise it (PATCH /v1/keys/%s with an unlimited key). The request was not charged.",
			k.Limit, period, k.Spent(now), price, k.ID)}
}

// errLimitedKey answers a key with spend controls on a route that manages
// keys or tokens.
var errLimitedKey = &oaiwire.Error{Status: http.StatusForbidden, Type: oaiwire.TypeInvalidRequest, Code: "limited_key",
	Message: "This API key has a spend limit or an expiry: it can make requests, not manage keys or worker tokens. Use a key without spend controls."}

// errKeyExpired answers a request made with a key past its expiry.
var errKeyExpired = &oaiwire.Error{Status: http.StatusUnauthorized, Type: oaiwire.TypeAuthentication, Code: "invalid_api_key",
	Message: "This API key has expired. Make a new one (POST /v1/keys with another key), or extend it (PATCH /v1/keys/{id})."}

// keyLimit is the answer to a request its key's spend limit refused: the
// key is read again to say by how much.
func (s *Server) keyLimit(ctx context.Context, keyHash string, price int64) error {
	k, err := s.store.GetAPIKey(ctx, keyHash)
	if err != nil {
		return &oaiwire.Error{Status: http.StatusPaymentRequired, Type: oaiwire.TypeInsufficient, Code: "key_limit_exceeded",
			Message: "This API key's spend limit is reached. The request was not charged."}
	}
	return keyLimitReached(k, price, s.now())
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
