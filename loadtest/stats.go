package loadtest

import (
	"math"
	"slices"
	"time"
)

// PoissonUpper returns the smallest k with P(X <= k) >= q for X ~ Poisson(lambda): the number of
// false-positive losses that a filter with expected lambda losses exceeds with probability at most
// 1-q. It returns 0 for lambda <= 0 and panics unless 0 < q < 1.
func PoissonUpper(lambda, q float64) int {
	if !(q > 0 && q < 1) {
		panic("loadtest: PoissonUpper needs 0 < q < 1")
	}
	if !(lambda > 0) {
		return 0
	}
	limit := int(lambda+20*math.Sqrt(lambda)) + 50
	logL := math.Log(lambda)
	cdf := 0.0
	for k := 0; k < limit; k++ {
		lg, _ := math.Lgamma(float64(k + 1))
		cdf += math.Exp(-lambda + float64(k)*logL - lg)
		if cdf >= q {
			return k
		}
	}
	return limit
}

// percentile returns the q-quantile (0..1) of sorted values by the nearest-rank method, or 0 for
// no values.
func percentile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// LatencySummary is a latency distribution in milliseconds.
type LatencySummary struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

func summarize(lat []int64) LatencySummary {
	if len(lat) == 0 {
		return LatencySummary{}
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += float64(v)
	}
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	return LatencySummary{
		Count: len(s),
		Mean:  sum / float64(len(s)) / 1e6,
		P50:   ms(percentile(s, 0.50)),
		P90:   ms(percentile(s, 0.90)),
		P99:   ms(percentile(s, 0.99)),
		P999:  ms(percentile(s, 0.999)),
		Max:   ms(s[len(s)-1]),
	}
}

// niceWidth returns a bucket width of about span/100 from a 1-2-5 series, at least 100ms.
func niceWidth(span time.Duration) time.Duration {
	target := span / 100
	steps := []time.Duration{
		100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
		time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second,
		30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute,
	}
	for _, s := range steps {
		if s >= target {
			return s
		}
	}
	return steps[len(steps)-1]
}

// LatencyParts splits the end-to-end latency of every first delivery (Report.Latency) at the
// broker's acknowledgement of the generator's produce request, so that a run tells the
// loadtest's own sending from the rest: for each record, Input + Rest is its end-to-end latency.
type LatencyParts struct {
	// Input is from the record's creation to the broker's acknowledgement of the generator's
	// produce request: the generator's linger and produce request, before the pipeline.
	Input LatencySummary `json:"input"`
	// Rest is from that acknowledgement to the verifier's reading of the record: the pipeline
	// (its fetch, work and produce, from an upper bound of when its input was appended) and the
	// verifier's fetch of the output.
	Rest LatencySummary `json:"rest"`
}

// latencyParts splits the latency of each record's first unmarked delivery in obs (see
// LatencyParts); ackedAt is, by seq, when the generator's produce request was acknowledged (0:
// never). It returns nil when no delivered record was acknowledged.
func latencyParts(sent []sentRec, ackedAt []int64, obs [][]Obs) *LatencyParts {
	first := make([]int64, len(sent))
	for i := range first {
		first[i] = -1
	}
	for _, part := range obs {
		for _, o := range part {
			if o.Seq < 0 || o.Seq >= int64(len(sent)) || o.Marked || sent[o.Seq].kind == KindMarker {
				continue
			}
			if f := &first[o.Seq]; *f < 0 || o.At < *f {
				*f = o.At
			}
		}
	}
	var input, rest []int64
	for s, at := range first {
		if at < 0 || s >= len(ackedAt) || ackedAt[s] == 0 {
			continue
		}
		input = append(input, ackedAt[s]-sent[s].at)
		rest = append(rest, at-ackedAt[s])
	}
	if len(input) == 0 {
		return nil
	}
	return &LatencyParts{Input: summarize(input), Rest: summarize(rest)}
}
