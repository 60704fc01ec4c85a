package window

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFillRestPattern holds fillRest to the pattern of the package documentation, computed bit by
// bit: bit i of a key (FirstBits ≤ i < K) takes the 16 bits i%4 of pattern output i/4, and sets
// the data bit they pick in the word their low 3 bits pick of the sector the bit falls in. Keys
// in snapshots were set by this pattern, so it must never change.
func TestFillRestPattern(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, target := range []float64{1e-2, 1e-3, 1e-4, 1e-6, 1e-7, 1e-9, 1e-12} {
		lp := bestLayout(target)
		b := newBlocks(1, 1, lp, true)
		s := Sizing{K: lp.k, Sectors: lp.sectors, FirstBits: lp.first}
		var sec [maxK]int // the sector of each bit
		for i, n := 0, 0; n < lp.sectors; n++ {
			for range s.sectorBits(n) {
				sec[i] = n
				i++
			}
		}
		for range 2000 {
			var p probe
			p.tag = rng.Uint64()&tagMask | 1
			for i := range p.mask {
				p.mask[i] = rng.Uint64() // fillRest must clear what it does not set
			}
			b.fillRest(&p)
			var want [MaxSectors * sectorWords]uint64
			for i := lp.first; i < lp.k; i++ {
				z := patternOutput(p.tag, i/4) >> (16 * (i % 4))
				want[sec[i]*sectorWords+int(z%sectorWords)] |= dataBit(z)
			}
			got, w := p.mask[sectorWords:lp.sectors*sectorWords], want[sectorWords:lp.sectors*sectorWords]
			if !p.rest || !slices.Equal(got, w) {
				t.Fatalf("target %g (k %d, first %d, %d sectors), tag %#x: fillRest %x, want %x", target, lp.k, lp.first, lp.sectors, p.tag, got, w)
			}
		}
	}
}
