// Package keeperfn is the keeper as a Lambda function: EventBridge
// Scheduler invokes it with an Event naming the job (00:00 UTC allowance,
// 15:00 UTC rewards and buyback-burn, payouts), and it runs that job once
// through the keeper's command (onchain/keepercli), as the c0mpute-keeper
// CLI would, returning the plan.
//
// Every run ends in a visible outcome: its plan and every signature in the
// log (JSON, with job and day), a KeeperRuns metric by job and outcome, and
// on failure an error, which Lambda retries (the ledger makes a re-run
// resume) and then delivers to the failure destination Terraform sets.
//
// Dry run by default. Executing needs the event's "execute": true (the
// schedules set it; a manual invoke without it is a dry run), and
// C0MPUTE_KEEPER_EXECUTE=true, and a persistent ledger — the gateway's DynamoDB table (C0MPUTE_DYNAMODB_TABLE,
// as deployed) or a file on persistent storage (C0MPUTE_KEEPER_LEDGER): the
// ledger is what makes a retried run resume instead of paying twice, and
// Lambda's /tmp does not survive the instance.
package keeperfn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-playground/validator/v10"

	"github.com/c0mpute/c0mpute/functions/lambdaenv"
	"github.com/c0mpute/c0mpute/functions/metrics"
	"github.com/c0mpute/c0mpute/onchain/keepercli"
)

// Environment variables the keeper function reads. Terraform sets exactly
// these (checked by the terraform tests), apart from the test-only ones.
const (
	// EnvConfig is the keepercli configuration as JSON, without "key"
	// and "store", which the function fills in, and, as deployed, without
	// "rpc_url", which comes from the secret lambdaenv.EnvRPCURLSecret
	// names (a paid endpoint's URL carries its key).
	EnvConfig = "C0MPUTE_KEEPER_CONFIG"
	// EnvKeyARN is the Secrets Manager secret holding the signing key.
	EnvKeyARN = "C0MPUTE_KEEPER_KEY_ARN"
	// EnvKeyFile is a keypair file instead (tests and containers).
	EnvKeyFile = "C0MPUTE_KEEPER_KEY_FILE"
	// EnvExecute is "true" to let runs record and send; anything else is
	// a dry run.
	EnvExecute = "C0MPUTE_KEEPER_EXECUTE"
	// EnvTable is the gateway's DynamoDB table, where the ledger lives in
	// AWS.
	EnvTable = "C0MPUTE_DYNAMODB_TABLE"
	// EnvLedger is a ledger file on persistent storage instead (an EFS
	// mount); with neither set, the ledger lives in /tmp and only dry runs
	// are allowed.
	EnvLedger = "C0MPUTE_KEEPER_LEDGER"
	// EnvLogLevel is the log level.
	EnvLogLevel = "C0MPUTE_LOG_LEVEL"
)

// Jobs the keeper runs.
const (
	JobAllowance = "allowance"
	JobRewards   = "rewards"
	JobPayouts   = "payouts"
	// JobRequestedPayouts pays, each hour, the accounts whose owners asked
	// for a payout.
	JobRequestedPayouts = "requested-payouts"
)

// Event is what a schedule sends (terraform/scheduler.tf builds it with
// Scheduler's context attributes) or a person invokes by hand. Unknown
// fields are refused: nothing in an event chooses amounts or recipients,
// which come only from the plan the keeper computes itself.
type Event struct {
	Job string `json:"job" validate:"oneof=allowance rewards payouts requested-payouts"`
	// ScheduledTime is when the run was due (RFC 3339); it names the day
	// even when a retry lands after midnight. Empty: now.
	ScheduledTime string `json:"scheduled_time,omitempty"`
	ExecutionID   string `json:"execution_id,omitempty"`
	Attempt       string `json:"attempt,omitempty"`
	// Execute asks for a real run. It takes effect only where the
	// deployment allows execution (C0MPUTE_KEEPER_EXECUTE=true); the
	// schedules set it, and an invoke without it is a dry run.
	Execute bool `json:"execute,omitempty"`
}

// UnmarshalJSON decodes an event, refusing fields it does not know (an
// old event's "owed" list, a typo of "execute").
func (e *Event) UnmarshalJSON(b []byte) error {
	type plain Event
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p plain
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("keeperfn: event: %w (known fields: job, scheduled_time, execution_id, attempt, execute)", err)
	}
	*e = Event(p)
	return nil
}

