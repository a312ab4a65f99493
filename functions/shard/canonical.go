package shard

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
)

// The canonical encoding is what is signed and hashed. JSON is only the
// carrier: two encoders may order or space JSON differently, but every
// party derives the same bytes from the decoded values. The rules:
//
//   - a record starts with its domain tag, "c0mpute/shard/<record>/v1",
//     followed by one zero byte, so a signature over one record type can
//     never be read as another (nor as a Solana transaction, which never
//     starts with this text);
//   - integers are fixed-width big-endian (int64 as two's complement,
//     int as int64, uint64 as is);
//   - bool is one byte, 0 or 1;
//   - keys, hashes, blockhashes are their raw 32 bytes;
//   - strings are a uint32 big-endian byte length then the UTF-8 bytes;
//   - lists are a uint32 big-endian element count then each element;
//   - fields follow in the order the record's body method writes them,
//     which README.md lists; sets (capabilities, RTT rows and peers) are
//     sorted by public key first, so input order never matters.
//
// Signatures cover the domain-tagged body; hashes are SHA-256 of the same.

// Domain tags, one per record type.
const (
	domainCapability = "c0mpute/shard/capability/v1"
	domainRTT        = "c0mpute/shard/rtt/v2"
	domainModel      = "c0mpute/shard/model/v1"
	domainParams     = "c0mpute/shard/params/v1"
	domainInputs     = "c0mpute/shard/inputs/v1"
	domainPlan       = "c0mpute/shard/plan/v1"
	domainAccept     = "c0mpute/shard/accept/v1"
	domainManifest   = "c0mpute/shard/manifest/v1"
	domainJob        = "c0mpute/shard/job/v1"
	domainReceipt    = "c0mpute/shard/receipt/v1"
)

// enc appends canonical fields to a buffer.
type enc struct{ b []byte }

func newEnc(domain string) *enc {
	e := &enc{b: make([]byte, 0, 256)}
	e.b = append(e.b, domain...)
	e.b = append(e.b, 0)
	return e
}

func (e *enc) i64(v int64)  { e.b = binary.BigEndian.AppendUint64(e.b, uint64(v)) }
func (e *enc) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *enc) int(v int)    { e.i64(int64(v)) }
func (e *enc) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}
func (e *enc) raw32(v [32]byte) { e.b = append(e.b, v[:]...) }
func (e *enc) str(s string) {
	e.b = binary.BigEndian.AppendUint32(e.b, uint32(len(s)))
	e.b = append(e.b, s...)
}
func (e *enc) count(n int) { e.b = binary.BigEndian.AppendUint32(e.b, uint32(n)) }

func (e *enc) hash() Hash { return sha256.Sum256(e.b) }

// signable is a record whose canonical body can be signed.
type signable interface {
	canonical() []byte
	signer() PublicKey
	signature() Signature
}

// verifySig checks a record's signature against the key it names.
func verifySig(r signable, what string) error {
	pub := r.signer()
	sig := r.signature()
	if !ed25519.Verify(pub[:], r.canonical(), sig[:]) {
		return fmt.Errorf("%w: %s signed by %s", ErrBadSignature, what, pub)
	}
	return nil
}

// signed is one signature to check.
type signed struct {
	what string
	key  PublicKey
	msg  []byte
	sig  Signature
}

// verifyAll checks many signatures on all cores (a 256-node pool carries
// over 500) and reports the first failure in list order, so the error
// does not depend on scheduling.
func verifyAll(items []signed) error {
	workers := min(runtime.GOMAXPROCS(0), max(1, len(items)/32))
	bad := make([]bool, len(items))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(items); i += workers {
				it := &items[i]
				bad[i] = !ed25519.Verify(it.key[:], it.msg, it.sig[:])
			}
		}()
	}
	wg.Wait()
	for i, b := range bad {
		if b {
			return fmt.Errorf("%s: %w: signed by %s", items[i].what, ErrBadSignature, items[i].key)
		}
	}
	return nil
}

func sign(key ed25519.PrivateKey, msg []byte) Signature {
	var s Signature
	copy(s[:], ed25519.Sign(key, msg))
	return s
}
