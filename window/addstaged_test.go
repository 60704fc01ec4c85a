package window

import (
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestAddStagedMatchesProbe holds the single writer's insertion into grown stages (addStaged:
// the stages and stage 0's row tested one bit at a time, the key written straight from its stage
// hash) to the whole path (testAndAddProbe: makeProbe, lookup, insert) on twin filters: the same
// answers and, at the end, the same words in stage 0 and in every grown stage, the same fill
// counts of stage 0 and of every stage's shards, and the same growth. Auto-sized and fixed
// capacities that grow, through rotations (with the clock moving inside each generation, so that
// auto sizing projects a rate), pending sweeps, and more live stages than addStaged handles.
func TestAddStagedMatchesProbe(t *testing.T) {
	cases := []struct {
		name   string
		cfg    Config
		lazy   bool // sweeps left pending: the current slot is tagged, and addStaged does not apply
		keys   int  // per generation
		rounds int
	}{
		{"auto-1e-6", Config{Generations: 8, Auto: true, FalsePositiveRate: 1e-6}, false, 20000, 10},
		{"auto-1e-3-n4", Config{Generations: 4, Auto: true, FalsePositiveRate: 1e-3}, false, 30000, 6},
		{"auto-1e-4-lazy", Config{Generations: 4, Auto: true, FalsePositiveRate: 1e-4}, true, 10000, 6},
		{"auto-1e-6-n16", Config{Generations: 16, Auto: true, FalsePositiveRate: 1e-6}, false, 5000, 20},
		{"fixed-1e-4-grow", Config{Generations: 8, Capacity: 2000, FalsePositiveRate: 1e-4}, false, 9000, 10},
		{"fixed-1e-2-spike", Config{Generations: 4, Capacity: 1000, FalsePositiveRate: 1e-2}, false, 40000, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := newFakeClock()
			start := clk.Now()
			cfg := c.cfg
			cfg.Interval, cfg.SingleWriter, cfg.Seed, cfg.Clock = time.Minute, true, 7, clk.Now
			a, b := mustNew(t, cfg), mustNew(t, cfg)
			a.deferSweep, b.deferSweep = c.lazy, c.lazy
			rng := rand.New(rand.NewPCG(13, uint64(len(c.name))))
			var seen int
			for e := range c.rounds {
				clk.Set(start.Add(time.Duration(e) * time.Minute))
				a.AdvanceTo(clk.Now())
				b.AdvanceTo(clk.Now())
				seen += offerTwins(t, a, b, rng, e, c.rounds, c.keys, func(i int) {
					if i%1000 == 999 {
						clk.Set(start.Add(time.Duration(e)*time.Minute + time.Duration(i)*time.Minute/time.Duration(c.keys)))
					}
				})
				compareTwins(t, a, b)
			}
			t.Logf("%d seen, %d growths", seen, a.growths.Load())
			if a.growths.Load() == 0 {
				t.Fatal("no generation grew: the short path was not exercised")
			}
		})
	}
}

// offerTwins offers keys random keys of rounds namespaces, in generation e, to twin filters: to a
// through TestAndAdd (its short paths) and to b through the whole path (testAndAddProbe). It
// fails the test at the first answer that differs and returns how many keys were seen. It calls
// before(i), unless nil, before key i.
func offerTwins(t *testing.T, a, b *Filter, rng *rand.Rand, e, rounds, keys int, before func(i int)) (seen int) {
	t.Helper()
	for i := range keys {
		if before != nil {
			before(i)
		}
		k := key(uint64(rng.IntN(rounds)), uint64(rng.IntN(keys*2)))
		got, want := a.TestAndAdd(k), b.testAndAddProbe(b.hash(k))
		if got != want {
			t.Fatalf("generation %d key %d: short path %v, whole path %v", e, i, got, want)
		}
		if got {
			seen++
		}
	}
	return seen
}

