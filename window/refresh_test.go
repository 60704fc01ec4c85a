package window

import (
	"bytes"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestRefreshLastSighting is the case on the filter, under an injected clock: on a
// 3 × 1s window, a key re-sent every 1.5s for 7.5s is seen every time after the first with
// refresh (and passes again every window without), and once left alone it is remembered for
// (N-1)·I after its last sighting and forgotten after N·I.
func TestRefreshLastSighting(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			for _, refresh := range []bool{true, false} {
				clk := newFakeClock()
				base := clk.Now()
				f := newIn(t, Config{Generations: 3, Interval: time.Second, Capacity: 1000, FalsePositiveRate: 1e-9, Clock: clk.Now}, m)
				offer := func(at time.Duration) bool {
					clk.Set(base.Add(at))
					f.AdvanceTo(clk.Now())
					if refresh {
						seen, _ := f.TestAndRefresh(key(1, 1))
						return seen
					}
					return f.TestAndAdd(key(1, 1))
				}
				passes := 0
				for at := time.Duration(0); at <= 7500*time.Millisecond; at += 1500 * time.Millisecond {
					if !offer(at) {
						passes++
					}
				}
				if want := map[bool]int{true: 1, false: 3}[refresh]; passes != want {
					t.Errorf("refresh=%v: passed %d times, want %d", refresh, passes, want)
				}
				if !refresh {
					continue
				}
				clk.Set(base.Add(7500*time.Millisecond + 2*time.Second)) // (N-1)·I after the last sighting
				f.AdvanceTo(clk.Now())
				if !f.Test(key(1, 1)) {
					t.Errorf("forgotten (N-1)·I after its last sighting")
				}
				clk.Set(base.Add(7500*time.Millisecond + 3*time.Second)) // N·I after it
				f.AdvanceTo(clk.Now())
				if f.Test(key(1, 1)) {
					t.Errorf("still seen N·I after its last sighting")
				}
			}
		})
	}
}

// TestRefreshWritesOncePerGeneration checks that a key already in the current generation is not
// written again: Stats.Refreshes and the generation's key count move once per generation.
func TestRefreshWritesOncePerGeneration(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			clk := newFakeClock()
			f := newIn(t, Config{Generations: 4, Interval: time.Second, Capacity: 1000, FalsePositiveRate: 1e-9, Clock: clk.Now}, m)
			if seen, r := f.TestAndRefresh(key(2, 1)); seen || r {
				t.Fatalf("new key: seen %v, refreshed %v", seen, r)
			}
			for range 5 {
				if seen, r := f.TestAndRefresh(key(2, 1)); !seen || r {
					t.Fatalf("key of the current generation: seen %v, refreshed %v; want seen, not refreshed", seen, r)
				}
			}
			if n := refreshSlotKeys(f, f.view.Load().cur); n != 1 {
				t.Fatalf("current generation counted %d keys, want 1", n)
			}
			for g := 1; g <= 3; g++ {
				clk.Set(clk.Now().Add(time.Second))
				f.AdvanceTo(clk.Now())
				for j := range 3 {
					seen, r := f.TestAndRefresh(key(2, 1))
					if !seen || r != (j == 0) {
						t.Fatalf("generation %d, offer %d: seen %v, refreshed %v", g, j, seen, r)
					}
				}
				if n := refreshSlotKeys(f, f.view.Load().cur); n != 1 {
					t.Fatalf("generation %d counted %d keys, want 1", g, n)
				}
			}
			if got := f.Stats().Refreshes; got != 3 {
				t.Errorf("Stats.Refreshes = %d, want 3", got)
			}
		})
	}
}

// TestRefreshMatchesReference drives a single-writer filter and a reference of last sightings
// with the same random offers and rotations: a key is seen exactly while the generation it was
// last armed in is live (the rate is 1e-12 over a few thousand keys: no false positive expected).
func TestRefreshMatchesReference(t *testing.T) {
	const n = 4
	clk := newFakeClock()
	base := clk.Now()
	f := newIn(t, Config{Generations: n, Interval: time.Second, Capacity: 5000, FalsePositiveRate: 1e-12, Clock: clk.Now}, modes[2])
	armed := map[uint64]int{} // key -> generation it was last armed in
	rng := rand.New(rand.NewPCG(5, 6))
	epoch := 0
	for step := range 40_000 {
		if step%1000 == 999 {
			epoch += 1 + rng.IntN(2)
			clk.Set(base.Add(time.Duration(epoch) * time.Second))
			f.AdvanceTo(clk.Now())
		}
		k := rng.Uint64N(3000)
		a, known := armed[k]
		want := known && a > epoch-n
		seen, refreshed := f.TestAndRefresh(key(3, k))
		if seen != want {
			t.Fatalf("step %d, generation %d: key %d (armed in %d, known %v) seen = %v, want %v", step, epoch, k, a, known, seen, want)
		}
		if refreshed != (want && a != epoch) {
			t.Fatalf("step %d: key %d refreshed = %v, armed in %d of %d", step, k, refreshed, a, epoch)
		}
		armed[k] = epoch
	}
}

