package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
)

// FileName is the config file's name in the home folder.
const FileName = "workerd.json"

// setupToken stands in for a token while LoadForSetup validates the rest:
// setup may run before the contributor has one.
const setupToken = "cwt_setup-placeholder"

// LoadForSetup is Load for `workerd setup`: the same sources and checks,
// except that the worker token may be missing (setup writes the rest and
// says how to add it). It also returns the config file's path: --config,
// else <home>/workerd.json, whether or not it exists.
func LoadForSetup(args []string, getenv func(string) string) (Config, string, error) {
	f := newFlags()
	if err := f.set.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, "", ErrHelp
		}
		return Config{}, "", fmt.Errorf("%v (workerd setup --help lists the flags)", err)
	}
	home := first(*f.home, getenv(EnvHome), DefaultHome())
	path := first(*f.file, filepath.Join(home, FileName))
	placeholder := false
	if *f.token == "" && getenv(EnvToken) == "" {
		var file struct {
			Token string `json:"token"`
		}
		b, err := os.ReadFile(path)
		if err == nil {
			_ = json.Unmarshal(b, &file) // Load reports a bad file
		}
		if file.Token == "" {
			placeholder = true
			args = append(slices.Clone(args), "--token="+setupToken)
		}
	}
	c, err := Load(args, getenv)
	if err != nil {
		return Config{}, "", err
	}
	if placeholder {
		c.Token = ""
	}
	return c, path, nil
}

// VisitFlags calls fn for each of the run command's flags, so that a
// command taking the same settings (setup) can accept and list them and
// pass them on to Load or LoadForSetup.
func VisitFlags(fn func(f *flag.Flag, isBool bool)) {
	newFlags().set.VisitAll(func(f *flag.Flag) {
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		fn(f, ok && b.IsBoolFlag())
	})
}

// keys are the config file keys Load reads.
func keys() []string {
	var out []string
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// Save writes the keys named in set (file keys, e.g. "relay_url") with
// their values from c into the config file at path, the way Load reads it:
// JSON, mode 0600 (it holds the worker token), written to a temporary file
// in the same folder and renamed over the old one, so that a crash leaves
// the old file or the new one, never half of one. Keys of the existing
// file that set does not name are kept as they were; unknown returns those
// that Load does not know (it refuses them), for the caller to tell the
// user. Empty values of set's keys remove the key.
func Save(path string, c Config, set ...string) (unknown []string, err error) {
	known := keys()
	for _, k := range set {
		if !slices.Contains(known, k) {
			return nil, fmt.Errorf("save %s: %q is not a config key", path, k)
		}
	}
	doc := map[string]json.RawMessage{}
	switch b, err := os.ReadFile(path); {
	case err == nil:
		if len(bytes.TrimSpace(b)) > 0 {
			if err := json.Unmarshal(b, &doc); err != nil {
				return nil, fmt.Errorf("config file %s: %s (fix it or move it away, then run setup again)", path, describeJSON(b, err))
			}
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("config file: %w", err)
	}
	var values map[string]json.RawMessage
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("save %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &values); err != nil {
		return nil, fmt.Errorf("save %s: %w", path, err)
	}
	for _, k := range set {
		v, ok := values[k]
		if !ok || string(v) == `""` || string(v) == "null" || string(v) == "{}" || string(v) == "false" {
			delete(doc, k)
			continue
		}
		doc[k] = v
	}
	for k := range doc {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("save %s: %w", path, err)
	}
	return unknown, writeAtomic(path, append(out, '\n'))
}

// writeAtomic writes b to path through a temporary file in its folder and
// a rename, with mode 0600.
func writeAtomic(path string, b []byte) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	if _, err := tmp.Write(b); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	return nil
}
