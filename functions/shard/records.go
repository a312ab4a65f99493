package shard

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/go-playground/validator/v10"
)

// Errors every record check wraps, for errors.Is.
var (
	// ErrBadSignature means a record's signature does not verify against
	// the key it names.
	ErrBadSignature = errors.New("shard: bad signature")
	// ErrInvalid means a record is malformed or out of range.
	ErrInvalid = errors.New("shard: invalid record")
)

var validate = validator.New(validator.WithRequiredStructEnabled())

// Limits on decoded input, so a hostile file cannot make a decoder
// allocate without bound.
const (
	// MaxRecordBytes bounds one signed record's JSON.
	MaxRecordBytes = 1 << 20
	// MaxInputsBytes bounds a whole plan input: 256 candidates with full
	// RTT rows is about 6 MiB of JSON.
	MaxInputsBytes = 32 << 20
)

// Capability is a node's announcement for one model: what it can hold and
// how fast it computes. Every field is a hint, signed by the node; the
// coordinator re-measures what places or prices a ring before it puts the
// record into a plan's inputs (and overwrites Stake from the chain and
// Trusted from its own registry).
type Capability struct {
	Node  PublicKey `json:"node"`
	Model Hash      `json:"model"`
	// VRAMBytes is the proven free GPU memory.
	VRAMBytes int64 `json:"vram_bytes" validate:"gt=0,lte=1125899906842624"`
	// LayerMicros is the measured time for one layer of Model on one
	// token, in microseconds.
	LayerMicros int64 `json:"layer_us" validate:"gt=0,lte=1000000000"`
	// UplinkBps is the measured upload bandwidth in bits per second.
	UplinkBps int64 `json:"uplink_bps" validate:"gt=0,lte=1000000000000"`
	// Stake is the node's matured ZERO stake in base units (6 decimals).
	Stake   int64 `json:"stake" validate:"gte=0"`
	Trusted bool  `json:"trusted"`
	// Time is when the record was made, Unix milliseconds.
	Time int64     `json:"time_ms" validate:"gt=0"`
	Sig  Signature `json:"sig"`
}

func (c *Capability) canonical() []byte {
	e := newEnc(domainCapability)
	c.body(e)
	return e.b
}

func (c *Capability) body(e *enc) {
	e.raw32(c.Node)
	e.raw32(c.Model)
	e.i64(c.VRAMBytes)
	e.i64(c.LayerMicros)
	e.i64(c.UplinkBps)
	e.i64(c.Stake)
	e.bool(c.Trusted)
	e.i64(c.Time)
}
func (c *Capability) signer() PublicKey    { return c.Node }
func (c *Capability) signature() Signature { return c.Sig }

// Sign sets Node to key's public key and signs the record.
func (c *Capability) Sign(key ed25519.PrivateKey) {
	c.Node = KeyOf(key)
	c.Sig = sign(key, c.canonical())
}

// Check validates the fields and the signature.
func (c *Capability) Check() error {
	if err := checkStruct(c, "capability"); err != nil {
		return err
	}
	return verifySig(c, "capability")
}

// RTTPeer is one measurement in an RTT row.
type RTTPeer struct {
	To PublicKey `json:"to"`
	// Micros is the measured round-trip time in microseconds.
	Micros int64 `json:"rtt_us"`
	// LayerMicros is the time To took to run one layer of the model on one
	// token when the measuring node benchmarked it (the bench round trip
	// less the network round trip, verified bit for bit against its own
	// result), in microseconds; 0 means not observed. The planner prices a
	// node at the median of what others observed for it (its claim only
	// when no one did), so a node cannot claim to be faster than it is.
	LayerMicros int64 `json:"layer_us,omitempty"`
}

// RTTRow is one row of the RTT matrix: what From measured to each peer,
// signed by From. The coordinator measures and signs its own row too.
type RTTRow struct {
	From  PublicKey `json:"from"`
	Time  int64     `json:"time_ms" validate:"gt=0"`
	Peers []RTTPeer `json:"peers" validate:"max=4096"`
	Sig   Signature `json:"sig"`
}

