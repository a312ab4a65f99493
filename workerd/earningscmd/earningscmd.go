// Package earningscmd is `workerd earnings`: what the contributor's
// account has earned, been paid and is owed, its payout wallet and next
// payout, and each worker identity's figures, read from the gateway's GET
// /v1/earnings with the worker token workerd already holds (the gateway
// lets a worker token read its own account's earnings, nothing else).
//
//	workerd earnings [--json] [run flags: --api-url URL, --token cwt_…, --home DIR, --config FILE, …]
//
// Settings come from where `workerd run` takes them (flags, environment,
// <home>/workerd.json). Credits are whole numbers (1 credit = $0.01) and
// are shown as credits and as exact dollars, computed in integers.
package earningscmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/go-playground/validator/v10"

	"github.com/c0mpute/c0mpute/workerd/config"
)

// Exit codes.
const (
	// ExitOK: the earnings were shown.
	ExitOK = 0
	// ExitFailed: the gateway could not be reached, refused the token, or
	// answered something that is not earnings.
	ExitFailed = 1
	// ExitUsage: bad flags or settings (the message names which).
	ExitUsage = 2
)

const usage = `usage: workerd earnings [--json] [flags]

Shows the earnings of the account this worker's token belongs to, from the
gateway's GET /v1/earnings: earned, paid, pending, the minimum payout, the
next payout, the payout wallet, and each worker identity's figures.
Credits are whole numbers; 1 credit = $0.01.

  --json   print the gateway's answer as JSON instead of a table

It reads the settings of workerd run (each flag also comes from an
environment variable, or a key in <home>/workerd.json); it needs the worker
token (--token, C0MPUTE_WORKER_TOKEN) and the API's URL (--api-url,
C0MPUTE_API_URL, "api_url"). workerd --help lists every flag.`

// Env is what Main reads from outside its arguments.
type Env struct {
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads the environment (os.Getenv outside tests).
	Getenv func(string) string
	// Now is the clock the table's "in 3h" times are counted from.
	Now func() time.Time
	// HTTP is the client for the gateway; nil is a client with a 30 s
	// timeout.
	HTTP *http.Client
}

// requestTimeout bounds the whole GET /v1/earnings.
const requestTimeout = 30 * time.Second

// maxBody bounds the answer read: an account's earnings with every worker
// identity it may have fit in far less.
const maxBody = 1 << 20

// Main runs `workerd earnings <args>` and returns the exit code.
func Main(args []string, env Env) int {
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.HTTP == nil {
		env.HTTP = &http.Client{Timeout: requestTimeout}
	}
	asJSON, rest, err := splitFlags(args)
	if err != nil {
		return usageError(env, err)
	}
	cfg, err := config.Load(rest, env.Getenv)
	switch {
	case errors.Is(err, config.ErrHelp):
		fmt.Fprintln(env.Stdout, usage)
		return ExitOK
	case err != nil:
		return usageError(env, err)
	case cfg.APIURL == "":
		return usageError(env, fmt.Errorf("--api-url (or %s, or \"api_url\" in workerd.json) is not set: want the gateway's API base URL, http(s)://host/v1", config.EnvAPIURL))
	}
	endpoint, err := earningsURL(cfg.APIURL)
	if err != nil {
		return usageError(env, err)
	}
	raw, e, err := fetch(env, endpoint, cfg.Token)
	if err != nil {
		fmt.Fprintln(env.Stderr, "workerd earnings:", err)
		return ExitFailed
	}
	if asJSON {
		var b strings.Builder
		if err := indent(&b, raw); err != nil {
			fmt.Fprintln(env.Stderr, "workerd earnings:", err)
			return ExitFailed
		}
		fmt.Fprint(env.Stdout, b.String())
		return ExitOK
	}
	fmt.Fprint(env.Stdout, Table(e, env.Now()))
	return ExitOK
}

func usageError(env Env, err error) int {
	fmt.Fprintf(env.Stderr, "workerd earnings: %v\n%s\n", err, usage)
	return ExitUsage
}

// splitFlags takes --json (and -json, --json=BOOL) out of args; the rest
// are workerd run's flags, for config.Load.
func splitFlags(args []string) (asJSON bool, rest []string, err error) {
	for i, a := range args {
		if a == "--" {
			return asJSON, append(rest, args[i:]...), nil
		}
		name, val, hasVal := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "json" {
			rest = append(rest, a)
			continue
		}
		switch {
		case !hasVal:
			asJSON = true
		case val == "true" || val == "1":
			asJSON = true
		case val == "false" || val == "0":
			asJSON = false
		default:
			return false, nil, fmt.Errorf("--json=%s: want --json, --json=true or --json=false", val)
		}
	}
	return asJSON, rest, nil
}

