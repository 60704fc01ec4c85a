package window

import (
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is an injected clock that only moves when told to.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// key returns a 16-byte key for i in namespace ns.
func key(ns, i uint64) []byte {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], ns)
	binary.LittleEndian.PutUint64(b[8:], i)
	return b[:]
}

func mustNew(t testing.TB, cfg Config) *Filter {
	t.Helper()
	f, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return f
}

// mode is one way to run a filter in the tests: shared or single-writer (Config.SingleWriter),
// and whether AdvanceTo leaves the sweep of a reused slot pending (lazy), so that writers and
// readers meet words of the slot's previous use.
type mode struct {
	name   string
	single bool
	lazy   bool
}

var modes = []mode{
	{"shared", false, false},
	{"shared-lazy", false, true},
	{"single", true, false},
	{"single-lazy", true, true},
}

// newIn returns a filter for cfg run in mode m.
func newIn(t testing.TB, cfg Config, m mode) *Filter {
	t.Helper()
	cfg.SingleWriter = m.single
	f := mustNew(t, cfg)
	f.deferSweep = m.lazy
	return f
}

// keepAdding starts writers goroutines that add new keys to f until the returned function is
// called (which waits for them): writer w adds key(ns+w, 0), key(ns+w, 1), ...
func keepAdding(f *Filter, ns uint64, writers int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range uint64(writers) {
		wg.Go(func() {
			for i := uint64(0); ; i++ {
				select {
				case <-done:
					return
				default:
					f.TestAndAdd(key(ns+w, i))
				}
			}
		})
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// startSweeper runs pending sweeps in the background one group at a time (Start's goroutine
// takes sweepChunk groups at once), until the returned function is called.
func startSweeper(f *Filter) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if !f.sweepStep(1) {
				runtime.Gosched()
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// checkTags checks the invariant the reuse of slots rests on: every word of every slot carries
// the tag of the slot's current use, except in the slot whose sweep is pending.
func checkTags(t testing.TB, f *Filter) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.slots {
		if s == f.sweepSlot {
			continue
		}
		tag := tagOf(f.uses[s].Load())
		for g := range f.groups {
			f.slotWords(g, s, func(w *uint64) {
				if x := atomic.LoadUint64(w); x&tagBit != tag {
					t.Fatalf("slot %d (use %d) group %d: word %#x has a stale tag", s, f.uses[s].Load(), g, x)
				}
			})
		}
	}
}

// finishSweepForTest completes a pending sweep.
func (f *Filter) finishSweepForTest() {
	f.mu.Lock()
	f.finishSweepLocked()
	f.mu.Unlock()
}

// raceOffers starts workers goroutines at the same moment; worker w offers the keys 0 … keys-1
// in the rotation that starts at offset(w), so that goroutines collide on the same key at the
// same moment. offer reports whether the key was new to the worker that offered it. raceOffers
// returns each key's number of winners.
func raceOffers(workers, keys int, offset func(w int) int, offer func(i int) (isNew bool)) []int32 {
	winners := make([]atomic.Int32, keys)
	var wg, ready sync.WaitGroup
	ready.Add(workers)
	start := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			ready.Done()
			<-start
			for j := range keys {
				i := (j + offset(w)) % keys
				if offer(i) {
					winners[i].Add(1)
				}
			}
		})
	}
	ready.Wait()
	close(start)
	wg.Wait()
	counts := make([]int32, keys)
	for i := range winners {
		counts[i] = winners[i].Load()
	}
	return counts
}

// tallyWinners returns how many keys of raceOffers's counts had no winner and how many had more
// than one.
func tallyWinners(counts []int32) (zero, many int) {
	for _, c := range counts {
		switch {
		case c == 0:
			zero++
		case c > 1:
			many++
		}
	}
	return zero, many
}
