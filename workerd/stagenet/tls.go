package stagenet

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"time"

	"github.com/c0mpute/c0mpute/functions/shard"
)

// ALPN is the TLS application protocol both ends of a stage connection
// require.
const ALPN = "c0mpute-stage/1"

// Certificate validity is not checked (the key is the identity), so the
// dates are fixed: the same key always makes the same certificate, and no
// clock is read.
var (
	certNotBefore = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	certNotAfter  = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// certificate makes the self-signed certificate a member presents: its
// ed25519 identity key, signed by itself, named by its base58 address.
func certificate(key ed25519.PrivateKey) (tls.Certificate, error) {
	if len(key) != ed25519.PrivateKeySize {
		return tls.Certificate{}, fmt.Errorf("stagenet: identity key of %d bytes, want a %d-byte ed25519 private key", len(key), ed25519.PrivateKeySize)
	}
	pub := shard.KeyOf(key)
	// A serial derived from the key: unique per member without a random
	// source, and positive as RFC 5280 asks.
	sum := sha256.Sum256(pub[:])
	serial := new(big.Int).SetBytes(sum[:16])
	serial.SetBit(serial, 127, 0)
	serial.SetBit(serial, 126, 1)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: pub.String()},
		NotBefore:    certNotBefore,
		NotAfter:     certNotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	// Ed25519 signing is deterministic; rand is what the API asks for.
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("stagenet: make certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// verifyPeer checks what a peer proved in the handshake and returns its
// key: TLS 1.3, our ALPN, and exactly one certificate, Ed25519, signed by
// its own key. TLS has already checked that the peer holds that key.
func verifyPeer(cs tls.ConnectionState) (shard.PublicKey, error) {
	var key shard.PublicKey
	if cs.Version != tls.VersionTLS13 {
		return key, fmt.Errorf("TLS version 0x%04x, want TLS 1.3", cs.Version)
	}
	if cs.NegotiatedProtocol != ALPN {
		return key, fmt.Errorf("peer did not negotiate ALPN %q (not a c0mpute stage?)", ALPN)
	}
	if n := len(cs.PeerCertificates); n != 1 {
		return key, fmt.Errorf("peer presented %d certificates, want exactly 1 self-signed ed25519 certificate", n)
	}
	cert := cs.PeerCertificates[0]
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok || cert.PublicKeyAlgorithm != x509.Ed25519 || len(pub) != len(key) {
		return key, fmt.Errorf("peer certificate holds a %s key, want Ed25519", cert.PublicKeyAlgorithm)
	}
	copy(key[:], pub)
	if cert.SignatureAlgorithm != x509.PureEd25519 {
		return key, fmt.Errorf("peer %s: certificate signed with %s, want Ed25519", key, cert.SignatureAlgorithm)
	}
	if err := cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature); err != nil {
		return key, fmt.Errorf("peer %s: certificate is not self-signed by its key: %w", key, err)
	}
	return key, nil
}

// clientConfig is Dial's TLS configuration: the server must prove it
// holds want.
func clientConfig(cert tls.Certificate, addr string, want shard.PublicKey) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{ALPN},
		// No CA and no host name: VerifyConnection checks the key.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			got, err := verifyPeer(cs)
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%s answered as %s, want %s (wrong address, or another member impersonating it)", addr, got, want)
			}
			return nil
		},
	}
}

// serverConfig is the Listener's TLS configuration for one connection: the
// client must present a key allow accepts, which is stored in *peer.
func serverConfig(cert tls.Certificate, addr string, allow func(shard.PublicKey) bool, peer *shard.PublicKey) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{ALPN},
		ClientAuth:   tls.RequireAnyClientCert,
		// Every connection proves its keys afresh.
		SessionTicketsDisabled: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			got, err := verifyPeer(cs)
			if err != nil {
				return err
			}
			if !allow(got) {
				return fmt.Errorf("peer %s at %s: key not allowed on this stage", got, addr)
			}
			*peer = got
			return nil
		},
	}
}
