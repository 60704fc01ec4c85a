package window

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestRowTestMatchesLookup holds Test's short path (rowTest, which tests stage 0's row and a
// matching slot's further bits one at a time) to the whole lookup (makeProbe, then contains) on
// the same keys: keys that were added, keys that were not, with every slot live, with slots not
// yet used, and after a jump in time that expired every generation but the current one (whose
// slots keep their words but are not live).
func TestRowTestMatchesLookup(t *testing.T) {
	const interval = time.Minute
	cases := []struct {
		name   string
		fpr    float64
		gens   int
		epochs []int // generations the filter is advanced to, in order; keys are added in each
	}{
		{"full-1e-3", 1e-3, 8, []int{1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{"partial-1e-3", 1e-3, 8, []int{1, 2}},
		{"jump-1e-3", 1e-3, 8, []int{1, 2, 3, 4, 5, 6, 7, 30}},
		{"full-1e-6", 1e-6, 8, []int{1, 2, 3, 4, 5, 6, 7, 8}},
		{"n4-1e-2", 1e-2, 4, []int{1, 2, 3, 4, 5}},
		{"n16-1e-3", 1e-3, 16, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := newFakeClock()
			start := clk.Now()
			f := mustNew(t, Config{Generations: c.gens, Interval: interval, Capacity: 4000,
				FalsePositiveRate: c.fpr, SingleWriter: true, Clock: clk.Now})
			rng := rand.New(rand.NewPCG(3, uint64(len(c.name))))
			var added []uint64
			add := func() {
				for range 4000 {
					added = append(added, rng.Uint64())
					f.TestAndAdd(key(1, added[len(added)-1]))
				}
			}
			add()
			for _, e := range c.epochs {
				f.AdvanceTo(start.Add(time.Duration(e) * interval))
				add()
			}
			v := f.view.Load()
			if v.curTagged || f.grown.Load() != nil {
				t.Fatalf("the short path does not apply: tagged %v, grown %v", v.curTagged, f.grown.Load() != nil)
			}
			var seen, differ int
			for i := range 400_000 {
				h := f.hash(key(2, uint64(i)))
				if i%2 == 1 { // a key that was added, maybe to an expired generation
					h = f.hash(key(1, added[i%len(added)]))
				}
				var p probe
				f.makeProbe(&p, h, v, false, false)
				want := f.contains(v, &p)
				if got := f.rowTest(v, h); got != want {
					differ++
				}
				if want {
					seen++
				}
			}
			if differ != 0 {
				t.Fatalf("rowTest differs from the whole lookup on %d of 400000 keys", differ)
			}
			t.Logf("%d of 400000 keys seen", seen)
		})
	}
}

// TestRowTestFindsAddedKeys checks that Test's short path finds every key of the live
// generations.
func TestRowTestFindsAddedKeys(t *testing.T) {
	clk := newFakeClock()
	start := clk.Now()
	f := mustNew(t, Config{Generations: 8, Interval: time.Minute, Capacity: 5000,
		FalsePositiveRate: 1e-4, Clock: clk.Now})
	for e := range 8 {
		f.AdvanceTo(start.Add(time.Duration(e) * time.Minute))
		for i := range 5000 {
			f.TestAndAdd(key(uint64(e), uint64(i)))
		}
	}
	for e := range 8 {
		for i := range 5000 {
			if !f.Test(key(uint64(e), uint64(i))) {
				t.Fatalf("generation %d key %d not found", e, i)
			}
		}
	}
}

// TestFirstBits4MatchesDataBit holds firstBits4, which computes two chunks per multiplication, to
// dataBit of each of the four chunks, on random outputs and on the chunks' extremes.
func TestFirstBits4MatchesDataBit(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	zs := []uint64{0, ^uint64(0), 0xfff8fff8fff8fff8, 0x0007000700070007, 0x8000800080008000}
	for range 1_000_000 {
		zs = append(zs, rng.Uint64())
	}
	for _, z := range zs {
		want := dataBit(z) | dataBit(z>>16) | dataBit(z>>32) | dataBit(z>>48)
		if got := firstBits4(z); got != want {
			t.Fatalf("z0 %#x: firstBits4 %#x, dataBit of each chunk %#x", z, got, want)
		}
		if got := firstMask(z, z, 4); got != want {
			t.Fatalf("z0 %#x: firstMask %#x, want %#x", z, got, want)
		}
	}
}

// TestAddRowMatchesProbe holds the stage-0 short insertions to the whole path (testAndAddProbe:
// makeProbe, lookup, insert, and in shared mode testAndAdd's claim) on twin filters offered the
// same keys from one goroutine: the single writer's addRow (rowTest, then the bits written
// straight from the tag) and the shared mode's addShared (rowTest, the claim, the bits ORed
// straight from the tag). The same answers and, at the end of every generation, the same words in
// stage 0 and its grown stages, the same fill counts and growth, and in shared mode the same claim
// words, through rotations, growth past the capacity, pending sweeps and more than rowSlots
// slots. Concurrent use is checked by the package's concurrent tests against a sequential
// reference.
func TestAddRowMatchesProbe(t *testing.T) {
	cases := []struct {
		name   string
		fpr    float64
		gens   int
		lazy   bool // sweeps left pending: the current slot is tagged, and the short paths do not apply
		keys   int  // per generation, against a capacity of 4000
		rounds int
	}{
		{"1e-3", 1e-3, 8, false, 3000, 12},
		{"1e-6-grow", 1e-6, 8, false, 9000, 10},
		{"n4-1e-2-lazy", 1e-2, 4, true, 4000, 7},
		{"n16-1e-4", 1e-4, 16, false, 2000, 20},
		{"n70-1e-3", 1e-3, 70, false, 1000, 72},
	}
	for _, c := range cases {
		for _, single := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/single=%v", c.name, single), func(t *testing.T) {
				clk := newFakeClock()
				start := clk.Now()
				cfg := Config{Generations: c.gens, Interval: time.Minute, Capacity: 4000,
					FalsePositiveRate: c.fpr, SingleWriter: single, Seed: 7, Clock: clk.Now}
				a, b := mustNew(t, cfg), mustNew(t, cfg)
				a.deferSweep, b.deferSweep = c.lazy, c.lazy
				rng := rand.New(rand.NewPCG(9, uint64(len(c.name))))
				var seen int
				for e := range c.rounds {
					a.AdvanceTo(start.Add(time.Duration(e) * time.Minute))
					b.AdvanceTo(start.Add(time.Duration(e) * time.Minute))
					seen += offerTwins(t, a, b, rng, e, c.rounds, c.keys, nil)
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
}

// TestFirstMaskMatchesDataBit holds firstMask to its definition, the OR of dataBit of the first n
// 16-bit chunks of the pattern stream of the tag, for n = 1 … 12.
func TestFirstMaskMatchesDataBit(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 100_000 {
		tag := rng.Uint64()&tagMask | 1
		z0 := patternOutput(tag, 0)
		for n := 1; n <= 12; n++ {
			var want uint64
			for i := range n {
				want |= dataBit(patternOutput(tag, i>>2) >> (16 * (i & 3)))
			}
			if got := firstMask(tag, z0, n); got != want {
				t.Fatalf("tag %#x, n %d: firstMask %#x, want %#x", tag, n, got, want)
			}
		}
	}
}

// TestLineHasMatchesRowHits holds lineHas, and rowTest's copy of it, to rowHits on random rows and
// masks of one to five data bits, with words that have every bit of the mask planted in some.
func TestLineHasMatchesRowHits(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var row [sectorWords]uint64
	for i := range 200_000 {
		var m uint64
		for range 1 + rng.IntN(5) {
			m |= 1 << rng.IntN(wordBits)
		}
		for w := range row {
			row[w] = rng.Uint64() & rng.Uint64() // about a quarter of the bits, tag bits included
			if rng.IntN(16) == 0 {
				row[w] |= m
			}
		}
		if got, want := lineHas(&row, m), rowHits(row[:], m) != 0; got != want {
			t.Fatalf("case %d, mask %#x, row %#x: lineHas %v, rowHits %v", i, m, row, got, want)
		}
	}
}
