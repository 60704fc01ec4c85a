// Command kdedup is a Kafka deduplication stage: it consumes an input topic, drops every record
// whose identity was already seen within a sliding time window, and produces the rest, in order,
// to an output topic.
//
// Usage:
//
//	kdedup                       run the worker, configured by environment variables (see README)
//	kdedup demo [flags]          run an embedded broker and the worker on a generated stream
//	kdedup loadtest [flags]      generate a stream with known duplicates and verify the output
//	kdedup inspect FILE          print a checkpoint snapshot's header, generations and checksums
//	kdedup healthcheck           ask the local worker's /healthz (for container health checks)
//	kdedup envdoc [-update FILE] print the configuration table (or rewrite it in FILE between
//	                             the <!-- env-table:start --> and <!-- env-table:end --> markers)
//	kdedup help                  print the usage and the configuration table
//
// Exit status: 0 after a clean shutdown, 1 on a runtime failure, 2 on a configuration error.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/grace"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], env.ToMap(os.Environ()), os.Stdout, os.Stderr))
}

// run dispatches the subcommand and returns the exit status.
func run(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return runWorker(ctx, environ, stderr)
	}
	switch args[0] {
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "loadtest":
		return runLoadtest(ctx, args[1:], environ, stdout, stderr)
	case "inspect":
		return runInspect(args[1:], stdout, stderr)
	case "healthcheck":
		return runHealthcheck(ctx, environ, stderr)
	case "envdoc":
		return runEnvDoc(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, usage+"\n\nWithout arguments kdedup runs the worker, configured by environment variables:")
		fmt.Fprint(stdout, envTable())
		return 0
	}
	fmt.Fprintf(stderr, "kdedup: unknown command %q\n%s\n", args[0], usage)
	return 2
}

// usage lists every subcommand that run dispatches.
const usage = "usage: kdedup [demo [flags] | loadtest [flags] | inspect FILE | healthcheck | envdoc [-update FILE] | help]"

// runWorker runs the worker until ctx is cancelled (SIGTERM/SIGINT).
func runWorker(ctx context.Context, environ map[string]string, stderr io.Writer) int {
	cfg, err := loadConfig(environ)
	if err != nil {
		fmt.Fprintf(stderr, "kdedup: %v\n", err)
		return 2
	}
	level, _ := cfg.logLevel()
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	// A drain that overruns SHUTDOWN_TIMEOUT (plus a margin for leaving the group) ends the
	// process anyway: the orchestrator would kill it soon after.
	stopWatchdog := grace.AfterCancel(ctx, cfg.ShutdownTimeout+5*time.Second, func() {
		log.Error("shutdown timed out; exiting", "timeout", cfg.ShutdownTimeout.String())
		os.Exit(1)
	})
	defer stopWatchdog()

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		log.Error("cannot listen", "addr", cfg.HTTPAddr, "error", err.Error())
		return 1
	}
	return serve(ctx, cfg, ln, log)
}

// serve runs the worker and the HTTP server on ln until ctx is cancelled or the worker fails. The
// HTTP server starts first, not ready, so that /healthz answers while the state is prepared (under
// DEDUP_SCOPE=global the filter is restored or rebuilt before the worker starts).
func serve(ctx context.Context, cfg Config, ln net.Listener, log *slog.Logger) int {
	reg := prometheus.NewRegistry()
	obs := newObserver(reg, cfg)
	var worker atomic.Pointer[consumer.Worker]
	ready := func() bool {
		w := worker.Load()
		return w != nil && w.Ready()
	}
	srv := &http.Server{Handler: newHTTPHandler(reg, ready), ReadHeaderTimeout: 5 * time.Second}
	srvErr := make(chan error, 1)
	go func() { srvErr <- srv.Serve(ln) }()
	defer func() {
		shutCtx, shutCancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.Shutdown(shutCtx)
		shutCancel()
	}()
	kf, err := newKeyFunc(cfg.Dedup.Key)
	if err != nil {
		log.Error("invalid DEDUP_KEY", "error", err.Error())
		return 2
	}
	ccfg, err := cfg.consumerConfig()
	if err != nil {
		log.Error("invalid Kafka configuration", "error", err.Error())
		return 2
	}
	dd, closeDedup, err := newDeduper(ctx, cfg, ccfg, kf, log, obs)
	if err != nil {
		log.Error("cannot create the deduplication state", "error", err.Error())
		return 1
	}
	w, err := consumer.New(ccfg, dd, kf, obs, log)
	if err != nil {
		log.Error("invalid worker configuration", "error", err.Error())
		return 2
	}
	worker.Store(w)
	log.Info("kdedup started", "version", version, "http", ln.Addr().String(),
		"input", cfg.Kafka.InputTopic, "output", cfg.Kafka.OutputTopic, "group", cfg.Kafka.GroupID,
		"key", cfg.Dedup.Key, "scope", cfg.Dedup.Scope, "mode", cfg.Dedup.Mode,
		"window", (time.Duration(cfg.Dedup.WindowCount) * cfg.Dedup.WindowInterval).String())

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
		if errors.Is(werr, consumer.ErrPartitionMismatch) {
			log.Error("cannot run: "+werr.Error(),
				"hint", "create the output topic with as many partitions as the input topic, or set KAFKA_PARTITIONING=hash")
		} else if errors.Is(werr, consumer.ErrIdempotenceUnsupported) {
			log.Error("cannot run: "+werr.Error(),
				"hint", "grant the client IDEMPOTENT_WRITE on the cluster (or upgrade to Kafka 0.11+), or set KAFKA_IDEMPOTENT=false "+
					"to produce without idempotence (a produce retry may then duplicate records in the output)")
		} else {
			log.Error("worker failed", "error", werr.Error())
		}
		return 1
	}
	log.Info("kdedup stopped")
	return 0
}

// newHTTPHandler serves /healthz (the process is alive), /readyz (ready() is true) and /metrics
// (reg, and only reg, in the Prometheus text format).
func newHTTPHandler(reg *prometheus.Registry, ready func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "not ready\n")
			return
		}
		io.WriteString(w, "ready\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}
