package window

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newEventFilter returns a filter for event time in mode m with N generations of one hour,
// whose origin is base.
func newEventFilter(t testing.TB, n int, m mode, base time.Time) *Filter {
	t.Helper()
	return newIn(t, Config{Generations: n, Interval: time.Hour, Capacity: 10_000, FalsePositiveRate: 1e-9,
		Clock: func() time.Time { return base }}, m)
}

// TestEventTimeGenerations checks the event-time semantics in every mode: in-order records go to
// the current generation, out-of-order ones to their own generation and expire by their own time,
// late ones are reported and not added, and records ahead of the filter go to the current one.
func TestEventTimeGenerations(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(h, m int) time.Time { return base.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	type op struct {
		key        uint64
		at         time.Time
		seen, late bool
	}
	steps := []struct {
		advance time.Time
		ops     []op
		present []uint64 // keys Test must see after the step
		absent  []uint64 // keys Test must not see after the step
	}{
		{advance: at(5, 0), ops: []op{
			{key: 1, at: at(5, 30)},             // in order: generation 5
			{key: 1, at: at(5, 40), seen: true}, // a re-send
			{key: 2, at: at(3, 10)},             // out of order: generation 3
			{key: 2, at: at(5, 50), seen: true}, // judged against generation 3
			{key: 3, at: at(1, 59), late: true}, // before the oldest live generation (2)
			{key: 4, at: at(9, 0)},              // ahead of the filter: the current generation (5)
			{key: 5, at: at(2, 0)},              // the oldest live generation
		}, present: []uint64{1, 2, 4, 5}, absent: []uint64{3}},
		{advance: at(6, 30), present: []uint64{1, 2, 4}, absent: []uint64{5}},
		{advance: at(7, 0), present: []uint64{1, 4}, absent: []uint64{2}}, // generation 3 expired
		{advance: at(8, 59), ops: []op{
			{key: 1, at: at(8, 59), seen: true}, // generation 5 is live until generation 9
			{key: 2, at: at(8, 0)},              // generation 3 is gone: new again
		}, present: []uint64{1, 2}},
		// Key 4 went to the current generation (5) when it came ahead of the filter.
		{advance: at(9, 0), present: []uint64{2}, absent: []uint64{1, 4}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			f := newEventFilter(t, 4, m, base)
			for i, st := range steps {
				f.AdvanceEventTo(st.advance)
				for _, o := range st.ops {
					seen, late := f.TestAndAddAt(key(1, o.key), o.at)
					if seen != o.seen || late != o.late {
						t.Fatalf("step %d: TestAndAddAt(key %d, %s) = seen %v, late %v; want %v, %v",
							i, o.key, o.at.Format("15:04"), seen, late, o.seen, o.late)
					}
				}
				for _, k := range st.present {
					if !f.Test(key(1, k)) {
						t.Errorf("step %d (advanced to %s): key %d missing", i, st.advance.Format("15:04"), k)
					}
				}
				for _, k := range st.absent {
					if f.Test(key(1, k)) {
						t.Errorf("step %d (advanced to %s): key %d present", i, st.advance.Format("15:04"), k)
					}
				}
			}
			f.finishSweepForTest()
			checkTags(t, f)
		})
	}
}

// TestAdvanceEventToKeepsEveryGeneration checks that AdvanceEventTo leaves the whole window live
// after a jump shorter than the window, and only the new generation after a longer one.
func TestAdvanceEventToKeepsEveryGeneration(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		to, oldest time.Duration
	}{
		{to: 2 * time.Hour, oldest: 0},                // generations 0, 1, 2
		{to: 3*time.Hour + time.Minute, oldest: 0},    // 0 … 3
		{to: 5 * time.Hour, oldest: 2 * time.Hour},    // 2 … 5
		{to: 100 * time.Hour, oldest: 97 * time.Hour}, // a jump beyond the window
	} {
		f := newEventFilter(t, 4, modes[2], base)
		f.AdvanceEventTo(base.Add(tt.to))
		if got := f.OldestGenerationStart(); !got.Equal(base.Add(tt.oldest)) {
			t.Errorf("advanced to +%v: oldest live generation starts at +%v, want +%v", tt.to, got.Sub(base), tt.oldest)
		}
		want := int(min(tt.to/time.Hour, 3)) + 1
		if got := len(f.view.Load().active); got != want {
			t.Errorf("advanced to +%v: %d live generations, want %d", tt.to, got, want)
		}
		if got := f.CurrentGenerationStart(); !got.Equal(f.GenerationStart(base.Add(tt.to))) {
			t.Errorf("advanced to +%v: current generation starts at %v", tt.to, got)
		}
	}
}