func (r *RTTRow) canonical() []byte {
	e := newEnc(domainRTT)
	e.b = slices.Grow(e.b, 44+48*len(r.Peers))
	r.body(e)
	return e.b
}

// body writes peers sorted by key, so a row signs the same whatever order
// its measurements were listed in.
func (r *RTTRow) body(e *enc) {
	e.raw32(r.From)
	e.i64(r.Time)
	peers := r.Peers
	cmp := func(a, b RTTPeer) int { return a.To.Compare(&b.To) }
	if !slices.IsSortedFunc(peers, cmp) {
		peers = slices.Clone(peers)
		slices.SortFunc(peers, cmp)
	}
	e.count(len(peers))
	for _, p := range peers {
		e.raw32(p.To)
		e.i64(p.Micros)
		e.i64(p.LayerMicros)
	}
}
func (r *RTTRow) signer() PublicKey    { return r.From }
func (r *RTTRow) signature() Signature { return r.Sig }

// Sign sets From to key's public key and signs the row.
func (r *RTTRow) Sign(key ed25519.PrivateKey) {
	r.From = KeyOf(key)
	r.Sig = sign(key, r.canonical())
}

// Check validates the fields (no self entry, no peer twice) and the
// signature.
func (r *RTTRow) Check() error {
	if err := r.validFields(); err != nil {
		return err
	}
	return verifySig(r, "rtt row")
}

// MaxRTTMicros bounds a measurement: 100 s is no ring anyone would form.
const MaxRTTMicros = 100_000_000

// MaxLayerMicros bounds a per-layer time, observed or claimed (the same
// bound as Capability.LayerMicros).
const MaxLayerMicros = 1_000_000_000

// validFields checks peers by hand: a struct validator walking thousands
// of entries by reflection dominated planning time.
func (r *RTTRow) validFields() error {
	if err := checkStruct(r, "rtt row"); err != nil {
		return err
	}
	seen := make(map[PublicKey]bool, len(r.Peers))
	for _, p := range r.Peers {
		if p.Micros <= 0 || p.Micros > MaxRTTMicros {
			return fmt.Errorf("%w: rtt row of %s: rtt to %s is %d µs, want 1..%d", ErrInvalid, r.From, p.To, p.Micros, MaxRTTMicros)
		}
		if p.LayerMicros < 0 || p.LayerMicros > MaxLayerMicros {
			return fmt.Errorf("%w: rtt row of %s: layer time of %s is %d µs, want 0 (not observed) or 1..%d", ErrInvalid, r.From, p.To, p.LayerMicros, MaxLayerMicros)
		}
		if p.To == r.From {
			return fmt.Errorf("%w: rtt row of %s measures itself", ErrInvalid, r.From)
		}
		if seen[p.To] {
			return fmt.Errorf("%w: rtt row of %s lists %s twice", ErrInvalid, r.From, p.To)
		}
		seen[p.To] = true
	}
	return nil
}

// Model describes a model's shape for placement, signed by its publisher
// (the key that signs its manifest). Hash is the manifest's hash.
type Model struct {
	Name string `json:"name" validate:"required,max=128,printascii"`
	Hash Hash   `json:"hash"`
	// Layers is the number of transformer blocks.
	Layers int `json:"layers" validate:"gte=1,lte=65536"`
	// LayerBytes is the weight size of one layer.
	LayerBytes int64 `json:"layer_bytes" validate:"gt=0,lte=1099511627776"`
	// KVBytesPerToken is the KV cache one layer keeps per token.
	KVBytesPerToken int64 `json:"kv_bytes_per_token_layer" validate:"gte=0,lte=16777216"`
	// EmbedBytes and HeadBytes are held by the first and the last stage.
	EmbedBytes int64 `json:"embed_bytes" validate:"gte=0,lte=1099511627776"`
	HeadBytes  int64 `json:"head_bytes" validate:"gte=0,lte=1099511627776"`
	// ActivationBytes is what one stage sends the next per token (hidden
	// size × bytes per value).
	ActivationBytes int64     `json:"activation_bytes" validate:"gt=0,lte=1073741824"`
	Publisher       PublicKey `json:"publisher"`
	Sig             Signature `json:"sig"`
}

