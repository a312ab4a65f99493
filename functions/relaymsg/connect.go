package relaymsg

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/mr-tron/base58"
)

// Headers a worker sends on its WebSocket upgrade request. API Gateway hands
// them to the $connect route, which authenticates the worker before the
// connection exists.
const (
	HeaderToken     = "X-C0mpute-Worker-Token"
	HeaderPubkey    = "X-C0mpute-Pubkey"
	HeaderTimestamp = "X-C0mpute-Timestamp"
	HeaderSignature = "X-C0mpute-Signature"
	// HeaderListener carries the shared secret of API listener
	// connections.
	HeaderListener = "X-C0mpute-Listener"
)

// ConnectSkew is how far a connect timestamp may be from the relay's clock.
// Signatures are single-use within this window (the relay stores them as
// nonces until it closes), so the window only has to absorb clock drift.
const ConnectSkew = 2 * time.Minute

// connectMessage is what the worker signs: a domain tag, so the signature
// cannot be replayed as any other ed25519-signed message (a Solana
// transaction is never this shape), the pubkey and a millisecond timestamp.
func connectMessage(pubkey string, ts int64) []byte {
	return []byte("c0mpute-relay-connect:v1:" + pubkey + ":" + strconv.FormatInt(ts, 10))
}

// SignConnect sets the identity headers on a worker's upgrade request.
func SignConnect(h http.Header, token string, key ed25519.PrivateKey, now time.Time) {
	pub := base58.Encode(key.Public().(ed25519.PublicKey))
	ts := now.UnixMilli()
	h.Set(HeaderToken, token)
	h.Set(HeaderPubkey, pub)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderSignature, base58.Encode(ed25519.Sign(key, connectMessage(pub, ts))))
}

// ConnectProof is a verified identity from upgrade headers.
type ConnectProof struct {
	Token  string
	Pubkey string
	// Nonce is the signature, to be recorded as used until Expires.
	Nonce   string
	Expires time.Time
}

// ErrBadProof means the identity headers are missing, malformed, stale or
// not signed by the pubkey they name.
var ErrBadProof = errors.New("relaymsg: bad connect proof")

// VerifyConnect checks the identity headers against now. It does not check
// the token or the replay; the caller looks those up in its store.
func VerifyConnect(get func(string) string, now time.Time) (ConnectProof, error) {
	token, pub, tsText, sigText := get(HeaderToken), get(HeaderPubkey), get(HeaderTimestamp), get(HeaderSignature)
	if token == "" || pub == "" || tsText == "" || sigText == "" {
		return ConnectProof{}, fmt.Errorf("%w: missing %s, %s, %s or %s header", ErrBadProof, HeaderToken, HeaderPubkey, HeaderTimestamp, HeaderSignature)
	}
	pubBytes, err := base58.Decode(pub)
	if err != nil || len(pubBytes) != ed25519.PublicKeySize {
		return ConnectProof{}, fmt.Errorf("%w: pubkey is not a base58 ed25519 key", ErrBadProof)
	}
	sig, err := base58.Decode(sigText)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return ConnectProof{}, fmt.Errorf("%w: signature is not a base58 ed25519 signature", ErrBadProof)
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return ConnectProof{}, fmt.Errorf("%w: timestamp is not integer milliseconds", ErrBadProof)
	}
	at := time.UnixMilli(ts)
	if at.Before(now.Add(-ConnectSkew)) || at.After(now.Add(ConnectSkew)) {
		return ConnectProof{}, fmt.Errorf("%w: timestamp %s is more than %s from the relay's clock", ErrBadProof, at.UTC().Format(time.RFC3339), ConnectSkew)
	}
	if !ed25519.Verify(pubBytes, connectMessage(pub, ts), sig) {
		return ConnectProof{}, fmt.Errorf("%w: signature does not verify", ErrBadProof)
	}
	return ConnectProof{Token: token, Pubkey: pub, Nonce: "connect:" + sigText, Expires: at.Add(ConnectSkew)}, nil
}
