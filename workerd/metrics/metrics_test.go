package metrics

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/workerd/agent"
)

// TestAddressInUse: a --metrics address another program holds is refused
// at once, with a message that names it and the setting to change.
func TestAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	_, err = Serve(t.Context(), addr, nil)
	want := fmt.Sprintf("metrics: %s is already in use by another program: choose another address with --metrics (or C0MPUTE_METRICS_ADDR), or stop the program listening there", addr)
	if err == nil || err.Error() != want {
		t.Fatalf("Serve on a taken address: %v\nwant: %s", err, want)
	}
}

func TestServeStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	o, err := Serve(ctx, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + o.Addr() + "/elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /elsewhere: %d, want 404", resp.StatusCode)
	}
	cancel()
	// The address is free again once the server has shut down.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err := net.Listen("tcp", o.Addr())
		if err == nil {
			ln.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the metrics address is still held after the context ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fakeClock is a settable clock for the busy time.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestBusySeconds: busy time is the time with at least one job running,
// overlapping jobs counted once, idle gaps not at all.
func TestBusySeconds(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	o := newObserver(clk.now)
	busy := func() float64 { return o.busySeconds() }
	o.JobStarted("a")
	clk.add(2 * time.Second)
	o.JobStarted("b") // overlaps
	clk.add(3 * time.Second)
	if got := busy(); got != 5 {
		t.Errorf("busy while two jobs run: %v, want 5", got)
	}
	o.JobEnded("a", agent.OutcomeCompleted, oaiwire.Usage{})
	clk.add(time.Second)
	o.JobEnded("b", agent.OutcomeCompleted, oaiwire.Usage{})
	clk.add(10 * time.Second) // idle
	o.JobStarted("a")
	clk.add(4 * time.Second)
	o.JobEnded("a", agent.OutcomeFailed, oaiwire.Usage{})
	if got := busy(); got != 10 {
		t.Errorf("busy after 6 s and 4 s of jobs around 10 s idle: %v, want 10", got)
	}
	// An end without a start does not make the clock run backwards.
	o.JobEnded("a", agent.OutcomeRefused, oaiwire.Usage{})
	clk.add(time.Second)
	if got := busy(); got != 10 {
		t.Errorf("busy after a stray end: %v, want 10", got)
	}
}

// TestModelLabelsBounded: model ids come from the network; past maxModels
// distinct ones (or one too long) they are counted as OtherModel, so the
// endpoint cannot grow without end.
func TestModelLabelsBounded(t *testing.T) {
	o := New()
	for i := range maxModels + 10 {
		o.JobStarted(fmt.Sprintf("model-%d", i))
		o.JobEnded(fmt.Sprintf("model-%d", i), agent.OutcomeRefused, oaiwire.Usage{})
	}
	o.BackendError(strings.Repeat("x", maxModelLen+1))
	jobs := gathered(t, o, Namespace+"_jobs_total")
	if len(jobs) != maxModels+1 {
		t.Errorf("%d job series, want %d (the bound and %q)", len(jobs), maxModels+1, OtherModel)
	}
	if v := jobs[OtherModel+","+string(agent.OutcomeRefused)]; v != 10 {
		t.Errorf("jobs of models past the bound: %v, want 10", v)
	}
	if v := gathered(t, o, Namespace+"_backend_errors_total")[OtherModel]; v != 1 {
		t.Errorf("backend errors of a model id too long: %v, want 1", v)
	}
}

// gathered is a counter family's values from the registry, by its label
// values joined with commas.
func gathered(t *testing.T, o *Observer, name string) map[string]float64 {
	t.Helper()
	fams, err := o.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var vals []string
			for _, l := range m.GetLabel() {
				vals = append(vals, l.GetValue())
			}
			out[strings.Join(vals, ",")] = m.GetCounter().GetValue()
		}
	}
	return out
}
