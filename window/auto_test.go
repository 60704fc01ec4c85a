package window

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/tier"
)

// addSteady adds load fresh keys to the current generation at an even rate over its interval,
// moving the clock along (so that auto sizing can project the rate), and returns those the
// filter took as new (a false positive is not added, and expires with the key it matched).
func addSteady(f *Filter, clock *fakeClock, rng *rand.Rand, load uint64) []uint64 {
	start := f.CurrentGenerationStart()
	iv := f.Config().Interval
	keys := make([]uint64, 0, load)
	for i := range load {
		if i%256 == 0 {
			clock.Set(start.Add(time.Duration(float64(iv) * float64(i) / float64(load))))
		}
		if k := rng.Uint64(); !f.testAndAddHash(k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// rotate moves the clock to the start of the next generation and rotates the filter there.
func rotate(f *Filter, clock *fakeClock) {
	clock.Set(f.CurrentGenerationStart().Add(f.Config().Interval))
	f.AdvanceTo(clock.Now())
}

// optimalBytes returns the memory of an optimal Bloom filter of keys keys at rate p.
func optimalBytes(keys uint64, p float64) float64 {
	return float64(keys) * 1.44 * math.Log2(1/p) / 8
}

// TestAutoStartsSmall checks that an auto-sized filter with no history takes a few KiB.
func TestAutoStartsSmall(t *testing.T) {
	f := mustNew(t, Config{Generations: 8, Interval: time.Minute, Auto: true, FalsePositiveRate: 1e-6})
	if got := f.Stats().TotalBytes; got > 64<<10 {
		t.Fatalf("new auto filter takes %d bytes, want ≤ 64 KiB", got)
	}
	if f.Config().Capacity != AutoCapacity {
		t.Fatalf("capacity %d, want AutoCapacity", f.Config().Capacity)
	}
}

// TestAutoFollowsLoad runs a load ramp (low, 20× low, low again, one window each and one more)
// through an auto-sized filter and checks, against a sequential reference (the keys of the live
// generations), that no key of the window is missed, that its memory is within 3× an optimal
// Bloom filter of the window's keys once the load has been steady for a window, and that the
// memory of the high load is returned after the load falls.
func TestAutoFollowsLoad(t *testing.T) {
	const n, low, p = 4, 4000, 1e-4
	clock := newFakeClock()
	f := mustNew(t, Config{Generations: n, Interval: time.Minute, Auto: true, FalsePositiveRate: p, Clock: clock.Now})
	rng := rand.New(rand.NewPCG(1, 2))
	var window [][]uint64
	bytesAt := func(load uint64) (ratio float64, total uint64) {
		for range n + 1 {
			rotate(f, clock)
			window = append(window, addSteady(f, clock, rng, load))
			if len(window) > n {
				window = window[1:]
			}
		}
		for g, keys := range window {
			for _, k := range keys {
				if !f.testHash(k) {
					t.Fatalf("key of generation %d of the window missed", g)
				}
			}
		}
		total = f.Stats().TotalBytes
		return float64(total) / optimalBytes(uint64(n)*load, p), total
	}
	lowRatio, lowBytes := bytesAt(low)
	highRatio, highBytes := bytesAt(20 * low)
	backRatio, backBytes := bytesAt(low)
	t.Logf("memory vs optimal: low %.2f× (%d B), high %.2f× (%d B), low again %.2f× (%d B)",
		lowRatio, lowBytes, highRatio, highBytes, backRatio, backBytes)
	if lowRatio > 4 || highRatio > 3 || backRatio > 4 {
		t.Errorf("memory vs optimal low %.2f×, high %.2f×, low again %.2f×; want ≤ 4×, 3×, 4×", lowRatio, highRatio, backRatio)
	}
	if float64(backBytes) > 1.25*float64(lowBytes) {
		t.Errorf("after the load fell the filter holds %d bytes, %d at the low load before", backBytes, lowBytes)
	}
}

// TestAutoKeepsTarget measures the false-positive rate of auto-sized filters whose generations
// took a steady load, a load that rose 20× at once, and a burst at the start of the interval
// with no history: within 1.5× the target, as TestGrowthKeepsTarget.
func TestAutoKeepsTarget(t *testing.T) {
	expected, rates := 200.0, []float64{1e-3, 1e-4}
	if testing.Short() || raceEnabled {
		expected, rates = 100, rates[:1]
	}
	loads := map[string][]uint64{"steady": {20_000, 20_000}, "spike": {2_000, 40_000}, "burst": {60_000}}
	for _, p := range rates {
		for name, load := range loads {
			t.Run(fmt.Sprintf("%s/%s", fprName(p), name), func(t *testing.T) {
				t.Parallel()
				clock := newFakeClock()
				f := mustNew(t, Config{Generations: len(load), Interval: time.Minute, Auto: true, FalsePositiveRate: p, Clock: clock.Now})
				rng := rand.New(rand.NewPCG(uint64(len(name)), math.Float64bits(p)))
				for i, l := range load {
					if i > 0 {
						rotate(f, clock)
					}
					if name == "burst" {
						for range l {
							f.testAndAddHash(rng.Uint64())
						}
						continue
					}
					addSteady(f, clock, rng, l)
				}
				fp, probes := 0, int(expected/p)
				for range probes {
					if f.testHash(rng.Uint64()) {
						fp++
					}
				}
				if rate := float64(fp) / float64(probes); rate > 1.5*p {
					t.Fatalf("false-positive rate %.3g, target %g (stats %+v)", rate, p, f.Stats().EstimatedFPR)
				}
			})
		}
	}
}

// TestAutoSnapshot restores an auto-sized filter whose generations have stages of different
// sizes, from a snapshot and from its generations, and checks that the copy answers as the
// original and sizes its next generation from the same history.
func TestAutoSnapshot(t *testing.T) {
	clock := newFakeClock()
	cfg := Config{Generations: 3, Interval: time.Minute, Auto: true, FalsePositiveRate: 1e-4, Clock: clock.Now}
	f := mustNew(t, cfg)
	rng := rand.New(rand.NewPCG(3, 4))
	var keys []uint64
	for i, l := range []uint64{3000, 30000, 8000} {
		if i > 0 {
			rotate(f, clock)
		}
		keys = append(keys, addSteady(f, clock, rng, l)...)
	}
	var buf bytes.Buffer
	m, _, err := f.WriteSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	g, err := Restore(cfg, m, &buf)
	if err != nil {
		t.Fatal(err)
	}
	gm, gens := exportAll(t, f)
	h, err := restoreFromGens(cfg, gm, gens)
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*Filter{"snapshot": g, "generations": h} {
		for _, k := range keys {
			if !r.testHash(k) {
				t.Fatalf("filter restored from its %s misses a key", name)
			}
		}
		fc, fp := f.ObservedLoad()
		rc, rp := r.ObservedLoad()
		if fc != rc || fp != rp {
			t.Fatalf("observed load %d/%d, restored from its %s %d/%d", fc, fp, name, rc, rp)
		}
		if f.Stats().TotalBytes != r.Stats().TotalBytes {
			t.Fatalf("filter restored from its %s takes %d bytes, original %d", name, r.Stats().TotalBytes, f.Stats().TotalBytes)
		}
	}
	// The copies size their next generation as the original does.
	for _, r := range []*Filter{f, g, h} {
		rotate(r, clock)
	}
	if a, b := f.nextStageLayout(f.grownGen(f.view.Load().epoch), 1), g.nextStageLayout(g.grownGen(g.view.Load().epoch), 1); a.groups != b.groups {
		t.Fatalf("next stage 1: %d groups, restored %d", a.groups, b.groups)
	}
	fixed := cfg
	fixed.Auto, fixed.Capacity = false, AutoCapacity
	if _, err := Restore(fixed, m, bytes.NewReader(nil)); err == nil {
		t.Fatal("a snapshot of an auto-sized filter restored into a fixed capacity")
	}
}

// TestAutoEventTimeLate adds late keys, stamped in an older generation that grew, to an
// auto-sized event-time filter, in both write modes: they go to that generation's newest stage,
// are counted in its observed load, and are seen afterwards.
func TestAutoEventTimeLate(t *testing.T) {
	for _, single := range []bool{false, true} {
		clock := newFakeClock()
		clock.Set(EventTimeOrigin.Add(10 * time.Minute))
		f := mustNew(t, Config{Generations: 3, Interval: time.Minute, Auto: true, FalsePositiveRate: 1e-3,
			Clock: clock.Now, SingleWriter: single})
		then := clock.Now()
		addKeys(f, 41, 5_000)
		f.AdvanceEventTo(then.Add(time.Minute))
		_, before := f.ObservedLoad()
		for i := range uint64(3_000) {
			if _, late := f.TestAndAddAt(key(42, i), then); late {
				t.Fatalf("single=%v: key stamped in a live generation reported late", single)
			}
		}
		if _, after := f.ObservedLoad(); after < before+2_900 {
			t.Errorf("single=%v: the older generation's load went from %d to %d after 3000 late keys", single, before, after)
		}
		for i := range uint64(3_000) {
			if !f.Test(key(42, i)) || !f.Test(key(41, i)) {
				t.Fatalf("single=%v: key %d not seen", single, i)
			}
		}
	}
}

// residentSetBytes returns the process's resident memory from /proc/self/statm, or 0 where there
// is none.
func residentSetBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, rss uint64
	if _, err := fmt.Sscan(string(b), &size, &rss); err != nil {
		return 0
	}
	return rss * uint64(os.Getpagesize())
}

// rampPhase feeds every filter load keys per generation for a window and one more generation, and
// returns the filters' allocated bytes, the optimal bytes for the keys their live generations took,
// and the process's resident memory after the Go heap was returned to the system.
func rampPhase(fs []*Filter, clock *fakeClock, rng *rand.Rand, load uint64) (alloc, optimal, rss uint64) {
	cfg := fs[0].Config()
	for range cfg.Generations + 1 {
		start := fs[0].CurrentGenerationStart().Add(cfg.Interval)
		for step := range uint64(16) { // the partitions take their keys side by side
			clock.Set(start.Add(time.Duration(step) * cfg.Interval / 16))
			for _, f := range fs {
				f.AdvanceTo(clock.Now())
				for range load / 16 {
					f.testAndAddHash(rng.Uint64())
				}
			}
		}
	}
	var keys uint64
	for _, f := range fs {
		st := f.Stats()
		alloc += st.TotalBytes
		for _, g := range st.Generations {
			keys += g.Keys
		}
	}
	debug.FreeOSMemory()
	return alloc, uint64(optimalBytes(keys, cfg.FalsePositiveRate)), residentSetBytes()
}

// TestAutoRamp runs the load ramp of the auto-sizing issue through eight filters (partitions) of
// the default target with a window of 4 × 3 s: a low load, 20× it, the low load again, each for a
// window and one generation more. Auto sizing must hold ≤ 4× an optimal Bloom filter of the
// window's keys at the low load and ≤ 3× at the high one, and be back at the low level (allocated
// and resident) after the load fell. The fixed default of main (1M keys per generation) runs the
// same ramp in the same process for comparison. A ramp of 9M keys (about 9 s) is a sizing run of
// the statistical tier.
func TestAutoRamp(t *testing.T) {
	tier.Statistical(t)
	if testing.Short() {
		t.Skip("a ramp of 9M keys")
	}
	const partitions, low = 8, 10_000
	for _, mode := range []string{"auto", "fixed-1M"} {
		clock := newFakeClock()
		cfg := Config{Generations: 4, Interval: 3 * time.Second, FalsePositiveRate: 1e-6, Clock: clock.Now, SingleWriter: true, Auto: mode == "auto"}
		if !cfg.Auto {
			cfg.Capacity = 1_000_000
		}
		fs := make([]*Filter, partitions)
		for i := range fs {
			fs[i] = mustNew(t, cfg)
		}
		rng := rand.New(rand.NewPCG(7, 8))
		var ratio [3]float64
		var alloc, rss [3]uint64
		for i, load := range []uint64{low, 20 * low, low} {
			a, opt, r := rampPhase(fs, clock, rng, load)
			ratio[i], alloc[i], rss[i] = float64(a)/float64(opt), a, r
		}
		t.Logf("%s: allocated vs optimal low %.2f×, high %.2f×, low again %.2f×; allocated %d, %d, %d B; RSS %d, %d, %d MiB",
			mode, ratio[0], ratio[1], ratio[2], alloc[0], alloc[1], alloc[2], rss[0]>>20, rss[1]>>20, rss[2]>>20)
		if mode != "auto" {
			continue
		}
		if ratio[0] > 4 || ratio[1] > 3 || ratio[2] > 4 || float64(alloc[2]) > 1.25*float64(alloc[0]) {
			t.Errorf("auto: memory vs optimal %.2f×, %.2f×, %.2f× (want ≤ 4, 3, 4), allocated %v", ratio[0], ratio[1], ratio[2], alloc)
		}
		if rss[0] > 0 && rss[2] > rss[0]+16<<20 {
			t.Errorf("auto: RSS %d MiB after the load fell, %d MiB at the low load before", rss[2]>>20, rss[0]>>20)
		}
		runtime.KeepAlive(fs)
	}
}

// TestAutoStageCapacity checks the sizing rule on its own.
func TestAutoStageCapacity(t *testing.T) {
	inf := math.Inf(1)
	cases := []struct {
		name                  string
		stage                 int
		held, floor           uint64
		hist, projected, room float64
		want                  uint64
	}{
		{"steady", 1, 1024, 1024, 100_000, 100_000, inf, 123_976},
		{"falling: the projection", 1, 1024, 1024, 100_000, 5_000, inf, 5_226},
		{"rising: the history, growth takes the rest", 1, 1024, 1024, 5_000, 100_000, inf, 5_226},
		{"no history, a burst: 8x what it holds", 1, 1024, 1024, 0, inf, inf, 8_192},
		{"a burst, stage 2: 32x what it holds", 2, 9_216, 1024, 0, inf, inf, 294_912},
		{"a burst, stage 3: 128x what it holds", 3, 304_128, 1024, 0, inf, inf, 38_928_384},
		{"no history, steady", 1, 1024, 1024, 0, 3_000, inf, 2_726},
		{"at least what it holds", 1, 1024, 1024, 0, 100, inf, 1_024},
		{"later stage of a spike: the projection", 2, 50_000, 1024, 0, 400_000, inf, 450_000},
		{"the memory it may use", 1, 1024, 1024, 100_000, 100_000, 500, 500},
		{"the memory it may use, a burst", 2, 9_216, 1024, 0, inf, 100_000, 100_000},
		{"no memory left", 1, 1024, 1024, 100_000, 100_000, 0, 1},
	}
	for _, c := range cases {
		if got := autoStageCapacity(c.stage, c.held, c.floor, c.hist, c.projected, c.room); got != c.want {
			t.Errorf("%s: capacity %d, want %d", c.name, got, c.want)
		}
	}
}

// TestAutoColdBurstStages offers the first generation of a new auto-sized filter (1e-6) the
// keys of one partition of the six-partition workload (133k distinct, all at once, as a drain of
// a preloaded input from process start): it ends with two grown stages beside stage 0, so that a
// lookup reads three places of the generation, and every key is seen.
func TestAutoColdBurstStages(t *testing.T) {
	const keys = 133_000
	clock := newFakeClock()
	f := mustNew(t, Config{Generations: 8, Interval: 15 * time.Minute, Auto: true, FalsePositiveRate: 1e-6,
		Clock: clock.Now, SingleWriter: true})
	clock.Set(f.CurrentGenerationStart().Add(300 * time.Millisecond)) // the worker's start-up
	for i := range uint64(keys) {
		if f.TestAndAdd(key(45, i)) {
			t.Fatalf("new key %d reported seen", i)
		}
	}
	gg := f.grownGenIfAny(0)
	if gg == nil {
		t.Fatal("133k keys did not grow the generation")
	}
	sts := *gg.stages.Load()
	var caps, sizes []uint64
	for _, st := range sts {
		caps, sizes = append(caps, st.capacity), append(sizes, st.bytes)
	}
	t.Logf("after a cold burst of %d keys: stage capacities %v, bytes %v, filter %d B", keys, caps, sizes, f.Stats().TotalBytes)
	if len(sts) > 2 {
		t.Errorf("a cold burst of %d keys made %d grown stages (%v), want ≤ 2", keys, len(sts), caps)
	}
	for i := range uint64(keys) {
		if !f.Test(key(45, i)) {
			t.Fatalf("key %d not seen", i)
		}
	}
}

// TestAutoOlderGenerationGrows fills an older generation of an auto-sized event-time filter with
// many keys, as a rebuild from the output topic does (oldest records first, each into the
// generation of its timestamp): the generation grows as the current one would, every key is seen
// and the false-positive rate stays within 1.5× the target (as TestAutoKeepsTarget).
func TestAutoOlderGenerationGrows(t *testing.T) {
	const p, keys = 1e-3, 40_000
	for _, single := range []bool{false, true} {
		clock := newFakeClock()
		clock.Set(EventTimeOrigin.Add(10 * time.Minute))
		f := mustNew(t, Config{Generations: 3, Interval: time.Minute, Auto: true, FalsePositiveRate: p,
			Clock: clock.Now, SingleWriter: single})
		then := clock.Now()
		f.AdvanceEventTo(then.Add(2 * time.Minute))
		for i := range uint64(keys) {
			if seen, late := f.TestAndAddAt(key(43, i), then); late || (seen && i < 10) {
				t.Fatalf("single=%v: key %d stamped in the oldest generation: seen %v, late %v", single, i, seen, late)
			}
		}
		for i := range uint64(keys) {
			if !f.Test(key(43, i)) {
				t.Fatalf("single=%v: key %d not seen", single, i)
			}
		}
		fp, probes := 0, int(100/p)
		for i := range uint64(probes) {
			if f.Test(key(44, i)) {
				fp++
			}
		}
		if rate := float64(fp) / float64(probes); rate > 1.5*p {
			t.Errorf("single=%v: false-positive rate %.3g after 40k keys into an older generation, target %g", single, rate, p)
		}
	}
}
