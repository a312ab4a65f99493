package servicecmd

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLinuxLifecycle: install writes the unit (testdata/workerd.service.golden)
// and enables it, status then reports it running, uninstall stops it and
// removes the unit, status reports it gone, and a second uninstall is a
// no-op that succeeds.
func TestLinuxLifecycle(t *testing.T) {
	f := newFixture(t, "linux")
	f.env["XDG_CONFIG_HOME"] = filepath.Join(f.userHome, ".config") // the default, spelled out
	f.env["C0MPUTE_MODELS"] = `c0mpute-pro=qwen3:8b,odd="50%" $HOME \ back`
	f.env["C0MPUTE_WORKER_TOKEN"] = fileToken // the same as the file's: not carried
	f.env["C0MPUTE_HOME"] = "/elsewhere"      // --home wins, and is not carried
	f.env["OLLAMA_HOST"] = "127.0.0.1:11500"
	f.env["UNRELATED"] = "not carried"

	code, out, errOut := f.run("install", "--home", f.home)
	if code != ExitOK {
		t.Fatalf("install: exit %d\n%s%s", code, out, errOut)
	}
	golden(t, "install-linux.golden", out)
	golden(t, "workerd.service.golden", f.normalise(f.read(f.unitPath())))
	if m := mode(t, f.unitPath()); m != 0o644 {
		t.Errorf("unit mode %o, want 644", m)
	}
	if exists(filepath.Join(f.home, envFileName)) {
		t.Error("a secrets file was written though workerd.json holds the token")
	}
	if unit := f.read(f.unitPath()); strings.Contains(unit, fileToken) || strings.Contains(unit, "UNRELATED") || strings.Contains(unit, "/elsewhere") {
		t.Errorf("unit carries what it should not:\n%s", unit)
	}
	want := []string{"systemctl --user daemon-reload", "systemctl --user enable --now workerd.service"}
	if calls := f.fake.took(); !slices.Equal(calls, want) {
		t.Errorf("install ran %q, want %q", calls, want)
	}

	code, out, _ = f.run("status")
	if code != ExitOK {
		t.Errorf("status after install: exit %d\n%s", code, out)
	}
	golden(t, "status-linux.golden", out)
	f.fake.took()

	// Installing again replaces the unit and restarts the service on it.
	if code, out, errOut := f.run("install", "--home", f.home); code != ExitOK {
		t.Fatalf("reinstall: exit %d\n%s%s", code, out, errOut)
	}
	want = append(want, "systemctl --user restart workerd.service")
	if calls := f.fake.took(); !slices.Equal(calls, want) {
		t.Errorf("reinstall ran %q, want %q", calls, want)
	}

	code, out, errOut = f.run("uninstall")
	if code != ExitOK {
		t.Fatalf("uninstall: exit %d\n%s%s", code, out, errOut)
	}
	golden(t, "uninstall-linux.golden", out)
	want = []string{"systemctl --user disable --now workerd.service", "systemctl --user daemon-reload"}
	if calls := f.fake.took(); !slices.Equal(calls, want) {
		t.Errorf("uninstall ran %q, want %q", calls, want)
	}
	if exists(f.unitPath()) {
		t.Error("uninstall left the unit")
	}
	if !exists(filepath.Join(f.home, "workerd.json")) || !exists(filepath.Join(f.home, "worker-key.json")) {
		t.Error("uninstall removed the user's own files")
	}

	code, out, _ = f.run("status")
	if code != ExitNotRunning || !strings.HasPrefix(out, "installed: no") {
		t.Errorf("status after uninstall: exit %d\n%s", code, out)
	}
	code, out, _ = f.run("uninstall")
	if code != ExitOK || !strings.Contains(out, "not installed") {
		t.Errorf("second uninstall: exit %d\n%s", code, out)
	}
	if calls := f.fake.took(); len(calls) > 0 {
		t.Errorf("status and uninstall of nothing ran %q", calls)
	}
}

