package identity_test

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mr-tron/base58"

	"github.com/c0mpute/c0mpute/workerd/identity"
)

func TestCreateLoadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nested", "worker-key.json") // the folder is created
	key, err := identity.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := identity.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !key.Equal(loaded) {
		t.Fatal("loaded key differs from the created one")
	}
	// It signs, and its public half verifies.
	sig := ed25519.Sign(loaded, []byte("m"))
	if !ed25519.Verify(key.Public().(ed25519.PublicKey), []byte("m"), sig) {
		t.Error("signature does not verify")
	}
	// Solana's format: a JSON array of the 64 secret-key bytes.
	b, _ := os.ReadFile(path)
	var ints []int
	if err := json.Unmarshal(b, &ints); err != nil || len(ints) != 64 {
		t.Errorf("file is not a 64-number JSON array: %s", b)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Errorf("key file mode %o, want 600", mode)
	}
}

func TestAddress(t *testing.T) {
	key := ed25519.NewKeyFromSeed(make([]byte, 32))
	addr := identity.Address(key)
	raw, err := base58.Decode(addr)
	if err != nil || len(raw) != 32 || !ed25519.PublicKey(raw).Equal(key.Public()) {
		t.Errorf("Address %q is not the base58 32-byte public key (%v)", addr, err)
	}
	// The all-zero seed's public key, a fixed vector.
	if want := "4zvwRjXUKGfvwnParsHAS3HuSVzV5cA4McphgmoCtajS"; addr != want {
		t.Errorf("Address = %q, want %q", addr, want)
	}
}

func TestCreateRefusesToOverwrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.json")
	key, err := identity.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	if _, err := identity.Create(path); !errors.Is(err, identity.ErrExists) {
		t.Fatalf("second Create: %v, want ErrExists", err)
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) {
		t.Fatal("the key file changed")
	}
	if loaded, err := identity.Load(path); err != nil || !loaded.Equal(key) {
		t.Fatalf("Load after refused Create: %v", err)
	}
	// Any file there counts, even one that is not a key.
	other := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(other, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := identity.Create(other); !errors.Is(err, identity.ErrExists) {
		t.Errorf("Create over a file: %v, want ErrExists", err)
	}
}

func TestLoadRejects(t *testing.T) {
	good := ed25519.NewKeyFromSeed([]byte("0123456789abcdef0123456789abcdef"))
	ints := func(mut func([]int) []int) string {
		v := make([]int, len(good))
		for i, b := range good {
			v[i] = int(b)
		}
		b, _ := json.Marshal(mut(v))
		return string(b)
	}
	cases := []struct {
		name, body, want string
	}{
		{"not JSON", "hello", "not a Solana keypair"},
		{"a JSON object", `{"key":[1,2,3]}`, "not a Solana keypair"},
		{"empty array", `[]`, "not a Solana keypair"},
		{"32 bytes", ints(func(v []int) []int { return v[:32] }), "not a Solana keypair"},
		{"65 bytes", ints(func(v []int) []int { return append(v, 0) }), "not a Solana keypair"},
		{"byte over 255", ints(func(v []int) []int { v[3] = 256; return v }), "byte 3 out of range"},
		{"negative byte", ints(func(v []int) []int { v[40] = -1; return v }), "byte 40 out of range"},
		{"fractional byte", strings.Replace(ints(func(v []int) []int { return v }), "[", "[1.5,", 1), "not a Solana keypair"},
		{"mismatched public half", ints(func(v []int) []int { v[63] ^= 1; return v }), "does not match"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "k.json")
			if err := os.WriteFile(path, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			key, err := identity.Load(path)
			if err == nil {
				t.Fatalf("loaded %x", key)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
	// The untouched key loads.
	path := filepath.Join(t.TempDir(), "k.json")
	if err := os.WriteFile(path, []byte(ints(func(v []int) []int { return v })), 0o600); err != nil {
		t.Fatal(err)
	}
	if key, err := identity.Load(path); err != nil || !key.Equal(good) {
		t.Errorf("good key: %v", err)
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := identity.Load(filepath.Join(t.TempDir(), "none.json"))
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "workerd init") {
		t.Errorf("error %v: want not-exist with a hint to run workerd init", err)
	}
}
