package api

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/c0mpute/c0mpute/functions/metrics"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/store"
)

// The API's metrics (functions/metrics): per chat request, one record when
// it ends (Requests, Duration, and TTFT, QueueWait and token usage when
// they happened), written by observe; per error answer, Errors by code and,
// for a 5xx, ServerErrors; per refunded job, Refunds (settleFailure); and,
// at most once a minute per instance, the network gauges.
//
// A dimension value is a catalog model id or a known error code, else
// "other": a client chooses the model string and could otherwise make a
// metric per request (and put text of its choosing in the logs). Nothing of
// a prompt or a completion is ever measured but its token counts.

// otherDim is the dimension value of anything outside the closed sets.
const otherDim = "other"

// errorCodes are the error codes the API answers with (oaiwire's and its
// own); TestErrorCodesAreKnown keeps the list complete.
var errorCodes = map[string]bool{
	"below_minimum": true, "insufficient_quota": true, "internal_error": true, "invalid_api_key": true,
	"invalid_request": true, "invalid_sign_in": true, "invalid_wallet_proof": true, "key_limit": true,
	"key_limit_exceeded": true, "limited_key": true, "model_not_found": true, "no_payout_wallet": true,
	"no_reply": true, "no_worker_available": true, "not_finalized": true, "not_found": true,
	"nothing_to_claim": true, "rate_limit_exceeded": true, "receipt_rejected": true, "reply_overflow": true,
	"reply_rejected": true, "request_too_large": true, "ring_rejected": true, "timeout": true, "unknown_url": true,
	"worker_error": true, "worker_lost": true,
}

// codeDim is an error code as a dimension value.
func codeDim(code string) string {
	if errorCodes[code] {
		return code
	}
	return otherDim
}

// modelDim is a model id as a dimension value: a catalog id, or "other".
func (s *Server) modelDim(id string) string {
	if m, ok := s.catalog.Resolve(id); ok && m.ID == id {
		return id
	}
	return otherDim
}

// requestMetrics is what one request measures while it runs; observe
// writes it when the request ends. Only the request's own goroutine
// changes it, but the lock keeps that a rule the race detector need not
// trust.
type requestMetrics struct {
	mu    sync.Mutex
	start time.Time
	// model is the request's catalog model id ("other" for a chat
	// request whose model is not offered); empty for other routes.
	model string
	// code and status are the error answered, if any.
	code   string
	status int
	// ttft is set at the first token, queueWait adds up every wait for
	// a worker, usage is a completed job's.
	ttft, queueWait time.Duration
	hasTTFT, waited bool
	usage           *oaiwire.Usage
}

type requestMetricsKey struct{}

// metricsOf is the request's measurements; nil (which records nothing)
// when metrics are off or the request is the gateway's own (a canary).
func metricsOf(ctx context.Context) *requestMetrics {
	rm, _ := ctx.Value(requestMetricsKey{}).(*requestMetrics)
	return rm
}

func (rm *requestMetrics) setModel(model string) {
	if rm == nil {
		return
	}
	rm.mu.Lock()
	defer rm.mu.Unlock()
	rm.model = model
}

// answered records the error the client was answered with: err as the
// one error writer (oaiwire.WriteError) or a stream's error event writes
// it, an error that is not an *oaiwire.Error as internal_error. The first
// one counts: a request is answered once.
func (rm *requestMetrics) answered(err error) {
	if rm == nil || err == nil {
		return
	}
	var e *oaiwire.Error
	if !errors.As(err, &e) {
		e = oaiwire.ErrInternal
	}
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.code == "" {
		rm.code, rm.status = e.Code, e.Status
	}
}

// firstToken records the time to the first token, once.
func (rm *requestMetrics) firstToken(at time.Time) {
	if rm == nil {
		return
	}
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if !rm.hasTTFT {
		rm.ttft, rm.hasTTFT = at.Sub(rm.start), true
	}
}

// waitedFor adds a wait for a worker.
func (rm *requestMetrics) waitedFor(d time.Duration) {
	if rm == nil {
		return
	}
	rm.mu.Lock()
	defer rm.mu.Unlock()
	rm.queueWait += d
	rm.waited = true
}

// completed records a completed job's usage.
func (rm *requestMetrics) completed(u oaiwire.Usage) {
	if rm == nil {
		return
	}
	rm.mu.Lock()
	defer rm.mu.Unlock()
	rm.usage = &u
}

// observe measures every request and writes its metrics when it ends; it
// is the whole chain when metrics are off.
func (s *Server) observe(next http.Handler) http.Handler {
	if s.metrics == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rm := &requestMetrics{start: s.now()}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestMetricsKey{}, rm)))
		s.putRequest(rm, s.now())
		if s.gauges.Due(s.now()) {
			// Off the request's path: its answer is written. In Lambda
			// the instance may freeze before this runs; it then runs
			// at the next thaw, a minute's gauge late, which is fine.
			s.goSafe("network gauges", func() {
				ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
				defer cancel()
				s.putGauges(ctx)
			})
		}
	})
}

