package lambdabuild

import (
	"archive/zip"
	"bytes"
	"context"
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("repository root: %v", err)
	}
	return dir
}

func TestZipIsDeterministicAndExecutable(t *testing.T) {
	payload := bytes.Repeat([]byte("\x7fELF bootstrap "), 1000)
	var a, b bytes.Buffer
	if err := Zip(&a, payload); err != nil {
		t.Fatal(err)
	}
	if err := Zip(&b, payload); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two zips of the same bootstrap differ")
	}
	zr, err := zip.NewReader(bytes.NewReader(a.Bytes()), int64(a.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if len(zr.File) != 1 || zr.File[0].Name != "bootstrap" {
		t.Fatalf("entries %v, want only bootstrap", zr.File)
	}
	f := zr.File[0]
	if f.Mode().Perm() != 0o755 || !f.Mode().IsRegular() {
		t.Fatalf("mode %v, want -rwxr-xr-x", f.Mode())
	}
	if !f.Modified.Equal(zipTime) {
		t.Fatalf("modified %v, want %v", f.Modified, zipTime)
	}
	rc, err := f.Open()
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("content round trip: %v", err)
	}
	var c bytes.Buffer
	if err := Zip(&c, append(payload, '!')); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.Bytes(), c.Bytes()) {
		t.Fatal("different bootstraps gave the same zip")
	}
}

func TestBuildRejects(t *testing.T) {
	root := repoRoot(t)
	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"unknown arch", Options{Root: root, Out: t.TempDir(), Arch: "386"}, "arch"},
		{"unknown function", Options{Root: root, Out: t.TempDir(), Arch: "arm64", Functions: []string{"nope"}}, `no function "nope"`},
		{"no root", Options{Out: t.TempDir(), Arch: "arm64"}, "Root"},
		{"no functions dir", Options{Root: t.TempDir(), Out: t.TempDir(), Arch: "arm64"}, "list functions"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Build(context.Background(), c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one mentioning %q", err, c.want)
			}
		})
	}
}

// TestBuildReproducible builds every function twice into different folders
// and requires identical zips, then checks each bootstrap is a static ELF
// with no build id and no path of the build machine in it. It builds for
// this machine's architecture, which the emulator tests (infra/lambdatest)
// build too, so the compile is shared; TestBuildArm64 covers what
// Terraform deploys.
func TestBuildReproducible(t *testing.T) {
	root := repoRoot(t)
	ctx := context.Background()
	arch := runtime.GOARCH
	first, err := Build(ctx, Options{Root: root, Arch: arch, Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	names, _ := Functions(root)
	if len(first) != len(names) {
		t.Fatalf("built %d functions, want %d (%v)", len(first), len(names), names)
	}
	second, err := Build(ctx, Options{Root: root, Arch: arch, Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range first {
		b := second[i]
		if a.ZipSHA256 != b.ZipSHA256 {
			t.Errorf("%s: zip differs between builds: %s vs %s", a.Name, a.ZipSHA256, b.ZipSHA256)
		}
		checkBootstrap(t, a.Bootstrap, machines[arch], root)
	}
}

var machines = map[string]elf.Machine{"arm64": elf.EM_AARCH64, "amd64": elf.EM_X86_64}

// TestBuildArm64 builds every function as Terraform deploys it: static
// arm64 ELF binaries. Cross-compiling the AWS SDK is the slow part; -short
// skips it.
func TestBuildArm64(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles every function for arm64; -short skips it")
	}
	root := repoRoot(t)
	arts, err := Build(context.Background(), Options{Root: root, Arch: "arm64", Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range arts {
		// Figures for terraform/README.md.
		t.Logf("%s: bootstrap %d bytes, zip %d bytes, sha256 %s", a.Name, a.BootstrapSize, a.ZipSize, a.ZipSHA256)
		checkBootstrap(t, a.Bootstrap, elf.EM_AARCH64, root)
	}
}

func checkBootstrap(t *testing.T, path string, machine elf.Machine, root string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	if f.Machine != machine {
		t.Errorf("%s: machine %v, want %v", path, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s: dynamically linked (%v)", path, p.Type)
		}
	}
	if s := f.Section(".note.go.buildid"); s != nil {
		data, _ := s.Data()
		// The note is 16 bytes of header plus the id; "-buildid=" leaves
		// it empty.
		if len(bytes.TrimRight(data[min(len(data), 16):], "\x00")) != 0 {
			t.Errorf("%s: has a build id %q", path, data)
		}
	}
	bin, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(bin, []byte(root)) {
		t.Errorf("%s: contains the build machine's path %s (-trimpath missing?)", path, root)
	}
	if home := os.Getenv("HOME"); home != "" && home != "/" && bytes.Contains(bin, []byte(home+"/go/pkg/mod")) {
		t.Errorf("%s: contains the module cache path", path)
	}
}