// earningsURL is GET /v1/earnings under the API base URL, which may be
// given with or without its /v1.
func earningsURL(base string) (string, error) {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--api-url (or %s) is %q: want the gateway's API base URL, http(s)://host/v1", config.EnvAPIURL, base)
	}
	if !strings.HasSuffix(u.Path, "/v1") {
		u.Path += "/v1"
	}
	u.Path += "/earnings"
	u.RawQuery, u.Fragment = "", ""
	return u.String(), nil
}

// Earnings is the gateway's GET /v1/earnings answer (functions/api's
// earningsJSON), as far as this command shows it. Credits: 1 = $0.01.
// The text fields are checked to be printable ASCII before they reach a
// terminal.
type Earnings struct {
	Object        string     `json:"object" validate:"eq=earnings"`
	AccountID     string     `json:"account_id" validate:"required,max=256,printascii"`
	PayoutWallet  string     `json:"payout_wallet" validate:"omitempty,max=64,alphanum"`
	Earned        int64      `json:"earned" validate:"min=0"`
	Paid          int64      `json:"paid" validate:"min=0"`
	Pending       int64      `json:"pending"`
	MinimumPayout int64      `json:"minimum_payout" validate:"min=0"`
	NextPayout    NextPayout `json:"next_payout"`
	// PayoutRequested is when the owner asked for a payout not made yet
	// (Unix seconds; 0 when none).
	PayoutRequested    int64      `json:"payout_requested"`
	WorkerSharePercent int64      `json:"worker_share_percent" validate:"min=0,max=100"`
	StakeBoost         StakeBoost `json:"stake_boost"`
	Workers            []Worker   `json:"workers" validate:"max=10000,dive"`
}

// NextPayout is the next scheduled payout.
type NextPayout struct {
	At      int64  `json:"at"`
	Credits int64  `json:"credits" validate:"min=0"`
	Reason  string `json:"reason" validate:"omitempty,max=64,printascii"`
}

// StakeBoost is the account's stake boost.
type StakeBoost struct {
	Active       bool  `json:"active"`
	Until        int64 `json:"until"`
	SharePercent int64 `json:"share_percent" validate:"min=0,max=100"`
}

// Worker is one worker identity of the account.
type Worker struct {
	Pubkey         string `json:"pubkey" validate:"required,max=64,alphanum"`
	Earned         int64  `json:"earned" validate:"min=0"`
	JobsCompleted  int64  `json:"jobs_completed" validate:"min=0"`
	CanariesPassed int64  `json:"canaries_passed" validate:"min=0"`
	Standing       string `json:"standing" validate:"omitempty,max=32,printascii"`
	LastSeen       int64  `json:"last_seen"`
}

var validate = validator.New(validator.WithRequiredStructEnabled())

// fetch GETs the earnings with the worker token and checks the answer.
func fetch(env Env, endpoint, token string) ([]byte, Earnings, error) {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return nil, Earnings{}, fmt.Errorf("GET %s: %w", endpoint, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	resp, err := env.HTTP.Do(req)
	if err != nil {
		return nil, Earnings{}, fmt.Errorf("cannot reach the gateway: %w (check --api-url or %s)", err, config.EnvAPIURL)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, Earnings{}, fmt.Errorf("GET %s: reading the answer: %w", endpoint, err)
	}
	if len(body) > maxBody {
		return nil, Earnings{}, fmt.Errorf("GET %s: the answer is over %d bytes; is --api-url the gateway's?", endpoint, maxBody)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, Earnings{}, refusal(resp.StatusCode, body, endpoint)
	}
	var e Earnings
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, Earnings{}, fmt.Errorf("GET %s answered something that is not earnings (%v); is --api-url the gateway's?", endpoint, err)
	}
	if err := validate.Struct(e); err != nil {
		return nil, Earnings{}, fmt.Errorf("GET %s answered earnings that do not check out: %v", endpoint, err)
	}
	return body, e, nil
}

