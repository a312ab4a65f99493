package shard

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/mr-tron/base58"
)

// PublicKey is a node's ed25519 public key: its Solana address. JSON: base58.
type PublicKey [ed25519.PublicKeySize]byte

// KeyOf returns the public half of a private key.
func KeyOf(key ed25519.PrivateKey) PublicKey {
	var p PublicKey
	copy(p[:], key.Public().(ed25519.PublicKey))
	return p
}

// Compare orders keys as big-endian numbers (as bytes.Compare would),
// a word at a time: canonical encodings sort thousands of them.
func (p *PublicKey) Compare(q *PublicKey) int {
	for i := 0; i < len(p); i += 8 {
		a, b := binary.BigEndian.Uint64(p[i:]), binary.BigEndian.Uint64(q[i:])
		if a != b {
			if a < b {
				return -1
			}
			return 1
		}
	}
	return 0
}

// String is the base58 address.
func (p PublicKey) String() string { return base58.Encode(p[:]) }

// IsZero reports whether the key is unset.
func (p PublicKey) IsZero() bool { return p == PublicKey{} }

// MarshalText encodes the key as base58.
func (p PublicKey) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText decodes a base58 address of exactly 32 bytes.
func (p *PublicKey) UnmarshalText(b []byte) error {
	raw, err := base58.Decode(string(b))
	if err != nil || len(raw) != len(p) {
		return fmt.Errorf("shard: %q is not a base58 ed25519 public key", truncate(string(b)))
	}
	copy(p[:], raw)
	return nil
}

// Hash is a SHA-256 digest. JSON: lowercase hex.
type Hash [sha256.Size]byte

// String is the hex digest.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports whether the hash is unset.
func (h Hash) IsZero() bool { return h == Hash{} }

// MarshalText encodes the hash as hex.
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText decodes 64 hex digits.
func (h *Hash) UnmarshalText(b []byte) error {
	if len(b) != 2*len(h) {
		return fmt.Errorf("shard: %q is not a 64-digit hex SHA-256", truncate(string(b)))
	}
	if _, err := hex.Decode(h[:], b); err != nil {
		return fmt.Errorf("shard: %q is not a 64-digit hex SHA-256", truncate(string(b)))
	}
	return nil
}

// Blockhash is a Solana blockhash. JSON: base58, as Solana prints it.
type Blockhash [32]byte

// String is the base58 blockhash.
func (b Blockhash) String() string { return base58.Encode(b[:]) }

// MarshalText encodes the blockhash as base58.
func (b Blockhash) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText decodes a base58 blockhash of exactly 32 bytes.
func (b *Blockhash) UnmarshalText(t []byte) error {
	raw, err := base58.Decode(string(t))
	if err != nil || len(raw) != len(b) {
		return fmt.Errorf("shard: %q is not a base58 Solana blockhash", truncate(string(t)))
	}
	copy(b[:], raw)
	return nil
}

// Signature is an ed25519 signature. JSON: base58, as Solana prints them.
type Signature [ed25519.SignatureSize]byte

// String is the base58 signature.
func (s Signature) String() string { return base58.Encode(s[:]) }

// MarshalText encodes the signature as base58.
func (s Signature) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText decodes a base58 signature of exactly 64 bytes.
func (s *Signature) UnmarshalText(b []byte) error {
	raw, err := base58.Decode(string(b))
	if err != nil || len(raw) != len(s) {
		return fmt.Errorf("shard: %q is not a base58 ed25519 signature", truncate(string(b)))
	}
	copy(s[:], raw)
	return nil
}

// truncate keeps error messages about hostile input short.
func truncate(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}
