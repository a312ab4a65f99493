package stagenet

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"unicode/utf8"
)

// Kind says what a frame carries.
type Kind uint8

// Frame kinds.
const (
	// KindOpen starts a job on a stage; payload: the runtime's JSON.
	KindOpen Kind = 1
	// KindHidden carries hidden states; payload: engine.EncodeHidden's
	// wire form.
	KindHidden Kind = 2
	// KindTokens carries token ids; payload: u32 little-endian each
	// (see AppendTokens).
	KindTokens Kind = 3
	// KindTruncate rolls the job's KV cache back to Pos positions; no
	// payload.
	KindTruncate Kind = 4
	// KindClose ends the job; payload: the runtime's JSON (the receipts
	// gathered so far).
	KindClose Kind = 5
	// KindError reports a job's failure; payload: a short UTF-8 reason
	// (at most MaxErrorPayload bytes), never prompt text.
	KindError Kind = 6
	// KindPing asks for a pong; payload: an 8-byte nonce. Conn answers
	// pings itself.
	KindPing Kind = 7
	// KindPong answers a ping; payload: the ping's nonce.
	KindPong Kind = 8
	// KindBench asks a ring candidate to run the model's bench layer (the
	// middle layer every candidate measured itself on) over one token, so
	// a peer can time it and check the result; payload: engine.EncodeHidden's
	// wire form, one token, F32 (1..MaxBenchPayload bytes). Job is the
	// model's manifest hash, 64 lowercase hex digits.
	KindBench Kind = 9
	// KindBenchReply answers a KindBench with the layer's output hidden
	// state, in the same form and with the same Job.
	KindBenchReply Kind = 10
	// KindVerify carries drafted tokens and the hidden states of the
	// positions that verify them (speculative decoding): payload: a u32
	// count n (at most MaxVerifyDrafts), n u32 token ids, then
	// engine.EncodeHidden's wire form of n+1 positions: the last accepted
	// token's, then each draft's. The runtime checks the ids and rows.
	KindVerify Kind = 11
)

// MaxVerifyDrafts is the most drafted tokens one KindVerify frame names.
const MaxVerifyDrafts = 64

var kindNames = [...]string{
	KindOpen: "open", KindHidden: "hidden", KindTokens: "tokens", KindTruncate: "truncate",
	KindClose: "close", KindError: "error", KindPing: "ping", KindPong: "pong",
	KindBench: "bench", KindBenchReply: "bench_reply", KindVerify: "verify",
}

