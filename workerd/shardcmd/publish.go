package shardcmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
	"github.com/c0mpute/c0mpute/workerd/identity"
	"github.com/c0mpute/c0mpute/workerd/shardblob"
)

// Files publish writes next to the blobs.
const (
	manifestFile = "manifest.json"
	modelFile    = "model.json"
)

// runPublish splits a GGUF model into ring blobs in -out, signs the
// manifest and the descriptor with -key and writes them there as
// manifest.json and model.json.
func runPublish(args []string, env Env) (int, error) {
	fs := newFlags("publish", env)
	src := fs.String("gguf", "", "the model file to split (GGUF, llama or qwen2)")
	out := fs.String("out", "", "directory for the blobs (named by their SHA-256), manifest.json and model.json")
	name := fs.String("name", "", "the model's name in the manifest (default: the file name without .gguf)")
	keyPath := fs.String("key", env.defaultKeyFile(), "the publisher's keypair (Solana keypair file)")
	if err := fs.Parse(args); err != nil {
		return ExitUsage, err
	}
	switch {
	case fs.NArg() > 0:
		return ExitUsage, fmt.Errorf("publish takes no arguments, got %q", fs.Args())
	case *src == "":
		return ExitUsage, errors.New("-gguf is required")
	case *out == "":
		return ExitUsage, errors.New("-out is required")
	case *keyPath == "":
		return ExitUsage, errors.New("-key is required")
	}
	if *name == "" {
		*name = strings.TrimSuffix(filepath.Base(*src), ".gguf")
	}
	// The key first: a missing key should not cost a split of a large model.
	key, err := identity.Load(*keyPath)
	if err != nil {
		return ExitUsage, err
	}
	f, err := gguf.Open(*src)
	if err != nil {
		return ExitUsage, err
	}
	defer f.Close()
	pub, err := shardblob.Split(f, *out, *name)
	if err != nil {
		return ExitUsage, err
	}
	pub.Sign(key)
	if err := pub.Manifest.Check(); err != nil {
		return ExitUsage, err
	}
	if err := pub.Model.Check(); err != nil {
		return ExitUsage, err
	}
	for _, w := range []struct {
		file string
		v    any
	}{{manifestFile, &pub.Manifest}, {modelFile, &pub.Model}} {
		if err := writeAtomic(filepath.Join(*out, w.file), w.v); err != nil {
			return ExitUsage, err
		}
	}
	total := pub.Manifest.Embed.Size + pub.Manifest.Head.Size
	for _, b := range pub.Manifest.Layers {
		total += b.Size
	}
	fmt.Fprintf(env.Stdout, "published %s: %d layers, %d blobs, %d bytes, model %s\n",
		pub.Manifest.Name, len(pub.Manifest.Layers), len(pub.Manifest.Layers)+2, total, pub.Model.Hash)
	return ExitOK, nil
}

// writeAtomic writes v as indented JSON through a temporary file and a
// rename, so a reader never sees half a record.
func writeAtomic(path string, v any) (err error) {
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
