package window

import (
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkAuto compares an auto-sized filter with one whose capacity was set by hand to the
// load (1.25 × it, as auto sizing holds), both at steady state: N=8 generations at 1e-6, each
// having taken 150k keys (the per-partition load of the six-partition workload of
// docs/performance.md). op=miss tests absent keys (RunParallel), op=add offers fresh keys to the
// single writer's TestAndAddHash. mode=auto-cold is an auto-sized filter right after a cold
// start: its first generation took the 133k distinct keys of one partition of that workload at
// once, 0.3 s after it was made (the worker's start-up), and op=miss tests absent keys there.
// Every result also reports cpu-ns/op, the process's CPU time per operation, which being
// descheduled on a shared machine does not inflate.
func BenchmarkAuto(b *testing.B) {
	const n, load, p = 8, 150_000, 1e-6
	for _, mode := range []string{"fixed", "auto", "auto-cold"} {
		clock := newFakeClock()
		cfg := Config{Generations: n, Interval: time.Minute, FalsePositiveRate: p, Clock: clock.Now, SingleWriter: true}
		if mode == "fixed" {
			cfg.Capacity = load * 5 / 4
		} else {
			cfg.Auto = true
		}
		rng := rand.New(rand.NewPCG(5, 6))
		var f *Filter
		if mode == "auto-cold" {
			cfg.Interval = 15 * time.Minute
			f = mustNew(b, cfg)
			clock.Set(f.CurrentGenerationStart().Add(300 * time.Millisecond))
			for range 133_000 {
				f.testAndAddHash(rng.Uint64())
			}
		} else {
			f = mustNew(b, cfg)
			for range n + 1 {
				rotate(f, clock)
				addSteady(f, clock, rng, load)
			}
			rotate(f, clock)
		}
		b.Run("mode="+mode+"/op=miss", func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewPCG(rand.Uint64(), 7))
				for pb.Next() {
					f.testHash(r.Uint64())
				}
			})
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
		if mode == "auto-cold" {
			continue // fresh keys would grow the burst's generation further
		}
		b.Run("mode="+mode+"/op=add", func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU()
			for i := 0; i < b.N; i++ {
				f.testAndAddHash(rng.Uint64())
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
