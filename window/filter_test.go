package window

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestExpiryBounds checks both edges of the guarantee under an injected clock: a key added at t is
// seen at every rotation up to t+(N-1)·I and gone from t+N·I on, wherever t falls in its interval.
func TestExpiryBounds(t *testing.T) {
	const interval = time.Minute
	for _, m := range modes {
		for _, n := range []int{1, 2, 8} {
			for _, offset := range []time.Duration{0, time.Nanosecond, interval / 2, interval - time.Nanosecond} {
				clock := newFakeClock()
				f := newIn(t, Config{Generations: n, Interval: interval, Capacity: 1000, FalsePositiveRate: 1e-9, Clock: clock.Now}, m)
				origin := clock.Now()
				// Advance into some later generation so that the test does not start at the
				// origin, and every slot has been used before.
				base := origin.Add(time.Duration(n+3) * interval)
				tAdd := base.Add(offset)
				clock.Set(tAdd)
				f.AdvanceTo(tAdd)
				k := key(1, uint64(n)*1000+uint64(offset))
				if f.TestAndAdd(k) {
					t.Fatalf("%s N=%d offset=%v: fresh key reported seen", m.name, n, offset)
				}
				// Must be seen up to and including t+(N-1)·I.
				for step := time.Duration(0); step <= time.Duration(n-1)*interval; step += interval / 4 {
					f.AdvanceTo(tAdd.Add(step))
					if !f.Test(k) {
						t.Fatalf("%s N=%d offset=%v: key forgotten at t+%v, before t+(N-1)·I", m.name, n, offset, step)
					}
				}
				// Must be gone at t+N·I (and later).
				for _, after := range []time.Duration{time.Duration(n) * interval, time.Duration(n)*interval + interval/3, 10 * time.Duration(n) * interval} {
					f.AdvanceTo(tAdd.Add(after))
					if f.Test(k) {
						t.Fatalf("%s N=%d offset=%v: key still seen at t+%v, after t+N·I", m.name, n, offset, after)
					}
				}
			}
		}
	}
}

// TestExpiryBoundsSynctest runs the background rotation goroutine on the virtual clock of
// testing/synctest and checks the same two bounds.
func TestExpiryBoundsSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 10 * time.Second
		const n = 4
		f := mustNew(t, Config{Generations: n, Interval: interval, Capacity: 1000, FalsePositiveRate: 1e-9})
		f.Start()
		defer f.Close()
		time.Sleep(interval/2 + 3*interval) // add in the middle of generation 3
		k := []byte("synctest-key")
		if f.TestAndAdd(k) {
			t.Fatal("fresh key reported seen")
		}
		time.Sleep(time.Duration(n-1)*interval - time.Nanosecond)
		synctest.Wait()
		if !f.Test(k) {
			t.Fatal("key forgotten before t+(N-1)·I")
		}
		time.Sleep(interval + time.Nanosecond) // now at t + N·I
		synctest.Wait()
		if f.Test(k) {
			t.Fatal("key still seen at t+N·I")
		}
		if got := f.Stats().Rotations; got != 3+n {
			t.Errorf("rotations = %d, want %d", got, 3+n)
		}
	})
}

// TestCatchUpAfterIdle checks that one big jump of the clock expires everything older than the
// window and keeps what is inside it.
func TestCatchUpAfterIdle(t *testing.T) {
	clock := newFakeClock()
	const interval = time.Second
	f := mustNew(t, Config{Generations: 3, Interval: interval, Capacity: 1000, FalsePositiveRate: 1e-9, Clock: clock.Now})
	start := clock.Now()
	old, recent := key(2, 1), key(2, 2)
	f.TestAndAdd(old)
	f.AdvanceTo(start.Add(5 * interval))
	f.TestAndAdd(recent)
	f.AdvanceTo(start.Add(7 * interval)) // recent is 2 generations old: still live with N=3
	if f.Test(old) || !f.Test(recent) {
		t.Fatalf("after a 2-interval jump: old=%v recent=%v, want false true", f.Test(old), f.Test(recent))
	}
	f.AdvanceTo(start.Add(1000 * interval))
	if f.Test(recent) {
		t.Fatal("key survived a jump far past the window")
	}
	if f.TestAndAdd(recent) {
		t.Fatal("re-adding an expired key reported it seen")
	}
	st := f.Stats()
	if st.Rotations != 1000 || len(st.Generations) != 1 {
		t.Fatalf("rotations=%d live generations=%d, want 1000 and 1", st.Rotations, len(st.Generations))
	}
	f.AdvanceTo(start) // going back does nothing
	if !f.Test(recent) {
		t.Fatal("a clock step back changed the filter")
	}
}

