package shardblob

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/go-playground/validator/v10"

	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

var validate = validator.New(validator.WithRequiredStructEnabled())

// Tensor names the blobs are cut along (llama.cpp's names).
const (
	tokenEmbd  = "token_embd.weight"
	outputNorm = "output_norm.weight"
	output     = "output.weight"
	ropeFreqs  = "rope_freqs.weight"
)

// kvBytesPerValue is the size of one cached key or value element: the
// engine keeps its KV cache in float16, like llama.cpp's default cache.
const kvBytesPerValue = 2

// activationBytesPerValue is the size of one hidden-state element between
// stages: F32 on the wire, the exact form (engine.F32).
const activationBytesPerValue = 4

// Published is a model split into blobs: the manifest listing them and
// the descriptor placement plans with. Split leaves both unsigned; Sign
// signs them.
type Published struct {
	Manifest shard.Manifest
	Model    shard.Model
}

// Sign signs the manifest with key (its publisher), then sets the
// descriptor's Hash to the signed manifest's hash — which covers the
// publisher key, so it cannot be known before — and signs the descriptor.
func (p *Published) Sign(key ed25519.PrivateKey) {
	p.Manifest.Sign(key)
	p.Model.Hash = p.Manifest.Hash()
	p.Model.Sign(key)
}

// Split writes src's blobs into dir (created if missing) and returns the
// unsigned manifest and descriptor named name. Each blob is written to a
// temporary file and renamed to its hash, so a reader of dir never sees a
// partial blob. The same src gives byte-identical blobs.
//
// Split refuses a model the engine cannot run (engine.Load's checks) and
// one with a tensor that would go into no blob, naming it: a tensor the
// split does not know where to put is a format it does not understand.
func Split(src *gguf.File, dir string, name string) (Published, error) {
	if src == nil {
		return Published{}, errors.New("shardblob: split: no source file")
	}
	if err := validate.Var(name, "required,max=128,printascii"); err != nil {
		return Published{}, fmt.Errorf("shardblob: model name %q: use 1 to 128 printable ASCII characters", name)
	}
	m, err := engine.Load(src, 1)
	if err != nil {
		return Published{}, fmt.Errorf("shardblob: split: %w", err)
	}
	cfg := m.Config()
	embed, layers, head, err := assign(src, cfg.Layers)
	if err != nil {
		return Published{}, err
	}
	archMeta := gguf.Metadata{}
	for k, v := range src.Metadata {
		if k == "general.architecture" || k == "general.name" || k == "general.alignment" || strings.HasPrefix(k, cfg.Arch+".") {
			archMeta[k] = v
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Published{}, fmt.Errorf("shardblob: split: %w", err)
	}
	p := Published{
		Manifest: shard.Manifest{Name: name, Layers: make([]shard.Blob, cfg.Layers)},
		Model: shard.Model{
			Name:            name,
			Layers:          cfg.Layers,
			KVBytesPerToken: int64(2 * cfg.KVHeads * cfg.HeadDim * kvBytesPerValue), // K and V
			ActivationBytes: int64(cfg.Embd * activationBytesPerValue),
		},
	}
	if p.Manifest.Embed, err = writeBlob(dir, src.Metadata, embed, "embedding"); err != nil {
		return Published{}, err
	}
	for i, ts := range layers {
		if p.Manifest.Layers[i], err = writeBlob(dir, archMeta, ts, "layer "+strconv.Itoa(i)); err != nil {
			return Published{}, err
		}
		p.Model.LayerBytes = max(p.Model.LayerBytes, p.Manifest.Layers[i].Size)
	}
	if p.Manifest.Head, err = writeBlob(dir, archMeta, head, "head"); err != nil {
		return Published{}, err
	}
	p.Model.EmbedBytes, p.Model.HeadBytes = p.Manifest.Embed.Size, p.Manifest.Head.Size
	return p, nil
}

// assign sorts src's tensors into the embedding's, each layer's and the
// head's, keeping src's order within each.
func assign(src *gguf.File, nlayers int) (embed []gguf.WriteTensor, layers [][]gguf.WriteTensor, head []gguf.WriteTensor, err error) {
	all := src.WriteTensors()
	_, tied := src.Tensor(output)
	tied = !tied
	layers = make([][]gguf.WriteTensor, nlayers)
	var rope *gguf.WriteTensor
	for i := range all {
		t := all[i]
		switch {
		case t.Name == tokenEmbd:
			embed = append(embed, t)
			if tied {
				head = append(head, t)
			}
		case t.Name == outputNorm || t.Name == output:
			head = append(head, t)
		case t.Name == ropeFreqs:
			rope = &all[i]
		default:
			l, ok := layerOf(t.Name)
			if !ok || l >= nlayers {
				return nil, nil, nil, fmt.Errorf("shardblob: split: tensor %s belongs to no blob (neither the embedding, a layer 0..%d, nor the head)", t.Name, nlayers-1)
			}
			layers[l] = append(layers[l], t)
		}
	}
	if rope != nil {
		for i := range layers {
			layers[i] = append(layers[i], *rope)
		}
	}
	return embed, layers, head, nil
}

// layerOf reads the layer number of a "blk.<n>.<name>" tensor.
func layerOf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, ".")
	if !ok || num == "" || (len(num) > 1 && num[0] == '0') {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	return n, err == nil && n >= 0
}

