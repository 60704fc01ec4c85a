package metrics

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

var testLatencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// histogramOf returns what c (one histogram) exports.
func histogramOf(t *testing.T, c prometheus.Collector) *dto.Histogram {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram()
}

// TestLatencyHistogram checks a latencyHistogram against prometheus.NewHistogram, the sequential
// reference, given the same observations one by one: batches of durations around the bucket
// bounds, exactly on them, negative and past the last bound, and durations repeated n times.
func TestLatencyHistogram(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	near := func() time.Duration {
		b := testLatencyBuckets[rng.IntN(len(testLatencyBuckets))]
		return time.Duration(math.Round(b*1e9)) + time.Duration(rng.IntN(3)-1)
	}
	cases := []struct {
		name string
		next func() time.Duration
	}{
		{"on and around bounds", near},
		{"spread", func() time.Duration { return time.Duration(rng.Int64N(int64(20 * time.Second))) }},
		{"negative and above", func() time.Duration {
			return []time.Duration{-time.Second, 0, 11 * time.Second, time.Hour}[rng.IntN(4)]
		}},
		{"one value", func() time.Duration { return 3 * time.Millisecond }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ref := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x", Help: "x", Buckets: testLatencyBuckets})
			h := newLatencyHistogram("x", "x", testLatencyBuckets)
			for range 50 {
				ds := make([]time.Duration, rng.IntN(300))
				for i := range ds {
					ds[i] = tc.next()
					ref.Observe(max(ds[i], 0).Seconds())
				}
				h.observeEach(ds)
				d, n := tc.next(), rng.IntN(5)
				for range n {
					ref.Observe(max(d, 0).Seconds())
				}
				h.observeN(d, n)
			}
			got, want := histogramOf(t, h), histogramOf(t, ref)
			if got.GetSampleCount() != want.GetSampleCount() || math.Abs(got.GetSampleSum()-want.GetSampleSum()) > 1e-9*math.Max(1, want.GetSampleSum()) {
				t.Errorf("count %d sum %v, want %d %v", got.GetSampleCount(), got.GetSampleSum(), want.GetSampleCount(), want.GetSampleSum())
			}
			for i, b := range want.GetBucket() {
				g := got.GetBucket()[i]
				if g.GetUpperBound() != b.GetUpperBound() || g.GetCumulativeCount() != b.GetCumulativeCount() {
					t.Errorf("bucket le=%v: %d, want le=%v: %d", g.GetUpperBound(), g.GetCumulativeCount(), b.GetUpperBound(), b.GetCumulativeCount())
				}
			}
		})
	}
}

// BenchmarkLatency measures observing the latencies of a batch of 1000 produced records whose
// timestamps lie within a few milliseconds: per=record is how the worker observed them before,
// two prometheus.Histogram observations per record; per=batch is Metrics.Latency, one call per
// batch. ns/op is per record. Run both in the same run:
//
//	go test -run '^$' -bench Latency -count 6 ./metrics | benchstat -col /per -
func BenchmarkLatency(b *testing.B) {
	ds := make([]time.Duration, 1000)
	for i := range ds {
		ds[i] = 3*time.Millisecond + time.Duration(i)*time.Microsecond
	}
	b.Run("per=record", func(b *testing.B) {
		e2e := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "a", Help: "a", Buckets: testLatencyBuckets})
		proc := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "b", Help: "b", Buckets: testLatencyBuckets})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				e2e.Observe(ds[i%len(ds)].Seconds())
				proc.Observe((2 * time.Millisecond).Seconds())
			}
		})
	})
	b.Run("per=batch", func(b *testing.B) {
		m, _ := newTest(b, Options{SkipRuntimeCollectors: true})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				if i%len(ds) == len(ds)-1 {
					m.Latency(2*time.Millisecond, ds)
				}
			}
		})
	})
}
