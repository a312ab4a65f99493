package testenv

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// VerbatimCopies checks that every file under root is byte for byte the
// file at the same path in module, which go.mod must require at version
// (the version the copies were taken from), and returns how many files it
// compared. Test fixtures copied from another module (captured AWS events
// from aws-lambda-go) stay provably unedited this way.
func VerbatimCopies(t testing.TB, module, version, root string) int {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		Missing(t, "go command", err.Error())
	}
	out, err := exec.Command(goCmd, "list", "-m", "-json", module).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", module, err)
	}
	var mod struct{ Version, Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	if mod.Version != version {
		t.Fatalf("go.mod requires %s %s; the copies under %s are from %s: copy them again and update the README beside them",
			module, mod.Version, root, version)
	}
	if mod.Dir == "" {
		Missing(t, module+" in the module cache", "go mod download "+module)
	}
	n := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		ours, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		theirs, err := os.ReadFile(filepath.Join(mod.Dir, rel))
		if err != nil {
			return err
		}
		if !bytes.Equal(ours, theirs) {
			t.Errorf("%s differs from %s@%s/%s", path, module, mod.Version, filepath.ToSlash(rel))
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
