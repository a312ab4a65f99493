// Package x402 is the seller's and facilitator's side of x402 payments
// (x402 v2, with v1's header accepted) in the "exact" scheme on Solana: the
// payment requirements a 402 answer carries, the decoding of the
// PAYMENT-SIGNATURE (v2) or X-PAYMENT (v1) header a client retries with,
// and every check the scheme asks of a facilitator before it co-signs the
// client's partly signed transfer as fee payer.
//
// c0mpute uses it for one route only, the prepaid top-up: a payment never
// rides on a streaming request.
//
// The checks (x402 specs/schemes/exact/scheme_exact_svm.md): 3 to 6
// instructions, in order SetComputeUnitLimit, SetComputeUnitPrice (at most
// MaxMicroLamportsPerCU), TransferChecked of exactly the amount of the
// asset to the payee's associated token account, then only Memo or
// Lighthouse instructions, a memo present; the fee payer is ours, signs
// nothing else and appears in no instruction; every other signature
// verifies. Stricter than the scheme, because the fee payer's SOL is ours:
// no address lookup tables, at most MaxSigners signers, a compute limit of
// at most MaxComputeUnits, and the message must re-encode to the bytes it
// was decoded from, so that what is checked is what is signed.
package x402

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	bin "github.com/gagliardetto/binary"
	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/onchain"
)

// Header names, v2 then v1.
const (
	HeaderRequired   = "PAYMENT-REQUIRED"
	HeaderSignature  = "PAYMENT-SIGNATURE"
	HeaderResponse   = "PAYMENT-RESPONSE"
	HeaderV1Payment  = "X-PAYMENT"
	HeaderV1Response = "X-PAYMENT-RESPONSE"
)

// Solana networks as CAIP-2 ids (v2) and their v1 names.
var networks = map[string]string{
	"mainnet": "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp",
	"devnet":  "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1",
	"testnet": "solana:4uhcVJyU9pJkvQyS88uRDiswHXSCkY3z",
}

var v1Names = map[string]string{
	"solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp": "solana",
	"solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1": "solana-devnet",
	"solana:4uhcVJyU9pJkvQyS88uRDiswHXSCkY3z": "solana-testnet",
}

// Network is the CAIP-2 id of a cluster: mainnet, devnet or testnet (or
// the id itself).
func Network(cluster string) (string, error) {
	if id, ok := networks[cluster]; ok {
		return id, nil
	}
	if _, ok := v1Names[cluster]; ok {
		return cluster, nil
	}
	return "", fmt.Errorf("x402: unknown Solana cluster %q: want mainnet, devnet or testnet", cluster)
}

// Limits of what a fee payer co-signs. Its cost is 5,000 lamports per
// signature plus the priority fee, charged on the compute limit asked for
// (not used): these caps hold a top-up's fee to MaxFeeLamports.
const (
	// MaxMicroLamportsPerCU caps the priority price: 0.1 lamport per
	// compute unit (the scheme allows 5; the official client asks 1
	// micro-lamport).
	MaxMicroLamportsPerCU = 100_000
	// MaxComputeUnits caps the compute limit: a TransferChecked and a memo
	// take under 30,000, a wallet's Lighthouse assertions a few thousand
	// more; the official client asks 20,000.
	MaxComputeUnits = 60_000
	// MaxFeeLamports is the most a co-signed transaction costs its fee
	// payer.
	MaxFeeLamports = MaxSigners*5_000 + MaxComputeUnits*MaxMicroLamportsPerCU/1_000_000
	// MaxSigners is the fee payer, the transfer's authority and one more
	// (a wallet that co-signs).
	MaxSigners = 3
	// MaxMemo is the scheme's memo bound, in bytes.
	MaxMemo = 256
	// maxWire is the largest transaction a cluster takes (a packet).
	maxWire = 1232
	// MaxHeader bounds a payment header: a transaction is at most 1,232
	// bytes, its base64 inside base64 JSON well under this.
	MaxHeader = 8 << 10
)

// Programs the scheme names besides onchain's.
var (
	LighthouseProgram = solana.MustPublicKeyFromBase58("L2TExMFKdjpN9kozasaurPirfHy9P8sbXoAN1qA3S95")
	memoV1Program     = solana.MustPublicKeyFromBase58("Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo")
)