// TestNoFalseNegativesInWindow adds keys across many rotations and checks that every key inside
// its guaranteed window is always seen.
func TestNoFalseNegativesInWindow(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			clock := newFakeClock()
			const interval, n = time.Second, 5
			perGen := uint64(20_000)
			if raceEnabled {
				perGen = 4_000
			}
			f := newIn(t, Config{Generations: n, Interval: interval, Capacity: perGen, FalsePositiveRate: 1e-4, Clock: clock.Now}, m)
			start := clock.Now()
			added := make([]bool, 3*n*perGen)
			for g := uint64(0); g < 3*n; g++ {
				f.AdvanceTo(start.Add(time.Duration(g) * interval))
				for i := range perGen {
					// A key reported seen (a false positive) was not added, so only added keys count.
					added[g*perGen+i] = !f.TestAndAdd(key(g, i))
				}
				// Every generation from g-(N-1) to g must be fully present.
				for old := max(int64(g)-(n-1), 0); old <= int64(g); old++ {
					for i := uint64(0); i < perGen; i += 7 {
						if added[uint64(old)*perGen+i] && !f.Test(key(uint64(old), i)) {
							t.Fatalf("generation %d key %d missing at generation %d", old, i, g)
						}
					}
				}
			}
			checkTags(t, f)
		})
	}
}

// TestExactlyOneWinner offers every fresh key from several goroutines at once and checks that
// exactly one of them is told the key is new.
func TestExactlyOneWinner(t *testing.T) {
	workers := max(8, 4*runtime.GOMAXPROCS(0))
	keys := 200_000
	if raceEnabled {
		keys = 20_000
	}
	for _, n := range []int{1, 8} {
		// A small filter, so that groups are shared and claims and helping are exercised.
		f := mustNew(t, Config{Generations: n, Interval: time.Hour, Capacity: uint64(keys), FalsePositiveRate: 1e-9})
		// Each worker walks the keys in its own rotation, so that goroutines collide on the same
		// key at the same moment.
		winners := raceOffers(workers, keys, func(w int) int { return w * 7 }, func(i int) bool {
			return !f.TestAndAdd(key(9, uint64(i)))
		})
		zero, many := tallyWinners(winners)
		if many > 0 {
			t.Errorf("N=%d: %d keys had more than one winner", n, many)
		}
		// Zero winners only happens for a false positive; at 1e-9 there should be none.
		if zero > 0 {
			t.Errorf("N=%d: %d keys had no winner", n, zero)
		}
	}
}

// TestExactlyOneWinnerAcrossRotation races the same fresh keys against a rotating filter, also
// with the sweep of the reused slot running concurrently with the writers (lazy), so that
// writers convert stale words while the sweeper does.
func TestExactlyOneWinnerAcrossRotation(t *testing.T) {
	for _, m := range []mode{modes[0], modes[1]} { // shared modes: many writers
		t.Run(m.name, func(t *testing.T) {
			clock := newFakeClock()
			start := clock.Now()
			// N=2 and a few rotations beforehand, so that every slot has been used: the rotations
			// during the race reuse slots full of older keys.
			f := newIn(t, Config{Generations: 2, Interval: time.Second, Capacity: 50_000, FalsePositiveRate: 1e-9, Clock: clock.Now}, m)
			for g := range 3 {
				f.AdvanceTo(start.Add(time.Duration(g) * time.Second))
				for i := range uint64(40_000) {
					f.TestAndAdd(key(11+uint64(g), i))
				}
			}
			stopSweeper := startSweeper(f)
			const workers, keys = 8, 20_000
			winners := make([]atomic.Int32, keys)
			var wg sync.WaitGroup
			stop := make(chan struct{})
			var rot sync.WaitGroup
			rot.Go(func() {
				for g := 3; ; g++ {
					select {
					case <-stop:
						return
					default:
					}
					// Rotate once: with N=2 every key stays within the window.
					if g == 3 {
						f.AdvanceTo(start.Add(time.Duration(g) * time.Second))
					}
					runtime.Gosched()
				}
			})
			for w := range workers {
				wg.Go(func() {
					for j := range keys {
						i := (j + w*13) % keys
						if !f.TestAndAdd(key(10, uint64(i))) {
							winners[i].Add(1)
						}
					}
				})
			}
			wg.Wait()
			close(stop)
			rot.Wait()
			stopSweeper()
			for i := range winners {
				if c := winners[i].Load(); c != 1 {
					t.Fatalf("key %d had %d winners", i, c)
				}
				if !f.Test(key(10, uint64(i))) {
					t.Fatalf("key %d lost", i)
				}
			}
			f.finishSweepForTest()
			checkTags(t, f)
		})
	}
}

