package window

import (
	"runtime"
	"sync/atomic"
)

// set writes the probe's bits into the current generation and, if a rotation happened meanwhile,
// into the new current generation too, so the key is never left only in a slot being retired.
func (f *Filter) set(v *view, p *probe) {
	for {
		if !f.writeBlock(v, p) {
			// v's current slot was reused: v is at least N rotations old.
			nv := f.view.Load()
			if nv.epoch == v.epoch {
				runtime.Gosched() // the rotation has not published its view yet
			}
			v = nv
			continue
		}
		nv := f.view.Load()
		if nv.epoch == v.epoch {
			return
		}
		v = nv
	}
}

// writeBlock sets the probe's bits in the block of v's current slot. It returns false, possibly
// after writing some of them, if that slot has been reused since v was made (shared mode only;
// see convert).
func (f *Filter) writeBlock(v *view, p *probe) bool {
	i := p.base + uint64(v.cur)*sectorWords
	for sec := range f.sectors {
		b, m := f.sector(i), p.sectorMask(sec)
		switch {
		case f.single && !v.curTagged:
			storeSector(b, m)
		case f.single:
			storeSectorTagged(b, m, v.curTag)
		case !v.curTagged:
			orSector(b, m)
		default:
			if !f.orSectorTagged(v, b, m) {
				return false
			}
		}
		i += f.sectorStride
	}
	return true
}

// orSector sets m's bits in b with atomic ORs, skipping words that already hold them.
func orSector(b, m *[sectorWords]uint64) {
	for w := range sectorWords {
		if mw := m[w]; mw != 0 && mw&^atomic.LoadUint64(&b[w]) != 0 {
			atomic.OrUint64(&b[w], mw)
		}
	}
}

// storeSector is orSector for the single writer: a plain read and store of every word of the
// sector, without branches (which words a key uses is unpredictable; storing an unchanged word
// costs less than a mispredicted branch). Nothing else writes these words (the sweeper only
// converts words with a stale tag), so no update is lost.
func storeSector(b, m *[sectorWords]uint64) {
	for w := range sectorWords {
		storeWord(&b[w], atomic.LoadUint64(&b[w])|m[w])
	}
}

// storeSectorTagged is storeSector for a slot whose sweep is unfinished: a word with a stale tag
// is replaced by tag|m. The sweeper may convert the same word concurrently; it stores tag|0,
// which the single writer's tag|m contains, so either order leaves the right value.
func storeSectorTagged(b, m *[sectorWords]uint64, tag uint64) {
	for w := range sectorWords {
		mw := m[w]
		if mw == 0 {
			continue
		}
		x := atomic.LoadUint64(&b[w])
		switch {
		case x&tagBit != tag:
			storeWord(&b[w], tag|mw)
		case mw&^x != 0:
			storeWord(&b[w], x|mw)
		}
	}
}

// orSectorTagged is orSector for a slot whose sweep is unfinished, in shared mode: a word with the
// slot's tag gets an atomic OR, a word with a stale tag is converted by convert. It returns false
// if the slot has been reused since v was made.
func (f *Filter) orSectorTagged(v *view, b, m *[sectorWords]uint64) bool {
	for w := range sectorWords {
		mw := m[w]
		for mw != 0 {
			x := atomic.LoadUint64(&b[w])
			if x&tagBit == v.curTag {
				if mw&^x != 0 {
					atomic.OrUint64(&b[w], mw)
				}
				break
			}
			done, ok := f.convert(v, &b[w], x, mw)
			if !ok {
				return false
			}
			if done {
				break
			}
		}
	}
	return true
}

// convert replaces the stale word x at w by v.curTag|m, dropping the bits of the slot's previous
// use. This is the one write that drops bits, so it must never hit a word of a later use: it
// announces itself in the slot's inflight counter, checks that the slot still holds v's use, and
// only then swaps. A rotation that reuses the slot bumps the use first and then waits for the
// counter to drain before any writer can see the new use (sequentially consistent atomics: either
// this check sees the bump, or the rotation sees the announcement). ok is false if the slot was
// reused; done is false if the swap lost a race and the word must be read again.
func (f *Filter) convert(v *view, w *uint64, x, m uint64) (done, ok bool) {
	c := &f.inflight[v.cur].n
	c.Add(1)
	if f.uses[v.cur].Load() != v.curUse {
		c.Add(-1)
		return false, false
	}
	done = atomic.CompareAndSwapUint64(w, x, v.curTag|m)
	c.Add(-1)
	return done, true
}
