package relay

import (
	"strings"
	"testing"
)

func TestParseConnectionPath(t *testing.T) {
	tests := []struct {
		path string
		id   string
		ok   bool
	}{
		{"/@connections/TWegAcC4EowCHnA=", "TWegAcC4EowCHnA=", true},
		{"/prod/@connections/TWegAcC4EowCHnA=", "TWegAcC4EowCHnA=", true},
		{"/a/b/@connections/x/", "x", true},
		{"/@connections/", "", false},
		{"/@connections//", "", false},
		{"/@connections/a/b", "", false},
		{"/@connections", "", false},
		{"/", "", false},
		{"/connections/abc", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		id, ok := parseConnectionPath(tt.path)
		if id != tt.id || ok != tt.ok {
			t.Errorf("parseConnectionPath(%q) = %q, %v; want %q, %v", tt.path, id, ok, tt.id, tt.ok)
		}
	}
}

func TestValidID(t *testing.T) {
	for range 1000 {
		if id := newID(); !validID(id) {
			t.Fatalf("newID() = %q is not valid", id)
		}
	}
	for _, id := range []string{"", "short=", "TWegAcC4EowCHnA", "TWegAcC4EowCHnAA", "TWegAcC4Eow/HnA=", "TWegAcC4Eow+HnA=", "TWegAcC4EowCHnA==", "TWégAcC4EowCHn="} {
		if validID(id) {
			t.Errorf("validID(%q) = true", id)
		}
	}
}

// FuzzConnectionPath checks the management path parser on any path: it
// never panics, an id it returns is exactly the last path segment after
// /@connections/, and every id without a slash parses back from its path.
func FuzzConnectionPath(f *testing.F) {
	for _, s := range []string{
		"/@connections/TWegAcC4EowCHnA=", "/prod/@connections/abc", "/@connections/", "/@connections/a/b",
		"/@connections/@connections/x", "//@connections//x", "/x/@connections/%2F", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		id, ok := parseConnectionPath(path)
		if !ok {
			if id != "" {
				t.Fatalf("no match but id %q", id)
			}
		} else {
			if id == "" || strings.Contains(id, "/") {
				t.Fatalf("parseConnectionPath(%q) = %q", path, id)
			}
			if !strings.HasSuffix(path, connectionsSegment+id) && !strings.HasSuffix(path, connectionsSegment+id+"/") {
				t.Fatalf("parseConnectionPath(%q) = %q, not the path's last segment", path, id)
			}
		}
		if path != "" && !strings.Contains(path, "/") {
			for _, prefix := range []string{"", "/stage"} {
				if got, ok := parseConnectionPath(prefix + connectionsSegment + path); !ok || got != path {
					t.Fatalf("id %q parsed back as %q, %v", path, got, ok)
				}
			}
		}
		_ = validID(id)
	})
}
