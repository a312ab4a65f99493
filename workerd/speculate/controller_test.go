package speculate_test

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/workerd/speculate"
)

// ring is a synthetic ring for the Controller: loops cost a + b·rows,
// drafting c per token, and each draft is accepted while a Weyl sequence
// (frac(i·φ), deterministic and evenly spread) stays under alpha, so the
// acceptance rate is alpha with no randomness.
type ring struct {
	alpha   float64
	a, b, c time.Duration
	trial   int
}

func (r *ring) accept() bool {
	r.trial++
	_, frac := math.Modf(float64(r.trial) * (math.Sqrt(5) - 1) / 2)
	return frac < r.alpha
}

// loop runs one loop of γ drafts through ctl and returns γ.
func (r *ring) loop(ctl *speculate.Controller) int {
	g := ctl.Gamma()
	accepted := 0
	for accepted < g && r.accept() {
		accepted++
	}
	if g > 0 {
		ctl.ObserveDraft(g, time.Duration(g)*r.c)
	}
	ctl.Observe(g, accepted, r.a+time.Duration(g+1)*r.b)
	return g
}

// optimum is the γ in [0, 16] that maximises E(α, γ)/T(γ), computed here
// from the definitions.
func optimum(alpha float64, a, b, c time.Duration) int {
	best, bestRate := 0, 0.0
	for g := 0; g <= speculate.MaxGamma; g++ {
		e := float64(g + 1)
		if alpha < 1 {
			e = (1 - math.Pow(alpha, float64(g+1))) / (1 - alpha)
		}
		rate := e / (a + time.Duration(g+1)*b + time.Duration(g)*c).Seconds()
		if rate > bestRate {
			best, bestRate = g, rate
		}
	}
	return best
}

// With steady synthetic loops the Controller settles within one step of
// the γ that maximises E/T, and its estimates approach the ring's.
func TestControllerFindsOptimum(t *testing.T) {
	const ms = time.Millisecond
	for _, c := range []struct {
		name    string
		alpha   float64
		a, b, c time.Duration
	}{
		{"α 0.5", 0.5, 100 * ms, 1 * ms, 0},
		{"α 0.8", 0.8, 100 * ms, 1 * ms, 0},
		{"α 0.95", 0.95, 100 * ms, 1 * ms, 0},
		{"α 0.8, costly rows", 0.8, 100 * ms, 10 * ms, 0},
		{"α 0.8, costly drafting", 0.8, 100 * ms, 1 * ms, 5 * ms},
		{"α 0.6, local ring", 0.6, 5 * ms, 2 * ms, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := optimum(c.alpha, c.a, c.b, c.c)
			r := &ring{alpha: c.alpha, a: c.a, b: c.b, c: c.c}
			ctl := speculate.NewController(speculate.MaxGamma)
			var gammas []int
			for range 600 {
				gammas = append(gammas, r.loop(ctl))
			}
			for i, g := range gammas[300:] {
				if g < want-1 || g > want+1 {
					t.Fatalf("loop %d: γ = %d, want %d ± 1 (last loops %v)", 300+i, g, want, gammas[max(0, 300+i-10):300+i+1])
				}
			}
			e := ctl.Estimate()
			t.Logf("γ* = %d; settled on %v; estimate %+v", want, gammas[590:], e)
			if math.Abs(e.Alpha-c.alpha) > 0.05 {
				t.Errorf("estimated α %.3f, want %.2f ± 0.05", e.Alpha, c.alpha)
			}
			if d := e.Fixed - c.a; d < -c.a/100 || d > c.a/100 {
				t.Errorf("estimated fixed cost %v, want %v ± 1%%", e.Fixed, c.a)
			}
			if d := e.PerRow - c.b; d < -c.b/20 || d > c.b/20 {
				t.Errorf("estimated cost per row %v, want %v ± 5%%", e.PerRow, c.b)
			}
			if d := e.PerDraft - c.c; d < -c.c/20-time.Microsecond || d > c.c/20+time.Microsecond {
				t.Errorf("estimated drafting cost %v, want %v ± 5%%", e.PerDraft, c.c)
			}
		})
	}
}

// Drafts that are never accepted drive γ to 0, with a one-draft probe
// every 16th loop; once the text turns predictable, a probe's success
// brings γ back up.
func TestControllerNeverAccepted(t *testing.T) {
	const ms = time.Millisecond
	r := &ring{alpha: 0, a: 100 * ms, b: 1 * ms}
	ctl := speculate.NewController(speculate.MaxGamma)
	var gammas []int
	for range 400 {
		gammas = append(gammas, r.loop(ctl))
	}
	settled := slices.Index(gammas, 0)
	if settled < 0 || settled > 150 {
		t.Fatalf("γ reached 0 at loop %d, want within 150 loops: %v", settled, gammas[:min(len(gammas), 160)])
	}
	tail := gammas[240:]
	var probes []int
	for i, g := range tail {
		switch g {
		case 0:
		case 1:
			probes = append(probes, i)
		default:
			t.Fatalf("loop %d: γ = %d with no draft ever accepted", 240+i, g)
		}
	}
	if len(probes) != len(tail)/16 {
		t.Fatalf("%d probes in %d loops, want one in 16: at %v", len(probes), len(tail), probes)
	}
	for i := 1; i < len(probes); i++ {
		if probes[i]-probes[i-1] != 16 {
			t.Fatalf("probes at %v, want every 16th loop", probes)
		}
	}

	// The text turns predictable.
	r.alpha = 0.9
	want := optimum(0.9, r.a, r.b, 0)
	recovered := -1
	for i := range 300 {
		if g := r.loop(ctl); g >= want-1 && recovered < 0 {
			recovered = i
		}
	}
	if recovered < 0 || recovered > 150 {
		t.Fatalf("after acceptance rose to 0.9, γ reached %d at loop %d, want within 150 loops", want-1, recovered)
	}
	t.Logf("γ = 0 from loop %d; back to %d (γ* %d) in %d loops", settled, want-1, want, recovered)
}

