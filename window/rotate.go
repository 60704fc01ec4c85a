package window

import (
	"time"
)

// maxClearDelay bounds how long a retired slot waits before the background goroutine clears it.
// The wait lets an operation that loaded the previous view finish before its slots are wiped.
const maxClearDelay = time.Second

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
// AdvanceTo never blocks TestAndAdd: it prepares a cleared slot and publishes the new set of live
// generations with one atomic pointer store. It only clears memory itself when no cleared spare
// slot is ready (rotations faster than the background clearing, or no Start); it waits for a
// running snapshot.
func (f *Filter) AdvanceTo(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advanceLocked(f.epochFor(now), now)
}

func (f *Filter) advanceLocked(target uint64, now time.Time) {
	v := f.view.Load()
	if target <= v.epoch {
		return
	}
	n := uint64(f.cfg.Generations)
	kept := make([]int, 0, f.slots)
	for _, s := range v.active {
		if uint64(f.slotEpoch[s])+n > target {
			kept = append(kept, s)
			continue
		}
		f.slotEpoch[s] = -1
		f.dirty[s] = true
	}
	// At most N-1 generations are kept, so with N+1 slots at least two are free.
	cur := -1
	for s := range f.slots {
		if f.slotEpoch[s] < 0 && !f.dirty[s] {
			cur = s
			break
		}
	}
	if cur < 0 {
		for s := range f.slots {
			if f.slotEpoch[s] < 0 {
				cur = s
				break
			}
		}
		f.clearSlot(cur)
		f.dirty[cur] = false
	}
	f.slotEpoch[cur] = int64(target)
	active := append([]int{cur}, kept...)
	epochs := make([]uint64, len(active))
	for i, s := range active {
		epochs[i] = uint64(f.slotEpoch[s])
	}
	f.view.Store(&view{epoch: target, cur: cur, active: active, epochs: epochs})
	f.rotations.Add(target - v.epoch)
	delay := f.cfg.Interval / 2
	if delay > maxClearDelay {
		delay = maxClearDelay
	}
	f.clearAt = now.Add(delay)
}

// clearSlot zeroes one slot in every group. The caller holds f.mu and the slot is not live.
func (f *Filter) clearSlot(s int) {
	stride := uint64(f.slots) * blockWords
	for base := uint64(s) * blockWords; base < uint64(len(f.words)); base += stride {
		clearWords(f.words[base : base+blockWords])
	}
}

// clearDirtyLocked zeroes every free slot that still holds expired bits.
func (f *Filter) clearDirtyLocked() {
	for s := range f.slots {
		if f.dirty[s] {
			f.clearSlot(s)
			f.dirty[s] = false
		}
	}
}

// Start starts a goroutine that rotates the filter at each generation boundary of the Clock and
// clears retired generations off the hot path. It is a no-op if already started. The goroutine
// uses real timers, so with an injected Clock that is not time.Now drive rotation with AdvanceTo
// instead (or run under testing/synctest, where time.Now is virtual).
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
		now := f.cfg.Clock()
		f.mu.Lock()
		f.advanceLocked(f.epochFor(now), now)
		next := f.startOf(f.view.Load().epoch + 1)
		if !now.Before(f.clearAt) {
			f.clearDirtyLocked()
		} else if f.clearAt.Before(next) {
			next = f.clearAt
		}
		f.mu.Unlock()
		timer.Reset(next.Sub(now))
	}
}
