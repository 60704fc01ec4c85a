package window

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Event time: the entry points for a filter whose generations follow the records' own timestamps
// (see "Event time" in the package documentation). They never rotate the filter: the caller
// rotates it with AdvanceEventTo as its stream time crosses generation boundaries.

// EventTimeOrigin is the origin of a filter built for event time (New with a Clock that returns
// it): generation boundaries fall on whole multiples of Interval since 2000-01-01 UTC, so that
// filters built at different times (or rebuilt from the output topic) agree on them. It is not the
// Unix epoch, which snapshots cannot store as an origin (they store times as Unix nanoseconds,
// and 0 as the zero time).
var EventTimeOrigin = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// GenerationStart returns the start of the generation that contains t: a time at or before t. It
// is safe for concurrent use.
func (f *Filter) GenerationStart(t time.Time) time.Time {
	return f.startOf(f.epochFor(t))
}

// NextGenerationStart returns the start of the generation after the one that contains t: the
// earliest time at which AdvanceEventTo would rotate a filter that has reached t. It is safe for
// concurrent use.
func (f *Filter) NextGenerationStart(t time.Time) time.Time {
	return f.startOf(f.epochFor(t) + 1)
}

// CurrentGenerationStart returns the start of the current generation. It is safe for concurrent
// use.
func (f *Filter) CurrentGenerationStart() time.Time {
	return f.startOf(f.view.Load().epoch)
}

// OldestGenerationStart returns the start of the oldest live generation: a record stamped before
// it is late (TestAndAddAt reports it and adds nothing). It is safe for concurrent use.
func (f *Filter) OldestGenerationStart() time.Time {
	v := f.view.Load()
	return f.startOf(v.epochs[len(v.epochs)-1])
}

// AdvanceEventTo rotates the filter to the generation that contains t, like AdvanceTo, but one
// generation at a time over the last N, so that every generation of the window is live
// afterwards, empty ones included: a record stamped inside the window then always finds the
// generation of its own time. A jump of more than N generations expires the whole window, as
// AdvanceTo does. A time that is not later than the current generation's start does nothing.
//
// Each step reuses a slot, and a step finishes the sweep of the slot the previous step reused,
// holding the rotation mutex; the last one is swept before AdvanceEventTo returns, as AdvanceTo
// does. A jump of k generations therefore costs min(k, N) sweeps of one generation on the
// caller's goroutine. It is safe for concurrent use, and never blocks TestAndAdd.
func (f *Filter) AdvanceEventTo(t time.Time) {
	defer runtime.KeepAlive(f) // its stage 0 is unmapped when it is collected (newFilter)
	target := f.epochFor(t)
	f.mu.Lock()
	cur := f.view.Load().epoch
	if target > cur {
		n := uint64(f.cfg.Generations)
		from := cur + 1
		if target-cur > n {
			from = target - n + 1
		}
		for e := from; e <= target; e++ {
			f.advanceLocked(e)
		}
	}
	f.mu.Unlock()
	if !f.deferSweep {
		for f.sweepStep(sweepChunk) {
		}
	}
}

// TestAndAddAt is TestAndAdd for a record stamped t: it reports whether key was seen in any live
// generation and, if not, adds it to the generation that contains t, so that the key expires by
// its own time. A t in the current generation or later goes to the current generation. If t is
// before the oldest live generation, late is true and nothing is added (seen is false unless the
// key is in a live generation): the caller decides what a late record means. If t falls in a
// generation the filter skipped (only a filter that was rotated with AdvanceTo across a gap, such
// as one restored from a processing-time snapshot, has such gaps), the key goes to the next live
// generation after t: it is remembered at least as long as its own generation would have kept it.
//
// It has TestAndAdd's guarantees: if several goroutines offer the same new key at once, exactly
// one is told it is new (with Config.SingleWriter calls must not overlap); it never blocks and
// never allocates.
func (f *Filter) TestAndAddAt(key []byte, t time.Time) (seen, late bool) {
	return f.testAndAddHashAt(f.hash(key), t)
}

