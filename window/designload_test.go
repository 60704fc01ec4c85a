package window

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/tier"
)

// The filter at its design load: every generation holding 0.9, 1.0 and 1.1 × Capacity keys.
// A filter sized for Capacity must hold Capacity: no stage, the memory of stage 0 alone, and a
// false-positive rate at or under the target.

// designLoads are the loads, in multiples of Capacity, that TestDesignLoad and
// BenchmarkDesignLoad fill every generation to.
var designLoads = []float64{0.9, 1.0, 1.1}

// fillDesignLoad fills gens generations of f in turn, each with load × Capacity fresh hashes from
// rng (the last generation with room keys fewer), rotating between them with clock.
func fillDesignLoad(f *Filter, clock *fakeClock, rng *rand.Rand, gens int, load float64, room uint64) {
	per := uint64(load * float64(f.Config().Capacity))
	for g := range gens {
		if g > 0 {
			clock.Set(clock.Now().Add(f.Config().Interval))
			f.AdvanceTo(clock.Now())
		}
		n := per
		if g == gens-1 {
			n -= min(room, n)
		}
		for range n {
			f.testAndAddHash(rng.Uint64())
		}
	}
}

// designLoadResult is what TestDesignLoad measures of one filter.
type designLoadResult struct {
	stages        int
	bytes         uint64
	fp, probes    int
	estimated     float64
	configuredFPR float64
}

// designProbes is the number of absent keys TestDesignLoad tests at Capacity; 0 sizes it by the
// statistics (see designLoadProbes). The measurement on 10M+ absent keys:
//
//	go test ./window -run TestDesignLoad -v -window.probes 10000000
var designProbes = flag.Int("window.probes", 0, "absent keys TestDesignLoad tests at Capacity (0: sized by the statistics)")

// designLoadProbes returns how many absent keys TestDesignLoad tests at Capacity for the target
// p: by default enough for 1000 false positives at the target (the test's bound, 3.3 standard
// deviations, is then +10% of the target), at most 2M (at 1e-4: 200 expected, +23%; at 1e-6 the
// count only catches a gross error, and Stats's exact estimate carries the check).
func designLoadProbes(p float64) int {
	if *designProbes > 0 {
		return *designProbes
	}
	return min(2_000_000, int(math.Ceil(1000/p)))
}

// TestDesignLoad fills every generation with 0.9, 1.0 and 1.1 × Capacity fresh keys (at 1.0, 2N
// generations, so that the live ones sit in reused slots) and checks what a filter sized for
// Capacity must do: no stage at or below Capacity, the memory of the 0.9 × Capacity filter at
// Capacity, a stage in every generation at 1.1 × Capacity (growth starts between 1.0 and 1.1 ×
// Capacity), and a false-positive rate at Capacity at or under the target: measured on
// designLoadProbes absent keys, it fails when the count is significantly (3.3 standard
// deviations, one-sided 99.95%) above what the target gives; Stats's estimate, exact for these
// filters (every group is read), must be under the target too. The other loads' rates are
// measured on a tenth as many keys, for the log only. A fixed seed makes the result
// deterministic. (bench/'s TestFPR measures with more probes.)
func TestDesignLoad(t *testing.T) {
	tier.Statistical(t) // about 25M operations
	for _, tt := range []struct {
		n        int
		p        float64
		capacity uint64
	}{
		{8, 1e-3, 125_000},
		{8, 1e-4, 125_000},
		{8, 1e-6, 125_000},
		{1, 1e-6, 1_000_000},
	} {
		t.Run(fmt.Sprintf("N=%d/%s", tt.n, fprName(tt.p)), func(t *testing.T) {
			t.Parallel()
			cfg := Config{Generations: tt.n, Interval: time.Second, Capacity: tt.capacity, FalsePositiveRate: tt.p, Seed: 42}
			res := make([]designLoadResult, len(designLoads))
			var wg sync.WaitGroup
			for i, load := range designLoads {
				wg.Go(func() { res[i] = measureDesignLoad(t, cfg, load, i) })
			}
			wg.Wait()
			for i, load := range designLoads {
				r := res[i]
				t.Logf("%.1fx: %d stages, %d bytes (%.3fx the 0.9x filter), measured rate %d/%d = %.3g (%.3fx target), estimated %.3g",
					load, r.stages, r.bytes, float64(r.bytes)/float64(res[0].bytes), r.fp, r.probes,
					float64(r.fp)/float64(r.probes), float64(r.fp)/float64(r.probes)/tt.p, r.estimated)
			}
			checkDesignLoad(t, tt.p, res)
		})
	}
}

