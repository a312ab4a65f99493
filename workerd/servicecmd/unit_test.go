package servicecmd

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/workerd/identity"
)

// TestQuoteWord: systemd.syntax(7) quoting: backslash and double quote
// escaped, % doubled, $ doubled in command lines only; control
// characters refused.
func TestQuoteWord(t *testing.T) {
	cases := []struct {
		in, word, cmd string
	}{
		{"plain", `"plain"`, `"plain"`},
		{"/home/a b/.c0mpute", `"/home/a b/.c0mpute"`, `"/home/a b/.c0mpute"`},
		{`a"b`, `"a\"b"`, `"a\"b"`},
		{`a\b`, `"a\\b"`, `"a\\b"`},
		{"50%n", `"50%%n"`, `"50%%n"`},
		{"$HOME ${X}", `"$HOME ${X}"`, `"$$HOME $${X}"`},
		{"it's", `"it's"`, `"it's"`},
		{"ünïcode ✓", `"ünïcode ✓"`, `"ünïcode ✓"`},
		{"", `""`, `""`},
	}
	for _, c := range cases {
		if got, err := quoteWord(c.in, false); err != nil || got != c.word {
			t.Errorf("quoteWord(%q, false) = %s, %v; want %s", c.in, got, err, c.word)
		}
		if got, err := quoteWord(c.in, true); err != nil || got != c.cmd {
			t.Errorf("quoteWord(%q, true) = %s, %v; want %s", c.in, got, err, c.cmd)
		}
	}
	for _, bad := range []string{"a\nb", "tab\t", "nul\x00", "\x7f", "bad utf8 \xff"} {
		if got, err := quoteWord(bad, true); err == nil {
			t.Errorf("quoteWord(%q) = %s, want an error", bad, got)
		}
	}
	if got, err := unitPath("/a b/50%"); err != nil || got != "/a b/50%%" {
		t.Errorf("unitPath = %q, %v", got, err)
	}
	for _, bad := range []string{" /lead", "/trail ", "/new\nline"} {
		if got, err := unitPath(bad); err == nil {
			t.Errorf("unitPath(%q) = %q, want an error", bad, got)
		}
	}
}

// TestSystemdAnalyzeVerify runs systemd's own checker on the unit install
// writes, for a state folder whose path has a space, a % and a $, with
// values that need quoting and a secrets file. Any line it prints about
// the unit fails the test. A broken unit is checked first, to show the
// checker reports problems here at all.
func TestSystemdAnalyzeVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	verify := func(unit string) (string, error) {
		cmd := exec.Command(analyze, "--user", "verify", unit)
		// A user manager needs a runtime folder; verify only loads units.
		cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+t.TempDir(), "SYSTEMD_LOG_COLOR=0")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	broken := filepath.Join(t.TempDir(), "workerd.service")
	if err := os.WriteFile(broken, []byte("[Service]\nExecStart=\"/nonexistent/workerd\" \"run\"\nEnvironment=\"A=b\\qc\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := verify(broken); err == nil || !strings.Contains(out, "workerd.service") {
		t.Skipf("systemd-analyze verify does not report a broken unit here (%v): %s", err, out)
	}

	f := newFixture(t, "linux")
	f.home = filepath.Join(f.userHome, `state 50% $x "q"`)
	f.writeConfig(map[string]any{"relay_url": "wss://relay.c0mpute.network/ws", "token": fileToken})
	if _, err := identity.Create(filepath.Join(f.home, "worker-key.json")); err != nil {
		t.Fatal(err)
	}
	f.env["C0MPUTE_MODELS"] = `c0mpute-pro=qwen3:8b,odd="50%" $HOME \ back 'q'`
	f.env["C0MPUTE_BACKEND_KEY"] = `sk-"50%"`
	f.env["C0MPUTE_LOG_LEVEL"] = "debug"
	if code, out, errOut := f.run("install", "--home", f.home); code != ExitOK {
		t.Fatalf("install: %d\n%s%s", code, out, errOut)
	}
	unit := f.read(f.unitPath())
	if !strings.Contains(unit, "EnvironmentFile=") {
		t.Fatalf("no secrets file in\n%s", unit)
	}
	out, err := verify(f.unitPath())
	if err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify: %v\n%s\nunit:\n%s", err, out, unit)
	}
	// uninstall finds the secrets file through the unit's escaped path.
	envFile := filepath.Join(f.home, envFileName)
	if !exists(envFile) {
		t.Fatalf("no %s", envFile)
	}
	if code, out, errOut := f.run("uninstall"); code != ExitOK || exists(envFile) {
		t.Errorf("uninstall: exit %d, %s left: %v\n%s%s", code, envFile, exists(envFile), out, errOut)
	}
}

