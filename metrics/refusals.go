package metrics

import (
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// refusals holds the metrics of records the output refuses (consumer.Observer's DeadLetter and
// PartitionBlocked).
type refusals struct {
	deadLetters map[string]prometheus.Counter // by reason, "other" included
	blocked     *prometheus.GaugeVec          // partition, reason

	mu      sync.Mutex
	reasons map[string]bool // the known reasons
}

// newRefusals builds the metrics of refused records and registers them on reg; reasons are the
// known values of their reason label (Options.RefusalReasons).
func newRefusals(reg prometheus.Registerer, reasons []string) *refusals {
	r := &refusals{deadLetters: make(map[string]prometheus.Counter), reasons: make(map[string]bool)}
	dl := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "dead_letters_total",
		Help: "Records that the output (or duplicates) topic refused for good (reason: message_too_large, record_list_too_large, invalid_record, invalid_timestamp), and input the worker refused to decode (input_too_large, input_too_many_headers, input_corrupt), written to KAFKA_DEAD_LETTER_TOPIC instead (refused input: its coordinates and error only)."},
		[]string{"reason"})
	for _, reason := range append(slices.Clone(reasons), resetOther) {
		r.deadLetters[reason] = dl.WithLabelValues(reason)
		r.reasons[reason] = true
	}
	r.blocked = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "partition_blocked",
		Help: "1 for an input partition that stopped at a record the output refuses for good, or at input the worker refused to decode (reason as in kdedup_dead_letters_total), that no dead-letter topic took: everything before it was written and committed, nothing after it is processed. Absent while no partition is blocked."},
		[]string{"partition", "reason"})
	reg.MustRegister(dl, r.blocked)
	return r
}

// reason returns reason if it is known, else "other", so that labels stay bounded.
func (r *refusals) reason(reason string) string {
	if r.reasons[reason] {
		return reason
	}
	return resetOther
}

// DeadLetter counts one record of the input partition written to the dead-letter topic because
// the output refused it for reason (one of Options.RefusalReasons; anything else is counted as
// "other"). It is safe for concurrent use.
func (m *Metrics) DeadLetter(_ int32, reason string) {
	m.refusals.deadLetters[m.refusals.reason(reason)].Inc()
}

// PartitionBlocked sets kdedup_partition_blocked of the input partition and reason to 1 while
// blocked, and removes the series when it no longer is. It is safe for concurrent use.
func (m *Metrics) PartitionBlocked(partition int32, reason string, blocked bool) {
	r := m.refusals
	labels := []string{strconv.FormatInt(int64(partition), 10), r.reason(reason)}
	r.mu.Lock()
	defer r.mu.Unlock()
	if blocked {
		r.blocked.WithLabelValues(labels...).Set(1)
	} else {
		r.blocked.DeleteLabelValues(labels...)
	}
}
