package relaymsg

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"unicode/utf8"

	"github.com/mr-tron/base58"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
)

// A receipt is a worker's signed account of one job it completed: the job,
// the model, a hash of the request it was handed and of the reply it sent,
// counts and timings — never text. The worker signs it with its identity
// key (the key its connect was signed with) and sends it in the job's
// done. The gateway pays for the job only if the receipt verifies under the
// pubkey of the worker the job was assigned to and its hashes and count
// equal the gateway's own, over the request it sent and the reply it
// relayed; it keeps the receipt, and the job's owner can fetch it and check
// the signature offline.

// ReceiptDomain starts the signed message of every receipt, so that a
// receipt signature can never be taken for a signature of anything else the
// identity key signs (a connect, a Solana transaction).
const ReceiptDomain = "c0mpute-receipt:v1:"

// Bounds of a receipt's numbers. They are far above any honest job (a
// reply asks for at most a million tokens; a job's deadline is minutes)
// and exist so that every field is bounded; a worker clamps into them.
const (
	// MaxReceiptCount bounds the delta and token counts.
	MaxReceiptCount = 1_000_000_000
	// MaxReceiptMillis bounds the timings: a day.
	MaxReceiptMillis = 86_400_000
)

// Receipt is the signed record of one completed job. The field order is
// the order of the signed encoding (see SignReceipt).
type Receipt struct {
	// Job is the job's id (the completion id the client saw).
	Job string `json:"job" validate:"required,max=64"`
	// Worker is the signer's ed25519 identity pubkey, base58 (32 bytes
	// are 32 to 44 characters).
	Worker string `json:"worker" validate:"required,min=32,max=44"`
	// Model is the network model id the job asked for and the worker ran.
	Model string `json:"model" validate:"required,max=128"`
	// ModelDigest is the backend's digest of the model's weights where the
	// backend reports one (Ollama's manifest digest), else empty.
	ModelDigest string `json:"model_digest" validate:"max=128"`
	// RequestSHA256 is RequestHash of the job's request.
	RequestSHA256 string `json:"request_sha256" validate:"len=64,hexadecimal,lowercase"`
	// OutputSHA256 and Deltas are an OutputHasher's Sum and Deltas over
	// the reply as the worker sent it.
	OutputSHA256 string `json:"output_sha256" validate:"len=64,hexadecimal,lowercase"`
	Deltas       int64  `json:"deltas" validate:"min=0,max=1000000000"`
	// PromptTokens and CompletionTokens are the worker's usage claim (the
	// gateway bounds what it counts by what it relayed).
	PromptTokens     int64 `json:"prompt_tokens" validate:"min=0,max=1000000000"`
	CompletionTokens int64 `json:"completion_tokens" validate:"min=0,max=1000000000"`
	// FirstTokenMillis and TotalMillis are measured by the worker's clock
	// from the job's arrival: to its first delta (0 if it sent none) and
	// to its done.
	FirstTokenMillis int64 `json:"first_token_ms" validate:"min=0,max=86400000"`
	TotalMillis      int64 `json:"total_ms" validate:"min=0,max=86400000"`
	// Signature is the ed25519 signature, base58 (64 bytes are 64 to 88
	// characters), of ReceiptDomain followed by the receipt's JSON
	// without this field. It is omitted from JSON only while empty, which
	// is how the signed encoding leaves it out.
	Signature string `json:"signature,omitempty" validate:"required,min=64,max=88"`
}

// ErrBadReceipt means a receipt is malformed or its signature does not
// verify under the pubkey it names.
var ErrBadReceipt = errors.New("relaymsg: bad receipt")

