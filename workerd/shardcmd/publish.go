package shardcmd

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/c0mpute/c0mpute/workerd/identity"
	"github.com/c0mpute/c0mpute/workerd/shardblob"
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
	pub, err := shardblob.Publish(*src, *out, *name, key)
	if err != nil {
		return ExitUsage, err
	}
	fmt.Fprintf(env.Stdout, "published %s: %d layers, %d blobs, %d bytes, model %s\n",
		pub.Manifest.Name, len(pub.Manifest.Layers), len(pub.Manifest.Layers)+2, pub.Bytes(), pub.Model.Hash)
	return ExitOK, nil
}
