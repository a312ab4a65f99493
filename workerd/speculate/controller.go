package speculate

import (
	"math"
	"sync"
	"time"
)

// Controller tuning. Each is a judgement, not a measurement; the reason is
// next to it.
const (
	// startGamma is γ until the first loop is observed: enough drafts to
	// gain when they are good, few enough that a bad first guess costs
	// little.
	startGamma = 4
	// halfLife is the loops after which an observation weighs half: long
	// enough to average the randomness of acceptance (a loop says little
	// about α), short enough to follow a reply that turns from prose to
	// quoted code within a few dozen tokens.
	halfLife = 32
	// priorAlpha and priorTrials are the acceptance assumed before any
	// loop, worth priorTrials drafts: a fair rate for a matched draft
	// model, forgotten after a few loops.
	priorAlpha  = 0.6
	priorTrials = 4
	// probeEvery: while the model picks γ = 0, one loop in probeEvery
	// sends one draft anyway, so a reply that becomes predictable is
	// noticed (a probe costs one row; without it α would never be
	// measured again).
	probeEvery = 16
	// minRowVariance is the spread of rows per loop (in rows²) below which
	// the per-row cost is not refitted: with every loop the same size, time
	// cannot be told apart into a fixed and a per-row part, and jitter
	// would make the slope anything.
	minRowVariance = 0.25
)

// decay is the weight an observation keeps per later loop: 2^(-1/halfLife).
var decay = math.Exp2(-1.0 / halfLife)

// Controller chooses γ, the drafts per verification loop, to maximise the
// tokens a ring makes per second. Its model:
//
//   - acceptance: each draft is accepted with probability α, independently,
//     until the first rejection; α is estimated as A/(A+R), A the drafts
//     accepted and R the rejections (a loop has at most one), weighted by
//     recency (half-life halfLife loops that carried drafts) and starting
//     from a prior (priorAlpha, worth priorTrials drafts). A loop with γ
//     drafts then yields E(α, γ) = (1−α^(γ+1))/(1−α) tokens on average
//     (γ+1 when α = 1);
//   - cost: a loop with γ drafts takes T(γ) = a + b·(γ+1) + c·γ: a the
//     fixed part (the network hops), b per row verified, fitted by
//     recency-weighted least squares on (rows, loop time), and c the
//     drafting time per drafted token on the loop's critical path
//     (ObserveDraft). While every loop has had the same number of rows,
//     b keeps its last fit (0 at first: more rows are assumed free until
//     loops of another size show otherwise, which the larger γ that
//     assumption picks soon provides).
//
// Gamma is the γ in [0, max] that maximises E(α, γ)/T(γ), the smaller on a
// tie; before any loop it is startGamma. When that is 0 (drafts are never
// accepted), one loop in probeEvery gets γ = 1 all the same; a probe that
// drafted nothing (the drafter had no proposal) stays pending.
//
// Nothing here reads a clock or a random source: the durations come in,
// so the same observations give the same choices. It is safe for
// concurrent use.
type Controller struct {
	mu  sync.Mutex
	max int

	loops    int     // loops observed
	acc, rej float64 // weighted accepted drafts and rejections

	// Weighted sums over loops of 1, rows, rows², seconds, rows·seconds.
	s0, s1, s2, sy, sry float64
	a, b                float64 // fitted fixed and per-row seconds

	draftSec, draftToks float64 // weighted drafting seconds and tokens

	idle     int  // loops in a row whose choice was 0, since the last probe
	probeDue bool // the next loop is a probe
}

// NewController returns a Controller choosing γ in [0, maxGamma]
// (maxGamma is clamped to [0, MaxGamma]).
func NewController(maxGamma int) *Controller {
	return &Controller{
		max: min(max(maxGamma, 0), MaxGamma),
		acc: priorAlpha * priorTrials,
		rej: (1 - priorAlpha) * priorTrials,
	}
}

// Gamma is the number of tokens to draft for the next loop; 0 means a
// plain decode step.
func (c *Controller) Gamma() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.max == 0:
		return 0
	case c.loops == 0:
		return min(startGamma, c.max)
	}
	if g := c.best(); g > 0 {
		return g
	}
	if c.probeDue {
		return 1
	}
	return 0
}