// TestDarwinLifecycle: the same on macOS: the plist
// (testdata/network.c0mpute.workerd.plist.golden), launchctl bootstrap and
// bootout in the gui domain, the log folder.
func TestDarwinLifecycle(t *testing.T) {
	f := newFixture(t, "darwin")
	f.env["C0MPUTE_MODELS"] = `c0mpute-pro=qwen3:8b,odd="50%" <&> \ back`

	code, out, errOut := f.run("install")
	if code != ExitOK {
		t.Fatalf("install: exit %d\n%s%s", code, out, errOut)
	}
	golden(t, "install-darwin.golden", out)
	golden(t, "network.c0mpute.workerd.plist.golden", f.normalise(f.read(f.plistPath())))
	if m := mode(t, f.plistPath()); m != 0o644 {
		t.Errorf("plist mode %o, want 644 (it holds no secret)", m)
	}
	if st, err := os.Stat(filepath.Join(f.home, "logs")); err != nil || !st.IsDir() {
		t.Errorf("log folder: %v", err)
	}
	want := []string{"launchctl print gui/501/network.c0mpute.workerd", "launchctl bootstrap gui/501 " + f.plistPath()}
	if calls := f.fake.took(); !slices.Equal(calls, want) {
		t.Errorf("install ran %q, want %q", calls, want)
	}

	code, out, _ = f.run("status")
	if code != ExitOK {
		t.Errorf("status after install: exit %d\n%s", code, out)
	}
	golden(t, "status-darwin.golden", out)
	f.fake.took()

	// Installing again unloads the old agent first.
	if code, out, errOut := f.run("install"); code != ExitOK {
		t.Fatalf("reinstall: exit %d\n%s%s", code, out, errOut)
	}
	want = []string{"launchctl print gui/501/network.c0mpute.workerd", "launchctl bootout gui/501/network.c0mpute.workerd",
		"launchctl bootstrap gui/501 " + f.plistPath()}
	if calls := f.fake.took(); !slices.Equal(calls, want) {
		t.Errorf("reinstall ran %q, want %q", calls, want)
	}

	code, out, errOut = f.run("uninstall")
	if code != ExitOK {
		t.Fatalf("uninstall: exit %d\n%s%s", code, out, errOut)
	}
	want = []string{"launchctl print gui/501/network.c0mpute.workerd", "launchctl bootout gui/501/network.c0mpute.workerd"}
	if calls := f.fake.took(); !slices.Equal(calls, want) {
		t.Errorf("uninstall ran %q, want %q", calls, want)
	}
	if exists(f.plistPath()) {
		t.Error("uninstall left the plist")
	}
	code, out, _ = f.run("status")
	if code != ExitNotRunning || !strings.HasPrefix(out, "installed: no") {
		t.Errorf("status after uninstall: exit %d\n%s", code, out)
	}
	code, out, _ = f.run("uninstall")
	if code != ExitOK || !strings.Contains(out, "not installed") {
		t.Errorf("second uninstall: exit %d\n%s", code, out)
	}
}

// TestStatusNotRunning: an installed service that is stopped, or an agent
// that is not loaded, is exit 3 with the state named.
func TestStatusNotRunning(t *testing.T) {
	f := newFixture(t, "linux")
	if code, out, errOut := f.run("install"); code != ExitOK {
		t.Fatalf("install: %d\n%s%s", code, out, errOut)
	}
	f.fake.active = false
	code, out, _ := f.run("status")
	if code != ExitNotRunning || !strings.Contains(out, "running:   no (inactive/dead, unit loaded)") {
		t.Errorf("linux: exit %d\n%s", code, out)
	}

	d := newFixture(t, "darwin")
	if code, out, errOut := d.run("install"); code != ExitOK {
		t.Fatalf("install: %d\n%s%s", code, out, errOut)
	}
	d.fake.loaded = false
	code, out, _ = d.run("status")
	if code != ExitNotRunning || !strings.Contains(out, "loaded:    no") || !strings.Contains(out, "logs:      $TMP/user home/.c0mpute/logs/workerd.log") {
		t.Errorf("darwin: exit %d\n%s", code, out)
	}
}

