package agent

import (
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
)

// Observer is told what the agent does, so that an operator can watch a
// worker (workerd's Prometheus endpoint, workerd/metrics, is one). Models
// are network model ids; nothing of a prompt or a completion is passed,
// only counts and timings. The agent calls it from its job goroutines
// concurrently, while it works: an Observer must be safe for concurrent use
// and return at once. A nil Config.Observer observes nothing.
type Observer interface {
	// RelayState reports the relay connection's state each time it
	// changes.
	RelayState(state RelayState)
	// Reconnected counts a relay connection made after the previous one
	// was lost (a roll before the 2 h cap is not one).
	Reconnected()
	// JobStarted reports a job the relay handed over. Each is followed by
	// one JobEnded for the same model.
	JobStarted(model string)
	// FirstToken reports how long a job took from its arrival to its
	// first delta with text.
	FirstToken(model string, after time.Duration)
	// JobEnded reports how a job ended, with the token counts it
	// reported (a reply cut at its deadline counts its deltas as
	// completion tokens; other outcomes report none).
	JobEnded(model string, outcome Outcome, usage oaiwire.Usage)
	// BackendError counts an error of the local backend: a job's
	// generation that failed (model set), or listing the backend's models
	// (model "").
	BackendError(model string)
}

// RelayState is the state of the agent's relay connection.
type RelayState string

// Relay connection states.
const (
	// RelayConnecting: no registered connection; the agent is dialling
	// or waiting to retry.
	RelayConnecting RelayState = "connecting"
	// RelayConnected: a registered connection takes jobs.
	RelayConnected RelayState = "connected"
	// RelayRefused: the network refused the worker for good (a revoked
	// token, a ban, no model it serves); Run returned.
	RelayRefused RelayState = "refused"
	// RelayStopped: Run returned after its context ended.
	RelayStopped RelayState = "stopped"
)

// RelayStates are every RelayState, for an observer that shows them all.
var RelayStates = []RelayState{RelayConnecting, RelayConnected, RelayRefused, RelayStopped}

// Outcome is how a job ended.
type Outcome string

// Job outcomes.
const (
	// OutcomeCompleted: the reply was delivered whole, with its receipt.
	OutcomeCompleted Outcome = "completed"
	// OutcomeDeadline: the job's deadline came first; the reply was
	// delivered as far as it went (finish_reason "length").
	OutcomeDeadline Outcome = "deadline"
	// OutcomeCancelled: the gateway cancelled the job, or its deadline
	// passed before the backend stopped; nothing more was sent.
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeFailed: the backend failed the generation.
	OutcomeFailed Outcome = "failed"
	// OutcomeInternal: the agent could not serve or sign the job (a
	// panic, a receipt it could not make).
	OutcomeInternal Outcome = "internal"
	// OutcomeRefused: the job was for a model this worker does not
	// serve.
	OutcomeRefused Outcome = "refused"
)

// Outcomes are every Outcome, for an observer that shows them all.
var Outcomes = []Outcome{OutcomeCompleted, OutcomeDeadline, OutcomeCancelled, OutcomeFailed, OutcomeInternal, OutcomeRefused}

// nopObserver observes nothing: the Observer of a Config that sets none.
type nopObserver struct{}

func (nopObserver) RelayState(RelayState)                   {}
func (nopObserver) Reconnected()                            {}
func (nopObserver) JobStarted(string)                       {}
func (nopObserver) FirstToken(string, time.Duration)        {}
func (nopObserver) JobEnded(string, Outcome, oaiwire.Usage) {}
func (nopObserver) BackendError(string)                     {}
