package window

import (
	"runtime"
	"sync/atomic"
	"time"
)

// sweepChunk is how many groups a sweep converts per hold of the rotation mutex, so that a
// snapshot or a rotation waits for at most one chunk.
const sweepChunk = 1024

// epochFor returns the generation number that contains t. Times before the origin map to 0.
func (f *Filter) epochFor(t time.Time) uint64 {
	d := t.Sub(f.origin)
	if d <= 0 {
		return 0
	}
	return uint64(d / f.cfg.Interval)
}

// startOf returns the start time of generation e.
func (f *Filter) startOf(e uint64) time.Time {
	return f.origin.Add(time.Duration(e) * f.cfg.Interval)
}

// AdvanceTo rotates the filter to the generation that contains now, expiring every generation that
// ended at least N intervals before it. After downtime it catches up in one step: generations older
// than the window are gone however long the gap was. A time that is not later than the current
// generation's start does nothing, so the clock may stand still or step back.
//
// AdvanceTo never blocks TestAndAdd: it reuses the expiring slot for the new generation by giving
// it a new use (every word it holds then reads as empty) and publishes the new set of live
// generations with one atomic pointer store. Before it returns it sweeps the reused slot (converts
// its stale words to empty words of the new use) in chunks, releasing the rotation mutex between
// chunks; TestAndAdd meanwhile writes and reads the slot correctly, only a little slower. It waits
// for a running snapshot.
func (f *Filter) AdvanceTo(now time.Time) {
	defer runtime.KeepAlive(f) // its stage 0 is unmapped when it is collected (newFilter)
	f.mu.Lock()
	f.advanceLocked(f.epochFor(now))
	f.mu.Unlock()
	if !f.deferSweep {
		for f.sweepStep(sweepChunk) {
		}
	}
}

// advanceLocked rotates to generation target. The caller holds f.mu.
func (f *Filter) advanceLocked(target uint64) {
	v := f.view.Load()
	if target <= v.epoch {
		return
	}
	// At most one slot is unswept at a time, so the slot reused below carries its use's tag in
	// every word.
	f.finishSweepLocked()
	n := uint64(f.cfg.Generations)
	kept := make([]int, 0, f.slots)
	for _, s := range v.active {
		if uint64(f.slotEpoch[s])+n > target {
			kept = append(kept, s)
		} else {
			f.slotEpoch[s] = -1
		}
	}
	cur := f.freeSlotLocked() // at most N-1 generations are kept, so one of the N slots is free
	if f.dirty[cur] {
		f.reuseLocked(cur)
	}
	f.slotEpoch[cur] = int64(target)
	f.dirty[cur] = true
	// The expired generations' stages go first: a reader with the old view may then miss them,
	// but their keys are past their guarantee already.
	f.dropGrownLocked(target)
	for i := range f.fill[cur<<f.shardBits : (cur+1)<<f.shardBits] {
		atomic.StoreUint64(&f.fill[cur<<f.shardBits+i].n, 0)
	}
	f.markFull(cur, 0)
	f.publishLocked(target, append([]int{cur}, kept...))
	f.rotations.Add(target - v.epoch)
}

// freeSlotLocked returns a slot that holds no live generation, preferring one that holds no bits.
func (f *Filter) freeSlotLocked() int {
	free := -1
	for s := range f.slots {
		if f.slotEpoch[s] >= 0 {
			continue
		}
		if !f.dirty[s] {
			return s
		}
		if free < 0 {
			free = s
		}
	}
	return free
}

// reuseLocked starts a new use of slot s, whose words all carry the tag of its current use: from
// now on they read as empty. It waits until no shared-mode writer is between its use check and
// its conversion of a word of s (see convert), then leaves the slot to the sweep.
func (f *Filter) reuseLocked(s int) {
	f.uses[s].Add(1)
	for f.inflight[s].n.Load() != 0 {
		runtime.Gosched()
	}
	f.touched.reset(s)
	f.sweepSlot, f.sweepNext = s, 0
}

