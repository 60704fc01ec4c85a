package app

// The harness of the tests that run the binary: cmd/kdedup built once into a temporary directory
// (see kdedupBinary), its JSON log read as structured events, its HTTP server found through its startup
// event (HTTP_ADDR=127.0.0.1:0 lets the kernel pick a free port: no port is chosen, closed and
// reused later), its /metrics scraped, and the one polling helper of the package's tests.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/scrape"
	"github.com/kdedup/kdedup/internal/scrape/scrapetest"
	"github.com/kdedup/kdedup/internal/tier"
	"github.com/prometheus/common/model"
)

// syncBuffer is a bytes.Buffer that the test can read while the child process writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// built is the kdedup binary the tests run, built on first use by kdedupBinary and removed by
// TestMain.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

// appParallel is how many of the package's parallel tests run at once unless -parallel says
// otherwise (tier.WaitingParallel). Its end-to-end tests mostly wait: for a child worker to start,
// restore and re-warm, for session timeouts and rebalances, for a producer paced by the test, for
// the real broker; at go test's default of GOMAXPROCS (two) the package took 236 s with the cores
// a third busy, at eight 148 s (docs/hacking.md, "Measured times").
const appParallel = 8

// TestMain runs the package's tests appParallel at a time, removes the binary the tests built and
// stops the shared real broker, if any.
func TestMain(m *testing.M) {
	tier.WaitingParallel(appParallel)
	code := testbroker.Main(m)
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// kdedupBinary returns the path of cmd/kdedup built with go build (with -race when the tests run
// under the race detector, as the worker's code then does in the child too). It fails the test if
// the build fails.
func kdedupBinary(t *testing.T) string {
	t.Helper()
	tier.Process(t)
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "kdedup-test-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "kdedup")
		args := []string{"build", "-o", built.bin}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, "github.com/kdedup/kdedup/cmd/kdedup")...).CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build ./cmd/kdedup: %w\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// child starts the kdedup binary with exactly the given environment and arguments. The process
// is killed when the test ends.
func child(t *testing.T, environ map[string]string, args ...string) (*exec.Cmd, *syncBuffer, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(kdedupBinary(t), args...)
	cmd.Env = []string{}
	for k, v := range environ {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, &stdout, &stderr
}

// worker is one run of the binary.
type worker struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{}
	code   int
}

// startWorker starts the binary with exactly the given environment; it is killed when the test
// ends.
func startWorker(t *testing.T, environ map[string]string) *worker {
	t.Helper()
	cmd, _, stderr := child(t, environ)
	w := &worker{cmd: cmd, stderr: stderr, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		w.code = 0
		if ee, ok := err.(*exec.ExitError); ok {
			w.code = ee.ExitCode()
		} else if err != nil {
			w.code = -2
		}
		close(w.exited)
	}()
	// Runs before child's cleanup, so that only this goroutine waits for the process.
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-w.exited
		keepLog(t, w.stderr.String())
	})
	return w
}

// keepLog writes a worker's log to a new file in the directory KDEDUP_TEST_LOGS names, if it is
// set: failures show only the end of a log.
func keepLog(t *testing.T, log string) {
	dir := os.Getenv("KDEDUP_TEST_LOGS")
	if dir == "" {
		return
	}
	f, err := os.CreateTemp(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+"-*.log")
	if err == nil {
		_, err = f.WriteString(log)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Logf("KDEDUP_TEST_LOGS: %v", err)
	}
}

// log kills the process if it still runs and returns everything it logged.
func (w *worker) log() string {
	_ = w.cmd.Process.Kill()
	<-w.exited
	return w.stderr.String()
}

// wait waits for the process to exit and returns its exit status (-1 when killed by a signal).
func (w *worker) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-w.exited:
		return w.code
	case <-time.After(within):
		t.Fatalf("worker did not exit within %v; log:\n%s", within, tail(w.log(), logTail))
		return 0
	}
}

