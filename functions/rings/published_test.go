package rings_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/identity"
	"github.com/c0mpute/c0mpute/workerd/shardblob"
	"github.com/c0mpute/c0mpute/workerd/shardcmd"
)

// A model published by `workerd shard publish` (a generated 4-layer GGUF,
// split into signed blobs) loads, and its ring forms: every member pulls
// the blobs of its range from the assignment's blob URL (re-hashed by
// shard.Pull) and opens its part of the model from them (shardblob.Open)
// before it accepts.
func TestPublishedByWorkerd(t *testing.T) {
	dir := t.TempDir()
	gguf := filepath.Join(dir, "tiny.gguf")
	must(t, testmodel.WriteFile(gguf, testmodel.Options{Seed: 7, Layers: 4}))
	keyFile := filepath.Join(dir, "publisher.json")
	if _, err := identity.Create(keyFile); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "published")
	var stdout, stderr bytes.Buffer
	if code := shardcmd.Main([]string{"publish", "-gguf", gguf, "-out", out, "-key", keyFile, "-name", ringModel},
		shardcmd.Env{Stdout: &stdout, Stderr: &stderr}); code != shardcmd.ExitOK {
		t.Fatalf("workerd shard publish: exit %d: %s", code, stderr.String())
	}
	raw, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	must(t, err)
	man, err := shard.DecodeManifest(raw)
	must(t, err)
	srv := httptest.NewServer(http.FileServer(http.Dir(out)))
	t.Cleanup(srv.Close)

	fx := newFixtureAt(t, srv.URL, man.Hash(), catalog.RingSpec{MinStages: 2, MaxStages: 4, ContextTokens: 256})
	for i := range 3 {
		fx.join(i, 4<<20, int64(100+10*i))
	}
	assigns := fx.probe()
	if len(assigns) != 2 {
		t.Fatalf("%d members assigned, want 2 stages", len(assigns))
	}
	for conn, a := range assigns {
		if a.Manifest.Hash() != man.Hash() || a.BlobURL != srv.URL {
			t.Fatalf("assignment to %s: manifest %s at %s", conn, a.Manifest.Hash(), a.BlobURL)
		}
		node := fx.members[conn].Node
		for _, m := range a.Plan.Members {
			if m.Node != node {
				continue
			}
			blobs, err := a.Manifest.Blobs(m.LayerStart, m.LayerEnd)
			must(t, err)
			cache := filepath.Join(dir, "member-"+conn)
			if err := shard.Pull(t.Context(), shard.HTTPSource{Base: a.BlobURL}, cache, blobs); err != nil {
				t.Fatalf("%s pulls layers [%d,%d): %v", conn, m.LayerStart, m.LayerEnd, err)
			}
			part, err := shardblob.Open(cache, &a.Manifest, m.LayerStart, m.LayerEnd, 1)
			if err != nil {
				t.Fatalf("%s opens layers [%d,%d): %v", conn, m.LayerStart, m.LayerEnd, err)
			}
			must(t, part.Close())
		}
	}
	fx.accept(assigns)
	if serves := only[relaymsg.RingServe](fx, fx.takeAll()); len(serves) != 2 || !fx.state().Serving {
		t.Fatalf("ring_serve to %d, state %+v", len(serves), fx.state())
	}
}
