package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/mr-tron/base58"

	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/siws"
	"github.com/c0mpute/c0mpute/functions/store"
)

// SignInStatement is the line a wallet shows when signing in to the
// network.
const SignInStatement = "Sign in to c0mpute: this proves you hold the wallet, and costs nothing."

// maxSignInBody bounds a sign-in request: a message of a few hundred bytes,
// its signature and key, in base64.
const maxSignInBody = 16 << 10

// challengeRequest is POST /v1/auth/siws/challenge's body; all of it is
// optional.
type challengeRequest struct {
	// Wallet binds the challenge to one wallet (base58).
	Wallet string `json:"wallet,omitempty"`
}

// signInRequest is POST /v1/auth/siws/verify's body: what a wallet's
// solana:signIn returns (bytes in base64), or the plain form of a wallet
// that signs a message it is given (signature in base58).
type signInRequest struct {
	Input  *siws.Input `json:"input,omitempty"`
	Output *struct {
		Account struct {
			PublicKey string `json:"publicKey"`
		} `json:"account"`
		SignedMessage string `json:"signedMessage"`
		Signature     string `json:"signature"`
	} `json:"output,omitempty"`
	Wallet    string `json:"wallet,omitempty"`
	Message   string `json:"message,omitempty"`
	Signature string `json:"signature,omitempty"`
}

// signInJSON is a verified sign-in's answer: the account (created at the
// first sign-in, its wallet the one proven) and a new API key, shown once.
type signInJSON struct {
	Object    string `json:"object"`
	AccountID string `json:"account_id"`
	Wallet    string `json:"wallet"`
	Created   bool   `json:"created"`
	APIKey    string `json:"api_key"`
	KeyID     string `json:"key_id"`
}

func decodeSignIn(r *http.Request, v any) error {
	// Unknown fields are let through: wallets return more than this
	// route reads (signatureType, the account's chains and features).
	dec := json.NewDecoder(io.LimitReader(r.Body, maxSignInBody+1))
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty body is an empty request
		}
		return oaiwire.InvalidRequest("", "the body is not the JSON this route takes: "+err.Error())
	}
	return nil
}

var errSignInOff = notConfigured("Sign-in is")

// challenge serves POST /v1/auth/siws/challenge: a SolanaSignInInput for
// the wallet to sign, valid for 5 minutes, answerable once.
func (s *Server) challenge(w http.ResponseWriter, r *http.Request) error {
	if s.signIn == nil {
		return errSignInOff
	}
	var req challengeRequest
	if err := decodeSignIn(r, &req); err != nil {
		return err
	}
	if req.Wallet != "" {
		if b, err := base58.Decode(req.Wallet); err != nil || len(b) != 32 {
			return oaiwire.InvalidRequest("wallet", "wallet must be a Solana address (base58 of 32 bytes)")
		}
	}
	return writeJSON(w, http.StatusOK, s.signIn.Challenge(req.Wallet, s.now()))
}

// verifySignIn serves POST /v1/auth/siws/verify: it checks the signed
// message against what was issued, spends its nonce, makes the account
// of the proven wallet if it is new, and issues an API key.
func (s *Server) verifySignIn(w http.ResponseWriter, r *http.Request) error {
	if s.signIn == nil {
		return errSignInOff
	}
	wallet, err := s.provenWallet(r, s.signIn, signInFailed, "this sign-in message was used already; ask for a new challenge")
	if err != nil {
		return err
	}
	created := true
	err = s.store.CreateAccount(r.Context(), store.Account{ID: wallet, Wallet: wallet, CreatedAt: s.now()})
	if errors.Is(err, store.ErrExists) {
		created, err = false, nil
	}
	if err != nil {
		return err
	}
	secret, hash, id := credential.New(credential.APIKeyPrefix)
	key := store.Secret{Hash: hash, ID: id, AccountID: wallet, CreatedAt: s.now(), Name: signInKeyName}
	err = s.store.PutAPIKey(r.Context(), key)
	if errors.Is(err, store.ErrLimit) && s.revokeOldestKeyNamed(r.Context(), wallet, signInKeyName) {
		// The wallet proved itself: its oldest sign-in key makes room,
		// so a user who lost its keys is never locked out.
		err = s.store.PutAPIKey(r.Context(), key)
	}
	if errors.Is(err, store.ErrLimit) {
		return &oaiwire.Error{Status: http.StatusConflict, Type: oaiwire.TypeInvalidRequest, Code: "key_limit",
			Message: fmt.Sprintf("Signed in, but this account already has the maximum of %d active API keys, none of them made by a sign-in; revoke one (DELETE /v1/keys/{id} with one of them) and sign in again.", store.MaxActiveKeys)}
	}
	if err != nil {
		return err
	}
	s.log.Info("signed in", "account", wallet, "created", created, "key", id)
	return writeJSON(w, http.StatusOK, signInJSON{Object: "sign_in", AccountID: wallet, Wallet: wallet, Created: created,
		APIKey: secret, KeyID: id})
}