// TestStopTimeoutPastDrain: the drain time here is the agent's (read from
// its source, where it is unexported), and the service managers wait
// longer than it before they kill.
func TestStopTimeoutPastDrain(t *testing.T) {
	src := filepath.Join("..", "agent", "agent.go")
	file, err := parser.ParseFile(token.NewFileSet(), src, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var agentDrain time.Duration
	ast.Inspect(file, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "drainTimeout" || len(vs.Values) != 1 {
			return true
		}
		agentDrain, err = duration(vs.Values[0])
		return false
	})
	if err != nil || agentDrain == 0 {
		t.Fatalf("drainTimeout in %s: %v (is it still N * time.Unit?)", src, err)
	}
	if agentDrain != drainTimeout {
		t.Errorf("the agent drains for %s, this package says %s: update drainTimeout", agentDrain, drainTimeout)
	}
	if stopTimeout <= agentDrain {
		t.Errorf("stopTimeout %s is not past the drain %s", stopTimeout, agentDrain)
	}
	if commandTimeout <= stopTimeout {
		t.Errorf("commandTimeout %s does not wait out a stop (%s)", commandTimeout, stopTimeout)
	}
}

// duration evaluates N * time.Unit (or time.Unit * N, or a bare unit).
func duration(e ast.Expr) (time.Duration, error) {
	units := map[string]time.Duration{"Nanosecond": time.Nanosecond, "Microsecond": time.Microsecond,
		"Millisecond": time.Millisecond, "Second": time.Second, "Minute": time.Minute, "Hour": time.Hour}
	switch e := e.(type) {
	case *ast.BinaryExpr:
		if e.Op != token.MUL {
			break
		}
		a, err := duration(e.X)
		if err != nil {
			return 0, err
		}
		b, err := duration(e.Y)
		if err != nil {
			return 0, err
		}
		return a * b, nil
	case *ast.BasicLit:
		if e.Kind == token.INT {
			n, err := strconv.ParseInt(e.Value, 0, 64)
			return time.Duration(n), err
		}
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && x.Name == "time" {
			if u, ok := units[e.Sel.Name]; ok {
				return u, nil
			}
		}
	case *ast.ParenExpr:
		return duration(e.X)
	}
	return 0, errSyntax
}

var errSyntax = errors.New("not N * time.Unit")

// TestExecRunner runs real commands: output past maxOutput is dropped and
// marked, the exit status comes back as ExitCode, and a missing program
// is an error.
func TestExecRunner(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	ctx := context.Background()
	var r ExecRunner
	res, err := r.Run(ctx, sh, "-c", "head -c 200000 /dev/zero; echo tail >&2; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Output) != maxOutput || !res.Truncated || res.ExitCode != 3 {
		t.Errorf("got %d bytes, truncated %v, exit %d; want %d, true, 3", len(res.Output), res.Truncated, res.ExitCode, maxOutput)
	}
	res, err = r.Run(ctx, sh, "-c", "echo out; echo err >&2")
	if err != nil || res.ExitCode != 0 || res.Truncated || string(res.Output) != "out\nerr\n" {
		t.Errorf("got %q, %+v, %v", res.Output, res, err)
	}
	if _, err := r.Run(ctx, filepath.Join(t.TempDir(), "no-such-program")); err == nil {
		t.Error("a missing program is not an error")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.Run(cctx, sh, "-c", "exit 0"); err == nil {
		t.Error("a cancelled context is not an error")
	}
}
