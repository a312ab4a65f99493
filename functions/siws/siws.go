// Package siws is Sign-In With Solana on the server's side: the
// SolanaSignInInput a challenge issues, the message text a wallet builds
// from it (Phantom's ABNF, the Wallet Standard's solana:signIn), and the
// verification of a signed message — every field against what was issued,
// which the Wallet Standard's own verifier leaves to the server: domain,
// URI, version, chain, times, the nonce, and the message's address equal to
// the signing key. The signature is raw Ed25519 over the message's UTF-8
// bytes.
//
// Nonces carry their own proof of issue (an HMAC under the server's key
// over the nonce's random part, its times and the wallet it was issued
// for), so a challenge needs no store write; their single use is the
// caller's to enforce (store.UseNonce) once Verify accepts a message.
package siws

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mr-tron/base58"
)

// Input is the Wallet Standard's SolanaSignInInput as the server issues it.
type Input struct {
	Domain         string   `json:"domain"`
	Address        string   `json:"address,omitempty"`
	Statement      string   `json:"statement,omitempty"`
	URI            string   `json:"uri"`
	Version        string   `json:"version"`
	ChainID        string   `json:"chainId"`
	Nonce          string   `json:"nonce"`
	IssuedAt       string   `json:"issuedAt"`
	ExpirationTime string   `json:"expirationTime"`
	NotBefore      string   `json:"notBefore,omitempty"`
	RequestID      string   `json:"requestId,omitempty"`
	Resources      []string `json:"resources,omitempty"`
}

// TTL is how long a challenge may be answered.
const TTL = 5 * time.Minute

// Skew is how far a message's issue time may lie ahead of the server's
// clock (a wallet's clock runs a little fast).
const Skew = time.Minute

// Issuer issues and verifies sign-ins for one site.
type Issuer struct {
	// Domain is the site's host[:port], URI its origin or sign-in page,
	// ChainID the chain it names (mainnet, devnet, localnet, or a
	// solana: CAIP-2 form: what wallets show), Statement the line the
	// user reads.
	Domain, URI, ChainID, Statement string
	key                             []byte
}

// NewIssuer makes an Issuer whose nonces are proven under a key derived
// from secret.
func NewIssuer(secret, domain, uri, chainID, statement string) (*Issuer, error) {
	switch {
	case secret == "" || domain == "" || uri == "" || chainID == "":
		return nil, errors.New("siws: secret, domain, uri and chain id are required")
	case strings.ContainsAny(statement, "\n\r"):
		return nil, errors.New("siws: the statement is one line")
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("c0mpute siws nonce key v1"))
	return &Issuer{Domain: domain, URI: uri, ChainID: chainID, Statement: statement, key: mac.Sum(nil)}, nil
}

// WithStatement is an issuer for another purpose on the same site and key:
// its messages carry statement instead, and those of one are refused by the
// other (Verify checks the statement). Nonces are shared, as their single
// use is (the caller's store.UseNonce).
func (iss *Issuer) WithStatement(statement string) (*Issuer, error) {
	if strings.ContainsAny(statement, "\n\r") {
		return nil, errors.New("siws: the statement is one line")
	}
	c := *iss
	c.Statement = statement
	return &c, nil
}

// Challenge issues an input for wallet (base58; "" lets any wallet answer)
// at now.
func (iss *Issuer) Challenge(wallet string, now time.Time) Input {
	now = now.UTC().Truncate(time.Second)
	var r [12]byte
	_, _ = rand.Read(r[:])
	exp := now.Add(TTL)
	return Input{Domain: iss.Domain, Address: wallet, Statement: iss.Statement, URI: iss.URI, Version: "1",
		ChainID: iss.ChainID, Nonce: iss.nonce(r[:], now, wallet), IssuedAt: now.Format(time.RFC3339),
		ExpirationTime: exp.Format(time.RFC3339)}
}