func (m *Model) canonical() []byte {
	e := newEnc(domainModel)
	m.body(e)
	return e.b
}

func (m *Model) body(e *enc) {
	e.str(m.Name)
	e.raw32(m.Hash)
	e.int(m.Layers)
	e.i64(m.LayerBytes)
	e.i64(m.KVBytesPerToken)
	e.i64(m.EmbedBytes)
	e.i64(m.HeadBytes)
	e.i64(m.ActivationBytes)
	e.raw32(m.Publisher)
}
func (m *Model) signer() PublicKey    { return m.Publisher }
func (m *Model) signature() Signature { return m.Sig }

// Sign sets Publisher to key's public key and signs the descriptor.
func (m *Model) Sign(key ed25519.PrivateKey) {
	m.Publisher = KeyOf(key)
	m.Sig = sign(key, m.canonical())
}

// Check validates the fields and the signature.
func (m *Model) Check() error {
	if err := checkStruct(m, "model"); err != nil {
		return err
	}
	return verifySig(m, "model")
}

// Pinning policies.
const (
	// PinBoundary puts the stages holding the first and the last layers
	// (from whose activations much of a prompt can be reconstructed) only
	// on trusted or staked nodes.
	PinBoundary = "boundary"
	// PinNone places boundary stages like any other.
	PinNone = "none"
)

// Params are the coordinator's settings for one placement, signed by the
// coordinator.
type Params struct {
	Coordinator PublicKey `json:"coordinator"`
	Model       Hash      `json:"model"`
	// Admission names the admission policy; "open" is the default.
	Admission string `json:"admission" validate:"required,max=64,printascii"`
	// VRAMFloorBytes is the least proven VRAM a node needs to be admitted.
	VRAMFloorBytes int64 `json:"vram_floor_bytes" validate:"gt=0"`
	// ReserveBytes is kept free on every node for the runtime itself.
	ReserveBytes int64 `json:"reserve_bytes" validate:"gte=0,lte=1125899906842624"`
	// ContextTokens is the context length every stage reserves KV for.
	ContextTokens int64 `json:"context_tokens" validate:"gte=1,lte=16777216"`
	MinStages     int   `json:"min_stages" validate:"gte=1,lte=1024"`
	MaxStages     int   `json:"max_stages" validate:"gtefield=MinStages,lte=1024"`
	// Verifiers and Standbys are per stage.
	Verifiers int    `json:"verifiers" validate:"gte=0,lte=8"`
	Standbys  int    `json:"standbys" validate:"gte=0,lte=8"`
	Pinning   string `json:"pinning" validate:"oneof=boundary none"`
	// PinMinStake is the stake that qualifies a node for a boundary stage;
	// 0 means only trusted nodes qualify.
	PinMinStake int64 `json:"pin_min_stake" validate:"gte=0"`
	// Seed breaks ties; public, fixed before the inputs are known.
	Seed Hash      `json:"seed"`
	Time int64     `json:"time_ms" validate:"gt=0"`
	Sig  Signature `json:"sig"`
}

func (p *Params) canonical() []byte {
	e := newEnc(domainParams)
	p.body(e)
	return e.b
}

