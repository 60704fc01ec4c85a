// Package loadrun runs the real worker (internal/app) against the embedded broker
// (internal/embedkafka) for the binary's demo and loadtest subcommands.
//
// Demo produces a stream of orders with re-sent duplicates, runs the worker on it and prints what
// went in and out. Loadtest generates a stream with known duplicates and verifies the output
// (package loadtest): in the embedded mode against a worker it starts itself, with hooks that
// restart it, add a second worker, rebuild it from the output topic or inject broker faults; in
// the external mode against brokers where the worker runs elsewhere. Both take their flags and
// the environment map from cmd/kdedup and return the exit status: 0 when the run passed, 1 when
// it failed, 2 on bad flags or configuration.
package loadrun
