// Package metrics writes the functions' metrics as CloudWatch embedded
// metric format (EMF) records: one JSON object per line on a writer — the
// function's standard output in Lambda, where CloudWatch Logs extracts the
// metrics from the log events as they arrive. Nothing calls the CloudWatch
// API, so a metric costs no round trip and no permission beyond logging.
//
// Privacy: a record carries metric names, numbers and dimension values, and
// the callers choose dimension values from closed sets (catalog model ids,
// the API's error codes, "other" for anything else). Prompt and completion
// text never reach a metric, and neither does any value a client chooses
// freely, which would also make a metric per distinct value.
//
// The format (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html):
// the root object holds "_aws" {Timestamp in ms, CloudWatchMetrics: [one
// directive: Namespace, Dimensions (a list of dimension sets), Metrics (at
// most 100 name/unit pairs)]} and, as top-level members, every dimension
// value (a string of at most 1024 characters) and every metric value (a
// number). A log event must be exactly one JSON object, so a record is one
// line, written with one Write.
//
// In Lambda: everything a function writes to standard output goes to
// CloudWatch Logs, which extracts the records
// (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Lambda.html).
// With the JSON log format (Terraform's logging_config), Lambda structures
// the application logs only of the Java, .NET, Node.js and Python runtimes'
// own loggers; for an OS-only runtime like ours it formats its system logs
// only, and it never encodes again a line that is JSON already
// (https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-logformat.html),
// so a record arrives as its own log event, as written. The functions'
// slog JSON logs share stdout (lambdaenv): an *os.File serializes Writes,
// and each side writes a line with one, so they never interleave.
package metrics

import (
	"encoding/json"
	"io"
	"math"
	"os"
	"strconv"
	"sync"
	"time"
)

// EnvNamespace names the environment variable with the CloudWatch
// namespace: Terraform sets "c0mpute/<name>" per deployment.
const EnvNamespace = "C0MPUTE_METRICS_NAMESPACE"

// DefaultNamespace is the namespace when none is configured.
const DefaultNamespace = "c0mpute"

// Units, as CloudWatch names them.
const (
	UnitCount        = "Count"
	UnitMilliseconds = "Milliseconds"
	UnitNone         = "None"
)

// Metric names. The Terraform alarms and dashboard refer to them by these
// strings, and its test checks them against Names.
const (
	// Requests counts the API's requests: chat completions with dims
	// {Model} (and the aggregate), every other route in the aggregate
	// only, so that the no-dimension series is every answer.
	Requests = "Requests"
	// Errors counts the API's error answers, dims {Code}: the
	// OpenAI-shaped error code (rate_limit_exceeded, no_worker_available,
	// invalid_request, …), or "other".
	Errors = "Errors"
	// ServerErrors counts the API's 5xx answers (no dimension).
	ServerErrors = "ServerErrors"
	// TTFT is the milliseconds from a request's arrival to its first
	// token, dims {Model}.
	TTFT = "TTFT"
	// Duration is the milliseconds a chat request took, dims {Model}.
	Duration = "Duration"
	// PromptTokens and CompletionTokens are a completed request's usage,
	// dims {Model}.
	PromptTokens     = "PromptTokens"
	CompletionTokens = "CompletionTokens"
	// Refunds counts refunded jobs, dims {Model}.
	Refunds = "Refunds"
	// QueueWait is the milliseconds a job waited for a worker before one
	// took it, or until it gave up, dims {Model}.
	QueueWait = "QueueWait"
	// QueueDepth is a gauge: the queued jobs of a model, dims {Model}.
	QueueDepth = "QueueDepth"
	// OnlineWorkers is a gauge: the registered workers serving a model,
	// dims {Model}.
	OnlineWorkers = "OnlineWorkers"
	// KeeperRuns counts the keeper's runs, dims {Job, Outcome} (success,
	// failure, incomplete).
	KeeperRuns = "KeeperRuns"
	// KeeperTransactions and KeeperFees are what a keeper run sent and
	// paid, in transactions and lamports.
	KeeperTransactions = "KeeperTransactions"
	KeeperFees         = "KeeperFeesLamports"
	// TreasuryUSDC (base units) and TreasuryLamports are the treasury's
	// balances as the keeper read them.
	TreasuryUSDC     = "TreasuryUSDC"
	TreasuryLamports = "TreasuryLamports"
)

