package siws

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mr-tron/base58"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func issuer(t *testing.T) *Issuer {
	t.Helper()
	iss, err := NewIssuer("secret", "api.c0mpute.example", "https://api.c0mpute.example", "mainnet", "Sign in to c0mpute.")
	if err != nil {
		t.Fatal(err)
	}
	return iss
}

// The message a wallet builds from an input, byte for byte as the Wallet
// Standard's createSignInMessageText writes it (golden file).
func TestMessageGolden(t *testing.T) {
	in := Input{Domain: "api.c0mpute.example", Address: "7Yb2tWXMdGBLqLmUdL4MjtTNEQ6B8hXyR9YY2G4mFQXW", Statement: "Sign in to c0mpute.",
		URI: "https://api.c0mpute.example", Version: "1", ChainID: "mainnet", Nonce: "0123456789abcdef01234567",
		IssuedAt: "2026-12-01T12:00:00Z", ExpirationTime: "2026-12-01T12:05:00Z", Resources: []string{"https://a.example/x", "ipfs://b"}}
	got := Message(in)
	path := filepath.Join("testdata", "message.golden")
	if os.Getenv("UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("message:\n%s\nwant:\n%s", got, want)
	}
	back, err := Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	if Message(back) != got {
		t.Errorf("parse and rebuild differ:\n%s", Message(back))
	}
	for _, in := range []Input{
		{Domain: "d", Address: "a"},
		{Domain: "d", Address: "a", Statement: "hi"},
		{Domain: "d", Address: "a", URI: "u", Nonce: "n"},
	} {
		back, err := Parse(Message(in))
		if err != nil || Message(back) != Message(in) {
			t.Errorf("%+v: round trip %+v, %v", in, back, err)
		}
	}
}

// sign answers a challenge as a wallet does: fill in its address, sign the
// message text.
func sign(t *testing.T, in Input, key ed25519.PrivateKey, edit func(*Input)) ([]byte, []byte) {
	t.Helper()
	in.Address = base58.Encode(key.Public().(ed25519.PublicKey))
	if edit != nil {
		edit(&in)
	}
	msg := []byte(Message(in))
	return msg, ed25519.Sign(key, msg)
}