// refusal turns an error answer (OpenAI's shape) into what to do.
func refusal(status int, body []byte, endpoint string) error {
	var e struct {
		Error *struct {
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	msg := fmt.Sprintf("HTTP %d", status)
	if json.Unmarshal(body, &e) == nil && e.Error != nil {
		msg = fmt.Sprintf("%s (HTTP %d %s)", truncate(e.Error.Message, 300), status, truncate(e.Error.Code, 64))
	}
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("the gateway refused the worker token: %s; check --token (or %s): a cwt_… token of your account that is not revoked",
			msg, config.EnvToken)
	case http.StatusNotFound:
		return fmt.Errorf("GET %s: %s; is --api-url (or %s) the gateway's API base URL, …/v1?", endpoint, msg, config.EnvAPIURL)
	}
	return fmt.Errorf("the gateway could not answer: %s", msg)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// indent writes JSON b indented, with a final newline.
func indent(w *strings.Builder, b []byte) error {
	var v json.RawMessage = b
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("the earnings are not JSON: %w", err)
	}
	w.Write(out)
	w.WriteByte('\n')
	return nil
}

// USD is credits in dollars, exactly: 1 credit = $0.01, in integers.
func USD(credits int64) string {
	sign := ""
	if credits < 0 {
		sign = "-"
	}
	// Not -credits: it overflows for the most negative int64.
	whole, cents := credits/100, credits%100
	if whole < 0 {
		whole = -whole
	}
	if cents < 0 {
		cents = -cents
	}
	return fmt.Sprintf("%s$%d.%02d", sign, whole, cents)
}

// money is "N credits ($X.YY)".
func money(credits int64) string {
	unit := "credits"
	if credits == 1 {
		unit = "credit"
	}
	return fmt.Sprintf("%d %s (%s)", credits, unit, USD(credits))
}

// timeFormat is how the table shows a time (UTC).
const timeFormat = "2006-01-02 15:04 UTC"

// when is a Unix time in UTC with how far it is from now.
func when(unix int64, now time.Time) string {
	if unix <= 0 {
		return "never"
	}
	t := time.Unix(unix, 0).UTC()
	d := t.Sub(now).Round(time.Minute)
	switch {
	case d > 0:
		return fmt.Sprintf("%s (in %s)", t.Format(timeFormat), short(d))
	case d < 0:
		return fmt.Sprintf("%s (%s ago)", t.Format(timeFormat), short(-d))
	}
	return t.Format(timeFormat) + " (now)"
}

// short is a duration in days, hours and minutes.
func short(d time.Duration) string {
	days, h, m := int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour), int(d%time.Hour/time.Minute)
	switch {
	case days > 0:
		return fmt.Sprintf("%dd%dh", days, h)
	case h > 0:
		return fmt.Sprintf("%dh%02dm", h, m)
	}
	return fmt.Sprintf("%dm", m)
}

// reasons say why the next payout pays nothing (the gateway's codes).
var reasons = map[string]string{
	"no_payout_wallet": "nothing: the account has no payout wallet (sign in with a wallet, or prove one: POST /v1/payout-wallet)",
	"below_minimum":    "nothing: less than the minimum payout is pending",
}

// Table is the human view of e at now.
func Table(e Earnings, now time.Time) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	wallet := e.PayoutWallet
	if wallet == "" {
		wallet = "none (earnings wait until one is set: sign in with a wallet, or POST /v1/payout-wallet)"
	}
	fmt.Fprintf(tw, "account\t%s\n", e.AccountID)
	fmt.Fprintf(tw, "payout wallet\t%s\n", wallet)
	share := fmt.Sprintf("%d%% of each job's price", e.WorkerSharePercent)
	switch {
	case e.StakeBoost.Active:
		share += fmt.Sprintf(" (stake boost until %s)", when(e.StakeBoost.Until, now))
	case e.StakeBoost.SharePercent > e.WorkerSharePercent:
		share += fmt.Sprintf(" (%d%% with the stake boost)", e.StakeBoost.SharePercent)
	}
	fmt.Fprintf(tw, "worker share\t%s\n", share)
	tw.Flush()
	fmt.Fprintln(&b)

	// Names left, figures right-aligned so that their digits line up.
	rows := [][3]string{{"", "credits", "USD"}}
	for _, row := range []struct {
		name    string
		credits int64
	}{{"earned", e.Earned}, {"paid", e.Paid}, {"pending", e.Pending}, {"minimum payout", e.MinimumPayout}} {
		rows = append(rows, [3]string{row.name, strconv.FormatInt(row.credits, 10), USD(row.credits)})
	}
	var width [3]int
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "%-*s  %*s  %*s\n", width[0], r[0], width[1], r[1], width[2], r[2])
	}
	fmt.Fprintln(&b)

	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	next := money(e.NextPayout.Credits)
	if why, ok := reasons[e.NextPayout.Reason]; ok {
		next = why
	} else if e.NextPayout.Reason != "" {
		next = "nothing: " + e.NextPayout.Reason
	}
	fmt.Fprintf(tw, "next payout\t%s: %s\n", when(e.NextPayout.At, now), next)
	if e.PayoutRequested > 0 {
		fmt.Fprintf(tw, "payout requested\t%s\n", when(e.PayoutRequested, now))
	}
	tw.Flush()
	fmt.Fprintln(&b)

	if len(e.Workers) == 0 {
		fmt.Fprintln(&b, "workers: none yet (a worker identity shows once it has connected)")
		return b.String()
	}
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tSTANDING\tJOBS\tCANARIES\tEARNED\tUSD\tLAST SEEN")
	for _, w := range e.Workers {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\n", w.Pubkey, w.Standing, w.JobsCompleted, w.CanariesPassed,
			w.Earned, USD(w.Earned), when(w.LastSeen, now))
	}
	tw.Flush()
	return b.String()
}
