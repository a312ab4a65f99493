package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/workerd/backend/builtin"
	"github.com/c0mpute/c0mpute/workerd/identity"
	"github.com/c0mpute/c0mpute/workerd/shardblob"
)

// Variables of the dev network's ring model.
const (
	// envDevRingGGUF names a GGUF file the dev network publishes as a ring
	// model: its id is the file name without .gguf.
	envDevRingGGUF = "C0MPUTE_DEV_RING_GGUF"
	// envDevRingStages is the fewest stages its ring has (default 2), so
	// that a small file still forms a ring of several members.
	envDevRingStages = "C0MPUTE_DEV_RING_STAGES"
	// envDevRingAddr is where the model's manifest and blobs are served.
	envDevRingAddr = "C0MPUTE_DEV_RING_ADDR"
)

// devRing is the dev network's published ring model and its blob server.
type devRing struct {
	model  catalog.Model
	pub    shardblob.Published
	srv    *http.Server
	stages int
}

// publishRing publishes C0MPUTE_DEV_RING_GGUF's file under home/rings and
// serves it over HTTP, returning the catalogue entry of its model; nil
// when the variable is unset.
func publishRing(ctx context.Context, home string, price int64, log *slog.Logger) (*devRing, error) {
	path := os.Getenv(envDevRingGGUF)
	if path == "" {
		return nil, nil
	}
	stages := 2
	if v := os.Getenv(envDevRingStages); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 32 {
			return nil, fmt.Errorf("%s=%q: want the fewest stages of the ring, 1 to 32", envDevRingStages, v)
		}
		stages = n
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	id := builtin.ModelID(abs)
	// The publisher's key signs the manifest; kept, so the model hash
	// stays the same across runs and members keep their pulled blobs.
	keyFile := filepath.Join(home, "ring-publisher-key.json")
	key, err := identity.Load(keyFile)
	if errors.Is(err, os.ErrNotExist) {
		key, err = identity.Create(keyFile)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: publisher key: %w", envDevRingGGUF, err)
	}
	dir := filepath.Join(home, "rings", id)
	pub, err := shardblob.Publish(abs, dir, id, key)
	if err != nil {
		return nil, fmt.Errorf("%s: publish %s: %w", envDevRingGGUF, abs, err)
	}
	if stages > len(pub.Manifest.Layers) {
		return nil, fmt.Errorf("%s=%d: %s has only %d layers", envDevRingStages, stages, abs, len(pub.Manifest.Layers))
	}
	ln, err := net.Listen("tcp", env(envDevRingAddr, "127.0.0.1:8082"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envDevRingAddr, err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(dir)), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("ring blob server stopped", "err", err)
		}
	}()
	r := &devRing{pub: pub, srv: srv, stages: stages, model: catalog.Model{ID: id, Price: price, OwnedBy: "ring",
		Note: fmt.Sprintf("served by a ring of at least %d workers, each holding a layer range", stages),
		Ring: &catalog.RingSpec{BlobURL: "http://" + ln.Addr().String(), MinStages: stages,
			MaxStages: min(max(stages, 4), len(pub.Manifest.Layers)), ContextTokens: 4096}}}
	log.Info("ring model published", "model", id, "layers", len(pub.Manifest.Layers), "bytes", pub.Bytes(),
		"hash", pub.Model.Hash, "blobs", r.model.Ring.BlobURL)
	return r, nil
}

// Close stops the blob server.
func (r *devRing) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.srv.Shutdown(ctx)
}

// instructions say how to start the ring's members.
func (r *devRing) instructions(relayURL, envFile string) string {
	s := fmt.Sprintf("Ring model %s: %d layers, manifest %s/%s; it serves once %d members join.\n"+
		"  Start each member in its own shell (its own home and port), e.g.:\n", r.model.ID, len(r.pub.Manifest.Layers),
		r.model.Ring.BlobURL, shardblob.ManifestFile, r.stages)
	for i := range r.stages {
		s += fmt.Sprintf("    set -a; . %s; set +a; bin/workerd init --home /tmp/ring-%d >/dev/null; bin/workerd --home /tmp/ring-%d "+
			"--backend builtin --shard --shard-memory 1Gi --shard-listen 127.0.0.1:%d\n", envFile, i, i, 7420+i)
	}
	return s + "\n"
}
