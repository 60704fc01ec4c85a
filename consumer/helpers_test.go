package consumer_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/identity"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/tier"
)

// ---- Deduper double -------------------------------------------------------------------------

// store stands in for the checkpoint store: Revoke saves a partition's identities into it and
// Assign restores them, which is how state follows a partition from one worker to another.
type store struct {
	mu    sync.Mutex
	saved map[int32]map[string]struct{}
}

func newStore() *store { return &store{saved: make(map[int32]map[string]struct{})} }

// mapDeduper is an exact Deduper: per-partition maps (scope partition) or one shared map (scope
// global). It checks the Worker's side of the contract: Seen only between Assign and Revoke of
// the same partition, never two Assigns without a Revoke in between.
type mapDeduper struct {
	global bool
	st     *store

	mu         sync.Mutex
	active     map[int32]map[string]struct{}
	globalSeen map[string]struct{}
	assigns    map[int32]int
	revokes    map[int32]int
	discards   map[int32]int
	kept       map[int32]int  // how often the partition was assigned and listed by Generation again
	eager      bool           // the worker rebalances eagerly: Generation comes with nothing assigned
	generation map[int32]bool // the partitions of the last Generation call; nil before the first
	gens       int
	violations []string
}

func newMapDeduper(global bool, st *store) *mapDeduper {
	if st == nil {
		st = newStore()
	}
	return &mapDeduper{
		global: global, st: st,
		active:     make(map[int32]map[string]struct{}),
		globalSeen: make(map[string]struct{}),
		assigns:    make(map[int32]int),
		revokes:    make(map[int32]int),
		discards:   make(map[int32]int),
		kept:       make(map[int32]int),
	}
}

// Generation checks the Deduper contract: under the eager protocol every partition of the
// previous generation must be released by now; under the cooperative one those still assigned
// are either listed again (kept: counted) or revoked after the call. The generation's Assigns
// must be for the partitions listed.
func (d *mapDeduper) Generation(_ int32, parts []int32, _ func(context.Context) error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.active) > 0 && d.eager {
		d.violations = append(d.violations, fmt.Sprintf("Generation(%v) while %d partitions are assigned", parts, len(d.active)))
	}
	for p := range d.active {
		if slices.Contains(parts, p) {
			d.kept[p]++
		}
	}
	if !slices.IsSorted(parts) {
		d.violations = append(d.violations, fmt.Sprintf("Generation(%v): not in ascending order", parts))
	}
	d.generation = map[int32]bool{}
	for _, p := range parts {
		d.generation[p] = true
	}
	d.gens++
}

func (d *mapDeduper) Assign(_ context.Context, p int32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.active[p]; ok {
		d.violations = append(d.violations, fmt.Sprintf("Assign(%d) while assigned", p))
	}
	if !d.generation[p] {
		d.violations = append(d.violations, fmt.Sprintf("Assign(%d) not announced by Generation (%d calls)", p, d.gens))
	}
	m := make(map[string]struct{})
	d.st.mu.Lock()
	for k := range d.st.saved[p] {
		m[k] = struct{}{}
	}
	d.st.mu.Unlock()
	d.active[p] = m
	d.assigns[p]++
	return nil
}

func (d *mapDeduper) Revoke(_ context.Context, p int32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, ok := d.active[p]
	if !ok {
		d.violations = append(d.violations, fmt.Sprintf("Revoke(%d) while not assigned", p))
	}
	d.st.mu.Lock()
	d.st.saved[p] = m
	d.st.mu.Unlock()
	delete(d.active, p)
	d.revokes[p]++
	return nil
}

func (d *mapDeduper) Discard(_ context.Context, p int32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.active, p)
	d.discards[p]++
	return nil
}

func (d *mapDeduper) Seen(p int32, id []byte, _ time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, ok := d.active[p]
	if !ok {
		d.violations = append(d.violations, fmt.Sprintf("Seen(%d) while not assigned", p))
		return false
	}
	if d.global {
		m = d.globalSeen
	}
	if _, dup := m[string(id)]; dup {
		return true
	}
	m[string(id)] = struct{}{}
	return false
}

// Processing and Acked do nothing: progressDeduper checks them.
func (d *mapDeduper) Processing(int32, int64) {}

