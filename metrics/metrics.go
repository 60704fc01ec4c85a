// Package metrics exposes kdedup's Prometheus metrics.
//
// New builds every metric of the kdedup metric contract on a registry that the
// caller passes in (never the global default registry). The returned *Metrics
// implements the method set of consumer.Observer (readiness, releases and the
// producer's resets and uncertain retries included) without importing the
// consumer package, plus hooks for checkpoint events and rebuilds from the
// output topic (dedup.CheckpointObserver) and the sliding-window filter statistics.
//
// The hot-path methods (Consumed, Produced, Duplicates, Unkeyed, Lag, Latency,
// ProduceError, CommitError) do not allocate once a partition has been seen:
// the per-partition label children are resolved once, lazily, and cached in a
// copy-on-write table indexed by partition number.
//
// Filter statistics and consumer lag are exported by a custom collector that
// builds constant metrics at scrape time, so a partition that is revoked from
// this worker stops being exported instead of leaving a stale series behind.
package metrics

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Namespace is the prefix of every kdedup metric name.
const Namespace = "kdedup"

// unknown is the label value of a restore outcome that is not a checkpoint.Outcome, and of an
// empty Options.Mode or Options.Version: labels stay bounded and never empty.
const unknown = "unknown"

// resetOther is the reason label of a count whose reason is not one of its closed set (a producer
// reset's, a dead letter's, a rejected snapshot's, ...), so that the label stays bounded.
const resetOther = "other"

// reasonCounters holds a counter vector's children for a closed set of reason label values and
// resetOther, so that the label never takes a value outside the set. It is read-only once built
// and safe for concurrent use.
type reasonCounters map[string]prometheus.Counter

// newReasonCounters returns vec's children for reasons and resetOther.
func newReasonCounters(vec *prometheus.CounterVec, reasons []string) reasonCounters {
	rc := make(reasonCounters, len(reasons)+1)
	for _, r := range append(slices.Clone(reasons), resetOther) {
		rc[r] = vec.WithLabelValues(r)
	}
	return rc
}

// add adds v to reason's counter, or to resetOther's for a reason outside the set.
func (rc reasonCounters) add(reason string, v float64) {
	c, ok := rc[reason]
	if !ok {
		c = rc[resetOther]
	}
	c.Add(v)
}

// maxTablePartition bounds the directly indexed partition table. Partition
// numbers at or above it (or negative ones) go through a mutex-guarded map,
// which is slower but keeps a bogus partition number from allocating a huge
// table.
const maxTablePartition = 1 << 16

