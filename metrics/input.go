package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Progress is one input partition's progress (consumer.Progress, which this package does not
// import: internal/app converts).
type Progress struct {
	// Lag is the records between the worker's position and the end of the partition.
	Lag int64
	// LagTime is the age of the oldest record not yet handled; exported only when LagTimeKnown.
	LagTime      time.Duration
	LagTimeKnown bool
	// Lead is the records between the log start and the worker's position; negative: unknown
	// (the last known value is kept).
	Lead int64
	// LastProgress is when the worker's position last moved or reached the end.
	LastProgress time.Time
}

// inputMetrics are the counters of the input side that are not per-record: fetch errors and
// records skipped unread.
type inputMetrics struct {
	fetchErrors *prometheus.CounterVec
	skipped     reasonCounters
	reread      reasonCounters
}

// init makes the input metrics and returns them for registration.
func (in *inputMetrics) init(opts Options) []prometheus.Collector {
	in.fetchErrors = counterVec("input_fetch_errors_total",
		"Failed fetches (and offset lookups) of an input partition. The worker retries by itself; kdedup_ready goes to 0 while a partition's fetches keep failing for longer than KAFKA_FETCH_FAILING_MAX.", "partition")
	skipped := counterVec("input_skipped_records_total",
		"Input records that were never read, by reason: retention (deleted by the input topic's retention before the worker read them) or reset_to_latest (passed by KAFKA_START_FROM_LATEST after the offset fell past the end of a truncated or recreated log). They are neither deduplicated nor produced: lost events.",
		"reason")
	in.skipped = newReasonCounters(skipped, opts.SkipReasons)
	reread := counterVec("input_reread_records_total",
		"Input offsets read a second time, by reason: truncated (an unclean leader election truncated the log below the worker's position, or the offset fell past the end of the log) or recreated (the topic was deleted and created again). The offset is committed backward; re-read records whose identity the filter holds are dropped as duplicates, the records that replaced them pass.",
		"reason")
	in.reread = newReasonCounters(reread, opts.RereadReasons)
	return []prometheus.Collector{in.fetchErrors, skipped, reread}
}

// Progress records the progress of an assigned input partition (consumer.Observer, through
// internal/app): its lag, lag in seconds, lead over the log start and last progress, exported
// until the next Rebalance. It is safe for concurrent use.
func (m *Metrics) Progress(partition int32, p Progress) {
	pp := m.part(partition)
	if p.Lead < 0 {
		if old := pp.progress.Load(); old != nil {
			p.Lead = old.Lead
		}
	}
	pp.progress.Store(&p)
	m.Lag(partition, p.Lag)
}

// FetchError counts one failed fetch of the input partition. It is safe for concurrent use.
func (m *Metrics) FetchError(partition int32) { m.part(partition).fetchErrors.Inc() }

// InputSkipped counts n input records of the partition skipped unread for reason (one of
// Options.SkipReasons; anything else is counted as "other"). It is safe for concurrent use.
func (m *Metrics) InputSkipped(_ int32, reason string, n int64) {
	if n > 0 {
		m.inputs.skipped.add(reason, float64(n))
	}
}

// InputReread counts n input offsets of the partition read a second time for reason (one of
// Options.RereadReasons; anything else is counted as "other"). It is safe for concurrent use.
func (m *Metrics) InputReread(_ int32, reason string, n int64) {
	if n > 0 {
		m.inputs.reread.add(reason, float64(n))
	}
}

// progressDescs are the descriptions of the per-partition progress gauges.
type progressDescs struct {
	lagSeconds, lead, lastProgress *prometheus.Desc
}

func newProgressDescs() progressDescs {
	name := func(n string) string { return prometheus.BuildFQName(Namespace, "", n) }
	part := []string{"partition"}
	return progressDescs{
		lagSeconds: prometheus.NewDesc(name("consumer_lag_seconds"),
			"Age, by its Kafka timestamp, of the oldest input record of an assigned partition that is not yet handled (0 when the worker is at the end of the partition): consumer lag in time.", part, nil),
		lead: prometheus.NewDesc(name("consumer_lead_records"),
			"Records between the start of an assigned input partition's log and this worker's position: how many more records retention may delete before it deletes records the worker has not read (retention risk when it nears 0 while the lag is above 0).", part, nil),
		lastProgress: prometheus.NewDesc(name("consumer_last_progress_timestamp_seconds"),
			"Unix time at which this worker's position in an assigned input partition last moved, or was last found at the partition's end. It stops while the partition is stalled (blocked, failing to fetch or to write).", part, nil),
	}
}

// collect exports pp's progress gauges, if it reported any.
func (d progressDescs) collect(ch chan<- prometheus.Metric, pp *partition) {
	p := pp.progress.Load()
	if p == nil {
		return
	}
	if p.LagTimeKnown {
		ch <- prometheus.MustNewConstMetric(d.lagSeconds, prometheus.GaugeValue, p.LagTime.Seconds(), pp.label)
	}
	if p.Lead >= 0 {
		ch <- prometheus.MustNewConstMetric(d.lead, prometheus.GaugeValue, float64(p.Lead), pp.label)
	}
	ch <- prometheus.MustNewConstMetric(d.lastProgress, prometheus.GaugeValue, unixSeconds(p.LastProgress), pp.label)
}