// Observe records a loop that verified drafted tokens (it carried
// drafted+1 rows), of which accepted were accepted, and took loop from
// sending to the answer. Out-of-range counts are clamped.
func (c *Controller) Observe(drafted, accepted int, loop time.Duration) {
	drafted = min(max(drafted, 0), MaxGamma)
	accepted = min(max(accepted, 0), drafted)
	y := max(loop, 0).Seconds()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loops++
	if drafted > 0 {
		c.acc = c.acc*decay + float64(accepted)
		c.rej *= decay
		if accepted < drafted {
			c.rej++
		}
	}
	r := float64(drafted + 1)
	c.s0 = c.s0*decay + 1
	c.s1 = c.s1*decay + r
	c.s2 = c.s2*decay + r*r
	c.sy = c.sy*decay + y
	c.sry = c.sry*decay + r*y
	mr, my := c.s1/c.s0, c.sy/c.s0
	if v := c.s2/c.s0 - mr*mr; v >= minRowVariance {
		c.b = max((c.sry/c.s0-mr*my)/v, 0)
	}
	c.a = max(my-c.b*mr, 0)

	switch {
	case c.best() > 0:
		c.idle, c.probeDue = 0, false
	case c.probeDue && drafted == 0:
		// The probe did not happen: keep it for the next loop.
	case c.probeDue:
		c.idle, c.probeDue = 0, false
	default:
		c.idle++
		if c.idle >= probeEvery-1 {
			c.idle, c.probeDue = 0, true
		}
	}
}

// ObserveDraft records drafting that produced tokens drafts in d, on the
// critical path of a loop (drafting overlapped with a loop in flight,
// Prefetch, costs only what the driver still waited for). Calls that
// drafted nothing are ignored.
func (c *Controller) ObserveDraft(tokens int, d time.Duration) {
	if tokens <= 0 || d < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.draftSec = c.draftSec*decay + d.Seconds()
	c.draftToks = c.draftToks*decay + float64(tokens)
}

// Estimate is a Controller's current model of the ring.
type Estimate struct {
	Alpha    float64       // acceptance per draft
	Fixed    time.Duration // a: the loop's fixed cost
	PerRow   time.Duration // b: the cost per row verified
	PerDraft time.Duration // c: the drafting cost per token
}

// Estimate returns the Controller's current model (for logs and tests).
func (c *Controller) Estimate() Estimate {
	c.mu.Lock()
	defer c.mu.Unlock()
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	return Estimate{Alpha: c.alpha(), Fixed: sec(c.a), PerRow: sec(c.b), PerDraft: sec(c.perDraft())}
}

func (c *Controller) alpha() float64 {
	if c.acc+c.rej <= 0 {
		return priorAlpha
	}
	return c.acc / (c.acc + c.rej)
}

func (c *Controller) perDraft() float64 {
	if c.draftToks <= 0 {
		return 0
	}
	return c.draftSec / c.draftToks
}

// best is the γ maximising E(α, γ)/T(γ) under the current estimates.
func (c *Controller) best() int {
	return BestGamma(c.alpha(), c.a, c.b, c.perDraft(), c.max)
}

// BestGamma is the γ in [0, maxGamma] that maximises the expected tokens
// per second E(α, γ)/T(γ), T(γ) = a + b·(γ+1) + c·γ (any time unit), the
// smaller γ on a tie. Negative or NaN costs count as 0; when all are 0,
// loops are taken as alike and only E counts. It is the Controller's
// rule, exported for the benchmarks that compare a ring's rate with its
// bound.
func BestGamma(alpha, a, b, c float64, maxGamma int) int {
	nonneg := func(x float64) float64 {
		if x > 0 {
			return x
		}
		return 0
	}
	a, b, c = nonneg(a), nonneg(b), nonneg(c)
	if a+b+c == 0 {
		a = 1
	}
	best, bestRate := 0, math.Inf(-1)
	for g := 0; g <= maxGamma; g++ {
		t := a + b*float64(g+1) + c*float64(g)
		r := math.Inf(1) // t = 0: a free loop (a = b = 0, γ = 0)
		if t > 0 {
			r = ExpectedTokens(alpha, g) / t
		}
		if r > bestRate {
			best, bestRate = g, r
		}
	}
	return best
}

// ExpectedTokens is E(α, γ) = (1−α^(γ+1))/(1−α), the tokens a loop with γ
// drafts yields on average when each is accepted with probability α until
// the first rejection (γ+1 when α = 1). α is clamped to [0, 1].
func ExpectedTokens(alpha float64, gamma int) float64 {
	alpha = min(max(alpha, 0), 1)
	if alpha >= 1 {
		return float64(gamma + 1)
	}
	return (1 - math.Pow(alpha, float64(gamma+1))) / (1 - alpha)
}
