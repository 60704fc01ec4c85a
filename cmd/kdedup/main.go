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
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/kdedup/kdedup/internal/app"
	"github.com/kdedup/kdedup/internal/grace"
	"github.com/kdedup/kdedup/internal/loadrun"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	app.Version = version
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
		return loadrun.Demo(ctx, args[1:], stdout, stderr)
	case "loadtest":
		return loadrun.Loadtest(ctx, args[1:], environ, stdout, stderr)
	case "inspect":
		return runInspect(args[1:], stdout, stderr)
	case "healthcheck":
		return runHealthcheck(ctx, environ, stderr)
	case "envdoc":
		return runEnvDoc(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, usage+"\n\nWithout arguments kdedup runs the worker, configured by environment variables:")
		fmt.Fprint(stdout, app.EnvTable())
		return 0
	}
	fmt.Fprintf(stderr, "kdedup: unknown command %q\n%s\n", args[0], usage)
	return 2
}

// usage lists every subcommand that run dispatches.
const usage = "usage: kdedup [demo [flags] | loadtest [flags] | inspect FILE | healthcheck | envdoc [-update FILE] | help]"

// runWorker runs the worker until ctx is cancelled (SIGTERM/SIGINT).
func runWorker(ctx context.Context, environ map[string]string, stderr io.Writer) int {
	cfg, err := app.Load(environ)
	if err != nil {
		fmt.Fprintf(stderr, "kdedup: %v\n", err)
		return 2
	}
	level, _ := cfg.Level()
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	for _, msg := range cfg.Deprecations() {
		log.Warn(msg)
	}
	for _, u := range app.UnknownVars(environ) { // the value is not logged: it may be a secret
		log.Warn("unknown variable "+u.Name+" is ignored; did you mean "+u.Closest+"?", "variable", u.Name, "closest", u.Closest)
	}

	// A drain that overruns SHUTDOWN_TIMEOUT (plus a margin for leaving the group) ends the
	// process anyway: the orchestrator would kill it soon after.
	stopWatchdog := grace.AfterCancel(ctx, cfg.ShutdownTimeout+5*time.Second, func() {
		log.Error("shutdown timed out; exiting", "timeout", cfg.ShutdownTimeout.String())
		os.Exit(1)
	})
	defer stopWatchdog()

	app.SetRuntimeMemoryLimit(cfg) // logged by Serve ("gomemlimit")
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		log.Error("cannot listen", "addr", cfg.HTTPAddr, "error", err.Error())
		return 1
	}
	return app.Serve(ctx, cfg, ln, log)
}