// measureDesignLoad builds a filter for cfg, fills its generations to load × Capacity and
// measures it: at 1.0 × Capacity, 2N generations (so that the live ones sit in reused slots) and
// designLoadProbes absent keys; at the other loads, N generations and a tenth as many keys.
func measureDesignLoad(t *testing.T, cfg Config, load float64, seed int) designLoadResult {
	clock := newFakeClock()
	cfg.Clock = clock.Now
	f := mustNew(t, cfg)
	rng := rand.New(rand.NewPCG(uint64(seed), math.Float64bits(cfg.FalsePositiveRate)))
	gens, probes := cfg.Generations, designLoadProbes(cfg.FalsePositiveRate)/10
	if load == 1 {
		gens, probes = 2*cfg.Generations, designLoadProbes(cfg.FalsePositiveRate)
	}
	fillDesignLoad(f, clock, rng, gens, load, 0)
	fp := 0
	for range probes {
		if f.testHash(rng.Uint64()) {
			fp++
		}
	}
	st := f.Stats()
	return designLoadResult{stages: st.Stages, bytes: st.TotalBytes, fp: fp, probes: probes,
		estimated: st.EstimatedFPR, configuredFPR: cfg.FalsePositiveRate}
}

// checkDesignLoad checks the results of designLoads, in order.
func checkDesignLoad(t *testing.T, p float64, res []designLoadResult) {
	t.Helper()
	for i, load := range designLoads {
		r := res[i]
		switch {
		case load <= 1 && (r.stages != 0 || r.bytes != res[0].bytes):
			t.Errorf("%.1fx Capacity: %d stages, %d bytes: want no stage and the %d bytes of 0.9x", load, r.stages, r.bytes, res[0].bytes)
		case load > 1 && r.stages == 0:
			t.Errorf("%.1fx Capacity: no stage grown", load)
		}
	}
	r := res[1]
	if limit := p * float64(r.probes); float64(r.fp) > limit+3.3*math.Sqrt(limit) {
		t.Errorf("at Capacity: %d false positives of %d absent keys is significantly above the target %g", r.fp, r.probes, p)
	}
	if r.estimated > p {
		t.Errorf("at Capacity: Stats estimates %.4g, above the target %g", r.estimated, p)
	}
}

// designFixture is one filter of BenchmarkDesignLoad: N=8 generations of Capacity 1M (the
// default window's), at one rate and load.
type designFixture struct {
	once  sync.Once
	f     *Filter
	clock *fakeClock
	rng   *rand.Rand
	room  uint64 // fresh keys TestAndAdd may still add before the fixture is rebuilt
	fpr   float64
}

var designFixtures sync.Map // [3]any{p, load, add} → *designFixture

const (
	designCapacity = 1_000_000
	designRoom     = designCapacity / 10 // TestAndAdd's keys: the current generation's last 10%
)

