package api

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every error code the API can answer with is a known metric dimension:
// one missing would be counted as "other". The codes are the Code fields
// of oaiwire.Error literals in this package and in oaiwire.
func TestErrorCodesAreKnown(t *testing.T) {
	code := regexp.MustCompile(`Code:\s*"([a-z_]+)"`)
	var files []string
	for _, dir := range []string{".", filepath.Join("..", "oaiwire")} {
		matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, matches...)
	}
	found := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range code.FindAllSubmatch(b, -1) {
			found[string(m[1])] = true
			if !errorCodes[string(m[1])] {
				t.Errorf("%s: error code %q is not in errorCodes", f, m[1])
			}
		}
	}
	if len(found) < 10 {
		t.Fatalf("found only %d codes: the pattern no longer matches the sources", len(found))
	}
	for c := range errorCodes {
		if !found[c] {
			t.Errorf("errorCodes lists %q, which nothing answers with", c)
		}
	}
	if got := codeDim("made-up " + strings.Repeat("x", 10)); got != otherDim {
		t.Errorf("codeDim of an unknown code = %q, want %q", got, otherDim)
	}
}