// TestEventTimeSkippedGeneration checks where a record goes when its generation was skipped by a
// rotation with AdvanceTo: to the next live generation, so that it is kept at least as long as
// its own would have been.
func TestEventTimeSkippedGeneration(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := newEventFilter(t, 4, modes[0], base)
	f.AdvanceTo(base.Add(time.Hour))
	f.AdvanceTo(base.Add(3 * time.Hour)) // live: 3, 1
	if seen, late := f.TestAndAddAt(key(2, 1), base.Add(2*time.Hour)); seen || late {
		t.Fatalf("record in the skipped generation: seen %v, late %v", seen, late)
	}
	f.AdvanceEventTo(base.Add(5 * time.Hour)) // generation 1 expires; 3 stays
	if !f.Test(key(2, 1)) {
		t.Fatal("record of the skipped generation 2 expired with generation 1")
	}
}

// TestEventTimeSkippedIntoSweptSlot sends records of a skipped generation to the current one
// while its slot's sweep is still pending (the lazy modes: words of the slot's previous use are
// still there), and checks that every one is seen afterwards, before and after the sweep.
func TestEventTimeSkippedIntoSweptSlot(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, m := range modes {
		f := newEventFilter(t, 3, m, base)
		addKeys(f, 3, 2_000) // generation 0, whose slot is reused below
		f.AdvanceTo(base.Add(time.Hour))
		f.AdvanceTo(base.Add(2 * time.Hour))
		f.AdvanceTo(base.Add(4 * time.Hour)) // live: 4 (slot of 0, swept lazily), 2; 3 skipped
		for i := range uint64(2_000) {
			if seen, late := f.TestAndAddAt(key(4, i), base.Add(3*time.Hour)); seen || late {
				t.Fatalf("%s: record %d of the skipped generation: seen %v, late %v", m.name, i, seen, late)
			}
		}
		if got := seenKeys(f, 4, 2_000); got != 2_000 {
			t.Errorf("%s: %d of 2000 records of the skipped generation seen", m.name, got)
		}
		f.finishSweepForTest()
		if got := seenKeys(f, 4, 2_000); got != 2_000 {
			t.Errorf("%s: after the sweep, %d of 2000 records seen", m.name, got)
		}
	}
}

// TestEventTimeExactlyOneWinner offers every fresh key, each stamped in one of the live
// generations, from several goroutines at once in shared mode, and checks the outcome against a
// sequential reference: exactly one winner per key, and each key in the generation of its own
// time, so that it expires exactly when that generation does.
func TestEventTimeExactlyOneWinner(t *testing.T) {
	workers := max(8, 4*runtime.GOMAXPROCS(0))
	keys := 100_000
	if raceEnabled {
		keys = 10_000
	}
	const n = 4
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := mustNew(t, Config{Generations: n, Interval: time.Hour, Capacity: uint64(keys), FalsePositiveRate: 1e-9,
		Clock: func() time.Time { return base }})
	f.AdvanceEventTo(base.Add(3 * time.Hour)) // live: 0 … 3
	rng := rand.New(rand.NewPCG(3, 4))
	gen := make([]int, keys) // the reference: each key's generation
	for i := range gen {
		gen[i] = rng.IntN(n)
	}
	stamp := func(i int) time.Time {
		return base.Add(time.Duration(gen[i])*time.Hour + time.Duration(i)*time.Millisecond%time.Hour)
	}
	winners := raceOffers(workers, keys, func(w int) int { return w * 7 }, func(i int) bool {
		seen, late := f.TestAndAddAt(key(9, uint64(i)), stamp(i))
		if late {
			t.Errorf("key %d late", i)
		}
		return !seen && !late
	})
	for i, c := range winners {
		if c != 1 {
			t.Fatalf("key %d (generation %d) had %d winners", i, gen[i], c)
		}
	}
	// Expire one generation at a time: the keys of the expired generation go, the others stay.
	for g := range n {
		f.AdvanceEventTo(base.Add(time.Duration(n+g) * time.Hour))
		for i := range keys {
			if want := gen[i] > g; f.Test(key(9, uint64(i))) != want {
				t.Fatalf("after generation %d expired: key %d of generation %d seen = %v", g, i, gen[i], !want)
			}
		}
	}
}