// Options configures New. The zero value is usable: mode and version
// "unknown", target false-positive rate taken from the filter sources, no
// checkpointing, Go and process collectors registered, time.Now as the clock.
type Options struct {
	// Mode is the duplicate handling mode reported in the mode label of
	// kdedup_duplicates_total: the worker's consumer.Mode ("drop" or
	// "mark"), which this package does not import. Empty means "unknown";
	// any other value is used verbatim: the caller validates it.
	Mode string

	// UnkeyedPolicy is what the worker does with a record without a key (DEDUP_UNKEYED: "pass"
	// or "drop"), reported in the policy label of kdedup_records_unkeyed_total. Empty means
	// "unknown".
	UnkeyedPolicy string

	// LatePolicy is what an event-time filter does with a late record (DEDUP_LATE_RECORDS:
	// "pass" or "drop"), reported in the policy label of kdedup_filter_late_records_total.
	// Empty means "unknown".
	LatePolicy string

	// Version is the build version reported by kdedup_build_info. Empty means
	// "unknown".
	Version string

	// TargetFalsePositiveRate is the configured false-positive rate over the
	// whole window, exported as kdedup_filter_false_positive_rate_target.
	// Zero means: take ConfiguredFPR of the first filter statistic reported
	// by the registered sources, and omit the gauge while there is none.
	TargetFalsePositiveRate float64

	// Checkpointing tells whether checkpoints are enabled. When true,
	// kdedup_checkpoint_last_success_timestamp_seconds starts at the time New
	// is called, so a worker that never manages to save a checkpoint becomes
	// stale on the same schedule as one whose saves stopped. When false it
	// stays 0 until the first CheckpointSaved, and alerts ignore 0.
	Checkpointing bool

	// CheckpointStore is the kind of checkpoint store ("file" or "s3"): its series of
	// kdedup_checkpoint_written_bytes_total exists from the start, at 0. Empty means none is
	// prepared; CheckpointWritten adds the series of the kinds it is given.
	CheckpointStore string

	// SkipRuntimeCollectors disables registering the Go runtime and process
	// collectors (go_*, process_*) on the registry. The dashboard's restart
	// panel needs process_start_time_seconds, so leave it false in
	// production.
	SkipRuntimeCollectors bool

	// ProducerResetReasons are the values of the reason label of
	// kdedup_producer_resets_total (internal/app passes consumer.ResetReasons()).
	// Any other reason is counted as "other". Default: none, so every reset
	// is counted as "other".
	ProducerResetReasons []string

	// ConnectionRetryReasons are the values of the reason label of
	// kdedup_connection_retries_total (internal/app passes
	// consumer.RetryReasons()). Any other reason is counted as "other".
	// Default: none.
	ConnectionRetryReasons []string

	// RefusalReasons are the values of the reason label of
	// kdedup_dead_letters_total and kdedup_partition_blocked (internal/app
	// passes consumer.RefusalReasons()). Any other reason is counted as
	// "other". Default: none.
	RefusalReasons []string
	// DropReasons are the values of the reason label of kdedup_audit_records_total
	// (internal/app passes consumer.DropReasons); any other reason is counted as "other".
	DropReasons []string
	// RejectReasons are the values of the reason label of kdedup_checkpoint_rejected_total
	// (internal/app passes dedup.RejectReasons()); any other reason is counted as "other".
	RejectReasons []string

	// UnkeyedReasons are the values of the reason label of
	// kdedup_records_unkeyed_by_reason_total (internal/app passes identity.Reasons()). Any other
	// reason is counted as "other". Default: none.
	UnkeyedReasons []string

	// SkipReasons are the values of the reason label of kdedup_input_skipped_records_total
	// (internal/app passes kafkaio.SkipReasons()): their series exist from the start, at 0. Any
	// other reason is counted as "other". Default: none.
	SkipReasons []string
	// RereadReasons are the values of the reason label of kdedup_input_reread_records_total
	// (internal/app passes kafkaio.RereadReasons()): their series exist from the start, at 0.
	// Any other reason is counted as "other". Default: none.
	RereadReasons []string

	// CheckpointFailureReasons are the values of the reason label of
	// kdedup_checkpoint_failures_total (internal/app passes dedup.CheckpointFailureReasons()):
	// their series exist from the start, at 0. Any other reason is counted as "other".
	CheckpointFailureReasons []string

	// ReleaseBudget is how long the worker allows the release of a revoked partition
	// (consumer.Config.ReleaseBudget), exported as kdedup_partition_release_budget_seconds for
	// the alert on release times near it. Zero omits the gauge's value (0).
	ReleaseBudget time.Duration

	// Now is the clock used for the checkpoint success timestamp. Nil means
	// time.Now.
	Now func() time.Time
}

// GenerationStat describes one generation of a sliding-window filter.
type GenerationStat struct {
	// Fill is the fraction of the generation's bits that are set, in [0, 1].
	Fill float64
	// EstimatedKeys is the estimated number of distinct keys inserted.
	EstimatedKeys float64
	// Keys is the number of distinct keys the generation took, counted as they arrived
	// (window.GenerationStats.Keys): the observed load auto sizing follows.
	Keys uint64
}

// FilterStat is a point-in-time description of one sliding-window filter,
// as returned by a source registered with Metrics.RegisterFilterSource.
type FilterStat struct {
	// Filter names the filter: "global", or the partition number in decimal
	// for per-partition filters. It must be unique across all sources.
	Filter string
	// ConfiguredFPR is the target false-positive rate over the whole window.
	ConfiguredFPR float64
	// EstimatedFPR is the false-positive rate a new key faces now, estimated from the fill of
	// the live generations (window.Stats.EstimatedFPR).
	EstimatedFPR float64
	// CapacityBytes is the memory the filter's bit arrays occupy, grown stages included.
	CapacityBytes uint64
	// ResidentBytes is the part of CapacityBytes the filter has written, and so holds resident
	// (window.Stats.ResidentBytes): less while the keys have reached only part of a new filter.
	ResidentBytes uint64
	// Rotations is how many times the filter has rotated generations.
	Rotations uint64
	// WindowSeconds is the span of time the filter currently covers.
	WindowSeconds float64
	// Stages is the number of grown stages of the live generations (window.Stats.Stages): 0
	// while every generation is within its capacity.
	Stages int
	// Growths counts the stages the filter added since it was created or restored.
	Growths uint64
	// Refreshes counts the duplicates that re-armed their identity (window.Stats.Refreshes).
	Refreshes uint64
	// Forgotten counts the new identities not remembered at the memory cap under the pass
	// overload policy (window.Stats.Forgotten).
	Forgotten uint64
	// AtCap is true when a live generation needed a further stage and the memory cap refused it.
	AtCap bool
	// Generations lists the generations, newest first (index 0).
	Generations []GenerationStat
	// EventTime is true for a filter whose window follows the records' timestamps
	// (DEDUP_WINDOW_CLOCK=event): only such a filter exports the stream time and late-record
	// metrics.
	EventTime bool
	// StreamTime is an event-time filter's stream time: the highest record timestamp it has
	// seen (capped). The zero time before its first record: the stream-time gauges are then
	// omitted.
	StreamTime time.Time
	// LateRecords counts an event-time filter's records stamped before its oldest live
	// generation, since the filter was created or restored.
	LateRecords uint64
}