// Resource is what a payment is for.
type Resource struct {
	URL         string `json:"url"`
	Description string `json:"description,omitempty"`
	MimeType    string `json:"mimeType,omitempty"`
}

// Requirements is one way to pay (v2 PaymentRequirements).
type Requirements struct {
	Scheme  string `json:"scheme"`
	Network string `json:"network"`
	// Amount is in the asset's base units, as a decimal string.
	Amount            string `json:"amount"`
	Asset             string `json:"asset"`
	PayTo             string `json:"payTo"`
	MaxTimeoutSeconds int    `json:"maxTimeoutSeconds"`
	Extra             Extra  `json:"extra"`
}

// Extra is the exact scheme's Solana part: the facilitator's fee payer.
type Extra struct {
	FeePayer string `json:"feePayer"`
	Memo     string `json:"memo,omitempty"`
}

// Required is a 402 answer (v2 PaymentRequired), sent base64-encoded in
// PAYMENT-REQUIRED.
type Required struct {
	X402Version int            `json:"x402Version"`
	Error       string         `json:"error,omitempty"`
	Resource    Resource       `json:"resource"`
	Accepts     []Requirements `json:"accepts"`
	Extensions  map[string]any `json:"extensions,omitempty"`
}

// requirementsV1 is v1's PaymentRequirements: the resource inside, the
// amount as maxAmountRequired, the network by name.
type requirementsV1 struct {
	Scheme            string `json:"scheme"`
	Network           string `json:"network"`
	MaxAmountRequired string `json:"maxAmountRequired"`
	Resource          string `json:"resource"`
	Description       string `json:"description"`
	MimeType          string `json:"mimeType"`
	PayTo             string `json:"payTo"`
	MaxTimeoutSeconds int    `json:"maxTimeoutSeconds"`
	Asset             string `json:"asset"`
	Extra             Extra  `json:"extra"`
}

// RequiredV1 is the same offer as v1's 402 body, for clients that read it.
func (r Required) RequiredV1() map[string]any {
	accepts := make([]requirementsV1, 0, len(r.Accepts))
	for _, a := range r.Accepts {
		accepts = append(accepts, requirementsV1{Scheme: a.Scheme, Network: v1Names[a.Network], MaxAmountRequired: a.Amount,
			Resource: r.Resource.URL, Description: r.Resource.Description, MimeType: r.Resource.MimeType, PayTo: a.PayTo,
			MaxTimeoutSeconds: a.MaxTimeoutSeconds, Asset: a.Asset, Extra: a.Extra})
	}
	return map[string]any{"x402Version": 1, "error": r.Error, "accepts": accepts}
}

// Settlement is what a settled (or refused) payment answers (v2
// SettlementResponse), base64-encoded in PAYMENT-RESPONSE.
type Settlement struct {
	Success     bool   `json:"success"`
	ErrorReason string `json:"errorReason,omitempty"`
	Payer       string `json:"payer,omitempty"`
	Transaction string `json:"transaction"`
	Network     string `json:"network"`
	Amount      string `json:"amount,omitempty"`
}

// Encode is v's JSON in standard base64, as every x402 header carries it.
func Encode(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic("x402: encode: " + err.Error()) // only our own types come here
	}
	return base64.StdEncoding.EncodeToString(b)
}

// Payment is a decoded payment header: the version, the requirements the
// client says it accepted (v2; v1 names only the scheme and network) and
// the partly signed transaction.
type Payment struct {
	Version int
	// Accepted is what the client chose from our offer (v2 only): it is
	// a claim, checked against what we offer, never trusted.
	Accepted *Requirements
	Scheme   string
	Network  string
	// Transaction is the wire transaction, base64-decoded.
	Transaction []byte
}

// paymentJSON covers both versions' PaymentPayload.
type paymentJSON struct {
	X402Version int           `json:"x402Version"`
	Accepted    *Requirements `json:"accepted"`
	Scheme      string        `json:"scheme"`
	Network     string        `json:"network"`
	Payload     struct {
		Transaction string `json:"transaction"`
	} `json:"payload"`
}