// String names the kind, for errors and logs.
func (k Kind) String() string {
	if k.valid() {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

func (k Kind) valid() bool { return k >= KindOpen && k <= KindVerify }

func (k Kind) isBench() bool { return k == KindBench || k == KindBenchReply }

// Frame is one message on a stage connection.
type Frame struct {
	Kind Kind
	// Job is the job id: 1..MaxJob bytes of printable ASCII; empty for
	// ping and pong only.
	Job string
	// Step is the job's loop step; it orders frames and the runtime
	// checks it.
	Step uint32
	// Pos is the first position the payload covers (Truncate's target).
	Pos     uint32
	Payload []byte
	// Hash is the SHA-256 of Payload: AppendFrame and Conn.Send set it,
	// the decoder checks it.
	Hash [32]byte
}

// Wire limits.
const (
	// MaxJob is the longest job id. Job ids are the gateway's ids, far
	// shorter; the bound keeps a header's size fixed and small.
	MaxJob = 64
	// MaxErrorPayload bounds an error frame's reason: enough for a
	// sentence, too little to smuggle a prompt back.
	MaxErrorPayload = 1024
	// HeaderSize is the fixed part of every frame (see the package doc).
	HeaderSize = 52
	// MaxBenchPayload bounds a bench or bench reply payload: one token's
	// hidden state of up to 262,144 F32 values plus its wire header.
	MaxBenchPayload = 1<<20 + 64
	// benchJobLen is a bench frame's job id: a manifest hash in hex.
	benchJobLen = 64
	// nonceSize is a ping's and pong's payload.
	nonceSize = 8
)

const (
	frameMagic   = "C0SF"
	frameVersion = 1
)

// ErrFrame is wrapped by every error about malformed frame bytes: a peer
// that sends one is cut off.
var ErrFrame = errors.New("stagenet: malformed frame")

// ErrShort means the bytes given to DecodeFrame hold only the start of a
// frame: read more and decode again. It does not wrap ErrFrame.
var ErrShort = errors.New("stagenet: short frame")

// header is a frame's fixed part, parsed.
type header struct {
	kind       Kind
	jobLen     int
	step, pos  uint32
	payloadLen int
	hash       [32]byte
}

// check refuses a frame AppendFrame must not encode; errors wrap ErrFrame.
func (f *Frame) check() error {
	if !f.Kind.valid() {
		return fmt.Errorf("%w: unknown kind %d", ErrFrame, f.Kind)
	}
	if err := checkJob(f.Kind, len(f.Job)); err != nil {
		return err
	}
	if err := checkJobText(f.Job); err != nil {
		return err
	}
	if err := checkBenchJob(f.Kind, f.Job); err != nil {
		return err
	}
	if uint64(len(f.Payload)) > math.MaxUint32 {
		return fmt.Errorf("%w: %s payload of %d bytes is over the 4 GiB wire limit", ErrFrame, f.Kind, len(f.Payload))
	}
	if err := checkPayloadLen(f.Kind, len(f.Payload)); err != nil {
		return err
	}
	return checkPayload(f.Kind, f.Payload)
}

// checkJob checks a job id's length against the frame's kind.
func checkJob(k Kind, n int) error {
	switch {
	case k == KindPing || k == KindPong:
		if n != 0 {
			return fmt.Errorf("%w: %s frame with a job id (%d bytes); ping and pong belong to no job", ErrFrame, k, n)
		}
	case n == 0:
		return fmt.Errorf("%w: %s frame without a job id", ErrFrame, k)
	case n > MaxJob:
		return fmt.Errorf("%w: job id of %d bytes, over the %d-byte limit", ErrFrame, n, MaxJob)
	case k.isBench() && n != benchJobLen:
		return fmt.Errorf("%w: %s frame's job id is %d bytes, want the model's manifest hash in %d hex digits", ErrFrame, k, n, benchJobLen)
	}
	return nil
}

// checkBenchJob requires a bench frame's job id to be lowercase hex.
func checkBenchJob(k Kind, job string) error {
	if !k.isBench() {
		return nil
	}
	for i := 0; i < len(job); i++ {
		if c := job[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("%w: %s frame's job id byte %d is %q, want a manifest hash in lowercase hex", ErrFrame, k, i, c)
		}
	}
	return nil
}

// checkJobText requires printable ASCII (space to tilde): job ids end up
// in logs and errors.
func checkJobText(job string) error {
	for i := 0; i < len(job); i++ {
		if c := job[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: job id byte %d is 0x%02x, not printable ASCII", ErrFrame, i, c)
		}
	}
	return nil
}

// checkPayloadLen checks what the header alone can tell about a payload.
func checkPayloadLen(k Kind, n int) error {
	switch k {
	case KindTruncate:
		if n != 0 {
			return fmt.Errorf("%w: truncate frame with a %d-byte payload; it takes none", ErrFrame, n)
		}
	case KindTokens:
		if n%4 != 0 {
			return fmt.Errorf("%w: tokens payload of %d bytes is not whole u32 token ids", ErrFrame, n)
		}
	case KindError:
		if n > MaxErrorPayload {
			return fmt.Errorf("%w: error reason of %d bytes, over the %d-byte limit", ErrFrame, n, MaxErrorPayload)
		}
	case KindPing, KindPong:
		if n != nonceSize {
			return fmt.Errorf("%w: %s payload of %d bytes, want an %d-byte nonce", ErrFrame, k, n, nonceSize)
		}
	case KindVerify:
		if n < 4 {
			return fmt.Errorf("%w: verify payload of %d bytes has no draft count", ErrFrame, n)
		}
	case KindBench, KindBenchReply:
		if n == 0 || n > MaxBenchPayload {
			return fmt.Errorf("%w: %s payload of %d bytes, want one token's hidden state of 1..%d bytes", ErrFrame, k, n, MaxBenchPayload)
		}
	}
	return nil
}

// checkPayload checks a payload's content where the framing defines it.
func checkPayload(k Kind, p []byte) error {
	if k == KindError && !utf8.Valid(p) {
		return fmt.Errorf("%w: error reason is not UTF-8", ErrFrame)
	}
	if k == KindVerify {
		n := binary.LittleEndian.Uint32(p)
		if n > MaxVerifyDrafts || uint64(len(p)) < 4+4*uint64(n) {
			return fmt.Errorf("%w: verify payload of %d bytes names %d drafts (at most %d, 4 bytes each)", ErrFrame, len(p), n, MaxVerifyDrafts)
		}
	}
	return nil
}

// AppendFrame appends f's encoding to dst and sets f.Hash. It refuses a
// frame the decoder would refuse (errors wrap ErrFrame).
func AppendFrame(dst []byte, f *Frame) ([]byte, error) {
	if err := f.check(); err != nil {
		return dst, err
	}
	f.Hash = sha256.Sum256(f.Payload)
	dst = appendHeader(dst, f)
	return append(dst, f.Payload...), nil
}

// appendHeader appends the fixed header and job id of a checked frame
// whose Hash is set.
func appendHeader(dst []byte, f *Frame) []byte {
	dst = append(dst, frameMagic...)
	dst = append(dst, frameVersion, byte(f.Kind), byte(len(f.Job)), 0)
	dst = binary.LittleEndian.AppendUint32(dst, f.Step)
	dst = binary.LittleEndian.AppendUint32(dst, f.Pos)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(f.Payload)))
	dst = append(dst, f.Hash[:]...)
	return append(dst, f.Job...)
}