// writeBlob writes one blob into dir through a temporary file, hashing it
// as it goes, and renames it to its hash.
func writeBlob(dir string, meta gguf.Metadata, ts []gguf.WriteTensor, what string) (b shard.Blob, err error) {
	tmp, err := os.CreateTemp(dir, ".blob-*.tmp")
	if err != nil {
		return b, fmt.Errorf("shardblob: write %s blob: %w", what, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(tmp, h)}
	if err := gguf.Write(cw, meta, ts); err != nil {
		return b, fmt.Errorf("shardblob: write %s blob: %w", what, err)
	}
	if err := tmp.Sync(); err != nil {
		return b, fmt.Errorf("shardblob: write %s blob: %w", what, err)
	}
	if err := tmp.Close(); err != nil {
		return b, fmt.Errorf("shardblob: write %s blob: %w", what, err)
	}
	b.Size = cw.n
	copy(b.Hash[:], h.Sum(nil))
	if err := os.Rename(tmp.Name(), filepath.Join(dir, b.Hash.String())); err != nil {
		return b, fmt.Errorf("shardblob: write %s blob: %w", what, err)
	}
	return b, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Part is a ring member's share of a model: the blobs of its layer range,
// mapped and verified, and the engine model over them.
type Part struct {
	files []*gguf.File
	model *engine.Model
	meta  gguf.Metadata
}

// Model is the engine model holding the part's layers (and the embedding
// or head when the range includes them).
func (p *Part) Model() *engine.Model { return p.model }

// Metadata is the embedding blob's full metadata (tokenizer, chat
// template, architecture) when the part holds layer 0, so the first
// stage can build its tokenizer and chat template; otherwise the
// architecture keys its layer blobs carry.
func (p *Part) Metadata() gguf.Metadata { return p.meta }

// Close unmaps the blobs; the Model must not be used afterwards.
func (p *Part) Close() error {
	var errs []error
	for _, f := range p.files {
		if err := f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	p.files = nil
	return errors.Join(errs...)
}

// Open maps from dir the blobs m lists for layers [first, last) — those
// layers, plus the embedding if first is 0 and the head if last is the
// last layer — checks each one's size and SHA-256 against m, and loads
// them. A blob missing from dir, or whose bytes no longer match m (it
// changed on disk after it was pulled), is refused with an error naming
// it; such an error wraps shard.ErrBlobMismatch when the bytes are wrong.
// workers is the engine's goroutines per matrix product (0: GOMAXPROCS).
func Open(dir string, m *shard.Manifest, first, last, workers int) (_ *Part, err error) {
	if m == nil {
		return nil, errors.New("shardblob: open: no manifest")
	}
	blobs, err := m.Blobs(first, last)
	if err != nil {
		return nil, fmt.Errorf("shardblob: open: %w", err)
	}
	var roles []string
	if first == 0 {
		roles = append(roles, "embedding")
	}
	for l := first; l < last; l++ {
		roles = append(roles, "layer "+strconv.Itoa(l))
	}
	if last == len(m.Layers) {
		roles = append(roles, "head")
	}
	p := &Part{}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	for i, b := range blobs {
		f, err := openBlob(dir, b, roles[i])
		if err != nil {
			return nil, err
		}
		p.files = append(p.files, f)
	}
	if p.model, err = engine.LoadParts(p.files, first, last, workers); err != nil {
		return nil, fmt.Errorf("shardblob: open layers [%d, %d) of %s: %w", first, last, m.Name, err)
	}
	// The embedding blob when held (it comes first); else the first blob
	// that names the architecture, where LoadParts read the shape.
	for _, f := range p.files {
		if first == 0 || f.Architecture() != "" {
			p.meta = f.Metadata
			break
		}
	}
	return p, nil
}

// openBlob maps one blob and checks it against the manifest's entry
// before anything reads its tensors.
func openBlob(dir string, b shard.Blob, role string) (*gguf.File, error) {
	path := filepath.Join(dir, b.Hash.String())
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("shardblob: the %s blob %s is missing from %s: pull it first (shard.Pull)", role, b.Hash, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("shardblob: %s blob: %w", role, err)
	}
	if st.Size() != b.Size {
		return nil, fmt.Errorf("%w: the %s blob %s is %d bytes on disk, the manifest says %d: delete it and pull it again",
			shard.ErrBlobMismatch, role, path, st.Size(), b.Size)
	}
	f, err := gguf.Open(path)
	if err != nil {
		// Bytes that do not parse are not the published blob, unless the
		// publisher published them: tell the two apart by their hash.
		if herr := hashFile(path, b, role); herr != nil {
			return nil, herr
		}
		return nil, fmt.Errorf("shardblob: the %s blob %s matches the manifest but is no GGUF file the engine reads: %w", role, b.Hash, err)
	}
	if err := checkBytes(f.Data, b, role, path); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func checkBytes(data []byte, b shard.Blob, role, path string) error {
	if int64(len(data)) != b.Size {
		return fmt.Errorf("%w: the %s blob %s is %d bytes, the manifest says %d: delete it and pull it again", shard.ErrBlobMismatch, role, path, len(data), b.Size)
	}
	return checkSum(sha256.Sum256(data), b, role, path)
}

func checkSum(got shard.Hash, b shard.Blob, role, path string) error {
	if got != b.Hash {
		return fmt.Errorf("%w: the %s blob %s hashes to %s: it changed after it was pulled; delete it and pull it again",
			shard.ErrBlobMismatch, role, path, got)
	}
	return nil
}

// hashFile streams a file through SHA-256 and compares it with b.
func hashFile(path string, b shard.Blob, role string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("shardblob: %s blob: %w", role, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("shardblob: %s blob: %w", role, err)
	}
	var got shard.Hash
	copy(got[:], h.Sum(nil))
	return checkSum(got, b, role, path)
}