// provenWallet reads a signed Sign-In With Solana message in either form
// sign-in takes, verifies it against what iss issued, spends its nonce and
// returns the wallet that signed it; refused makes the error of a message
// that does not verify or was used already (reused, its text).
func (s *Server) provenWallet(r *http.Request, iss *siws.Issuer, refused func(string) *oaiwire.Error, reused string) (string, error) {
	var req signInRequest
	if err := decodeSignIn(r, &req); err != nil {
		return "", err
	}
	msg, sig, pub, err := req.parts()
	if err != nil {
		return "", oaiwire.InvalidRequest("", err.Error())
	}
	wallet, nonce, expires, err := iss.Verify(msg, sig, pub, s.now())
	if err != nil {
		return "", refused(err.Error())
	}
	switch err := s.store.UseNonce(r.Context(), "siws:"+nonce, expires); {
	case errors.Is(err, store.ErrExists):
		return "", refused(reused)
	case err != nil:
		return "", err
	}
	return wallet, nil
}

func signInFailed(why string) *oaiwire.Error {
	return &oaiwire.Error{Status: http.StatusUnauthorized, Type: oaiwire.TypeInvalidRequest, Code: "invalid_sign_in",
		Message: "Sign-in refused: " + strings.TrimPrefix(why, "siws: ") + "."}
}

// parts are the signed message, the signature and the public key of either
// form of the request.
func (req *signInRequest) parts() (msg, sig, pub []byte, err error) {
	if req.Output != nil {
		b64 := base64.StdEncoding
		if msg, err = b64.DecodeString(req.Output.SignedMessage); err != nil {
			return nil, nil, nil, errors.New("output.signedMessage is not base64")
		}
		if sig, err = b64.DecodeString(req.Output.Signature); err != nil {
			return nil, nil, nil, errors.New("output.signature is not base64")
		}
		if pub, err = b64.DecodeString(req.Output.Account.PublicKey); err != nil {
			// Some clients send the address instead of its bytes.
			if pub, err = base58.Decode(req.Output.Account.PublicKey); err != nil {
				return nil, nil, nil, errors.New("output.account.publicKey is neither base64 nor a base58 address")
			}
		}
		return msg, sig, pub, nil
	}
	if req.Wallet == "" || req.Message == "" || req.Signature == "" {
		return nil, nil, nil, errors.New("send {input, output} as solana:signIn returns them, or {wallet, message, signature}")
	}
	if pub, err = base58.Decode(req.Wallet); err != nil {
		return nil, nil, nil, errors.New("wallet is not a base58 address")
	}
	if sig, err = base58.Decode(req.Signature); err != nil {
		return nil, nil, nil, errors.New("signature is not base58")
	}
	return []byte(req.Message), sig, pub, nil
}

// signInKeyName names the keys sign-ins issue.
const signInKeyName = "sign-in"

// revokeOldestKeyNamed revokes the account's oldest active key of that
// name (the name sign-ins or top-ups give the keys they issue); false when
// there is none.
func (s *Server) revokeOldestKeyNamed(ctx context.Context, account, name string) bool {
	keys, err := s.store.ListAPIKeys(ctx, account)
	if err != nil {
		return false
	}
	for _, k := range keys { // oldest first
		if k.Active() && k.Name == name {
			if err := s.store.RevokeAPIKey(ctx, account, k.ID, s.now()); err != nil {
				return false
			}
			s.keys.evict(k.Hash)
			s.log.Info("a new key replaced the oldest of its kind", "account", account, "name", name, "revoked", k.ID)
			return true
		}
	}
	return false
}