// partition holds the label children and lag of one partition. It is created
// once and never mutated afterwards except through atomics.
type partition struct {
	label      string
	consumed   prometheus.Counter
	produced   prometheus.Counter
	duplicates prometheus.Counter
	unkeyed    prometheus.Counter
	aborted    prometheus.Counter
	lag        atomic.Int64
	lagSet     atomic.Bool
	// heldSince is when reading the partition was last found held back by an open transaction,
	// in Unix nanoseconds by Metrics.now; 0 when it is not.
	heldSince atomic.Int64
	// progress is the partition's last Progress report; nil before the first one (or after a
	// Rebalance, which forgets it with the lag).
	progress    atomic.Pointer[Progress]
	fetchErrors prometheus.Counter
}

// Metrics records kdedup's metrics. It is safe for concurrent use by multiple
// goroutines. The zero value is not usable; build one with New.
type Metrics struct {
	now           func() time.Time
	mode          string
	unkeyedPolicy string

	consumed   *prometheus.CounterVec
	produced   *prometheus.CounterVec
	duplicates *prometheus.CounterVec
	unkeyed    *prometheus.CounterVec
	aborted    *prometheus.CounterVec
	identity   *identityMetrics

	produceErrors    prometheus.Counter
	uncertainRetries prometheus.Counter
	producerResets   reasonCounters
	commitErrors     prometheus.Counter
	assignRetries    prometheus.Counter
	connRetries      reasonCounters
	rebalances       prometheus.Counter
	assigned         prometheus.Gauge
	ready            prometheus.Gauge
	buildInfo        prometheus.Gauge

	endToEnd   *latencyHistogram
	processing *latencyHistogram

	checkpointDuration    prometheus.Histogram
	checkpointSize        prometheus.Gauge
	checkpointLastSuccess prometheus.Gauge
	checkpointFailures    reasonCounters
	units                 *unitHealth
	checkpointWritten     *prometheus.CounterVec
	restores              map[checkpoint.Outcome]prometheus.Counter
	rejected              reasonCounters
	restoreUnknown        prometheus.Counter
	restoreDuration       prometheus.Histogram
	rewarmed              prometheus.Counter
	clockSkew             prometheus.Gauge

	rebuilding          prometheus.Gauge
	rebuildRecords      prometheus.Counter
	rebuildSkipped      prometheus.Counter
	rebuildByRecordTime prometheus.Counter
	rebuildDuration     prometheus.Histogram
	rebuildFailures     prometheus.Counter
	releaseDuration     prometheus.Histogram
	releaseBudget       prometheus.Gauge

	dyn *dynamicCollector

	refusals *refusals
	audit    *audit
	inputs   inputMetrics
	losses   lossMetrics
	budget   budgetMetrics

	// parts is a copy-on-write table of partitions indexed by partition
	// number; a nil entry means not seen yet. Writers hold mu.
	parts atomic.Pointer[[]*partition]
	mu    sync.Mutex
	// farParts holds partitions outside [0, maxTablePartition). Guarded by mu.
	farParts map[int32]*partition
	// sources are the registered filter statistic sources. Guarded by mu.
	sources []func() []FilterStat
}

