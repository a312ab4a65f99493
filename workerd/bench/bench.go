// Package bench measures how fast a model answers through a
// backend.Backend: the time to its first token and its decode speed, in
// the units the gateway measures (milli-tokens per second). `workerd
// doctor` and `workerd setup` use it to tell a contributor what the network
// will see of their machine before it sees it.
//
// A measurement sends one short fixed chat request (a neutral prompt,
// greedy, a fixed seed), first once to warm the model (so the time to load
// weights is not in any figure), then Runs times, and keeps the run with the
// median speed. Nothing here logs or keeps the text of the reply.
package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-playground/validator/v10"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/workerd/backend"
)

// Defaults for a zero Options.
const (
	// DefaultMaxTokens is long enough for the gateway to measure a speed
	// (it needs 8 deltas) and short enough to take seconds on a CPU.
	DefaultMaxTokens = 64
	// DefaultRuns is one measured run after the warm-up.
	DefaultRuns = 1
)

// Prompt is the user message every measurement sends: neutral, and one a
// model answers at length, so that most models reach MaxTokens.
const Prompt = "Describe, in plain words, how a river reaches the sea."

// Options says how to measure. The zero value is DefaultMaxTokens and
// DefaultRuns.
type Options struct {
	// MaxTokens is the reply's token limit; 0 for DefaultMaxTokens.
	MaxTokens int `validate:"min=0,max=4096"`
	// Runs is how many measured runs to make after the warm-up; the
	// median is kept. 0 for DefaultRuns.
	Runs int `validate:"min=0,max=50"`
}

// Result is one measured run.
type Result struct {
	// TTFT is the time from sending the request to the first token.
	TTFT time.Duration
	// Tokens is the reply's length in tokens: the backend's completion
	// token count when it reports one, else the deltas it emitted (every
	// streaming backend emits one a token).
	Tokens int64
	// Elapsed is the time from sending the request to the end of the reply.
	Elapsed time.Duration
	// MilliTokPerSec is the tokens after the first over Elapsed, in
	// thousandths of a token per second, as the gateway measures a job
	// (functions/api measuredSpeed: prefill counts, since a user waits for
	// it too), but not capped; 0 when the reply had fewer than 2 tokens.
	MilliTokPerSec int64
}

// TokPerSec is MilliTokPerSec as a decimal string with one digit after the
// point, for people ("12.3").
func (r Result) TokPerSec() string {
	return fmt.Sprintf("%d.%d", r.MilliTokPerSec/1000, r.MilliTokPerSec%1000/100)
}

var validate = validator.New(validator.WithRequiredStructEnabled())

// ErrNoTokens is returned when the model replied with nothing: there is no
// speed to measure.
var ErrNoTokens = errors.New("the model replied with no tokens")

// Run measures model on be: one warm-up run, then opt.Runs measured runs,
// and returns the one with the median speed. The first error ends it;
// cancel ctx to stop it early.
func Run(ctx context.Context, be backend.Backend, model string, opt Options) (Result, error) {
	if err := validate.Struct(opt); err != nil {
		return Result{}, fmt.Errorf("bench: options: MaxTokens must be 0..4096 and Runs 0..50 (got %d, %d)", opt.MaxTokens, opt.Runs)
	}
	if strings.TrimSpace(model) == "" {
		return Result{}, errors.New("bench: no model name")
	}
	if opt.MaxTokens == 0 {
		opt.MaxTokens = DefaultMaxTokens
	}
	if opt.Runs == 0 {
		opt.Runs = DefaultRuns
	}
	if _, err := once(ctx, be, model, opt.MaxTokens); err != nil {
		return Result{}, fmt.Errorf("bench: warm-up: %w", err)
	}
	runs := make([]Result, 0, opt.Runs)
	for i := range opt.Runs {
		r, err := once(ctx, be, model, opt.MaxTokens)
		if err != nil {
			return Result{}, fmt.Errorf("bench: run %d of %d: %w", i+1, opt.Runs, err)
		}
		runs = append(runs, r)
	}
	return Median(runs), nil
}

// Median is the run of runs with the median speed (the lower of the two
// middle ones for an even count), or the zero Result for none.
func Median(runs []Result) Result {
	if len(runs) == 0 {
		return Result{}
	}
	s := slices.Clone(runs)
	slices.SortStableFunc(s, func(a, b Result) int {
		switch {
		case a.MilliTokPerSec < b.MilliTokPerSec:
			return -1
		case a.MilliTokPerSec > b.MilliTokPerSec:
			return 1
		}
		return 0
	})
	return s[(len(s)-1)/2]
}

// Speed is tokens after the first over elapsed in milli-tokens per second,
// the gateway's formula without its cap; 0 for fewer than 2 tokens or no
// time. It cannot overflow for any reply a backend can stream.
func Speed(tokens int64, elapsed time.Duration) int64 {
	us := elapsed.Microseconds()
	if tokens < 2 || us <= 0 {
		return 0
	}
	return (tokens - 1) * 1_000_000_000 / us
}

// request is the fixed chat request: greedy, seeded, limited to n tokens.
func request(model string, n int) *oaiwire.ChatRequest {
	temp, seed, limit := 0.0, int64(1), int64(n)
	return &oaiwire.ChatRequest{
		Model:       model,
		Messages:    []oaiwire.Message{{Role: "user", Content: oaiwire.Content{Text: Prompt}}},
		Stream:      true,
		MaxTokens:   &limit,
		Temperature: &temp,
		Seed:        &seed,
	}
}

// once runs the request one time and times it.
func once(ctx context.Context, be backend.Backend, model string, n int) (Result, error) {
	var (
		deltas int64
		first  time.Time
	)
	start := time.Now()
	res, err := be.Chat(ctx, model, request(model, n), func(d oaiwire.Delta) error {
		if d.Content == "" && d.Reasoning == "" && len(d.ToolCalls) == 0 {
			return nil
		}
		if deltas == 0 {
			first = time.Now()
		}
		deltas++
		return nil
	})
	end := time.Now()
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("%s chat with %s: %w", be.Name(), model, context.Cause(ctx))
		}
		// SafeText: the server's own words may quote the prompt.
		return Result{}, fmt.Errorf("%s chat with %s: %s", be.Name(), model, backend.SafeText(err))
	}
	tokens := deltas
	if res.Usage.CompletionTokens > 0 {
		tokens = res.Usage.CompletionTokens
	}
	if deltas == 0 || tokens == 0 {
		return Result{}, ErrNoTokens
	}
	elapsed := end.Sub(start)
	return Result{
		TTFT:           first.Sub(start),
		Tokens:         tokens,
		Elapsed:        elapsed,
		MilliTokPerSec: Speed(tokens, elapsed),
	}, nil
}