// TestDryRun: --dry-run prints the files and the commands
// (testdata/dryrun-*.golden), writes nothing and runs nothing.
func TestDryRun(t *testing.T) {
	for _, goos := range []string{"linux", "darwin"} {
		t.Run(goos, func(t *testing.T) {
			f := newFixture(t, goos)
			f.env["C0MPUTE_BACKEND_KEY"] = "sk-secret-backend-key" // only here: a secrets file, hidden
			before := tree(t, f.root)
			code, out, errOut := f.run("install", "--dry-run")
			if code != ExitOK || errOut != "" {
				t.Fatalf("install --dry-run: exit %d\n%s", code, errOut)
			}
			if strings.Contains(out, "sk-secret-backend-key") {
				t.Error("dry run printed a secret")
			}
			golden(t, "dryrun-install-"+goos+".golden", out)
			if after := tree(t, f.root); !slices.Equal(before, after) {
				t.Errorf("dry run changed files: %q → %q", before, after)
			}
			if calls := f.fake.took(); len(calls) > 0 {
				t.Errorf("dry run ran %q", calls)
			}

			// And uninstall --dry-run of an installed service.
			if code, _, errOut := f.run("install"); code != ExitOK {
				t.Fatalf("install: %s", errOut)
			}
			f.fake.took()
			before = tree(t, f.root)
			code, out, errOut = f.run("uninstall", "--dry-run")
			if code != ExitOK || errOut != "" {
				t.Fatalf("uninstall --dry-run: exit %d\n%s", code, errOut)
			}
			golden(t, "dryrun-uninstall-"+goos+".golden", out)
			if after := tree(t, f.root); !slices.Equal(before, after) {
				t.Errorf("dry run changed files: %q → %q", before, after)
			}
			if calls := f.fake.took(); len(calls) > 0 {
				t.Errorf("dry run ran %q", calls)
			}
		})
	}
}