// New builds every kdedup metric and registers it on reg, which must not be
// nil. Unless opts.SkipRuntimeCollectors is set it also registers the Go
// runtime and process collectors, tolerating ones already registered on reg.
// New panics if a kdedup metric cannot be registered (for example because New
// was already called with the same registry), as prometheus.MustRegister does.
func New(reg prometheus.Registerer, opts Options) *Metrics {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Mode == "" {
		opts.Mode = unknown
	}
	if opts.Version == "" {
		opts.Version = unknown
	}
	if opts.UnkeyedPolicy == "" {
		opts.UnkeyedPolicy = unknown
	}
	if opts.LatePolicy == "" {
		opts.LatePolicy = unknown
	}
	m := &Metrics{now: opts.Now, mode: opts.Mode, unkeyedPolicy: opts.UnkeyedPolicy, farParts: make(map[int32]*partition)}
	durationBuckets := []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	cs := m.newRecordMetrics(opts)
	cs = append(cs, m.newCheckpointMetrics(opts, durationBuckets)...)
	m.newRebalanceMetrics(durationBuckets)
	m.releaseBudget.Set(opts.ReleaseBudget.Seconds())
	cs = append(cs, m.inputs.init(opts)...)
	cs = append(cs, m.losses.init()...)
	cs = append(cs, m.budget.init()...)
	m.dyn = newDynamicCollector(m, opts.TargetFalsePositiveRate, opts.LatePolicy)
	m.refusals = newRefusals(reg, opts.RefusalReasons)
	m.identity = newIdentityMetrics(reg, opts.UnkeyedReasons)
	m.audit = newAudit(reg, opts.DropReasons)
	cs = append(cs,
		m.rebuilding, m.rebuildRecords, m.rebuildSkipped, m.rebuildByRecordTime, m.rebuildDuration, m.rebuildFailures, m.releaseDuration, m.releaseBudget,
		m.dyn)
	for _, c := range cs {
		reg.MustRegister(c)
	}
	if !opts.SkipRuntimeCollectors {
		registerRuntime(reg)
	}
	return m
}

// counterVec, counter, gauge and histogram make the kdedup_ metrics.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help})
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help})
}

func histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets})
}

// newRecordMetrics makes the metrics of records, production, the group and the build, and
// returns them for registration.
func (m *Metrics) newRecordMetrics(opts Options) []prometheus.Collector {
	m.consumed = counterVec("records_consumed_total", "Records read from the input topic.", "partition")
	m.produced = counterVec("records_produced_total", "Records written to the output topic and acknowledged.", "partition")
	m.duplicates = counterVec("duplicates_total",
		"Records recognised as duplicates within the window (dropped or marked, see the mode label). Includes the filter's false positives.",
		"partition", "mode")
	m.unkeyed = counterVec("records_unkeyed_total",
		"Records without a deduplication key, by what DEDUP_UNKEYED did with them (policy): pass (produced unfiltered, so their duplicates pass) or drop (not produced: lost events).",
		"partition", "policy")
	m.aborted = counterVec("records_aborted_total",
		"Input records of aborted transactions skipped under KAFKA_ISOLATION_LEVEL=read_committed: neither deduplicated nor produced.", "partition")
	m.produceErrors = counter("produce_errors_total", "Failed attempts to write a batch to the output topic.")
	m.uncertainRetries = counter("produce_uncertain_retries_total",
		"Produce retries of a batch whose previous attempt may have been written (timed out, connection lost, REQUEST_TIMED_OUT). With idempotent production the broker drops the second copy; without it each one may be a duplicate in the output topic.")
	resets := counterVec("producer_resets_total",
		"Batches the brokers rejected for their idempotent producer state (reason: the broker error, such as out_of_order_sequence) and that were re-sent under a new producer id. Such a batch is written twice if an earlier attempt of it had been written.",
		"reason")
	m.producerResets = newReasonCounters(resets, opts.ProducerResetReasons)
	m.commitErrors = counter("commit_errors_total", "Failed attempts to commit consumer offsets.")
	m.assignRetries = counter("assign_retries_total",
		"Failed attempts to prepare an assigned partition's state (restore, re-warm or rebuild from the output topic); each is logged and retried, and the worker is not ready meanwhile.")
	retries := counterVec("connection_retries_total",
		"Connection failures retried after the worker had connected once that are fatal on the first connection (reason: authentication, tls, authorization), or that a broker throttling new connections caused (throttled). A failure that persists for KAFKA_REBALANCE_TIMEOUT ends the worker.",
		"reason")
	m.connRetries = newReasonCounters(retries, opts.ConnectionRetryReasons)
	m.rebalances = counter("rebalances_total", "Consumer group rebalances seen by this worker.")
	m.assigned = gauge("assigned_partitions", "Input partitions currently assigned to this worker.")
	m.ready = gauge("ready", "1 when the worker is ready to process records (state restored, partitions assigned), else 0.")
	m.buildInfo = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace:   Namespace,
		Name:        "build_info",
		Help:        "Always 1; the labels carry the kdedup version and the Go version it was built with.",
		ConstLabels: prometheus.Labels{"version": opts.Version, "goversion": runtime.Version()},
	})
	m.buildInfo.Set(1)

	m.endToEnd = newLatencyHistogram("end_to_end_latency_seconds",
		"Time from a record's Kafka timestamp to the acknowledgement of its produce to the output topic.",
		[]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600})
	m.processing = newLatencyHistogram("processing_latency_seconds",
		"Time from consuming a record to the acknowledgement of its produce to the output topic.",
		[]float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30})
	return []prometheus.Collector{
		m.consumed, m.produced, m.duplicates, m.unkeyed, m.aborted,
		m.produceErrors, m.uncertainRetries, resets, m.commitErrors, m.assignRetries, retries, m.rebalances, m.assigned, m.ready, m.buildInfo,
		m.endToEnd, m.processing,
	}
}