func (w *worker) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := w.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// The messages of the worker's log events that the tests look for.
const (
	eventStarted  = "kdedup started"
	eventRestored = "state restored"
	eventDraining = "shutdown requested: draining"
	eventLeft     = "left consumer group"
	eventStopped  = "kdedup stopped"
)

// logEvent is one line of the worker's JSON log: slog's time, level and msg, and the attributes.
type logEvent map[string]any

// str returns the string field key, "" if it is absent or not a string.
func (e logEvent) str(key string) string {
	s, _ := e[key].(string)
	return s
}

// num returns the numeric field key, 0 if it is absent or not a number.
func (e logEvent) num(key string) float64 {
	f, _ := e[key].(float64)
	return f
}

// parseEvents returns the JSON lines of log as events, in order. Other lines (one cut short by
// SIGKILL, a panic) are skipped.
func parseEvents(log string) []logEvent {
	var out []logEvent
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e logEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.str("msg") != "" {
			out = append(out, e)
		}
	}
	return out
}

// event returns the first event the worker logged with the message msg.
func (w *worker) event(msg string) (logEvent, bool) {
	for _, e := range parseEvents(w.stderr.String()) {
		if e.str("msg") == msg {
			return e, true
		}
	}
	return nil, false
}

// started reports whether the worker logged its startup event: its signal handlers are installed
// (a SIGTERM sent next is a graceful stop, not the default kill) and its HTTP server listens.
func (w *worker) started() bool {
	_, ok := w.event(eventStarted)
	return ok
}

// url returns the URL of path on the worker's HTTP server, at the address its startup event
// reports, or "" before that event.
func (w *worker) url(path string) string {
	e, ok := w.event(eventStarted)
	if !ok {
		return ""
	}
	return "http://" + e.str("http") + path
}

// metrics scrapes the worker's /metrics; it fails the test if the worker has not started or the
// scrape fails.
func (w *worker) metrics(t *testing.T) samples {
	t.Helper()
	u := w.url("/metrics")
	if u == "" {
		t.Fatalf("scraping a worker that has not started; log:\n%s", tail(w.stderr.String(), logTail))
	}
	v, err := scrape.Samples(u)
	if err != nil {
		t.Fatalf("scraping the worker: %v", err)
	}
	return samples(v)
}

// samples are the samples of one scrape.
type samples model.Vector

// value returns the sum of the samples named name whose labels include every given label, value
// pair (a missing sample counts 0).
func (s samples) value(name string, labelValues ...string) float64 {
	return scrapetest.Sum(model.Vector(s), name, labelValues...)
}

// logTail is how many lines of a worker's log a failure shows.
const logTail = 60

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}

// poll calls check every 20ms until it reports done. It fails the test when check returns an
// error or timeout passes, adding what explain returns (explain may be nil).
func poll(t *testing.T, timeout time.Duration, what string, check func() (bool, error), explain func() string) {
	t.Helper()
	more := func() string {
		if explain == nil {
			return ""
		}
		return explain()
	}
	timeout = tier.Patience(timeout) // a loaded machine's deadline: the wait ends at its event
	deadline := time.Now().Add(timeout)
	for {
		done, err := check()
		switch {
		case err != nil:
			t.Fatalf("waiting for %s: %v%s", what, err, more())
		case done:
			return
		case time.Now().After(deadline):
			t.Fatalf("timed out after %v waiting for %s%s", timeout, what, more())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFor waits until the worker has started (see worker.started) and cond holds. It fails the
// test with the worker's log if the worker exits first or timeout passes.
func waitFor(t *testing.T, w *worker, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	poll(t, timeout, what, func() (bool, error) {
		select {
		case <-w.exited:
			return false, fmt.Errorf("worker exited (status %d)", w.code)
		default:
		}
		return w.started() && cond(), nil
	}, func() string { return "; log:\n" + tail(w.log(), logTail) })
}
