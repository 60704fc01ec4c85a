package metrics

import (
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// latencyHistogram is a Prometheus histogram of durations that takes a batch's observations in
// one call: it sorts them into buckets of its own first, then adds those under one lock, where a
// prometheus.Histogram takes three atomic additions and a compare-and-swap for every
// observation. A worker observes every record it produces, so per record that was two
// histograms' worth of atomics; per batch it is one lock. It exports a plain histogram, as
// prometheus.NewHistogram does: cumulative bucket counts, the sum in seconds and the count, all
// of one moment. It is safe for concurrent use; the zero value is not ready, use
// newLatencyHistogram.
type latencyHistogram struct {
	desc   *prometheus.Desc
	bounds []float64       // the buckets' upper bounds in seconds, ascending
	limits []time.Duration // bounds as durations: an observation d goes into the first bucket with d <= limit

	mu     sync.Mutex
	counts []uint64 // counts[i]: observations in bucket i alone; counts[len(bounds)]: above the last bound
	sum    float64  // of the observations, in nanoseconds: a float, as a year-old timestamp times a million records overflows an int64
}

// maxLatencyBuckets is the most buckets a latencyHistogram has, so that a batch is sorted into
// counts on the stack.
const maxLatencyBuckets = 32

// newLatencyHistogram returns the histogram kdedup_<name> with the given help and ascending bucket
// upper bounds in seconds (at most maxLatencyBuckets-1 of them); it panics on others, as
// prometheus.NewHistogram does on bad buckets.
func newLatencyHistogram(name, help string, bounds []float64) *latencyHistogram {
	if len(bounds) == 0 || len(bounds) >= maxLatencyBuckets {
		panic("metrics: " + name + ": bad number of latency buckets")
	}
	h := &latencyHistogram{
		desc:   prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, nil, nil),
		bounds: bounds, limits: make([]time.Duration, len(bounds)), counts: make([]uint64, len(bounds)+1),
	}
	for i, b := range bounds {
		if i > 0 && b <= bounds[i-1] {
			panic("metrics: " + name + ": latency buckets not ascending")
		}
		h.limits[i] = time.Duration(math.Round(b * float64(time.Second)))
	}
	return h
}

// bucket returns the bucket of d, looking from guess (the bucket of the observation before, as
// the records of a batch mostly share one) before it searches.
func (h *latencyHistogram) bucket(d time.Duration, guess int) int {
	n := len(h.limits)
	if guess < n && d <= h.limits[guess] && (guess == 0 || d > h.limits[guess-1]) {
		return guess
	}
	if guess == n && d > h.limits[n-1] {
		return n
	}
	for i, l := range h.limits {
		if d <= l {
			return i
		}
	}
	return n
}

// observeN observes d n times; a negative d counts as 0.
func (h *latencyHistogram) observeN(d time.Duration, n int) {
	if n <= 0 {
		return
	}
	d = max(d, 0)
	i := h.bucket(d, 0)
	h.mu.Lock()
	h.counts[i] += uint64(n)
	h.sum += float64(d) * float64(n)
	h.mu.Unlock()
}

// observeEach observes every duration of ds once; negative ones count as 0.
func (h *latencyHistogram) observeEach(ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	var counts [maxLatencyBuckets]uint64
	var sum float64
	guess := 0
	for _, d := range ds {
		d = max(d, 0)
		guess = h.bucket(d, guess)
		counts[guess]++
		sum += float64(d)
	}
	h.mu.Lock()
	for i := range h.counts {
		h.counts[i] += counts[i]
	}
	h.sum += sum
	h.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (h *latencyHistogram) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

// Collect implements prometheus.Collector: the histogram as it is at this moment.
func (h *latencyHistogram) Collect(ch chan<- prometheus.Metric) {
	buckets := make(map[float64]uint64, len(h.bounds))
	h.mu.Lock()
	var count uint64
	for i, b := range h.bounds {
		count += h.counts[i]
		buckets[b] = count
	}
	count += h.counts[len(h.bounds)]
	sum := h.sum / float64(time.Second)
	h.mu.Unlock()
	ch <- prometheus.MustNewConstHistogram(h.desc, count, sum, buckets)
}
