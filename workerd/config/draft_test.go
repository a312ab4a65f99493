package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/config"
	"github.com/c0mpute/c0mpute/workerd/speculate"
)

// writeDraftModel writes a real (tiny, random-weight) GGUF model at path,
// the kind of file --draft names.
func writeDraftModel(t *testing.T, path string) {
	t.Helper()
	if err := testmodel.WriteFile(path, testmodel.Options{Seed: 7, Name: "draft"}); err != nil {
		t.Fatal(err)
	}
}

// TestDraft: --draft (or C0MPUTE_DRAFT, or "draft" in the config file,
// in rising priority file < env < flag) is parsed into the drafter of
// each ring model; unset is lookup for every model; a draft model file
// that opens as a GGUF file is accepted, per model or as the default.
func TestDraft(t *testing.T) {
	home := t.TempDir()
	model := filepath.Join(home, "draft.gguf")
	writeDraftModel(t, model)
	shard := []string{"--home", home, "--relay", "ws://r/", "--token", "cwt_x", "--backend", "builtin",
		"--shard", "--shard-memory", "8Gi", "--shard-listen", "127.0.0.1:7420"}
	lookup := speculate.Spec{Mode: speculate.ModeLookup}
	none := speculate.Spec{Mode: speculate.ModeNone}
	file := speculate.Spec{Mode: speculate.ModeModel, Path: model}
	for _, tc := range []struct {
		name     string
		flag     string // --draft, when set
		env      string // C0MPUTE_DRAFT, when set
		fileBody string // <home>/workerd.json, when set
		want     map[string]speculate.Spec
	}{
		{"unset", "", "", "", map[string]speculate.Spec{"qwen": lookup, "llama": lookup}},
		{"lookup", "lookup", "", "", map[string]speculate.Spec{"qwen": lookup, "llama": lookup}},
		{"none", "none", "", "", map[string]speculate.Spec{"qwen": none, "llama": none}},
		{"a draft model for every ring", model, "", "", map[string]speculate.Spec{"qwen": file, "llama": file}},
		{"per model, default lookup", "qwen=" + model + ",llama=none", "", "", map[string]speculate.Spec{"qwen": file, "llama": none, "other": lookup}},
		{"per model with a default", "none,qwen=" + model, "", "", map[string]speculate.Spec{"qwen": file, "llama": none}},
		{"from the environment", "", "none", "", map[string]speculate.Spec{"qwen": none}},
		{"from the file", "", "", `{"draft": "qwen=none"}`, map[string]speculate.Spec{"qwen": none, "llama": lookup}},
		{"env over file", "", "none", `{"draft": "lookup"}`, map[string]speculate.Spec{"qwen": none}},
		{"flag over env and file", "qwen=none", "none", `{"draft": "none"}`, map[string]speculate.Spec{"qwen": none, "llama": lookup}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfgFile := filepath.Join(home, "workerd.json")
			os.Remove(cfgFile)
			if tc.fileBody != "" {
				writeFile(t, cfgFile, tc.fileBody)
			}
			args := append([]string{}, shard...)
			if tc.flag != "" {
				args = append(args, "--draft", tc.flag)
			}
			c, err := config.Load(args, env(map[string]string{config.EnvDraft: tc.env}))
			if err != nil {
				t.Fatal(err)
			}
			for m, want := range tc.want {
				if got := c.Draft.For(m); got != want {
					t.Errorf("drafter for %s: %+v, want %+v", m, got, want)
				}
			}
		})
	}
}

// TestDraftSaved: the drafter is kept in the config file as written
// (key "draft"), and loads back the same.
func TestDraftSaved(t *testing.T) {
	home := t.TempDir()
	model := filepath.Join(home, "draft.gguf")
	writeDraftModel(t, model)
	args := []string{"--home", home, "--relay", "ws://r/", "--token", "cwt_x", "--backend", "builtin",
		"--shard", "--shard-memory", "8Gi", "--shard-listen", "127.0.0.1:7420", "--draft", "none,qwen=" + model}
	c, err := config.Load(args, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(home, config.FileName)
	if _, err := config.Save(path, c, "draft", "shard", "shard_memory", "shard_listen", "backend"); err != nil {
		t.Fatal(err)
	}
	back, err := config.Load(args[:6], env(nil)) // home, relay and token: the rest from the file
	if err != nil {
		t.Fatal(err)
	}
	if back.DraftSpec != c.DraftSpec {
		t.Errorf("draft from the file %q, want %q", back.DraftSpec, c.DraftSpec)
	}
	for _, m := range []string{"qwen", "llama"} {
		if back.Draft.For(m) != c.Draft.For(m) {
			t.Errorf("drafter for %s from the file: %+v, want %+v", m, back.Draft.For(m), c.Draft.For(m))
		}
	}
}
