package onchain

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gagliardetto/solana-go"
)

// ParseKey reads a signing key: a Solana keypair (solana-keygen's JSON
// array of 64 bytes) or a base58 private key. The key's bytes never appear
// in an error.
func ParseKey(raw string) (solana.PrivateKey, error) {
	raw = strings.TrimSpace(raw)
	var k solana.PrivateKey
	if strings.HasPrefix(raw, "[") {
		var b []byte
		var ints []int
		if err := json.Unmarshal([]byte(raw), &ints); err != nil {
			return nil, errors.New("key is not a JSON byte array")
		}
		for _, v := range ints {
			if v < 0 || v > 255 {
				return nil, errors.New("key is not a JSON byte array")
			}
			b = append(b, byte(v))
		}
		k = solana.PrivateKey(b)
	} else {
		var err error
		if k, err = solana.PrivateKeyFromBase58(raw); err != nil {
			return nil, errors.New("key is neither a keypair file nor base58")
		}
	}
	if len(k) != 64 {
		return nil, fmt.Errorf("key has %d bytes, want 64", len(k))
	}
	if err := k.Validate(); err != nil {
		return nil, errors.New("key's public half does not match its private half")
	}
	return k, nil
}
