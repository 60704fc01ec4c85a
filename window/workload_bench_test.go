package window

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"
)

// BenchmarkWorkload runs the filter side of the six-partition workload of the auto-sizing issue:
// 1M records whose JSON id is the identity, 20% of them duplicates of an earlier record, spread
// over six partitions, one single-writer filter each, with the worker's default window (8 × 15
// min, 1e-6), all within the first generation as in a run from process start. Per configuration
// (workloadConfigs) it reports the CPU per record of the six filter goroutines, the minor page
// faults per record, the filters' allocated bytes and the growth of the process's resident
// memory (the Go heap returned first). mode=auto-prefetch is auto with each key prefetched
// (Prefetch) workloadAhead keys before its TestAndAdd, as the worker's partition loop does.
func BenchmarkWorkload(b *testing.B) {
	const records, partitions = 1_000_000, 6
	keys := workloadKeys(records, partitions)
	modes := workloadConfigs()
	modes["auto-prefetch"] = modes["auto"]
	for name, cfg := range modes {
		ahead := 0
		if name == "auto-prefetch" {
			ahead = workloadAhead
		}
		b.Run("mode="+name, func(b *testing.B) {
			for range b.N {
				runtime.GC()
				debug.FreeOSMemory()
				rss0, cpu0, flt0 := residentSetBytes(), processCPU(), minorFaults()
				fs := workloadRun(b, cfg, keys, ahead)
				cpu, flt := processCPU()-cpu0, minorFaults()-flt0
				var alloc uint64
				for _, f := range fs {
					alloc += f.Stats().TotalBytes
				}
				debug.FreeOSMemory()
				rss := residentSetBytes()
				b.ReportMetric(float64(cpu.Nanoseconds())/records, "cpu-ns/record")
				b.ReportMetric(float64(flt)/records, "faults/record")
				b.ReportMetric(float64(alloc)/(1<<20), "filter-MiB")
				b.ReportMetric(float64(int64(rss)-int64(rss0))/(1<<20), "rss-MiB")
				runtime.KeepAlive(fs)
			}
		})
	}
}

// workloadKeys returns the identities of each partition's records in order: 20% repeat an
// earlier identity of the partition.
func workloadKeys(records, partitions int) [][][]byte {
	rng := rand.New(rand.NewPCG(11, 12))
	out := make([][][]byte, partitions)
	for i := range records {
		p := i % partitions
		if n := len(out[p]); n > 0 && rng.Float64() < 0.2 {
			out[p] = append(out[p], out[p][rng.IntN(n)])
			continue
		}
		out[p] = append(out[p], []byte(fmt.Sprintf("evt-%012d-%08x", i, rng.Uint32())))
	}
	return out
}

// workloadAhead is how many records ahead of its TestAndAdd the worker prefetches a key.
const workloadAhead = 4

// workloadRun makes one filter per partition and offers each its records from a goroutine of
// its own, as the worker's partition loops do; with ahead > 0 each key is prefetched ahead
// records before its TestAndAdd.
func workloadRun(b *testing.B, cfg Config, keys [][][]byte, ahead int) []*Filter {
	fs := make([]*Filter, len(keys))
	var wg sync.WaitGroup
	for p := range keys {
		f, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		fs[p] = f
		wg.Add(1)
		go func() {
			defer wg.Done()
			ks := keys[p]
			for i := range min(ahead, len(ks)) {
				f.Prefetch(ks[i])
			}
			for i, k := range ks {
				if ahead > 0 && i+ahead < len(ks) {
					f.Prefetch(ks[i+ahead])
				}
				f.TestAndAdd(k)
			}
		}()
	}
	wg.Wait()
	return fs
}

// workloadDefault is the worker's default window with a fixed capacity of 1M, main's default.
func workloadDefault() Config {
	return Config{Generations: 8, Interval: 15 * time.Minute, Capacity: 1_000_000, FalsePositiveRate: 1e-6, SingleWriter: true}
}