// parseHeader checks the header fields present in b, which may be a
// prefix shorter than HeaderSize: a stream of garbage is refused at its
// first bytes, and an oversized length as soon as it is seen.
func parseHeader(b []byte, maxPayload int) (header, error) {
	var h header
	if n := min(len(b), 4); string(b[:n]) != frameMagic[:n] {
		// The bytes are not echoed: whatever they are, they came from a
		// peer's stream and could be anything, a prompt included.
		return h, fmt.Errorf("%w: bad magic, want %q (not a stage connection, or it lost its framing)", ErrFrame, frameMagic)
	}
	if len(b) > 4 && b[4] != frameVersion {
		return h, fmt.Errorf("%w: version %d, this member speaks %d", ErrFrame, b[4], frameVersion)
	}
	if len(b) > 5 {
		h.kind = Kind(b[5])
		if !h.kind.valid() {
			return h, fmt.Errorf("%w: unknown kind %d", ErrFrame, b[5])
		}
	}
	if len(b) > 6 {
		h.jobLen = int(b[6])
		if err := checkJob(h.kind, h.jobLen); err != nil {
			return h, err
		}
	}
	if len(b) > 7 && b[7] != 0 {
		return h, fmt.Errorf("%w: reserved byte is %d, want 0", ErrFrame, b[7])
	}
	if len(b) >= 20 {
		le := binary.LittleEndian
		h.step, h.pos = le.Uint32(b[8:]), le.Uint32(b[12:])
		n := uint64(le.Uint32(b[16:]))
		if n > uint64(max(maxPayload, 0)) {
			return h, fmt.Errorf("%w: %s payload of %d bytes, over the %d-byte limit", ErrFrame, h.kind, n, max(maxPayload, 0))
		}
		h.payloadLen = int(n)
		if err := checkPayloadLen(h.kind, h.payloadLen); err != nil {
			return h, err
		}
	}
	if len(b) >= HeaderSize {
		copy(h.hash[:], b[20:HeaderSize])
	}
	return h, nil
}

// finish checks a frame's payload against its header's hash and its kind.
func (h *header) finish(job string, payload []byte) (Frame, error) {
	if sha256.Sum256(payload) != h.hash {
		return Frame{}, fmt.Errorf("%w: %s payload does not match its SHA-256", ErrFrame, h.kind)
	}
	if err := checkPayload(h.kind, payload); err != nil {
		return Frame{}, err
	}
	return Frame{Kind: h.kind, Job: job, Step: h.step, Pos: h.pos, Payload: payload, Hash: h.hash}, nil
}

// DecodeFrame decodes one frame from the start of b, refusing a payload
// over maxPayload bytes before looking at it. n is the number of bytes the
// frame used. When b holds only part of a frame it returns ErrShort
// (unless what is there is already malformed); every other error wraps
// ErrFrame. The payload aliases b.
func DecodeFrame(b []byte, maxPayload int) (f Frame, n int, err error) {
	h, err := parseHeader(b[:min(len(b), HeaderSize)], maxPayload)
	if err != nil {
		return Frame{}, 0, err
	}
	if len(b) < HeaderSize {
		return Frame{}, 0, ErrShort
	}
	jobEnd := HeaderSize + h.jobLen
	if len(b) < jobEnd {
		return Frame{}, 0, ErrShort
	}
	job := b[HeaderSize:jobEnd]
	if err := checkJobText(string(job)); err != nil {
		return Frame{}, 0, err
	}
	if err := checkBenchJob(h.kind, string(job)); err != nil {
		return Frame{}, 0, err
	}
	end := jobEnd + h.payloadLen
	if len(b) < end {
		return Frame{}, 0, ErrShort
	}
	var payload []byte
	if h.payloadLen > 0 {
		payload = b[jobEnd:end:end]
	}
	f, err = h.finish(string(job), payload)
	if err != nil {
		return Frame{}, 0, err
	}
	return f, end, nil
}