// TestSingleWriterOneWinner is the single-writer form of the exactly-one-winner test: one
// goroutine offers every key several times, interleaved, while other goroutines rotate the
// filter, sweep the reused slot, take snapshots and test keys. Every key must be new exactly
// once, and a key the writer has added must never be reported missing by the readers.
func TestSingleWriterOneWinner(t *testing.T) {
	clock := newFakeClock()
	start := clock.Now()
	f := newIn(t, Config{Generations: 2, Interval: time.Second, Capacity: 50_000, FalsePositiveRate: 1e-9, Clock: clock.Now}, modes[3])
	for g := range 3 {
		f.AdvanceTo(start.Add(time.Duration(g) * time.Second))
		for i := range uint64(40_000) {
			f.TestAndAdd(key(21+uint64(g), i))
		}
	}
	stopSweeper := startSweeper(f)
	const keys, offers = 20_000, 3
	var added atomic.Int64 // keys [0, added) are in the filter
	var bg sync.WaitGroup
	stop := make(chan struct{})
	bg.Go(func() { // rotation and snapshots
		f.AdvanceTo(start.Add(3 * time.Second))
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, err := f.WriteSnapshot(io.Discard); err != nil {
				t.Error(err)
				return
			}
		}
	})
	bg.Go(func() { // a reader
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n := added.Load(); n > 0 && !f.Test(key(20, uint64(n-1))) {
				t.Errorf("key %d added by the writer is missing", n-1)
				return
			}
		}
	})
	winners := make([]int, keys)
	for j := range keys * offers {
		i := j % keys
		if !f.TestAndAdd(key(20, uint64(i))) {
			winners[i]++
		}
		if j < keys {
			added.Store(int64(j + 1))
		}
	}
	close(stop)
	bg.Wait()
	stopSweeper()
	for i, c := range winners {
		if c != 1 {
			t.Fatalf("key %d was new %d times", i, c)
		}
	}
	f.finishSweepForTest()
	checkTags(t, f)
}

// model is the sequential reference: an exact set of keys with the generation each was added in.
type model struct {
	added map[string]uint64
	n     uint64
}

func (m *model) seen(k []byte, epoch uint64) bool {
	e, ok := m.added[string(k)]
	return ok && e+m.n > epoch
}

// TestSequentialReference runs the same random operations against the filter and against the
// exact model, one generation at a time, and checks that the filter never misses what the model
// has, that it reports no key new twice, and that its extra answers stay at the false-positive
// rate. In shared mode several goroutines split each batch; in single-writer mode one goroutine
// writes while others test keys the model holds. Every rotation reuses a slot whose sweep runs
// concurrently with the batch.
func TestSequentialReference(t *testing.T) {
	for _, tt := range []struct {
		mode             mode
		writers, readers int
	}{
		{modes[1], 4, 0},
		{modes[3], 1, 2},
	} {
		t.Run(tt.mode.name, func(t *testing.T) {
			testSequentialReference(t, tt.mode, tt.writers, tt.readers)
		})
	}
}