// nonce is hex(random) followed by the hex of the first 16 bytes of the
// HMAC over random, the issue time and the wallet: 56 hex digits, 96 bits
// of them random.
func (iss *Issuer) nonce(random []byte, issued time.Time, wallet string) string {
	mac := hmac.New(sha256.New, iss.key)
	mac.Write(random)
	var t [8]byte
	binary.BigEndian.PutUint64(t[:], uint64(issued.Unix()))
	mac.Write(t[:])
	mac.Write([]byte(wallet))
	return hex.EncodeToString(random) + hex.EncodeToString(mac.Sum(nil)[:16])
}

// Message is the text a wallet signs for in: Phantom's ABNF, every field
// present on its own line, absent ones left out.
func Message(in Input) string {
	var b strings.Builder
	b.WriteString(in.Domain + " wants you to sign in with your Solana account:\n" + in.Address)
	if in.Statement != "" {
		b.WriteString("\n\n" + in.Statement)
	}
	var fields []string
	add := func(name, v string) {
		if v != "" {
			fields = append(fields, name+": "+v)
		}
	}
	add("URI", in.URI)
	add("Version", in.Version)
	add("Chain ID", in.ChainID)
	add("Nonce", in.Nonce)
	add("Issued At", in.IssuedAt)
	add("Expiration Time", in.ExpirationTime)
	add("Not Before", in.NotBefore)
	add("Request ID", in.RequestID)
	if len(in.Resources) > 0 {
		fields = append(fields, "Resources:")
		for _, r := range in.Resources {
			fields = append(fields, "- "+r)
		}
	}
	if len(fields) > 0 {
		b.WriteString("\n\n" + strings.Join(fields, "\n"))
	}
	return b.String()
}

// Parse reads a sign-in message's fields. The text must be exactly what
// Message writes for them: Verify compares the two.
func Parse(msg string) (Input, error) {
	var in Input
	head, rest, _ := strings.Cut(msg, "\n")
	domain, ok := strings.CutSuffix(head, " wants you to sign in with your Solana account:")
	if !ok || domain == "" {
		return in, errors.New("siws: not a sign-in message (its first line)")
	}
	in.Domain = domain
	addr, rest, _ := strings.Cut(rest, "\n")
	in.Address = addr
	if rest == "" {
		return in, nil
	}
	body, ok := strings.CutPrefix(rest, "\n")
	if !ok {
		return in, errors.New("siws: a blank line must follow the address")
	}
	blocks := strings.Split(body, "\n\n")
	if len(blocks) > 2 {
		return in, errors.New("siws: too many blank lines")
	}
	if len(blocks) == 2 || !strings.Contains(blocks[0], ": ") && !strings.HasPrefix(blocks[0], "Resources:") {
		in.Statement, blocks = blocks[0], blocks[1:]
	}
	if len(blocks) == 0 {
		return in, nil
	}
	lines := strings.Split(blocks[0], "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if line == "Resources:" {
			for _, r := range lines[i+1:] {
				v, ok := strings.CutPrefix(r, "- ")
				if !ok {
					return in, fmt.Errorf("siws: resource line %q", r)
				}
				in.Resources = append(in.Resources, v)
			}
			break
		}
		name, v, ok := strings.Cut(line, ": ")
		if !ok {
			return in, fmt.Errorf("siws: line %q is no field", line)
		}
		dst := map[string]*string{"URI": &in.URI, "Version": &in.Version, "Chain ID": &in.ChainID, "Nonce": &in.Nonce,
			"Issued At": &in.IssuedAt, "Expiration Time": &in.ExpirationTime, "Not Before": &in.NotBefore,
			"Request ID": &in.RequestID}[name]
		if dst == nil || *dst != "" {
			return in, fmt.Errorf("siws: unknown or repeated field %q", name)
		}
		*dst = v
	}
	return in, nil
}

