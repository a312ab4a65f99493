// Package credential makes and recognises the secrets of c0mpute: API keys
// (sk-c0mpute-…) and worker tokens (cwt_…). A secret is shown once; stores
// keep only its SHA-256 hash, which is also how it is looked up.
package credential

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// Secret prefixes.
const (
	APIKeyPrefix      = "sk-c0mpute-"
	WorkerTokenPrefix = "cwt_"
)

// secretBytes is the entropy of a secret: the spec asks for at least 24
// random bytes; 32 matches the hash width.
const secretBytes = 32

// encodedLen is the length of the base64url text of secretBytes.
var encodedLen = base64.RawURLEncoding.EncodedLen(secretBytes)

// New makes a secret with the prefix and returns it with its hash and
// public id.
func New(prefix string) (secret, hash, id string) {
	b := make([]byte, secretBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go ≥1.24)
	secret = prefix + base64.RawURLEncoding.EncodeToString(b)
	hash = Hash(secret)
	return secret, hash, PublicID(prefix, hash)
}

// Hash is the hex SHA-256 of a secret: its storage key. Secrets carry 256
// bits of entropy, so a fast hash is enough; no password hashing needed.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// PublicID is the id an owner sees and revokes by: a prefix-tagged piece of
// the hash, which reveals nothing usable about the secret.
func PublicID(prefix, hash string) string {
	tag := "key_"
	if prefix == WorkerTokenPrefix {
		tag = "wt_"
	}
	return tag + hash[:16]
}

// WellFormed reports whether s looks like a secret with the prefix, so that
// garbage is refused without a store round trip.
func WellFormed(prefix, s string) bool {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok || len(rest) != encodedLen {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(rest)
	return err == nil
}

// Bearer extracts the token from an Authorization header value.
func Bearer(header string) string {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}
