package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/dedup"
	"github.com/kdedup/kdedup/identity"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Serve runs the worker and the HTTP server on ln until ctx is cancelled or the worker fails. The
// HTTP server starts first, not ready, so that /healthz answers while the state is prepared (under
// DEDUP_SCOPE=global the filter is restored or rebuilt before the worker starts). It logs to log
// and returns the exit status: 0 after a clean stop, 1 on a runtime failure (including a state
// that cannot be created and mismatched partition counts), 2 on a configuration that fails only
// when the worker is built. The HTTP server, and with it ln, is shut down when Serve returns.
func Serve(ctx context.Context, cfg Config, ln net.Listener, log *slog.Logger) int {
	reg := prometheus.NewRegistry()
	obs := newObserver(reg, cfg)
	var worker atomic.Pointer[runner]
	ready := func() bool {
		w := worker.Load()
		return w != nil && (*w).Ready()
	}
	blocked := func() []consumer.BlockedPartition {
		if w := worker.Load(); w != nil {
			return (*w).Blocked()
		}
		return nil
	}
	srv := newHTTPServer(newHTTPHandler(reg, ready, blocked), defaultHTTPLimits)
	warnPlaintextSASL(cfg.Kafka, log)
	srvErr := make(chan error, 1)
	go func() { srvErr <- srv.Serve(ln) }()
	defer func() {
		shutCtx, shutCancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.Shutdown(shutCtx)
		shutCancel()
	}()
	schemas, err := newRegistry(ctx, cfg, log)
	if err != nil {
		log.Error("schema registry unusable", "error", err.Error())
		return 2
	}
	kf, err := newKeyFunc(cfg.Dedup.Key, schemas)
	if err != nil {
		log.Error("invalid DEDUP_KEY", "error", err.Error())
		return 2
	}
	ccfg, err := cfg.consumerConfig()
	if err != nil {
		log.Error("invalid Kafka configuration", "error", err.Error())
		return 2
	}
	w, closeDedup, code := newRunner(ctx, cfg, ccfg, kf, reg, obs, schemas, log)
	if w == nil {
		return code
	}
	worker.Store(&w)
	log.Info("kdedup started", "version", Version, "http", ln.Addr().String(),
		"input", cfg.Kafka.InputTopic, "output", cfg.Kafka.OutputTopic, "group", cfg.Kafka.GroupID,
		"key", cfg.Dedup.Key, "scope", cfg.Dedup.Scope, "mode", cfg.Dedup.Mode,
		"window", (time.Duration(cfg.Dedup.WindowCount) * cfg.Dedup.WindowInterval).String(),
		"gomemlimit", debug.SetMemoryLimit(-1))

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(runCtx) }()
	var werr error
	select {
	case werr = <-runErr:
	case err := <-srvErr:
		log.Error("HTTP server failed; shutting down", "error", err.Error())
		cancel()
		werr = <-runErr
		if werr == nil {
			werr = err
		}
	}

	// Save what the worker left (the global filter); partitions were revoked by Run.
	closeCtx, closeCancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	if err := closeDedup(closeCtx); err != nil {
		log.Error("saving deduplication state failed", "error", err.Error())
	}
	closeCancel()

	if werr != nil {
		logFailure(log, werr)
		return 1
	}
	log.Info("kdedup stopped")
	return 0
}

// newRunner builds what Serve runs: the worker and its deduplication state, or under
// DEDUP_SCOPE=routed the routers and the second stage over the route topic (whose state is the
// deduplication state). On failure it logs why and returns a nil runner and the exit status: 1
// when the state cannot be created, 2 for a configuration that fails only now.
func newRunner(ctx context.Context, cfg Config, ccfg consumer.Config, kf consumer.KeyFunc, reg *prometheus.Registry,
	obs *metrics.Metrics, schemas identity.Registry, log *slog.Logger) (runner, func(context.Context) error, int) {
	var routers []consumer.Config
	stageKey := kf
	if cfg.Dedup.Scope == string(dedup.ScopeRouted) {
		routers, ccfg = stageConfigs(cfg, ccfg)
		stageKey = consumer.RouteKey(kf) // the re-warm and rebuild read the output with kf
		log.Info("routed scope", "stages", describeStages(routers, ccfg))
	}
	dd, closeDedup, err := newDeduper(ctx, cfg, ccfg, kf, log, obs)
	if err != nil {
		log.Error("cannot create the deduplication state", "error", err.Error())
		return nil, nil, 1
	}
	var wobs consumer.Observer = observer{obs}
	var gate *readyGate
	if routers != nil {
		gate = &readyGate{m: obs}
		wobs = stage2Observer{Observer: wobs, ready: gate}
	}
	w, err := consumer.New(withSources(reg, cfg.Dedup, ccfg, schemas, log), dd, stageKey, wobs, log)
	if err == nil && routers != nil {
		var rs []*consumer.Worker
		rm := metrics.NewRoute(reg, consumer.RefusalReasons())
		if rs, err = newRouters(routers, kf, cfg.Dedup.Unkeyed, obs, rm, gate, log); err == nil {
			st := &stages{routers: rs, stage2: w}
			gate.set(st.Ready)
			return st, closeDedup, 0
		}
	}
	if err != nil {
		log.Error("invalid worker configuration", "error", err.Error())
		_ = closeDedup(ctx)
		return nil, nil, 2
	}
	return w, closeDedup, 0
}