// Decode reads a PAYMENT-SIGNATURE or X-PAYMENT header: base64 of JSON
// whose payload.transaction is base64 of a wire transaction. It bounds
// every size and reads nothing it does not need.
func Decode(header string) (Payment, error) {
	if len(header) > MaxHeader {
		return Payment{}, fmt.Errorf("x402: payment header of %d bytes, over %d", len(header), MaxHeader)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(header))
	if err != nil {
		return Payment{}, errors.New("x402: the payment header is not base64")
	}
	var p paymentJSON
	if err := json.Unmarshal(raw, &p); err != nil {
		return Payment{}, fmt.Errorf("x402: the payment header is not a payment payload: %w", err)
	}
	out := Payment{Version: p.X402Version, Accepted: p.Accepted, Scheme: p.Scheme, Network: p.Network}
	switch p.X402Version {
	case 2:
		if p.Accepted == nil {
			return Payment{}, errors.New("x402: a v2 payment names the requirements it accepted (accepted)")
		}
		out.Scheme, out.Network = p.Accepted.Scheme, p.Accepted.Network
	case 1:
		if id, ok := networks[strings.TrimPrefix(p.Network, "solana-")]; ok {
			out.Network = id
		} else if p.Network == "solana" {
			out.Network = networks["mainnet"]
		}
	default:
		return Payment{}, fmt.Errorf("x402: version %d; this server speaks 2 (and 1)", p.X402Version)
	}
	if p.Payload.Transaction == "" {
		return Payment{}, errors.New("x402: the payment carries no transaction (payload.transaction)")
	}
	if out.Transaction, err = base64.StdEncoding.DecodeString(p.Payload.Transaction); err != nil {
		return Payment{}, errors.New("x402: payload.transaction is not base64")
	}
	return out, nil
}

// Offer is what the seller asks: the requirements Check holds a payment
// to.
type Offer struct {
	Network string
	// Amount is in Asset's base units.
	Amount   uint64
	Asset    solana.PublicKey
	PayTo    solana.PublicKey
	FeePayer solana.PublicKey
}

// Requirements is the offer as a 402 answer lists it.
func (o Offer) Requirements(timeoutSeconds int) Requirements {
	return Requirements{Scheme: "exact", Network: o.Network, Amount: strconv.FormatUint(o.Amount, 10),
		Asset: o.Asset.String(), PayTo: o.PayTo.String(), MaxTimeoutSeconds: timeoutSeconds,
		Extra: Extra{FeePayer: o.FeePayer.String()}}
}

// Errors Check refuses a payment with; each says what was wrong with it.
var (
	ErrOffer       = errors.New("x402: the payment is for another offer")
	ErrTransaction = errors.New("x402: the transaction is not one this facilitator signs")
	ErrSignature   = errors.New("x402: a signature does not verify")
)

// Transfer is a payment that passed every check: who pays, how much, and
// the transaction with room left for the fee payer's signature.
type Transfer struct {
	// Payer is the transfer's authority: the wallet that pays.
	Payer  solana.PublicKey
	Amount uint64
	// Message is the signed message's bytes; Signatures the transaction's
	// (index 0 the fee payer's, empty until Sign).
	Message    []byte
	Signatures []solana.Signature
}

