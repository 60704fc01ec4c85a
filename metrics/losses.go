package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// SetCounts are the counts the deduplication state (dedup.Set) keeps of records it passed
// without judging them, or judged at another time than their own.
type SetCounts struct {
	// Unassigned counts the records passed because their partition had no state (dedup.Set.Unassigned).
	Unassigned uint64
	// FutureCapped counts the event-time records stamped further ahead of the wall clock than
	// DEDUP_EVENT_TIME_MAX_AHEAD, judged at that cap (dedup.Set.Capped).
	FutureCapped uint64
}

// lossMetrics are the counters of records that can be lost or whose duplicates can pass that
// the per-record metrics do not cover.
type lossMetrics struct {
	set             atomic.Pointer[func() SetCounts]
	rewarmSkipped   prometheus.Counter
	outputTruncated prometheus.Counter
}

// init makes the loss metrics and returns them for registration.
func (l *lossMetrics) init() []prometheus.Collector {
	read := func(field func(SetCounts) uint64) func() float64 {
		return func() float64 {
			if fn := l.set.Load(); fn != nil {
				return float64(field((*fn)()))
			}
			return 0
		}
	}
	unassigned := prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: "records_unassigned_total",
		Help: "Records of a partition the deduplication state did not hold (a record for an unassigned partition): passed without being judged, so a duplicate among them passes. Any increase is a bug."},
		read(func(c SetCounts) uint64 { return c.Unassigned }))
	capped := prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: "records_future_capped_total",
		Help: "Records of an event-time filter (DEDUP_WINDOW_CLOCK=event) stamped further ahead of the wall clock than DEDUP_EVENT_TIME_MAX_AHEAD, judged at that cap instead of their own time: their copies stamped within the window of their real time may be judged against other generations."},
		read(func(c SetCounts) uint64 { return c.FutureCapped }))
	l.rewarmSkipped = counter("rewarm_skipped_records_total",
		"Output records that the output topic's retention deleted before a re-warm or a rebuild of the filter read them back: their identities are not in the filter, so their duplicates within the window pass.")
	l.outputTruncated = counter("output_truncated_records_total",
		"Output offsets that a checkpoint recorded as written but the output partition no longer had when a re-warm or rebuild read it: its log was truncated (an unclean leader election) or the topic re-created. Those records are gone from the output while their identities are in the restored filter, so a copy sent again is dropped: lost events.")
	return []prometheus.Collector{unassigned, capped, l.rewarmSkipped, l.outputTruncated}
}

// RegisterSetCounts makes kdedup_records_unassigned_total and kdedup_records_future_capped_total
// read fn at every scrape (0 until it is registered); a later call replaces fn. fn must be cheap
// and safe to call from the scraping goroutine. It is safe for concurrent use.
func (m *Metrics) RegisterSetCounts(fn func() SetCounts) {
	if fn != nil {
		m.losses.set.Store(&fn)
	}
}

// RewarmSkipped counts n output records deleted by retention before a re-warm or rebuild read
// them. Non-positive n is ignored. It is safe for concurrent use.
func (m *Metrics) RewarmSkipped(n int64) {
	if n > 0 {
		m.losses.rewarmSkipped.Add(float64(n))
	}
}

// OutputTruncated counts n output offsets that a checkpoint recorded but the output partition no
// longer had when a re-warm or rebuild read it. Non-positive n is ignored. It is safe for
// concurrent use.
func (m *Metrics) OutputTruncated(n int64) {
	if n > 0 {
		m.losses.outputTruncated.Add(float64(n))
	}
}