// logFailure logs why the worker failed, with a hint for the failures a setting fixes.
func logFailure(log *slog.Logger, err error) {
	switch {
	case errors.Is(err, consumer.ErrPartitionMismatch):
		log.Error("cannot run: "+err.Error(),
			"hint", "create the output topic with as many partitions as the input topic, or set KAFKA_PARTITIONING=hash; "+
				"with DEDUP_SCOPE=routed, the route topic (KAFKA_ROUTE_TOPIC, the second stage's input) and the output topic need the same count")
	case errors.Is(err, consumer.ErrIdempotenceUnsupported):
		log.Error("cannot run: "+err.Error(),
			"hint", "grant the client IDEMPOTENT_WRITE on the cluster (or upgrade to Kafka 0.11+), or set KAFKA_IDEMPOTENT=false "+
				"to produce without idempotence (a produce retry may then duplicate records in the output)")
	case kafkaio.Fatal(err):
		log.Error("cannot connect to Kafka: "+err.Error(),
			"hint", "fix the KAFKA_TLS_* or KAFKA_SASL_* settings, or the cluster's ACLs, as the message says; see docs/operations.md, Connecting to a secured cluster")
	default:
		log.Error("worker failed", "error", err.Error())
	}
}

// httpLimits bound what the HTTP server gives one client: it serves health and metrics only, to
// probes and scrapers, so a slow or idle client is cut off and scrapes cannot pile up.
type httpLimits struct {
	readHeader, read, write, idle time.Duration
	metricsInFlight               int // concurrent /metrics requests; more get 503
}

// defaultHTTPLimits: a scrape of a large registry takes well under the write timeout; an idle
// keep-alive connection is closed after 30 s (scrapers reconnect).
var defaultHTTPLimits = httpLimits{readHeader: 5 * time.Second, read: 10 * time.Second, write: 30 * time.Second,
	idle: 30 * time.Second, metricsInFlight: 4}

// newHTTPServer returns the server of h under lim.
func newHTTPServer(h http.Handler, lim httpLimits) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: lim.readHeader, ReadTimeout: lim.read,
		WriteTimeout: lim.write, IdleTimeout: lim.idle, MaxHeaderBytes: 16 << 10}
}

// warnPlaintextSASL logs a warning at startup when SASL is configured without TLS: PLAIN sends the
// password as it is, and SCRAM's exchange, though it hides the password, can be watched and the
// session taken over.
func warnPlaintextSASL(k KafkaConfig, log *slog.Logger) {
	if k.SASLMechanism != "" && !k.TLSEnabled {
		log.Warn("SASL over plaintext: KAFKA_SASL_MECHANISM is set but KAFKA_TLS_ENABLED is false, so the SASL exchange "+
			"(with PLAIN, the password itself) and every record cross the network unencrypted; set KAFKA_TLS_ENABLED=true",
			"mechanism", k.SASLMechanism)
	}
}

// newHTTPHandler serves /healthz (the process is alive), /readyz (ready() is true) and /metrics
// (reg, and only reg, in the Prometheus text format). /readyz lists the partitions blocked()
// returns, one line each, after its status line: a blocked partition does not make the worker
// unready, since a restart would block it again, but an operator looking at /readyz sees it.
func newHTTPHandler(reg *prometheus.Registry, ready func() bool, blocked func() []consumer.BlockedPartition) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		status := "ready\n"
		if !ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			status = "not ready\n"
		}
		io.WriteString(w, status)
		for _, b := range blocked() {
			what := "topic " + strconv.Quote(b.Topic) + " refuses the record"
			if strings.HasPrefix(b.Reason, "input_") {
				what = "the input cannot be decoded within the limits"
			}
			fmt.Fprintf(w, "partition %d blocked at offset %d since %s: %s (%s: %s)\n",
				b.Partition, b.Offset, b.Since.UTC().Format(time.RFC3339), what, b.Reason, b.Error)
		}
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg,
		MaxRequestsInFlight: defaultHTTPLimits.metricsInFlight}))
	return mux
}