// newCheckpointMetrics makes the metrics of checkpoints and restores, and returns them for
// registration.
func (m *Metrics) newCheckpointMetrics(opts Options, durationBuckets []float64) []prometheus.Collector {
	m.checkpointDuration = histogram("checkpoint_duration_seconds", "Time taken to write a checkpoint successfully.", durationBuckets)
	m.checkpointSize = gauge("checkpoint_size_bytes", "Size of the last successful checkpoint: its manifest and every generation object it references, what a restore reads.")
	m.checkpointLastSuccess = gauge("checkpoint_last_success_timestamp_seconds",
		"Unix time of the last successful checkpoint (the worker's start when checkpointing is enabled and none has succeeded yet; 0 when checkpointing is disabled).")
	if opts.Checkpointing {
		m.checkpointLastSuccess.Set(unixSeconds(m.now()))
	}
	failures, failureVec := failureCounters(opts.CheckpointFailureReasons)
	m.checkpointFailures = failures
	m.units = newUnitHealth(m.now)
	m.checkpointWritten = counterVec("checkpoint_written_bytes_total",
		"Bytes sent to the checkpoint store, by the kind of store (file or s3): the generation objects and manifests of every save, failed ones included. A save writes what changed since the last checkpoint; kdedup_checkpoint_size_bytes is what a restore reads.", "store")
	if opts.CheckpointStore != "" {
		m.checkpointWritten.WithLabelValues(opts.CheckpointStore)
	}
	restores := counterVec("checkpoint_restores_total", "State restores at startup or assignment, by outcome: warm (the newest checkpoint), fallback (an older checkpoint, the newer were unusable), cold (none usable: the filter is rebuilt from the output topic, or starts empty), retained (a partition that came back kept its in-memory filter: nothing downloaded).", "outcome")
	m.restores = make(map[checkpoint.Outcome]prometheus.Counter)
	for _, o := range checkpoint.Outcomes() {
		m.restores[o] = restores.WithLabelValues(string(o))
	}
	m.restoreUnknown = restores.WithLabelValues(unknown)
	m.restoreDuration = histogram("checkpoint_restore_duration_seconds", "Time taken to restore state, whatever the outcome.", durationBuckets)
	m.rewarmed = counter("checkpoint_rewarmed_records_total", "Output records read back to re-warm the filter after a restore.")
	rejected := counterVec("checkpoint_rejected_total", "Snapshots a restore rejected (and fell back from, to an older one or a rebuild), by reason: corrupt, incompatible (another configuration), missing, unsigned or bad_signature (with CHECKPOINT_SIGNING_KEY: no signature, or not the key's), or implausible_* (intact but impossible: implausible_memory over the filter's cap, implausible_future generations after the wall clock, implausible_fill set bits that do not fit the recorded keys; the store is a trust boundary, see docs/checkpoints.md).", "reason")
	m.rejected = newReasonCounters(rejected, opts.RejectReasons)
	m.clockSkew = gauge("checkpoint_clock_skew_seconds",
		"How far the creation time of the last snapshot restored lies ahead of this worker's clock (0 when it does not): the saving replica's clock ran ahead of this one's by at least this much, so this worker keeps identities that long beyond the window.")
	return []prometheus.Collector{
		m.checkpointDuration, m.checkpointSize, m.checkpointLastSuccess, failureVec, m.units, m.checkpointWritten,
		restores, m.restoreDuration, m.rewarmed, rejected, m.clockSkew,
	}
}

// registerRuntime registers the Go and process collectors, unless reg has them already.
func registerRuntime(reg prometheus.Registerer) {
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				panic("metrics: registering runtime collector: " + err.Error())
			}
		}
	}
}

func unixSeconds(t time.Time) float64 {
	return float64(t.UnixNano()) / 1e9
}

// part returns the cached children of partition p, creating them on first use.
// It does not allocate once p has been seen.
func (m *Metrics) part(p int32) *partition {
	if p >= 0 {
		if t := m.parts.Load(); t != nil && int(p) < len(*t) {
			if pp := (*t)[p]; pp != nil {
				return pp
			}
		}
	}
	return m.slowPart(p)
}

