// Package lambdabuild builds the gateway's Lambda functions: one static
// bootstrap per folder under functions/cmd, for the provided.al2023 runtime,
// each zipped on its own. Builds are reproducible: the same source and Go
// toolchain give byte-identical bootstraps and zips on any machine, so a
// deployment changes a function only when its code changed (Terraform
// compares the zips' hashes).
//
// scripts/build-lambdas is its command line.
package lambdabuild

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// FunctionsDir is where the functions' mains live, relative to the
// repository root: one folder per function.
const FunctionsDir = "functions/cmd"

// Arches are the architectures Build accepts; arm64 (Graviton) is what
// Terraform deploys: cheaper per GB-second than x86_64 for the same work.
var Arches = []string{"arm64", "amd64"}

// Flags are the go build flags. -trimpath drops the build machine's paths,
// -buildvcs=false the commit and dirty flag (a rebuild from an unchanged
// tree with other uncommitted files must not differ), -buildid= the
// content-hash id that would otherwise embed cache state, -s -w the symbol
// tables (a smaller zip is a faster cold start). lambda.norpc drops
// aws-lambda-go's net/rpc entry point, which only the retired go1.x runtime
// used.
var Flags = []string{"-trimpath", "-buildvcs=false", "-tags", "lambda.norpc", "-ldflags", "-s -w -buildid="}

// zipTime is every zip entry's modification time: a fixed instant, so the
// archive does not depend on when it was built (1980-01-01 is the earliest
// time the zip format can store).
var zipTime = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// Options say what to build.
type Options struct {
	// Root is the repository root.
	Root string
	// Arch is arm64 or amd64.
	Arch string
	// Out receives <name>/bootstrap and <name>.zip per function.
	Out string
	// Functions to build; empty builds every folder under FunctionsDir.
	Functions []string
	// Env is added to the go command's environment (tests point GOCACHE
	// elsewhere to prove a cold build gives the same bytes).
	Env []string
	// Stderr receives the go command's output; nil discards it.
	Stderr io.Writer
}

// Artifact is one built function.
type Artifact struct {
	Name      string
	Bootstrap string // path
	Zip       string // path
	// BootstrapSize and ZipSize are in bytes; ZipSHA256 is hex.
	BootstrapSize int64
	ZipSize       int64
	ZipSHA256     string
}

var validName = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// Functions lists the function folders under root/FunctionsDir, sorted.
func Functions(root string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, FunctionsDir))
	if err != nil {
		return nil, fmt.Errorf("lambdabuild: list functions: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && validName.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("lambdabuild: no function folders under %s", FunctionsDir)
	}
	return names, nil
}

// Build compiles and zips the functions. It stops at the first failure.
func Build(ctx context.Context, o Options) ([]Artifact, error) {
	if !slices.Contains(Arches, o.Arch) {
		return nil, fmt.Errorf("lambdabuild: arch %q: want one of %s", o.Arch, strings.Join(Arches, ", "))
	}
	if o.Root == "" || o.Out == "" {
		return nil, errors.New("lambdabuild: Root and Out are required")
	}
	all, err := Functions(o.Root)
	if err != nil {
		return nil, err
	}
	names := o.Functions
	if len(names) == 0 {
		names = all
	}
	for _, n := range names {
		if !slices.Contains(all, n) {
			return nil, fmt.Errorf("lambdabuild: no function %q under %s (have %s)", n, FunctionsDir, strings.Join(all, ", "))
		}
	}
	var out []Artifact
	for _, n := range names {
		a, err := buildOne(ctx, o, n)
		if err != nil {
			return out, err
		}
		out = append(out, a)
	}
	return out, nil
}

func buildOne(ctx context.Context, o Options, name string) (Artifact, error) {
	dir := filepath.Join(o.Out, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Artifact{}, fmt.Errorf("lambdabuild: %s: %w", name, err)
	}
	a := Artifact{Name: name, Bootstrap: filepath.Join(dir, "bootstrap"), Zip: filepath.Join(o.Out, name+".zip")}
	args := append([]string{"build"}, Flags...)
	args = append(args, "-o", a.Bootstrap, "./"+FunctionsDir+"/"+name)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = o.Root
	cmd.Env = append(os.Environ(), buildEnv(o.Arch)...)
	cmd.Env = append(cmd.Env, o.Env...)
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if o.Stderr != nil {
		cmd.Stdout = io.MultiWriter(&stderr, o.Stderr)
		cmd.Stderr = cmd.Stdout
	}
	if err := cmd.Run(); err != nil {
		return a, fmt.Errorf("lambdabuild: go build %s (%s): %w\n%s", name, o.Arch, err, stderr.String())
	}
	bin, err := os.ReadFile(a.Bootstrap)
	if err != nil {
		return a, fmt.Errorf("lambdabuild: %s: %w", name, err)
	}
	var buf bytes.Buffer
	if err := Zip(&buf, bin); err != nil {
		return a, fmt.Errorf("lambdabuild: zip %s: %w", name, err)
	}
	if err := os.WriteFile(a.Zip, buf.Bytes(), 0o644); err != nil {
		return a, fmt.Errorf("lambdabuild: %s: %w", name, err)
	}
	sum := sha256.Sum256(buf.Bytes())
	a.BootstrapSize, a.ZipSize, a.ZipSHA256 = int64(len(bin)), int64(buf.Len()), hex.EncodeToString(sum[:])
	return a, nil
}

// buildEnv pins everything that changes the output besides the source and
// the toolchain: a static binary (provided.al2023 has a libc, but a static
// one needs none), Linux, the architecture and its baseline feature level
// (Graviton 2 is ARMv8.2; v8.0 runs on every Graviton; GOAMD64=v1 on every
// x86_64).
func buildEnv(arch string) []string {
	return []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch, "GOARM64=v8.0", "GOAMD64=v1", "GOEXPERIMENT="}
}

// Zip writes a Lambda deployment package holding one executable file,
// bootstrap, with fixed metadata: the same binary gives the same bytes.
func Zip(w io.Writer, bootstrap []byte) error {
	zw := zip.NewWriter(w)
	h := &zip.FileHeader{Name: "bootstrap", Method: zip.Deflate, Modified: zipTime}
	// Unix mode bits travel in the external attributes; Lambda runs
	// bootstrap only if they make it executable.
	h.SetMode(0o755)
	f, err := zw.CreateHeader(h)
	if err != nil {
		return err
	}
	if _, err := f.Write(bootstrap); err != nil {
		return err
	}
	return zw.Close()
}
