package window

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/tier"
)

// fillGenerations adds load fresh keys to each of the filter's N generations (rotating between
// them) and returns the last key index used. Keys are hashes from a fixed-seed generator.
func fillGenerations(f *Filter, clock *fakeClock, rng *rand.Rand, load uint64) {
	n := f.Config().Generations
	for g := range n {
		if g > 0 {
			clock.Set(clock.Now().Add(f.Config().Interval))
			f.AdvanceTo(clock.Now())
		}
		for range load {
			f.testAndAddHash(rng.Uint64())
		}
	}
}

// TestGrowthKeepsTarget loads every generation of a filter to 1×, 5× and 20× its capacity and
// measures the false-positive rate over absent keys: it must stay within 1.5× of the target (the
// design keeps it under the target; 1.5× leaves room for sampling noise). The probes are sized for
// 200 false positives at the target (100 with -short), so that 1.5× the target is 7 (5)
// standard deviations above it: a filter at the target fails with a probability under 1e-6.
// -short tests 1e-3 only. It is of the statistical tier.
func TestGrowthKeepsTarget(t *testing.T) {
	tier.Statistical(t)
	expected, rates := 200.0, []float64{1e-3, 1e-4}
	if testing.Short() {
		expected, rates = 100, rates[:1]
	}
	for _, p := range rates {
		probes := int(expected / p)
		for _, times := range []uint64{1, 5, 20} {
			t.Run(fmt.Sprintf("%s/%dx", fprName(p), times), func(t *testing.T) {
				t.Parallel()
				if raceEnabled && times == 20 {
					t.Skip("20x is slow under the race detector")
				}
				clock := newFakeClock()
				const capacity = 10_000
				f := mustNew(t, Config{Generations: 2, Interval: time.Minute, Capacity: capacity, FalsePositiveRate: p, Clock: clock.Now})
				rng := rand.New(rand.NewPCG(uint64(times), math.Float64bits(p)))
				fillGenerations(f, clock, rng, times*capacity)
				fp := 0
				for range probes {
					if f.testHash(rng.Uint64()) {
						fp++
					}
				}
				got := float64(fp) / float64(probes)
				st := f.Stats()
				t.Logf("%dx: measured %.3g (%.2fx target), estimated %.3g, %d stages, %.1f bits per key",
					times, got, got/p, st.EstimatedFPR, st.Stages, float64(st.TotalBytes*8)/float64(2*times*capacity))
				if got > 1.5*p {
					t.Errorf("%dx capacity: false-positive rate %.3g, more than 1.5x the target %g", times, got, p)
				}
				if times > 1 && st.Stages == 0 {
					t.Errorf("%dx capacity: no stage grown", times)
				}
			})
		}
	}
}

// TestGrowAtCapacity checks stage 0's sizing: it takes exactly Capacity keys (GrowAt), and its
// predicted rate at Capacity is (1-GrowthShare) of the generation's share, to within the rounding
// of the number of groups.
func TestGrowAtCapacity(t *testing.T) {
	for _, p := range []float64{1e-2, 1e-3, 1e-4, 1e-6} {
		s, err := Size(Config{Generations: 4, Interval: time.Minute, Capacity: 1_000_000, FalsePositiveRate: p})
		if err != nil {
			t.Fatal(err)
		}
		r := s.GenerationFPR / s.ShareFPR
		t.Logf("p=%g: k=%d sectors=%d, stage 0 at capacity: rate %.4f of the share %.4g", p, s.K, s.Sectors, r, s.ShareFPR)
		if s.GrowAt != 1_000_000 || r > 1-GrowthShare || r < 0.99*(1-GrowthShare) {
			t.Errorf("p=%g: GrowAt %d, rate at capacity %.4f of the share, want Capacity and %.4f", p, s.GrowAt, r, 1-GrowthShare)
		}
		if got := poissonLoadFPR(1e6/float64(s.Groups), s.sectorKs()); math.Abs(s.GenerationFPR/got-1) > 1e-4 {
			t.Errorf("p=%g: GenerationFPR %.6g, the Poisson model %.6g", p, s.GenerationFPR, got)
		}
	}
}

// TestGrowthOneWinner races goroutines offering the same fresh keys in shared mode while the
// generation grows through several stages: every key must have exactly one winner (zero only for
// a false positive, which a sequential filter fed the same keys predicts to within a few), and
// every key must be seen afterwards.
func TestGrowthOneWinner(t *testing.T) {
	for _, auto := range []bool{false, true} {
		t.Run(fmt.Sprintf("auto=%v", auto), func(t *testing.T) { testGrowthOneWinner(t, auto) })
	}
}