// tree lists the files under dir with their modes and sizes.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprint(p, " ", info.Mode(), " ", info.Size()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSecrets: the worker token and the backend key never land in the
// world-readable unit or plist. Held by workerd.json (alone, or with the
// same value in the environment), they are not carried; only in the
// environment (or different there), they go to a 0600 file (Linux) or
// make the plist 0600 (macOS), and install says so.
func TestSecrets(t *testing.T) {
	cases := []struct {
		name    string
		fileTok bool   // workerd.json holds fileToken
		envTok  string // C0MPUTE_WORKER_TOKEN
		envKey  string // C0MPUTE_BACKEND_KEY
		carried []string
	}{
		{name: "token in the file only", fileTok: true},
		{name: "the same token in both", fileTok: true, envTok: fileToken},
		{name: "token in the environment only", envTok: "cwt_fromtheenv", carried: []string{"C0MPUTE_WORKER_TOKEN='cwt_fromtheenv'"}},
		{name: "a different token in the environment", fileTok: true, envTok: "cwt_fromtheenv",
			carried: []string{"C0MPUTE_WORKER_TOKEN='cwt_fromtheenv'"}},
		{name: "backend key in the environment", fileTok: true, envKey: `k'ey"$x`, carried: []string{`C0MPUTE_BACKEND_KEY="k'ey\"\$x"`}},
	}
	for _, c := range cases {
		for _, goos := range []string{"linux", "darwin"} {
			t.Run(c.name+"/"+goos, func(t *testing.T) {
				f := newFixture(t, goos)
				cfg := map[string]any{"relay_url": "wss://relay.c0mpute.network/ws"}
				if c.fileTok {
					cfg["token"] = fileToken
				}
				f.writeConfig(cfg)
				for k, v := range map[string]string{"C0MPUTE_WORKER_TOKEN": c.envTok, "C0MPUTE_BACKEND_KEY": c.envKey} {
					if v != "" {
						f.env[k] = v
					}
				}
				code, out, errOut := f.run("install")
				if code != ExitOK {
					t.Fatalf("install: exit %d\n%s%s", code, out, errOut)
				}
				secrets := []string{fileToken, "cwt_fromtheenv", c.envKey}
				envFile := filepath.Join(f.home, envFileName)
				switch goos {
				case "linux":
					unit := f.read(f.unitPath())
					for _, s := range secrets {
						if s != "" && strings.Contains(unit, s) {
							t.Errorf("the unit holds the secret %q", s)
						}
					}
					if len(c.carried) == 0 {
						if exists(envFile) || strings.Contains(unit, "EnvironmentFile=") {
							t.Error("a secrets file though none is needed")
						}
						return
					}
					if m := mode(t, envFile); m != 0o600 {
						t.Errorf("secrets file mode %o, want 600", m)
					}
					if !strings.Contains(unit, "EnvironmentFile="+envFile+"\n") {
						t.Errorf("the unit does not read %s:\n%s", envFile, unit)
					}
					lines := strings.Split(strings.TrimSpace(f.read(envFile)), "\n")
					if got := slices.DeleteFunc(lines, func(l string) bool { return strings.HasPrefix(l, "#") }); !slices.Equal(got, c.carried) {
						t.Errorf("secrets file holds %q, want %q", got, c.carried)
					}
					if !strings.Contains(out, "which only you can read") {
						t.Errorf("install does not say where the secret went:\n%s", out)
					}
					// uninstall removes the secrets file too.
					if code, _, errOut := f.run("uninstall"); code != ExitOK || exists(envFile) {
						t.Errorf("uninstall: exit %d, secrets file left: %v\n%s", code, exists(envFile), errOut)
					}
				case "darwin":
					plist := f.read(f.plistPath())
					want := 0o644
					if len(c.carried) > 0 {
						want = 0o600
						if !strings.Contains(out, "only you can read") {
							t.Errorf("install does not say where the secret went:\n%s", out)
						}
					}
					if m := mode(t, f.plistPath()); m != os.FileMode(want) {
						t.Errorf("plist mode %o, want %o", m, want)
					}
					if strings.Contains(plist, fileToken) {
						t.Error("the plist holds the token workerd.json has")
					}
				}
			})
		}
	}
}

// TestRelativePathsAndLinks: the service runs the binary a symlink points
// at, with a relative key path from the environment made absolute, since
// the service runs in the state folder, not here.
func TestRelativePathsAndLinks(t *testing.T) {
	f := newFixture(t, "linux")
	link := filepath.Join(f.root, "workerd-link")
	if err := os.Symlink(exePath, link); err != nil {
		t.Fatal(err)
	}
	f.exe = func() (string, error) { return link, nil }
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, filepath.Join(f.home, "worker-key.json"))
	if err != nil {
		t.Fatal(err)
	}
	f.env["C0MPUTE_WORKER_KEY"] = rel
	code, out, errOut := f.run("install")
	if code != ExitOK {
		t.Fatalf("install: %d\n%s%s", code, out, errOut)
	}
	unit := f.normalise(f.read(f.unitPath()))
	for _, want := range []string{`ExecStart="$EXE" "run"`, `Environment="C0MPUTE_WORKER_KEY=$TMP/user home/.c0mpute/worker-key.json"`} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %s:\n%s", want, unit)
		}
	}
	if !strings.Contains(out, "note: C0MPUTE_WORKER_KEY="+f.normalise(rel)+" is relative") {
		t.Errorf("install does not note the relative path:\n%s", out)
	}
}

