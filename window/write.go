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
	f.touched.mark(v.cur, p.group)
	if !v.curTagged {
		f.put(p, v.cur, f.single)
		return true
	}
	if !p.rest {
		f.fillRest(p)
	}
	w, m := f.firstWord(p, v.cur), p.mask[p.w0&(sectorWords-1)]
	if f.single {
		storeWordTagged(w, m, v.curTag)
	} else if !f.orWordTagged(v, w, m) {
		return false
	}
	for sec := 1; sec < f.sectors; sec++ {
		b, m := f.sector(f.restSector(p.base, v.cur, sec)), p.sectorMask(sec)
		if f.single {
			for w := range sectorWords {
				storeWordTagged(&b[w], m[w], v.curTag)
			}
			continue
		}
		for w := range sectorWords {
			if !f.orWordTagged(v, &b[w], m[w]) {
				return false
			}
		}
	}
	return true
}

// orWord sets m's bits in the word at w with an atomic OR, unless it holds them already.
func orWord(w *uint64, m uint64) {
	if m != 0 && m&^atomic.LoadUint64(w) != 0 {
		atomic.OrUint64(w, m)
	}
}

// orSector sets m's bits in b with atomic ORs, skipping words that already hold them.
func orSector(b, m *[sectorWords]uint64) {
	for w := range sectorWords {
		orWord(&b[w], m[w])
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

// storeWordTagged is the single writer's store of m's bits into the word at w of a slot whose
// sweep is unfinished: a word with a stale tag is replaced by tag|m. The sweeper may convert the
// same word concurrently; it stores tag|0, which the single writer's tag|m contains, so either
// order leaves the right value.
func storeWordTagged(w *uint64, m, tag uint64) {
	if m == 0 {
		return
	}
	x := atomic.LoadUint64(w)
	switch {
	case x&tagBit != tag:
		storeWord(w, tag|m)
	case m&^x != 0:
		storeWord(w, x|m)
	}
}

// orWordTagged is orWord for a slot whose sweep is unfinished, in shared mode: a word with the
// slot's tag gets an atomic OR, a word with a stale tag is converted by convert. It returns false
// if the slot has been reused since v was made.
func (f *Filter) orWordTagged(v *view, w *uint64, m uint64) bool {
	for m != 0 {
		x := atomic.LoadUint64(w)
		if x&tagBit == v.curTag {
			if m&^x != 0 {
				atomic.OrUint64(w, m)
			}
			return true
		}
		done, ok := f.convert(v, w, x, m)
		if !ok {
			return false
		}
		if done {
			return true
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