// Errors Verify returns, for the API's messages.
var (
	ErrMessage   = errors.New("siws: the message is not the one issued")
	ErrExpired   = errors.New("siws: the sign-in has expired")
	ErrSignature = errors.New("siws: the signature does not verify")
)

// Verify checks a signed sign-in message at now and returns the wallet
// (base58) that signed it and the nonce, for the caller to spend once
// (until the message expires). pubkey is the key the wallet reports
// signing with, which must be the message's address.
func (iss *Issuer) Verify(msg []byte, signature, pubkey []byte, now time.Time) (wallet, nonce string, expires time.Time, err error) {
	text := string(msg)
	in, err := Parse(text)
	if err != nil {
		return "", "", time.Time{}, fmt.Errorf("%w: %w", ErrMessage, err)
	}
	if Message(in) != text {
		return "", "", time.Time{}, fmt.Errorf("%w: it is not in the standard form", ErrMessage)
	}
	if len(pubkey) != ed25519.PublicKeySize {
		return "", "", time.Time{}, fmt.Errorf("%w: the public key is %d bytes, not %d", ErrSignature, len(pubkey), ed25519.PublicKeySize)
	}
	wallet = base58.Encode(pubkey)
	switch {
	case in.Domain != iss.Domain:
		return "", "", time.Time{}, fmt.Errorf("%w: domain %q, not %q", ErrMessage, in.Domain, iss.Domain)
	case in.Address != wallet:
		return "", "", time.Time{}, fmt.Errorf("%w: it names the account %q but was signed by %q", ErrMessage, in.Address, wallet)
	case in.URI != iss.URI:
		return "", "", time.Time{}, fmt.Errorf("%w: URI %q, not %q", ErrMessage, in.URI, iss.URI)
	case in.Version != "1":
		return "", "", time.Time{}, fmt.Errorf("%w: version %q, not 1", ErrMessage, in.Version)
	case in.ChainID != iss.ChainID:
		return "", "", time.Time{}, fmt.Errorf("%w: chain %q, not %q", ErrMessage, in.ChainID, iss.ChainID)
	case in.Statement != iss.Statement:
		return "", "", time.Time{}, fmt.Errorf("%w: the statement was changed", ErrMessage)
	case in.NotBefore != "" || in.RequestID != "" || len(in.Resources) > 0:
		return "", "", time.Time{}, fmt.Errorf("%w: fields that were not issued", ErrMessage)
	}
	issued, err1 := time.Parse(time.RFC3339, in.IssuedAt)
	expiry, err2 := time.Parse(time.RFC3339, in.ExpirationTime)
	switch {
	case err1 != nil || err2 != nil:
		return "", "", time.Time{}, fmt.Errorf("%w: times not in RFC 3339", ErrMessage)
	case !expiry.Equal(issued.Add(TTL)):
		return "", "", time.Time{}, fmt.Errorf("%w: the expiration time was changed", ErrMessage)
	case issued.After(now.Add(Skew)):
		return "", "", time.Time{}, fmt.Errorf("%w: issued in the future", ErrMessage)
	case !now.Before(expiry):
		return "", "", time.Time{}, ErrExpired
	}
	if !iss.issued(in.Nonce, issued, wallet) && !iss.issued(in.Nonce, issued, "") {
		return "", "", time.Time{}, fmt.Errorf("%w: the nonce was not issued here, for this wallet at that time", ErrMessage)
	}
	if !ed25519.Verify(pubkey, msg, signature) {
		return "", "", time.Time{}, ErrSignature
	}
	return wallet, in.Nonce, expiry, nil
}

// issued reports whether nonce is one this issuer made at issued for
// wallet.
func (iss *Issuer) issued(nonce string, issued time.Time, wallet string) bool {
	b, err := hex.DecodeString(nonce)
	if err != nil || len(b) != 12+16 {
		return false
	}
	return hmac.Equal([]byte(iss.nonce(b[:12], issued, wallet)), []byte(nonce))
}
