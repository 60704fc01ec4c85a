package window

import (
	"fmt"
	"testing"
)

// BenchmarkPattern measures the bit pattern of a key (fillPattern: its first bits and the rest)
// in the layouts of a few per-generation targets: the work an insertion does per stage it writes,
// and a lookup per generation whose first bits all match. cpu-ns/op is the process's CPU time per
// operation, which a loaded machine changes less than the wall clock.
func BenchmarkPattern(b *testing.B) {
	for _, target := range []float64{1e-4, 1e-7, 1e-9} {
		lp := bestLayout(target)
		bl := newBlocks(1, 1, lp, true)
		b.Run(fmt.Sprintf("target=%g/k=%d", target, lp.k), func(b *testing.B) {
			b.ReportAllocs()
			var p probe
			var s uint64
			cpu0 := processCPU()
			for i := range b.N {
				p.tag = uint64(i)*0x9e3779b97f4a7c15&tagMask | 1
				bl.fillPattern(&p)
				s += p.mask[p.w0] ^ p.mask[sectorWords+1]
			}
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			sinkInt.Add(int64(s))
		})
	}
}