// Outcomes of a run, as logged and counted (metrics.KeeperRuns).
const (
	OutcomeSuccess = "success"
	// OutcomeIncomplete: the run stopped for lack of time, or a sent
	// transaction's outcome is not known yet; it is safe to re-run, and
	// Lambda's retry resumes it from the ledger.
	OutcomeIncomplete = "incomplete"
	OutcomeFailure    = "failure"
)

// Result is the function's response: what the run did or would do.
type Result struct {
	Job     string          `json:"job"`
	Day     string          `json:"day"`
	Execute bool            `json:"execute"`
	Outcome string          `json:"outcome"`
	Plan    json.RawMessage `json:"plan,omitempty"`
	// PlanInLogs is set instead of Plan when the plan is too large for a
	// Lambda response (6 MB): it is in the log in full either way.
	PlanInLogs bool `json:"plan_in_logs,omitempty"`
}

// MaxResultPlan is the largest plan returned in the response; a larger one
// (a busy rewards day) is only logged, so that a run that did its work
// never fails for the size of its answer.
const MaxResultPlan = 4 << 20

// Runner runs the keeper command with args, as keepercli.Main does.
type Runner func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// Config is the function's configuration, loaded once at cold start.
type Config struct {
	// Keeper is keepercli's configuration JSON with key and store set.
	Keeper  []byte `validate:"required"`
	Execute bool
	Log     *slog.Logger `validate:"required"`
}

var validate = validator.New(validator.WithRequiredStructEnabled())

