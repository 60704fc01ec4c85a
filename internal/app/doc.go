// Package app assembles the kdedup worker. Load parses the configuration from an environment map
// (the caller's: cmd/kdedup is the only place that reads the process environment) and reports
// every problem at once; Serve runs the worker with its deduplication state, metrics and HTTP
// server on a listener until its context ends.
//
// consumer and dedup are siblings that do not import each other: this package joins them.
// dedup.Set is the worker's consumer.Deduper, and consumer.OutputReader is the dedup.OutputLog
// that snapshots, re-warm and rebuilds read the output topic through (see wiring.go).
//
// The configuration table of README.md is generated from Config's struct tags (EnvTable); the
// demo and the loadtest run the worker through Load and Serve too (internal/loadrun).
package app
