package shardcmd

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/shardblob"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// golden compares got with testdata/<name> (-update rewrites it).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("output differs from %s (-update rewrites it):\n got: %q\nwant: %q", path, got, want)
	}
}

func TestUsageGolden(t *testing.T) {
	code, out, _ := run(t, "", "help")
	if code != ExitOK {
		t.Fatalf("help exit %d", code)
	}
	golden(t, "usage.golden", out)
}

// testModel writes a 4-layer test model as name.gguf in dir.
func testModel(t *testing.T, dir, name string) string {
	b, err := testmodel.Bytes(testmodel.Options{Seed: 31, Layers: 4, KVHeads: 2})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".gguf")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPublish: publish writes the blobs, a signed manifest and descriptor
// that decode and match, and a one-line summary (testdata/publish.golden:
// the same model and key always give the same model hash); a ring member
// opens its range from the output directory.
func TestPublish(t *testing.T) {
	dir := t.TempDir()
	src := testModel(t, dir, "tiny-4")
	out := filepath.Join(dir, "out")
	k := key(7)
	code, stdout, stderr := run(t, "", "publish", "-gguf", src, "-out", out, "-key", writeKey(t, dir, k))
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	golden(t, "publish.golden", stdout)

	mb, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := shard.DecodeManifest(mb)
	if err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	db, err := os.ReadFile(filepath.Join(out, "model.json"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := shard.DecodeModel(db)
	if err != nil {
		t.Fatalf("model.json: %v", err)
	}
	if err := m.Matches(&d); err != nil {
		t.Fatal(err)
	}
	if m.Name != "tiny-4" || m.Publisher != shard.KeyOf(k) || len(m.Layers) != 4 {
		t.Fatalf("manifest %s by %s with %d layers", m.Name, m.Publisher, len(m.Layers))
	}
	if !strings.Contains(stdout, d.Hash.String()) {
		t.Errorf("summary %q does not name the model hash %s", stdout, d.Hash)
	}
	entries, _ := os.ReadDir(out)
	if len(entries) != 4+2+2 {
		t.Errorf("%d files in the output, want 6 blobs and 2 records", len(entries))
	}
	p, err := shardblob.Open(out, &m, 2, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()

	// -name overrides the file name; the same blobs, another manifest.
	code, stdout, stderr = run(t, "", "publish", "-gguf", src, "-out", out, "-key", writeKey(t, dir, k), "-name", "other")
	if code != ExitOK || !strings.HasPrefix(stdout, "published other: 4 layers, 6 blobs,") {
		t.Fatalf("exit %d: %q %s", code, stdout, stderr)
	}
	// The blobs carry the file's own general.name, not the manifest's:
	// the same 6 blobs, the records replaced.
	if entries, _ := os.ReadDir(out); len(entries) != 4+2+2 {
		t.Errorf("%d files after a second publish, want 8", len(entries))
	}
}

func TestPublishBadInput(t *testing.T) {
	dir := t.TempDir()
	src := testModel(t, dir, "m")
	keyPath := writeKey(t, dir, key(8))
	notGGUF := filepath.Join(dir, "notes.gguf")
	os.WriteFile(notGGUF, []byte("this is not a model, just some text of enough length"), 0o644)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no -gguf", []string{"publish", "-out", dir, "-key", keyPath}, "-gguf is required"},
		{"no -out", []string{"publish", "-gguf", src, "-key", keyPath}, "-out is required"},
		{"no key", []string{"publish", "-gguf", src, "-out", dir}, "-key is required"},
		{"missing key file", []string{"publish", "-gguf", src, "-out", dir, "-key", filepath.Join(dir, "none.json")}, "none.json"},
		{"missing model", []string{"publish", "-gguf", filepath.Join(dir, "none.gguf"), "-out", dir, "-key", keyPath}, "no such file"},
		{"not a model", []string{"publish", "-gguf", notGGUF, "-out", dir, "-key", keyPath}, "not a GGUF file"},
		{"bad name", []string{"publish", "-gguf", src, "-out", dir, "-key", keyPath, "-name", "naïve"}, "printable ASCII"},
		{"stray argument", []string{"publish", "-gguf", src, "-out", dir, "-key", keyPath, "extra"}, `publish takes no arguments, got ["extra"]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, e := run(t, "", c.args...)
			if code != ExitUsage || !strings.Contains(e, c.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, e, ExitUsage, c.want)
			}
		})
	}
	// A bad flag: the flag package's message, the flags, the usage.
	code, out, e := run(t, "", "publish", "-frob")
	if code != ExitUsage || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	golden(t, "publish-bad-flag.golden", e)
}