// putRequest writes a finished request's records.
func (s *Server) putRequest(rm *requestMetrics, end time.Time) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if rm.model != "" {
		ms := []metrics.Metric{
			{Name: metrics.Requests, Unit: metrics.UnitCount, Value: 1},
			{Name: metrics.Duration, Unit: metrics.UnitMilliseconds, Value: millis(end.Sub(rm.start))},
		}
		if rm.hasTTFT {
			ms = append(ms, metrics.Metric{Name: metrics.TTFT, Unit: metrics.UnitMilliseconds, Value: millis(rm.ttft)})
		}
		if rm.waited {
			ms = append(ms, metrics.Metric{Name: metrics.QueueWait, Unit: metrics.UnitMilliseconds, Value: millis(rm.queueWait)})
		}
		if rm.usage != nil {
			ms = append(ms,
				metrics.Metric{Name: metrics.PromptTokens, Unit: metrics.UnitCount, Value: float64(rm.usage.PromptTokens)},
				metrics.Metric{Name: metrics.CompletionTokens, Unit: metrics.UnitCount, Value: float64(rm.usage.CompletionTokens)})
		}
		s.metrics.Put([]metrics.Dim{{Name: "Model", Value: s.modelDim(rm.model)}}, ms...)
	} else {
		// Every other route counts in the aggregate only, so that the
		// no-dimension Requests is every answer, the denominator of the
		// 5xx rate (ServerErrors counts them all too).
		s.metrics.Put(nil, metrics.Metric{Name: metrics.Requests, Unit: metrics.UnitCount, Value: 1})
	}
	if rm.code != "" {
		s.metrics.Put([]metrics.Dim{{Name: "Code", Value: codeDim(rm.code)}},
			metrics.Metric{Name: metrics.Errors, Unit: metrics.UnitCount, Value: 1})
		if rm.status >= http.StatusInternalServerError {
			s.metrics.Put(nil, metrics.Metric{Name: metrics.ServerErrors, Unit: metrics.UnitCount, Value: 1})
		}
	}
}

// putRefund counts a job refunded by this call of Fail (reason and at are
// the call's): a job already failed and refunded before comes back as it
// was, with its own reason and time. Canaries, the gateway's own jobs,
// count nowhere.
func (s *Server) putRefund(job store.Job, reason string, at time.Time) {
	if refundedNow(job, reason, at) {
		s.metrics.Put([]metrics.Dim{{Name: "Model", Value: s.modelDim(job.Model)}},
			metrics.Metric{Name: metrics.Refunds, Unit: metrics.UnitCount, Value: 1})
	}
}

// refundedNow reports whether Fail, called with reason at at, refunded the
// job it returned (and failed it).
func refundedNow(job store.Job, reason string, at time.Time) bool {
	return job.Refunded && !job.Canary && job.FailReason == reason && job.Updated.Equal(at)
}

// putGauges writes the network gauges of every catalog model, from the
// counters Stats reads (through the cache /v1/stats uses).
func (s *Server) putGauges(ctx context.Context) {
	st, err := s.networkStats(ctx)
	if err != nil {
		s.log.Warn("network gauges", "err", err)
		return
	}
	s.gauges.Put(s.catalog.IDs(), st.QueueByModel, st.WorkersByModel)
}

// statsCacheTTL is how long an instance serves the network's counters
// without reading them again: /v1/stats is public and cheap to ask for,
// and a few seconds' staleness is invisible in figures that change with
// every request.
const statsCacheTTL = 2 * time.Second

// statsCache holds the last counters read. While one caller reads them
// again, the others take the figures it is replacing, so no request waits
// on another's read (chat requests read them: see unavailable).
type statsCache struct {
	mu         sync.Mutex
	at         time.Time
	st         store.Stats
	refreshing bool
}

// networkStats is the store's Stats, at most statsCacheTTL old (a little
// more while another caller reads them again). The maps are shared:
// callers do not change them.
func (s *Server) networkStats(ctx context.Context) (store.Stats, error) {
	return s.readStats(ctx, statsCacheTTL)
}

// readStats is the store's Stats, at most maxAge old; 0 reads them now.
func (s *Server) readStats(ctx context.Context, maxAge time.Duration) (store.Stats, error) {
	c := &s.statsCache
	c.mu.Lock()
	now := s.now()
	fresh := !c.at.IsZero() && now.Sub(c.at) < maxAge && !now.Before(c.at)
	if fresh || (maxAge > 0 && c.refreshing && !c.at.IsZero()) {
		st := c.st
		c.mu.Unlock()
		return st, nil
	}
	c.refreshing = true
	c.mu.Unlock()
	st, err := s.store.Stats(ctx, now)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshing = false
	if err != nil {
		return store.Stats{}, err
	}
	if now.After(c.at) {
		c.at, c.st = now, st
	}
	return st, nil
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
