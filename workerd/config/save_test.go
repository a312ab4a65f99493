package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestSave: a new file is 0600 and loads; an existing one keeps its other
// keys, and unknown keys are kept and reported; empty values remove keys;
// no temporary file is left behind.
func TestSave(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", FileName)
	c := Config{RelayURL: "ws://127.0.0.1:1/", Token: "cwt_abc", Backend: "ollama", BackendURL: "http://127.0.0.1:11434",
		Models: map[string]string{"c0mpute-pro": "c0mpute-pro-tuned"}}
	unknown, err := Save(path, c, "relay_url", "token", "backend", "backend_url", "models")
	if err != nil || unknown != nil {
		t.Fatalf("save: %v %v", unknown, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode: %v %v", fi.Mode(), err)
	}
	got, err := Load([]string{"--home", dir, "--config", path}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if got.RelayURL != c.RelayURL || got.Token != c.Token || got.BackendURL != c.BackendURL || !reflect.DeepEqual(got.Models, c.Models) {
		t.Errorf("loaded %+v", got)
	}

	if err := os.WriteFile(path, []byte(`{"log_level": "debug", "token": "cwt_old", "colour": "blue"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c.Token = ""
	unknown, err = Save(path, c, "relay_url", "token")
	if err != nil || !reflect.DeepEqual(unknown, []string{"colour"}) {
		t.Fatalf("save over: %v %v", unknown, err)
	}
	b, _ := os.ReadFile(path)
	want := "{\n  \"colour\": \"blue\",\n  \"log_level\": \"debug\",\n  \"relay_url\": \"ws://127.0.0.1:1/\"\n}\n"
	if string(b) != want {
		t.Errorf("file:\n%s\nwant\n%s", b, want)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("folder holds %d entries, want only the file", len(entries))
	}

	if _, err := Save(path, c, "relay"); err == nil || !strings.Contains(err.Error(), `"relay" is not a config key`) {
		t.Errorf("bad key: %v", err)
	}
	os.WriteFile(path, []byte(`{"relay_url": `), 0o600)
	if _, err := Save(path, c, "relay_url"); err == nil || !strings.Contains(err.Error(), "line 1, column 14") {
		t.Errorf("bad file: %v", err)
	}
}

// TestLoadForSetup: a missing token is no error; a token from the file is
// kept; other settings are checked as Load checks them.
func TestLoadForSetup(t *testing.T) {
	dir := t.TempDir()
	env := func(k string) string { return map[string]string{EnvHome: dir}[k] }
	c, path, err := LoadForSetup([]string{"--relay", "ws://r/"}, env)
	if err != nil || c.Token != "" || path != filepath.Join(dir, FileName) || c.RelayURL != "ws://r/" {
		t.Fatalf("%+v %s %v", c, path, err)
	}
	os.WriteFile(path, []byte(`{"token": "cwt_file"}`), 0o600)
	if c, _, err = LoadForSetup([]string{"--relay", "ws://r/"}, env); err != nil || c.Token != "cwt_file" {
		t.Fatalf("%+v %v", c, err)
	}
	if _, _, err = LoadForSetup([]string{"--relay", "ws://r/", "--token", "abc"}, env); err == nil || !strings.Contains(err.Error(), `is "abc": want a worker token`) {
		t.Errorf("bad token: %v", err)
	}
	if _, _, err = LoadForSetup(nil, env); err == nil || !strings.Contains(err.Error(), "--relay (or C0MPUTE_RELAY_URL") {
		t.Errorf("no relay: %v", err)
	}
}
