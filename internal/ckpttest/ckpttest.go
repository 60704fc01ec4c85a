// Package ckpttest holds what the tests and benchmarks of checkpoint, checkpoint/snapshot and
// dedup share: deterministic filter words and the best times of benchmark contenders run back to
// back. It imports nothing of kdedup, so that the tests of any package can use it.
package ckpttest

import (
	"testing"
	"time"
)

// Words returns n deterministic pseudo-random words (splitmix64 from seed).
func Words(n uint64, seed uint64) []uint64 {
	w := make([]uint64, n)
	x := seed
	for i := range w {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		w[i] = z ^ (z >> 31)
	}
	return w
}

// Ratio runs every contender of fns once per iteration of b (rotating the order) and reports
// each one's best throughput for size bytes and the best-time ratio of subject against every
// baseline (subject-x-vs-baseline; 1.0 = as fast as the baseline). Comparing best times of
// contenders run back to back keeps the ratio meaningful on a noisy shared machine.
func Ratio(b *testing.B, size int64, fns map[string]func(), subject string, baselines ...string) {
	names := append([]string{subject}, baselines...)
	for _, n := range names { // warm up: page cache, page faults
		fns[n]()
	}
	b.ReportAllocs()
	best := BestTimes(b, names, fns)
	for _, n := range names {
		b.ReportMetric(float64(size)/1e6/best[n].Seconds(), n+"-MB/s")
	}
	for _, n := range baselines {
		b.ReportMetric(float64(best[subject])/float64(best[n]), subject+"-x-vs-"+n)
	}
}

// BestTimes runs fns in every iteration of b, in the order of names rotated by one each time,
// and returns each one's best time.
func BestTimes(b *testing.B, names []string, fns map[string]func()) map[string]time.Duration {
	best := map[string]time.Duration{}
	i := 0
	for b.Loop() {
		for j := range names {
			n := names[(i+j)%len(names)]
			start := time.Now()
			fns[n]()
			if d := time.Since(start); best[n] == 0 || d < best[n] {
				best[n] = d
			}
		}
		i++
	}
	return best
}
