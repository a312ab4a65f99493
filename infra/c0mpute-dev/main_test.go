package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/infra/testmodel"
)

func newCatalog(t *testing.T) *catalog.Catalog {
	t.Helper()
	c, err := catalog.New(catalog.Default())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestBuiltinModel(t *testing.T) {
	home := t.TempDir()
	t.Setenv(envDevGGUF, "")

	// Ollama reachable, no file named: nothing for the built-in engine.
	if path, err := builtinModel(newCatalog(t), home, false); err != nil || path != "" {
		t.Fatalf("with Ollama: %q, %v; want none", path, err)
	}

	// No Ollama: the demo model, generated once, labelled in the catalogue.
	cat := newCatalog(t)
	path, err := builtinModel(cat, home, true)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := cat.Resolve(testmodel.DemoModelID)
	if !ok || m.Note == "" {
		t.Fatalf("demo model in catalogue: %+v, %v; want it, with a note", m, ok)
	}
	first, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := builtinModel(newCatalog(t), home, true); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.Stat(path); !again.ModTime().Equal(first.ModTime()) {
		t.Error("a restart regenerated the demo model")
	}

	// A named file is served under its name, Ollama or not.
	named := filepath.Join(t.TempDir(), "my-model.gguf")
	if err := testmodel.WriteFile(named, testmodel.Demo()); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envDevGGUF, named)
	cat = newCatalog(t)
	if path, err := builtinModel(cat, home, true); err != nil || path != named {
		t.Fatalf("named file: %q, %v", path, err)
	}
	if m, ok := cat.Resolve("my-model"); !ok || m.Note != "" {
		t.Fatalf("named model in catalogue: %+v, %v", m, ok)
	}
	if _, ok := cat.Resolve(testmodel.DemoModelID); ok {
		t.Error("the demo model is offered next to a named file")
	}
	t.Setenv(envDevGGUF, filepath.Join(t.TempDir(), "missing.gguf"))
	if _, err := builtinModel(newCatalog(t), home, false); err == nil {
		t.Error("a missing file was accepted")
	}
}

func TestLimitsFromEnv(t *testing.T) {
	def := api.DefaultLimits()
	tests := []struct {
		name         string
		env          map[string]string
		rate, acct   int64
		wantErrNamed string
	}{
		{"defaults", nil, def.RatePerMinute, def.AccountRatePerMinute, ""},
		{"key rate", map[string]string{envRate: "600"}, 600, def.AccountRatePerMinute, ""},
		{"both", map[string]string{envRate: "600", envAccountRate: "1200"}, 600, 1200, ""},
		{"zero", map[string]string{envRate: "0"}, 0, 0, envRate},
		{"negative", map[string]string{envAccountRate: "-5"}, 0, 0, envAccountRate},
		{"not a number", map[string]string{envRate: "lots"}, 0, 0, envRate},
		{"fraction", map[string]string{envAccountRate: "1.5"}, 0, 0, envAccountRate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := limitsFromEnv(func(k string) string { return tt.env[k] })
			if tt.wantErrNamed != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrNamed) {
					t.Fatalf("error %v, want one naming %s", err, tt.wantErrNamed)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.RatePerMinute != tt.rate || got.AccountRatePerMinute != tt.acct {
				t.Fatalf("rates %d/%d, want %d/%d", got.RatePerMinute, got.AccountRatePerMinute, tt.rate, tt.acct)
			}
			want := def
			want.RatePerMinute, want.AccountRatePerMinute = tt.rate, tt.acct
			if got != want {
				t.Fatalf("other limits changed: %+v", got)
			}
		})
	}
}

func TestServedModel(t *testing.T) {
	for _, c := range []struct {
		ollama []string
		gguf   string
		want   string
	}{
		{[]string{"llama3.2:latest", "qwen3:8b"}, "", "llama3.2"},
		{[]string{"qwen3:8b"}, "/m/tiny.gguf", "qwen3:8b"},
		{nil, "/home/.c0mpute/demo-random-weights.gguf", "demo-random-weights"},
		{nil, "", ""},
	} {
		if got := servedModel(c.ollama, c.gguf); got != c.want {
			t.Errorf("servedModel(%v, %q) = %q, want %q", c.ollama, c.gguf, got, c.want)
		}
	}
}

// TestSecondInstanceSaysWhy: a second dev network on the same state folder
// is refused with what to do, not a store error.
func TestSecondInstanceSaysWhy(t *testing.T) {
	t.Setenv("C0MPUTE_STORE", "embedded")
	home := t.TempDir()
	st, _, err := openStore(context.Background(), home)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, _, err = openStore(context.Background(), home)
	if err == nil || !strings.Contains(err.Error(), "another scripts/dev (or a keeper) is running on the state folder "+home) {
		t.Fatalf("second open: %v", err)
	}
}