// A probe the drafter could not fill (no proposal) stays due.
func TestControllerProbeStaysDue(t *testing.T) {
	ctl := speculate.NewController(speculate.MaxGamma)
	r := &ring{alpha: 0, a: 100 * time.Millisecond, b: time.Millisecond}
	for range 300 { // settled at 0 (TestControllerNeverAccepted)
		r.loop(ctl)
	}
	for i := 0; ctl.Gamma() != 1; i++ {
		if i == 16 {
			t.Fatal("no probe in 16 loops")
		}
		r.loop(ctl)
	}
	for range 5 {
		ctl.Observe(0, 0, r.a+r.b) // the drafter had nothing
		if g := ctl.Gamma(); g != 1 {
			t.Fatalf("after an empty probe γ = %d, want the probe (1) again", g)
		}
	}
	ctl.Observe(1, 0, r.a+2*r.b) // the probe ran, and failed
	if g := ctl.Gamma(); g != 0 {
		t.Fatalf("after a failed probe γ = %d, want 0", g)
	}
}

func TestControllerBounds(t *testing.T) {
	if g := speculate.NewController(speculate.MaxGamma).Gamma(); g != 4 {
		t.Errorf("γ before any loop = %d, want 4", g)
	}
	if g := speculate.NewController(2).Gamma(); g != 2 {
		t.Errorf("γ before any loop, at most 2 = %d, want 2", g)
	}
	if g := speculate.NewController(100).Gamma(); g != 4 {
		t.Errorf("γ before any loop, max 100 = %d, want 4", g)
	}
	r := &ring{alpha: 1, a: 100 * time.Millisecond, b: time.Microsecond}
	for _, c := range []struct{ max, want int }{{-3, 0}, {0, 0}, {3, 3}, {100, speculate.MaxGamma}} {
		ctl := speculate.NewController(c.max)
		for range 100 {
			r.loop(ctl)
		}
		if g := ctl.Gamma(); g != c.want {
			t.Errorf("NewController(%d) with every draft accepted: γ = %d, want %d", c.max, g, c.want)
		}
	}
	// Nonsense observations are clamped, not trusted.
	ctl := speculate.NewController(speculate.MaxGamma)
	ctl.Observe(-2, 9, -time.Second)
	ctl.Observe(40, 50, time.Second)
	ctl.ObserveDraft(-1, time.Second)
	ctl.ObserveDraft(3, -time.Second)
	if e := ctl.Estimate(); e.Alpha < 0 || e.Alpha > 1 || e.Fixed < 0 || e.PerRow < 0 || e.PerDraft != 0 {
		t.Errorf("estimate after nonsense observations: %+v", e)
	}
	if g := ctl.Gamma(); g < 0 || g > speculate.MaxGamma {
		t.Errorf("γ = %d after nonsense observations", g)
	}
}

// Same observations, same choices: no clock, no randomness inside.
func TestControllerDeterministic(t *testing.T) {
	run := func() []int {
		r := &ring{alpha: 0.7, a: 50 * time.Millisecond, b: 3 * time.Millisecond, c: time.Millisecond}
		ctl := speculate.NewController(speculate.MaxGamma)
		var gs []int
		for range 200 {
			gs = append(gs, r.loop(ctl))
		}
		return gs
	}
	if a, b := run(), run(); !slices.Equal(a, b) {
		t.Fatalf("two runs chose differently:\n%v\n%v", a, b)
	}
}

func TestExpectedTokens(t *testing.T) {
	for _, c := range []struct {
		alpha float64
		gamma int
		want  float64
	}{
		{0, 0, 1}, {0, 5, 1}, {1, 0, 1}, {1, 4, 5}, {0.5, 1, 1.5}, {0.5, 2, 1.75},
		{0.8, 3, 1 + 0.8 + 0.64 + 0.512}, {1.5, 3, 4}, {-1, 3, 1},
	} {
		if got := speculate.ExpectedTokens(c.alpha, c.gamma); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("ExpectedTokens(%g, %d) = %g, want %g", c.alpha, c.gamma, got, c.want)
		}
	}
	for _, c := range []struct {
		alpha, a, b, c float64
		max, want      int
	}{
		{0.5, 100, 1, 0, 16, 5},
		{0.8, 100, 1, 0, 16, 14},
		{0.95, 100, 1, 0, 16, 16},
		{0.95, 100, 1, 0, 8, 8},
		{0, 100, 1, 0, 16, 0},
		{0.9, 0, 0, 0, 16, 16}, // free loops: as many as allowed
		{0.9, 1, 10, 0, 16, 0}, // rows dear, loops cheap
	} {
		if got := speculate.BestGamma(c.alpha, c.a, c.b, c.c, c.max); got != c.want {
			t.Errorf("BestGamma(%g, a %g, b %g, c %g, max %d) = %d, want %d", c.alpha, c.a, c.b, c.c, c.max, got, c.want)
		}
	}
}
