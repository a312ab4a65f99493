package speculate_test

import (
	"math"
	"testing"
)

// The statistics the acceptance tests use: Pearson's chi-square test of
// counts against expected probabilities, with its p-value from the
// regularized upper incomplete gamma function Q(s, x) (Numerical
// Recipes' series and continued fraction; no statistics library is in
// the module).

// significance is the p-value under which a distribution test fails: the
// tests are deterministic (fixed seeds), so this is the chance a correct
// implementation would have failed for a given seed choice.
const significance = 0.001

// gammaQ is the regularized upper incomplete gamma function Q(s, x) =
// Γ(s, x)/Γ(s), for s > 0, x >= 0.
func gammaQ(s, x float64) float64 {
	if x <= 0 {
		return 1
	}
	lg, _ := math.Lgamma(s)
	front := math.Exp(-x + s*math.Log(x) - lg)
	if x < s+1 {
		// P(s, x) by its series: e^-x x^s / Γ(s+1) · Σ x^n / ((s+1)…(s+n)).
		term, sum := 1/s, 1/s
		for n := 1; n < 10000; n++ {
			term *= x / (s + float64(n))
			sum += term
			if math.Abs(term) < math.Abs(sum)*1e-15 {
				break
			}
		}
		return 1 - sum*front
	}
	// Q(s, x) by its continued fraction, evaluated with Lentz's method.
	const tiny = 1e-300
	b := x + 1 - s
	c, d := 1/tiny, 1/b
	h := d
	for i := 1; i < 10000; i++ {
		an := -float64(i) * (float64(i) - s)
		b += 2
		d = an*d + b
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = b + an/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < 1e-15 {
			break
		}
	}
	return front * h
}

// chiSquare returns Pearson's statistic of counts against probabilities
// probs (summing to 1 over the categories counted), its degrees of
// freedom (categories − 1) and its p-value.
func chiSquare(counts []int, probs []float64) (stat float64, df int, p float64) {
	n := 0
	for _, c := range counts {
		n += c
	}
	for i, c := range counts {
		e := float64(n) * probs[i]
		d := float64(c) - e
		stat += d * d / e
	}
	df = len(counts) - 1
	return stat, df, gammaQ(float64(df)/2, stat/2)
}

// checkDistribution fails t unless counts fit probs (chi-square p-value
// above significance). Categories must expect at least 5 counts each.
func checkDistribution(t *testing.T, what string, counts []int, probs []float64) {
	t.Helper()
	n := 0
	for _, c := range counts {
		n += c
	}
	for i, p := range probs {
		if float64(n)*p < 5 {
			t.Fatalf("%s: category %d expects %.1f of %d counts: the test needs at least 5 per category", what, i, float64(n)*p, n)
		}
	}
	stat, df, p := chiSquare(counts, probs)
	if p <= significance {
		t.Errorf("%s: counts %v do not fit %v: chi-square %.2f with %d degrees of freedom, p = %.2g", what, counts, probs, stat, df, p)
	}
}

// checkRate fails t unless k successes of n trials fit probability p
// (two-sided normal approximation of the binomial, p-value above
// significance).
func checkRate(t *testing.T, what string, k, n int, p float64) {
	t.Helper()
	sd := math.Sqrt(float64(n) * p * (1 - p))
	z := (float64(k) - float64(n)*p) / sd
	if pv := math.Erfc(math.Abs(z) / math.Sqrt2); pv <= significance {
		t.Errorf("%s: %d of %d (%.4f), want probability %.4f: z = %.2f, p = %.2g", what, k, n, float64(k)/float64(n), p, z, pv)
	}
}

// The gamma function against closed forms and tabulated critical values.
func TestGammaQ(t *testing.T) {
	for _, x := range []float64{0.01, 0.3, 1, 2.5, 7, 20, 60} {
		if got, want := gammaQ(1, x), math.Exp(-x); math.Abs(got-want) > 1e-12*max(1, want) {
			t.Errorf("Q(1, %g) = %g, want e^-x = %g", x, got, want)
		}
		if got, want := gammaQ(0.5, x), math.Erfc(math.Sqrt(x)); math.Abs(got-want) > 1e-12 {
			t.Errorf("Q(1/2, %g) = %g, want erfc(√x) = %g", x, got, want)
		}
		// Q(s+1, x) = Q(s, x) + x^s e^-x / Γ(s+1).
		s := 3.5
		lg, _ := math.Lgamma(s + 1)
		if got, want := gammaQ(s+1, x), gammaQ(s, x)+math.Exp(s*math.Log(x)-x-lg); math.Abs(got-want) > 1e-12 {
			t.Errorf("Q(%g, %g) = %g, want %g by the recurrence", s+1, x, got, want)
		}
	}
	// Chi-square critical values at p = 0.001 (standard tables).
	for _, c := range []struct {
		df   int
		crit float64
	}{{1, 10.828}, {4, 18.467}, {5, 20.515}, {15, 37.697}, {35, 66.619}} {
		if p := gammaQ(float64(c.df)/2, c.crit/2); math.Abs(p-0.001) > 2e-6 {
			t.Errorf("chi-square p-value of %g with %d degrees of freedom = %.6f, want 0.001", c.crit, c.df, p)
		}
	}
}