// BenchmarkDesignLoad measures the filter at design load: N=8 generations of Capacity 1M, every
// generation filled to 0.9, 1.0 and 1.1 × Capacity, at p = 1e-3 and 1e-6, one goroutine, hash
// level. op=TestMiss tests keys never added; op=TestAndAdd offers fresh keys to a single-writer
// filter (kdedup's per-partition mode) whose older generations hold load × Capacity keys and
// whose current one holds 0.1 × Capacity fewer, which the timed keys bring up to at most load ×
// Capacity (run it with -benchtime of at most 100000x; between runs that would go further the
// fixture starts a new generation and fills it to load × Capacity - 100000). Each result reports
// stages (grown stages of the live generations), bytes (Stats.TotalBytes, what
// kdedup_filter_capacity_bytes reports), cpu-ns/op (the process's CPU time per operation, which a
// busy machine disturbs less than the wall time) and, for misses, fpr. Compare the loads with benchstat -col /load; the bar is at most 1.25x the
// 0.9 cost at 1.0:
//
//	go test ./window -run '^$' -bench DesignLoad -benchtime 50000x -count 6 | benchstat -col /load -
func BenchmarkDesignLoad(b *testing.B) {
	for _, p := range benchFPRs {
		for _, op := range []string{"TestAndAdd", "TestMiss"} {
			for _, load := range designLoads {
				b.Run(fmt.Sprintf("%s/op=%s/load=%.1f", fprName(p), op, load), func(b *testing.B) {
					benchDesignLoad(b, p, load, op == "TestAndAdd")
				})
			}
		}
	}
}

func benchDesignLoad(b *testing.B, p, load float64, add bool) {
	id := [3]any{p, load, add}
	v, _ := designFixtures.LoadOrStore(id, &designFixture{})
	fx := v.(*designFixture)
	fx.once.Do(func() { fx.build(b, p, load, add) })
	if add && uint64(b.N) > fx.room {
		fx.refill(b, load)
	}
	hs := make([]uint64, min(b.N, benchPool))
	for i := range hs {
		hs[i] = fx.rng.Uint64()
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	seen := 0
	for i := range b.N {
		h := hs[i%len(hs)]
		if add {
			if fx.f.testAndAddHash(h) {
				seen++
			}
		} else if fx.f.testHash(h) {
			seen++
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	if add {
		fx.room -= uint64(b.N)
	}
	st := fx.f.Stats()
	b.ReportMetric(float64(st.Stages), "stages")
	b.ReportMetric(float64(st.TotalBytes), "bytes")
	if !add {
		b.ReportMetric(fx.fpr, "fpr")
	}
	sinkInt.Add(int64(seen))
}

// refill makes room for designRoom more fresh keys: it starts a new current generation (the
// oldest expires) and fills it to load × Capacity - designRoom. The generation that was current
// holds at most load × Capacity keys, as the older ones do.
func (fx *designFixture) refill(b *testing.B, load float64) {
	b.StopTimer()
	defer b.StartTimer()
	fx.clock.Set(fx.clock.Now().Add(fx.f.Config().Interval))
	fx.f.AdvanceTo(fx.clock.Now())
	for range uint64(load*designCapacity) - designRoom {
		fx.f.testAndAddHash(fx.rng.Uint64())
	}
	fx.room = designRoom
}

// build fills the fixture's filter: every generation to load × Capacity, the current one to
// designRoom fewer for TestAndAdd. It measures the rate on 1M absent keys.
func (fx *designFixture) build(b *testing.B, p, load float64, add bool) {
	b.StopTimer()
	defer b.StartTimer()
	fx.clock = newFakeClock()
	fx.f = mustNew(b, Config{Generations: 8, Interval: time.Minute, Capacity: designCapacity, FalsePositiveRate: p,
		Clock: fx.clock.Now, SingleWriter: true})
	fx.rng = rand.New(rand.NewPCG(1, math.Float64bits(load)))
	room := uint64(0)
	if add {
		room = designRoom
	}
	fillDesignLoad(fx.f, fx.clock, fx.rng, 8, load, room)
	fx.room = room
	fp := 0
	for range 1 << 20 {
		if fx.f.testHash(fx.rng.Uint64()) {
			fp++
		}
	}
	fx.fpr = float64(fp) / (1 << 20)
}
