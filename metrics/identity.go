package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// identityMetrics are the metrics of identity extraction: unkeyed records by reason, and the
// partitions held at a record whose identity cannot be extracted for now.
type identityMetrics struct {
	byReason reasonCounters // fixed at New: Options.UnkeyedReasons and "other"
	held     prometheus.Gauge
	heldN    atomic.Int64
}

// newIdentityMetrics registers the identity metrics on reg.
func newIdentityMetrics(reg prometheus.Registerer, reasons []string) *identityMetrics {
	im := &identityMetrics{}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "records_unkeyed_by_reason_total",
		Help: "Records without a deduplication identity, by reason: missing (key, value, header or field absent, null or empty), malformed (the value cannot be read), not_wire_format (no Confluent magic byte and schema id), unknown_schema (the schema registry does not know the id), not_in_schema (the path is not in the record's schema). DEDUP_UNKEYED_POLICY applies to them."},
		[]string{"reason"})
	im.byReason = newReasonCounters(vec, reasons)
	im.held = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "identity_held_partitions",
		Help: "Input partitions held at a record whose identity cannot be extracted for now (the schema registry is down, times out or answers 5xx): nothing after the record is processed until it can be."})
	reg.MustRegister(vec, im.held)
	return im
}

// Unkeyed counts n records of the input partition that had no deduplication identity, for reason
// (one of Options.UnkeyedReasons; anything else is counted as "other"), in
// kdedup_records_unkeyed_total and kdedup_records_unkeyed_by_reason_total. Non-positive n is
// ignored. It is safe for concurrent use and does not allocate in the steady state.
func (m *Metrics) Unkeyed(partition int32, reason string, n int) {
	if n <= 0 {
		return
	}
	m.part(partition).unkeyed.Add(float64(n))
	m.identity.byReason.add(reason, float64(n))
}

// IdentityHeld counts the input partition in kdedup_identity_held_partitions while held is true
// (calls come in pairs, true then false). It is safe for concurrent use.
func (m *Metrics) IdentityHeld(_ int32, held bool) {
	d := int64(-1)
	if held {
		d = 1
	}
	m.identity.held.Set(float64(m.identity.heldN.Add(d)))
}