// testGrowthOneWinner is TestGrowthOneWinner with a fixed capacity or auto sizing (whose stages
// grow from a stage 0 of 128 keys, sized by the projection alone: no history, so by 8×, 32× and
// 128× what the generation holds).
func testGrowthOneWinner(t *testing.T, auto bool) {
	workers := max(4, 2*runtime.GOMAXPROCS(0))
	const capacity = 2_000
	keys := 20 * capacity
	cfg := Config{Generations: 2, Interval: time.Hour, Capacity: capacity, FalsePositiveRate: 1e-3, Auto: auto}
	if auto {
		cfg.Capacity, keys = 128, 200*AutoCapacity
	}
	f := mustNew(t, cfg)
	// Neighbouring offsets: goroutines meet on the same key, and on the stage-0 to stage-1
	// transition, at the same moment.
	winners := raceOffers(workers, keys, func(w int) int { return w % 3 }, func(i int) bool {
		return !f.TestAndAdd(key(21, uint64(i)))
	})
	seq := mustNew(t, cfg) // the sequential reference
	refFP := 0
	for i := range keys {
		if seq.TestAndAdd(key(21, uint64(i))) {
			refFP++
		}
	}
	zero, many := tallyWinners(winners)
	missed := 0
	for i := range winners {
		if !f.Test(key(21, uint64(i))) {
			missed++
		}
	}
	st := f.Stats()
	t.Logf("%d keys, %d workers: %d stages, %d keys without winner (sequential reference: %d false positives)", keys, workers, st.Stages, zero, refFP)
	if many > 0 || missed > 0 {
		t.Errorf("%d keys had more than one winner, %d were not seen afterwards", many, missed)
	}
	if want := map[bool]int{false: 3, true: 2}[auto]; st.Stages < want {
		t.Errorf("%d stages, want the race to cross several growths", st.Stages)
	}
	if zero > 2*refFP+10 {
		t.Errorf("%d keys had no winner; the sequential reference had %d false positives", zero, refFP)
	}
}

// TestGrowthSingleWriter grows a single-writer filter while readers test keys the writer has
// already added: no false negative while stages are added, and the same answers as a sequential
// shared filter fed the same keys.
func TestGrowthSingleWriter(t *testing.T) {
	const capacity = 2_000
	keys := uint64(10 * capacity)
	cfg := Config{Generations: 2, Interval: time.Hour, Capacity: capacity, FalsePositiveRate: 1e-3}
	ref := mustNew(t, cfg)
	cfg.SingleWriter = true
	f := mustNew(t, cfg)
	var added atomic.Uint64
	var misses atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if n := added.Load(); n > 0 && !f.Test(key(22, rng.Uint64N(n))) {
					misses.Add(1)
				}
			}
		})
	}
	diff := 0
	for i := range keys {
		a, b := f.TestAndAdd(key(22, i)), ref.TestAndAdd(key(22, i))
		if a != b {
			diff++
		}
		added.Store(i + 1)
	}
	close(stop)
	wg.Wait()
	if misses.Load() > 0 || diff > 0 || f.Stats().Stages < 2 {
		t.Errorf("%d false negatives during growth, %d answers differ from the shared reference, %d stages",
			misses.Load(), diff, f.Stats().Stages)
	}
}

