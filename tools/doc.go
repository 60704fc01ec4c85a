// Package tools holds kdedup's deployment checks, run by CI with
// `cd tools && go test ./...`. It is a separate module so that the heavy
// validation dependencies (Grafana foundation SDK, Prometheus, Helm, BuildKit,
// Kubernetes API types) never reach the kdedup binary's go.mod.
//
// The checks cover deploy/: the Grafana dashboard decodes strictly, every
// PromQL expression in the dashboard and alert rules parses and references only
// metrics the binary exposes (deploy/metric-names.txt), the Helm chart renders
// into objects that decode strictly into Kubernetes types, the Dockerfile passes
// the BuildKit linter, and every environment variable set by the chart, the
// compose file and the Dockerfile is one the binary accepts (deploy/env-vars.txt).
//
// The package itself holds what the checks share with cmd/livecheck, which evaluates the
// dashboard and the alerts with a real Prometheus on a running worker (see README.md): the strict
// dashboard decoder and the lists of its targets and variables.
package tools
