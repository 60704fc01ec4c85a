package window

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkGenerationIO times the export of a filter's current generation and the restore of a
// filter from its generations, for a filter at kdedup's default sizing (8 × 1M keys at 1e-6)
// that is nearly empty (2,500 keys, a partition of a quiet topic) and one at its capacity. A
// checkpoint exports the current generation of each partition that took records, so the sparse
// case is what a round of a 96-partition topic costs per partition.
func BenchmarkGenerationIO(b *testing.B) {
	for _, keys := range []int{2500, 1_000_000} {
		cfg := Config{Generations: 8, Interval: time.Hour, Capacity: 1_000_000, FalsePositiveRate: 1e-6}
		f, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		for i := range keys {
			f.TestAndAdd(fmt.Appendf(nil, "key-%d", i))
		}
		meta, gens := exportAll(b, f)
		cur := uint64(0)
		for _, e := range meta.SlotEpochs {
			cur = max(cur, uint64(max(e, 0)))
		}
		b.Run(fmt.Sprintf("keys=%d/op=export", keys), func(b *testing.B) {
			b.ReportAllocs()
			words := 0
			for b.Loop() {
				err := f.SnapshotGenerations(func(x *Export) error {
					return x.Generation(cur, func(w []uint64) error { words += len(w); return nil })
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(words / b.N * 8))
		})
		b.Run(fmt.Sprintf("keys=%d/op=restore", keys), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := restoreFromGens(cfg, meta, gens); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
