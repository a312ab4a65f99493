package shardblob

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

// The signed records Publish writes beside the blobs: what a gateway's
// catalogue points at (its ring blob_url) and members fetch.
const (
	ManifestFile = "manifest.json"
	ModelFile    = "model.json"
)

// Publish splits the GGUF file at path into dir, signs the manifest and
// the descriptor with key, and writes them to dir as ManifestFile and
// ModelFile: dir is then what a blob server serves for the model.
func Publish(path, dir, name string, key ed25519.PrivateKey) (Published, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return Published{}, err
	}
	defer f.Close()
	pub, err := Split(f, dir, name)
	if err != nil {
		return Published{}, err
	}
	pub.Sign(key)
	if err := pub.Manifest.Check(); err != nil {
		return Published{}, err
	}
	if err := pub.Model.Check(); err != nil {
		return Published{}, err
	}
	for _, w := range []struct {
		file string
		v    any
	}{{ManifestFile, &pub.Manifest}, {ModelFile, &pub.Model}} {
		if err := writeJSON(filepath.Join(dir, w.file), w.v); err != nil {
			return Published{}, err
		}
	}
	return pub, nil
}

// Bytes is the total size of the published blobs.
func (p *Published) Bytes() int64 {
	total := p.Manifest.Embed.Size + p.Manifest.Head.Size
	for _, b := range p.Manifest.Layers {
		total += b.Size
	}
	return total
}

// writeJSON writes v as indented JSON through a temporary file and a
// rename, so a reader never sees half a record.
func writeJSON(path string, v any) (err error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
