package agent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/workerd/agent"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/metrics"
)

// Markers of prompt and completion text: neither may appear on the
// metrics endpoint.
const (
	promptMarker     = "PROMPT-TEXT-7f3a"
	completionMarker = "COMPLETION-TEXT-91bc"
)

// scrape GETs the endpoint over HTTP and parses what it serves.
func scrape(t *testing.T, addr string) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + metrics.Path)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %v", resp.StatusCode, err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse the scrape: %v\n%s", err, body)
	}
	return fams, string(body)
}

// series flattens the agent's metric families to "name{l=v,…} value"
// (histograms: their _count), for comparison.
func series(fams map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for name, f := range fams {
		if !strings.HasPrefix(name, metrics.Namespace+"_") || name == metrics.Namespace+"_busy_seconds_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			key := name + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[key+"_count"] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}

// TestMetricsCountRealJobs runs jobs of every kind through the real local
// relay and reads the counts back from the Prometheus endpoint over HTTP:
// a completed job with its tokens, a backend failure, a cancelled job, a
// job for a model not served, a dropped connection and the reconnect.
func TestMetricsCountRealJobs(t *testing.T) {
	t.Parallel()
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	obs, err := metrics.Serve(ctx, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	r := newTestRelay(t)
	var be *scriptedBackend
	be = newScriptedBackend([]string{"m"}, func(ctx context.Context, c *chatCall, emit func(oaiwire.Delta) error) (backend.Result, error) {
		switch {
		case strings.HasPrefix(c.Prompt, "ok"):
			return texts(completionMarker+" one ", "two")(ctx, c, emit)
		case strings.HasPrefix(c.Prompt, "fail"):
			return backend.Result{}, errors.New("boom: out of memory")
		}
		if err := emit(oaiwire.Delta{Content: completionMarker}); err != nil {
			return backend.Result{}, err
		}
		return backend.Result{}, be.block(ctx, nil)
	})
	startAgent(t, r, be, func(c *agent.Config) { c.Observer = obs })
	first := r.registered(1)

	r.sendJob(first.conn, "ok", "m", "ok "+promptMarker)
	checkReply(t, r.waitEnd("ok"), "ok")
	r.sendJob(first.conn, "fail", "m", "fail "+promptMarker)
	checkReply(t, r.waitEnd("fail"), "fail")
	r.sendJob(first.conn, "other", "other-model", "ok "+promptMarker)
	checkReply(t, r.waitEnd("other"), "other")
	r.sendJob(first.conn, "slow", "m", "slow "+promptMarker)
	be.nextCall(t) // ok
	be.nextCall(t) // fail
	call := be.nextCall(t)
	r.waitFor("the slow job's first chunk", func(evs []event) bool { return len(replyOf(evs, "slow")) > 0 })
	inFlight := waitSeries(t, obs.Addr(), "the slow job in flight", func(s map[string]float64) bool {
		return s["c0mpute_workerd_jobs_in_flight{model=m}"] == 1
	})
	if inFlight["c0mpute_workerd_relay_state{state=connected}"] != 1 {
		t.Errorf("relay state while connected: %v", inFlight)
	}
	r.post(first.conn, &relaymsg.Cancel{Job: "slow"})
	waitClosed(t, call.returned, "the cancelled job's backend call")

	dctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := r.mgmt.Delete(dctx, first.conn); err != nil {
		t.Fatal(err)
	}
	r.registered(2)

	want := map[string]float64{
		"c0mpute_workerd_jobs_total{model=m,outcome=completed}":         1,
		"c0mpute_workerd_jobs_total{model=m,outcome=failed}":            1,
		"c0mpute_workerd_jobs_total{model=m,outcome=cancelled}":         1,
		"c0mpute_workerd_jobs_total{model=other-model,outcome=refused}": 1,
		"c0mpute_workerd_prompt_tokens_total{model=m}":                  float64(stopUsage.PromptTokens),
		"c0mpute_workerd_completion_tokens_total{model=m}":              float64(stopUsage.CompletionTokens),
		"c0mpute_workerd_backend_errors_total{model=m}":                 1,
		"c0mpute_workerd_relay_reconnects_total{}":                      1,
		"c0mpute_workerd_relay_state{state=connecting}":                 0,
		"c0mpute_workerd_relay_state{state=connected}":                  1,
		"c0mpute_workerd_relay_state{state=refused}":                    0,
		"c0mpute_workerd_relay_state{state=stopped}":                    0,
		"c0mpute_workerd_jobs_in_flight{model=m}":                       0,
		"c0mpute_workerd_jobs_in_flight{model=other-model}":             0,
		"c0mpute_workerd_first_token_seconds{model=m}_count":            2, // ok and slow; fail sent no text
	}
	waitSeries(t, obs.Addr(), "the final counts", func(s map[string]float64) bool {
		return fmt.Sprint(s) == fmt.Sprint(want)
	})
	fams, body := scrape(t, obs.Addr())
	if busy := fams["c0mpute_workerd_busy_seconds_total"].GetMetric()[0].GetCounter().GetValue(); busy <= 0 {
		t.Errorf("busy seconds %v after three jobs ran", busy)
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if fams[name] == nil {
			t.Errorf("the scrape has no %s (Go and process collectors)", name)
		}
	}
	for _, secret := range []string{promptMarker, completionMarker} {
		if strings.Contains(body, secret) {
			t.Errorf("prompt or completion text %q on the metrics endpoint", secret)
		}
	}
}

// TestMetricsRefusedState: a worker the network refuses for good shows
// the refused state.
func TestMetricsRefusedState(t *testing.T) {
	t.Parallel()
	obs := metrics.New()
	r := newTestRelay(t)
	r.setRefuse(http.StatusForbidden, "worker token revoked")
	ra := startAgent(t, r, newScriptedBackend([]string{"m"}, texts("x")), func(c *agent.Config) { c.Observer = obs })
	select {
	case err := <-ra.done:
		ra.done <- nil
		var refused *agent.RefusedError
		if !errors.As(err, &refused) {
			t.Fatalf("Run: %v, want a RefusedError", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Run did not return on a revoked token")
	}
	if v := gaugeOf(t, obs, "c0mpute_workerd_relay_state", "refused"); v != 1 {
		t.Errorf("relay_state{refused} = %v, want 1", v)
	}
}

// gaugeOf reads one relay_state series from the registry.
func gaugeOf(t *testing.T, obs *metrics.Observer, name, state string) float64 {
	t.Helper()
	fams, err := obs.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == state {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no %s{state=%q}", name, state)
	return 0
}

// waitSeries scrapes until cond holds (the agent reports a job's end just
// after its last message leaves) and returns the series.
func waitSeries(t *testing.T, addr, what string, cond func(map[string]float64) bool) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		fams, _ := scrape(t, addr)
		s := series(fams)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; the endpoint serves:\n%s", waitLimit, what, describeSeries(s))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func describeSeries(s map[string]float64) string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s %v\n", k, s[k])
	}
	return b.String()
}