// publishLocked stores the view of generation epoch with the given live slots, newest first.
func (f *Filter) publishLocked(epoch uint64, active []int) {
	epochs := make([]uint64, len(active))
	for i, s := range active {
		epochs[i] = uint64(f.slotEpoch[s])
	}
	cur := active[0]
	f.view.Store(newView(epoch, active, epochs, f.uses[cur].Load(), f.sweepSlot == cur))
}

// sweepStep converts the stale words of the next chunk groups of the pending sweep and reports
// whether more remain. It takes the rotation mutex for the chunk only.
func (f *Filter) sweepStep(chunk uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sweepSlot < 0 {
		return false
	}
	end := min(f.sweepNext+chunk, f.groups)
	f.sweepGroupsLocked(f.sweepSlot, f.sweepNext, end)
	f.sweepNext = end
	if end < f.groups {
		return true
	}
	f.endSweepLocked()
	return false
}

// finishSweepLocked completes the pending sweep, if any.
func (f *Filter) finishSweepLocked() {
	if f.sweepSlot < 0 {
		return
	}
	f.sweepGroupsLocked(f.sweepSlot, f.sweepNext, f.groups)
	f.endSweepLocked()
}

// endSweepLocked marks the sweep done and publishes a view that reads the slot without checking
// tags.
func (f *Filter) endSweepLocked() {
	f.sweepSlot = -1
	v := f.view.Load()
	f.publishLocked(v.epoch, v.active)
}

// sweepGroupsLocked converts every word of slot s in groups [from, to) that carries a stale tag
// into an empty word of the slot's current use. The caller holds f.mu, so the use cannot change;
// each conversion is a compare-and-swap, so it never overwrites a word a writer has converted.
func (f *Filter) sweepGroupsLocked(s int, from, to uint64) {
	tag := tagOf(f.uses[s].Load())
	sweep := func(w *uint64) { sweepWord(w, tag) }
	f.writeFirst(from*f.groupWords, (to-from)*f.groupWords)
	for g := from; g < to; g++ {
		f.slotWords(g, s, sweep)
	}
}

// sweepWord replaces the word at p by an empty word with tag unless it already carries tag.
func sweepWord(p *uint64, tag uint64) {
	for {
		x := atomic.LoadUint64(p)
		if x&tagBit == tag || atomic.CompareAndSwapUint64(p, x, tag) {
			return
		}
	}
}

// Start starts a goroutine that rotates the filter at each generation boundary of the Clock and
// sweeps reused slots off the hot path. It is a no-op if already started. The goroutine uses real
// timers, so with an injected Clock that is not time.Now drive rotation with AdvanceTo instead (or
// run under testing/synctest, where time.Now is virtual).
func (f *Filter) Start() {
	f.runMu.Lock()
	defer f.runMu.Unlock()
	if f.stop != nil {
		return
	}
	f.stop = make(chan struct{})
	f.done = make(chan struct{})
	go f.run(f.stop, f.done)
}

// Close stops the goroutine started by Start and waits for it to exit. The filter stays usable
// and can be started again. Close is idempotent.
func (f *Filter) Close() {
	f.runMu.Lock()
	defer f.runMu.Unlock()
	if f.stop == nil {
		return
	}
	close(f.stop)
	<-f.done
	f.stop, f.done = nil, nil
}

func (f *Filter) run(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-stop:
			return
		case <-timer.C:
		}
		f.mu.Lock()
		f.advanceLocked(f.epochFor(f.cfg.Clock()))
		next := f.startOf(f.view.Load().epoch + 1)
		f.mu.Unlock()
		for f.sweepStep(sweepChunk) {
			select {
			case <-stop:
				return
			default:
			}
		}
		timer.Reset(next.Sub(f.cfg.Clock()))
	}
}