// TestEventTimeRacesRotation offers stamped keys from several goroutines while another rotates
// the filter by event time: no key may have two winners, and a key stamped in a generation that
// stays live must be seen afterwards.
func TestEventTimeRacesRotation(t *testing.T) {
	workers := 4
	keys := 40_000
	if raceEnabled {
		keys = 4_000
	}
	const n = 4
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := mustNew(t, Config{Generations: n, Interval: time.Hour, Capacity: uint64(keys), FalsePositiveRate: 1e-9,
		Clock: func() time.Time { return base }})
	f.AdvanceEventTo(base.Add(3 * time.Hour))
	winners := make([]atomic.Int32, keys)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var rot sync.WaitGroup
	rot.Go(func() {
		for h := 4; h < 6; h++ {
			select {
			case <-stop:
				return
			default:
			}
			runtime.Gosched()
			f.AdvanceEventTo(base.Add(time.Duration(h) * time.Hour))
		}
	})
	for w := range workers {
		wg.Go(func() {
			for j := range keys {
				i := (j + w*13) % keys
				ts := base.Add(time.Duration(3+i%3) * time.Hour) // generations 3, 4 and 5
				if seen, late := f.TestAndAddAt(key(5, uint64(i)), ts); !seen && !late {
					winners[i].Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	rot.Wait()
	f.AdvanceEventTo(base.Add(5 * time.Hour)) // live: 2 … 5
	for i := range winners {
		if c := winners[i].Load(); c != 1 {
			t.Fatalf("key %d had %d winners", i, c)
		}
		if !f.Test(key(5, uint64(i))) {
			t.Fatalf("key %d stamped in a live generation is missing", i)
		}
	}
	checkTags(t, f)
}

// TestEventTimeZeroAllocs checks that testAndAddHashAt allocates nothing on either path.
func TestEventTimeZeroAllocs(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, m := range []mode{modes[0], modes[2]} {
		f := newEventFilter(t, 4, m, base)
		f.AdvanceEventTo(base.Add(3 * time.Hour))
		var i uint64
		allocs := testing.AllocsPerRun(1000, func() {
			i++
			f.testAndAddHashAt(i*0x9e3779b97f4a7c15, base.Add(time.Duration(i%4)*time.Hour))
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per testAndAddHashAt", m.name, allocs)
		}
	}
}

// BenchmarkEventTime compares testAndAddHashAt with testAndAddHash on the same filter layout, in
// the same run: "processing" is testAndAddHash, "event" testAndAddHashAt with a stamp in the
// current generation (in-order data, what a stream mostly holds), "event-old" one stamped in an
// older live generation. Each operation offers a fresh key; single is one writer
// (Config.SingleWriter), shared runs RunParallel on a shared filter. Quote the ratio:
//
//	go test ./window -run '^$' -bench EventTime -count 5
func BenchmarkEventTime(b *testing.B) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := base.Add(3*time.Hour + 30*time.Minute)
	old := base.Add(time.Hour + 30*time.Minute)
	for _, single := range []bool{true, false} {
		name := map[bool]string{true: "single", false: "shared"}[single]
		for _, op := range []string{"processing", "event", "event-old"} {
			b.Run(name+"/"+op, func(b *testing.B) {
				f := mustNew(b, Config{Generations: 4, Interval: time.Hour, Capacity: 1 << 22, FalsePositiveRate: 1e-3,
					SingleWriter: single, Clock: func() time.Time { return base }})
				f.AdvanceEventTo(now)
				add := func(h uint64) bool { return f.testAndAddHash(h) }
				switch op {
				case "event":
					add = func(h uint64) bool { s, _ := f.testAndAddHashAt(h, now); return s }
				case "event-old":
					add = func(h uint64) bool { s, _ := f.testAndAddHashAt(h, old); return s }
				}
				b.ReportAllocs()
				var next atomic.Uint64
				if single {
					for i := 0; b.Loop(); i++ {
						add(uint64(i) * 0x9e3779b97f4a7c15)
					}
					return
				}
				b.RunParallel(func(pb *testing.PB) {
					i := next.Add(1) << 40
					for pb.Next() {
						i++
						add(i * 0x9e3779b97f4a7c15)
					}
				})
			})
		}
	}
}

// TestEventTimeHelpOld stalls a claimant of an older generation right after its claim (the claim
// word is set by hand) and checks that the next writer to the group completes the insertion into
// that generation, releases the claim, and is then told the key is seen; and that a claim naming
// a generation that expired meanwhile is released without adding the key anywhere.
func TestEventTimeHelpOld(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name    string
		claimed uint64 // the generation the stalled claimant targets
		seen    bool   // the helper's own answer for the same key
	}{
		{"live", 1, true},
		{"expired", 0, false}, // 0 ≡ 4 mod N: the helper must not write it into the current one
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newEventFilter(t, 4, modes[0], base)
			f.AdvanceEventTo(base.Add(4 * time.Hour)) // live: 1 … 4
			k := key(7, 1)
			h := f.hash(k)
			var p probe
			f.makeProbe(&p, h, f.view.Load(), false, false)
			c := &f.claims[p.group]
			cw := c.Load()
			c.Store(cw | p.tag | f.claimGen(tt.claimed))
			seen, late := f.testAndAddHashAt(h, base.Add(time.Hour+30*time.Minute))
			if seen != tt.seen || late {
				t.Fatalf("helper: seen %v, late %v; want seen %v", seen, late, tt.seen)
			}
			if got := c.Load(); got&(tagMask|f.claimGenMask()) != 0 || got == cw {
				t.Fatalf("claim word %#x after help, was %#x: not released", got, cw)
			}
			f.AdvanceEventTo(base.Add(5 * time.Hour)) // generation 1 expires
			if f.Test(k) {
				t.Fatal("the key outlived generation 1: it was written into a later generation")
			}
		})
	}
}
