// Package metrics is workerd's Prometheus endpoint: what the agent does
// (jobs by outcome, tokens, backend errors, the relay connection, busy
// time, jobs in flight, time to first token), by network model id, with
// the Go runtime's and the process's own metrics, served at /metrics on the
// address of `workerd run --metrics ADDR`. A ring member (--shard) adds
// its speculative decoding counts as a ring's driver
// (Observer.RegisterSpeculation): verification loops by the number of
// drafted tokens they carried, drafted and accepted tokens, loops with a
// rejection, and the time spent in loops and in drafting.
//
// Nothing of a prompt or a completion reaches a metric: the agent passes
// only model ids, counts and timings (agent.Observer), and a ring member
// only counts and times (speculate.Stats), never a token. Metrics live in a
// registry of their own, not the client library's global one, so that
// nothing another package registers leaks onto the endpoint.
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/workerd/agent"
)

// Namespace prefixes every metric of the agent: c0mpute_workerd_….
const Namespace = "c0mpute_workerd"

// maxModels bounds the model label values an Observer keeps: the model of a
// job comes from the network, and a label per distinct value would let a
// misbehaving relay grow the endpoint without end. Past it, jobs of further
// models are counted under OtherModel. A worker serves a handful.
const maxModels = 64

// maxModelLen is the longest model id kept as a label value (the relay's
// own bound on model ids is 128 bytes).
const maxModelLen = 128

// OtherModel is the model label of jobs past maxModels distinct models, or
// with an id too long to keep.
const OtherModel = "other"

// firstTokenBuckets are the time-to-first-token histogram's bounds in
// seconds: a loaded model on a GPU answers in tens of milliseconds, a cold
// load or a long prompt on a CPU takes tens of seconds; the gateway waits
// 60 s for a first token.
var firstTokenBuckets = []float64{0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60}

// Observer is an agent.Observer that keeps Prometheus metrics. It is safe
// for concurrent use.
type Observer struct {
	registry *prometheus.Registry

	jobs          *prometheus.CounterVec
	promptTokens  *prometheus.CounterVec
	outputTokens  *prometheus.CounterVec
	backendErrors *prometheus.CounterVec
	reconnects    prometheus.Counter
	relayState    *prometheus.GaugeVec
	inFlight      *prometheus.GaugeVec
	firstToken    *prometheus.HistogramVec

	now func() time.Time
	// addr is where Serve listens.
	addr string

	mu sync.Mutex
	// running counts jobs in flight across models; busySince is when it
	// last went from 0 to 1, busy the busy time before it.
	running   int
	busySince time.Time
	busy      time.Duration
	models    map[string]bool
}

var _ agent.Observer = (*Observer)(nil)

// New makes an Observer with its metrics registered, at zero, in a fresh
// registry (Registry), with the Go and process collectors.
func New() *Observer { return newObserver(time.Now) }

func newObserver(now func() time.Time) *Observer {
	o := &Observer{registry: prometheus.NewRegistry(), now: now, models: map[string]bool{}}
	model := []string{"model"}
	o.jobs = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "jobs_total",
		Help: "Jobs the relay handed this worker, by network model id and how they ended: completed, deadline (cut at the job's deadline, delivered), cancelled, failed (backend error), internal, refused (a model not served)."},
		[]string{"model", "outcome"})
	o.promptTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "prompt_tokens_total",
		Help: "Prompt tokens of the jobs served, as the backend counted them."}, model)
	o.outputTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "completion_tokens_total",
		Help: "Completion tokens of the jobs served, as the backend counted them (deltas for a reply cut at its deadline)."}, model)
	o.backendErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "backend_errors_total",
		Help: `Errors of the local inference backend: failed generations by model, and failures to list its models (model="").`}, model)
	o.reconnects = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "relay_reconnects_total",
		Help: "Relay connections made after the previous one was lost (rolls before the 2 h cap are not counted)."})
	o.relayState = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "relay_state",
		Help: "The relay connection's state: 1 for the current one of connecting, connected, refused, stopped; 0 for the others."},
		[]string{"state"})
	o.inFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "jobs_in_flight",
		Help: "Jobs running now, by network model id."}, model)
	o.firstToken = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "first_token_seconds",
		Help: "Time from a job's arrival to its first delta with text.", Buckets: firstTokenBuckets}, model)
	busy := prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: "busy_seconds_total",
		Help: "Time during which at least one job was running."}, func() float64 { return o.busySeconds() })
	o.registry.MustRegister(o.jobs, o.promptTokens, o.outputTokens, o.backendErrors, o.reconnects, o.relayState,
		o.inFlight, o.firstToken, busy,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, s := range agent.RelayStates {
		o.relayState.WithLabelValues(string(s)).Set(0)
	}
	return o
}

// Registry is the registry the Observer's metrics are in, for a caller
// that serves them itself or adds its own.
func (o *Observer) Registry() *prometheus.Registry { return o.registry }

// label is the model label value for a model id, bounded in number and
// length (maxModels).
func (o *Observer) label(model string) string {
	if len(model) > maxModelLen {
		return OtherModel
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.models[model] {
		return model
	}
	if len(o.models) >= maxModels {
		return OtherModel
	}
	o.models[model] = true
	return model
}

// RelayState sets the relay_state gauge: 1 for state, 0 for the others.
func (o *Observer) RelayState(state agent.RelayState) {
	for _, s := range agent.RelayStates {
		v := 0.0
		if s == state {
			v = 1
		}
		o.relayState.WithLabelValues(string(s)).Set(v)
	}
}

// Reconnected counts a reconnect.
func (o *Observer) Reconnected() { o.reconnects.Inc() }

// JobStarted counts a job in flight, and starts the busy clock if it is
// the only one.
func (o *Observer) JobStarted(model string) {
	o.inFlight.WithLabelValues(o.label(model)).Inc()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.running == 0 {
		o.busySince = o.now()
	}
	o.running++
}

// FirstToken records a job's time to first token.
func (o *Observer) FirstToken(model string, after time.Duration) {
	o.firstToken.WithLabelValues(o.label(model)).Observe(after.Seconds())
}

// JobEnded counts a job by its outcome, adds its tokens, and stops the busy
// clock when it was the last one running.
func (o *Observer) JobEnded(model string, outcome agent.Outcome, usage oaiwire.Usage) {
	m := o.label(model)
	o.jobs.WithLabelValues(m, string(outcome)).Inc()
	if usage.PromptTokens > 0 {
		o.promptTokens.WithLabelValues(m).Add(float64(usage.PromptTokens))
	}
	if usage.CompletionTokens > 0 {
		o.outputTokens.WithLabelValues(m).Add(float64(usage.CompletionTokens))
	}
	o.inFlight.WithLabelValues(m).Dec()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.running == 0 { // an end without a start: nothing to stop
		return
	}
	o.running--
	if o.running == 0 {
		o.busy += o.now().Sub(o.busySince)
	}
}

// BackendError counts a backend error.
func (o *Observer) BackendError(model string) { o.backendErrors.WithLabelValues(o.label(model)).Inc() }

// busySeconds is the busy time so far, the current stretch included.
func (o *Observer) busySeconds() float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := o.busy
	if o.running > 0 {
		d += o.now().Sub(o.busySince)
	}
	return d.Seconds()
}
