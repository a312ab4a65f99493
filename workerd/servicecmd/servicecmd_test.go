package servicecmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/identity"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// exePath is a real built binary outside any go-build folder, with a space
// in its path: a copy of this test binary, which systemd-analyze verify
// needs to find executable.
var exePath string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "servicecmd")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if exePath, err = copyTestBinary(filepath.Join(dir, "bin dir", "workerd")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}())
}

func copyTestBinary(dst string) (string, error) {
	src, err := os.Executable()
	if err != nil {
		return "", err
	}
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return "", err
	}
	return filepath.EvalSymlinks(dst)
}

// fixture is a user: a temporary HOME (with a space in it), a workerd
// state folder with a key and a workerd.json, an environment and the
// stand-in service manager.
type fixture struct {
	t        *testing.T
	root     string
	userHome string
	home     string
	goos     string
	env      map[string]string
	exe      func() (string, error)
	fake     *fakeManager
}

// fileToken is the worker token fixture's workerd.json holds.
const fileToken = "cwt_fromthefile"

func newFixture(t *testing.T, goos string) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{t: t, root: root, userHome: filepath.Join(root, "user home"), goos: goos, fake: newFake(t),
		exe: func() (string, error) { return exePath, nil }}
	f.home = filepath.Join(f.userHome, ".c0mpute")
	f.env = map[string]string{"HOME": f.userHome, "USER": "alice", "PATH": "/usr/bin"}
	f.writeConfig(map[string]any{"relay_url": "wss://relay.c0mpute.network/ws", "token": fileToken})
	if _, err := identity.Create(filepath.Join(f.home, "worker-key.json")); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) writeConfig(cfg map[string]any) {
	f.t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.MkdirAll(f.home, 0o700); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.home, "workerd.json"), b, 0o600); err != nil {
		f.t.Fatal(err)
	}
}

// run runs `workerd service args…` and returns the exit code and the
// normalised stdout and stderr.
func (f *fixture) run(args ...string) (int, string, string) {
	f.t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(args, Env{
		Stdout: &stdout, Stderr: &stderr,
		Getenv: func(k string) string { return f.env[k] },
		Environ: func() []string {
			var kv []string
			for k, v := range f.env {
				kv = append(kv, k+"="+v)
			}
			return kv
		},
		GOOS: f.goos, Executable: f.exe, Getuid: func() int { return 501 }, Runner: f.fake,
	})
	return code, f.normalise(stdout.String()), f.normalise(stderr.String())
}

// normalise replaces the temporary paths, which differ per run.
func (f *fixture) normalise(s string) string {
	s = strings.ReplaceAll(s, exePath, "$EXE")
	return strings.ReplaceAll(s, f.root, "$TMP")
}

func (f *fixture) unitPath() string {
	return filepath.Join(f.userHome, ".config", "systemd", "user", "workerd.service")
}

func (f *fixture) plistPath() string {
	return filepath.Join(f.userHome, "Library", "LaunchAgents", "network.c0mpute.workerd.plist")
}

func (f *fixture) read(path string) string {
	f.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b)
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// golden compares got with testdata/name; -update rewrites it.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("differs from %s (go test ./workerd/servicecmd -update rewrites it):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// TestHelp: every way of asking prints the usage (testdata/help.golden) on
// stdout and exits 0.
func TestHelp(t *testing.T) {
	f := newFixture(t, "linux")
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"install", "-h"}, {"uninstall", "--help"}, {"status", "-help"}} {
		code, out, errOut := f.run(args...)
		if code != ExitOK || errOut != "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
		golden(t, "help.golden", out)
	}
	if calls := f.fake.took(); len(calls) > 0 {
		t.Errorf("help ran %v", calls)
	}
}