func (p *Params) body(e *enc) {
	e.raw32(p.Coordinator)
	e.raw32(p.Model)
	e.str(p.Admission)
	e.i64(p.VRAMFloorBytes)
	e.i64(p.ReserveBytes)
	e.i64(p.ContextTokens)
	e.int(p.MinStages)
	e.int(p.MaxStages)
	e.int(p.Verifiers)
	e.int(p.Standbys)
	e.str(p.Pinning)
	e.i64(p.PinMinStake)
	e.raw32(p.Seed)
	e.i64(p.Time)
}
func (p *Params) signer() PublicKey    { return p.Coordinator }
func (p *Params) signature() Signature { return p.Sig }

// Sign sets Coordinator to key's public key and signs the parameters.
func (p *Params) Sign(key ed25519.PrivateKey) {
	p.Coordinator = KeyOf(key)
	p.Sig = sign(key, p.canonical())
}

// Check validates the fields and the signature.
func (p *Params) Check() error {
	if err := checkStruct(p, "params"); err != nil {
		return err
	}
	return verifySig(p, "params")
}

// Inputs is everything Plan reads. Each part is signed by its author.
type Inputs struct {
	Model        Model        `json:"model"`
	Params       Params       `json:"params"`
	Capabilities []Capability `json:"capabilities" validate:"max=4096"`
	RTT          []RTTRow     `json:"rtt" validate:"max=4097"`
}

// Check validates every part and signature, that the parts agree on the
// model, and that no node announces or measures twice.
func (in *Inputs) Check() error {
	_, err := in.checkHash()
	return err
}

// checkHash is Check, returning Hash computed from the same canonical
// bytes the signatures were checked over (encoding each row once: sorting
// thousands of peers twice was a measurable part of planning).
func (in *Inputs) checkHash() (Hash, error) {
	if err := in.Model.Check(); err != nil {
		return Hash{}, err
	}
	if err := in.Params.Check(); err != nil {
		return Hash{}, err
	}
	if in.Params.Model != in.Model.Hash {
		return Hash{}, fmt.Errorf("%w: params are for model %s, descriptor is %s", ErrInvalid, in.Params.Model, in.Model.Hash)
	}
	if len(in.Capabilities) > 4096 || len(in.RTT) > 4097 {
		return Hash{}, fmt.Errorf("%w: more than 4096 capabilities or 4097 rtt rows", ErrInvalid)
	}
	items := make([]signed, 0, len(in.Capabilities)+len(in.RTT))
	seen := make(map[PublicKey]bool, len(in.Capabilities))
	caps := make([][]byte, len(in.Capabilities))
	for i := range in.Capabilities {
		c := &in.Capabilities[i]
		if err := checkStruct(c, "capability"); err != nil {
			return Hash{}, fmt.Errorf("capability %d: %w", i, err)
		}
		if seen[c.Node] {
			return Hash{}, fmt.Errorf("%w: node %s announces twice", ErrInvalid, c.Node)
		}
		seen[c.Node] = true
		caps[i] = c.canonical()
		items = append(items, signed{fmt.Sprintf("capability %d", i), c.Node, caps[i], c.Sig})
	}
	clear(seen)
	rows := make([][]byte, len(in.RTT))
	for i := range in.RTT {
		r := &in.RTT[i]
		if err := r.validFields(); err != nil {
			return Hash{}, fmt.Errorf("rtt row %d: %w", i, err)
		}
		if seen[r.From] {
			return Hash{}, fmt.Errorf("%w: node %s has two rtt rows", ErrInvalid, r.From)
		}
		seen[r.From] = true
		rows[i] = r.canonical()
		items = append(items, signed{fmt.Sprintf("rtt row %d", i), r.From, rows[i], r.Sig})
	}
	if err := verifyAll(items); err != nil {
		return Hash{}, err
	}
	return in.hashFrom(caps, rows), nil
}

// Hash is the SHA-256 of the canonical inputs: the model and params bodies,
// then the capabilities sorted by node, then the RTT rows sorted by their
// measuring node (peers sorted within each row). Signatures are not hashed:
// the bodies they sign are.
func (in *Inputs) Hash() Hash {
	caps := make([][]byte, len(in.Capabilities))
	for i := range in.Capabilities {
		caps[i] = in.Capabilities[i].canonical()
	}
	rows := make([][]byte, len(in.RTT))
	for i := range in.RTT {
		rows[i] = in.RTT[i].canonical()
	}
	return in.hashFrom(caps, rows)
}