// Payload reads allocate as the bytes arrive, never the length a header
// announces: a peer that announces a payload and sends nothing costs
// this side one chunk, not the announced size.
const (
	// firstChunk is the most a payload's first allocation takes: every
	// small frame (a decode step's hidden states, tokens) fits in it.
	firstChunk = 64 << 10
	// payloadChunk bounds each further allocation of a large payload.
	payloadChunk = 1 << 20
)

// ReadFrame reads one frame from r, refusing a payload over maxPayload
// bytes before reading it. The payload is allocated as its bytes arrive,
// in chunks of at most 1 MiB, so a header that announces a large payload
// and is followed by nothing costs one chunk. It returns io.EOF when r
// ends at a frame boundary and an error wrapping io.ErrUnexpectedEOF when
// it ends inside one; every error about the bytes themselves wraps
// ErrFrame.
func ReadFrame(r *bufio.Reader, maxPayload int) (Frame, error) {
	return readFrame(r, maxPayload, nil)
}

// readFrame is ReadFrame; waiting, when not nil, holds the payload bytes
// still awaited while the reader is inside a payload (0 otherwise).
func readFrame(r *bufio.Reader, maxPayload int, waiting *atomic.Int64) (Frame, error) {
	var hb [HeaderSize + MaxJob]byte
	if _, err := io.ReadFull(r, hb[:HeaderSize]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, fmt.Errorf("stagenet: frame header: %w", err)
		}
		return Frame{}, err
	}
	h, err := parseHeader(hb[:HeaderSize], maxPayload)
	if err != nil {
		return Frame{}, err
	}
	job := hb[HeaderSize : HeaderSize+h.jobLen]
	if _, err := io.ReadFull(r, job); err != nil {
		return Frame{}, fmt.Errorf("stagenet: frame job id: %w", eofInside(err))
	}
	if err := checkJobText(string(job)); err != nil {
		return Frame{}, err
	}
	if err := checkBenchJob(h.kind, string(job)); err != nil {
		return Frame{}, err
	}
	var payload []byte
	if h.payloadLen > 0 {
		payload, err = readPayload(r, h.payloadLen, waiting)
		if err != nil {
			return Frame{}, fmt.Errorf("stagenet: %s frame payload: %w", h.kind, err)
		}
	}
	return h.finish(string(job), payload)
}

// readPayload reads an n-byte payload (n already checked against the
// reader's limit) into memory allocated as the bytes arrive: a first
// chunk of at most firstChunk bytes, then chunks of at most payloadChunk,
// joined once all have arrived. What is allocated before the last byte is
// never more than what has arrived plus one chunk.
func readPayload(r *bufio.Reader, n int, waiting *atomic.Int64) ([]byte, error) {
	if waiting != nil {
		defer waiting.Store(0)
	}
	var chunks [][]byte
	got := 0
	for got < n {
		size := min(n-got, payloadChunk)
		if got == 0 {
			size = min(n, firstChunk)
		}
		chunk := make([]byte, size)
		if waiting != nil {
			waiting.Store(int64(n - got))
		}
		m, err := io.ReadFull(r, chunk)
		got += m
		if err != nil {
			return nil, fmt.Errorf("%d of %d bytes read: %w", got, n, eofInside(err))
		}
		chunks = append(chunks, chunk)
	}
	if len(chunks) == 1 {
		return chunks[0], nil
	}
	payload := make([]byte, 0, n)
	for _, c := range chunks {
		payload = append(payload, c...)
	}
	return payload, nil
}

// eofInside turns an EOF inside a frame into io.ErrUnexpectedEOF.
func eofInside(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// AppendTokens appends token ids in KindTokens' payload form.
func AppendTokens(dst []byte, ids []uint32) []byte {
	for _, id := range ids {
		dst = binary.LittleEndian.AppendUint32(dst, id)
	}
	return dst
}

// DecodeTokens reads a KindTokens payload. Errors wrap ErrFrame.
func DecodeTokens(p []byte) ([]uint32, error) {
	if len(p)%4 != 0 {
		return nil, fmt.Errorf("%w: tokens payload of %d bytes is not whole u32 token ids", ErrFrame, len(p))
	}
	ids := make([]uint32, len(p)/4)
	for i := range ids {
		ids[i] = binary.LittleEndian.Uint32(p[4*i:])
	}
	return ids, nil
}