// Load reads and validates the environment (getenv is os.Getenv in
// production) and the RPC URL's secret (sm: Secrets Manager; nil where
// the URL is given plainly).
func Load(ctx context.Context, getenv func(string) string, sm lambdaenv.SecretsClient) (Config, error) {
	var lvl slog.Level
	if s := getenv(EnvLogLevel); s != "" {
		if err := lvl.UnmarshalText([]byte(s)); err != nil {
			return Config{}, fmt.Errorf("keeperfn: %s: %w", EnvLogLevel, err)
		}
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	var kc map[string]any
	dec := json.NewDecoder(strings.NewReader(getenv(EnvConfig)))
	dec.UseNumber()
	if err := dec.Decode(&kc); err != nil || kc == nil {
		return Config{}, fmt.Errorf("keeperfn: %s must be a JSON object (keepercli's configuration): %v", EnvConfig, err)
	}
	rpcURL, err := lambdaenv.Env(getenv).RPCURL(ctx, sm)
	if err != nil {
		return Config{}, fmt.Errorf("keeperfn: %w", err)
	}
	if rpcURL != "" {
		if _, ok := kc["rpc_url"]; ok {
			return Config{}, fmt.Errorf("keeperfn: %s must not set \"rpc_url\" when %s or %s does", EnvConfig, lambdaenv.EnvRPCURLSecret, lambdaenv.EnvRPCURL)
		}
		kc["rpc_url"] = rpcURL
	}
	for _, k := range []string{"key", "store"} {
		if _, ok := kc[k]; ok {
			return Config{}, fmt.Errorf("keeperfn: %s must not set %q: the function sets it", EnvConfig, k)
		}
	}
	// Terraform's optional attributes arrive as null; keepercli's
	// defaults apply only to absent keys.
	for k, v := range kc {
		if v == nil {
			delete(kc, k)
		}
	}
	arn, file := getenv(EnvKeyARN), getenv(EnvKeyFile)
	switch {
	case arn != "" && file != "":
		return Config{}, fmt.Errorf("keeperfn: set %s or %s, not both", EnvKeyARN, EnvKeyFile)
	case arn != "":
		kc["key"] = "secretsmanager:" + arn
	case file != "":
		kc["key"] = "file:" + file
	default:
		return Config{}, fmt.Errorf("keeperfn: set %s (a Secrets Manager ARN) or %s", EnvKeyARN, EnvKeyFile)
	}
	execute := getenv(EnvExecute) == "true"
	ledger := getenv(EnvLedger)
	if table := getenv(EnvTable); table != "" {
		if ledger != "" {
			return Config{}, fmt.Errorf("keeperfn: set %s or %s, not both", EnvTable, EnvLedger)
		}
		ledger = "dynamodb:" + table // the gateway's table: persistent, shared by every instance
	}
	if execute && (ledger == "" || strings.HasPrefix(filepath.Clean(ledger), "/tmp/")) {
		return Config{}, fmt.Errorf("keeperfn: %s=true needs %s on persistent storage: a ledger in /tmp is lost with the instance, and a retried run would pay twice", EnvExecute, EnvLedger)
	}
	if ledger == "" {
		ledger = filepath.Join(os.TempDir(), "c0mpute-keeper-ledger.db")
	}
	kc["store"] = ledger
	b, err := json.Marshal(kc)
	if err != nil {
		return Config{}, fmt.Errorf("keeperfn: %w", err)
	}
	c := Config{Keeper: b, Execute: execute, Log: log}
	return c, validate.Struct(c)
}

// Handler runs one job per invocation.
type Handler struct {
	Config Config
	Run    Runner
	// Dir holds the configuration file ("" = os.TempDir()).
	Dir string
	Now func() time.Time
	// Logs receives the keeper command's own log lines (JSON, one per
	// line: every signature it sends and settles) as they are written;
	// nil: os.Stderr, which Lambda ships to CloudWatch Logs.
	Logs io.Writer
	// Metrics counts outcomes, transactions, fees and the treasury's
	// balances; nil: none.
	Metrics *metrics.Emitter
	// Reserve is the time kept back from the invocation's deadline to
	// report the run; 0: 15 s.
	Reserve time.Duration
}

// Handle is the Lambda entry point.
func (h *Handler) Handle(ctx context.Context, ev Event) (Result, error) {
	if err := validate.Struct(ev); err != nil {
		return Result{}, fmt.Errorf("keeperfn: bad event: %w", err)
	}
	at := time.Now()
	if h.Now != nil {
		at = h.Now()
	}
	if ev.ScheduledTime != "" {
		t, err := time.Parse(time.RFC3339, ev.ScheduledTime)
		if err != nil {
			return Result{}, fmt.Errorf("keeperfn: scheduled_time %q: %w", ev.ScheduledTime, err)
		}
		at = t
	}
	day := at.UTC().Format(time.DateOnly)
	execute := h.Config.Execute && ev.Execute
	res := Result{Job: ev.Job, Day: day, Execute: execute}
	log := h.Config.Log.With("job", ev.Job, "day", day, "execute", execute, "execution_id", ev.ExecutionID, "attempt", ev.Attempt)
	if ev.Execute && !h.Config.Execute {
		log.Warn("execution asked for but not enabled (C0MPUTE_KEEPER_EXECUTE): dry run")
	}
	dir := h.Dir
	if dir == "" {
		dir = os.TempDir()
	}
	cfgPath := filepath.Join(dir, "c0mpute-keeper.json")
	if err := os.WriteFile(cfgPath, h.Config.Keeper, 0o600); err != nil {
		return res, fmt.Errorf("keeperfn: write config: %w", err)
	}
	args := []string{"-config", cfgPath, "-json"}
	if execute {
		args = append(args, "-execute")
	}
	if ev.Job == JobRequestedPayouts {
		// The hour names the run.
		args = append(args, "-at", at.UTC().Format(time.RFC3339), ev.Job)
	} else {
		args = append(args, "-at", day, ev.Job)
	}
	// The keeper stops sending while there is still time to report: the
	// executor reads this deadline.
	if dl, ok := ctx.Deadline(); ok {
		reserve := h.Reserve
		if reserve == 0 {
			reserve = 15 * time.Second
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-reserve))
		defer cancel()
	}
	logs := h.Logs
	if logs == nil {
		logs = os.Stderr
	}
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := h.Run(ctx, args, &stdout, io.MultiWriter(&stderr, logs))
	took := time.Since(start)
	dims := []metrics.Dim{{Name: "Job", Value: ev.Job}}
	if code != 0 {
		res.Outcome = OutcomeFailure
		if code == keepercli.ExitIncomplete {
			res.Outcome = OutcomeIncomplete
		}
		h.Metrics.Put(append(dims, metrics.Dim{Name: "Outcome", Value: res.Outcome}), metrics.Metric{Name: metrics.KeeperRuns, Unit: metrics.UnitCount, Value: 1})
		msg := lastLine(strings.TrimSpace(stderr.String()))
		log.Error("keeper run "+res.Outcome, "outcome", res.Outcome, "code", code, "seconds", took.Seconds(), "err", msg)
		// An error makes Lambda retry (a re-run resumes from the ledger)
		// and, after the retries, sends the event to the failure
		// destination, which alarms.
		return res, fmt.Errorf("keeperfn: %s run for %s: %s (exit %d): %s", ev.Job, day, res.Outcome, code, msg)
	}
	plan := bytes.TrimSpace(stdout.Bytes())
	if !json.Valid(plan) {
		res.Outcome = OutcomeFailure
		h.Metrics.Put(append(dims, metrics.Dim{Name: "Outcome", Value: res.Outcome}), metrics.Metric{Name: metrics.KeeperRuns, Unit: metrics.UnitCount, Value: 1})
		log.Error("keeper run failure: its report is not JSON", "outcome", res.Outcome, "bytes", len(plan))
		return res, errors.New("keeperfn: keeper printed a plan that is not JSON")
	}
	res.Outcome = OutcomeSuccess
	if len(plan) <= MaxResultPlan {
		res.Plan = json.RawMessage(plan)
	} else {
		res.PlanInLogs = true
	}
	logPlan(log, plan)
	log.Info("keeper run done", "outcome", res.Outcome, "seconds", took.Seconds())
	h.Metrics.Put(append(dims, metrics.Dim{Name: "Outcome", Value: res.Outcome}), metrics.Metric{Name: metrics.KeeperRuns, Unit: metrics.UnitCount, Value: 1})
	h.Metrics.Put(dims, figures(plan)...)
	return res, nil
}

