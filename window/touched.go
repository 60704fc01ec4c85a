package window

import "sync/atomic"

// touched records, per slot of stage 0, which groups the slot's current use may have written: a
// clear bit for group g means that no word of the slot's block in g holds data bits of that use,
// so an export passes zeros for the block without reading it. A checkpoint of a partition that
// took a few thousand keys then reads the few groups they went to, not the whole generation.
//
// A bit is set before the block is written (writeBlock, writeOld) and when a restore stores data
// in the block; the slot's bits are cleared when it starts a new use (reuseLocked, under f.mu,
// before any writer can see the use). A writer with an old view may set a bit after that: a
// spare bit costs the export a read, never a lost key.
type touched [][]uint64 // per slot, one bit per group

// newTouched returns clear bitmaps for slots slots of groups groups.
func newTouched(slots int, groups uint64) touched {
	t := make(touched, slots)
	for s := range t {
		t[s] = make([]uint64, (groups+63)/64)
	}
	return t
}

// mark sets group g's bit of slot s, with an atomic OR unless it is set already (a group is marked
// once per use, so the hot path only reads).
func (t touched) mark(s int, g uint64) {
	w, bit := &t[s][g>>6], uint64(1)<<(g&63)
	if atomic.LoadUint64(w)&bit == 0 {
		atomic.OrUint64(w, bit)
	}
}

// has reports whether group g's bit of slot s is set.
func (t touched) has(s int, g uint64) bool {
	return atomic.LoadUint64(&t[s][g>>6])&(uint64(1)<<(g&63)) != 0
}

// reset clears slot s's bits.
func (t touched) reset(s int) {
	for i := range t[s] {
		atomic.StoreUint64(&t[s][i], 0)
	}
}

// markAll sets every bit of every slot, for words loaded without knowing where data is.
func (t touched) markAll() {
	for s := range t {
		for i := range t[s] {
			atomic.StoreUint64(&t[s][i], ^uint64(0))
		}
	}
}

// allZero reports whether every word of ws is 0.
func allZero(ws []uint64) bool {
	var or uint64
	for _, w := range ws {
		or |= w
	}
	return or == 0
}
