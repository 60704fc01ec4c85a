package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// globalUnit is the partition label of the global filter's checkpoints (DEDUP_SCOPE=global).
const globalUnit = "global"

// unitHealth is the checkpoint health of each unit (partition, or the global filter) this worker
// holds: when its last checkpoint succeeded, seeded at its restore from the time the restored
// snapshot was written, so that a unit whose saves keep failing ages across restarts and
// rebalances. It is a prometheus.Collector and safe for concurrent use.
type unitHealth struct {
	now  func() time.Time
	desc *prometheus.Desc

	mu   sync.Mutex
	last map[string]time.Time // by unit label, kept while the unit is not held (a retained filter comes back)
	held map[string]bool
}

func newUnitHealth(now func() time.Time) *unitHealth {
	return &unitHealth{
		now: now, last: map[string]time.Time{}, held: map[string]bool{},
		desc: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "checkpoint_partition_last_success_timestamp_seconds"),
			"Unix time of the last successful checkpoint of each partition this worker holds (partition \"global\" under DEDUP_SCOPE=global). Seeded when the partition is restored: from the time the restored snapshot was written, or the restore's time when there was none. A partition whose saves keep failing ages across restarts and rebalances.",
			[]string{"partition"}, nil),
	}
}

// unitLabel returns the partition label of the unit of partition (-1: the global unit).
func unitLabel(partition int32) string {
	if partition < 0 {
		return globalUnit
	}
	return strconv.Itoa(int(partition))
}

// saved records a successful checkpoint of the unit now.
func (u *unitHealth) saved(partition int32) {
	l := unitLabel(partition)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.last[l], u.held[l] = u.now(), true
}

// restored marks the unit held and seeds its last success with savedAt (zero: unknown) unless a
// later success is known; a unit with neither starts its clock now.
func (u *unitHealth) restored(partition int32, savedAt time.Time) {
	l := unitLabel(partition)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.held[l] = true
	if cur, ok := u.last[l]; ok && !savedAt.After(cur) {
		return
	}
	if savedAt.IsZero() {
		savedAt = u.now()
	}
	u.last[l] = savedAt
}

// rebalance forgets which partitions are held: they are reported again once restored. The global
// unit stays held.
func (u *unitHealth) rebalance() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for l := range u.held {
		if l != globalUnit {
			delete(u.held, l)
		}
	}
}

// Describe implements prometheus.Collector.
func (u *unitHealth) Describe(ch chan<- *prometheus.Desc) { ch <- u.desc }

// Collect implements prometheus.Collector.
func (u *unitHealth) Collect(ch chan<- prometheus.Metric) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for l := range u.held {
		ch <- prometheus.MustNewConstMetric(u.desc, prometheus.GaugeValue, unixSeconds(u.last[l]), l)
	}
}

// failureCounters returns the children of kdedup_checkpoint_failures_total for reasons and
// "other", and the vector to register.
func failureCounters(reasons []string) (reasonCounters, *prometheus.CounterVec) {
	vec := counterVec("checkpoint_failures_total",
		"Failed attempts to write a checkpoint, by reason: cancelled (shutdown or the end of a generation came first), output_offsets (the output topic's end offsets could not be read), seal (records in the snapshot were not acknowledged by the output in time), store (the checkpoint store failed).",
		"reason")
	return newReasonCounters(vec, reasons), vec
}