func (m *Metrics) slowPart(p int32) *partition {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p < 0 || p >= maxTablePartition {
		if pp, ok := m.farParts[p]; ok {
			return pp
		}
		pp := m.newPartition(p)
		m.farParts[p] = pp
		return pp
	}
	var old []*partition
	if t := m.parts.Load(); t != nil {
		old = *t
		if int(p) < len(old) && old[p] != nil {
			return old[p]
		}
	}
	n := max(len(old), int(p)+1)
	table := make([]*partition, n)
	copy(table, old)
	table[p] = m.newPartition(p)
	m.parts.Store(&table)
	return table[p]
}

func (m *Metrics) newPartition(p int32) *partition {
	l := strconv.FormatInt(int64(p), 10)
	return &partition{
		label:       l,
		consumed:    m.consumed.WithLabelValues(l),
		produced:    m.produced.WithLabelValues(l),
		duplicates:  m.duplicates.WithLabelValues(l, m.mode),
		unkeyed:     m.unkeyed.WithLabelValues(l, m.unkeyedPolicy),
		aborted:     m.aborted.WithLabelValues(l),
		fetchErrors: m.inputs.fetchErrors.WithLabelValues(l),
	}
}

// eachPartition calls fn for every partition seen so far.
func (m *Metrics) eachPartition(fn func(*partition)) {
	if t := m.parts.Load(); t != nil {
		for _, pp := range *t {
			if pp != nil {
				fn(pp)
			}
		}
	}
	m.mu.Lock()
	far := make([]*partition, 0, len(m.farParts))
	for _, pp := range m.farParts {
		far = append(far, pp)
	}
	m.mu.Unlock()
	for _, pp := range far {
		fn(pp)
	}
}

// Consumed counts n records read from the input partition. Non-positive n is
// ignored. It is safe for concurrent use and does not allocate in the steady
// state.
func (m *Metrics) Consumed(partition int32, n int) {
	if n > 0 {
		m.part(partition).consumed.Add(float64(n))
	}
}

// Produced counts n records from the input partition acknowledged by the
// output topic. Non-positive n is ignored. It is safe for concurrent use and
// does not allocate in the steady state.
func (m *Metrics) Produced(partition int32, n int) {
	if n > 0 {
		m.part(partition).produced.Add(float64(n))
	}
}

// Duplicates counts n records of the input partition recognised as
// duplicates, under the mode given in Options. Non-positive n is ignored. It
// is safe for concurrent use and does not allocate in the steady state.
func (m *Metrics) Duplicates(partition int32, n int) {
	if n > 0 {
		m.part(partition).duplicates.Add(float64(n))
	}
}

// Aborted counts n records of aborted transactions skipped in the input
// partition. Non-positive n is ignored. It is safe for concurrent use and does
// not allocate in the steady state.
func (m *Metrics) Aborted(partition int32, n int) {
	if n > 0 {
		m.part(partition).aborted.Add(float64(n))
	}
}

// TransactionHeld records that reading the input partition has been held back
// for d by an open transaction (0: it is not). The gauge
// kdedup_input_transaction_held_seconds goes on growing from there until the
// next report, and is exported with the partition's lag. It is safe for
// concurrent use and does not allocate in the steady state.
func (m *Metrics) TransactionHeld(partition int32, d time.Duration) {
	var since int64
	if d > 0 {
		since = m.now().Add(-d).UnixNano()
	}
	m.part(partition).heldSince.Store(since)
}

// ProduceError counts one failed produce attempt. It is safe for concurrent use.
func (m *Metrics) ProduceError() { m.produceErrors.Inc() }

// UncertainRetry counts one produce retry of a batch whose previous attempt may
// have been written. It is safe for concurrent use.
func (m *Metrics) UncertainRetry() { m.uncertainRetries.Inc() }

// ProducerReset counts one batch re-sent under a new producer id because the
// brokers rejected its producer state, by reason (one of
// Options.ProducerResetReasons; anything else is counted as "other"). It is
// safe for concurrent use.
func (m *Metrics) ProducerReset(reason string) {
	m.producerResets.add(reason, 1)
}

// CommitError counts one failed offset commit. It is safe for concurrent use.
func (m *Metrics) CommitError() { m.commitErrors.Inc() }

// AssignRetry counts one failed attempt to prepare an assigned partition's state. It is safe for
// concurrent use.
func (m *Metrics) AssignRetry() { m.assignRetries.Inc() }

// ConnectionRetry counts one retried connection failure by reason (one of
// Options.ConnectionRetryReasons; anything else is counted as "other"). It is safe for concurrent
// use.
func (m *Metrics) ConnectionRetry(reason string) { m.connRetries.add(reason, 1) }

