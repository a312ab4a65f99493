package ringmember

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/go-playground/validator/v10"

	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/workerd/engine/sample"
	"github.com/c0mpute/c0mpute/workerd/speculate"
	"github.com/c0mpute/c0mpute/workerd/stagenet"
)

// MaxChunk is the most positions one KindHidden frame carries: the driver
// feeds a prompt in chunks of at most this many, then one token a step.
// It bounds what a stage accepts from its previous stage (hidden size × 4
// bytes × MaxChunk, plus the wire header) and the activations one step
// holds in memory.
const MaxChunk = 256

// hiddenHeader is the size of engine.EncodeHidden's header.
const hiddenHeader = 20

// Limits on the other payloads a stage reads from a peer.
const (
	// maxOpenBytes bounds an Open's JSON: a job id, three hashes, a slot,
	// a blockhash and three numbers fit in well under 1 KiB.
	maxOpenBytes = 4 << 10
	// maxReceiptBytes bounds one receipt's JSON in a Close (a receipt is
	// about 900 bytes with a 128-byte job id), so a Close carries at most
	// relaymsg.MaxRingReceipts of them.
	maxReceiptBytes = 2 << 10
	maxCloseBytes   = relaymsg.MaxRingReceipts * maxReceiptBytes
	// maxTokensPerFrame bounds a KindTokens payload: one id a step, or
	// the accepted drafts and the token after them of a verify step.
	maxTokensPerFrame = speculate.MaxGamma + 1
)

// maxHiddenBytes is the largest KindHidden payload for a model of hidden
// size dim: MaxChunk positions of F32 values plus the header.
func maxHiddenBytes(dim int) int { return hiddenHeader + dim*4*MaxChunk }

// maxPayload is the frame payload limit of a ring's stage connections:
// the largest payload any kind may carry, so stagenet refuses anything
// bigger before allocating it. Each kind is then checked to its own
// bound.
func maxPayload(dim int) int { return max(maxHiddenBytes(dim), maxCloseBytes, maxOpenBytes) }

var validate = validator.New(validator.WithRequiredStructEnabled())

// openMsg is a KindOpen frame's payload: what every stage needs to know
// about a job, and the sampling settings the last stage applies. It holds
// no prompt text: the prompt's length only, so the last stage knows which
// positions end with a token to sample.
type openMsg struct {
	Job       string          `json:"job" validate:"required,max=64,printascii"`
	Plan      shard.Hash      `json:"plan"`
	Nonce     shard.Hash      `json:"nonce"`
	Slot      uint64          `json:"slot"`
	Blockhash shard.Blockhash `json:"blockhash"`
	// Prompt is the prompt's length in positions: a Hidden frame that
	// ends before it is a non-final prompt chunk, which the last stage
	// answers with no token.
	Prompt   int          `json:"prompt" validate:"gte=1,lte=16777216"`
	Sampling samplingWire `json:"sampling"`
}

// samplingWire is sample.Params as far as a chat request sets them.
type samplingWire struct {
	Temperature float32 `json:"temperature" validate:"gte=0,lte=100"`
	TopP        float32 `json:"top_p" validate:"gte=0,lte=1"`
	Seed        uint64  `json:"seed"`
}

func (s samplingWire) params() sample.Params {
	return sample.Params{Temperature: s.Temperature, TopP: s.TopP, Seed: s.Seed}
}

func wireSampling(p sample.Params) samplingWire {
	return samplingWire{Temperature: p.Temperature, TopP: p.TopP, Seed: p.Seed}
}

// errBadFrame is wrapped by every error about a frame a peer sent that
// breaks the protocol; the job it names ends.
var errBadFrame = errors.New("ringmember: bad frame")

func badFrame(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errBadFrame, fmt.Sprintf(format, a...))
}

// decodeOpen parses and validates an Open frame's payload.
func decodeOpen(f *stagenet.Frame) (openMsg, error) {
	var o openMsg
	if len(f.Payload) > maxOpenBytes {
		return o, badFrame("open payload is %d bytes, the limit is %d", len(f.Payload), maxOpenBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(f.Payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return o, badFrame("open payload is not the open JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return o, badFrame("open payload has data after the JSON object")
	}
	if err := validate.Struct(&o); err != nil {
		return o, badFrame("open payload: %v", err)
	}
	if math.IsNaN(float64(o.Sampling.Temperature)) || math.IsNaN(float64(o.Sampling.TopP)) {
		return o, badFrame("open payload: NaN sampling setting")
	}
	if o.Job != f.Job {
		return o, badFrame("open payload names job %q, the frame %q", o.Job, f.Job)
	}
	return o, nil
}

// encodeTokens is a KindTokens payload: u32 little-endian token ids.
func encodeTokens(ids []int32) []byte {
	b := make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint32(b, uint32(id))
	}
	return b
}

// decodeTokens parses a KindTokens payload, refusing more than max ids or
// an id outside a vocabulary of vocab. The error names no id: ids are the
// reply's text.
func decodeTokens(b []byte, maxIDs, vocab int) ([]int32, error) {
	if len(b)%4 != 0 {
		return nil, badFrame("tokens payload of %d bytes is not whole u32 ids", len(b))
	}
	if len(b)/4 > maxIDs {
		return nil, badFrame("tokens payload holds %d ids, at most %d expected", len(b)/4, maxIDs)
	}
	ids := make([]int32, len(b)/4)
	for i := range ids {
		v := binary.LittleEndian.Uint32(b[4*i:])
		if v >= uint32(vocab) {
			return nil, badFrame("tokens payload: id %d of %d is outside the vocabulary of %d", i, len(ids), vocab)
		}
		ids[i] = int32(v)
	}
	return ids, nil
}

// reason is an error frame's payload: the error's text cut to stagenet's
// limit on a UTF-8 boundary. Errors here never carry prompt text (they
// name sizes, positions, steps and job ids).
func reason(err error) []byte {
	s := err.Error()
	if len(s) > stagenet.MaxErrorPayload {
		s = strings.ToValidUTF8(s[:stagenet.MaxErrorPayload], "")
	}
	return []byte(s)
}

// encodeVerify is a KindVerify payload: the drafts' count and ids, then
// the hidden states' wire form (len(drafts)+1 positions).
func encodeVerify(drafts []int32, wire []byte) []byte {
	b := make([]byte, 0, 4+4*len(drafts)+len(wire))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(drafts)))
	b = append(b, encodeTokens(drafts)...)
	return append(b, wire...)
}

// decodeVerify splits a KindVerify payload into its drafts, checked
// against the vocabulary and speculate.MaxGamma, and the hidden states'
// wire form.
func decodeVerify(b []byte, vocab int) (drafts []int32, wire []byte, err error) {
	if len(b) < 4 {
		return nil, nil, badFrame("verify payload of %d bytes has no draft count", len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	if n == 0 || n > speculate.MaxGamma {
		return nil, nil, badFrame("verify payload names %d drafts, want 1 to %d", n, speculate.MaxGamma)
	}
	end := 4 + 4*int(n)
	if len(b) < end {
		return nil, nil, badFrame("verify payload of %d bytes is too short for %d drafts", len(b), n)
	}
	if drafts, err = decodeTokens(b[4:end], int(n), vocab); err != nil {
		return nil, nil, err
	}
	return drafts, b[end:], nil
}
