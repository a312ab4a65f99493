package ringmember

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/workerd/stagenet"
)

// chain is one direction of a member's account of a job: a running hash
// over the data frames (Hidden, Tokens, Truncate) it received or sent,
//
//	h' = SHA-256(h ‖ kind u8 ‖ step u32 LE ‖ pos u32 LE ‖ SHA-256(payload))
//
// from 32 zero bytes. Both ends of a hop hash the same frames, so a
// stage's out chain equals the next stage's in chain, which is what
// shard.Verify checks between consecutive receipts.
type chain shard.Hash

func (c *chain) add(kind stagenet.Kind, step, pos uint32, payloadHash [32]byte) {
	var b [32 + 1 + 4 + 4 + 32]byte
	copy(b[:32], c[:])
	b[32] = byte(kind)
	binary.LittleEndian.PutUint32(b[33:], step)
	binary.LittleEndian.PutUint32(b[37:], pos)
	copy(b[41:], payloadHash[:])
	*c = sha256.Sum256(b[:])
}

// addFrame adds a frame as sent or received: its Hash is the SHA-256 of
// its payload (stagenet checks that on receipt).
func (c *chain) addFrame(f *stagenet.Frame) { c.add(f.Kind, f.Step, f.Pos, f.Hash) }

// account is what a member signs about one job.
type account struct {
	open      openMsg
	in, out   chain
	positions int64 // positions forwarded, truncations notwithstanding
}

// receipt signs a member's account of a job: its stage and layer range,
// the model and plan, the two chains, the positions it processed
// [0, positions), the job's nonce and block, and the time.
func (a *account) receipt(key ed25519.PrivateKey, plan shard.Hash, model shard.Hash, m shard.Member, nowMs int64) (shard.Receipt, error) {
	r := shard.Receipt{
		Job: a.open.Job, Plan: plan, Stage: m.Stage, LayerStart: m.LayerStart, LayerEnd: m.LayerEnd,
		Model: model, Input: shard.Hash(a.in), Output: shard.Hash(a.out),
		TokenStart: 0, TokenEnd: a.positions,
		Nonce: a.open.Nonce, Slot: a.open.Slot, Blockhash: a.open.Blockhash, Time: nowMs,
	}
	r.Sign(key)
	if err := r.Check(); err != nil {
		return shard.Receipt{}, fmt.Errorf("ringmember: own receipt for job %q: %w", a.open.Job, err)
	}
	return r, nil
}

// decodeClose parses a Close payload, the receipts of the stages before
// this one (stages 1..want), checking its size, each receipt's fields and
// that they are the plan's stages in order, for this job. Signatures are
// the gateway's to judge (shard.Verify).
func decodeClose(b []byte, job string, plan *shard.Plan, want int) ([]shard.Receipt, error) {
	if len(b) > maxCloseBytes {
		return nil, badFrame("close payload is %d bytes, the limit is %d", len(b), maxCloseBytes)
	}
	rs, err := shard.DecodeReceipts(b)
	if err != nil {
		return nil, badFrame("close payload: %v", err)
	}
	if len(rs) != want {
		return nil, badFrame("close carries %d receipts, %d expected", len(rs), want)
	}
	for i := range rs {
		r := &rs[i]
		m, ok := plan.Primary(i + 1)
		switch {
		case r.Job != job:
			return nil, badFrame("close receipt %d is for job %q", i, r.Job)
		case !ok || r.Stage != i+1 || r.Signer != m.Node:
			return nil, badFrame("close receipt %d is stage %d's by %s, not stage %d's primary", i, r.Stage, r.Signer, i+1)
		}
	}
	return rs, nil
}

// encodeClose is the Close payload passed on: the receipts so far, as a
// JSON array.
func encodeClose(rs []shard.Receipt) ([]byte, error) {
	if rs == nil {
		rs = []shard.Receipt{}
	}
	b, err := json.Marshal(rs)
	if err != nil {
		return nil, fmt.Errorf("ringmember: encode receipts: %w", err)
	}
	return b, nil
}
