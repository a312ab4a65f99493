package metrics

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/c0mpute/c0mpute/workerd/speculate"
)

// specCollector exposes a ring driver's speculate.Stats: it reads the
// atomics at scrape time, so the driver's loop pays one atomic add per
// count and nothing for the endpoint.
type specCollector struct {
	stats                                *speculate.Stats
	loops, drafted, accepted, rejections *prometheus.Desc
	loopSeconds, draftSeconds            *prometheus.Desc
	gammaLabels                          [speculate.MaxGamma + 1]string
}

func newSpecCollector(s *speculate.Stats) *specCollector {
	name := func(n string) string { return prometheus.BuildFQName(Namespace, "ring_spec", n) }
	c := &specCollector{stats: s,
		loops: prometheus.NewDesc(name("loops_total"),
			"Verification loops this member ran as a ring's driver after the prompt, by gamma, the drafted tokens the loop carried (0: a plain decode step, nothing drafted). One loop is one trip around the ring.",
			[]string{"gamma"}, nil),
		drafted: prometheus.NewDesc(name("drafted_tokens_total"),
			"Drafted tokens sent around the ring for verification (the sum of gamma over loops).", nil, nil),
		accepted: prometheus.NewDesc(name("accepted_tokens_total"),
			"Drafted tokens the last stage accepted. Acceptance rate alpha = accepted / (accepted + rejections): every drafted token checked is either accepted or its loop's one rejection; those after a rejection are not checked. Tokens per loop = (accepted + loops) / loops.",
			nil, nil),
		rejections: prometheus.NewDesc(name("rejections_total"),
			"Loops in which the last stage rejected a drafted token (at most one a loop: checking stops there and every stage rolls its cache back past it).", nil, nil),
		loopSeconds: prometheus.NewDesc(name("loop_seconds_total"),
			"Time of the verification loops, from sending to the answer, summed; divided by loops_total it is the mean loop time.", nil, nil),
		draftSeconds: prometheus.NewDesc(name("draft_seconds_total"),
			"Time spent drafting on the loops' critical path (not drafting done ahead while a loop was in flight), summed.", nil, nil),
	}
	for g := range c.gammaLabels {
		c.gammaLabels[g] = strconv.Itoa(g)
	}
	return c
}

// Describe sends the descriptors of every speculation metric.
func (c *specCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.loops, c.drafted, c.accepted, c.rejections, c.loopSeconds, c.draftSeconds} {
		ch <- d
	}
}

// Collect sends the counts as they are now. Each is read atomically on
// its own: a scrape during a loop may see one count of it updated and the
// next not yet, which the next scrape puts right.
func (c *specCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats
	for g := range s.ByGamma {
		ch <- prometheus.MustNewConstMetric(c.loops, prometheus.CounterValue, float64(s.ByGamma[g].Load()), c.gammaLabels[g])
	}
	ch <- prometheus.MustNewConstMetric(c.drafted, prometheus.CounterValue, float64(s.Drafted.Load()))
	ch <- prometheus.MustNewConstMetric(c.accepted, prometheus.CounterValue, float64(s.Accepted.Load()))
	ch <- prometheus.MustNewConstMetric(c.rejections, prometheus.CounterValue, float64(s.Rejections.Load()))
	ch <- prometheus.MustNewConstMetric(c.loopSeconds, prometheus.CounterValue, float64(s.LoopNanos.Load())/1e9)
	ch <- prometheus.MustNewConstMetric(c.draftSeconds, prometheus.CounterValue, float64(s.DraftNanos.Load())/1e9)
}

// RegisterSpeculation adds the speculative decoding counts of a ring
// member (ringmember.Member.SpecStats) to the Observer's metrics:
// c0mpute_workerd_ring_spec_loops_total by gamma, and the drafted and
// accepted tokens, rejections, loop and draft time. They are read from s
// at each scrape. Only counts and times reach them, never a token. It
// fails for a nil s, or when speculation metrics are registered already.
func (o *Observer) RegisterSpeculation(s *speculate.Stats) error {
	if s == nil {
		return errors.New("metrics: RegisterSpeculation needs the ring member's stats, not nil")
	}
	if err := o.registry.Register(newSpecCollector(s)); err != nil {
		return fmt.Errorf("metrics: speculation metrics: %w", err)
	}
	return nil
}
