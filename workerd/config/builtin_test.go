package config_test

import (
	"path/filepath"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/config"
)

// TestBuiltin: the builtin backend needs a GGUF file and no URL; the file
// comes from the config file, the environment or the flag, in rising
// priority.
func TestBuiltin(t *testing.T) {
	home := t.TempDir()
	writeFile(t, filepath.Join(home, "workerd.json"), `{"backend":"builtin","gguf":"/m/file.gguf"}`)
	base := []string{"--home", home, "--relay", "ws://r/", "--token", "cwt_x"}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"file", nil, nil, "/m/file.gguf"},
		{"env", nil, map[string]string{config.EnvGGUF: "/m/env.gguf"}, "/m/env.gguf"},
		{"flag", []string{"--gguf", "/m/flag.gguf"}, map[string]string{config.EnvGGUF: "/m/env.gguf"}, "/m/flag.gguf"},
	} {
		cfg, err := config.Load(append(append([]string{}, base...), c.args...), env(c.env))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cfg.Backend != "builtin" || cfg.GGUF != c.want || cfg.BackendURL != "" {
			t.Errorf("%s: backend %q gguf %q url %q, want builtin %q and no URL", c.name, cfg.Backend, cfg.GGUF, cfg.BackendURL, c.want)
		}
	}
}