func testSequentialReference(t *testing.T, md mode, writers, readers int) {
	clock := newFakeClock()
	start := clock.Now()
	const n, perGen, gens = 4, 5_000, 12
	const p = 1e-3
	f := newIn(t, Config{Generations: n, Interval: time.Second, Capacity: perGen, FalsePositiveRate: p, Clock: clock.Now}, md)
	m := &model{added: map[string]uint64{}, n: n}
	rng := rand.New(rand.NewPCG(1, 2))
	var falsePos, negatives int
	for g := uint64(0); g < gens; g++ {
		f.AdvanceTo(start.Add(time.Duration(g) * time.Second))
		batch := refBatch(rng, g, n, perGen)
		// Expected answer per distinct key before the batch, from the model.
		before := map[string]bool{}
		for _, k := range batch {
			if _, ok := before[string(k)]; !ok {
				before[string(k)] = m.seen(k, g)
			}
		}
		news := runBatch(t, f, m, g, batch, writers, readers)
		for k, wasSeen := range before {
			got := news[k]
			switch {
			case wasSeen && got != 0:
				t.Fatalf("generation %d: key seen by the model was reported new", g)
			case !wasSeen && got > 1:
				t.Fatalf("generation %d: key reported new %d times", g, got)
			case !wasSeen && got == 0:
				falsePos++ // reported seen, so the filter did not add it; neither does the model
			case !wasSeen:
				m.added[k] = g
			}
			if !wasSeen {
				negatives++
			}
		}
		// Read-only agreement: everything the model holds is seen.
		for k := range m.added {
			if m.seen([]byte(k), g) && !f.Test([]byte(k)) {
				t.Fatalf("generation %d: false negative", g)
			}
		}
	}
	if rate := float64(falsePos) / float64(negatives); rate > 3*p {
		t.Errorf("false positives %d of %d (%.2g), want about %g", falsePos, negatives, rate, p)
	}
	checkTags(t, f)
}

// refBatch returns a batch of keys for generation g: fresh ones, recent repeats, and repeats from
// beyond the window.
func refBatch(rng *rand.Rand, g, n uint64, perGen int) [][]byte {
	batch := make([][]byte, perGen)
	for i := range batch {
		switch r := rng.IntN(10); {
		case r < 6 || g == 0:
			batch[i] = key(100+g, uint64(i))
		case r < 9:
			batch[i] = key(100+g-uint64(rng.IntN(int(min(g, n-1))+1)), uint64(rng.IntN(perGen)))
		default:
			batch[i] = key(100+uint64(rng.IntN(int(g)+1)), uint64(rng.IntN(perGen)))
		}
	}
	return batch
}