// TestRefreshExactlyOneWinner offers the same keys from many goroutines with TestAndRefresh (some
// with TestAndAdd) while another goroutine rotates the filter: every key has exactly one winner,
// whatever re-arms happen meanwhile.
func TestRefreshExactlyOneWinner(t *testing.T) {
	workers := max(8, 4*runtime.GOMAXPROCS(0))
	keys := 50_000
	if raceEnabled {
		keys = 5_000
	}
	for _, lazy := range []bool{false, true} {
		clk := newFakeClock()
		f := newIn(t, Config{Generations: 4, Interval: time.Second, Capacity: uint64(keys), FalsePositiveRate: 1e-9, Clock: clk.Now},
			mode{single: false, lazy: lazy})
		// Half of the keys are seen before the race, in the generation that is the oldest by its
		// end, so that the race re-arms them while rotations retire their generation.
		for i := 0; i < keys; i += 2 {
			f.TestAndAdd(key(4, uint64(i)))
		}
		stop := make(chan struct{})
		var rot sync.WaitGroup
		rot.Go(func() {
			for g := 1; g <= 2; g++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
				clk.Set(clk.Now().Add(time.Second))
				f.AdvanceTo(clk.Now())
			}
		})
		winners := raceOffers(workers, keys, func(w int) int { return w * 13 }, func(i int) bool {
			if i%5 == 0 {
				return !f.TestAndAdd(key(4, uint64(i)))
			}
			seen, _ := f.TestAndRefresh(key(4, uint64(i)))
			return !seen
		})
		close(stop)
		rot.Wait()
		for i, c := range winners {
			if want := int32(i % 2); c != want {
				t.Fatalf("lazy=%v: key %d had %d winners, want %d", lazy, i, c, want)
			}
		}
	}
}

// TestRefreshEventTime checks TestAndRefreshAt: a seen key is re-armed in the generation of the
// record's timestamp, not the current one, and only if no newer generation holds it; a late
// record re-arms nothing.
func TestRefreshEventTime(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			f := newEventFilter(t, 4, m, base)
			at := func(h float64) time.Time { return base.Add(time.Duration(h * float64(time.Hour))) }
			f.AdvanceEventTo(at(10)) // live: generations 7 … 10
			k := key(5, 1)
			if seen, late, _ := f.TestAndRefreshAt(k, at(7.5)); seen || late {
				t.Fatalf("new key stamped in generation 7: seen %v, late %v", seen, late)
			}
			// Stamped in generation 8: re-armed there, not in the current generation 10.
			if seen, late, r := f.TestAndRefreshAt(k, at(8.5)); !seen || late || !r {
				t.Fatalf("stamped in generation 8: seen %v, late %v, refreshed %v", seen, late, r)
			}
			// Stamped in generation 7 again: generation 8 is newer and holds it.
			if _, _, r := f.TestAndRefreshAt(k, at(7.2)); r {
				t.Fatalf("re-armed in generation 7 although generation 8 holds the key")
			}
			if _, late, r := f.TestAndRefreshAt(k, at(3)); late || r {
				t.Fatalf("late record of a seen key: late %v, refreshed %v; want seen, nothing written", late, r)
			}
			if seen, late, r := f.TestAndRefreshAt(key(5, 2), at(3)); seen || !late || r {
				t.Fatalf("late new key: seen %v, late %v, refreshed %v", seen, late, r)
			}
			f.AdvanceEventTo(at(11)) // generation 7 expires: the key lives on in generation 8
			if !f.Test(k) {
				t.Fatalf("forgotten with generation 7 although re-armed in generation 8")
			}
			f.AdvanceEventTo(at(12)) // generation 8 expires
			if f.Test(k) {
				t.Fatalf("still seen after generation 8, its last arming, expired: it was written to the current generation")
			}
		})
	}
}

