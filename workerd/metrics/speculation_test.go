package metrics

import (
	"flag"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/c0mpute/c0mpute/workerd/speculate"
)

// specNames are the speculation metrics, for comparisons that leave the
// agent's own out.
var specNames = []string{
	Namespace + "_ring_spec_loops_total",
	Namespace + "_ring_spec_drafted_tokens_total",
	Namespace + "_ring_spec_accepted_tokens_total",
	Namespace + "_ring_spec_rejections_total",
	Namespace + "_ring_spec_loop_seconds_total",
	Namespace + "_ring_spec_draft_seconds_total",
}

var update = flag.Bool("update", false, "rewrite testdata/speculation.golden")

// exposition is the text exposition of the named metric families as the
// registry gathers them (the format a scrape of the endpoint gets).
func exposition(t *testing.T, o *Observer, names ...string) string {
	t.Helper()
	fams, err := o.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if slices.Contains(names, f.GetName()) {
			if err := enc.Encode(f); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b.String()
}

// checkGolden compares got with testdata/NAME.golden (-update rewrites
// it from got).
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("differs from %s (-update rewrites it):\n%s", path, got)
	}
}

// TestSpeculationMetrics: the speculation counters read a member's Stats
// at scrape time, so loops observed after registering show at the next
// scrape: by gamma (every gamma present from the start, at zero), drafted
// and accepted tokens, rejections, and times in seconds.
func TestSpeculationMetrics(t *testing.T) {
	o := New()
	var s speculate.Stats
	if err := o.RegisterSpeculation(&s); err != nil {
		t.Fatal(err)
	}
	byGamma := gathered(t, o, specNames[0])
	if len(byGamma) != speculate.MaxGamma+1 {
		t.Errorf("before any loop: %d gamma series, want %d", len(byGamma), speculate.MaxGamma+1)
	}
	for g, v := range byGamma {
		if v != 0 {
			t.Errorf("before any loop: gamma %s counts %v", g, v)
		}
	}

	loops := []struct {
		drafted, accepted int
		loop, draft       time.Duration
	}{
		{0, 0, 20 * time.Millisecond, 0},                     // a plain decode step
		{4, 4, 30 * time.Millisecond, time.Millisecond},      // every draft accepted
		{4, 1, 30 * time.Millisecond, 2 * time.Millisecond},  // rejected at the second
		{16, 0, 50 * time.Millisecond, 5 * time.Millisecond}, // rejected at once
		{40, 40, 10 * time.Millisecond, 0},                   // past MaxGamma: counted under it
	}
	for _, l := range loops {
		s.Observe(l.drafted, l.accepted, l.loop, l.draft)
	}
	byGamma = gathered(t, o, specNames[0])
	for g := 0; g <= speculate.MaxGamma; g++ {
		want := map[int]float64{0: 1, 4: 2, speculate.MaxGamma: 2}[g]
		if got := byGamma[strconv.Itoa(g)]; got != want {
			t.Errorf("loops of gamma %d: %v, want %v", g, got, want)
		}
	}
	for _, tc := range []struct {
		name string
		want float64
	}{
		{specNames[1], 64},    // 0+4+4+16+40
		{specNames[2], 45},    // 0+4+1+0+40
		{specNames[3], 2},     // the loops that accepted fewer than they drafted
		{specNames[4], 0.14},  // 20+30+30+50+10 ms
		{specNames[5], 0.008}, // 1+2+5 ms
	} {
		if got := gathered(t, o, tc.name)[""]; math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s = %v, want %v", tc.name, got, tc.want)
		}
	}
	// The whole exposition, help text included.
	checkGolden(t, "speculation", exposition(t, o, specNames...))
}

// TestSpeculationRegisterErrors: a nil Stats and a second registration
// are refused with an error, not a panic.
func TestSpeculationRegisterErrors(t *testing.T) {
	o := New()
	if err := o.RegisterSpeculation(nil); err == nil || !strings.Contains(err.Error(), "not nil") {
		t.Errorf("nil stats: %v", err)
	}
	if err := o.RegisterSpeculation(&speculate.Stats{}); err != nil {
		t.Fatal(err)
	}
	if err := o.RegisterSpeculation(&speculate.Stats{}); err == nil || !strings.Contains(err.Error(), "speculation metrics") {
		t.Errorf("second registration: %v", err)
	}
}

// TestSpeculationServed: the counts reach the real endpoint that
// `workerd run --metrics` serves, beside the agent's own metrics.
func TestSpeculationServed(t *testing.T) {
	o, err := Serve(t.Context(), "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	var s speculate.Stats
	if err := o.RegisterSpeculation(&s); err != nil {
		t.Fatal(err)
	}
	s.Observe(3, 2, 1500*time.Millisecond, 250*time.Millisecond)
	resp, err := http.Get("http://" + o.Addr() + Path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		specNames[0] + `{gamma="3"} 1`,
		specNames[0] + `{gamma="2"} 0`,
		specNames[1] + " 3",
		specNames[2] + " 2",
		specNames[3] + " 1",
		specNames[4] + " 1.5",
		specNames[5] + " 0.25",
		Namespace + "_busy_seconds_total 0",
	} {
		if !strings.Contains(string(body), "\n"+line+"\n") {
			t.Errorf("GET %s lacks the line %q", Path, line)
		}
	}
}
