package metrics

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

var update = flag.Bool("update", false, "rewrite ../deploy/metric-names.txt from the registry")

// observer mirrors consumer.Observer; metrics must not import consumer, so the
// method set is checked here at compile time instead.
type observer interface {
	Consumed(partition int32, n int)
	Produced(partition int32, n int)
	Duplicates(partition int32, n int)
	Unkeyed(partition int32, reason string, n int)
	IdentityHeld(partition int32, held bool)
	ProduceError()
	CommitError()
	Latency(sinceConsume time.Duration, sinceRecordTimestamps []time.Duration)
	Lag(partition int32, lag int64)
	Aborted(partition int32, n int)
	TransactionHeld(partition int32, d time.Duration)
	Rebalance()
	Assigned(partitions int)
}

var _ observer = (*Metrics)(nil)

// producerObserver mirrors the producer methods of consumer.Observer.
type producerObserver interface {
	ProducerReset(reason string)
	UncertainRetry()
}

var _ producerObserver = (*Metrics)(nil)

var fixedNow = time.Unix(1_700_000_000, 0)

// testResetReasons stand in for consumer.ResetReasons(), which internal/app passes.
var testResetReasons = []string{"out_of_order_sequence", "unknown_producer_id"}

func newTest(t testing.TB, opts Options) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	if opts.Now == nil {
		opts.Now = func() time.Time { return fixedNow }
	}
	if opts.ProducerResetReasons == nil {
		opts.ProducerResetReasons = testResetReasons
	}
	if opts.RefusalReasons == nil {
		opts.RefusalReasons = testRefusalReasons
	}
	return New(reg, opts), reg
}

func fakeSource() []FilterStat {
	return []FilterStat{
		{
			Filter: "0", ConfiguredFPR: 1e-6, EstimatedFPR: 2e-7, CapacityBytes: 4096, Rotations: 3, WindowSeconds: 3600,
			Generations: []GenerationStat{{Fill: 0.25, EstimatedKeys: 100}, {Fill: 0.5, EstimatedKeys: 200}},
		},
		{
			Filter: "7", ConfiguredFPR: 1e-6, EstimatedFPR: 1e-6, CapacityBytes: 8192, Rotations: 0, WindowSeconds: 60,
			Stages: 2, Growths: 3, AtCap: true,
			Generations: []GenerationStat{{Fill: 0.1, EstimatedKeys: 10}},
		},
	}
}

// populate calls every recording method once so that every series exists.
func populate(m *Metrics) {
	m.Consumed(0, 10)
	m.Produced(0, 8)
	m.Duplicates(0, 2)
	m.Unkeyed(0, "missing", 1)
	m.Aborted(0, 3)
	m.TransactionHeld(0, time.Minute)
	m.ProduceError()
	m.UncertainRetry()
	m.ProducerReset("out_of_order_sequence")
	m.CommitError()
	m.ConnectionRetry("throttled")
	m.Latency(time.Millisecond, []time.Duration{time.Second})
	m.Lag(0, 42)
	m.Rebalance()
	m.Lag(0, 42)
	m.Progress(0, Progress{Lag: 42, LagTime: time.Second, LagTimeKnown: true, Lead: 7, LastProgress: fixedNow})
	m.FetchError(0)
	m.InputSkipped(0, "retention", 3)
	m.RegisterSetCounts(func() SetCounts { return SetCounts{Unassigned: 1, FutureCapped: 2} })
	m.RewarmSkipped(4)
	m.Assigned(1)
	m.SetReady(true)
	m.CheckpointSaved(0, time.Second, 1234)
	m.CheckpointFailed(0, "store")
	m.CheckpointWritten("file", 4096)
	m.Restored(0, checkpoint.OutcomeWarm, time.Second, time.Time{})
	m.Rewarmed(5)
	m.RebuildStarted()
	m.RebuildRecords(100)
	m.RebuildDone(time.Second, 3, nil)
	m.Released(time.Second)
	m.DeadLetter(0, "message_too_large")
	m.PartitionBlocked(1, "message_too_large", true)
	m.RegisterFilterSource(fakeSource)
	m.RegisterFilterSource(fakeEventSource)
}