// Names lists every metric name above.
var Names = []string{
	Requests, Errors, ServerErrors, TTFT, Duration, PromptTokens, CompletionTokens, Refunds,
	QueueWait, QueueDepth, OnlineWorkers, KeeperRuns, KeeperTransactions, KeeperFees,
	TreasuryUSDC, TreasuryLamports,
}

// Dim is one dimension of a record.
type Dim struct{ Name, Value string }

// Metric is one value of a record. Unit is a CloudWatch unit (UnitCount,
// UnitMilliseconds, UnitNone); empty is UnitNone.
type Metric struct {
	Name  string
	Unit  string
	Value float64
}

// Limits of the format.
const (
	// maxMetrics is the most metric definitions one directive may hold;
	// Put writes more as several records.
	maxMetrics = 100
	// maxDims is the most dimensions one dimension set may hold.
	maxDims = 30
	// maxDimName and maxDimValue bound a dimension's name and value.
	maxDimName  = 250
	maxDimValue = 1024
)

// otherValue replaces a dimension value the format cannot carry (empty
// or too long), so that the record, and its aggregate series, still
// counts.
const otherValue = "other"

// Emitter writes EMF records. It is safe for concurrent use: each record is
// built apart and written with one Write under a lock, so records never
// interleave. A nil *Emitter drops everything, so a caller without metrics
// configured needs no checks.
type Emitter struct {
	w         io.Writer
	namespace string
	now       func() time.Time

	mu  sync.Mutex
	buf []byte
}

// New returns an emitter writing to w in namespace ("" is
// DefaultNamespace); nil when w is nil.
func New(w io.Writer, namespace string) *Emitter {
	if w == nil {
		return nil
	}
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return &Emitter{w: w, namespace: namespace, now: time.Now}
}

// FromEnv is New with the namespace from EnvNamespace.
func FromEnv(w io.Writer) *Emitter { return New(w, os.Getenv(EnvNamespace)) }

// Put writes one record of ms with the dimensions dims, in two dimension
// sets: all of dims, and none — the aggregate series, which alarms use. A
// metric with an empty name or a value JSON cannot hold (NaN, ±Inf), or
// named again in the same call, is left out; a dimension whose name is
// empty, too long, repeated or a metric's is left out; a value that is
// empty or too long is written as "other". More than 100 metrics are
// written as several records.
func (e *Emitter) Put(dims []Dim, ms ...Metric) {
	if e == nil {
		return
	}
	ms = validMetrics(ms)
	if len(ms) == 0 {
		return
	}
	dims = validDims(dims, ms)
	e.mu.Lock()
	defer e.mu.Unlock()
	at := e.now().UnixMilli()
	for len(ms) > 0 {
		n := min(len(ms), maxMetrics)
		e.buf = appendRecord(e.buf[:0], e.namespace, at, dims, ms[:n])
		// A metric is not worth failing the caller for: a write that
		// fails (a closed stdout) loses the record and nothing else.
		_, _ = e.w.Write(e.buf)
		ms = ms[n:]
	}
}

// validMetrics is ms without the metrics Put leaves out.
func validMetrics(ms []Metric) []Metric {
	out := make([]Metric, 0, len(ms))
	seen := make(map[string]bool, len(ms))
	for _, m := range ms {
		if m.Name == "" || seen[m.Name] || math.IsNaN(m.Value) || math.IsInf(m.Value, 0) {
			continue
		}
		seen[m.Name] = true
		if m.Unit == "" {
			m.Unit = UnitNone
		}
		out = append(out, m)
	}
	return out
}

