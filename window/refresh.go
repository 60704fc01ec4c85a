package window

import (
	"runtime"
	"time"
)

// Refresh: a window counted from a key's last sighting (kdedup's DEDUP_WINDOW_REFRESH). The
// TestAndRefresh methods are TestAndAdd and TestAndAddAt that also re-arm a key that was seen:
// they add it again to the generation a new key would go to (the target), unless it is already
// there or in a newer generation, so that it is remembered for at least (N-1)·Interval after its
// last sighting and at most N·Interval. A filter that is never asked to refresh pays nothing for
// it: the re-arm is only in these methods.
//
// A re-arm is an insertion like any other. In shared mode it takes the group's claim word (see
// testAndAdd), so that concurrent offers of the same key still have exactly one winner: a re-arm
// only ever adds the bits of a key that was already present, and the claim's counter makes every
// other offer of the group test again. It counts against the target generation's capacity (and
// grows it) as a new key does, which is why a key is re-armed at most once per generation: the
// methods first test whether the key is already in the target or a newer generation, and write
// nothing if it is.

// TestAndRefresh reports whether key was seen in the window and, if it was not, adds it to the
// current generation, as TestAndAdd does; if it was seen, it re-arms it there unless the current
// generation already holds it (see the refresh notes in refresh.go). refreshed reports a re-arm.
// It has TestAndAdd's guarantees: if several goroutines offer the same key that is not in the
// filter at the same time, exactly one of them gets seen == false (with Config.SingleWriter, calls
// must not overlap); it never blocks and never allocates.
func (f *Filter) TestAndRefresh(key []byte) (seen, refreshed bool) {
	return f.testAndRefreshHash(f.hash(key))
}

// testAndRefreshHash is TestAndRefresh for a hash returned by hash.
func (f *Filter) testAndRefreshHash(h uint64) (seen, refreshed bool) {
	defer runtime.KeepAlive(f) // its stage 0 is unmapped when it is collected (newFilter)
	var p probe
	v := f.view.Load()
	f.makeProbe(&p, h, v, true, true)
	if !f.single {
		seen, _, refreshed = f.testAndRefresh(&p, 0, false)
		return seen, refreshed
	}
	seen = f.lookup(v, &p)
	if seen && f.heldFrom(v, &p, 0) {
		return true, false
	}
	f.insert(v, &p)
	f.countRefresh(seen)
	return seen, seen
}

// TestAndRefreshAt is TestAndAddAt with refresh: a key that was seen is re-armed in the
// generation of t (or the next live one, as TestAndAddAt places a new key), unless that generation
// or a newer one already holds it. A late t (before the oldest live generation) re-arms nothing.
func (f *Filter) TestAndRefreshAt(key []byte, t time.Time) (seen, late, refreshed bool) {
	return f.testAndRefreshHashAt(f.hash(key), t)
}

// testAndRefreshHashAt is TestAndRefreshAt for a hash returned by hash.
func (f *Filter) testAndRefreshHashAt(h uint64, t time.Time) (seen, late, refreshed bool) {
	defer runtime.KeepAlive(f) // its stage 0 is unmapped when it is collected (newFilter)
	d := time.Duration(t.UnixNano() - f.origin.UnixNano())
	v := f.view.Load()
	if d >= time.Duration(v.epoch)*f.cfg.Interval {
		seen, refreshed = f.testAndRefreshHash(h)
		return seen, false, refreshed
	}
	e := uint64(0)
	if d > 0 {
		e = uint64(d / f.cfg.Interval)
	}
	var p probe
	f.makeProbe(&p, h, v, false, true)
	if !f.single {
		return f.testAndRefresh(&p, e, true)
	}
	seen = f.lookup(v, &p)
	i, ok := v.generationFor(e)
	switch {
	case !ok:
		return seen, !seen, false
	case seen && f.heldFrom(v, &p, i):
		return true, false, false
	case i == 0:
		f.insert(v, &p)
	default:
		f.writeOld(v, i, &p)
	}
	f.countRefresh(seen)
	return seen, false, seen
}

// testAndRefresh is the shared-mode refresh: testAndAdd (or, with old, testAndAddOld for target
// generation e) that also claims and writes a seen key its target does not hold yet.
func (f *Filter) testAndRefresh(p *probe, e uint64, old bool) (seen, late, refreshed bool) {
	c := &f.claims[p.group]
	for {
		cw := c.Load()
		v := f.view.Load() // after cw: sees every view an earlier claimant wrote to
		seen = f.lookup(v, p)
		i, ok := 0, true
		if old {
			i, ok = v.generationFor(e)
		}
		if !ok {
			return seen, !seen, false
		}
		if seen && f.heldFrom(v, p, i) {
			return true, false, false
		}
		if cw&tagMask != 0 {
			f.help(v, p.group, cw)
			continue
		}
		if !f.claimWrite(c, cw, v, p, i) {
			continue
		}
		f.countRefresh(seen)
		return seen, false, seen
	}
}

// countRefresh counts a re-arm in Stats.Refreshes.
func (f *Filter) countRefresh(refreshed bool) {
	if refreshed {
		f.bump(&f.refreshes)
	}
}

// heldFrom reports whether the key is in one of the live generations v.active[0] (the current
// one) to v.active[i]: the target of a refresh or a newer generation.
func (f *Filter) heldFrom(v *view, p *probe, i int) bool {
	for j := 0; j <= i; j++ {
		if f.genHas(v, p, j) {
			return true
		}
	}
	return false
}

// genHas reports whether the key is in live generation v.active[j]: its stage 0 (read with tag
// checks while the current slot's sweep is unfinished) or one of its grown stages.
func (f *Filter) genHas(v *view, p *probe, j int) bool {
	s := v.active[j]
	if j == 0 && v.curTagged {
		if f.blockHasTagged(p, s, v.curTag) {
			return true
		}
	} else if f.has(p, s) {
		return true
	}
	gs := f.grown.Load()
	if gs == nil {
		return false
	}
	for _, gg := range gs.gens {
		if gg.epoch != v.epochs[j] {
			continue
		}
		for _, st := range *gg.stages.Load() {
			if st.hasAt(p.stageHash(st.index)) {
				return true
			}
		}
	}
	return false
}