// ClockSkew sets how far the creation time of the snapshot just restored lies ahead of the local
// clock (0 or less: it does not). It is safe for concurrent use.
func (m *Metrics) ClockSkew(d time.Duration) { m.clockSkew.Set(max(d, 0).Seconds()) }

// Latency observes the latencies of a batch's produced records: each one's end-to-end latency
// (since its Kafka timestamp, sinceRecordTimestamps) and, once per record, the batch's
// processing latency (since it was consumed). Negative durations, from clock skew between
// producer and worker, are recorded as 0. It is safe for concurrent use, does not allocate, and
// does not keep sinceRecordTimestamps.
func (m *Metrics) Latency(sinceConsume time.Duration, sinceRecordTimestamps []time.Duration) {
	m.endToEnd.observeEach(sinceRecordTimestamps)
	m.processing.observeN(sinceConsume, len(sinceRecordTimestamps))
}

// Lag records the consumer lag, in records, of an assigned partition. A
// negative lag means unknown and hides the partition's lag series until the
// next non-negative report. Lag series are dropped by Rebalance and
// reappear on the next report. It is safe for concurrent use and does not
// allocate in the steady state.
func (m *Metrics) Lag(partition int32, lag int64) {
	pp := m.part(partition)
	if lag < 0 {
		pp.lagSet.Store(false)
		return
	}
	pp.lag.Store(lag)
	pp.lagSet.Store(true)
}

// Rebalance counts one consumer group rebalance and forgets every partition's
// lag and transaction hold, so that partitions revoked from this worker stop
// being exported. It is
// safe for concurrent use.
func (m *Metrics) Rebalance() {
	m.rebalances.Inc()
	m.eachPartition(func(pp *partition) {
		pp.lagSet.Store(false)
		pp.heldSince.Store(0)
		pp.progress.Store(nil)
	})
	m.units.rebalance()
}

// Assigned sets the number of input partitions assigned to this worker. It is
// safe for concurrent use.
func (m *Metrics) Assigned(partitions int) { m.assigned.Set(float64(partitions)) }

// SetReady sets kdedup_ready to 1 (true) or 0 (false). It is safe for
// concurrent use.
func (m *Metrics) SetReady(ready bool) {
	if ready {
		m.ready.Set(1)
	} else {
		m.ready.Set(0)
	}
}

// CheckpointSaved records a successful checkpoint of the unit of partition (-1: the global
// unit) that took duration and holds sizeBytes bytes (a skipped checkpoint, current because
// nothing changed, counts too), and sets the worker's and the unit's last-success timestamps to
// now. It is safe for concurrent use.
func (m *Metrics) CheckpointSaved(partition int32, duration time.Duration, sizeBytes int64) {
	m.checkpointDuration.Observe(max(duration, 0).Seconds())
	m.checkpointSize.Set(float64(sizeBytes))
	m.checkpointLastSuccess.Set(unixSeconds(m.now()))
	m.units.saved(partition)
}

// CheckpointFailed counts one failed checkpoint of the unit of partition, by reason (one of
// Options.CheckpointFailureReasons; anything else is counted as "other"). It is safe for
// concurrent use.
func (m *Metrics) CheckpointFailed(_ int32, reason string) {
	m.checkpointFailures.add(reason, 1)
}

// CheckpointWritten counts bytes sent to a checkpoint store of the given kind ("file", "s3"); an
// empty kind is counted as "unknown". It is safe for concurrent use.
func (m *Metrics) CheckpointWritten(store string, bytes int64) {
	if store == "" {
		store = unknown
	}
	if bytes > 0 {
		m.checkpointWritten.WithLabelValues(store).Add(float64(bytes))
	}
}

// Restored records a state restore of the unit of partition (-1: the global unit) with the given
// outcome that took duration, and seeds the unit's last checkpoint success with savedAt, when the
// restored snapshot was written (zero: none, the clock starts now unless a later success is
// known). An outcome that is not one of checkpoint.Outcomes is counted under the label value
// "unknown". It is safe for concurrent use.
func (m *Metrics) Restored(partition int32, outcome checkpoint.Outcome, duration time.Duration, savedAt time.Time) {
	c, ok := m.restores[outcome]
	if !ok {
		c = m.restoreUnknown
	}
	c.Inc()
	m.restoreDuration.Observe(max(duration, 0).Seconds())
	m.units.restored(partition, savedAt)
}

// SnapshotRejected counts a snapshot a restore rejected for reason (one of Options.RejectReasons;
// anything else is counted as "other"). It is safe for concurrent use.
func (m *Metrics) SnapshotRejected(reason string) {
	m.rejected.add(reason, 1)
}

// Rewarmed counts n output records read back to re-warm the filter after a restore.
// Non-positive n is ignored. It is safe for concurrent use.
func (m *Metrics) Rewarmed(n int) {
	if n > 0 {
		m.rewarmed.Add(float64(n))
	}
}

