// Package identity is a worker's ed25519 keypair: its identity on the relay,
// the key its connects and receipts are signed with and its reputation is
// kept under. It is not where earnings go: those are paid to the account's
// payout wallet, which this key becomes only if the owner proves it like
// any wallet (c0mpute-wallet payout-wallet). The file format is Solana's
// keypair file (a JSON array of the 64 secret-key bytes), so
// `solana-keygen` and wallets read it as they are.
package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/mr-tron/base58"
)

// ErrExists means a key file is already there; init never overwrites one,
// since the worker's reputation is kept under it.
var ErrExists = errors.New("identity: key file already exists")

// Create makes a new keypair at path (mode 0600) and returns it.
func Create(path string) (ed25519.PrivateKey, error) {
	if _, err := os.Stat(path); err == nil {
		return nil, fmt.Errorf("%w: %s", ErrExists, path)
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("identity: generate: %w", err)
	}
	ints := make([]int, len(key))
	for i, b := range key {
		ints[i] = int(b)
	}
	b, err := json.Marshal(ints)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	// O_EXCL: two inits racing cannot both write.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%w: %s", ErrExists, path)
		}
		return nil, fmt.Errorf("identity: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, fmt.Errorf("identity: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("identity: write %s: %w", path, err)
	}
	return key, nil
}

// Load reads a keypair file and checks that its public half matches its
// secret half.
func Load(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("identity: %w (run `workerd init` to create one)", err)
	}
	var ints []int
	if err := json.Unmarshal(b, &ints); err != nil || len(ints) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("identity: %s is not a Solana keypair file (a JSON array of 64 bytes)", path)
	}
	key := make(ed25519.PrivateKey, ed25519.PrivateKeySize)
	for i, v := range ints {
		if v < 0 || v > 255 {
			return nil, fmt.Errorf("identity: %s: byte %d out of range", path, i)
		}
		key[i] = byte(v)
	}
	if !key.Public().(ed25519.PublicKey).Equal(ed25519.NewKeyFromSeed(key.Seed()).Public()) {
		return nil, fmt.Errorf("identity: %s: public key does not match the secret key", path)
	}
	return key, nil
}

// Address is the base58 public key: the Solana wallet address.
func Address(key ed25519.PrivateKey) string {
	return base58.Encode(key.Public().(ed25519.PublicKey))
}
