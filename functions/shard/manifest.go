package shard

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Blob is one file of a model: its SHA-256 and size.
type Blob struct {
	Hash Hash  `json:"hash"`
	Size int64 `json:"size" validate:"gt=0,lte=1099511627776"`
}

// Manifest lists a model's blobs: the embedding, every layer in order and
// the head, signed by the publisher. Its hash (Hash) is the model hash
// descriptors, plans, jobs and receipts name.
type Manifest struct {
	Name      string    `json:"name" validate:"required,max=128,printascii"`
	Embed     Blob      `json:"embed"`
	Layers    []Blob    `json:"layers" validate:"min=1,max=65536,dive"`
	Head      Blob      `json:"head"`
	Publisher PublicKey `json:"publisher"`
	Sig       Signature `json:"sig"`
}

func (m *Manifest) canonical() []byte {
	e := newEnc(domainManifest)
	e.str(m.Name)
	e.raw32(m.Embed.Hash)
	e.i64(m.Embed.Size)
	e.count(len(m.Layers))
	for _, b := range m.Layers {
		e.raw32(b.Hash)
		e.i64(b.Size)
	}
	e.raw32(m.Head.Hash)
	e.i64(m.Head.Size)
	e.raw32(m.Publisher)
	return e.b
}
func (m *Manifest) signer() PublicKey    { return m.Publisher }
func (m *Manifest) signature() Signature { return m.Sig }

// Hash is the model hash: SHA-256 of the manifest's canonical body.
func (m *Manifest) Hash() Hash { return sha256.Sum256(m.canonical()) }

// Sign sets Publisher to key's public key and signs the manifest.
func (m *Manifest) Sign(key ed25519.PrivateKey) {
	m.Publisher = KeyOf(key)
	m.Sig = sign(key, m.canonical())
}

// Check validates the fields and the signature.
func (m *Manifest) Check() error {
	if err := validate.Struct(m); err != nil {
		return fmt.Errorf("%w: manifest: %v", ErrInvalid, err)
	}
	if m.Publisher.IsZero() {
		return fmt.Errorf("%w: manifest: publisher missing", ErrInvalid)
	}
	return verifySig(m, "manifest")
}

// Matches checks that a model descriptor describes this manifest: same
// publisher, hash and layer count, and blob sizes within what placement
// budgeted (a blob bigger than the descriptor says would not fit the VRAM
// the plan reserved).
func (m *Manifest) Matches(d *Model) error {
	switch {
	case d.Hash != m.Hash():
		return fmt.Errorf("%w: descriptor names model %s, manifest hashes to %s", ErrInvalid, d.Hash, m.Hash())
	case d.Publisher != m.Publisher:
		return fmt.Errorf("%w: descriptor published by %s, manifest by %s", ErrInvalid, d.Publisher, m.Publisher)
	case d.Layers != len(m.Layers):
		return fmt.Errorf("%w: descriptor has %d layers, manifest %d", ErrInvalid, d.Layers, len(m.Layers))
	case m.Embed.Size > d.EmbedBytes || m.Head.Size > d.HeadBytes:
		return fmt.Errorf("%w: embedding or head blob is larger than the descriptor budgets", ErrInvalid)
	}
	for i, b := range m.Layers {
		if b.Size > d.LayerBytes {
			return fmt.Errorf("%w: layer %d blob is %d bytes, the descriptor budgets %d", ErrInvalid, i, b.Size, d.LayerBytes)
		}
	}
	return nil
}

// Blobs lists what the holder of layers [start, end) pulls: those layers,
// plus the embedding if it holds layer 0 and the head if it holds the last.
func (m *Manifest) Blobs(start, end int) ([]Blob, error) {
	if start < 0 || end > len(m.Layers) || start >= end {
		return nil, fmt.Errorf("%w: range [%d,%d) of a %d-layer model", ErrInvalid, start, end, len(m.Layers))
	}
	var out []Blob
	if start == 0 {
		out = append(out, m.Embed)
	}
	out = append(out, m.Layers[start:end]...)
	if end == len(m.Layers) {
		out = append(out, m.Head)
	}
	return out, nil
}

// DecodeManifest parses a manifest and checks it.
func DecodeManifest(b []byte) (Manifest, error) {
	var m Manifest
	if err := decodeJSON(b, MaxInputsBytes, &m, "manifest"); err != nil {
		return Manifest{}, err
	}
	return m, m.Check()
}

// ErrBlobMismatch means pulled bytes are not the blob the manifest lists:
// wrong hash, or more or fewer bytes.
var ErrBlobMismatch = errors.New("shard: blob does not match the manifest")

// BlobVerifier hashes a blob's bytes as they stream past and refuses any
// byte beyond its size. Write it every byte, then call Finish.
type BlobVerifier struct {
	want Blob
	h    hash.Hash
	n    int64
}

// NewBlobVerifier starts verifying b from its first byte.
func NewBlobVerifier(b Blob) *BlobVerifier {
	return &BlobVerifier{want: b, h: sha256.New()}
}

// Write hashes p; it fails once the blob would exceed its size.
func (v *BlobVerifier) Write(p []byte) (int, error) {
	if v.n+int64(len(p)) > v.want.Size {
		return 0, fmt.Errorf("%w: blob %s is longer than its %d bytes", ErrBlobMismatch, v.want.Hash, v.want.Size)
	}
	v.h.Write(p)
	v.n += int64(len(p))
	return len(p), nil
}

