package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Route holds the metrics of the routed scope's first stage, the routers (one per input topic):
// the records routed, how long the route topic took to acknowledge them, and each assigned input
// partition's lag. The second stage is an ordinary worker and reports through Metrics. It is safe
// for concurrent use.
type Route struct {
	routed  *prometheus.CounterVec
	latency prometheus.Histogram
	lag     *prometheus.GaugeVec
}

// NewRoute registers the router metrics on reg.
func NewRoute(reg prometheus.Registerer) *Route {
	r := &Route{
		routed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "route_records_total",
			Help: "Input records the routers produced to the route topic (DEDUP_SCOPE=routed) and the route topic acknowledged, by input topic."},
			[]string{"topic"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "route_produce_latency_seconds",
			Help:    "Time from an input batch's consumption to the route topic's acknowledgement of its records (DEDUP_SCOPE=routed), observed per record.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: "route_lag_records",
			Help: "Records between a router's position and the end of an assigned input partition (DEDUP_SCOPE=routed): the first stage's consumer lag. The second stage's is kdedup_consumer_lag_records, its input being the route topic."},
			[]string{"topic", "partition"}),
	}
	reg.MustRegister(r.routed, r.latency, r.lag)
	return r
}

// Routed counts n records of input topic acknowledged by the route topic.
func (r *Route) Routed(topic string, n int) { r.routed.WithLabelValues(topic).Add(float64(n)) }

// Latency observes one routed record acknowledged d after its batch was consumed.
func (r *Route) Latency(d time.Duration) { r.latency.Observe(d.Seconds()) }

// Lag sets the lag of an assigned partition of input topic.
func (r *Route) Lag(topic string, partition int32, lag int64) {
	r.lag.WithLabelValues(topic, strconv.Itoa(int(partition))).Set(float64(lag))
}

// Unassigned drops the lag of every partition of topic: a router calls it when its partitions
// change, so a partition that moved to another replica is not reported here any longer.
func (r *Route) Unassigned(topic string) { r.lag.DeletePartialMatch(prometheus.Labels{"topic": topic}) }
