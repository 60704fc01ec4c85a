// Package tier gates the tests of the slower tiers behind one switch, KDEDUP_TEST_TIERS, the way
// franz-go gates its broker tests behind KGO_TEST_*. Only tests import it.
//
// A plain `go test ./...` runs the unit tier only: no broker (kfake or real), no kdedup binary,
// no moto_server, no statistical run. A test of another tier calls one of the helpers below
// first (or its package's broker helper does), and is skipped, saying how to run it, unless the
// switch names its tier:
//
//	KDEDUP_TEST_TIERS=                          unit tier only (default)
//	KDEDUP_TEST_TIERS=integration,process       those tiers too
//	KDEDUP_TEST_TIERS=all                       every tier (the README's test command)
//
// The tiers:
//
//   - integration: a broker (kfake over TCP), or moto_server;
//   - real: the integration tier on real Apache Kafka too (it implies integration): the broker
//     tests run on kfake and on a KRaft broker that the tests fetch and start themselves
//     (internal/embedkafka/testbroker; KDEDUP_TEST_KAFKA=kfake|real|both overrides the choice);
//   - statistical: false-positive and sizing runs of millions of operations;
//   - process: tests that build and run the kdedup binary or another process of their own.
//
// Under the race detector the statistical and process tiers never run (the detector multiplies
// their cost, and a child process is not built with it), and of the integration tier only the
// tests of packages that declare themselves concurrent with ConcurrentPackage run (consumer and
// internal/kafkaio: the partition loops, the committer, pipelined fetch and produce): the race
// run is the unit tier plus the integration tier's concurrency tests. -short is not a tier: it is left to go test's meaning.
//
// The helpers are safe for concurrent use.
package tier

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Env is the switch: a comma-separated list of tiers beyond unit, or "all".
const Env = "KDEDUP_TEST_TIERS"

// The tiers beyond unit.
const (
	integration = "integration"
	real        = "real"
	statistical = "statistical"
	process     = "process"
)

// Names are the tiers Env accepts, besides "all".
var Names = []string{integration, real, statistical, process}

// Enabled reports whether Env asks for the tier name (always true for "unit"; "real" implies
// "integration").
func Enabled(name string) bool {
	if name == "unit" {
		return true
	}
	for _, v := range strings.Split(os.Getenv(Env), ",") {
		v = strings.TrimSpace(v)
		if v == "all" || v == name || v == real && name == integration {
			return true
		}
	}
	return false
}

var concurrentPackage atomic.Bool

// ConcurrentPackage declares the integration tests of the calling test binary concurrency tests,
// which the race run runs too. Call it from an init function of one of the package's test files.
func ConcurrentPackage() { concurrentPackage.Store(true) }

// Integration skips the test unless the integration tier runs and, under the race detector,
// unless its package called ConcurrentPackage.
func Integration(t testing.TB) {
	t.Helper()
	need(t, integration)
	if Race && !concurrentPackage.Load() && !bench(t) {
		t.Skip("tier: this package's integration tests are not concurrency tests and do not run under -race (tier.ConcurrentPackage)")
	}
}

// IntegrationRuns reports whether Integration would let a test of this package run, for a test
// that adds integration cases to unit ones (such as a store contract run on moto_server too).
func IntegrationRuns() bool {
	return Enabled(integration) && (!Race || concurrentPackage.Load())
}

// Statistical skips the test unless the statistical tier runs, and under the race detector.
func Statistical(t testing.TB) {
	t.Helper()
	need(t, statistical)
	if Race && !bench(t) {
		t.Skip("tier: statistical runs do not run under -race")
	}
}

// Process skips the test unless the process tier runs, and under the race detector.
func Process(t testing.TB) {
	t.Helper()
	need(t, process)
	if Race && !bench(t) {
		t.Skip("tier: process tests do not run under -race")
	}
}

// bench reports whether t is a benchmark's.
func bench(t testing.TB) bool {
	_, ok := t.(*testing.B)
	return ok
}

// need fails the test on a misspelt switch, and skips it unless the tier name runs. A benchmark
// is never skipped: it runs only when -bench asks for it.
func need(t testing.TB, name string) {
	t.Helper()
	if bench(t) {
		return
	}
	if bad := check(os.Getenv(Env)); len(bad) > 0 {
		t.Fatalf("tier: %s names no tier: %q (tiers: %s, or all)", Env, bad, strings.Join(Names, ", "))
	}
	if !Enabled(name) {
		t.Skipf("tier: %s test; %s=%s (or all) runs it (docs/hacking.md)", name, Env, name)
	}
}

// check returns the names in the switch's value v that are not tiers.
func check(v string) []string {
	var bad []string
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		if n != "" && n != "all" && n != "unit" && !slices.Contains(Names, n) {
			bad = append(bad, n)
		}
	}
	return bad
}

// PatienceEnv scales the deadlines of the waits of the tests that use Patience: a factor, 3 by
// default ("1" to fail fast while debugging a hang).
const PatienceEnv = "KDEDUP_TEST_PATIENCE"

// defaultPatience is the factor Patience applies unless PatienceEnv says otherwise: enough for the
// integration tier to pass beside two CPU-bound processes on a loaded 2-core machine.
const defaultPatience = 3

// Patience returns the deadline for a test's wait for an event that should come within d on an
// idle machine. Such a wait ends when its event comes, so its deadline only says when to give up:
// on a loaded machine (other processes, the race detector) it needs a longer one, never a settle
// time. Patience returns d times PatienceEnv's factor (3 by default; a value that is not a
// positive number counts as the default). Never use it for a bound a test asserts about the code
// under test (a release budget, a latency).
func Patience(d time.Duration) time.Duration {
	f := float64(defaultPatience)
	if v, err := strconv.ParseFloat(strings.TrimSpace(os.Getenv(PatienceEnv)), 64); err == nil && v > 0 {
		f = v
	}
	return time.Duration(float64(d) * f)
}

// NotUnderRace skips the test under the race detector. It is for a test whose code under test
// runs on one goroutine at a time (an exhaustive decode of every damaged byte of a file), where
// the detector can find nothing and multiplies the run's cost: the build without the detector runs
// it in every tier.
func NotUnderRace(t testing.TB) {
	t.Helper()
	if Race && !bench(t) {
		t.Skip("tier: one goroutine at a time; the race detector finds nothing here, and the build without it runs this test")
	}
}

// WaitingParallel sets go test's -parallel to n for the package whose TestMain calls it, unless
// the command line gave -parallel (go test passes it on as -test.parallel). go test's default is
// GOMAXPROCS, two on the development machine, which suits tests that compute; a package whose
// parallel tests mostly wait (for child processes, brokers, session timeouts and restores) leaves
// the cores idle with two at a time. It parses the command line (flag.Parse) if TestMain has not,
// and panics if the testing package's flags are not registered (a call outside TestMain).
func WaitingParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given {
		return
	}
	if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
		panic(fmt.Sprintf("tier: WaitingParallel outside TestMain: %v", err))
	}
}
