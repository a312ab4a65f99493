package relaymsg

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Image jobs. The gateway hands a worker an ImageJob; the worker sends the
// image back as Chunks that carry an ImagePart each instead of deltas — an
// image is far larger than API Gateway's 128 KB message cap — and ends with
// a Done whose receipt hashes the image bytes (ImageHash). A chunk's Seq is
// the part's index, so the Done's Seq is the number of parts.
//
// The parts of one image are cut at ImagePartBytes: every part but the last
// is exactly that long, which makes the whole image's size known, and
// bounded by MaxImageBytes, from the first part a receiver sees.

// TypeImageJob is the relay → worker message that hands a worker an image
// request.
const TypeImageJob = "image_job"

// Image bounds.
const (
	// ImagePartBytes is the image bytes one chunk carries: base64 makes
	// them 87,384 characters, which leaves room within MaxMessage for the
	// envelope (ids, ticket) however the relay re-encodes it.
	ImagePartBytes = 64 << 10
	// MaxImageBytes bounds one image: a 2048×2048 RGBA PNG that does not
	// compress at all is 16 MiB, and no catalogue size is larger.
	MaxImageBytes = 16 << 20
	// MaxImageParts is the most parts one image can have.
	MaxImageParts = MaxImageBytes / ImagePartBytes
	// MaxImagePrompt bounds an image prompt in bytes (OpenAI's own limit
	// for gpt-image-1 is 32,000 characters).
	MaxImagePrompt = 32000
	// MaxImageSide bounds an image's width and height in pixels.
	MaxImageSide = 4096
)

// ImageRequest is what a worker needs to render one image: the prompt and
// the pixel size the gateway checked against the catalogue. It never holds
// who asked.
type ImageRequest struct {
	Prompt string `json:"prompt" validate:"required,max=32000"`
	Width  int    `json:"width" validate:"min=64,max=4096"`
	Height int    `json:"height" validate:"min=64,max=4096"`
}

// ImageJob hands a worker an image request. Like Job, it is the only place
// the prompt travels, and it travels in memory only.
type ImageJob struct {
	Header
	Job string `json:"job" validate:"required,max=64"`
	// ReplyTo is the listener connection to address chunks to.
	ReplyTo string       `json:"reply_to" validate:"required,max=128"`
	Model   string       `json:"model" validate:"required,max=128"`
	Request ImageRequest `json:"request"`
	// Deadline and BudgetMillis are as in Job: the worker must have sent
	// the whole image before the deadline.
	Deadline     time.Time `json:"deadline"`
	BudgetMillis int64     `json:"budget_ms" validate:"min=0"`
	Ticket       string    `json:"ticket" validate:"required,len=43"`
}

// ImagePart is one piece of an image job's reply, in a Chunk whose Seq is
// the part's index.
type ImagePart struct {
	// Parts is how many parts the image has; every part says the same.
	Parts int64 `json:"parts" validate:"min=1,max=256"`
	// Data is the part's bytes (base64 in JSON): ImagePartBytes of them,
	// fewer in the last part only.
	Data []byte `json:"data" validate:"required,min=1,max=65536"`
}

// ImageRequestHash is an image job's receipt request_sha256: the hex
// SHA-256 of json.Marshal of the request, as the gateway sent it and as the
// worker decoded it (the encoding is stable under that round trip).
func ImageRequestHash(req *ImageRequest) (string, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("relaymsg: image request hash: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// ImageHash is an image job's receipt output_sha256: the hex SHA-256 of the
// image bytes. Such a receipt's Deltas is 1.
func ImageHash(image []byte) string {
	sum := sha256.Sum256(image)
	return hex.EncodeToString(sum[:])
}

// SplitImage cuts an image into the parts its chunks carry, in order. It
// refuses an empty image and one over MaxImageBytes.
func SplitImage(image []byte) ([][]byte, error) {
	switch {
	case len(image) == 0:
		return nil, errors.New("relaymsg: an empty image")
	case len(image) > MaxImageBytes:
		return nil, fmt.Errorf("relaymsg: an image of %d bytes is over the %d-byte limit", len(image), MaxImageBytes)
	}
	var parts [][]byte
	for len(image) > 0 {
		n := min(len(image), ImagePartBytes)
		parts = append(parts, image[:n])
		image = image[n:]
	}
	return parts, nil
}

// ErrImageProtocol means the parts a worker sent cannot be one image: a
// part out of range, twice, of the wrong size, or parts that disagree on
// their number. The sender broke the protocol.
var ErrImageProtocol = errors.New("relaymsg: image parts break the protocol")

// ImageAssembler rebuilds an image from its parts, which may arrive in any
// order (API Gateway does not keep a connection's order). It holds at most
// MaxImageBytes whatever it is fed, and refuses a part that does not fit
// with ErrImageProtocol. The zero value is ready to use.
type ImageAssembler struct {
	parts    int64
	got      map[int64][]byte
	received int64
}

// Add takes the part with index seq.
func (a *ImageAssembler) Add(seq int64, p *ImagePart) error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: a chunk without an image part", ErrImageProtocol)
	case p.Parts < 1 || p.Parts > MaxImageParts:
		return fmt.Errorf("%w: %d parts is outside 1..%d", ErrImageProtocol, p.Parts, MaxImageParts)
	case a.parts != 0 && p.Parts != a.parts:
		return fmt.Errorf("%w: part %d says %d parts, an earlier one %d", ErrImageProtocol, seq, p.Parts, a.parts)
	case seq < 0 || seq >= p.Parts:
		return fmt.Errorf("%w: part %d of %d", ErrImageProtocol, seq, p.Parts)
	case seq < p.Parts-1 && len(p.Data) != ImagePartBytes:
		return fmt.Errorf("%w: part %d of %d holds %d bytes, not %d", ErrImageProtocol, seq, p.Parts, len(p.Data), ImagePartBytes)
	case len(p.Data) < 1 || len(p.Data) > ImagePartBytes:
		return fmt.Errorf("%w: last part holds %d bytes", ErrImageProtocol, len(p.Data))
	}
	if _, dup := a.got[seq]; dup {
		return fmt.Errorf("%w: part %d twice", ErrImageProtocol, seq)
	}
	if a.got == nil {
		a.got = map[int64][]byte{}
	}
	a.parts = p.Parts
	a.got[seq] = p.Data
	a.received++
	return nil
}

// Parts is the number of parts the image has (0 before the first part).
func (a *ImageAssembler) Parts() int64 { return a.parts }

// Complete reports whether every part arrived.
func (a *ImageAssembler) Complete() bool { return a.parts > 0 && a.received == a.parts }

// Image is the whole image, once Complete.
func (a *ImageAssembler) Image() ([]byte, error) {
	if !a.Complete() {
		return nil, fmt.Errorf("%w: %d of %d parts arrived", ErrImageProtocol, a.received, a.parts)
	}
	size := 0
	for _, d := range a.got {
		size += len(d)
	}
	out := make([]byte, 0, size)
	for i := range a.parts {
		out = append(out, a.got[i]...)
	}
	return out, nil
}
