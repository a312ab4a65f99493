package earningscmd

import (
	"bytes"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := "testdata/" + name
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (-update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// run runs Main with the environment vars (C0MPUTE_HOME an empty folder
// unless set) and returns the exit code, stdout and stderr.
func run(t *testing.T, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	if _, ok := vars["C0MPUTE_HOME"]; !ok {
		vars["C0MPUTE_HOME"] = t.TempDir()
	}
	var stdout, stderr bytes.Buffer
	code := Main(args, Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return vars[k] },
		Now: func() time.Time { return time.Unix(1_800_000_000, 0) }})
	return code, stdout.String(), stderr.String()
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"--json", "-help"}} {
		code, out, errOut := run(t, map[string]string{}, args...)
		if code != ExitOK || errOut != "" {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errOut)
		}
		golden(t, "help.golden", out)
	}
}

// TestUsageErrors: each mistake exits 2 with one line that names the flag,
// variable or key at fault, then the usage (testdata/errors.golden).
func TestUsageErrors(t *testing.T) {
	ready := func() map[string]string {
		return map[string]string{"C0MPUTE_RELAY_URL": "ws://127.0.0.1:1", "C0MPUTE_WORKER_TOKEN": "cwt_x",
			"C0MPUTE_API_URL": "http://127.0.0.1:1/v1"}
	}
	without := func(k string) map[string]string { m := ready(); delete(m, k); return m }
	with := func(k, v string) map[string]string { m := ready(); m[k] = v; return m }
	cases := []struct {
		name string
		vars map[string]string
		args []string
		code int
	}{
		{"unknown flag", ready(), []string{"--nope"}, ExitUsage},
		{"bad --json value", ready(), []string{"--json=maybe"}, ExitUsage},
		{"stray argument", ready(), []string{"now"}, ExitUsage},
		{"no worker token", without("C0MPUTE_WORKER_TOKEN"), nil, ExitUsage},
		{"not a worker token", with("C0MPUTE_WORKER_TOKEN", "sk-c0mpute-abc"), nil, ExitUsage},
		{"no API URL", without("C0MPUTE_API_URL"), nil, ExitUsage},
		{"API URL not http", ready(), []string{"--api-url", "ftp://gateway.example/v1"}, ExitUsage},
		{"API URL without a host", with("C0MPUTE_API_URL", "http:///v1"), nil, ExitUsage},
		{"gateway unreachable", ready(), nil, ExitFailed},
	}
	var all strings.Builder
	for _, tc := range cases {
		code, out, errOut := run(t, tc.vars, tc.args...)
		if code != tc.code || out != "" {
			t.Errorf("%s: exit %d (want %d), stdout %q", tc.name, code, tc.code, out)
		}
		errOut = strings.ReplaceAll(errOut, tc.vars["C0MPUTE_HOME"], "$HOME")
		// Only the reason: the usage that follows a usage error is
		// testdata/help.golden's.
		first, rest, _ := strings.Cut(errOut, "\n")
		if tc.code == ExitUsage && rest != usage+"\n" {
			t.Errorf("%s: the reason is not followed by the usage: %q", tc.name, rest)
		}
		all.WriteString("# " + tc.name + "\n" + first + "\n\n")
	}
	golden(t, "errors.golden", all.String())
}

func TestUSDIsExact(t *testing.T) {
	for credits, want := range map[int64]string{0: "$0.00", 1: "$0.01", 70: "$0.70", 140: "$1.40", 100: "$1.00",
		123456789: "$1234567.89", -5: "-$0.05", -105: "-$1.05", -9223372036854775808: "-$92233720368547758.08"} {
		if got := USD(credits); got != want {
			t.Errorf("USD(%d) = %q, want %q", credits, got, want)
		}
	}
}

func TestSplitFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		json bool
		rest string
	}{
		{nil, false, ""},
		{[]string{"--json"}, true, ""},
		{[]string{"-json", "--home", "/x"}, true, "--home /x"},
		{[]string{"--home", "/x", "--json=false"}, false, "--home /x"},
		{[]string{"--json=true", "--token=cwt_a"}, true, "--token=cwt_a"},
		{[]string{"--jsonish"}, false, "--jsonish"},
		{[]string{"--", "--json"}, false, "-- --json"},
	} {
		j, rest, err := splitFlags(tc.args)
		if err != nil || j != tc.json || strings.Join(rest, " ") != tc.rest {
			t.Errorf("splitFlags(%q) = %v, %q, %v; want %v, %q", tc.args, j, rest, err, tc.json, tc.rest)
		}
	}
}

func TestEarningsURL(t *testing.T) {
	for base, want := range map[string]string{
		"https://api.example/v1":      "https://api.example/v1/earnings",
		"https://api.example/v1/":     "https://api.example/v1/earnings",
		"https://api.example":         "https://api.example/v1/earnings",
		"http://127.0.0.1:8080/gw/v1": "http://127.0.0.1:8080/gw/v1/earnings",
	} {
		if got, err := earningsURL(base); err != nil || got != want {
			t.Errorf("earningsURL(%q) = %q, %v; want %q", base, got, err, want)
		}
	}
}

// TestRefusesBadAnswers: what comes back from the API URL is checked
// before it is shown. The server here is a stand-in for a misbehaving or
// wrong server at --api-url: the real gateway (gateway_test.go) never
// answers these.
func TestRefusesBadAnswers(t *testing.T) {
	valid := `{"object":"earnings","account_id":"a","earned":1,"paid":0,"pending":1,"minimum_payout":100,` +
		`"next_payout":{"at":1,"credits":0,"reason":"below_minimum"},"worker_share_percent":70,"stake_boost":{"share_percent":80},"workers":[]}`
	cases := []struct{ name, body, want string }{
		{"not JSON", "<html>hello</html>", "answered something that is not earnings"},
		{"too large", `{"object":"earnings","account_id":"` + strings.Repeat("a", maxBody) + `"}`, "over 1048576 bytes"},
		{"control characters", strings.Replace(valid, `"workers":[]`, `"workers":[{"pubkey":"abc","standing":"\u001b[2Jx"}]`, 1), "do not check out"},
		{"negative earnings", strings.Replace(valid, `"earned":1`, `"earned":-1`, 1), "do not check out"},
		{"another object", strings.Replace(valid, `"object":"earnings"`, `"object":"balance"`, 1), "do not check out"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			code, out, errOut := run(t, map[string]string{"C0MPUTE_RELAY_URL": "ws://127.0.0.1:1", "C0MPUTE_WORKER_TOKEN": "cwt_x",
				"C0MPUTE_API_URL": srv.URL + "/v1"})
			if code != ExitFailed || out != "" || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 saying %q", code, out, errOut, tc.want)
			}
		})
	}
}