// planPart is how many items of a long list one log line holds: a
// CloudWatch Logs event is at most 256 KB, and a 10,000-staker plan is
// megabytes.
const planPart = 100

// logPlan logs the plan as structured JSON, searchable by job and day: one
// line with the plan, its long lists replaced by their lengths, and then
// each long list in parts of planPart items, named by their path.
func logPlan(log *slog.Logger, plan []byte) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(plan))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return
	}
	type part struct {
		path  string
		items []any
	}
	var parts []part
	var walk func(path string, v any) any
	walk = func(path string, v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				x[k] = walk(strings.TrimPrefix(path+"."+k, "."), e)
			}
		case []any:
			if len(x) > planPart {
				parts = append(parts, part{path, x})
				return map[string]any{"items": len(x), "logged_in_parts_of": planPart}
			}
			for i, e := range x {
				x[i] = walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
		return v
	}
	v = walk("", v)
	log.Info("keeper plan", "plan", v)
	for _, p := range parts {
		for i := 0; i < len(p.items); i += planPart {
			log.Info("keeper plan part", "path", p.path, "from", i, "items", p.items[i:min(i+planPart, len(p.items))])
		}
	}
}

// figures reads what the metrics count from the keeper's JSON report
// (keepercli.Report): the treasury's balances, and the transactions sent
// and their fees.
func figures(plan []byte) []metrics.Metric {
	type result struct {
		Transactions int    `json:"transactions"`
		FeesSOL      string `json:"fees_sol"`
	}
	var p struct {
		Treasury struct {
			USDC string `json:"usdc"`
			SOL  string `json:"sol"`
		} `json:"treasury"`
		Rewards *struct {
			Result *result `json:"result"`
		} `json:"rewards"`
		Payouts *struct {
			Result *result `json:"result"`
		} `json:"payouts"`
	}
	if json.Unmarshal(plan, &p) != nil {
		return nil
	}
	var out []metrics.Metric
	if n, ok := baseUnits(p.Treasury.USDC, 6); ok {
		out = append(out, metrics.Metric{Name: metrics.TreasuryUSDC, Unit: metrics.UnitNone, Value: float64(n)})
	}
	if n, ok := baseUnits(p.Treasury.SOL, 9); ok {
		out = append(out, metrics.Metric{Name: metrics.TreasuryLamports, Unit: metrics.UnitNone, Value: float64(n)})
	}
	var r *result
	switch {
	case p.Rewards != nil:
		r = p.Rewards.Result
	case p.Payouts != nil:
		r = p.Payouts.Result
	}
	if r != nil {
		out = append(out, metrics.Metric{Name: metrics.KeeperTransactions, Unit: metrics.UnitCount, Value: float64(r.Transactions)})
		if n, ok := baseUnits(r.FeesSOL, 9); ok {
			out = append(out, metrics.Metric{Name: metrics.KeeperFees, Unit: metrics.UnitNone, Value: float64(n)})
		}
	}
	return out
}

// baseUnits reads a decimal amount ("1.600000") in base units of a token
// with these decimals, exactly.
func baseUnits(s string, decimals int) (int64, bool) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || len(frac) > decimals {
		return 0, false
	}
	n, err := strconv.ParseUint(whole+frac+strings.Repeat("0", decimals-len(frac)), 10, 63)
	if err != nil {
		return 0, false
	}
	return int64(n), true
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
