package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// audit holds the metrics of the audit topic (consumer.Observer's Diverted and
// AuditProduceError).
type audit struct {
	records reasonCounters // read-only after newAudit
	errors  prometheus.Counter
}

// newAudit builds the audit topic's metrics and registers them on reg; reasons are the known
// values of the reason label (Options.DropReasons).
func newAudit(reg prometheus.Registerer, reasons []string) *audit {
	a := &audit{}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "audit_records_total",
		Help: "Records the worker dropped and wrote to the audit topic KAFKA_DUPLICATES_TOPIC instead, by reason: duplicate, unkeyed (DEDUP_UNKEYED_POLICY=drop), late (DEDUP_LATE_RECORDS=drop), overload (seen by a filter stopped by DEDUP_MEMORY_LIMIT under DEDUP_OVERLOAD_POLICY=drop). Counted once acknowledged."},
		[]string{"reason"})
	a.records = newReasonCounters(vec, reasons)
	a.errors = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "audit_produce_errors_total",
		Help: "Writes to the audit topic KAFKA_DUPLICATES_TOPIC that failed: refused records (dead-lettered, or the partition blocks) or a write cut short. The input is not committed past records whose audit write failed."})
	reg.MustRegister(vec, a.errors)
	return a
}

// Diverted counts n records of the input partition written to the audit topic for reason (one
// of Options.DropReasons; anything else is counted as "other"). It is safe for concurrent use.
func (m *Metrics) Diverted(_ int32, reason string, n int) {
	m.audit.records.add(reason, float64(n))
}

// AuditProduceError counts one failed write to the audit topic. It is safe for concurrent use.
func (m *Metrics) AuditProduceError() { m.audit.errors.Inc() }
