package loadtest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/tier"
)

// exactDeduper is a map-based deduplicator with the window semantics of the real filter: an
// identity is remembered for hold after it was inserted (hold between (N−1)·interval and
// N·interval), and only identities not seen are inserted. It is safe for concurrent use; scope
// partition. leakEvery > 0 lets every leakEvery-th duplicate through; loseNth > 0 drops the
// loseNth new identity, and every later copy of it, as if it were a false positive.
type exactDeduper struct {
	hold      time.Duration
	leakEvery int
	loseNth   int

	mu     sync.Mutex
	seen   map[int]map[string]time.Time
	gone   map[string]bool
	dups   int
	fresh  int
	leaked int
	lost   int
}

func (d *exactDeduper) keep(partition int, _, _ []byte, headers []kafkaio.Header) bool {
	var id string
	for _, h := range headers {
		if h.Key == "event-id" {
			id = string(h.Value)
		}
	}
	if id == "" {
		return true // unkeyed: the end markers
	}
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen == nil {
		d.seen, d.gone = map[int]map[string]time.Time{}, map[string]bool{}
	}
	if d.gone[id] {
		return false
	}
	m := d.seen[partition]
	if m == nil {
		m = map[string]time.Time{}
		d.seen[partition] = m
	}
	if at, ok := m[id]; ok && now.Sub(at) < d.hold {
		d.dups++
		if d.leakEvery > 0 && d.dups%d.leakEvery == 0 {
			d.leaked++
			return true
		}
		return false
	}
	d.fresh++
	if d.loseNth > 0 && d.fresh == d.loseNth {
		d.lost++
		d.gone[id] = true
		return false // not inserted, like a false positive
	}
	m[id] = now
	return true
}

// runPipeline starts a broker with 4-partition topics, a Pipe with keep, and a loadtest.
func runPipeline(t *testing.T, cfg Config, keep func(int, []byte, []byte, []kafkaio.Header) bool) *Report {
	t.Helper()
	tier.Integration(t)
	cl, err := embedkafka.Start(embedkafka.Options{Topics: map[string]int32{"lt-in": 4, "lt-out": 4}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pipeCtx, stopPipe := context.WithCancel(ctx)
	pipeErr := make(chan error, 1)
	go func() {
		pipeErr <- Pipe(pipeCtx, PipeConfig{Conn: kafkaio.Conn{Brokers: cl.Addrs()}, InputTopic: "lt-in", OutputTopic: "lt-out", FromEarliest: true, Keep: keep})
	}()
	cfg.Brokers, cfg.InputTopic, cfg.OutputTopic = cl.Addrs(), "lt-in", "lt-out"
	cfg.Timeout = 45 * time.Second
	r, err := Run(ctx, cfg)
	stopPipe()
	if perr := <-pipeErr; perr != nil && !errors.Is(perr, context.Canceled) {
		t.Errorf("pipe: %v", perr)
	}
	if err != nil {
		t.Fatal(err)
	}
	var sum strings.Builder
	r.WriteSummary(&sum)
	t.Logf("report:\n%s", sum.String())
	return r
}

func e2eConfig() Config {
	return Config{
		Count: 3000, Rate: 3000, Entities: 200, DupRatio: 0.3,
		Mix:         Mix{Immediate: 1, Within: 2, Beyond: 1, Cross: 1},
		Field:       Field{Kind: FieldHeader, Name: "event-id"},
		WindowCount: 3, WindowInterval: 300 * time.Millisecond, FalsePositiveRate: 1e-6,
		Seed: 7, Settle: 3 * time.Second,
	}
}

// TestEndToEndPassThrough verifies a pipeline that copies everything against ExpectAll.
func TestEndToEndPassThrough(t *testing.T) {
	cfg := e2eConfig()
	cfg.ExpectAll, cfg.Rate = true, 0
	cfg.Mix = Mix{Immediate: 1, Within: 1, Cross: 1}
	hooked := make(chan struct{}, 1)
	cfg.At = cfg.Count / 2
	cfg.Do = func(context.Context) error { hooked <- struct{}{}; return nil }
	r := runPipeline(t, cfg, nil)
	select {
	case <-hooked:
	default:
		t.Error("the hook was not called")
	}
	v := r.Verdict
	if !r.Pass || v.Records != cfg.Count || v.Delivered != cfg.Count || v.Uniques != cfg.Count || v.Markers != 4 {
		t.Fatalf("pass %v, records %d, delivered %d, uniques %d, markers %d; failures %q", r.Pass, v.Records, v.Delivered, v.Uniques, v.Markers, r.Failures)
	}
	if r.Latency.Count != cfg.Count || r.Throughput.EndToEnd <= 0 || len(r.Series) == 0 {
		t.Errorf("latency %+v, throughput %+v, %d points", r.Latency, r.Throughput, len(r.Series))
	}
	// Every record's produce request was acknowledged, so every latency is split.
	if lp := r.LatencyParts; lp == nil || lp.Input.Count != cfg.Count || lp.Rest.Count != cfg.Count || lp.Input.Max > r.Latency.Max {
		t.Errorf("latency split %+v, want all %d records, each part within the latency %+v", lp, cfg.Count, r.Latency)
	}
}

// TestEndToEndExactDeduplication verifies a correct deduplicator over real Kafka: nothing
// leaked, nothing lost, order kept, and the ground truth adds up.
func TestEndToEndExactDeduplication(t *testing.T) {
	cfg := e2eConfig()
	d := &exactDeduper{hold: 750 * time.Millisecond} // between 2 and 3 intervals of 300ms
	r := runPipeline(t, cfg, d.keep)
	v := r.Verdict
	if !r.Pass || v.Leaked != 0 || v.Lost != 0 || v.OrderViolations != 0 || v.Records != cfg.Count {
		t.Fatalf("pass %v: %+v\nfailures %q", r.Pass, v, r.Failures)
	}
	if v.Uniques+v.MustDrop+v.Ambiguous != v.Records {
		t.Errorf("uniques %d + must drop %d + ambiguous %d != records %d", v.Uniques, v.MustDrop, v.Ambiguous, v.Records)
	}
	if v.MustDrop < v.Records/10 || v.ByKind["beyond"] == 0 || v.ByKind["cross"] == 0 {
		t.Errorf("too few judged duplicates: %+v", v)
	}
	if v.Delivered != v.Uniques+v.Ambiguous && v.Delivered < v.Uniques {
		t.Errorf("delivered %d, uniques %d", v.Delivered, v.Uniques)
	}
}

// TestEndToEndCatchesFaults verifies that leaked duplicates and a lost event of a faulty
// deduplicator fail the run.
func TestEndToEndCatchesFaults(t *testing.T) {
	cfg := e2eConfig()
	cfg.Count, cfg.Mix = 2000, Mix{Immediate: 1, Within: 2}
	d := &exactDeduper{hold: 750 * time.Millisecond, leakEvery: 50, loseNth: 100}
	r := runPipeline(t, cfg, d.keep)
	v := r.Verdict
	// Every injected leak is caught, unless lag made its timing undecidable (then it is counted
	// as not judged, never as a pass).
	if r.Pass || d.leaked == 0 || v.Leaked == 0 || v.Leaked > d.leaked || d.leaked-v.Leaked > v.Ambiguous || v.Lost != d.lost || d.lost != 1 {
		t.Fatalf("pass %v, leaked %d (injected %d), lost %d (injected %d); failures %q", r.Pass, v.Leaked, d.leaked, v.Lost, d.lost, r.Failures)
	}
}