// hashFrom hashes from the records' canonical encodings: each body is its
// encoding less the domain tag, and starts with the signer's key, so
// sorting bodies sorts by node (then by content, should keys repeat in
// unchecked inputs).
func (in *Inputs) hashFrom(caps, rows [][]byte) Hash {
	e := newEnc(domainInputs)
	size := 1024
	for _, b := range caps {
		size += len(b)
	}
	for _, b := range rows {
		size += len(b)
	}
	e.b = slices.Grow(e.b, size)
	in.Model.body(e)
	in.Params.body(e)
	for _, set := range []struct {
		list   [][]byte
		domain string
	}{{caps, domainCapability}, {rows, domainRTT}} {
		bodies := make([][]byte, len(set.list))
		for i, b := range set.list {
			bodies[i] = b[len(set.domain)+1:]
		}
		slices.SortFunc(bodies, bytes.Compare)
		e.count(len(bodies))
		for _, b := range bodies {
			e.b = append(e.b, b...)
		}
	}
	return e.hash()
}

// checkStruct runs the struct tags and rejects unset keys.
func checkStruct(v any, what string) error {
	if err := validate.Struct(v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, what, err)
	}
	var keys []PublicKey
	switch r := v.(type) {
	case *Capability:
		keys = []PublicKey{r.Node}
	case *RTTRow:
		keys = []PublicKey{r.From}
	case *Model:
		keys = []PublicKey{r.Publisher}
	case *Params:
		keys = []PublicKey{r.Coordinator}
	}
	for _, k := range keys {
		if k.IsZero() {
			return fmt.Errorf("%w: %s: signer key is missing", ErrInvalid, what)
		}
	}
	return nil
}

// decodeJSON reads exactly one JSON value with no unknown fields.
func decodeJSON(b []byte, limit int, v any, what string) error {
	if len(b) > limit {
		return fmt.Errorf("%w: %s is %d bytes, over the %d-byte limit", ErrInvalid, what, len(b), limit)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, what, err)
	}
	if _, err := d.Token(); err != io.EOF {
		return fmt.Errorf("%w: %s: trailing data after the JSON value", ErrInvalid, what)
	}
	return nil
}

// DecodeCapability parses a capability record and checks it.
func DecodeCapability(b []byte) (Capability, error) {
	var c Capability
	if err := decodeJSON(b, MaxRecordBytes, &c, "capability"); err != nil {
		return Capability{}, err
	}
	return c, c.Check()
}

// DecodeRTTRow parses an RTT row and checks it.
func DecodeRTTRow(b []byte) (RTTRow, error) {
	var r RTTRow
	if err := decodeJSON(b, MaxRecordBytes, &r, "rtt row"); err != nil {
		return RTTRow{}, err
	}
	return r, r.Check()
}

// DecodeModel parses a model descriptor and checks it.
func DecodeModel(b []byte) (Model, error) {
	var m Model
	if err := decodeJSON(b, MaxRecordBytes, &m, "model"); err != nil {
		return Model{}, err
	}
	return m, m.Check()
}

// DecodeParams parses plan parameters and checks them.
func DecodeParams(b []byte) (Params, error) {
	var p Params
	if err := decodeJSON(b, MaxRecordBytes, &p, "params"); err != nil {
		return Params{}, err
	}
	return p, p.Check()
}

// DecodeInputs parses a whole plan input and checks every record in it.
func DecodeInputs(b []byte) (Inputs, error) {
	var in Inputs
	if err := decodeJSON(b, MaxInputsBytes, &in, "inputs"); err != nil {
		return Inputs{}, err
	}
	return in, in.Check()
}