// compareTwins fails the test if a and b differ in stage 0's words, its fill counters, or the
// grown stages of any live generation: their layouts, words and shard counts.
func compareTwins(t *testing.T, a, b *Filter) {
	t.Helper()
	if !slices.Equal(a.words, b.words) {
		t.Fatal("stage 0's words differ")
	}
	for i := range a.fill {
		if a.fill[i].n != b.fill[i].n || a.fill[i].full != b.fill[i].full {
			t.Fatalf("fill counter %d: %+v and %+v", i, a.fill[i], b.fill[i])
		}
	}
	if a.growths.Load() != b.growths.Load() {
		t.Fatalf("growths %d and %d", a.growths.Load(), b.growths.Load())
	}
	ga, gb := a.grown.Load(), b.grown.Load()
	if (ga == nil) != (gb == nil) {
		t.Fatalf("grown: %v and %v", ga != nil, gb != nil)
	}
	if ga == nil {
		return
	}
	if len(ga.gens) != len(gb.gens) {
		t.Fatalf("%d and %d grown generations", len(ga.gens), len(gb.gens))
	}
	for i, gg := range ga.gens {
		sa, sb := *gg.stages.Load(), *gb.gens[i].stages.Load()
		if gg.epoch != gb.gens[i].epoch || len(sa) != len(sb) {
			t.Fatalf("grown generation %d: epoch %d with %d stages, epoch %d with %d", i, gg.epoch, len(sa), gb.gens[i].epoch, len(sb))
		}
		for j := range sa {
			if sa[j].groups != sb[j].groups || !slices.Equal(sa[j].words, sb[j].words) {
				t.Fatalf("generation %d stage %d: %d and %d groups, or words differ", gg.epoch, j+1, sa[j].groups, sb[j].groups)
			}
			for s := range sa[j].count {
				if sa[j].count[s].n != sb[j].count[s].n {
					t.Fatalf("generation %d stage %d shard %d: %d and %d keys", gg.epoch, j+1, s, sa[j].count[s].n, sb[j].count[s].n)
				}
			}
		}
	}
}

// TestStagePutAtMatchesPut holds putAt (the bits written straight from the stage hash, by the
// single writer and in shared mode) to the mask of the key's probe (stageProbeFrom, then put),
// and hasAt (one bit at a time) to has, on stages of the layouts of 1e-2 to 1e-9.
func TestStagePutAtMatchesPut(t *testing.T) {
	for _, target := range []float64{1e-2, 1e-3, 1e-4, 1e-6, 1e-9} {
		lp := bestLayout(target)
		a := &stage{blocks: newBlocks(97, 1, lp, true)}
		b := &stage{blocks: newBlocks(97, 1, lp, true)}
		c := &stage{blocks: newBlocks(97, 1, lp, true)}
		rng := rand.New(rand.NewPCG(17, uint64(lp.k)))
		for i := range 20000 {
			x := rng.Uint64()
			var sp probe
			stageProbeFrom(&sp, b, x)
			if got, want := a.hasAt(x), b.has(&sp, 0); got != want {
				t.Fatalf("target %g key %d: hasAt %v, has %v", target, i, got, want)
			}
			a.putAt(x, true)
			b.put(&sp, 0, false)
			c.putAt(x, false)
			if !a.hasAt(x) {
				t.Fatalf("target %g key %d: not found after putAt", target, i)
			}
		}
		if !slices.Equal(a.words, b.words) || !slices.Equal(c.words, b.words) {
			t.Fatalf("target %g (k %d, %d sectors): words differ", target, lp.k, lp.sectors)
		}
	}
}

// stageProbeFrom fills sp with the position in st of the key whose stage hash is x, the bits in
// its word of sector 0 only: a grown stage's probe as it was built before putAt and hasAt wrote
// and tested the key without one, for TestStagePutAtMatchesPut.
func stageProbeFrom(sp *probe, st *stage, x uint64) {
	g, _ := bits.Mul64(x, st.groups)
	sp.group = g
	sp.base = g * st.groupWords
	sp.tag = x&tagMask | 1
	sp.rest = false
	st.fillFirst(sp, patternOutput(sp.tag, 0)) // has and put complete it when they need to
}