// Rewind implements consumer.Deduper; mapDeduper keeps what it saw.
func (d *mapDeduper) Rewind(int32, int64) {}
func (d *mapDeduper) Acked(int32, int64)  {}

func (d *mapDeduper) check(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, v := range d.violations {
		t.Errorf("deduper contract violation: %s", v)
	}
}

func (d *mapDeduper) counts() (assigns, revokes, discards map[int32]int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return clone(d.assigns), clone(d.revokes), clone(d.discards)
}

func clone(m map[int32]int) map[int32]int {
	out := make(map[int32]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// ---- KeyFunc doubles --------------------------------------------------------------------------

// kafkaKey is the "key" KeyFunc.
var kafkaKey = func() consumer.KeyFunc {
	e, err := identity.New(identity.Spec{Kind: identity.KindKey}, identity.Options{})
	if err != nil {
		panic(err)
	}
	return e.Extract
}()

// keyFuncFor returns the identity extractor for a DEDUP_KEY spec: the real one.
func keyFuncFor(t *testing.T, spec string) consumer.KeyFunc {
	t.Helper()
	sp, err := identity.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	e, err := identity.New(sp, identity.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return e.Extract
}

// ---- Observer double --------------------------------------------------------------------------

type countingObserver struct {
	consumed, produced, duplicates, unkeyed atomic.Int64
	aborted, held                           atomic.Int64 // held: the last TransactionHeld, nanoseconds
	produceErrors, commitErrors             atomic.Int64
	rebalances, latencies                   atomic.Int64
	assigned                                atomic.Int64
	released                                atomic.Int64
	releaseMax                              atomic.Int64 // nanoseconds
	ready                                   atomic.Bool
	deadLetters                             atomic.Int64
	connRetries                             atomic.Int64
	blocked                                 sync.Map     // partition → reason, while blocked
	identityHolds                           atomic.Int64 // IdentityHeld(p, true) calls
	identityHeld                            atomic.Bool  // the last IdentityHeld
	diverted                                sync.Map     // reason → *atomic.Int64
	auditErrors                             atomic.Int64
	progress                                sync.Map // partition → the last consumer.Progress
	fetchErrors, skipped                    atomic.Int64
}

func (o *countingObserver) Consumed(_ int32, n int)          { o.consumed.Add(int64(n)) }
func (o *countingObserver) Produced(_ int32, n int)          { o.produced.Add(int64(n)) }
func (o *countingObserver) Duplicates(_ int32, n int)        { o.duplicates.Add(int64(n)) }
func (o *countingObserver) Unkeyed(_ int32, _ string, n int) { o.unkeyed.Add(int64(n)) }
func (o *countingObserver) IdentityHeld(_ int32, held bool) {
	if held {
		o.identityHolds.Add(1)
	}
	o.identityHeld.Store(held)
}
func (o *countingObserver) ProduceError()          { o.produceErrors.Add(1) }
func (o *countingObserver) ProducerReset(string)   {}
func (o *countingObserver) UncertainRetry()        {}
func (o *countingObserver) CommitError()           { o.commitErrors.Add(1) }
func (o *countingObserver) AssignRetry()           {}
func (o *countingObserver) ConnectionRetry(string) { o.connRetries.Add(1) }
func (o *countingObserver) Latency(_ time.Duration, ts []time.Duration) {
	o.latencies.Add(int64(len(ts)))
}
func (o *countingObserver) Progress(p int32, pr consumer.Progress) {
	o.progress.Store(p, pr)
}
func (o *countingObserver) FetchError(int32)                        { o.fetchErrors.Add(1) }
func (o *countingObserver) InputSkipped(_ int32, _ string, n int64) { o.skipped.Add(n) }
func (o *countingObserver) InputReread(int32, string, int64)        {}
func (o *countingObserver) Aborted(_ int32, n int)                  { o.aborted.Add(int64(n)) }
func (o *countingObserver) TransactionHeld(_ int32, d time.Duration) {
	o.held.Store(int64(d))
}
func (o *countingObserver) Rebalance()               { o.rebalances.Add(1) }
func (o *countingObserver) Assigned(n int)           { o.assigned.Store(int64(n)) }
func (o *countingObserver) SetReady(r bool)          { o.ready.Store(r) }
func (o *countingObserver) DeadLetter(int32, string) { o.deadLetters.Add(1) }
func (o *countingObserver) Diverted(_ int32, reason string, n int) {
	c, _ := o.diverted.LoadOrStore(reason, new(atomic.Int64))
	c.(*atomic.Int64).Add(int64(n))
}
func (o *countingObserver) AuditProduceError() { o.auditErrors.Add(1) }

// divertedFor returns the records counted diverted for reason.
func (o *countingObserver) divertedFor(reason string) int64 {
	if c, ok := o.diverted.Load(reason); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}
func (o *countingObserver) PartitionBlocked(p int32, reason string, blocked bool) {
	if blocked {
		o.blocked.Store(p, reason)
	} else {
		o.blocked.CompareAndDelete(p, reason)
	}
}
func (o *countingObserver) Released(d time.Duration) {
	o.released.Add(1)
	for {
		cur := o.releaseMax.Load()
		if int64(d) <= cur || o.releaseMax.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// ---- cluster and worker harness ---------------------------------------------------------------

type env struct {
	t        *testing.T
	cl       testbroker.Broker
	in, out  string
	group    string
	inParts  int
	outParts int
}

var testLog = func() *slog.Logger {
	if os.Getenv("KDEDUP_TEST_LOG") != "" {
		return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewJSONHandler(io.Discard, nil))
}()

func newEnv(t *testing.T, inParts, outParts int, opts embedkafka.Options) *env {
	t.Helper()
	tier.Integration(t)
	if opts.Topics == nil {
		opts.Topics = map[string]int32{}
	}
	opts.Topics["in"] = int32(inParts)
	if outParts > 0 {
		opts.Topics["out"] = int32(outParts)
	}
	cl, err := embedkafka.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &env{t: t, cl: testbroker.FromFake(cl), in: "in", out: "out", group: "g", inParts: inParts, outParts: outParts}
}

// newEnvOn returns an env on b (kfake or real Kafka, see testbroker) with input and output
// topics and a group of the test's own.
func newEnvOn(t *testing.T, b testbroker.Broker, inParts, outParts int) *env {
	t.Helper()
	e := &env{t: t, cl: b, in: b.Name("in"), out: b.Name("out"), group: b.Name("g"), inParts: inParts, outParts: outParts}
	if err := b.CreateTopic(t.Context(), e.in, inParts); err != nil {
		t.Fatal(err)
	}
	if outParts > 0 {
		if err := b.CreateTopic(t.Context(), e.out, outParts); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// TestMain stops the shared real broker after the tests (see testbroker.Main).
func TestMain(m *testing.M) { os.Exit(testbroker.Main(m)) }

// config returns a Worker config of e's brokers, topics and group with timeouts small enough for
// tests.
func (e *env) config() consumer.Config {
	return testConfig(e.cl.Addrs(), e.in, e.out, e.group)
}

// testConfig returns the defaults (consumer.AppDefaults) with brokers, the topics and group set,
// and timeouts small enough for tests.
func testConfig(brokers []string, in, out, group string) consumer.Config {
	c := consumer.AppDefaults()
	c.Brokers, c.InputTopic, c.OutputTopic, c.GroupID = brokers, in, out, group
	c.SessionTimeout, c.HeartbeatInterval, c.RebalanceTimeout = 2*time.Second, 200*time.Millisecond, 3*time.Second
	c.BatchSize, c.BatchTimeout, c.CommitInterval = 200, 2*time.Millisecond, 20*time.Millisecond
	c.ShutdownTimeout, c.RetryBackoffMax, c.ProduceTimeout = 10*time.Second, 500*time.Millisecond, 3*time.Second
	return c
}

type running struct {
	w      *consumer.Worker
	obs    *countingObserver
	cancel context.CancelFunc
	done   chan error
}

func (e *env) start(cfg consumer.Config, d consumer.Deduper, kf consumer.KeyFunc) *running {
	e.t.Helper()
	return e.startLogged(cfg, d, kf, testLog)
}

func (e *env) startLogged(cfg consumer.Config, d consumer.Deduper, kf consumer.KeyFunc, log *slog.Logger) *running {
	e.t.Helper()
	obs := &countingObserver{}
	w, err := consumer.New(cfg, d, kf, obs, log)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{w: w, obs: obs, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// stop cancels the worker and returns Run's result; it fails the test if Run takes longer than
// within.
func (r *running) stop(t *testing.T, within time.Duration) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(within):
		t.Fatalf("worker did not stop within %v", within)
		return nil
	}
}

// eventually polls cond every 10ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout = tier.Patience(timeout) // a loaded machine's deadline: the wait ends at its event
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitAllCommitted waits until the group's committed offsets reach the end of every input
// partition.
func (e *env) waitAllCommitted(timeout time.Duration) {
	e.t.Helper()
	ctx := context.Background()
	eventually(e.t, timeout, "all input offsets committed", func() bool {
		ends, err1 := e.cl.EndOffsets(ctx, e.in)
		com, err2 := e.cl.Committed(ctx, e.group, e.in)
		if err1 != nil || err2 != nil {
			return false
		}
		for p, end := range ends {
			if com[p] != end {
				return false
			}
		}
		return true
	})
}

func (e *env) produce(p int, msgs []kafkaio.Record) {
	e.t.Helper()
	if err := e.cl.Produce(context.Background(), e.in, p, msgs...); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) readOut(topic string) map[int][]kafkaio.Record {
	e.t.Helper()
	got, err := e.cl.ReadAll(context.Background(), topic)
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

// ---- record comparison ------------------------------------------------------------------------

// sameRecord reports how a differs from b in key (including null vs empty), value, headers and
// timestamp (millisecond precision, as stored by Kafka); "" means equal.
func sameRecord(a, b kafkaio.Record) string {
	switch {
	case (a.Key == nil) != (b.Key == nil) || !bytes.Equal(a.Key, b.Key):
		return fmt.Sprintf("key %q (nil=%v) != %q (nil=%v)", a.Key, a.Key == nil, b.Key, b.Key == nil)
	case (a.Value == nil) != (b.Value == nil) || !bytes.Equal(a.Value, b.Value):
		return fmt.Sprintf("value %q != %q", a.Value, b.Value)
	case !a.Time.Truncate(time.Millisecond).Equal(b.Time.Truncate(time.Millisecond)):
		return fmt.Sprintf("time %v != %v", a.Time, b.Time)
	case len(a.Headers) != len(b.Headers):
		return fmt.Sprintf("headers %v != %v", a.Headers, b.Headers)
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return fmt.Sprintf("headers %v != %v", a.Headers, b.Headers)
		}
	}
	return ""
}

func compareSeq(t *testing.T, what string, got, want []kafkaio.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: got %d records, want %d", what, len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if d := sameRecord(got[i], want[i]); d != "" {
			t.Errorf("%s: record %d: %s", what, i, d)
			return
		}
	}
}

// captureHandler is a slog.Handler that remembers every message at info level and above.
type captureHandler struct {
	mu   sync.Mutex
	msgs []string
	full []string // message and attributes (key=value)
}

func (h *captureHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	line := r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	h.mu.Lock()
	h.msgs = append(h.msgs, r.Message)
	h.full = append(h.full, line)
	h.mu.Unlock()
	return testLog.Handler().Handle(context.Background(), r)
}
func (h *captureHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *captureHandler) WithGroup(string) slog.Handler      { return h }

func (h *captureHandler) count(substr string) int { return h.countIn(false, substr) }

// countFull counts the log lines whose message or attributes hold substr.
func (h *captureHandler) countFull(substr string) int { return h.countIn(true, substr) }

// countIn counts the messages (full: the lines with attributes) that hold substr; it reads them
// under h.mu, which Handle appends under.
func (h *captureHandler) countIn(full bool, substr string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	lines := h.msgs
	if full {
		lines = h.full
	}
	n := 0
	for _, m := range lines {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}

// assigned reports whether every partition of ps is assigned (Assign returned, no Revoke or
// Discard since).
func (d *mapDeduper) assigned(ps []int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range ps {
		if _, ok := d.active[int32(p)]; !ok {
			return false
		}
	}
	return true
}