// signedMessage is what a receipt's signature covers: ReceiptDomain, then
// the receipt's JSON without the signature, fields in struct order, no
// whitespace and no HTML escaping — what JSON.stringify of the parsed
// receipt, signature deleted, produces for the ASCII ids and hashes a
// receipt holds, so anyone can rebuild it.
func (r *Receipt) signedMessage() ([]byte, error) {
	body := *r
	body.Signature = ""
	var buf bytes.Buffer
	buf.WriteString(ReceiptDomain)
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&body); err != nil {
		return nil, fmt.Errorf("relaymsg: encode receipt: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// SignReceipt sets r.Worker to key's public key and signs r with key,
// setting r.Signature. Every other field must be filled first.
func SignReceipt(key ed25519.PrivateKey, r *Receipt) error {
	if len(key) != ed25519.PrivateKeySize {
		return fmt.Errorf("relaymsg: sign receipt: a private key is %d bytes, not %d", ed25519.PrivateKeySize, len(key))
	}
	r.Worker = base58.Encode(key.Public().(ed25519.PublicKey))
	r.Signature = ""
	msg, err := r.signedMessage()
	if err != nil {
		return err
	}
	r.Signature = base58.Encode(ed25519.Sign(key, msg))
	return nil
}

// VerifyReceipt checks that r is well formed and that its signature
// verifies under the pubkey it names (r.Worker). It does not say whose key
// that is, nor whether the hashes match anything: the gateway compares
// those with its own records, a user with theirs.
func VerifyReceipt(r *Receipt) error {
	if r == nil {
		return fmt.Errorf("%w: none", ErrBadReceipt)
	}
	if err := validate.Struct(r); err != nil {
		return fmt.Errorf("%w: %w", ErrBadReceipt, err)
	}
	pub, err := base58.Decode(r.Worker)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: worker is not a base58 ed25519 public key", ErrBadReceipt)
	}
	sig, err := base58.Decode(r.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w: signature is not a base58 ed25519 signature", ErrBadReceipt)
	}
	msg, err := r.signedMessage()
	if err != nil {
		return err
	}
	if !ed25519.Verify(pub, msg, sig) {
		return fmt.Errorf("%w: signature does not verify", ErrBadReceipt)
	}
	return nil
}

// RequestHash is a receipt's request_sha256: the hex SHA-256 of
// json.Marshal of the request. The gateway computes it over the request it
// sends, the worker over the request it decoded from the job message; the
// encoding is stable under that round trip (FuzzDecode checks it).
func RequestHash(req *oaiwire.ChatRequest) (string, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("relaymsg: request hash: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// TextBytes is the text a delta carries: its content, reasoning, and its
// tool calls' ids, names and arguments. A delta without any is relayed to
// no client, counts for nothing, and is left out of a receipt's output.
func TextBytes(d oaiwire.Delta) int {
	n := len(d.Content) + len(d.Reasoning)
	for _, tc := range d.ToolCalls {
		n += len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments)
	}
	return n
}

// OutputHasher computes a receipt's output_sha256 and deltas over a reply,
// one delta at a time in order: SHA-256 over each delta's json.Marshal
// encoding followed by "\n". A delta without text (TextBytes 0) is skipped,
// as the gateway relays none, and a delta's role is left out (a reply's role
// is always assistant, and the API sends it in an event of its own), so a
// streaming client can recompute the hash from the deltas it received.
// Strings are taken as a decoded message holds them: invalid UTF-8 counts
// as U+FFFD per byte, as the JSON encoding on the wire makes it, so the
// worker hashing what it sends and the gateway hashing what it decoded
// agree. The zero value is ready to use.
type OutputHasher struct {
	h   hash.Hash
	enc *json.Encoder
	buf []byte // a delta's encoding, reused
	n   int64
	err error
}

// Add adds the next delta of the reply.
func (o *OutputHasher) Add(d oaiwire.Delta) {
	if TextBytes(d) == 0 {
		return
	}
	d.Role = ""
	if o.h == nil {
		o.h = sha256.New()
	}
	d = wireDelta(d)
	if b, ok := oaiwire.AppendDelta(o.buf[:0], d); ok { // Marshal's bytes, built in place
		o.buf = append(b, '\n')
		o.h.Write(o.buf)
		o.buf = oaiwire.KeepBuffer(o.buf)
		o.n++
		return
	}
	if o.enc == nil {
		o.enc = json.NewEncoder(o.h) // Encode is json.Marshal followed by "\n"
	}
	if err := o.enc.Encode(d); err != nil && o.err == nil {
		// A delta holds strings and an int: it always encodes. Should
		// it not, the hash is poisoned rather than silently wrong.
		o.err = err
	}
	o.n++
}

// Deltas is how many deltas were added (those without text not counted).
func (o *OutputHasher) Deltas() int64 { return o.n }

// Sum is the hex SHA-256 of what was added so far ("" if an encoding
// failed).
func (o *OutputHasher) Sum() string {
	if o.err != nil {
		return ""
	}
	if o.h == nil {
		sum := sha256.Sum256(nil)
		return hex.EncodeToString(sum[:])
	}
	return hex.EncodeToString(o.h.Sum(nil))
}

// wireDelta is d as it decodes on the other side of the relay: encoding
// replaces each byte of invalid UTF-8 with U+FFFD. The caller's slices are
// never changed; a valid delta (every decoded one) is returned as it is.
func wireDelta(d oaiwire.Delta) oaiwire.Delta {
	valid := utf8.ValidString(d.Content) && utf8.ValidString(d.Reasoning)
	for _, tc := range d.ToolCalls {
		valid = valid && utf8.ValidString(tc.ID) && utf8.ValidString(tc.Type) &&
			utf8.ValidString(tc.Function.Name) && utf8.ValidString(tc.Function.Arguments)
	}
	if valid {
		return d
	}
	d.Content, d.Reasoning = wireString(d.Content), wireString(d.Reasoning)
	calls := make([]oaiwire.ToolCall, len(d.ToolCalls))
	for i, tc := range d.ToolCalls {
		tc.ID, tc.Type = wireString(tc.ID), wireString(tc.Type)
		tc.Function.Name, tc.Function.Arguments = wireString(tc.Function.Name), wireString(tc.Function.Arguments)
		calls[i] = tc
	}
	if d.ToolCalls != nil {
		d.ToolCalls = calls
	}
	return d
}

// wireString replaces each byte that is not part of valid UTF-8 with
// U+FFFD, as encoding/json does (strings.ToValidUTF8 would replace a run
// with one).
func wireString(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b []byte
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return string(b)
}

// PeekType is the type a message's header names, or "" if b is not a JSON
// object with a string type. It is for a message Decode refused: the relay
// treats a job's last message that cannot be read differently from other
// bad messages.
func PeekType(b []byte) string {
	if len(b) > MaxMessage {
		return ""
	}
	var h Header
	if err := json.Unmarshal(b, &h); err != nil {
		return ""
	}
	return h.Type
}
