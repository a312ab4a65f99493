package setup

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/config"
)

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// TestHelp: --help, -h and -help print the usage, setup's flags and the
// run flags to standard output and succeed (testdata/help.golden).
func TestHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "-help"} {
		code, out, errOut := runMain([]string{arg}, Env{})
		if code != ExitOK || errOut != "" {
			t.Fatalf("%s: exit %d, stderr %q", arg, code, errOut)
		}
		// The run settings' part follows workerd/config, which others
		// change: the golden file holds setup's own part, and every run
		// flag must be listed after it.
		own, run, ok := strings.Cut(out, "\nsettings, as for workerd run (written to workerd.json):\n")
		if !ok {
			t.Fatalf("%s: no settings part:\n%s", arg, out)
		}
		golden(t, "help.golden", own+"\n")
		config.VisitFlags(func(f *flag.Flag, _ bool) {
			if !strings.Contains(run, "  -"+f.Name+" ") && !strings.Contains(run, "  -"+f.Name+"\n") {
				t.Errorf("help lacks the run flag -%s", f.Name)
			}
		})
	}
}

// TestErrors: every message setup ends with, and its exit code
// (testdata/errors.golden; temporary paths read $TMP). None needs Ollama
// except where it is absent on purpose; the gateway is the real API's
// recorded answers.
func TestErrors(t *testing.T) {
	api := recordedGateway(t, "")
	dead := "http://127.0.0.1:1"
	base := []string{"--relay", "ws://127.0.0.1:9/", "--api-url", api, "--backend-url", dead}
	machine := cpuMachine(16<<20, 8<<20)
	badHome := t.TempDir()
	os.WriteFile(filepath.Join(badHome, "workerd.json"), []byte(`{"relay_url": "ws://r/", "colour": "blue"}`), 0o600)
	cases := []struct {
		name  string
		args  []string
		stdin string
		env   Env
	}{
		{name: "unknown flag", args: []string{"--bogus"}},
		{name: "an argument", args: []string{"now"}},
		{name: "bench tokens out of range", args: []string{"--bench-tokens", "0"}},
		{name: "no relay", args: []string{"--api-url", api}},
		{name: "bad token", args: append([]string{"--token", "abc"}, base...)},
		{name: "not ollama", args: append([]string{"--backend", "openai"}, base...)},
		{name: "no API URL", args: []string{"--relay", "ws://127.0.0.1:9/"}},
		{name: "unknown key in workerd.json", args: []string{"--home", badHome}},
		{name: "gateway down", args: []string{"--relay", "ws://127.0.0.1:9/", "--api-url", dead + "/v1"}},
		{name: "no such model", args: append([]string{"--model", "nope"}, base...)},
		{name: "model without Ollama", args: append([]string{"--model", "scripted"}, base...)},
		{name: "model too big", args: append([]string{"--model", "huge-chat"}, base...)},
		{name: "nothing fits", args: append([]string{"--yes"}, base...), env: Env{Detect: cpuMachine(512, 512)}},
		{name: "no answer", args: base},
		{name: "three wrong answers", args: base, stdin: "x\n0\n2\n"},
		{name: "Ollama down", args: append([]string{"--yes"}, base...)},
	}
	var b strings.Builder
	for _, tc := range cases {
		env := tc.env
		if env.Detect == nil {
			env.Detect = machine
		}
		env.Runner, env.GOOS, env.Stdin = noTools{}, "linux", strings.NewReader(tc.stdin)
		home := t.TempDir()
		args := tc.args
		if !strings.Contains(strings.Join(args, " "), "--home") {
			args = append([]string{"--home", home}, args...)
		}
		code, _, errOut := runMain(args, env)
		if code == ExitOK {
			t.Errorf("%s: succeeded", tc.name)
		}
		errOut = strings.ReplaceAll(errOut, api, "$API")
		errOut = strings.ReplaceAll(errOut, os.TempDir(), "$TMP")
		errOut = replaceTemp(errOut)
		// The list of keys is workerd/config's, which others extend.
		errOut = regexp.MustCompile(`; the keys are [a-z_, ]+`).ReplaceAllString(errOut, "; the keys are …")
		fmt.Fprintf(&b, "# %s\nexit %d\n%s\n", tc.name, code, errOut)
	}
	golden(t, "errors.golden", b.String())
}

// replaceTemp makes t.TempDir paths ($TMP/TestErrors123/001) stable.
func replaceTemp(s string) string {
	var out strings.Builder
	for {
		i := strings.Index(s, "$TMP/TestErrors")
		if i < 0 {
			out.WriteString(s)
			return out.String()
		}
		out.WriteString(s[:i] + "$TMP/TestErrors")
		s = s[i+len("$TMP/TestErrors"):]
		j := strings.IndexAny(s, "/ \n")
		if j < 0 {
			j = len(s)
		}
		s = s[j:]
		if strings.HasPrefix(s, "/") && len(s) >= 4 {
			s = "/N" + s[4:]
		}
	}
}