func TestVerify(t *testing.T) {
	iss := issuer(t)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	pub := key.Public().(ed25519.PublicKey)
	wallet := base58.Encode(pub)
	open := iss.Challenge("", t0)
	bound := iss.Challenge(wallet, t0)
	if len(open.Nonce) < 16 || strings.Trim(open.Nonce, "0123456789abcdef") != "" {
		t.Fatalf("nonce %q: want hex, at least 16 characters", open.Nonce)
	}
	for _, tc := range []struct {
		name    string
		in      Input
		edit    func(*Input)
		signer  ed25519.PrivateKey
		pubkey  []byte
		msg     func([]byte) []byte
		at      time.Time
		wantErr error
		why     string
	}{
		{name: "any wallet", in: open, at: t0.Add(time.Minute)},
		{name: "the wallet it was issued for", in: bound, at: t0.Add(time.Minute)},
		{name: "a wallet clock a little fast", in: open, at: t0.Add(-30 * time.Second)},
		{name: "another wallet than issued for", in: bound, signer: other, wantErr: ErrMessage, why: "nonce"},
		{name: "expired", in: open, at: t0.Add(TTL), wantErr: ErrExpired},
		{name: "issued in the future", in: open, at: t0.Add(-2 * time.Minute), wantErr: ErrMessage, why: "future"},
		{name: "expiry pushed back", in: open, edit: func(i *Input) { i.ExpirationTime = t0.Add(time.Hour).Format(time.RFC3339) }, wantErr: ErrMessage, why: "expiration"},
		{name: "issue time moved", in: open, edit: func(i *Input) { i.IssuedAt = t0.Add(time.Minute).Format(time.RFC3339) }, wantErr: ErrMessage},
		{name: "another domain", in: open, edit: func(i *Input) { i.Domain = "evil.example" }, wantErr: ErrMessage, why: "domain"},
		{name: "another URI", in: open, edit: func(i *Input) { i.URI = "https://evil.example" }, wantErr: ErrMessage, why: "URI"},
		{name: "another chain", in: open, edit: func(i *Input) { i.ChainID = "devnet" }, wantErr: ErrMessage, why: "chain"},
		{name: "another statement", in: open, edit: func(i *Input) { i.Statement = "Send all my tokens." }, wantErr: ErrMessage, why: "statement"},
		{name: "a forged nonce", in: open, edit: func(i *Input) { i.Nonce = strings.Repeat("ab", 28) }, wantErr: ErrMessage, why: "nonce"},
		{name: "extra fields", in: open, edit: func(i *Input) { i.Resources = []string{"https://x"} }, wantErr: ErrMessage, why: "not issued"},
		{name: "the address of another key", in: open, edit: func(i *Input) { i.Address = base58.Encode(other.Public().(ed25519.PublicKey)) }, wantErr: ErrMessage, why: "names the account"},
		{name: "signed by another key", in: open, pubkey: pub, signer: other, wantErr: ErrMessage, why: "names the account"},
		{name: "a bad signature", in: open, msg: func(m []byte) []byte { return m }, pubkey: pub, signer: key, wantErr: ErrSignature},
		{name: "not the standard form", in: open, msg: func(m []byte) []byte { return append(m, '\n') }, wantErr: ErrMessage},
		{name: "a field out of order", in: open, msg: func(m []byte) []byte {
			return []byte(strings.Replace(string(m), "Version: 1\nChain ID: mainnet", "Chain ID: mainnet\nVersion: 1", 1))
		}, wantErr: ErrMessage, why: "standard form"},
		{name: "not a sign-in message", in: open, msg: func([]byte) []byte { return []byte("hello") }, wantErr: ErrMessage},
		{name: "a short key", in: open, pubkey: pub[:31], wantErr: ErrSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			signer := key
			if tc.signer != nil {
				signer = tc.signer
			}
			msg, sig := sign(t, tc.in, signer, tc.edit)
			pk := []byte(signer.Public().(ed25519.PublicKey))
			if tc.pubkey != nil {
				pk = tc.pubkey
			}
			if tc.name == "a bad signature" {
				sig[0] ^= 1
			}
			if tc.msg != nil {
				msg = tc.msg(msg)
			}
			at := tc.at
			if at.IsZero() {
				at = t0.Add(time.Minute)
			}
			got, nonce, expires, err := iss.Verify(msg, sig, pk, at)
			if tc.wantErr == nil {
				if err != nil || got != base58.Encode(pk) || nonce != tc.in.Nonce || !expires.Equal(t0.Add(TTL)) {
					t.Fatalf("Verify = %q, %q, %v, %v", got, nonce, expires, err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("Verify: %v; want %v mentioning %q", err, tc.wantErr, tc.why)
			}
		})
	}
	// Another issuer's nonces are not this one's.
	iss2, _ := NewIssuer("other secret", iss.Domain, iss.URI, iss.ChainID, iss.Statement)
	msg, sig := sign(t, iss2.Challenge("", t0), key, nil)
	if _, _, _, err := iss.Verify(msg, sig, pub, t0.Add(time.Minute)); !errors.Is(err, ErrMessage) {
		t.Errorf("another issuer's challenge: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Message(Input{Domain: "d", Address: "a", Statement: "s", URI: "u", Version: "1", Nonce: "n", Resources: []string{"r"}}))
	f.Add("d wants you to sign in with your Solana account:\na\n\nURI: u")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		in, err := Parse(s)
		if err != nil {
			return
		}
		// What parses and is in the standard form reads back the same.
		if m := Message(in); m == s {
			back, err := Parse(m)
			if err != nil || Message(back) != m {
				t.Fatalf("%q: parsed %+v, back %+v, %v", s, in, back, err)
			}
		}
	})
}