// Written is how many bytes have been verified so far.
func (v *BlobVerifier) Written() int64 { return v.n }

// Finish checks the size and the hash of everything written.
func (v *BlobVerifier) Finish() error {
	if v.n != v.want.Size {
		return fmt.Errorf("%w: blob %s has %d of %d bytes", ErrBlobMismatch, v.want.Hash, v.n, v.want.Size)
	}
	var got Hash
	copy(got[:], v.h.Sum(nil))
	if got != v.want.Hash {
		return fmt.Errorf("%w: bytes hash to %s, manifest says %s", ErrBlobMismatch, got, v.want.Hash)
	}
	return nil
}

// Source serves blob bytes from an offset (for resuming).
type Source interface {
	Open(ctx context.Context, b Blob, offset int64) (io.ReadCloser, error)
}

// HTTPSource fetches blobs as <Base>/<hex hash>, resuming with a Range
// request.
type HTTPSource struct {
	Base   string
	Client *http.Client
}

// Open requests the blob from offset. A server that ignores the range and
// sends the whole blob is read past the bytes already held.
func (s HTTPSource) Open(ctx context.Context, b Blob, offset int64) (io.ReadCloser, error) {
	u, err := url.JoinPath(s.Base, b.Hash.String())
	if err != nil {
		return nil, fmt.Errorf("shard: blob url: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("shard: blob request: %w", err)
	}
	if offset > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
	}
	c := s.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("shard: fetch blob %s: %w", b.Hash, err)
	}
	switch {
	case resp.StatusCode == http.StatusPartialContent && offset > 0:
		if !strings.HasPrefix(resp.Header.Get("Content-Range"), "bytes "+strconv.FormatInt(offset, 10)+"-") {
			resp.Body.Close()
			return nil, fmt.Errorf("shard: fetch blob %s: server answered range %q for offset %d", b.Hash, resp.Header.Get("Content-Range"), offset)
		}
		return resp.Body, nil
	case resp.StatusCode == http.StatusOK:
		if offset > 0 {
			if _, err := io.CopyN(io.Discard, resp.Body, offset); err != nil {
				resp.Body.Close()
				return nil, fmt.Errorf("shard: fetch blob %s: skipping to %d: %w", b.Hash, offset, err)
			}
		}
		return resp.Body, nil
	}
	resp.Body.Close()
	return nil, fmt.Errorf("shard: fetch blob %s: HTTP %s", b.Hash, resp.Status)
}

// Pull fetches blobs into dir, each as <hex hash>, verifying every byte.
// It is resumable: a partial download (<hex hash>.part) is re-hashed from
// disk — not trusted — and continued from where it stopped; a complete
// file already present is re-hashed and kept only if it matches. A blob
// that fails its hash is deleted and Pull returns ErrBlobMismatch.
func Pull(ctx context.Context, src Source, dir string, blobs []Blob) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("shard: pull: %w", err)
	}
	for _, b := range blobs {
		if err := pullBlob(ctx, src, dir, b); err != nil {
			return err
		}
	}
	return nil
}

func pullBlob(ctx context.Context, src Source, dir string, b Blob) error {
	final := filepath.Join(dir, b.Hash.String())
	if f, err := os.Open(final); err == nil {
		v := NewBlobVerifier(b)
		_, cerr := io.Copy(v, f)
		f.Close()
		if cerr == nil && v.Finish() == nil {
			return nil
		}
		if err := os.Remove(final); err != nil {
			return fmt.Errorf("shard: pull: remove bad %s: %w", final, err)
		}
	}
	part := final + ".part"
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("shard: pull: %w", err)
	}
	defer f.Close()
	v := NewBlobVerifier(b)
	if _, err := io.Copy(v, f); err != nil {
		// The partial file is longer than the blob: start over.
		if err := f.Truncate(0); err != nil {
			return fmt.Errorf("shard: pull: %w", err)
		}
		v = NewBlobVerifier(b)
	}
	if _, err := f.Seek(v.Written(), io.SeekStart); err != nil {
		return fmt.Errorf("shard: pull: %w", err)
	}
	if v.Written() < b.Size {
		r, err := src.Open(ctx, b, v.Written())
		if err != nil {
			return err
		}
		_, err = io.Copy(io.MultiWriter(v, f), io.LimitReader(r, b.Size-v.Written()+1))
		r.Close()
		if errors.Is(err, ErrBlobMismatch) {
			f.Close()
			os.Remove(part)
			return err
		}
		if err != nil {
			return fmt.Errorf("shard: pull blob %s (resumable from byte %d): %w", b.Hash, v.Written(), err)
		}
	}
	if v.Written() < b.Size {
		return fmt.Errorf("shard: pull blob %s: source ended at byte %d of %d (resumable)", b.Hash, v.Written(), b.Size)
	}
	if err := v.Finish(); err != nil {
		// Every byte is there and they are wrong: nothing to resume.
		f.Close()
		os.Remove(part)
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("shard: pull: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("shard: pull: %w", err)
	}
	if err := os.Rename(part, final); err != nil {
		return fmt.Errorf("shard: pull: %w", err)
	}
	return nil
}