// newRebalanceMetrics builds the metrics of partition releases and rebuilds from the output topic.
func (m *Metrics) newRebalanceMetrics(buckets []float64) {
	m.rebuilding = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "rebuilding_partitions",
		Help: "Units (partitions, or the global filter) being rebuilt from the output topic now, because they had no usable checkpoint; the worker is not ready meanwhile."})
	m.rebuildRecords = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "rebuild_records_total",
		Help: "Output records whose identities were added to filters being rebuilt from the output topic."})
	m.rebuildSkipped = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "rebuild_skipped_records_total",
		Help: "Output records within the window that rebuilds did not read because of CHECKPOINT_REBUILD_MAX_RECORDS (the oldest); their duplicates can pass."})
	m.rebuildByRecordTime = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "rebuilds_by_record_time_total",
		Help: "Rebuilds under DEDUP_WINDOW_CLOCK=processing that found the window's output records by their own timestamps, because DEDUP_PROCESSED_HEADER is not set: records processed within the window but stamped before it (a catch-up with more lag than the window) were not read, and their duplicates can pass."})
	m.rebuildDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "rebuild_duration_seconds",
		Help: "Time taken to rebuild one filter from the output topic, successful rebuilds only.", Buckets: buckets})
	m.rebuildFailures = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "rebuild_failures_total",
		Help: "Rebuilds from the output topic that failed (they are retried); those called off because the consumer group generation ended are not counted."})
	m.releaseDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "partition_release_duration_seconds",
		Help:    "Time from the end of a consumer group generation (or shutdown) until a revoked partition's output was produced, its offsets committed and its final checkpoint saved. The worker allows KAFKA_REBALANCE_TIMEOUT minus the heartbeat interval and a margin.",
		Buckets: buckets})
	m.releaseBudget = gauge("partition_release_budget_seconds",
		"How long the worker allows the release of a revoked partition: KAFKA_REBALANCE_TIMEOUT minus KAFKA_HEARTBEAT_INTERVAL minus a margin. A release that takes longer is cut short (its final snapshot may be missing).")
}

// RebuildStarted counts one unit that started rebuilding from the output topic (the
// kdedup_rebuilding_partitions gauge goes up until RebuildDone). It is safe for concurrent use.
func (m *Metrics) RebuildStarted() { m.rebuilding.Inc() }

// RebuildRecords counts n output records added to a filter being rebuilt. Non-positive n is
// ignored. It is safe for concurrent use.
func (m *Metrics) RebuildRecords(n int) {
	if n > 0 {
		m.rebuildRecords.Add(float64(n))
	}
}

// RebuildByRecordTime counts a rebuild that selected the window's output records by their
// timestamps, without the processed-time header. It is safe for concurrent use.
func (m *Metrics) RebuildByRecordTime() { m.rebuildByRecordTime.Inc() }

// RebuildDone ends a rebuild that RebuildStarted counted, and counts the window's records it
// skipped. It observes the duration of a complete rebuild (err nil) and counts a failed one; a
// rebuild called off by its context (context.Canceled, context.DeadlineExceeded: the consumer
// group generation ended) is neither. It is safe for concurrent use.
func (m *Metrics) RebuildDone(d time.Duration, skipped int64, err error) {
	m.rebuilding.Dec()
	if skipped > 0 {
		m.rebuildSkipped.Add(float64(skipped))
	}
	switch {
	case err == nil:
		m.rebuildDuration.Observe(max(d, 0).Seconds())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
	default:
		m.rebuildFailures.Inc()
	}
}

// Released observes how long the release of one revoked partition took (consumer.Observer).
// It is safe for concurrent use.
func (m *Metrics) Released(d time.Duration) { m.releaseDuration.Observe(max(d, 0).Seconds()) }

// RegisterFilterSource adds a source of filter statistics, called on every
// scrape (so it must be cheap and safe to call from the scraping goroutine).
// Filter names must be unique across all sources, otherwise the scrape fails
// with a duplicate-series error. A nil source is ignored. It is safe for
// concurrent use.
func (m *Metrics) RegisterFilterSource(source func() []FilterStat) {
	if source == nil {
		return
	}
	m.mu.Lock()
	m.sources = append(m.sources, source)
	m.mu.Unlock()
}

func (m *Metrics) filterStats() []FilterStat {
	m.mu.Lock()
	sources := append([]func() []FilterStat(nil), m.sources...)
	m.mu.Unlock()
	var out []FilterStat
	for _, s := range sources {
		out = append(out, s()...)
	}
	return out
}
