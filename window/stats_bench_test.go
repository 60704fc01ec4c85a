package window

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkStats measures Stats of one partition's filter of the six-partition workload
// (BenchmarkWorkload): auto-sized, 8 × 15 min at 1e-6, 166k keys in its first generation (stage 0,
// stage 1 and a stage 2 of about 300k keys), which a worker's /metrics scrape reads per partition.
func BenchmarkStats(b *testing.B) {
	cfg := workloadDefault()
	cfg.Capacity, cfg.Auto = 0, true
	f := mustNew(b, cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 166_000 {
		f.testAndAddHash(rng.Uint64())
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		f.Stats()
	}
}
