package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Route holds the metrics of the routed scope's first stage, the routers (one per input topic):
// the records routed, how long the route topic took to acknowledge them, each assigned input
// partition's lag, its failed fetches and whether it is blocked at a refused record. The second
// stage is an ordinary worker and reports through Metrics. It is safe for concurrent use.
type Route struct {
	routed      *prometheus.CounterVec
	latency     *latencyHistogram
	lag         *prometheus.GaugeVec
	fetchErrors *prometheus.CounterVec // topic, partition
	blocked     *prometheus.GaugeVec   // topic, partition, reason

	mu      sync.Mutex // orders the blocked series' sets and deletes
	reasons map[string]bool
}

// NewRoute registers the router metrics on reg. refusalReasons are the known values of the
// reason label of kdedup_route_partition_blocked (Options.RefusalReasons); any other is "other".
func NewRoute(reg prometheus.Registerer, refusalReasons []string) *Route {
	r := &Route{
		reasons: make(map[string]bool, len(refusalReasons)),
		fetchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "route_fetch_errors_total",
			Help: "Failed fetches (and offset lookups) of a router's input partition (DEDUP_SCOPE=routed), by input topic and partition. The router retries by itself; kdedup_ready goes to 0 while a partition's fetches keep failing for longer than KAFKA_FETCH_FAILING_MAX. The second stage's are kdedup_input_fetch_errors_total, its input being the route topic."},
			[]string{"topic", "partition"}),
		blocked: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "route_partition_blocked",
			Help: "1 for a router's input partition (DEDUP_SCOPE=routed) that stopped at a record the route topic refuses for good, or at input the router refused to decode (reason as in kdedup_dead_letters_total), that no dead-letter topic took: nothing after it is routed. Absent while no router partition is blocked. The second stage's are kdedup_partition_blocked."},
			[]string{"topic", "partition", "reason"}),
		routed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "route_records_total",
			Help: "Input records the routers produced to the route topic (DEDUP_SCOPE=routed) and the route topic acknowledged, by input topic."},
			[]string{"topic"}),
		latency: newLatencyHistogram("route_produce_latency_seconds",
			"Time from an input batch's consumption to the route topic's acknowledgement of its records (DEDUP_SCOPE=routed), observed per record.",
			[]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "route_lag_records",
			Help: "Records between a router's position and the end of an assigned input partition (DEDUP_SCOPE=routed): the first stage's consumer lag. The second stage's is kdedup_consumer_lag_records, its input being the route topic."},
			[]string{"topic", "partition"}),
	}
	for _, reason := range refusalReasons {
		r.reasons[reason] = true
	}
	reg.MustRegister(r.routed, r.latency, r.lag, r.fetchErrors, r.blocked)
	return r
}

// Routed counts n records of input topic acknowledged by the route topic.
func (r *Route) Routed(topic string, n int) { r.routed.WithLabelValues(topic).Add(float64(n)) }

// Latency observes n routed records acknowledged d after their batch was consumed.
func (r *Route) Latency(d time.Duration, n int) { r.latency.observeN(d, n) }

// Lag sets the lag of an assigned partition of input topic.
func (r *Route) Lag(topic string, partition int32, lag int64) {
	r.lag.WithLabelValues(topic, strconv.Itoa(int(partition))).Set(float64(lag))
}

// Unassigned drops the lag of every partition of topic: a router calls it when its partitions
// change, so a partition that moved to another replica is not reported here any longer.
func (r *Route) Unassigned(topic string) { r.lag.DeletePartialMatch(prometheus.Labels{"topic": topic}) }

// FetchError counts one failed fetch (or offset lookup) of a partition of input topic.
func (r *Route) FetchError(topic string, partition int32) {
	r.fetchErrors.WithLabelValues(topic, strconv.Itoa(int(partition))).Inc()
}

// PartitionBlocked sets kdedup_route_partition_blocked of a partition of input topic and reason to
// 1 while blocked, and removes the series when it no longer is.
func (r *Route) PartitionBlocked(topic string, partition int32, reason string, blocked bool) {
	if !r.reasons[reason] {
		reason = resetOther
	}
	labels := []string{topic, strconv.Itoa(int(partition)), reason}
	r.mu.Lock()
	defer r.mu.Unlock()
	if blocked {
		r.blocked.WithLabelValues(labels...).Set(1)
	} else {
		r.blocked.DeleteLabelValues(labels...)
	}
}