// Check decodes p's transaction and makes every check of the exact scheme
// on Solana against the offer, and the stricter ones of this package.
func Check(p Payment, o Offer) (Transfer, error) {
	if p.Scheme != "exact" {
		return Transfer{}, fmt.Errorf("%w: scheme %q, want exact", ErrOffer, p.Scheme)
	}
	if p.Network != o.Network {
		return Transfer{}, fmt.Errorf("%w: network %q, want %s", ErrOffer, p.Network, o.Network)
	}
	if a := p.Accepted; a != nil {
		if a.Amount != strconv.FormatUint(o.Amount, 10) || a.Asset != o.Asset.String() || a.PayTo != o.PayTo.String() ||
			a.Extra.FeePayer != o.FeePayer.String() {
			return Transfer{}, fmt.Errorf("%w: it accepted %s of %s to %s with fee payer %s", ErrOffer, a.Amount, a.Asset, a.PayTo, a.Extra.FeePayer)
		}
	}
	sigs, msgBytes, err := splitWire(p.Transaction)
	if err != nil {
		return Transfer{}, err
	}
	var msg solana.Message
	if err := msg.UnmarshalWithDecoder(bin.NewBinDecoder(msgBytes)); err != nil {
		return Transfer{}, fmt.Errorf("%w: the message does not decode: %v", ErrTransaction, err)
	}
	if again, err := msg.MarshalBinary(); err != nil || !bytes.Equal(again, msgBytes) {
		return Transfer{}, fmt.Errorf("%w: the message is not in its canonical encoding", ErrTransaction)
	}
	if len(msg.AddressTableLookups) > 0 {
		return Transfer{}, fmt.Errorf("%w: it loads addresses from a lookup table", ErrTransaction)
	}
	keys := msg.AccountKeys
	nsig := int(msg.Header.NumRequiredSignatures)
	switch {
	case nsig < 2 || nsig > MaxSigners:
		return Transfer{}, fmt.Errorf("%w: %d signers, want the fee payer and the payer (at most %d)", ErrTransaction, nsig, MaxSigners)
	case len(sigs) != nsig:
		return Transfer{}, fmt.Errorf("%w: %d signatures for %d signers", ErrTransaction, len(sigs), nsig)
	case nsig > len(keys):
		return Transfer{}, fmt.Errorf("%w: more signers than accounts", ErrTransaction)
	case keys[0] != o.FeePayer:
		return Transfer{}, fmt.Errorf("%w: the fee payer is %s, want %s", ErrTransaction, keys[0], o.FeePayer)
	}
	for i := 1; i < nsig; i++ {
		if !sigs[i].Verify(keys[i], msgBytes) {
			return Transfer{}, fmt.Errorf("%w: %s's", ErrSignature, keys[i])
		}
	}
	ixs := msg.Instructions
	if len(ixs) < 3 || len(ixs) > 6 {
		return Transfer{}, fmt.Errorf("%w: %d instructions, want 3 to 6", ErrTransaction, len(ixs))
	}
	program := func(ix solana.CompiledInstruction) solana.PublicKey { return keys[ix.ProgramIDIndex] }
	for i, ix := range ixs {
		if int(ix.ProgramIDIndex) >= len(keys) {
			return Transfer{}, fmt.Errorf("%w: instruction %d's program index is out of range", ErrTransaction, i)
		}
		for _, a := range ix.Accounts {
			if int(a) >= len(keys) {
				return Transfer{}, fmt.Errorf("%w: instruction %d's account index is out of range", ErrTransaction, i)
			}
			if keys[a] == o.FeePayer {
				return Transfer{}, fmt.Errorf("%w: instruction %d names the fee payer", ErrTransaction, i)
			}
		}
	}
	if err := checkComputeLimit(program(ixs[0]), ixs[0].Data); err != nil {
		return Transfer{}, err
	}
	if err := checkComputePrice(program(ixs[1]), ixs[1].Data); err != nil {
		return Transfer{}, err
	}
	t := ixs[2]
	if program(t) != onchain.TokenProgram {
		return Transfer{}, fmt.Errorf("%w: the third instruction is not an SPL Token transfer", ErrTransaction)
	}
	d := t.Data
	// TransferChecked: 12, amount u64, decimals u8; accounts source, mint,
	// destination, authority (then multisig signers, which we refuse).
	if len(d) != 10 || d[0] != 12 || len(t.Accounts) != 4 {
		return Transfer{}, fmt.Errorf("%w: the third instruction is not a TransferChecked", ErrTransaction)
	}
	mint, dest, authority := keys[t.Accounts[1]], keys[t.Accounts[2]], keys[t.Accounts[3]]
	amount := binary.LittleEndian.Uint64(d[1:9])
	switch {
	case mint != o.Asset:
		return Transfer{}, fmt.Errorf("%w: it transfers %s, want %s", ErrTransaction, mint, o.Asset)
	case dest != onchain.ATA(o.PayTo, o.Asset, onchain.TokenProgram):
		return Transfer{}, fmt.Errorf("%w: it pays %s, not %s's token account", ErrTransaction, dest, o.PayTo)
	case amount != o.Amount:
		return Transfer{}, fmt.Errorf("%w: it pays %d base units, want exactly %d", ErrTransaction, amount, o.Amount)
	case !signer(authority, keys, nsig):
		return Transfer{}, fmt.Errorf("%w: the transfer's authority does not sign", ErrTransaction)
	}
	memos := 0
	for i, ix := range ixs[3:] {
		switch program(ix) {
		case onchain.MemoProgram, memoV1Program:
			if len(ix.Data) > MaxMemo {
				return Transfer{}, fmt.Errorf("%w: a memo of %d bytes, over %d", ErrTransaction, len(ix.Data), MaxMemo)
			}
			memos++
		case LighthouseProgram:
		default:
			return Transfer{}, fmt.Errorf("%w: instruction %d calls %s; only Memo and Lighthouse may follow the transfer", ErrTransaction, i+3, program(ix))
		}
	}
	if memos == 0 {
		return Transfer{}, fmt.Errorf("%w: the scheme asks for a memo (a nonce) after the transfer", ErrTransaction)
	}
	return Transfer{Payer: authority, Amount: amount, Message: msgBytes, Signatures: sigs}, nil
}

