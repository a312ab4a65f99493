package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/c0mpute/c0mpute/workerd/config"
)

// Server timeouts: a scrape is one small GET answered from memory, so a
// client that takes longer than these is stuck or hostile.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 2 * time.Minute
	// scrapeTimeout bounds gathering (the process collector reads /proc).
	scrapeTimeout = 10 * time.Second
	// maxScrapes bounds concurrent scrapes; more get 503.
	maxScrapes = 4
	// shutdownTimeout is how long a scrape in progress may finish when
	// the context ends.
	shutdownTimeout = 5 * time.Second
)

// Path is where the endpoint serves the metrics.
const Path = "/metrics"

// Handler serves the Observer's registry at Path in the Prometheus text
// (or negotiated) format, and 404 elsewhere.
func (o *Observer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, promhttp.HandlerFor(o.registry, promhttp.HandlerOpts{
		MaxRequestsInFlight: maxScrapes, Timeout: scrapeTimeout}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "workerd serves its metrics at GET "+Path, http.StatusNotFound)
	})
	return mux
}

// Serve listens on addr (host:port; --metrics) and serves a new Observer's
// metrics there until ctx ends; pass the Observer to the agent
// (agent.Config.Observer). It fails at once, saying so, when it cannot
// listen: an address another program holds is not retried. The server's
// own errors after that are logged to log.
func Serve(ctx context.Context, addr string, log *slog.Logger) (*Observer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("metrics: %s is already in use by another program: choose another address with --metrics (or %s), or stop the program listening there",
			addr, config.EnvMetricsAddr)
	case err != nil:
		return nil, fmt.Errorf("metrics: cannot listen on %s (--metrics, or %s): %w", addr, config.EnvMetricsAddr, err)
	}
	o := New()
	o.addr = ln.Addr().String()
	srv := &http.Server{Handler: o.Handler(), ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
		WriteTimeout: writeTimeout, IdleTimeout: idleTimeout, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }}
	go func() {
		defer func() {
			if p := recover(); p != nil {
				log.Error("metrics endpoint panicked", "panic", p)
			}
		}()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics endpoint stopped", "addr", o.addr, "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("metrics endpoint shutdown", "err", err)
		}
	}()
	log.Info("serving metrics", "addr", o.addr, "path", Path)
	return o, nil
}

// Addr is the address Serve listens on (with the port it picked for
// port 0); "" for an Observer made with New.
func (o *Observer) Addr() string { return o.addr }
