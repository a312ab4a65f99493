package relaymsg

import (
	"crypto/sha256"

	"github.com/c0mpute/c0mpute/functions/shard"
)

// Ring messages: the control plane of a sharded model (SPEC "Sharding").
// A ring member is a workerd process that holds a layer range of a ring
// model; the relay carries only these control messages, while activations
// travel directly between members (workerd/stagenet).
//
// The life of a ring, as the gateway drives it:
//
//	member → gateway  ring_announce  its signed capability for a ring model and the address other stages dial
//	gateway → member  ring_probe     the peers whose round trip it should measure
//	member → gateway  ring_rtt       its signed RTT row
//	gateway → member  ring_assign    the signed plan inputs, the plan and the model's manifest
//	member → gateway  ring_ready     its signed acceptance, once its blobs are pulled, verified and loaded
//	                  ring_refuse    or why it will not serve that plan
//	gateway → member  ring_serve     every primary is ready: the ring serves (the first stage gets the jobs)
//	gateway → member  ring_disband   the plan is void (a member left, a check failed): forget it
//
// The shard records inside are signed by their authors; the relay checks
// every signature and that a member speaks only for the identity it
// connected with. Field validation here bounds sizes; the records' own
// Check methods do the rest.
const (
	TypeRingAnnounce = "ring_announce"
	TypeRingRTT      = "ring_rtt"
	TypeRingReady    = "ring_ready"
	TypeRingRefuse   = "ring_refuse"
	TypeRingProbe    = "ring_probe"
	TypeRingAssign   = "ring_assign"
	TypeRingServe    = "ring_serve"
	TypeRingDisband  = "ring_disband"
)

// MaxRingPeers bounds the peers a probe or an assignment lists: a message
// must stay under MaxMessage, and no ring worth forming has more members.
const MaxRingPeers = 64

// RingPeer is a member's identity and the address its stage listener
// accepts other stages on.
type RingPeer struct {
	Node shard.PublicKey `json:"node"`
	Addr string          `json:"addr" validate:"required,hostname_port,max=256"`
}

// RingOffer is a ring model a worker registered for: its manifest hash and
// where its signed manifest (BlobURL/manifest.json) and blobs are served.
type RingOffer struct {
	Model   string     `json:"model" validate:"required,max=128"`
	Hash    shard.Hash `json:"hash"`
	BlobURL string     `json:"blob_url" validate:"required,url,max=1024"`
}

// RingAnnounce offers a member's memory and speed for one ring model.
type RingAnnounce struct {
	Header
	Model string `json:"model" validate:"required,max=128"`
	// Capability is signed by the member's identity key, and names the
	// model by its manifest hash.
	Capability shard.Capability `json:"capability" validate:"-"`
	// Advertise is where other stages dial this member.
	Advertise string `json:"advertise" validate:"required,hostname_port,max=256"`
}

// RingProbe asks a member to measure its round trip to peers.
type RingProbe struct {
	Header
	Model string     `json:"model" validate:"required,max=128"`
	Peers []RingPeer `json:"peers" validate:"min=1,max=64,dive"`
}

// RingRTT answers a probe with the member's signed RTT row.
type RingRTT struct {
	Header
	Model string       `json:"model" validate:"required,max=128"`
	Row   shard.RTTRow `json:"row" validate:"-"`
}

// RingAssign hands every member of a plan the signed inputs the plan was
// computed from (so that it recomputes the plan itself: shard.Accept),
// the plan, the model's signed manifest and where to pull its blobs.
type RingAssign struct {
	Header
	Model    string         `json:"model" validate:"required,max=128"`
	Hash     shard.Hash     `json:"hash"`
	Plan     shard.Plan     `json:"plan" validate:"-"`
	Inputs   shard.Inputs   `json:"inputs" validate:"-"`
	Manifest shard.Manifest `json:"manifest" validate:"-"`
	// BlobURL is the base URL blobs are fetched from (BlobURL/<hash>).
	BlobURL string `json:"blob_url" validate:"required,url,max=1024"`
	// Peers are the addresses of the plan's members.
	Peers []RingPeer `json:"peers" validate:"min=1,max=64,dive"`
}

// RingReady is a member's signed acceptance of a plan, sent once its
// layers are pulled, verified, loaded and warm.
type RingReady struct {
	Header
	Model      string           `json:"model" validate:"required,max=128"`
	Acceptance shard.Acceptance `json:"acceptance" validate:"-"`
}

// RingRefuse says a member will not serve a plan, and why (a machine code
// and an operator message; never prompt text).
type RingRefuse struct {
	Header
	Model   string     `json:"model" validate:"required,max=128"`
	Hash    shard.Hash `json:"hash"`
	Code    string     `json:"code" validate:"required,max=64"`
	Message string     `json:"message,omitempty" validate:"max=1024"`
}

// RingServe tells a plan's members that every primary is ready and the
// ring is serving: the first stage's connection now gets the model's jobs.
type RingServe struct {
	Header
	Model string     `json:"model" validate:"required,max=128"`
	Hash  shard.Hash `json:"hash"`
}

// RingDisband voids a plan: members drop its jobs, close its stage
// connections and go back to announced.
type RingDisband struct {
	Header
	Model  string     `json:"model" validate:"required,max=128"`
	Hash   shard.Hash `json:"hash"`
	Reason string     `json:"reason" validate:"required,max=256"`
}

// RingJob is what a job for a ring model adds to the Job message: the plan
// it runs on, the attempt's freshness nonce, and the Solana block the
// stages' receipts name (zero when the gateway runs without a chain).
type RingJob struct {
	Plan      shard.Hash      `json:"plan"`
	Nonce     shard.Hash      `json:"nonce"`
	Slot      uint64          `json:"slot"`
	Blockhash shard.Blockhash `json:"blockhash"`
	// NoSpeculation turns the driver's speculative decoding off for this
	// job (the request header C0mpute-Speculation: off).
	NoSpeculation bool `json:"no_speculation,omitempty"`
}

// RingNonce is the freshness nonce of one attempt of a ring job: a hash of
// the attempt's ticket, which is fresh per attempt and known only to the
// gateway and the worker, so receipts of one attempt never settle another.
func RingNonce(ticket string) shard.Hash {
	return sha256.Sum256([]byte("c0mpute-ring-nonce:v1:" + ticket))
}

// FailRingNotServing is the Fail code of a ring member handed a job of a
// ring it does not drive (any more): the job moves; unlike
// FailModelNotServed, the worker is not cut off, since a ring can disband
// while a job is on its way.
const FailRingNotServing = "ring_not_serving"

// MaxRingReceipts bounds the stage receipts a Done carries.
const MaxRingReceipts = MaxRingPeers

// RingDone is what the first stage of a ring adds to its Done: the hash
// chains of what it fed into the ring and got back from the last stage,
// the token positions served, and every stage's signed receipt. The
// gateway settles the job with shard.Verify over these before it credits
// anyone, and splits the earning by the verdict's shares.
type RingDone struct {
	Plan       shard.Hash      `json:"plan"`
	Input      shard.Hash      `json:"input"`
	Output     shard.Hash      `json:"output"`
	TokenStart int64           `json:"token_start" validate:"min=0"`
	TokenEnd   int64           `json:"token_end" validate:"gtfield=TokenStart"`
	Receipts   []shard.Receipt `json:"receipts" validate:"min=1,max=64"`
}
