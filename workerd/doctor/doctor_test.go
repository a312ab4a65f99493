package doctor_test

// The doctor runs against a real local network (infra/devnet: gateway,
// relay and store in one process) and a real backend (the built-in engine
// on a generated GGUF file), once on a good setup and then with one thing
// broken at a time. Each case's whole human output is a golden file in
// testdata (-update rewrites them), with what varies between runs (ports,
// temporary paths, addresses, latencies, speeds) normalised.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/infra/devnet"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
	"github.com/c0mpute/c0mpute/infra/ollamatest"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/config"
	"github.com/c0mpute/c0mpute/workerd/doctor"
	"github.com/c0mpute/c0mpute/workerd/identity"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// network is a running local network with one account, its worker token,
// a worker home with a key, and a model file for the built-in backend.
type network struct {
	stack   *devnet.Stack
	account string
	token   string
	home    string
	gguf    string
}

func startNetwork(t *testing.T) *network {
	t.Helper()
	st := dynamotest.SuiteStore(t)
	stack, err := devnet.Start(context.Background(), devnet.Config{Store: st, APIAddr: "127.0.0.1:0", RelayAddr: "127.0.0.1:0",
		Models: []catalog.Model{{ID: "tiny", Price: 10}}, Limits: devnet.ScriptedLimits(), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stack.Close() })
	n := &network{stack: stack, account: "contributor", home: t.TempDir()}
	if _, err := stack.CreateAccount(context.Background(), n.account, 0, "grant"); err != nil {
		t.Fatal(err)
	}
	if n.token, err = stack.IssueWorkerToken(context.Background(), n.account); err != nil {
		t.Fatal(err)
	}
	if _, err := identity.Create(filepath.Join(n.home, "worker-key.json")); err != nil {
		t.Fatal(err)
	}
	n.gguf = filepath.Join(n.home, "tiny.gguf")
	if err := testmodel.WriteFile(n.gguf, testmodel.Options{Seed: 9, KVHeads: 2,
		ChatTemplate: `{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}{%- endfor %}<|assistant|>`}); err != nil {
		t.Fatal(err)
	}
	return n
}

// environ is a good worker's environment on n.
func (n *network) environ() map[string]string {
	return map[string]string{config.EnvHome: n.home, config.EnvRelayURL: n.stack.RelayURL, config.EnvToken: n.token,
		config.EnvBackend: "builtin", config.EnvGGUF: n.gguf, config.EnvAPIURL: n.stack.APIURL}
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

type result struct {
	code   int
	out    string
	stderr string
	lines  map[string]string // by check name
}

func run(t *testing.T, env map[string]string, now func() time.Time, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := doctor.Main(args, doctor.Env{Stdout: &out, Stderr: &errb, Now: now,
		Getenv: func(k string) string { return env[k] }})
	r := result{code: code, out: out.String(), stderr: errb.String(), lines: map[string]string{}}
	for _, l := range strings.Split(strings.TrimSpace(r.out), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			r.lines[f[1]] = l
		}
	}
	return r
}

var checks = []string{"config", "identity", "relay", "clock", "token", "backend", "models", "network"}

// normalise replaces what varies between runs.
func normalise(s string, n *network) string {
	s = strings.ReplaceAll(s, n.home, "$HOME")
	for _, r := range []struct{ re, to string }{
		{`127\.0\.0\.1:\d+`, "127.0.0.1:PORT"},
		{`wallet [1-9A-HJ-NP-Za-km-z]{32,44}`, "wallet WALLET"},
		{`(DNS|TCP|TLS|TTFT) [0-9.]+(ns|µs|ms|s)`, "$1 D"},
		{`[0-9]+\.[0-9] tok/s`, "N tok/s"},
		{`by [0-9hms]+`, "by SKEW"},
		{`\(HTTP 401\): timestamp \S+`, "(HTTP 401): timestamp T"},
	} {
		s = regexp.MustCompile(r.re).ReplaceAllString(s, r.to)
	}
	return s
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to rewrite it):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// want is a check's expected status and words in its line.
type want struct {
	status string
	has    []string
}

