package window

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// stagedBenchWarm and stagedBenchKeys are the keys a filter of BenchmarkStagedBatch takes before
// it is measured and while it is: 100k + 100k distinct keys keep its current generation in the
// workload's state (stage 0 of 1024 keys, stage 1 of 8192, stage 2 sized for 295k) throughout.
const stagedBenchWarm, stagedBenchKeys = 100_000, 100_000

// stagedBenchFilter makes an auto-sized filter of the worker's default window (8 × 15 min, 1e-6)
// grown as a partition's filter of the six-partition workload is: its first generation took a
// burst of keys from 0.3 s after it was made.
func stagedBenchFilter(b testing.TB, rng *rand.Rand) *Filter {
	clock := newFakeClock()
	f := mustNew(b, Config{Generations: 8, Interval: 15 * time.Minute, FalsePositiveRate: 1e-6,
		Clock: clock.Now, SingleWriter: true, Auto: true})
	clock.Set(f.CurrentGenerationStart().Add(300 * time.Millisecond))
	for range stagedBenchWarm {
		f.testAndAddHash(rng.Uint64())
	}
	return f
}

// BenchmarkStagedBatch offers keys to six auto-sized single-writer filters grown as the
// workload's partitions are (stagedBenchFilter), in batches of 64 per filter in turn, the way
// dedup.Set.JudgeBatch does: each key's PrefetchHash ahead keys before its TestAndAddHash (ahead=0:
// none); 20% of the keys repeat one the filter took. A filter that took stagedBenchKeys keys
// is replaced outside the timer. One goroutine: the filters are single-writer, and a worker's
// partition loop judges its batches alone; cpu-ns/op is the process's CPU per key.
func BenchmarkStagedBatch(b *testing.B) {
	const partitions, batch = 6, 64
	for _, ahead := range []int{0, 4, 8} {
		b.Run(fmt.Sprintf("ahead=%d", ahead), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(21, 22))
			fs := make([]*Filter, partitions)
			taken := make([][]uint64, partitions)
			for p := range fs {
				fs[p] = stagedBenchFilter(b, rng)
			}
			hs := make([]uint64, batch)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			for done, p := 0, 0; done < b.N; p = (p + 1) % partitions {
				if len(taken[p]) >= stagedBenchKeys {
					b.StopTimer()
					fs[p], taken[p] = stagedBenchFilter(b, rng), taken[p][:0]
					b.StartTimer()
				}
				f := fs[p]
				for i := range hs {
					if n := len(taken[p]); n > 0 && rng.IntN(5) == 0 {
						hs[i] = taken[p][rng.IntN(n)]
					} else {
						hs[i] = rng.Uint64()
						taken[p] = append(taken[p], hs[i])
					}
				}
				for i := range min(ahead, batch) {
					f.PrefetchHash(KeyHash(hs[i]))
				}
				for i, h := range hs {
					if j := i + ahead; ahead > 0 && j < batch {
						f.PrefetchHash(KeyHash(hs[j]))
					}
					f.testAndAddHash(h)
				}
				done += batch
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			st := fs[0].Stats()
			if st.Stages < 1 {
				b.Fatalf("stages beyond stage 1: %d, want the workload's stage 2", st.Stages)
			}
		})
	}
}