// TestPlistStructure reads the installed plist back with an XML decoder
// and checks what launchd acts on: label, command line, environment,
// restart on failure only, start at load, exit timeout past the drain,
// logs.
func TestPlistStructure(t *testing.T) {
	f := newFixture(t, "darwin")
	f.env["C0MPUTE_MODELS"] = `a=b,odd="<&>" ]]> 50%`
	f.env["C0MPUTE_BACKEND_KEY"] = "sk-x"
	if code, out, errOut := f.run("install"); code != ExitOK {
		t.Fatalf("install: %d\n%s%s", code, out, errOut)
	}
	b, err := os.ReadFile(f.plistPath())
	if err != nil {
		t.Fatal(err)
	}
	doc, err := decodePlist(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	args, _ := doc["ProgramArguments"].([]any)
	keep, _ := doc["KeepAlive"].(map[string]any)
	env, _ := doc["EnvironmentVariables"].(map[string]any)
	checks := []struct {
		what string
		ok   bool
	}{
		{"Label", doc["Label"] == label},
		{"ProgramArguments", slices.Equal(args, []any{exePath, "run", "--home", f.home})},
		{"WorkingDirectory", doc["WorkingDirectory"] == f.home},
		{"RunAtLoad", doc["RunAtLoad"] == true},
		{"KeepAlive.SuccessfulExit", len(keep) == 1 && keep["SuccessfulExit"] == false},
		{"ExitTimeOut past the drain", doc["ExitTimeOut"] == int64(stopTimeout.Seconds()) && stopTimeout > drainTimeout},
		{"ThrottleInterval", doc["ThrottleInterval"] == int64(restartDelay.Seconds())},
		{"StandardOutPath", doc["StandardOutPath"] == filepath.Join(f.home, "logs", "workerd.log")},
		{"StandardErrorPath", doc["StandardErrorPath"] == doc["StandardOutPath"]},
		{"EnvironmentVariables", len(env) == 2 && env["C0MPUTE_MODELS"] == `a=b,odd="<&>" ]]> 50%` && env["C0MPUTE_BACKEND_KEY"] == "sk-x"},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s is wrong in\n%s", c.what, b)
		}
	}
	if len(doc) != 10 {
		t.Errorf("plist has %d keys, want 10: %v", len(doc), doc)
	}
}

// TestDecodePlistRejects: the reader status and the tests rely on refuses
// what is not a well-formed property list.
func TestDecodePlistRejects(t *testing.T) {
	for _, s := range []string{
		``,
		`<notplist/>`,
		`<plist><array></array></plist>`,
		`<plist><dict><string>x</string></dict></plist>`,
		`<plist><dict><key>a</key></dict></plist>`,
		`<plist><dict><key>a</key><key>b</key></dict></plist>`,
		`<plist><dict><key>a</key><integer>x</integer></dict></plist>`,
		`<plist><dict><key>a</key><string>1</string><key>a</key><string>2</string></dict></plist>`,
		`<plist><dict><key>a</key><date>2020</date></dict></plist>`,
		`<plist><dict><key>a</key><string>unclosed</dict></plist>`,
	} {
		if doc, err := decodePlist(strings.NewReader(s)); err == nil {
			t.Errorf("%q decodes to %v", s, doc)
		}
	}
}

// TestReinstallDropsSecretsFile: once workerd.json holds the token, a new
// install removes the secrets file the previous one wrote, and the unit no
// longer reads it.
func TestReinstallDropsSecretsFile(t *testing.T) {
	f := newFixture(t, "linux")
	f.writeConfig(map[string]any{"relay_url": "wss://relay.c0mpute.network/ws"})
	f.env["C0MPUTE_WORKER_TOKEN"] = fileToken
	if code, out, errOut := f.run("install"); code != ExitOK {
		t.Fatalf("install: %d\n%s%s", code, out, errOut)
	}
	envFile := filepath.Join(f.home, envFileName)
	if !exists(envFile) {
		t.Fatal("no secrets file after the first install")
	}
	f.writeConfig(map[string]any{"relay_url": "wss://relay.c0mpute.network/ws", "token": fileToken})
	code, out, errOut := f.run("install")
	if code != ExitOK {
		t.Fatalf("reinstall: %d\n%s%s", code, out, errOut)
	}
	if exists(envFile) || strings.Contains(f.read(f.unitPath()), "EnvironmentFile=") {
		t.Errorf("the secrets file outlived the reinstall:\n%s", out)
	}
}