// populateSources registers the per-source counters on reg and counts a record, so that their
// series exist.
func populateSources(reg prometheus.Registerer) {
	feed(NewSources(reg, SourceOptions{}).NewTally(), []sourceRecord{{src: "a", dup: true}}, 1)
}

// fakeEventSource reports two event-time filters: one 90 minutes behind fixedNow with 5 late
// records, and one that has seen no record yet.
func fakeEventSource() []FilterStat {
	return []FilterStat{
		{Filter: "3", ConfiguredFPR: 1e-6, WindowSeconds: 3600, EventTime: true,
			StreamTime: fixedNow.Add(-90 * time.Minute), LateRecords: 5},
		{Filter: "4", ConfiguredFPR: 1e-6, EventTime: true},
	}
}

// TestEventTimeCollector checks the event-time metrics: exported for event-time filters only,
// and the stream-time gauges only once a filter has a stream time.
func TestEventTimeCollector(t *testing.T) {
	m, reg := newTest(t, Options{SkipRuntimeCollectors: true, LatePolicy: "drop"})
	m.RegisterFilterSource(fakeSource)
	m.RegisterFilterSource(fakeEventSource)
	want := fmt.Sprintf(`
# HELP kdedup_filter_late_records_total Records of an event-time filter stamped before its oldest live generation, which cannot be judged, by what DEDUP_LATE_RECORDS did with them (policy): passed as new (pass: beyond the window, as its duplicates are) or dropped (drop: lost events). Counted since the filter was created or restored.
# TYPE kdedup_filter_late_records_total counter
kdedup_filter_late_records_total{filter="3",policy="drop"} 5
kdedup_filter_late_records_total{filter="4",policy="drop"} 0
# HELP kdedup_filter_stream_lag_seconds Wall clock minus the stream time of an event-time filter: how far behind the data's time the filter is (large during a replay or catch-up, negative for records stamped ahead of the worker's clock).
# TYPE kdedup_filter_stream_lag_seconds gauge
kdedup_filter_stream_lag_seconds{filter="3"} 5400
# HELP kdedup_filter_stream_time_seconds Stream time of a filter whose window follows record timestamps (DEDUP_WINDOW_CLOCK=event): the highest record timestamp it has seen, capped at the wall clock plus DEDUP_EVENT_TIME_MAX_AHEAD, in seconds since the Unix epoch.
# TYPE kdedup_filter_stream_time_seconds gauge
kdedup_filter_stream_time_seconds{filter="3"} %d
`, fixedNow.Add(-90*time.Minute).Unix())
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kdedup_filter_late_records_total",
		"kdedup_filter_stream_lag_seconds", "kdedup_filter_stream_time_seconds"); err != nil {
		t.Error(err)
	}
}

func TestGatherAndLint(t *testing.T) {
	for _, skip := range []bool{true, false} {
		t.Run(fmt.Sprintf("skipRuntime=%v", skip), func(t *testing.T) {
			m, reg := newTest(t, Options{Mode: "mark", Version: "v1.2.3", SkipRuntimeCollectors: skip, Checkpointing: true})
			populate(m)
			populateSources(reg)
			problems, err := testutil.GatherAndLint(reg)
			if err != nil {
				t.Fatalf("GatherAndLint: %v", err)
			}
			for _, p := range problems {
				t.Errorf("lint: %s: %s", p.Metric, p.Text)
			}
		})
	}
}

func TestNewToleratesRegisteredRuntimeCollectors(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGoCollector()) //nolint:staticcheck // deliberately the same collector New adds
	New(reg, Options{})
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("Gather: %v", err)
	}
}

func TestNewTwiceOnSameRegistryPanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg, Options{SkipRuntimeCollectors: true})
	defer func() {
		if recover() == nil {
			t.Fatal("second New on the same registry did not panic")
		}
	}()
	New(reg, Options{SkipRuntimeCollectors: true})
}

