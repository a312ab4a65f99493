package keeperfn

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const cfgJSON = `{"rpc_url":"http://127.0.0.1:1","staking_program":"S","rewards_program":"R","zero_mint":"Z","usdc_mint":"U","pumpswap_pool":null,"slippage_bp":100}`

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoad(t *testing.T) {
	base := func() map[string]string {
		return map[string]string{EnvConfig: cfgJSON, EnvKeyARN: "arn:aws:secretsmanager:eu-west-1:1:secret:k"}
	}
	cases := []struct {
		name    string
		mod     func(map[string]string)
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{"defaults to a dry run with the ledger in /tmp", func(map[string]string) {}, "", func(t *testing.T, c Config) {
			var kc map[string]any
			if err := json.Unmarshal(c.Keeper, &kc); err != nil {
				t.Fatal(err)
			}
			if c.Execute || kc["key"] != "secretsmanager:arn:aws:secretsmanager:eu-west-1:1:secret:k" ||
				!strings.HasPrefix(kc["store"].(string), os.TempDir()) {
				t.Fatalf("config %s, execute %v", c.Keeper, c.Execute)
			}
			if _, ok := kc["pumpswap_pool"]; ok {
				t.Fatal("null attribute kept: keepercli's defaults would not apply")
			}
		}},
		{"key file", func(m map[string]string) { delete(m, EnvKeyARN); m[EnvKeyFile] = "/k.json" }, "", func(t *testing.T, c Config) {
			if !strings.Contains(string(c.Keeper), `"key":"file:/k.json"`) {
				t.Fatalf("config %s", c.Keeper)
			}
		}},
		{"no key", func(m map[string]string) { delete(m, EnvKeyARN) }, EnvKeyARN, nil},
		{"two keys", func(m map[string]string) { m[EnvKeyFile] = "/k" }, "not both", nil},
		{"no config", func(m map[string]string) { delete(m, EnvConfig) }, EnvConfig, nil},
		{"config not an object", func(m map[string]string) { m[EnvConfig] = `[1]` }, EnvConfig, nil},
		{"config sets the key", func(m map[string]string) { m[EnvConfig] = `{"key":"file:/x"}` }, `"key"`, nil},
		{"execute without a ledger", func(m map[string]string) { m[EnvExecute] = "true" }, EnvLedger, nil},
		{"execute with a ledger in /tmp", func(m map[string]string) { m[EnvExecute] = "true"; m[EnvLedger] = "/tmp/l.db" }, EnvLedger, nil},
		{"execute with a persistent ledger", func(m map[string]string) { m[EnvExecute] = "true"; m[EnvLedger] = "/mnt/ledger/l.db" }, "", func(t *testing.T, c Config) {
			if !c.Execute || !strings.Contains(string(c.Keeper), "/mnt/ledger/l.db") {
				t.Fatalf("config %s, execute %v", c.Keeper, c.Execute)
			}
		}},
		{"bad log level", func(m map[string]string) { m[EnvLogLevel] = "loud" }, EnvLogLevel, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := base()
			c.mod(m)
			got, err := Load(envOf(m))
			switch {
			case c.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want one mentioning %q", err, c.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			default:
				c.check(t, got)
			}
		})
	}
}

// recorder is a Runner that records its arguments; the real keeper command
// runs in the emulator tests (infra/lambdatest).
type recorder struct {
	args []string
	code int
	out  string
}

func (r *recorder) run(_ context.Context, args []string, stdout, stderr io.Writer) int {
	r.args = args
	if r.code != 0 {
		fmt.Fprintln(stderr, "c0mpute-keeper: rpc down")
		return r.code
	}
	fmt.Fprint(stdout, r.out)
	return 0
}