func TestDoctor(t *testing.T) {
	n := startNetwork(t)
	ctx := context.Background()

	// A revoked token, and one the network never issued.
	revoked, err := n.stack.IssueWorkerToken(ctx, n.account)
	if err != nil {
		t.Fatal(err)
	}
	toks, err := n.stack.Store.ListWorkerTokens(ctx, n.account)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range toks {
		if tk.Hash == credential.Hash(revoked) {
			if _, err := n.stack.Store.RevokeWorkerToken(ctx, n.account, tk.ID, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	unknown, _, _ := credential.New(credential.WorkerTokenPrefix)
	// A second home whose key file others can read.
	openHome := filepath.Join(n.home, "open")
	if err := os.Mkdir(openHome, 0o700); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(n.home, "worker-key.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(openHome, "worker-key.json"), key, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(openHome, "worker-key.json"), 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		env   func(map[string]string)
		skew  time.Duration
		args  []string
		code  int
		wants map[string]want // checks not named here are ok
	}{
		{name: "good", code: doctor.ExitOK, wants: map[string]want{
			"identity": {"ok", []string{"wallet " + identity.Address(mustKey(t, n))}},
			"token":    {"ok", []string{"accepted"}},
			"models":   {"ok", []string{"tiny: TTFT", "tok/s"}},
			"network":  {"ok", []string{"tiny"}},
		}},
		{name: "skip_bench", args: []string{"--skip-bench"}, code: doctor.ExitOK, wants: map[string]want{
			"models": {"ok", []string{"tiny: present"}},
		}},
		{name: "no_config", env: func(e map[string]string) { delete(e, config.EnvToken) }, code: doctor.ExitFail, wants: map[string]want{
			"config":   {"FAIL", []string{"--token (or C0MPUTE_WORKER_TOKEN) is not set", "fix: set it to a worker token"}},
			"identity": {"skip", []string{"skipped: needs config"}},
			"relay":    {"skip", []string{"skipped: needs config"}},
			"clock":    {"skip", []string{"skipped: needs the relay"}},
			"token":    {"skip", []string{"skipped: needs config"}},
			"backend":  {"skip", []string{"skipped: needs config"}},
			"models":   {"skip", []string{"skipped: needs the backend"}},
			"network":  {"skip", []string{"skipped: needs config"}},
		}},
		{name: "wrong_token", env: func(e map[string]string) { e[config.EnvToken] = unknown }, code: doctor.ExitFail, wants: map[string]want{
			"token": {"FAIL", []string{"(HTTP 401): unknown worker token", "fix:", "POST /v1/worker-tokens"}},
		}},
		{name: "revoked_token", env: func(e map[string]string) { e[config.EnvToken] = revoked }, code: doctor.ExitFail, wants: map[string]want{
			"token": {"FAIL", []string{"(HTTP 403): worker token revoked", "fix: the token was revoked", "POST /v1/worker-tokens"}},
		}},
		{name: "relay_down", env: func(e map[string]string) { e[config.EnvRelayURL] = "ws://" + closedPort(t) }, code: doctor.ExitFail, wants: map[string]want{
			"relay": {"FAIL", []string{"cannot connect to 127.0.0.1:", "connection refused", "fix: the relay is down"}},
			"clock": {"skip", []string{"skipped: needs the relay"}},
			"token": {"skip", []string{"skipped: needs the relay"}},
		}},
		{name: "backend_down", env: func(e map[string]string) {
			e[config.EnvBackend], e[config.EnvBackendURL] = "ollama", "http://"+closedPort(t)
		}, code: doctor.ExitFail, wants: map[string]want{
			"backend": {"FAIL", []string{"ollama at http://127.0.0.1:", "fix: start Ollama"}},
			"models":  {"skip", []string{"skipped: needs the backend"}},
			"network": {"skip", []string{"skipped: needs the backend"}},
		}},
		{name: "model_missing", env: func(e map[string]string) { e[config.EnvModels] = "tiny=qwen3:8b" }, code: doctor.ExitFail, wants: map[string]want{
			"models": {"FAIL", []string{"tiny=qwen3:8b: not on the backend", "fix:"}},
		}},
		{name: "not_in_catalogue", env: func(e map[string]string) { e[config.EnvModels] = "llama-9000=tiny" }, code: doctor.ExitFail, wants: map[string]want{
			"models":  {"ok", []string{"llama-9000=tiny: TTFT"}},
			"network": {"FAIL", []string{"none of the offered models (llama-9000)", "fix: serve the network's models", "the network's models are tiny"}},
		}},
		{name: "key_mode", env: func(e map[string]string) { e[config.EnvKeyFile] = filepath.Join(openHome, "worker-key.json") }, code: doctor.ExitOK, wants: map[string]want{
			"identity": {"warn", []string{"readable by group or others (mode 0644)", "fix: chmod 600 " + filepath.Join(openHome, "worker-key.json")}},
		}},
		{name: "clock_ahead", skew: 5 * time.Minute, code: doctor.ExitFail, wants: map[string]want{
			"clock": {"FAIL", []string{"ahead of the relay's", "beyond the 2m0s", "timedatectl set-ntp true"}},
			"token": {"skip", []string{"skipped: needs a right clock"}},
		}},
		{name: "clock_behind_near_limit", skew: -45 * time.Second, code: doctor.ExitOK, wants: map[string]want{
			"clock": {"warn", []string{"behind the relay's", "near the 2m0s limit", "timedatectl set-ntp true"}},
			"token": {"ok", []string{"accepted"}},
		}},
		{name: "no_api", env: func(e map[string]string) { delete(e, config.EnvAPIURL) }, code: doctor.ExitOK, wants: map[string]want{
			"network": {"skip", []string{"skipped: no API URL", "--api-url (C0MPUTE_API_URL)"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := n.environ()
			if tt.env != nil {
				tt.env(env)
			}
			now := func() time.Time { return time.Now().Add(tt.skew) }
			r := run(t, env, now, tt.args...)
			if r.code != tt.code {
				t.Errorf("exit %d, want %d\n%s%s", r.code, tt.code, r.out, r.stderr)
			}
			if got := len(strings.Split(strings.TrimSpace(r.out), "\n")); got != len(checks) {
				t.Errorf("%d lines, want one per check (%d):\n%s", got, len(checks), r.out)
			}
			for _, c := range checks {
				line, ok := r.lines[c]
				if !ok {
					t.Errorf("no %s line:\n%s", c, r.out)
					continue
				}
				w, named := tt.wants[c]
				if !named {
					w = want{status: "ok"}
				}
				if st := strings.Fields(line)[0]; st != w.status {
					t.Errorf("%s: status %s, want %s: %s", c, st, w.status, line)
				}
				for _, h := range w.has {
					if !strings.Contains(line, h) {
						t.Errorf("%s: %q lacks %q", c, line, h)
					}
				}
				if (w.status == "warn" || w.status == "FAIL") != strings.Contains(line, "; fix: ") {
					t.Errorf("%s: a fix on warn and FAIL lines only: %s", c, line)
				}
			}
			golden(t, tt.name, normalise(r.out, n))
		})
	}

	// The doctor's connects left no worker connected: each closed before
	// registering, and the relay deleted the worker record it made.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ws, err := n.stack.Store.Workers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d worker records remain after the doctor's connects: %+v", len(ws), ws)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// What a connect does leave: the identity's reputation record (made
	// on its first connect), which GET /v1/workers lists as offline.
	reps, err := n.stack.Store.Reputations(ctx, n.account)
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 1 || reps[0].Pubkey != identity.Address(mustKey(t, n)) || reps[0].JobsCompleted != 0 {
		t.Errorf("reputations after the doctor's connects: %+v, want the one identity's, with no job", reps)
	}
}

func mustKey(t *testing.T, n *network) (k []byte) {
	t.Helper()
	key, err := identity.Load(filepath.Join(n.home, "worker-key.json"))
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// TestJSON: --json prints one object per check, in order, each with a
// status, and a fix on the warn and FAIL ones.
func TestJSON(t *testing.T) {
	n := startNetwork(t)
	env := n.environ()
	env[config.EnvModels] = "tiny=absent"
	r := run(t, env, nil, "--json", "--skip-bench")
	if r.code != doctor.ExitFail {
		t.Errorf("exit %d, want %d", r.code, doctor.ExitFail)
	}
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	if len(lines) != len(checks) {
		t.Fatalf("%d lines:\n%s", len(lines), r.out)
	}
	for i, l := range lines {
		var c doctor.Check
		dec := json.NewDecoder(strings.NewReader(l))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, l)
		}
		wantStatus := doctor.OK
		if c.Name == "models" {
			wantStatus = doctor.Fail
		}
		if c.Name != checks[i] || c.Status != wantStatus || c.Found == "" || (c.Fix != "") != (c.Status == doctor.Fail) || c.Millis < 0 {
			t.Errorf("line %d: %+v", i, c)
		}
	}
}

// TestUsage: --help prints the usage to stdout and succeeds; bad arguments
// exit 2 with the reason and the usage on stderr (testdata/usage.golden).
func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}} {
		r := run(t, nil, nil, args...)
		if r.code != doctor.ExitOK || r.stderr != "" {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
		golden(t, "help", r.out)
	}
	var all strings.Builder
	for _, args := range [][]string{
		{"--bogus"},
		{"now"},
		{"--api-url"},
		{"--json=maybe"},
		{"--relay"},
		{"--json", "--", "x"},
	} {
		r := run(t, nil, nil, args...)
		if r.code != doctor.ExitUsage || r.out != "" {
			t.Errorf("%v: exit %d, stdout %q", args, r.code, r.out)
		}
		first, _, _ := strings.Cut(r.stderr, "\n")
		all.WriteString(strings.Join(args, " ") + " => " + first + "\n")
		if !strings.Contains(r.stderr, "usage: workerd doctor") {
			t.Errorf("%v: no usage in %q", args, r.stderr)
		}
	}
	golden(t, "usage", all.String())
}

// TestOllama: the backend and models checks against a real Ollama serving
// the generated tiny model, and the fix for a model it lacks.
func TestOllama(t *testing.T) {
	s := ollamatest.TinyModel(t, "tiny:latest", testmodel.Options{Seed: 1})
	n := startNetwork(t)
	env := n.environ()
	env[config.EnvBackend], env[config.EnvBackendURL] = "ollama", s.URL()
	r := run(t, env, nil)
	if r.code != doctor.ExitOK || !strings.HasPrefix(r.lines["backend"], "ok ") || !strings.Contains(r.lines["backend"], "tiny:latest") ||
		!strings.HasPrefix(r.lines["models"], "ok ") || !strings.Contains(r.lines["models"], "tiny=tiny:latest: TTFT") ||
		!strings.HasPrefix(r.lines["network"], "ok ") {
		t.Errorf("exit %d:\n%s%s", r.code, r.out, r.stderr)
	}
	env[config.EnvModels] = "tiny=qwen3:8b"
	r = run(t, env, nil, "--skip-bench")
	if want := "FAIL  models    tiny=qwen3:8b: not on the backend; fix: `ollama pull qwen3:8b`"; r.code != doctor.ExitFail || !strings.HasPrefix(r.lines["models"], want) {
		t.Errorf("exit %d, models line %q, want it to start %q", r.code, r.lines["models"], want)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	ollamatest.StopShared()
	os.Exit(code)
}
