package window

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestAddSharedMatchesProbe holds the shared mode's short insertion (addShared: rowTest, the
// claim, the bits ORed straight from the tag) to the whole path (testAndAddProbe: makeProbe,
// testAndAdd's lookup, claim and insert) on twin filters offered the same keys from one
// goroutine: the same answers and, at the end of every generation, the same words in stage 0 and
// its grown stages, the same fill counts and growth, and the same claim words, through rotations,
// growth past the capacity and pending sweeps. Concurrent use is checked by the package's
// concurrent tests against a sequential reference.
func TestAddSharedMatchesProbe(t *testing.T) {
	cases := []struct {
		name   string
		fpr    float64
		gens   int
		lazy   bool
		keys   int // per generation, against a capacity of 4000
		rounds int
	}{
		{"1e-3", 1e-3, 8, false, 3000, 12},
		{"1e-6-grow", 1e-6, 8, false, 9000, 10},
		{"n4-1e-2-lazy", 1e-2, 4, true, 4000, 7},
		{"n16-1e-4", 1e-4, 16, false, 2000, 20},
		{"n70-1e-3", 1e-3, 70, false, 1000, 72},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := newFakeClock()
			start := clk.Now()
			cfg := Config{Generations: c.gens, Interval: time.Minute, Capacity: 4000,
				FalsePositiveRate: c.fpr, Seed: 7, Clock: clk.Now}
			a, b := mustNew(t, cfg), mustNew(t, cfg)
			a.deferSweep, b.deferSweep = c.lazy, c.lazy
			rng := rand.New(rand.NewPCG(19, uint64(len(c.name))))
			var seen int
			for e := range c.rounds {
				a.AdvanceTo(start.Add(time.Duration(e) * time.Minute))
				b.AdvanceTo(start.Add(time.Duration(e) * time.Minute))
				for i := range c.keys {
					k := key(uint64(rng.IntN(c.rounds)), uint64(rng.IntN(c.keys*2)))
					got, want := a.TestAndAdd(k), b.testAndAddProbe(b.hash(k))
					if got != want {
						t.Fatalf("generation %d key %d: short path %v, whole path %v", e, i, got, want)
					}
					if got {
						seen++
					}
				}
				compareTwins(t, a, b)
				for g := range a.claims {
					if a.claims[g].Load() != b.claims[g].Load() {
						t.Fatalf("generation %d: claim word %d %#x and %#x", e, g, a.claims[g].Load(), b.claims[g].Load())
					}
				}
			}
			t.Logf("%d seen, %d growths", seen, a.growths.Load())
		})
	}
}