// TestRefreshSnapshot checks that a refreshed filter snapshots and restores like any other: the
// restored filter remembers the re-armed key until its re-arm expires.
func TestRefreshSnapshot(t *testing.T) {
	clk := newFakeClock()
	cfg := Config{Generations: 3, Interval: time.Second, Capacity: 1000, FalsePositiveRate: 1e-9, Clock: clk.Now, SingleWriter: true}
	f := mustNew(t, cfg)
	f.TestAndRefresh(key(6, 1))
	for range 2 {
		clk.Set(clk.Now().Add(time.Second))
		f.AdvanceTo(clk.Now())
		f.TestAndRefresh(key(6, 1))
	}
	var buf bytes.Buffer
	var meta Meta
	err := f.Snapshot(func(m Meta, writeData func(io.Writer) (int64, error)) error {
		meta = m
		_, err := writeData(&buf)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	g, err := Restore(cfg, meta, &buf)
	if err != nil {
		t.Fatal(err)
	}
	clk.Set(clk.Now().Add(2 * time.Second)) // the first sighting's generation is long gone
	g.AdvanceTo(clk.Now())
	if !g.Test(key(6, 1)) {
		t.Fatal("the restored filter forgot the key re-armed 2s ago")
	}
}

func TestRefreshZeroAllocs(t *testing.T) {
	f := newIn(t, Config{Generations: 4, Interval: time.Hour, Capacity: 1000, FalsePositiveRate: 1e-6}, modes[0])
	k := key(7, 1)
	if n := testing.AllocsPerRun(100, func() { f.TestAndRefresh(k); f.TestAndRefreshAt(k, time.Now()) }); n != 0 {
		t.Errorf("TestAndRefresh allocates %v times", n)
	}
}

// refreshSlotKeys returns the keys slot's stage 0 was offered: the sum of its shards' counts.
func refreshSlotKeys(f *Filter, slot int) uint64 {
	var sum uint64
	for i := slot << f.shardBits; i < (slot+1)<<f.shardBits; i++ {
		sum += f.fill[i].n
	}
	return sum
}

// BenchmarkRefresh compares TestAndRefresh with TestAndAdd on a single-writer filter small
// enough to stay in cache, so that the difference is the work, not the memory: "new" offers
// unique keys; "dup" offers keys of an older generation, each re-armed in the current one by its
// first offer and found there afterwards (a producer that keeps re-sending).
//
//	go test ./window -run '^$' -bench 'Refresh$' -count 6
func BenchmarkRefresh(b *testing.B) {
	const pool = 1 << 14
	for _, load := range []string{"new", "dup"} {
		for _, method := range []string{"TestAndAdd", "TestAndRefresh"} {
			b.Run(load+"/"+method, func(b *testing.B) {
				clk := newFakeClock()
				f := mustNew(b, Config{Generations: 4, Interval: time.Second, Capacity: 1 << 20, FalsePositiveRate: 1e-3,
					Clock: clk.Now, SingleWriter: true})
				for i := range pool {
					f.TestAndAdd(key(8, uint64(i)))
				}
				clk.Set(clk.Now().Add(time.Second))
				f.AdvanceTo(clk.Now())
				keys := make([][]byte, pool)
				for i := range keys {
					keys[i] = key(8, uint64(i))
				}
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					k := keys[i%pool]
					if load == "new" {
						k = key(9, uint64(i))
					}
					if method == "TestAndAdd" {
						f.TestAndAdd(k)
					} else {
						f.TestAndRefresh(k)
					}
				}
			})
		}
	}
}

// TestRefreshChangesVersion checks that a re-arm is an insertion for incremental checkpoints too:
// a seen key re-armed in a sealed generation (event time) changes that generation's version and
// leaves the others' as they were, so that a save that reuses every generation whose version is
// unchanged, and exports the rest, restores a filter that remembers the re-arm.
func TestRefreshChangesVersion(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			at := func(h float64) time.Time { return base.Add(time.Duration(h * float64(time.Hour))) }
			cfg := Config{Generations: 4, Interval: time.Hour, Capacity: 10_000, FalsePositiveRate: 1e-9,
				Clock: func() time.Time { return base }}
			f := newIn(t, cfg, m)
			cfg.SingleWriter = m.single
			f.AdvanceEventTo(at(10)) // live: generations 7 … 10
			k := key(7, 1)
			if seen, late, _ := f.TestAndRefreshAt(k, at(7.5)); seen || late {
				t.Fatalf("new key stamped in generation 7: seen %v, late %v", seen, late)
			}
			before, oldGens := exportAll(t, f)
			if seen, late, r := f.TestAndRefreshAt(k, at(8.5)); !seen || late || !r {
				t.Fatalf("stamped in generation 8: seen %v, late %v, refreshed %v", seen, late, r)
			}
			after, newGens := exportAll(t, f)
			gens := map[uint64][]uint64{}
			for s, e := range after.SlotEpochs {
				if e < 0 {
					continue
				}
				was := versionIn(before, uint64(e))
				if was.Unchanged(after.Versions[s]) {
					gens[uint64(e)] = oldGens[uint64(e)] // what an incremental save references again
				} else {
					gens[uint64(e)] = newGens[uint64(e)]
				}
				if changed := !was.Unchanged(after.Versions[s]); changed != (e == 8 || e == 10) {
					t.Errorf("generation %d: changed %v after a re-arm in generation 8", e, changed)
				}
			}
			r, err := restoreFromGens(cfg, after, gens)
			if err != nil {
				t.Fatal(err)
			}
			r.AdvanceEventTo(at(11)) // generation 7 expires: the key lives on in generation 8
			if !r.Test(k) {
				t.Fatal("the restored filter lost the re-arm in generation 8: its version did not change")
			}
		})
	}
}

// versionIn returns the version of generation epoch in m.
func versionIn(m Meta, epoch uint64) GenerationVersion {
	for s, e := range m.SlotEpochs {
		if e >= 0 && uint64(e) == epoch {
			return m.Versions[s]
		}
	}
	return GenerationVersion{}
}