// validDims is dims without the dimensions Put leaves out, values made
// writable.
func validDims(dims []Dim, ms []Metric) []Dim {
	taken := map[string]bool{"_aws": true}
	for _, m := range ms {
		taken[m.Name] = true
	}
	out := make([]Dim, 0, len(dims))
	for _, d := range dims {
		if d.Name == "" || len(d.Name) > maxDimName || taken[d.Name] || len(out) == maxDims {
			continue
		}
		taken[d.Name] = true
		if d.Value == "" || len(d.Value) > maxDimValue {
			d.Value = otherValue
		}
		out = append(out, d)
	}
	return out
}

// appendRecord appends one record, its members in a fixed order (_aws,
// dimensions, metrics) so that the output is stable.
func appendRecord(b []byte, namespace string, at int64, dims []Dim, ms []Metric) []byte {
	b = append(b, `{"_aws":{"Timestamp":`...)
	b = strconv.AppendInt(b, at, 10)
	b = append(b, `,"CloudWatchMetrics":[{"Namespace":`...)
	b = appendString(b, namespace)
	b = append(b, `,"Dimensions":[`...)
	if len(dims) > 0 {
		b = append(b, '[')
		for i, d := range dims {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, d.Name)
		}
		b = append(b, "],"...)
	}
	b = append(b, `[]],"Metrics":[`...)
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"Name":`...)
		b = appendString(b, m.Name)
		b = append(b, `,"Unit":`...)
		b = appendString(b, m.Unit)
		b = append(b, '}')
	}
	b = append(b, "]}]}"...)
	for _, d := range dims {
		b = append(b, ',')
		b = appendString(b, d.Name)
		b = append(b, ':')
		b = appendString(b, d.Value)
	}
	for _, m := range ms {
		b = append(b, ',')
		b = appendString(b, m.Name)
		b = append(b, ':')
		b = appendNumber(b, m.Value)
	}
	return append(b, "}\n"...)
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	q, err := json.Marshal(s)
	if err != nil { // cannot happen: every string encodes (invalid UTF-8 as U+FFFD)
		return append(b, `""`...)
	}
	return append(b, q...)
}

// appendNumber appends a finite v as a JSON number, as encoding/json
// writes it: plain decimals, exponents only for very large or small values.
func appendNumber(b []byte, v float64) []byte {
	if abs := math.Abs(v); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		return strconv.AppendFloat(b, v, 'e', -1, 64)
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

// Gauges paces the network gauges (QueueDepth and OnlineWorkers per model)
// of one process: Due lets one caller through per interval, and Put
// writes them. Its zero value with an Emitter set is ready to use.
type Gauges struct {
	Emitter *Emitter
	// Every is the interval; zero is GaugeEvery.
	Every time.Duration

	mu   sync.Mutex
	last time.Time
}

// GaugeEvery is the gauges' default interval: CloudWatch's standard
// resolution is one minute, so more often adds cost and no information.
const GaugeEvery = time.Minute

// Due reports whether the gauges should be written at now, and if so
// counts them as written: of concurrent callers, one is told yes. With no
// Emitter it is always false, so the caller reads nothing for them.
func (g *Gauges) Due(now time.Time) bool {
	if g == nil || g.Emitter == nil {
		return false
	}
	every := g.Every
	if every <= 0 {
		every = GaugeEvery
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.last.IsZero() && now.Sub(g.last) < every && !now.Before(g.last) {
		return false
	}
	g.last = now
	return true
}

// Put writes one record per model: its QueueDepth and OnlineWorkers from
// queue and online (0 for a model missing there, so that an alarm sees a
// model nobody serves as 0, not as missing data). models are the catalog's
// ids: only those become dimension values.
func (g *Gauges) Put(models []string, queue, online map[string]int64) {
	if g == nil {
		return
	}
	for _, m := range models {
		g.Emitter.Put([]Dim{{Name: "Model", Value: m}},
			Metric{Name: QueueDepth, Unit: UnitCount, Value: float64(queue[m])},
			Metric{Name: OnlineWorkers, Unit: UnitCount, Value: float64(online[m])})
	}
}