// testAndAddHashAt is TestAndAddAt for a hash returned by hash. t must lie in the years 1678 to
// 2262, which Unix nanoseconds represent (Kafka timestamps do).
func (f *Filter) testAndAddHashAt(h uint64, t time.Time) (seen, late bool) {
	defer runtime.KeepAlive(f)                             // its stage 0 is unmapped when it is collected (newFilter)
	d := time.Duration(t.UnixNano() - f.origin.UnixNano()) // cheaper than t.Sub on the hot path
	v := f.view.Load()
	if d >= time.Duration(v.epoch)*f.cfg.Interval {
		return f.testAndAddHash(h), false // the current generation: the processing-time path
	}
	e := uint64(0)
	if d > 0 {
		e = uint64(d / f.cfg.Interval)
	}
	var p probe
	f.makeProbe(&p, h, v, false, true)
	if !f.single {
		return f.testAndAddOld(&p, e)
	}
	if f.lookup(v, &p) {
		return true, false
	}
	i, ok := v.generationFor(e)
	switch {
	case !ok:
		return false, true
	case i == 0:
		f.insert(v, &p)
	default:
		f.writeOld(v, i, &p)
	}
	return false, false
}

// generationFor returns the index in v.active of the live generation a key stamped in generation
// e goes to: e's own, or the oldest live one after it when e was skipped. ok is false when e is
// older than every live generation.
func (v *view) generationFor(e uint64) (i int, ok bool) {
	if e < v.epochs[len(v.epochs)-1] {
		return 0, false
	}
	for i = len(v.epochs) - 1; i > 0 && v.epochs[i] < e; i-- {
	}
	return i, true
}

// writeOld sets the probe's bits in slot s, a live generation that is not the current one: in its
// stage 0, counted, so that a snapshot's recorded keys cover its bits (restore refuses bits that
// imply far more keys than recorded), though growth follows the current generation only: a late
// record adds to an older generation's stage 0 beyond its limit, which raises that generation's
// rate a little. Such a
// slot has no pending sweep (only the current slot can: a rotation finishes the pending sweep
// before it reuses a slot, and the reused slot becomes the current one), so every word carries
// the slot's tag and a plain OR (shared mode) or read and store (single writer) keeps it. It then
// counts the write in the slot's oldWrites, which changes the generation's version: a snapshot
// that reads the count after the bits were set copies them.
//
// An auto-sized generation's stage 0 is small, so there the key is inserted as into the current
// generation, counted: into stage 0 while it has room, else into the generation's stages, which
// grow as they would for the current one (a rebuild from the output topic fills older generations
// this way). At the memory cap it goes to the last stage or stage 0, counted (OverloadDrop), or
// nowhere (OverloadPass).
func (f *Filter) writeOld(v *view, i int, p *probe) {
	s := v.active[i]
	f.touched.mark(s, p.group)
	if !f.cfg.Auto {
		f.countStage0(s, p)
		f.put(p, s, f.single)
	} else {
		f.insertOld(s, v.epochs[i], p)
	}
	f.oldWrites[s].n.Add(1)
}

// insertOld adds the key to generation epoch, an older live generation held by slot s, of an
// auto-sized filter (see writeOld).
func (f *Filter) insertOld(s int, epoch uint64, p *probe) {
	c := &f.fill[s<<f.shardBits+int(p.shard)]
	if atomic.LoadUint32(&c.full) == 0 && (f.bump(c) <= f.limit0 || f.stage0Room(s)) {
		f.put(p, s, f.single)
		return
	}
	last, ok := f.addToStages(f.grownGen(epoch), p)
	switch {
	case ok:
	case f.cfg.Overload == OverloadPass:
		f.forgotten.Add(1)
	case last != nil:
		f.putStage(last, p)
	default:
		f.countStage0(s, p)
		f.put(p, s, f.single)
	}
}