// TestErrors: each failure exits with its code and a message that says
// what is wrong and what to do (testdata/errors.golden), and leaves no
// service file behind.
func TestErrors(t *testing.T) {
	type tc struct {
		name  string
		goos  string
		setup func(f *fixture)
		args  []string
		code  int
	}
	busDown := Result{ExitCode: 1, Output: []byte("Failed to connect to bus: No medium found\n")}
	cases := []tc{
		{name: "no command", args: nil, code: ExitUsage},
		{name: "unknown command", args: []string{"start"}, code: ExitUsage},
		{name: "unknown flag", args: []string{"install", "--relay", "wss://x"}, code: ExitUsage},
		{name: "home on uninstall", args: []string{"uninstall", "--home", "/x"}, code: ExitUsage},
		{name: "dry-run on status", args: []string{"status", "--dry-run"}, code: ExitUsage},
		{name: "extra argument", args: []string{"install", "now"}, code: ExitUsage},
		{name: "extra argument to status", args: []string{"status", "now"}, code: ExitUsage},
		{name: "unsupported system", goos: "windows", args: []string{"install"}, code: ExitFailed},
		{name: "unsupported system, status", goos: "freebsd", args: []string{"status"}, code: ExitFailed},
		{name: "HOME unset", setup: func(f *fixture) { delete(f.env, "HOME") }, args: []string{"install"}, code: ExitFailed},
		{name: "HOME relative", setup: func(f *fixture) { f.env["HOME"] = "home" }, args: []string{"status"}, code: ExitFailed},
		{name: "configuration does not load", setup: func(f *fixture) { f.writeConfig(map[string]any{"token": fileToken}) },
			args: []string{"install"}, code: ExitFailed},
		{name: "configuration file broken", setup: func(f *fixture) {
			os.WriteFile(filepath.Join(f.home, "workerd.json"), []byte(`{"relay_url": `), 0o600)
		}, args: []string{"install", "--dry-run"}, code: ExitFailed},
		{name: "bad value in the environment", setup: func(f *fixture) { f.env["C0MPUTE_BACKEND"] = "vllm" },
			args: []string{"install"}, code: ExitFailed},
		{name: "no key file", setup: func(f *fixture) { os.Remove(filepath.Join(f.home, "worker-key.json")) },
			args: []string{"install"}, code: ExitFailed},
		{name: "key file not a keypair", setup: func(f *fixture) {
			os.WriteFile(filepath.Join(f.home, "worker-key.json"), []byte(`[1,2,3]`), 0o600)
		}, args: []string{"install"}, code: ExitFailed},
		{name: "builtin model file missing", setup: func(f *fixture) {
			f.env["C0MPUTE_BACKEND"] = "builtin"
			f.env["C0MPUTE_GGUF"] = filepath.Join(f.root, "missing.gguf")
		}, args: []string{"install"}, code: ExitFailed},
		{name: "go run binary", setup: func(f *fixture) {
			dir := filepath.Join(f.root, "go-build123", "b001", "exe")
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, "workerd"), []byte("x"), 0o755)
			f.exe = func() (string, error) { return filepath.Join(dir, "workerd"), nil }
		}, args: []string{"install"}, code: ExitFailed},
		{name: "binary not found", setup: func(f *fixture) {
			f.exe = func() (string, error) { return "", errors.New("readlink /proc/self/exe: no such file or directory") }
		}, args: []string{"install"}, code: ExitFailed},
		{name: "control character in a variable", setup: func(f *fixture) { f.env["C0MPUTE_LOG_LEVEL"] = "info\n" },
			args: []string{"install"}, code: ExitFailed},
		{name: "variable name systemd cannot carry", setup: func(f *fixture) { f.env["C0MPUTE_A-B"] = "1" },
			args: []string{"install"}, code: ExitFailed},
		{name: "home ending in a space", args: []string{"install", "--home", "HOME/.c0mpute "}, setup: func(f *fixture) {
			f.home += " "
			f.writeConfig(map[string]any{"relay_url": "wss://relay.c0mpute.network/ws", "token": fileToken})
			identity.Create(filepath.Join(f.home, "worker-key.json"))
		}, code: ExitFailed},
		{name: "systemctl fails", setup: func(f *fixture) {
			f.fake.fail["systemctl --user daemon-reload"] = busDown
		}, args: []string{"install"}, code: ExitFailed},
		{name: "systemctl missing", setup: func(f *fixture) {
			f.fake.err["systemctl --user daemon-reload"] = errors.New(`exec: "systemctl": executable file not found in $PATH`)
		}, args: []string{"install"}, code: ExitFailed},
		{name: "uninstall cannot stop", setup: func(f *fixture) {
			os.MkdirAll(filepath.Dir(f.unitPath()), 0o755)
			os.WriteFile(f.unitPath(), []byte("[Service]\n"), 0o644)
			f.fake.fail["systemctl --user disable --now workerd.service"] = busDown
		}, args: []string{"uninstall"}, code: ExitFailed},
		{name: "status without a bus", setup: func(f *fixture) {
			os.MkdirAll(filepath.Dir(f.unitPath()), 0o755)
			os.WriteFile(f.unitPath(), []byte("[Service]\n"), 0o644)
			f.fake.fail["systemctl --user show workerd.service --property=LoadState,UnitFileState,ActiveState,SubState,MainPID,NRestarts"] = busDown
		}, args: []string{"status"}, code: ExitFailed},
		{name: "launchctl bootstrap fails", goos: "darwin", setup: func(f *fixture) {
			f.fake.fail["launchctl bootstrap gui/501 "+f.plistPath()] = Result{ExitCode: 5, Output: []byte("Bootstrap failed: 5: Input/output error\n")}
		}, args: []string{"install"}, code: ExitFailed},
	}
	var got strings.Builder
	for _, c := range cases {
		goos := c.goos
		if goos == "" {
			goos = "linux"
		}
		f := newFixture(t, goos)
		if c.setup != nil {
			c.setup(f)
		}
		args := slices.Clone(c.args)
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "HOME", f.userHome)
		}
		code, out, errOut := f.run(args...)
		if code != c.code {
			t.Errorf("%s: exit %d, want %d (stderr %q)", c.name, code, c.code, errOut)
		}
		if errOut == "" {
			t.Errorf("%s: no message on stderr", c.name)
		}
		if c.code == ExitUsage && out != "" {
			t.Errorf("%s: usage error wrote to stdout: %q", c.name, out)
		}
		fmt.Fprintf(&got, "# %s (exit %d)\n%s\n", c.name, code, errOut)
		switch c.name {
		case "systemctl fails", "systemctl missing", "uninstall cannot stop", "status without a bus", "launchctl bootstrap fails":
			// These fail after the files are written (or with them in
			// place): the message says so through the command.
		default:
			if exists(f.unitPath()) || exists(f.plistPath()) {
				t.Errorf("%s: a service file was written", c.name)
			}
		}
	}
	golden(t, "errors.golden", got.String())
}