func signer(k solana.PublicKey, keys []solana.PublicKey, nsig int) bool {
	for i := 0; i < nsig; i++ {
		if keys[i] == k {
			return true
		}
	}
	return false
}

func checkComputeLimit(program solana.PublicKey, d []byte) error {
	if program != onchain.ComputeBudgetID || len(d) != 5 || d[0] != 2 {
		return fmt.Errorf("%w: the first instruction is not SetComputeUnitLimit", ErrTransaction)
	}
	if units := binary.LittleEndian.Uint32(d[1:]); units > MaxComputeUnits {
		return fmt.Errorf("%w: a compute limit of %d units, over %d", ErrTransaction, units, MaxComputeUnits)
	}
	return nil
}

func checkComputePrice(program solana.PublicKey, d []byte) error {
	if program != onchain.ComputeBudgetID || len(d) != 9 || d[0] != 3 {
		return fmt.Errorf("%w: the second instruction is not SetComputeUnitPrice", ErrTransaction)
	}
	if price := binary.LittleEndian.Uint64(d[1:]); price > MaxMicroLamportsPerCU {
		return fmt.Errorf("%w: a priority price of %d micro-lamports per unit, over %d", ErrTransaction, price, MaxMicroLamportsPerCU)
	}
	return nil
}

// splitWire cuts a wire transaction into its signatures and its message.
func splitWire(wire []byte) ([]solana.Signature, []byte, error) {
	if len(wire) > maxWire {
		return nil, nil, fmt.Errorf("%w: %d bytes, over a packet (%d)", ErrTransaction, len(wire), maxWire)
	}
	dec := bin.NewBinDecoder(wire)
	n, err := dec.ReadCompactU16()
	if err != nil || n <= 0 || n > MaxSigners || dec.Remaining() < 64*n {
		return nil, nil, fmt.Errorf("%w: no room for its signatures", ErrTransaction)
	}
	start := len(wire) - dec.Remaining()
	sigs := make([]solana.Signature, n)
	for i := range sigs {
		copy(sigs[i][:], wire[start+64*i:])
	}
	return sigs, wire[start+64*n:], nil
}

// Sign adds the fee payer's signature and returns the wire transaction and
// its id (the fee payer's signature: the transaction's first). Signing is
// deterministic (Ed25519), so one payment always becomes one transaction.
func (t Transfer) Sign(feePayer solana.PrivateKey) ([]byte, solana.Signature, error) {
	sig, err := feePayer.Sign(t.Message)
	if err != nil {
		return nil, solana.Signature{}, fmt.Errorf("x402: sign as fee payer: %w", err)
	}
	var buf bytes.Buffer
	enc := bin.NewBinEncoder(&buf)
	if err := enc.WriteCompactU16(len(t.Signatures)); err != nil {
		return nil, solana.Signature{}, err
	}
	for i, s := range t.Signatures {
		if i == 0 {
			s = sig
		}
		buf.Write(s[:])
	}
	buf.Write(t.Message)
	return buf.Bytes(), sig, nil
}
