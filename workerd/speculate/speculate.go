package speculate

import (
	"context"
	"sync/atomic"
	"time"
)

// MaxGamma is the most tokens drafted for one verification loop. It
// bounds the rows a verify frame carries and the labels of Stats.
const MaxGamma = 16

// Drafter proposes the tokens that follow a sequence.
type Drafter interface {
	// Draft returns at most n tokens proposed to follow history (the
	// prompt, then every token of the reply so far, the last one
	// included). It may return fewer, or none. history is read, never
	// modified or kept past the call.
	Draft(ctx context.Context, history []int32, n int) ([]int32, error)
}

// Prefetcher is a Drafter that can draft ahead while a verification is
// in flight: Prefetch starts drafting n tokens after history in the
// background and returns at once. A later Draft whose history extends
// what was prefetched returns from it (waiting for the prefetch if it
// is still running); one that does not cancels it. Close stops any
// prefetch and frees what the drafter holds. Reset forgets what it holds
// of earlier sequences (a new request starts from nothing).
type Prefetcher interface {
	Drafter
	Prefetch(history []int32, n int)
	Reset()
	Close() error
}

// Spec is one drafter choice: Mode is ModeLookup, ModeNone or ModeModel
// (Path is then a GGUF file sharing the ring model's vocabulary).
type Spec struct {
	Mode string
	Path string
}

// Drafter modes.
const (
	ModeLookup = "lookup"
	ModeNone   = "none"
	ModeModel  = "model"
)

// Choice is the drafter of each ring model a member may drive, with a
// default for the rest.
type Choice struct {
	Default  Spec
	PerModel map[string]Spec
}

// For returns the drafter chosen for model.
func (c Choice) For(model string) Spec {
	if s, ok := c.PerModel[model]; ok {
		return s
	}
	if c.Default.Mode == "" {
		return Spec{Mode: ModeLookup}
	}
	return c.Default
}

// Stats counts a driver's verification loops, for its metrics. All
// fields are updated atomically; the zero value is ready.
type Stats struct {
	// Loops is every loop run after the prompt; ByGamma[g] those that
	// verified g drafted tokens (g = 0: a plain decode step).
	Loops   atomic.Int64
	ByGamma [MaxGamma + 1]atomic.Int64
	// Drafted and Accepted are drafted tokens sent and accepted;
	// Rejections is the loops in which a drafted token was rejected.
	Drafted, Accepted, Rejections atomic.Int64
	// LoopNanos is the loops' time, send to answer, summed; DraftNanos
	// the time spent drafting on the loop's critical path.
	LoopNanos, DraftNanos atomic.Int64
}

// Observe records one loop that sent drafted tokens and had accepted of
// them accepted, in loop time (and draft time spent before sending).
func (s *Stats) Observe(drafted, accepted int, loop, draft time.Duration) {
	s.Loops.Add(1)
	s.ByGamma[min(max(drafted, 0), MaxGamma)].Add(1)
	s.Drafted.Add(int64(drafted))
	s.Accepted.Add(int64(accepted))
	if accepted < drafted {
		s.Rejections.Add(1)
	}
	s.LoopNanos.Add(int64(loop))
	s.DraftNanos.Add(int64(draft))
}
