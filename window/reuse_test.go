package window

import (
	"bytes"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Tests of the mechanism that lets a generation reuse an expiring slot at once, without a spare
// slot cleared in the background: per-word use tags, sweeps, stale-view writers, restores.

// addKeys offers keys [0, n) of namespace ns and returns how many were new.
func addKeys(f *Filter, ns, n uint64) (added int) {
	for i := range n {
		if !f.TestAndAdd(key(ns, i)) {
			added++
		}
	}
	return added
}

// seenKeys returns how many of the keys [0, n) of namespace ns f reports seen.
func seenKeys(f *Filter, ns, n uint64) (seen int) {
	for i := range n {
		if f.Test(key(ns, i)) {
			seen++
		}
	}
	return seen
}

// staleWords counts the words of slot s that carry a tag other than its use's.
func staleWords(f *Filter, s int) (n int) {
	tag := tagOf(f.uses[s].Load())
	for g := range f.groups {
		f.slotWords(g, s, func(w *uint64) {
			if atomic.LoadUint64(w)&tagBit != tag {
				n++
			}
		})
	}
	return n
}

// TestReuseWithoutClearing reuses a full slot for a new generation without sweeping it: its old
// keys must be gone at once, new keys must be found, Stats must count only the new use's bits,
// and the sweep, when it runs, must change no answer.
func TestReuseWithoutClearing(t *testing.T) {
	for _, m := range []mode{modes[1], modes[3]} {
		t.Run(m.name, func(t *testing.T) {
			clock := newFakeClock()
			start := clock.Now()
			const n, perGen, p = 20_000, uint64(20_000), 1e-4
			f := newIn(t, Config{Generations: 2, Interval: time.Second, Capacity: perGen, FalsePositiveRate: p, Clock: clock.Now}, m)
			addKeys(f, 40, n)
			f.AdvanceTo(start.Add(time.Second))
			prev := addKeys(f, 41, n)
			clock.Set(start.Add(2 * time.Second))
			f.AdvanceTo(clock.Now()) // reuses generation 0's slot
			v := f.view.Load()
			if !v.curTagged || f.sweepSlot != v.cur || f.uses[v.cur].Load() != 1 {
				t.Fatalf("after reuse: tagged=%v sweep slot %d cur %d use %d, want a pending sweep of cur at use 1",
					v.curTagged, f.sweepSlot, v.cur, f.uses[v.cur].Load())
			}
			stale := staleWords(f, v.cur)
			if stale == 0 {
				t.Fatal("the reused slot has no stale words: nothing was tested")
			}
			checkReuse(t, f, "before adding", prev, 0, 2*p)
			if st := f.Stats().Generations[0]; st.Fill > 0.001 || st.EstimatedKeys > 100 {
				t.Errorf("the new generation over stale words: fill %.4f, %.0f keys, want empty", st.Fill, st.EstimatedKeys)
			}
			added := addKeys(f, 42, n)
			checkReuse(t, f, "after adding", prev, added, 2*p)
			if est := f.Stats().Generations[0].EstimatedKeys; math.Abs(est-float64(added))/float64(added) > 0.05 {
				t.Errorf("Stats estimates %.0f keys in the new generation, %d were added", est, added)
			}
			if left := staleWords(f, v.cur); left >= stale {
				t.Errorf("%d stale words before adding, %d after: writers converted none", stale, left)
			}
			f.finishSweepForTest()
			checkTags(t, f)
			if f.view.Load().curTagged {
				t.Error("the view still checks tags after the sweep")
			}
			checkReuse(t, f, "after the sweep", prev, added, 2*p)
		})
	}
}

// checkReuse checks the three key sets of TestReuseWithoutClearing: 40 expired (at most a
// false-positive rate of maxFPR), 41 and 42 present (at least the prev and added keys that were
// new when offered).
func checkReuse(t *testing.T, f *Filter, when string, prev, added int, maxFPR float64) {
	t.Helper()
	const n = 20_000
	if got := seenKeys(f, 40, n); float64(got) > maxFPR*n+3 {
		t.Errorf("%s: %d of %d expired keys still seen", when, got, n)
	}
	if got := seenKeys(f, 41, n); got < prev {
		t.Errorf("%s: %d keys of the previous generation seen, %d were added", when, got, prev)
	}
	if got := seenKeys(f, 42, n); got < added {
		t.Errorf("%s: %d keys of the new generation seen, %d were added", when, got, added)
	}
}

// TestSweepRacesWriters lets writers fill reused slots while the sweep converts the same slots one
// group at a time, over several rotations, and checks that no key is lost and that every slot
// ends with one tag.
func TestSweepRacesWriters(t *testing.T) {
	for _, tt := range []struct {
		mode    mode
		writers int
	}{{modes[1], 4}, {modes[3], 1}} {
		t.Run(tt.mode.name, func(t *testing.T) {
			clock := newFakeClock()
			start := clock.Now()
			perGen := uint64(30_000)
			if raceEnabled {
				perGen = 6_000
			}
			f := newIn(t, Config{Generations: 2, Interval: time.Second, Capacity: perGen, FalsePositiveRate: 1e-6, Clock: clock.Now}, tt.mode)
			added := make([][]atomic.Bool, 8) // keys that were new when offered (not false positives)
			for g := range uint64(8) {
				f.AdvanceTo(start.Add(time.Duration(g) * time.Second))
				stopSweeper := startSweeper(f)
				added[g] = make([]atomic.Bool, perGen)
				var wg sync.WaitGroup
				for w := range tt.writers {
					wg.Go(func() {
						for i := uint64(w); i < perGen; i += uint64(tt.writers) {
							added[g][i].Store(!f.TestAndAdd(key(50+g, i)))
						}
					})
				}
				wg.Wait()
				stopSweeper()
				for _, gen := range []uint64{g, max(g, 1) - 1} {
					for i := range perGen {
						if added[gen][i].Load() && !f.Test(key(50+gen, i)) {
							t.Fatalf("generation %d: key %d of generation %d lost", g, i, gen)
						}
					}
				}
				f.finishSweepForTest()
				checkTags(t, f)
			}
		})
	}
}

// TestStaleViewWriter writes with views whose current slot has since been reused. A writer with
// such a view may add bits to the slot's new use (harmless: a few extra bits), but must never
// convert a word of the new use as if it were stale, which would drop keys; and its key must end
// up in the current generation.
func TestStaleViewWriter(t *testing.T) {
	clock := newFakeClock()
	start := clock.Now()
	const perGen = 20_000
	f := newIn(t, Config{Generations: 2, Interval: time.Second, Capacity: perGen, FalsePositiveRate: 1e-6, Clock: clock.Now}, modes[1])
	advance := func(g int) {
		clock.Set(start.Add(time.Duration(g) * time.Second))
		f.AdvanceTo(clock.Now())
	}
	swept := f.view.Load() // generation 0, slot 0 at use 0, no tags to check
	addKeys(f, 60, perGen)
	advance(1)
	advance(2) // slot 0 at use 1, sweep pending
	tagged := f.view.Load()
	if !tagged.curTagged || tagged.cur != swept.cur {
		t.Fatal("setup: generation 2 should reuse slot 0 with a pending sweep")
	}
	f.finishSweepForTest()
	advance(3)
	advance(4) // slot 0 at use 2, sweep pending: its words carry tag(1) (stale) or tag(2) (new)
	added := addKeys(f, 61, perGen)
	for i, v := range []*view{swept, tagged} {
		var p probe
		f.makeProbe(&p, f.hash(key(62, uint64(i))), f.view.Load(), true, true)
		f.set(v, &p) // as if the writer had loaded v before the four rotations
		if !f.Test(key(62, uint64(i))) {
			t.Errorf("view %d: the stale writer's key is not in the current generation", i)
		}
	}
	if got := seenKeys(f, 61, perGen); got != added {
		t.Fatalf("stale writers dropped keys of the current generation: %d of %d seen", got, added)
	}
	f.finishSweepForTest()
	checkTags(t, f)
}

// TestRotationWaitsForConverters holds a shared-mode conversion between its use check and its
// compare-and-swap (by announcing it in the slot's inflight counter, as convert does) and checks
// that a rotation reusing that slot bumps the use but publishes nothing until the conversion is
// over: no writer can then see the new use while a conversion for the old one is pending.
func TestRotationWaitsForConverters(t *testing.T) {
	clock := newFakeClock()
	start := clock.Now()
	f := newIn(t, Config{Generations: 2, Interval: time.Second, Capacity: 1000, FalsePositiveRate: 1e-6, Clock: clock.Now}, modes[1])
	f.TestAndAdd(key(70, 0))
	f.AdvanceTo(start.Add(time.Second))
	slot := f.view.Load().active[1] // generation 0, reused by generation 2
	use := f.uses[slot].Load()
	f.inflight[slot].n.Add(1)
	done := make(chan struct{})
	go func() {
		f.AdvanceTo(start.Add(2 * time.Second))
		close(done)
	}()
	for f.uses[slot].Load() == use {
		runtime.Gosched()
	}
	if e := f.view.Load().epoch; e != 1 {
		t.Fatalf("the rotation published generation %d while a conversion of the reused slot was pending", e)
	}
	f.inflight[slot].n.Add(-1)
	<-done
	if v := f.view.Load(); v.epoch != 2 || v.cur != slot {
		t.Fatalf("after the conversion: generation %d in slot %d, want 2 in slot %d", v.epoch, v.cur, slot)
	}
}

// TestRestoreMidSweep snapshots a filter whose reused slot is half swept and partly rewritten, and
// checks that the restored filter answers exactly as the original for present, expired and absent
// keys, and that every restored word carries its slot's tag.
func TestRestoreMidSweep(t *testing.T) {
	for _, m := range []mode{modes[1], modes[3]} {
		t.Run(m.name, func(t *testing.T) {
			clock := newFakeClock()
			start := clock.Now()
			const perGen = 20_000
			cfg := Config{Generations: 3, Interval: time.Second, Capacity: perGen, FalsePositiveRate: 1e-4, Seed: 5, Clock: clock.Now}
			f := newIn(t, cfg, m)
			for g := range uint64(4) {
				clock.Set(start.Add(time.Duration(g) * time.Second))
				f.AdvanceTo(clock.Now()) // generation 3 reuses generation 0's slot
				n := uint64(perGen)
				if g == 3 {
					f.sweepStep(f.groups / 2)
					n = perGen / 50 // few enough to leave stale words
				}
				addKeys(f, 80+g, n)
			}
			if f.sweepSlot < 0 || staleWords(f, f.sweepSlot) == 0 {
				t.Fatal("setup: the snapshot should catch a sweep in progress")
			}
			var buf bytes.Buffer
			meta, _, err := f.WriteSnapshot(&buf)
			if err != nil {
				t.Fatal(err)
			}
			cfg.SingleWriter = !m.single // the mode is not part of the snapshot
			r, err := Restore(cfg, meta, &buf)
			if err != nil {
				t.Fatal(err)
			}
			checkTags(t, r)
			for ns := uint64(80); ns <= 84; ns++ { // 80 expired, 81-83 live, 84 never added
				for i := range uint64(perGen) {
					if a, b := f.Test(key(ns, i)), r.Test(key(ns, i)); a != b {
						t.Fatalf("key %d/%d: original says %v, restored %v", ns, i, a, b)
					}
				}
			}
			if got := seenKeys(r, 83, perGen/50); got != perGen/50 {
				t.Fatalf("restored: %d of %d keys of the half-swept generation seen", got, perGen/50)
			}
		})
	}
}

// TestPatternUniform checks the bit positions probes draw, for the layouts sizing uses at 1e-3
// and 1e-6: none in a tag bit; in sector 0, one word, uniformly chosen, with 1 to FirstBits bits;
// in sector i ≥ 1, 1 to its share of the other bits; and every position of a sector 0 word and of
// a further sector equally likely (within 5 standard deviations over 300k keys).
func TestPatternUniform(t *testing.T) {
	for _, p := range []float64{1e-3, 1e-6} {
		sz, err := Size(Config{Generations: 8, Interval: time.Minute, Capacity: 1_000_000, FalsePositiveRate: p})
		if err != nil {
			t.Fatal(err)
		}
		b := newBlocks(1, 1, layoutParams{sectors: sz.Sectors, k: sz.K, first: sz.FirstBits}, false)
		counts := make([][UsableSectorBits]int, sz.Sectors) // sector 0: word·wordBits + bit
		const keys = 300_000
		for i := range uint64(keys) {
			var pr probe
			pr.tag = (i*0x9e3779b97f4a7c15)&tagMask | 1
			b.fillPattern(&pr)
			for sec := range sz.Sectors {
				n := 0
				for w := range sectorWords {
					x := pr.mask[sec*sectorWords+w]
					if x&tagBit != 0 {
						t.Fatalf("a pattern uses the tag bit of word %d", w)
					}
					if sec == 0 && w != int(pr.w0) && x != 0 {
						t.Fatalf("sector 0: bits in word %d, the key's word is %d", w, pr.w0)
					}
					for ; x != 0; x &= x - 1 { // each set bit
						counts[sec][w*wordBits+bits.TrailingZeros64(x)]++
						n++
					}
				}
				if n > b.ks[sec] || n == 0 {
					t.Fatalf("sector %d has %d bits, want 1 to %d", sec, n, b.ks[sec])
				}
			}
		}
		for sec, c := range counts {
			var total float64
			for _, n := range c {
				total += float64(n)
			}
			mean := total / UsableSectorBits
			for pos, n := range c {
				if d := math.Abs(float64(n) - mean); d > 5*math.Sqrt(mean) {
					t.Errorf("p=%g sector %d position %d: %d hits, mean %.0f", p, sec, pos, n, mean)
				}
			}
		}
	}
}