// TestGrowthStopsAtCap caps the memory at stage 0 plus little: growth stops, Stats says so, and
// each policy does what it says: drop keeps every key (the rate rises), pass keeps the rate.
func TestGrowthStopsAtCap(t *testing.T) {
	const capacity = 5_000
	base := Config{Generations: 1, Interval: time.Hour, Capacity: capacity, FalsePositiveRate: 1e-3}
	s, err := Size(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []OverloadPolicy{OverloadDrop, OverloadPass} {
		t.Run(policy.String(), func(t *testing.T) {
			cfg := base
			cfg.Overload = policy
			cfg.MaxBytes = s.TotalBytes + growthStage(capacity, s.ShareFPR, 1, shardLayout(s.GrowAt)).bytes // room for stage 1 only
			f := mustNew(t, cfg)
			const load = 8 * capacity
			for i := range uint64(load) {
				f.TestAndAdd(key(23, i))
			}
			st := f.Stats()
			missed := load - seenKeys(f, 23, load)
			fp := 0
			for i := range uint64(200_000) {
				if f.Test(key(24, i)) {
					fp++
				}
			}
			got := float64(fp) / 200_000
			t.Logf("%s: %d stages, at cap %v, %d of %d keys not seen, measured rate %.3g, estimated %.3g, %d/%d bytes",
				policy, st.Stages, st.AtCap, missed, load, got, st.EstimatedFPR, st.TotalBytes, st.MaxBytes)
			if st.Stages != 1 || !st.AtCap || st.TotalBytes > cfg.MaxBytes {
				t.Fatalf("stages %d, at cap %v, %d bytes of %d: want 1 stage and the cap reached", st.Stages, st.AtCap, st.TotalBytes, cfg.MaxBytes)
			}
			if est := st.EstimatedFPR; math.Abs(est-got) > 0.3*got+2e-4 {
				t.Errorf("estimated rate %.3g, measured %.3g", est, got)
			}
			switch policy {
			case OverloadDrop:
				if missed != 0 || got < 5*cfg.FalsePositiveRate || st.Forgotten != 0 {
					t.Errorf("drop: %d keys lost, %d forgotten, rate %.3g: want every key kept and the rate risen", missed, st.Forgotten, got)
				}
			case OverloadPass:
				if missed == 0 || got > 1.5*cfg.FalsePositiveRate {
					t.Errorf("pass: %d keys not kept, rate %.3g: want keys passed and the rate at target", missed, got)
				}
				// A forgotten key can still test as seen (a false positive), never the reverse.
				if st.Forgotten < uint64(missed) || st.Forgotten > uint64(missed)+uint64(2*got*load)+10 {
					t.Errorf("pass: %d keys counted forgotten, %d not seen", st.Forgotten, missed)
				}
			}
		})
	}
}

// TestGrowthRotation checks that a generation's stages expire with it and their memory returns.
func TestGrowthRotation(t *testing.T) {
	clock := newFakeClock()
	f := mustNew(t, Config{Generations: 2, Interval: time.Minute, Capacity: 1_000, FalsePositiveRate: 1e-3, Clock: clock.Now})
	addKeys(f, 25, 5_000)
	if st := f.Stats(); st.Stages == 0 || st.TotalBytes == f.Sizing().TotalBytes {
		t.Fatalf("no growth: %d stages, %d bytes", st.Stages, st.TotalBytes)
	}
	clock.Set(clock.Now().Add(time.Minute))
	f.AdvanceTo(clock.Now())
	if got := seenKeys(f, 25, 5_000); got != 5_000 {
		t.Fatalf("%d of 5000 keys seen one rotation later", got)
	}
	clock.Set(clock.Now().Add(time.Minute))
	f.AdvanceTo(clock.Now())
	st := f.Stats()
	if st.Stages != 0 || st.TotalBytes != f.Sizing().TotalBytes || f.grown.Load() != nil {
		t.Errorf("after expiry: %d stages, %d bytes (stage 0 alone is %d)", st.Stages, st.TotalBytes, f.Sizing().TotalBytes)
	}
	if got := seenKeys(f, 25, 5_000); got > 50 {
		t.Errorf("%d of 5000 expired keys still seen", got)
	}
}

// TestGrowthSnapshot saves a grown filter, restores it in either mode, and checks that every key
// is still seen, the stages and counts came back, and the restored filter keeps growing.
func TestGrowthSnapshot(t *testing.T) {
	for _, single := range []bool{false, true} {
		clock := newFakeClock()
		cfg := Config{Generations: 2, Interval: time.Minute, Capacity: 1_000, FalsePositiveRate: 1e-3, Clock: clock.Now}
		f := mustNew(t, cfg)
		addKeys(f, 26, 3_000)
		clock.Set(clock.Now().Add(time.Minute))
		f.AdvanceTo(clock.Now())
		addKeys(f, 27, 6_000)
		var buf bytes.Buffer
		meta, _, err := f.WriteSnapshot(&buf)
		if err != nil {
			t.Fatal(err)
		}
		cfg.SingleWriter = single
		r, err := Restore(cfg, meta, &buf)
		if err != nil {
			t.Fatal(err)
		}
		a, b := f.Stats(), r.Stats()
		if a.Stages != b.Stages || a.TotalBytes != b.TotalBytes || len(meta.Stages) != a.Stages {
			t.Fatalf("stages %d/%d (meta %d), bytes %d/%d", a.Stages, b.Stages, len(meta.Stages), a.TotalBytes, b.TotalBytes)
		}
		if got := seenKeys(r, 26, 3_000) + seenKeys(r, 27, 6_000); got != 9_000 {
			t.Fatalf("single=%v: %d of 9000 keys seen after restore", single, got)
		}
		for i := range uint64(200) {
			if f.Test(key(28, i)) != r.Test(key(28, i)) {
				t.Fatalf("absent key %d: answers differ", i)
			}
		}
		addKeys(r, 29, 8_000)
		if r.Stats().Stages <= b.Stages {
			t.Errorf("restored filter did not grow further")
		}
	}
}

// TestGrowthZeroAllocs checks that a grown filter's hot path does not allocate once its stages
// exist.
func TestGrowthZeroAllocs(t *testing.T) {
	f := mustNew(t, Config{Generations: 2, Interval: time.Hour, Capacity: 1_000, FalsePositiveRate: 1e-3})
	addKeys(f, 30, 3_000)
	k := key(31, 0)
	fresh := func() { k[0]++; f.TestAndAdd(k) }
	if a := testing.AllocsPerRun(200, fresh); a != 0 {
		t.Errorf("TestAndAdd on a grown filter allocates %v times per call", a)
	}
	if a := testing.AllocsPerRun(200, func() { f.Test(k) }); a != 0 {
		t.Errorf("Test on a grown filter allocates %v times per call", a)
	}
}

// BenchmarkGrowth compares a filter whose 4 generations hold 0.85×, 1× and 5× Capacity keys
// with the filter as it was before growth (stage 0 takes every key: "today") at 1×, in the same
// run; quote the ratios. At 0.85× and 1× no generation has grown (stage 0 takes Capacity keys). TestAndAdd offers fresh keys, which
// adds load: run it with -benchtime of at most 20000x (8% of Capacity) so that the load stays
// what the name says. Test tests absent keys and changes nothing.
func BenchmarkGrowth(b *testing.B) {
	const capacity = 250_000
	for _, c := range []struct {
		name   string
		load   float64
		nogrow bool
	}{
		{"today-1x", 1, true},
		{"grow-0.85x", 0.85, false},
		{"grow-1x", 1, false},
		{"grow-5x", 5, false},
	} {
		for _, op := range []string{"TestAndAdd/shared", "TestAndAdd/single", "Test"} {
			b.Run(c.name+"/"+op, func(b *testing.B) {
				clock := newFakeClock()
				single := op == "TestAndAdd/single"
				f := mustNew(b, Config{Generations: 4, Interval: time.Minute, Capacity: capacity, FalsePositiveRate: 1e-3, Clock: clock.Now, SingleWriter: single})
				if c.nogrow {
					f.limit0 = math.MaxUint64
				}
				fillGenerations(f, clock, rand.New(rand.NewPCG(1, 2)), uint64(c.load*capacity))
				b.ReportAllocs()
				b.ResetTimer()
				if single {
					rng := rand.New(rand.NewPCG(3, 4))
					for range b.N {
						f.testAndAddHash(rng.Uint64())
					}
					return
				}
				var seed atomic.Uint64
				b.RunParallel(func(pb *testing.PB) {
					rng := rand.New(rand.NewPCG(seed.Add(1), 5))
					for pb.Next() {
						if op == "Test" {
							f.testHash(rng.Uint64())
						} else {
							f.testAndAddHash(rng.Uint64())
						}
					}
				})
			})
		}
	}
}

// TestGrowthEventTime checks that the event-time entry points see keys in grown stages: a key
// added past capacity is seen when offered again stamped in the current or an older generation,
// in both modes.
func TestGrowthEventTime(t *testing.T) {
	for _, single := range []bool{false, true} {
		clock := newFakeClock()
		clock.Set(EventTimeOrigin.Add(10 * time.Minute))
		f := mustNew(t, Config{Generations: 3, Interval: time.Minute, Capacity: 1_000, FalsePositiveRate: 1e-3,
			Clock: clock.Now, SingleWriter: single})
		now := clock.Now()
		addKeys(f, 32, 4_000) // the current generation grows
		if f.Stats().Stages == 0 {
			t.Fatal("setup: no growth")
		}
		f.AdvanceEventTo(now.Add(time.Minute))
		for i := range uint64(4_000) {
			for _, at := range []time.Time{now, now.Add(time.Minute)} {
				if seen, late := f.TestAndAddAt(key(32, i), at); !seen || late {
					t.Fatalf("single=%v: key %d stamped %v: seen %v late %v", single, i, at, seen, late)
				}
			}
		}
	}
}