func TestHandle(t *testing.T) {
	cfg, err := Load(envOf(map[string]string{EnvConfig: cfgJSON, EnvKeyFile: "/k"}))
	if err != nil {
		t.Fatal(err)
	}
	noon := func() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) }
	cases := []struct {
		name     string
		ev       Event
		execute  bool
		code     int
		wantArgs string // joined, after -config PATH
		wantErr  string
		want     Result
	}{
		{"rewards names the scheduled day", Event{Job: JobRewards, ScheduledTime: "2026-11-28T15:00:00Z"}, false, 0,
			"-at 2026-11-28 rewards", "", Result{Job: JobRewards, Day: "2026-11-28"}},
		{"a retry after midnight keeps the day", Event{Job: JobAllowance, ScheduledTime: "2026-11-28T23:59:59-01:00"}, false, 0,
			"-at 2026-11-29 allowance", "", Result{Job: JobAllowance, Day: "2026-11-29"}},
		{"no time: today", Event{Job: JobAllowance}, false, 0, "-at 2026-11-29 allowance", "", Result{Job: JobAllowance, Day: "2026-11-29"}},
		{"execute when enabled", Event{Job: JobRewards}, true, 0, "-execute -at 2026-11-29 rewards", "", Result{Job: JobRewards, Day: "2026-11-29", Execute: true}},
		{"dry_run overrides", Event{Job: JobRewards, DryRun: true}, true, 0, "-at 2026-11-29 rewards", "", Result{Job: JobRewards, Day: "2026-11-29"}},
		{"scheduled payouts: the store's earnings", Event{Job: JobPayouts, ScheduledTime: "2026-11-29T15:00:00Z"}, false, 0,
			"-at 2026-11-29 payouts", "", Result{Job: JobPayouts, Day: "2026-11-29"}},
		{"requested payouts: the hour names the run", Event{Job: JobRequestedPayouts, ScheduledTime: "2026-11-29T07:30:00Z"}, false, 0,
			"-at 2026-11-29T07:30:00Z requested-payouts", "", Result{Job: JobRequestedPayouts, Day: "2026-11-29"}},
		{"unknown job", Event{Job: "burn-everything"}, false, 0, "", "bad event", Result{}},
		{"bad time", Event{Job: JobRewards, ScheduledTime: "yesterday"}, false, 0, "", "scheduled_time", Result{}},
		{"keeper fails", Event{Job: JobRewards}, false, 1, "-at 2026-11-29 rewards", "rpc down", Result{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{code: c.code, out: `{"plan":1}`}
			cfg := cfg
			cfg.Execute = c.execute
			h := &Handler{Config: cfg, Run: r.run, Dir: t.TempDir(), Now: noon}
			got, err := h.Handle(context.Background(), c.ev)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want one mentioning %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.wantArgs == "" {
				if r.args != nil {
					t.Fatalf("ran %v, want no run", r.args)
				}
			} else {
				if len(r.args) < 2 || r.args[0] != "-config" || strings.Join(r.args[2:], " ") != c.wantArgs {
					t.Fatalf("args %v, want -config PATH %s", r.args, c.wantArgs)
				}
				b, err := os.ReadFile(r.args[1])
				if err != nil || string(b) != string(cfg.Keeper) {
					t.Fatalf("config file: %v", err)
				}
				c.want.Plan = json.RawMessage(`{"plan":1}`)
			}
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(c.want)
			if string(gb) != string(wb) {
				t.Fatalf("result %s, want %s", gb, wb)
			}
		})
	}
}

func TestHandlePayoutsWithOwed(t *testing.T) {
	cfg, _ := Load(envOf(map[string]string{EnvConfig: cfgJSON, EnvKeyFile: "/k"}))
	r := &recorder{out: `{"transfers":[]}`}
	dir := t.TempDir()
	h := &Handler{Config: cfg, Run: r.run, Dir: dir}
	owed := `[{"owner":"x","amount":5}]`
	if _, err := h.Handle(context.Background(), Event{Job: JobPayouts, Owed: json.RawMessage(owed), PayoutID: "p1"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"-id", "p1", "-owed", filepath.Join(dir, "c0mpute-keeper-owed.json"), JobPayouts}
	if strings.Join(r.args[2:], " ") != strings.Join(want, " ") {
		t.Fatalf("args %v", r.args)
	}
	if b, _ := os.ReadFile(want[3]); string(b) != owed {
		t.Fatalf("owed file %q", b)
	}
}

// FuzzHandle feeds arbitrary event bytes through the decoding Lambda does
// and the handler: bad input is an error, never a panic, and never a run
// for a day it could not name.
func FuzzHandle(f *testing.F) {
	for _, s := range []string{
		`{"job":"allowance","scheduled_time":"2026-11-29T00:00:00Z","execution_id":"x","attempt":"1"}`,
		`{"job":"payouts","owed":[{"owner":"x","amount":1}],"payout_id":"p"}`,
		`{"job":"rewards","dry_run":true}`, `{"job":"nope"}`, `{}`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	cfg, err := Load(envOf(map[string]string{EnvConfig: cfgJSON, EnvKeyFile: "/k"}))
	if err != nil {
		f.Fatal(err)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		var ev Event
		if json.Unmarshal(b, &ev) != nil {
			return
		}
		r := &recorder{out: `{}`}
		h := &Handler{Config: cfg, Run: r.run, Dir: dir}
		res, err := h.Handle(context.Background(), ev)
		if err == nil && r.args != nil && res.Day == "" {
			t.Fatalf("ran %v without a day", r.args)
		}
	})
}
