package window

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestRest4MatchesRest holds the short insertions' writes and test for the layouts of rest4
// (putRest4, orRest4, restMissing4, rowHits8) to the general ones (putRest, orRest, restMissing,
// rowHits): the same words after the same keys, the same answers on words of every density, in
// the layouts the sizing picks at several rates and generation counts. It also checks that the
// layouts of 1e-3 at eight generations and 1e-2 at four are of rest4, so that the short paths take
// them.
func TestRest4MatchesRest(t *testing.T) {
	cases := []struct {
		fpr   float64
		gens  int
		rest4 bool // the layout must be of rest4
	}{
		{1e-3, 8, true}, {1e-2, 4, true}, {1e-4, 8, false}, {1e-6, 8, false}, {1e-3, 16, false}, {1e-9, 8, false},
	}
	for _, c := range cases {
		s, err := Size(Config{Generations: c.gens, Interval: time.Minute, Capacity: 4000, FalsePositiveRate: c.fpr})
		if err != nil {
			t.Fatal(err)
		}
		lp := layoutParams{sectors: s.Sectors, k: s.K, first: s.FirstBits}
		t.Run(fmt.Sprintf("%g/n=%d/S=%d/K=%d/F=%d", c.fpr, c.gens, s.Sectors, s.K, s.FirstBits), func(t *testing.T) {
			const groups, slots = 4, 8
			a, b := newBlocks(groups, slots, lp, true), newBlocks(groups, slots, lp, true)
			if c.rest4 && !a.rest4 {
				t.Fatalf("ks %v: not of rest4", a.ks[:a.sectors])
			}
			if !a.rest4 {
				return // the short paths do not take this layout
			}
			rng := rand.New(rand.NewPCG(uint64(c.gens), uint64(s.K)))
			for i := range 3000 {
				g, sl, tag := rng.Uint64N(groups), rng.IntN(slots), rng.Uint64()&tagMask|1
				base := g * a.groupWords
				if i%2 == 0 {
					a.putRest(base, sl, tag)
					b.putRest4(base, sl, tag)
				} else {
					a.orRest(base, sl, tag)
					b.orRest4(base, sl, tag)
				}
				if !slices.Equal(a.words, b.words) {
					t.Fatalf("key %d (group %d, slot %d, tag %#x): the words differ", i, g, sl, tag)
				}
			}
			for i := range 200_000 {
				if i%20_000 == 0 { // densities from empty to nearly full
					keep := i / 20_000
					for w := range a.words {
						x := rng.Uint64()
						for range keep {
							x |= rng.Uint64()
						}
						a.words[w] = x &^ tagBit
					}
				}
				g, sl, tag := rng.Uint64N(groups), rng.IntN(slots), rng.Uint64()&tagMask|1
				base := g * a.groupWords
				if got, want := a.restMissing4(base, sl, tag), a.restMissing(base, sl, tag); got != want {
					t.Fatalf("case %d: restMissing4 %v, restMissing %v", i, got, want)
				}
				row := (*[sectorWords]uint64)(a.words[base+uint64(i%sectorWords)*slots:])
				m := firstBits4(patternOutput(tag, 0))
				if got, want := rowHits8(row, ^m), rowHits(row[:], m); got != want {
					t.Fatalf("case %d: rowHits8 %#x, rowHits %#x", i, got, want)
				}
			}
		})
	}
}