func TestMethodsMoveTheRightSeries(t *testing.T) {
	tests := []struct {
		name   string
		call   func(m *Metrics)
		series func(m *Metrics) prometheus.Collector
		want   float64
	}{
		{"Consumed", func(m *Metrics) { m.Consumed(3, 5); m.Consumed(3, 2) },
			func(m *Metrics) prometheus.Collector { return m.consumed.WithLabelValues("3") }, 7},
		{"Consumed ignores non-positive", func(m *Metrics) { m.Consumed(3, 0); m.Consumed(3, -4) },
			func(m *Metrics) prometheus.Collector { return m.consumed.WithLabelValues("3") }, 0},
		{"Produced", func(m *Metrics) { m.Produced(1, 9) },
			func(m *Metrics) prometheus.Collector { return m.produced.WithLabelValues("1") }, 9},
		{"Duplicates carries mode", func(m *Metrics) { m.Duplicates(2, 4) },
			func(m *Metrics) prometheus.Collector { return m.duplicates.WithLabelValues("2", "mark") }, 4},
		{"Unkeyed", func(m *Metrics) { m.Unkeyed(0, "missing", 3) },
			func(m *Metrics) prometheus.Collector { return m.unkeyed.WithLabelValues("0", unknown) }, 3},
		{"far partition", func(m *Metrics) { m.Consumed(maxTablePartition+5, 2) },
			func(m *Metrics) prometheus.Collector {
				return m.consumed.WithLabelValues(strconv.Itoa(maxTablePartition + 5))
			}, 2},
		{"negative partition", func(m *Metrics) { m.Produced(-1, 2) },
			func(m *Metrics) prometheus.Collector { return m.produced.WithLabelValues("-1") }, 2},
		{"ProduceError", func(m *Metrics) { m.ProduceError(); m.ProduceError() },
			func(m *Metrics) prometheus.Collector { return m.produceErrors }, 2},
		{"UncertainRetry", func(m *Metrics) { m.UncertainRetry(); m.UncertainRetry() },
			func(m *Metrics) prometheus.Collector { return m.uncertainRetries }, 2},
		{"ProducerReset", func(m *Metrics) { m.ProducerReset("unknown_producer_id") },
			func(m *Metrics) prometheus.Collector { return m.producerResets["unknown_producer_id"] }, 1},
		{"ProducerReset bogus reason is bounded", func(m *Metrics) { m.ProducerReset("cosmic ray") },
			func(m *Metrics) prometheus.Collector { return m.producerResets[resetOther] }, 1},
		{"CommitError", func(m *Metrics) { m.CommitError() },
			func(m *Metrics) prometheus.Collector { return m.commitErrors }, 1},
		{"Rebalance", func(m *Metrics) { m.Rebalance() },
			func(m *Metrics) prometheus.Collector { return m.rebalances }, 1},
		{"Assigned", func(m *Metrics) { m.Assigned(6); m.Assigned(4) },
			func(m *Metrics) prometheus.Collector { return m.assigned }, 4},
		{"SetReady true", func(m *Metrics) { m.SetReady(true) },
			func(m *Metrics) prometheus.Collector { return m.ready }, 1},
		{"SetReady false", func(m *Metrics) { m.SetReady(true); m.SetReady(false) },
			func(m *Metrics) prometheus.Collector { return m.ready }, 0},
		{"CheckpointSaved size", func(m *Metrics) { m.CheckpointSaved(0, time.Second, 4096) },
			func(m *Metrics) prometheus.Collector { return m.checkpointSize }, 4096},
		{"CheckpointSaved timestamp", func(m *Metrics) { m.CheckpointSaved(0, time.Second, 1) },
			func(m *Metrics) prometheus.Collector { return m.checkpointLastSuccess }, float64(fixedNow.Unix())},
		{"CheckpointFailed bogus reason is bounded", func(m *Metrics) { m.CheckpointFailed(0, "cosmic ray") },
			func(m *Metrics) prometheus.Collector { return m.checkpointFailures[resetOther] }, 1},
		{"CheckpointWritten", func(m *Metrics) {
			m.CheckpointWritten("s3", 100)
			m.CheckpointWritten("s3", 0)
			m.CheckpointWritten("s3", 20)
		},
			func(m *Metrics) prometheus.Collector { return m.checkpointWritten.WithLabelValues("s3") }, 120},
		{"CheckpointWritten without a kind", func(m *Metrics) { m.CheckpointWritten("", 7) },
			func(m *Metrics) prometheus.Collector { return m.checkpointWritten.WithLabelValues(unknown) }, 7},
		{"Restored warm", func(m *Metrics) { m.Restored(0, checkpoint.OutcomeWarm, time.Second, time.Time{}) },
			func(m *Metrics) prometheus.Collector { return m.restores[checkpoint.OutcomeWarm] }, 1},
		{"Restored fallback", func(m *Metrics) { m.Restored(0, checkpoint.OutcomeFallback, time.Second, time.Time{}) },
			func(m *Metrics) prometheus.Collector { return m.restores[checkpoint.OutcomeFallback] }, 1},
		{"Restored bogus outcome is bounded", func(m *Metrics) { m.Restored(0, "lukewarm", time.Second, time.Time{}) },
			func(m *Metrics) prometheus.Collector { return m.restoreUnknown }, 1},
		{"Rewarmed", func(m *Metrics) { m.Rewarmed(100); m.Rewarmed(-1) },
			func(m *Metrics) prometheus.Collector { return m.rewarmed }, 100},
		{"Restored retained", func(m *Metrics) { m.Restored(0, checkpoint.OutcomeRetained, time.Second, time.Time{}) },
			func(m *Metrics) prometheus.Collector { return m.restores[checkpoint.OutcomeRetained] }, 1},
		{"rebuilding while started", func(m *Metrics) {
			m.RebuildStarted()
			m.RebuildStarted()
			m.RebuildDone(time.Second, 0, errors.New("x"))
		},
			func(m *Metrics) prometheus.Collector { return m.rebuilding }, 1},
		{"RebuildRecords", func(m *Metrics) { m.RebuildRecords(4096); m.RebuildRecords(0); m.RebuildRecords(4) },
			func(m *Metrics) prometheus.Collector { return m.rebuildRecords }, 4100},
		{"RebuildDone skipped", func(m *Metrics) { m.RebuildStarted(); m.RebuildDone(time.Second, 7, nil) },
			func(m *Metrics) prometheus.Collector { return m.rebuildSkipped }, 7},
		{"RebuildByRecordTime", func(m *Metrics) { m.RebuildByRecordTime(); m.RebuildByRecordTime() },
			func(m *Metrics) prometheus.Collector { return m.rebuildByRecordTime }, 2},
		{"RebuildDone failed", func(m *Metrics) { m.RebuildStarted(); m.RebuildDone(time.Second, 0, errors.New("broker down")) },
			func(m *Metrics) prometheus.Collector { return m.rebuildFailures }, 1},
		{"RebuildDone called off is no failure", func(m *Metrics) {
			m.RebuildStarted()
			m.RebuildDone(time.Second, 0, fmt.Errorf("dedup: rebuilding: %w", context.Canceled))
		}, func(m *Metrics) prometheus.Collector { return m.rebuildFailures }, 0},
		{"build info", func(*Metrics) {},
			func(m *Metrics) prometheus.Collector { return m.buildInfo }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := newTest(t, Options{Mode: "mark", SkipRuntimeCollectors: true})
			tt.call(m)
			if got := testutil.ToFloat64(tt.series(m)); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHistograms(t *testing.T) {
	m, reg := newTest(t, Options{SkipRuntimeCollectors: true})
	m.Latency(-time.Millisecond, []time.Duration{2 * time.Second}) // negative clamps to 0
	m.CheckpointSaved(0, 3*time.Second, 1)
	m.Restored(0, checkpoint.OutcomeCold, 500*time.Millisecond, time.Time{})
	m.RebuildStarted()
	m.RebuildDone(2*time.Second, 0, nil)
	m.RebuildStarted()
	m.RebuildDone(time.Hour, 0, errors.New("failed")) // failures are not observed
	m.Released(250 * time.Millisecond)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		count uint64
		sum   float64
	}{
		"kdedup_end_to_end_latency_seconds":          {1, 2},
		"kdedup_processing_latency_seconds":          {1, 0},
		"kdedup_checkpoint_duration_seconds":         {1, 3},
		"kdedup_checkpoint_restore_duration_seconds": {1, 0.5},
		"kdedup_rebuild_duration_seconds":            {1, 2},
		"kdedup_partition_release_duration_seconds":  {1, 0.25},
	}
	for _, mf := range mfs {
		w, ok := want[mf.GetName()]
		if !ok {
			continue
		}
		delete(want, mf.GetName())
		h := mf.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != w.count || h.GetSampleSum() != w.sum {
			t.Errorf("%s: count=%d sum=%v, want count=%d sum=%v", mf.GetName(), h.GetSampleCount(), h.GetSampleSum(), w.count, w.sum)
		}
	}
	for name := range want {
		t.Errorf("%s not gathered", name)
	}
}

func TestDefaults(t *testing.T) {
	m, reg := newTest(t, Options{SkipRuntimeCollectors: true})
	m.Duplicates(0, 1)
	if got := testutil.ToFloat64(m.duplicates.WithLabelValues("0", "unknown")); got != 1 {
		t.Errorf("default mode: got %v on mode=unknown, want 1", got)
	}
	if got := testutil.ToFloat64(m.checkpointLastSuccess); got != 0 {
		t.Errorf("last success without checkpointing = %v, want 0", got)
	}
	want := fmt.Sprintf(`
# HELP kdedup_build_info Always 1; the labels carry the kdedup version and the Go version it was built with.
# TYPE kdedup_build_info gauge
kdedup_build_info{goversion=%q,version="unknown"} 1
`, runtime.Version())
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kdedup_build_info"); err != nil {
		t.Error(err)
	}
}

func TestCheckpointingStartsTheClock(t *testing.T) {
	m, _ := newTest(t, Options{Checkpointing: true, SkipRuntimeCollectors: true})
	if got := testutil.ToFloat64(m.checkpointLastSuccess); got != float64(fixedNow.Unix()) {
		t.Errorf("last success at start = %v, want %v", got, fixedNow.Unix())
	}
}

const filterHelp = `
# HELP kdedup_filter_at_memory_cap 1 when a live generation needed a further stage and the worker's memory budget (DEDUP_MEMORY_LIMIT) refused it: DEDUP_OVERLOAD_POLICY applies (drop: the false-positive rate rises, events may be lost; pass: duplicates may pass). 0 otherwise.
# TYPE kdedup_filter_at_memory_cap gauge
kdedup_filter_at_memory_cap{filter="0"} 0
kdedup_filter_at_memory_cap{filter="7"} 1
# HELP kdedup_filter_capacity_bytes Memory occupied by the filter's bit arrays, the stages grown past DEDUP_WINDOW_CAPACITY included.
# TYPE kdedup_filter_capacity_bytes gauge
kdedup_filter_capacity_bytes{filter="0"} 4096
kdedup_filter_capacity_bytes{filter="7"} 8192
# HELP kdedup_filter_estimated_keys Estimated distinct keys inserted into a generation (generation 0 is the newest).
# TYPE kdedup_filter_estimated_keys gauge
kdedup_filter_estimated_keys{filter="0",generation="0"} 100
kdedup_filter_estimated_keys{filter="0",generation="1"} 200
kdedup_filter_estimated_keys{filter="7",generation="0"} 10
# HELP kdedup_filter_false_positive_rate_estimated False-positive rate a new record's identity faces now, estimated from the fill of the filter's live generations: the chance that a unique record arriving at this instant is wrongly dropped as a duplicate. It rises as the current generation fills; the share of unique records lost over a period is its average over that period.
# TYPE kdedup_filter_false_positive_rate_estimated gauge
kdedup_filter_false_positive_rate_estimated{filter="0"} 2e-07
kdedup_filter_false_positive_rate_estimated{filter="7"} 1e-06
# HELP kdedup_filter_false_positive_rate_target Configured false-positive rate over the whole window: the acceptable fraction of unique records wrongly dropped.
# TYPE kdedup_filter_false_positive_rate_target gauge
kdedup_filter_false_positive_rate_target %s
# HELP kdedup_filter_generation_fill_ratio Fraction of a generation's bits that are set (generation 0 is the newest).
# TYPE kdedup_filter_generation_fill_ratio gauge
kdedup_filter_generation_fill_ratio{filter="0",generation="0"} 0.25
kdedup_filter_generation_fill_ratio{filter="0",generation="1"} 0.5
kdedup_filter_generation_fill_ratio{filter="7",generation="0"} 0.1
# HELP kdedup_filter_growths_total Stages the filter added since it was created or restored: generations that took more identities than DEDUP_WINDOW_CAPACITY.
# TYPE kdedup_filter_growths_total counter
kdedup_filter_growths_total{filter="0"} 0
kdedup_filter_growths_total{filter="7"} 3
# HELP kdedup_filter_rotations_total Generation rotations of the filter since it was created or restored.
# TYPE kdedup_filter_rotations_total counter
kdedup_filter_rotations_total{filter="0"} 3
kdedup_filter_rotations_total{filter="7"} 0
# HELP kdedup_filter_stages Stages the filter's live generations grew past DEDUP_WINDOW_CAPACITY (0 while every generation is within it). Each stage doubles the generation's room at a tighter rate, so the false-positive rate stays at target.
# TYPE kdedup_filter_stages gauge
kdedup_filter_stages{filter="0"} 0
kdedup_filter_stages{filter="7"} 2
# HELP kdedup_filter_window_seconds Span of time the filter currently covers.
# TYPE kdedup_filter_window_seconds gauge
kdedup_filter_window_seconds{filter="0"} 3600
kdedup_filter_window_seconds{filter="7"} 60
`

func TestFilterCollector(t *testing.T) {
	tests := []struct {
		name       string
		target     float64
		wantTarget string
	}{
		{"target from source", 0, "1e-06"},
		{"target from options", 1e-3, "0.001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reg := newTest(t, Options{SkipRuntimeCollectors: true, TargetFalsePositiveRate: tt.target})
			m.RegisterFilterSource(fakeSource)
			m.RegisterFilterSource(nil)
			want := fmt.Sprintf(filterHelp, tt.wantTarget)
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
				"kdedup_filter_capacity_bytes", "kdedup_filter_estimated_keys",
				"kdedup_filter_false_positive_rate_estimated", "kdedup_filter_false_positive_rate_target",
				"kdedup_filter_generation_fill_ratio", "kdedup_filter_rotations_total",
				"kdedup_filter_window_seconds", "kdedup_filter_stages", "kdedup_filter_growths_total",
				"kdedup_filter_at_memory_cap"); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestFilterCollectorDropsRevokedFilters(t *testing.T) {
	m, reg := newTest(t, Options{SkipRuntimeCollectors: true})
	var mu sync.Mutex
	stats := fakeSource()
	m.RegisterFilterSource(func() []FilterStat {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(stats)
	})
	if n, err := testutil.GatherAndCount(reg, "kdedup_filter_capacity_bytes"); err != nil || n != 2 {
		t.Fatalf("before revoke: %d series, err %v; want 2", n, err)
	}
	mu.Lock()
	stats = stats[:1] // partition 7 revoked
	mu.Unlock()
	if n, err := testutil.GatherAndCount(reg, "kdedup_filter_capacity_bytes", "kdedup_filter_generation_fill_ratio"); err != nil || n != 3 {
		t.Fatalf("after revoke: %d series, err %v; want 3", n, err)
	}
	mu.Lock()
	stats = nil // nothing assigned: no target known either
	mu.Unlock()
	if n, err := testutil.GatherAndCount(reg, "kdedup_filter_false_positive_rate_target", "kdedup_filter_capacity_bytes"); err != nil || n != 0 {
		t.Fatalf("nothing assigned: %d series, err %v; want 0", n, err)
	}
}

func TestLagSeries(t *testing.T) {
	header := `
# HELP kdedup_consumer_lag_records Records between this worker's position and the end of an assigned input partition: its last stable offset under KAFKA_ISOLATION_LEVEL=read_committed (records of open transactions are not counted), its high watermark under read_uncommitted.
# TYPE kdedup_consumer_lag_records gauge
`
	tests := []struct {
		name string
		call func(m *Metrics)
		want string
	}{
		{"reported", func(m *Metrics) { m.Lag(1, 10); m.Lag(4, 0); m.Lag(1, 12) },
			header + "kdedup_consumer_lag_records{partition=\"1\"} 12\nkdedup_consumer_lag_records{partition=\"4\"} 0\n"},
		{"rebalance forgets", func(m *Metrics) { m.Lag(1, 10); m.Lag(4, 3); m.Rebalance(); m.Lag(4, 5) },
			header + "kdedup_consumer_lag_records{partition=\"4\"} 5\n"},
		{"negative hides", func(m *Metrics) { m.Lag(1, 10); m.Lag(1, -1) }, ""},
		{"far partition", func(m *Metrics) { m.Lag(maxTablePartition, 9) },
			header + fmt.Sprintf("kdedup_consumer_lag_records{partition=\"%d\"} 9\n", maxTablePartition)},
		{"far partition forgotten", func(m *Metrics) { m.Lag(maxTablePartition, 9); m.Rebalance() }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reg := newTest(t, Options{SkipRuntimeCollectors: true})
			tt.call(m)
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tt.want), "kdedup_consumer_lag_records"); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestTransactionHeld proves that the hold gauge counts from the reported start on the clock,
// is exported with the lag of assigned partitions only, and is 0 once the hold is over.
func TestTransactionHeld(t *testing.T) {
	now := fixedNow
	m, reg := newTest(t, Options{SkipRuntimeCollectors: true, Now: func() time.Time { return now }})
	header := `
# HELP kdedup_input_transaction_held_seconds How long this worker has been held at the last stable offset of an assigned input partition by a transaction left open (under KAFKA_ISOLATION_LEVEL=read_committed nothing after it is read until it commits or aborts); 0 when it is not held.
# TYPE kdedup_input_transaction_held_seconds gauge
`
	check := func(want string) {
		t.Helper()
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kdedup_input_transaction_held_seconds"); err != nil {
			t.Error(err)
		}
	}
	m.TransactionHeld(2, 5*time.Second)
	check("") // partition 2 has no lag reported: not assigned yet
	m.Lag(2, 0)
	m.Lag(3, 10)
	now = now.Add(10 * time.Second)
	check(header + "kdedup_input_transaction_held_seconds{partition=\"2\"} 15\nkdedup_input_transaction_held_seconds{partition=\"3\"} 0\n")
	m.TransactionHeld(2, 0)
	check(header + "kdedup_input_transaction_held_seconds{partition=\"2\"} 0\nkdedup_input_transaction_held_seconds{partition=\"3\"} 0\n")
	m.TransactionHeld(3, time.Second)
	m.Rebalance()
	m.Lag(3, 0)
	check(header + "kdedup_input_transaction_held_seconds{partition=\"3\"} 0\n")
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	m, _ := newTest(t, Options{SkipRuntimeCollectors: true})
	populate(m) // partition 0 seen
	tests := []struct {
		name string
		fn   func()
	}{
		{"Consumed", func() { m.Consumed(0, 1) }},
		{"Produced", func() { m.Produced(0, 1) }},
		{"Duplicates", func() { m.Duplicates(0, 1) }},
		{"Unkeyed", func() { m.Unkeyed(0, "missing", 1) }},
		{"Lag", func() { m.Lag(0, 7) }},
		{"Aborted", func() { m.Aborted(0, 2) }},
		{"TransactionHeld", func() { m.TransactionHeld(0, time.Second) }},
		{"Latency", func() { m.Latency(time.Millisecond, []time.Duration{time.Second, 2 * time.Second}) }},
		{"ProduceError", m.ProduceError},
		{"CommitError", m.CommitError},
		{"Assigned", func() { m.Assigned(3) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if a := testing.AllocsPerRun(1000, tt.fn); a != 0 {
				t.Errorf("%s: %v allocs per call, want 0", tt.name, a)
			}
		})
	}
}

func TestConcurrentUse(t *testing.T) {
	m, reg := newTest(t, Options{SkipRuntimeCollectors: true})
	const workers, iters, parts = 8, 500, 40
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range iters {
				p := int32((w*iters + i) % parts)
				m.Consumed(p, 1)
				m.Produced(p, 1)
				m.Duplicates(p, 1)
				m.Unkeyed(p, "missing", 1)
				m.Lag(p, int64(i))
				m.Latency(time.Millisecond, []time.Duration{time.Millisecond})
				if i%100 == 0 {
					m.Rebalance()
					m.RegisterFilterSource(func() []FilterStat { return nil })
					m.CheckpointSaved(0, time.Millisecond, 1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // a scraper running alongside
		defer wg.Done()
		for range 20 {
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	var total float64
	for p := range parts {
		total += testutil.ToFloat64(m.consumed.WithLabelValues(strconv.Itoa(p)))
	}
	if total != workers*iters {
		t.Errorf("consumed total = %v, want %d", total, workers*iters)
	}
}

// seriesNames returns the metric names as PromQL sees them: histograms and
// summaries expand to their _bucket/_sum/_count (and plain) series names.
func seriesNames(mfs []*dto.MetricFamily) []string {
	var names []string
	for _, mf := range mfs {
		n := mf.GetName()
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			names = append(names, n+"_bucket", n+"_sum", n+"_count")
		case dto.MetricType_SUMMARY:
			names = append(names, n, n+"_sum", n+"_count")
		default:
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

const metricNamesHeader = `# Series names exposed by kdedup's /metrics (kdedup_* and process_*; go_* are omitted
# because they change with the Go version). Generated by the metrics package tests:
#   go test ./metrics -run TestMetricNamesFile -update
# tools/ checks that every metric the dashboard and alert rules reference is listed here.
`

// TestMetricNamesFile keeps ../deploy/metric-names.txt in step with the
// registry: it fails on drift, and -update rewrites the file.
func TestMetricNamesFile(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process_* metrics differ off Linux; the file is generated on Linux")
	}
	m, reg := newTest(t, Options{Checkpointing: true})
	populate(m)
	populateSources(reg)
	populateRoute(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	buf.WriteString(metricNamesHeader)
	for _, n := range seriesNames(mfs) {
		if strings.HasPrefix(n, "kdedup_") || strings.HasPrefix(n, "process_") {
			buf.WriteString(n + "\n")
		}
	}
	path := filepath.Join("..", "deploy", "metric-names.txt")
	if *update {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run: go test ./metrics -run TestMetricNamesFile -update)", err)
	}
	if !bytes.Equal(got, buf.Bytes()) {
		t.Errorf("%s is out of date; run: go test ./metrics -run TestMetricNamesFile -update\n--- file\n%s\n--- registry\n%s", path, got, buf.Bytes())
	}
}

// The benchmarks compare the cached per-partition children against the
// baseline of resolving the label child on every call.

func BenchmarkDuplicates(b *testing.B) {
	m, _ := newTest(b, Options{SkipRuntimeCollectors: true})
	for p := range int32(32) {
		m.Duplicates(p, 1)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var p int32
		for pb.Next() {
			m.Duplicates(p&31, 1)
			p++
		}
	})
}

func BenchmarkConsumed(b *testing.B) {
	m, _ := newTest(b, Options{SkipRuntimeCollectors: true})
	for p := range int32(32) {
		m.Consumed(p, 1)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var p int32
		for pb.Next() {
			m.Consumed(p&31, 1)
			p++
		}
	})
}

func BenchmarkBaselineCounterVecWithLabelValues(b *testing.B) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "baseline_total", Help: "h"}, []string{"partition", "mode"})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var p int32
		for pb.Next() {
			vec.WithLabelValues(strconv.Itoa(int(p&31)), "drop").Add(1)
			p++
		}
	})
}
