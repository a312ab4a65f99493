// Package keeperfn is the keeper as a Lambda function: EventBridge
// Scheduler invokes it with an Event naming the job (00:00 UTC allowance,
// 15:00 UTC rewards and buyback-burn, payouts), and it runs that job once
// through the keeper's command (onchain/keepercli), as the c0mpute-keeper
// CLI would, returning the plan.
//
// Dry run by default. Executing needs both C0MPUTE_KEEPER_EXECUTE=true and
// a persistent ledger — the gateway's DynamoDB table (C0MPUTE_DYNAMODB_TABLE,
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
	"strings"
	"time"

	"github.com/go-playground/validator/v10"
)

// Environment variables the keeper function reads. Terraform sets exactly
// these (checked by the terraform tests), apart from the test-only ones.
const (
	// EnvConfig is the keepercli configuration as JSON, without "key"
	// and "store", which the function fills in.
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
// Scheduler's context attributes) or a person invokes by hand.
type Event struct {
	Job string `json:"job" validate:"oneof=allowance rewards payouts requested-payouts"`
	// ScheduledTime is when the run was due (RFC 3339); it names the day
	// even when a retry lands after midnight. Empty: now.
	ScheduledTime string `json:"scheduled_time,omitempty"`
	ExecutionID   string `json:"execution_id,omitempty"`
	Attempt       string `json:"attempt,omitempty"`
	// DryRun forces a dry run of a manual invocation when execution is
	// enabled; nothing in an event can turn execution on.
	DryRun bool `json:"dry_run,omitempty"`
	// Owed is an explicit payouts list ([{"owner", "amount"}], USDC base
	// units) and PayoutID its idempotency id; without it (the schedule)
	// the payouts job pays the workers' earnings in the store.
	Owed     json.RawMessage `json:"owed,omitempty"`
	PayoutID string          `json:"payout_id,omitempty"`
}

// Result is the function's response: what the run did or would do.
type Result struct {
	Job     string          `json:"job"`
	Day     string          `json:"day"`
	Execute bool            `json:"execute"`
	Plan    json.RawMessage `json:"plan,omitempty"`
}

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
// production).
func Load(getenv func(string) string) (Config, error) {
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
	// Dir holds the configuration and payouts files ("" = os.TempDir()).
	Dir string
	Now func() time.Time
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
	execute := h.Config.Execute && !ev.DryRun
	res := Result{Job: ev.Job, Day: day, Execute: execute}
	log := h.Config.Log.With("job", ev.Job, "day", day, "execute", execute, "execution_id", ev.ExecutionID, "attempt", ev.Attempt)
	dir := h.Dir
	if dir == "" {
		dir = os.TempDir()
	}
	cfgPath := filepath.Join(dir, "c0mpute-keeper.json")
	if err := os.WriteFile(cfgPath, h.Config.Keeper, 0o600); err != nil {
		return res, fmt.Errorf("keeperfn: write config: %w", err)
	}
	args := []string{"-config", cfgPath}
	if execute {
		args = append(args, "-execute")
	}
	switch ev.Job {
	case JobPayouts:
		if len(ev.Owed) == 0 || string(ev.Owed) == "null" {
			// The scheduled run: pay the earnings in the store.
			args = append(args, "-at", day, JobPayouts)
			break
		}
		owed := filepath.Join(dir, "c0mpute-keeper-owed.json")
		if err := os.WriteFile(owed, ev.Owed, 0o600); err != nil {
			return res, fmt.Errorf("keeperfn: write owed: %w", err)
		}
		id := ev.PayoutID
		if id == "" {
			id = "payouts/" + day
		}
		args = append(args, "-id", id, "-owed", owed, JobPayouts)
	case JobRequestedPayouts:
		// The hour names the run.
		args = append(args, "-at", at.UTC().Format(time.RFC3339), ev.Job)
	default:
		args = append(args, "-at", day, ev.Job)
	}
	var stdout, stderr bytes.Buffer
	code := h.Run(ctx, args, &stdout, &stderr)
	if code != 0 {
		msg := strings.TrimSpace(stderr.String())
		log.Error("keeper run failed", "code", code, "stderr", msg)
		return res, fmt.Errorf("keeperfn: %s run for %s failed (exit %d): %s", ev.Job, day, code, lastLine(msg))
	}
	if !json.Valid(stdout.Bytes()) {
		return res, errors.New("keeperfn: keeper printed a plan that is not JSON")
	}
	res.Plan = json.RawMessage(bytes.TrimSpace(stdout.Bytes()))
	log.Info("keeper run done", "plan_bytes", len(res.Plan))
	return res, nil
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
