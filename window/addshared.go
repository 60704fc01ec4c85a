package window

import (
	"math/bits"
	"sync/atomic"
)

// addShared is testAndAddHash in shared mode while no generation has grown, the current slot has
// no pending sweep, the filter has at most rowSlots slots and the key's shard of stage 0 has room:
// testAndAdd's claim protocol for a key that finds its group idle, without the key's probe. It
// reads the group's claim word and then the view (as testAndAdd does), tests the row as Test does
// (rowTest), claims the group with a compare-and-swap from the idle word, and writes a new key
// straight from its tag into stage 0 of the current generation (the first bits with one atomic OR,
// the others one bit at a time, orRest), then releases the claim. It returns done = false, having
// written nothing, when one of those conditions does not hold, the group is claimed by another
// goroutine or the compare-and-swap fails: the whole path (testAndAddProbe) then helps or retries.
// A key for which stage 0 turns out full after its claim, or that a rotation overtook, goes on
// with its whole probe (addGrown, set) under the claim.
func (f *Filter) addShared(h uint64) (seen, done bool) {
	g, _ := bits.Mul64(h, f.groups)
	claim := &f.claims[g]
	cw := claim.Load()
	v := f.view.Load() // after cw: sees every view an earlier claimant wrote to
	c := &f.fill[v.cur<<f.shardBits+int(h>>f.shardShift)]
	if v.curTagged || f.slots > rowSlots || f.grown.Load() != nil || atomic.LoadUint32(&c.full) != 0 {
		return false, false
	}
	base := g * f.groupWords
	if !f.pagesWritten(base, f.groupWords) { // writeFirst's loop only for a group with a page not marked
		f.writeFirst(base, f.groupWords)
	}
	for sec := 1; sec < f.sectors; sec++ { // the lines a new key writes, with the row's (touch)
		atomic.LoadUint64(&f.words[f.restSector(base, v.cur, sec)])
	}
	if f.touch1 {
		f.touchSector1(base)
	}
	if f.rowTest(v, h) {
		return true, true
	}
	tag := h&tagMask | 1
	if cw&tagMask != 0 || !claim.CompareAndSwap(cw, cw|tag) {
		return false, false
	}
	f.sharedInsert(v, c, g, tag)
	claim.CompareAndSwap(cw|tag, cw+f.seqOne())
	return false, true
}

// sharedInsert is addShared's insertion of a new key of group g and tag tag into stage 0 of v's
// current generation, counted in its shard's counter c, as insert and set do in shared mode.
func (f *Filter) sharedInsert(v *view, c *fillCounter, g, tag uint64) {
	if atomic.LoadUint32(&c.full) != 0 || f.bump(c) > f.limit0 && !f.stage0Room(v.cur) {
		var p probe // stage 0 became full: insert's path to the grown stages
		f.probeFor(&p, g, tag)
		f.addGrown(v, &p)
		return
	}
	f.touched.mark(v.cur, g)
	base := g * f.groupWords
	z0 := patternOutput(tag, 0)
	m := firstBits4(z0)
	if f.first != 4 {
		m = firstMask(tag, z0, f.first)
	}
	orWord(&f.words[base+(z0&(sectorWords-1))*uint64(f.slots)+uint64(v.cur)], m)
	if f.rest4 {
		f.orRest4(base, v.cur, tag)
	} else {
		f.orRest(base, v.cur, tag)
	}
	if nv := f.view.Load(); nv.epoch != v.epoch {
		var p probe // a rotation meanwhile: the key goes to the new current generation too (set)
		f.probeFor(&p, g, tag)
		f.set(nv, &p)
	}
}

// orRest is putRest for shared mode: each bit after the first of the key whose tag is tag goes
// into its word of slot s's block in the group at base with an atomic OR, unless the word has it
// already (orWord). The slot's words must carry no stale tag.
func (b *blocks) orRest(base uint64, s int, tag uint64) {
	words, off := b.words[base+uint64(s)*sectorWords:], b.restOff
	for n := b.first; n < len(off); {
		z := patternOutput(tag, n>>2) >> (16 * (n & 3))
		for end := min(n|3+1, len(off)); n < end; n++ {
			orWord(&words[off[n]+z&(sectorWords-1)], dataBit(z))
			z >>= 16
		}
	}
}