// runBatch offers batch to f from writers goroutines, while the pending sweep runs and readers
// goroutines test keys the model holds for generation g, and returns how often each distinct key
// was reported new.
func runBatch(t *testing.T, f *Filter, m *model, g uint64, batch [][]byte, writers, readers int) map[string]int32 {
	var held [][]byte
	for k := range m.added {
		if m.seen([]byte(k), g) {
			held = append(held, []byte(k))
		}
	}
	stopSweeper := startSweeper(f)
	stop := make(chan struct{})
	var rg sync.WaitGroup
	for r := range readers {
		rg.Go(func() {
			for i := r; len(held) > 0; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if k := held[i%len(held)]; !f.Test(k) {
					t.Errorf("generation %d: a reader missed a key the model holds", g)
					return
				}
			}
		})
	}
	counts := make([]map[string]int32, writers)
	var wg sync.WaitGroup
	for w := range writers {
		counts[w] = map[string]int32{}
		wg.Go(func() {
			for i := w; i < len(batch); i += writers {
				if !f.TestAndAdd(batch[i]) {
					counts[w][string(batch[i])]++
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	rg.Wait()
	stopSweeper()
	news := map[string]int32{}
	for _, c := range counts {
		for k, n := range c {
			news[k] += n
		}
	}
	return news
}

func TestZeroAllocs(t *testing.T) {
	for _, m := range modes {
		clock := newFakeClock()
		f := newIn(t, Config{Generations: 8, Interval: time.Minute, Capacity: 1000, FalsePositiveRate: 1e-6, Clock: clock.Now}, m)
		// Reuse a slot, so that the lazy modes run the tag-checking paths.
		f.AdvanceTo(clock.Now().Add(9 * time.Minute))
		k := key(3, 3)
		for name, fn := range map[string]func(){
			"TestAndAdd": func() { f.TestAndAdd(k) },
			"Test":       func() { f.Test(k) },
			"TestAndAddFresh": func() {
				k[0]++
				f.TestAndAdd(k)
			},
		} {
			if a := testing.AllocsPerRun(1000, fn); a != 0 {
				t.Errorf("%s: %s allocates %v times per call", m.name, name, a)
			}
		}
	}
}

func TestStatsTrackLoad(t *testing.T) {
	clock := newFakeClock()
	const capacity = 200_000
	f := mustNew(t, Config{Generations: 2, Interval: time.Minute, Capacity: capacity, FalsePositiveRate: 1e-4, Clock: clock.Now})
	for i := range uint64(capacity) {
		f.TestAndAdd(key(5, i))
	}
	if st := f.Stats(); st.Stages != 0 || st.TotalBytes != f.Sizing().TotalBytes {
		t.Fatalf("at Capacity: %d stages, %d bytes: want stage 0 alone", st.Stages, st.TotalBytes)
	}
	for i := range uint64(capacity / 20) { // 5% over Capacity
		f.TestAndAdd(key(7, i))
	}
	clock.Set(clock.Now().Add(90 * time.Second))
	f.AdvanceTo(clock.Now())
	for i := range uint64(capacity / 2) {
		f.TestAndAdd(key(6, i))
	}
	st := f.Stats()
	if len(st.Generations) != 2 {
		t.Fatalf("live generations = %d, want 2", len(st.Generations))
	}
	for i, want := range []float64{capacity / 2, capacity * 1.05} {
		got := st.Generations[i].EstimatedKeys
		if math.Abs(got-want)/want > 0.03 {
			t.Errorf("generation %d: estimated %.0f keys, want about %.0f", i, got, want)
		}
	}
	if full := st.Generations[1].Fill; full < 0.3 || full > 0.7 {
		t.Errorf("a generation whose stage 0 is at capacity is %.2f full, want about half", full)
	}
	if st.Window != 90*time.Second || st.Rotations != 1 {
		t.Errorf("window=%v rotations=%d, want 1m30s and 1", st.Window, st.Rotations)
	}
	// The older generation took 5% more than Capacity: it grew one stage.
	lay := f.stageLayout(1)
	if st.Stages != 1 || st.AtCap || st.Generations[1].Stages != 1 || st.Growths != 1 {
		t.Errorf("stages %d (per generation %d, %d), growths %d, at cap %v: want 1 stage in the older generation",
			st.Stages, st.Generations[0].Stages, st.Generations[1].Stages, st.Growths, st.AtCap)
	}
	if st.CapacityBits != 2*f.Sizing().BitsPerGeneration+lay.groups*uint64(lay.layout.sectors)*SectorBits ||
		st.TotalBytes != f.Sizing().TotalBytes+lay.bytes {
		t.Errorf("capacity bits %d / bytes %d disagree with sizing", st.CapacityBits, st.TotalBytes)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	clock := newFakeClock()
	start := clock.Now()
	cfg := Config{Generations: 3, Interval: time.Minute, Capacity: 10_000, FalsePositiveRate: 1e-6, Seed: 7, Clock: clock.Now}
	f := mustNew(t, cfg)
	for g := range uint64(3) {
		clock.Set(start.Add(time.Duration(g) * time.Minute))
		f.AdvanceTo(clock.Now())
		for i := range uint64(5000) {
			if f.TestAndAdd(key(20+g, i)) {
				t.Fatalf("fresh key %d reported seen at 1e-6", i) // fixed seed: deterministic
			}
		}
	}
	var buf bytes.Buffer
	m, n, err := f.WriteSnapshot(&buf)
	if err != nil || n != int64(m.Words*8) || uint64(buf.Len()) != m.Words*8 {
		t.Fatalf("WriteSnapshot: n=%d len=%d words=%d err=%v", n, buf.Len(), m.Words, err)
	}
	tests := []struct {
		name      string
		downtime  time.Duration
		wantGens  []bool // generations 20, 21, 22 still seen
		wantError error
		mutate    func(*Config)
	}{
		{"no downtime", 0, []bool{true, true, true}, nil, nil},
		{"one interval down", time.Minute, []bool{false, true, true}, nil, nil},
		{"past the window", time.Hour, []bool{false, false, false}, nil, nil},
		{"generations changed", 0, nil, ErrIncompatible, func(c *Config) { c.Generations = 4 }},
		{"seed changed", 0, nil, ErrIncompatible, func(c *Config) { c.Seed = 8 }},
		{"rate changed", 0, nil, ErrIncompatible, func(c *Config) { c.FalsePositiveRate = 1e-3 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c2 := newFakeClock()
			c2.Set(clock.Now().Add(tt.downtime))
			rc := cfg
			rc.Clock = c2.Now
			if tt.mutate != nil {
				tt.mutate(&rc)
			}
			r, err := Restore(rc, m, bytes.NewReader(buf.Bytes()))
			if tt.wantError != nil {
				if !errors.Is(err, tt.wantError) {
					t.Fatalf("Restore error = %v, want %v", err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for g, want := range tt.wantGens {
				for i := uint64(0); i < 5000; i += 11 {
					if got := r.Test(key(20+uint64(g), i)); got != want {
						t.Fatalf("generation %d key %d: seen=%v, want %v", g, i, got, want)
					}
				}
			}
			if got := r.Stats().Rotations; got < m.Rotations {
				t.Errorf("rotations went back from %d to %d", m.Rotations, got)
			}
		})
	}
	if _, err := Restore(cfg, m, bytes.NewReader(buf.Bytes()[:100])); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated data: %v", err)
	}
}

// TestSnapshotUnderWrites takes a snapshot while writers keep adding and checks that every key
// added before the snapshot started is in the restored filter.
func TestSnapshotUnderWrites(t *testing.T) {
	cfg := Config{Generations: 2, Interval: time.Hour, Capacity: 400_000, FalsePositiveRate: 1e-6}
	f := mustNew(t, cfg)
	const before = 100_000
	for i := range uint64(before) {
		f.TestAndAdd(key(30, i))
	}
	stop := keepAdding(f, 31, 2)
	var buf bytes.Buffer
	m, _, err := f.WriteSnapshot(&buf)
	stop()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Restore(cfg, m, &buf)
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(before) {
		if !r.Test(key(30, i)) {
			t.Fatalf("key %d added before the snapshot is missing", i)
		}
	}
}

// TestStatsDuringSnapshot checks that Stats (a metrics scrape) does not wait for a snapshot, which
// holds rotation for as long as its copy and seal take.
func TestStatsDuringSnapshot(t *testing.T) {
	f := mustNew(t, Config{Generations: 2, Interval: time.Hour, Capacity: 1000, FalsePositiveRate: 1e-6})
	inside, release := make(chan struct{}), make(chan struct{})
	go f.Snapshot(func(Meta, func(io.Writer) (int64, error)) error {
		close(inside)
		<-release
		return nil
	})
	<-inside
	done := make(chan Stats)
	go func() { done <- f.Stats() }()
	select {
	case st := <-done:
		if len(st.Generations) != 1 {
			t.Errorf("live generations = %d, want 1", len(st.Generations))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stats blocked behind a snapshot")
	}
	close(release)
}

// TestSnapshotReleasesAfterData checks that rotation waits for a snapshot's data copy only, not
// for the rest of the snapshot's callback: under event time the goroutine that adds keys also
// rotates, and a snapshot that waits after its copy for those keys to be acknowledged (as
// dedup's seal does) would otherwise deadlock with it.
func TestSnapshotReleasesAfterData(t *testing.T) {
	clock := newFakeClock()
	f := mustNew(t, Config{Generations: 3, Interval: time.Minute, Capacity: 1000, FalsePositiveRate: 1e-3, Clock: clock.Now})
	var buf bytes.Buffer
	err := f.Snapshot(func(m Meta, writeData func(io.Writer) (int64, error)) error {
		if _, err := writeData(&buf); err != nil {
			return err
		}
		rotated := make(chan struct{})
		go func() {
			f.AdvanceEventTo(clock.Now().Add(time.Minute))
			close(rotated)
		}()
		select {
		case <-rotated:
		case <-time.After(10 * time.Second):
			t.Fatal("AdvanceEventTo still blocked 10s after the snapshot's data was written")
		}
		if _, err := writeData(&buf); err == nil {
			t.Error("writeData wrote the data a second time")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if uint64(buf.Len()) != f.Meta().Words*8 {
		t.Errorf("snapshot wrote %d bytes, want %d", buf.Len(), f.Meta().Words*8)
	}
}

// TestWideGroups checks TestAndAdd and Test on filters whose groups span more than two pages
// (many generations): every key added is seen, and a fresh key is new, single writer and shared.
func TestWideGroups(t *testing.T) {
	for _, n := range []int{24, 40, 100} {
		for _, single := range []bool{true, false} {
			t.Run(fmt.Sprintf("N=%d/single=%v", n, single), func(t *testing.T) {
				f := mustNew(t, Config{Generations: n, Interval: time.Minute, Capacity: 4000, FalsePositiveRate: 1e-6, SingleWriter: single})
				for i := range 4000 {
					if f.TestAndAdd(key(1, uint64(i))) {
						t.Fatalf("fresh key %d reported seen", i)
					}
				}
				for i := range 4000 {
					if !f.Test(key(1, uint64(i))) || !f.TestAndAdd(key(1, uint64(i))) {
						t.Fatalf("key %d added before is not seen", i)
					}
				}
			})
		}
	}
}
