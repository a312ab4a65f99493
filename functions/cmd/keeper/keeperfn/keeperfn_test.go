package keeperfn

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/lambdaenv"
	"github.com/c0mpute/c0mpute/functions/metrics"
	"github.com/c0mpute/c0mpute/onchain/keepercli"
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
		{"rpc url from the environment", func(m map[string]string) {
			m[EnvConfig] = strings.Replace(cfgJSON, `"rpc_url":"http://127.0.0.1:1",`, "", 1)
			m[lambdaenv.EnvRPCURL] = "http://127.0.0.1:2"
		}, "", func(t *testing.T, c Config) {
			if !strings.Contains(string(c.Keeper), `"rpc_url":"http://127.0.0.1:2"`) {
				t.Fatalf("config %s", c.Keeper)
			}
		}},
		{"rpc url twice", func(m map[string]string) { m[lambdaenv.EnvRPCURL] = "http://127.0.0.1:2" }, `"rpc_url"`, nil},
		{"rpc secret without a client", func(m map[string]string) { m[lambdaenv.EnvRPCURLSecret] = "arn:rpc" }, lambdaenv.EnvRPCURLSecret, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := base()
			c.mod(m)
			got, err := Load(context.Background(), envOf(m), nil)
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
	cfg, err := Load(context.Background(), envOf(map[string]string{EnvConfig: cfgJSON, EnvKeyFile: "/k"}), nil)
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
			"-at 2026-11-28 rewards", "", Result{Job: JobRewards, Day: "2026-11-28", Outcome: OutcomeSuccess}},
		{"a retry after midnight keeps the day", Event{Job: JobAllowance, ScheduledTime: "2026-11-28T23:59:59-01:00"}, false, 0,
			"-at 2026-11-29 allowance", "", Result{Job: JobAllowance, Day: "2026-11-29", Outcome: OutcomeSuccess}},
		{"no time: today", Event{Job: JobAllowance}, false, 0, "-at 2026-11-29 allowance", "", Result{Job: JobAllowance, Day: "2026-11-29", Outcome: OutcomeSuccess}},
		{"execute when asked and enabled", Event{Job: JobRewards, Execute: true}, true, 0, "-execute -at 2026-11-29 rewards", "",
			Result{Job: JobRewards, Day: "2026-11-29", Execute: true, Outcome: OutcomeSuccess}},
		{"a manual invoke is a dry run", Event{Job: JobRewards}, true, 0, "-at 2026-11-29 rewards", "", Result{Job: JobRewards, Day: "2026-11-29", Outcome: OutcomeSuccess}},
		{"asked but not enabled: dry run", Event{Job: JobRewards, Execute: true}, false, 0, "-at 2026-11-29 rewards", "", Result{Job: JobRewards, Day: "2026-11-29", Outcome: OutcomeSuccess}},
		{"scheduled payouts: the store's earnings", Event{Job: JobPayouts, ScheduledTime: "2026-11-29T15:00:00Z"}, false, 0,
			"-at 2026-11-29 payouts", "", Result{Job: JobPayouts, Day: "2026-11-29", Outcome: OutcomeSuccess}},
		{"requested payouts: the hour names the run", Event{Job: JobRequestedPayouts, ScheduledTime: "2026-11-29T07:30:00Z"}, false, 0,
			"-at 2026-11-29T07:30:00Z requested-payouts", "", Result{Job: JobRequestedPayouts, Day: "2026-11-29", Outcome: OutcomeSuccess}},
		{"unknown job", Event{Job: "burn-everything"}, false, 0, "", "bad event", Result{}},
		{"bad time", Event{Job: JobRewards, ScheduledTime: "yesterday"}, false, 0, "", "scheduled_time", Result{}},
		{"keeper fails", Event{Job: JobRewards}, false, 1, "-at 2026-11-29 rewards", "failure (exit 1): c0mpute-keeper: rpc down", Result{}},
		{"keeper out of time", Event{Job: JobRewards}, false, keepercli.ExitIncomplete, "-at 2026-11-29 rewards", "incomplete (exit 3)", Result{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{code: c.code, out: `{"plan":1}`}
			cfg := cfg
			cfg.Execute = c.execute
			h := &Handler{Config: cfg, Run: r.run, Dir: t.TempDir(), Now: noon, Logs: io.Discard}
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
				if len(r.args) < 3 || r.args[0] != "-config" || r.args[2] != "-json" || strings.Join(r.args[3:], " ") != c.wantArgs {
					t.Fatalf("args %v, want -config PATH -json %s", r.args, c.wantArgs)
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

// TestEventRefusesUnknownFields: no event field chooses amounts or
// recipients; an old explicit-payouts event, or a misspelt flag, is refused
// rather than half-read.
func TestEventRefusesUnknownFields(t *testing.T) {
	for _, b := range []string{
		`{"job":"payouts","owed":[{"owner":"x","amount":1000000000}],"payout_id":"p"}`,
		`{"job":"rewards","dry_run":false}`,
		`{"job":"rewards","exectue":true}`,
	} {
		var ev Event
		if err := json.Unmarshal([]byte(b), &ev); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s: err %v, want an unknown field refused", b, err)
		}
	}
	var ev Event
	if err := json.Unmarshal([]byte(`{"job":"rewards","execute":true,"scheduled_time":"2026-11-29T15:00:00Z","execution_id":"e","attempt":"1"}`), &ev); err != nil || !ev.Execute {
		t.Fatalf("%+v %v", ev, err)
	}
}

// TestHandleReports: a run's plan reaches the log as structured JSON with
// its job and day (long lists in parts, each line under CloudWatch's event
// size), the keeper's own log lines pass through as they come, and the
// outcome, transactions, fees and treasury balances are counted.
func TestHandleReports(t *testing.T) {
	cfg, err := Load(context.Background(), envOf(map[string]string{EnvConfig: cfgJSON, EnvKeyFile: "/k", EnvExecute: "true", EnvLedger: "/mnt/l.db"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs, keeperLogs, emf bytes.Buffer
	cfg.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	shares := make([]string, 250)
	for i := range shares {
		shares[i] = fmt.Sprintf(`{"wallet":"w%d","usdc":"0.000001"}`, i)
	}
	plan := `{"command":"rewards","treasury":{"usdc":"5.000000","sol":"2.000000000"},` +
		`"rewards":{"shares":[` + strings.Join(shares, ",") + `],"result":{"confirmed":250,"failed":0,"transactions":3,"fees_sol":"0.000015000"}}}`
	run := func(_ context.Context, args []string, stdout, stderr io.Writer) int {
		fmt.Fprintln(stderr, `{"msg":"keeper: transfers settled","signature":"5ig"}`)
		fmt.Fprint(stdout, plan)
		return 0
	}
	h := &Handler{Config: cfg, Run: run, Dir: t.TempDir(), Logs: &keeperLogs, Metrics: metrics.New(&emf, "c0mpute/test"),
		Now: func() time.Time { return time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC) }}
	res, err := h.Handle(context.Background(), Event{Job: JobRewards, Execute: true, ExecutionID: "run-1"})
	if err != nil || res.Outcome != OutcomeSuccess || !res.Execute {
		t.Fatalf("%+v %v", res, err)
	}
	if !strings.Contains(keeperLogs.String(), `"signature":"5ig"`) {
		t.Fatalf("keeper log lines not passed through: %q", keeperLogs.String())
	}
	var parts, items int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if len(line) > 256*1024 {
			t.Fatalf("log line of %d bytes", len(line))
		}
		var l struct {
			Msg, Job, Day, ExecutionID string
			Items                      []json.RawMessage
			Plan                       map[string]any
		}
		if err := json.Unmarshal([]byte(strings.Replace(line, `"execution_id"`, `"executionid"`, 1)), &l); err != nil {
			t.Fatal(err)
		}
		if l.Job != JobRewards || l.Day != "2026-11-29" || l.ExecutionID != "run-1" {
			t.Fatalf("line without job, day and execution id: %s", line)
		}
		switch l.Msg {
		case "keeper plan":
			if !strings.Contains(line, `"shares":{"items":250,"logged_in_parts_of":100}`) || !strings.Contains(line, `"sol":"2.000000000"`) {
				t.Fatalf("plan line %s", line)
			}
		case "keeper plan part":
			parts++
			items += len(l.Items)
		}
	}
	if parts != 3 || items != 250 {
		t.Fatalf("%d parts holding %d items, want 3 holding 250", parts, items)
	}
	for _, want := range []string{`"KeeperRuns":1`, `"Outcome":"success"`, `"TreasuryLamports":2000000000`, `"TreasuryUSDC":5000000`,
		`"KeeperTransactions":3`, `"KeeperFeesLamports":15000`} {
		if !strings.Contains(emf.String(), want) {
			t.Errorf("metrics %s lack %s", emf.String(), want)
		}
	}

	// A failed run is counted, logged and returned as an error, so that
	// Lambda retries it and then hands it to the failure destination.
	emf.Reset()
	h.Run = func(_ context.Context, args []string, stdout, stderr io.Writer) int {
		fmt.Fprintln(stderr, "c0mpute-keeper: rewards: treasury short")
		return 1
	}
	if _, err := h.Handle(context.Background(), Event{Job: JobRewards}); err == nil {
		t.Fatal("a failed run returned no error")
	}
	if !strings.Contains(emf.String(), `"Outcome":"failure"`) {
		t.Fatalf("metrics %s", emf.String())
	}
}

// TestHandleLargePlan: a plan too large for a Lambda response is logged,
// not returned, and the run still succeeds.
func TestHandleLargePlan(t *testing.T) {
	cfg, _ := Load(context.Background(), envOf(map[string]string{EnvConfig: cfgJSON, EnvKeyFile: "/k"}), nil)
	var logs bytes.Buffer
	cfg.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	big := `{"rewards":{"stakers":["` + strings.Repeat("x", MaxResultPlan) + `"]}}`
	h := &Handler{Config: cfg, Dir: t.TempDir(), Logs: io.Discard,
		Run: func(_ context.Context, _ []string, stdout, _ io.Writer) int { fmt.Fprint(stdout, big); return 0 }}
	res, err := h.Handle(context.Background(), Event{Job: JobRewards})
	if err != nil || res.Outcome != OutcomeSuccess || res.Plan != nil || !res.PlanInLogs {
		t.Fatalf("%v: outcome %s, plan %d bytes, in logs %v", err, res.Outcome, len(res.Plan), res.PlanInLogs)
	}
	if !strings.Contains(logs.String(), `"msg":"keeper plan"`) {
		t.Fatal("the plan was not logged")
	}
}

// TestHandleLeavesTimeToReport: the keeper command runs under a deadline
// earlier than the invocation's, by the reserve.
func TestHandleLeavesTimeToReport(t *testing.T) {
	cfg, _ := Load(context.Background(), envOf(map[string]string{EnvConfig: cfgJSON, EnvKeyFile: "/k"}), nil)
	var left time.Duration
	h := &Handler{Config: cfg, Dir: t.TempDir(), Logs: io.Discard, Reserve: 20 * time.Second,
		Run: func(ctx context.Context, _ []string, stdout, _ io.Writer) int {
			dl, _ := ctx.Deadline()
			left = time.Until(dl)
			fmt.Fprint(stdout, "{}")
			return 0
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Second)
	defer cancel()
	if _, err := h.Handle(ctx, Event{Job: JobAllowance}); err != nil {
		t.Fatal(err)
	}
	if left > 280*time.Second || left < 270*time.Second {
		t.Fatalf("the keeper had %v of a 300 s invocation with a 20 s reserve", left)
	}
}

// FuzzHandle feeds arbitrary event bytes through the decoding Lambda does
// and the handler: bad input is an error, never a panic, and never a run
// for a day it could not name.
func FuzzHandle(f *testing.F) {
	for _, s := range []string{
		`{"job":"allowance","scheduled_time":"2026-11-29T00:00:00Z","execution_id":"x","attempt":"1"}`,
		`{"job":"payouts","owed":[{"owner":"x","amount":1}],"payout_id":"p"}`,
		`{"job":"rewards","execute":true}`, `{"job":"nope"}`, `{}`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	cfg, err := Load(context.Background(), envOf(map[string]string{EnvConfig: cfgJSON, EnvKeyFile: "/k"}), nil)
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
		h := &Handler{Config: cfg, Run: r.run, Dir: dir, Logs: io.Discard}
		res, err := h.Handle(context.Background(), ev)
		if err == nil && r.args != nil && res.Day == "" {
			t.Fatalf("ran %v without a day", r.args)
		}
	})
}

func TestBaseUnits(t *testing.T) {
	for _, c := range []struct {
		s    string
		dec  int
		want int64
		ok   bool
	}{
		{"1.600000", 6, 1_600_000, true},
		{"1234.5", 6, 1_234_500_000, true},
		{"2", 9, 2_000_000_000, true},
		{"0.000015000", 9, 15_000, true},
		{"1.0000001", 6, 0, false},
		{"", 6, 0, false},
		{"-1.0", 6, 0, false},
		{"1e6", 6, 0, false},
	} {
		if got, ok := baseUnits(c.s, c.dec); got != c.want || ok != c.ok {
			t.Errorf("baseUnits(%q, %d) = %d, %v; want %d, %v", c.s, c.dec, got, ok, c.want, c.ok)
		}
	}
}
