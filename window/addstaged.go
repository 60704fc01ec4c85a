package window

import (
	"math/bits"
	"sync/atomic"
)

// maxRowStages is the most grown stages of the live generations that addStaged handles; a filter
// with more takes the whole path (testAndAddProbe).
const maxRowStages = 8

// addStaged is testAndAddHash for the single writer once a live generation has grown, while v's
// current slot has no pending sweep and the filter has at most rowSlots slots, for a key whose
// shard of the current generation's stage 0 is full: the key goes to a grown stage, as almost
// every key of an auto-sized generation does. It is the whole path's lookup and insertion
// (makeProbe, lookup, insert's addGrown) without the key's probe: it loads the key's word of
// sector 0 in every grown stage and its row of stage 0, so that their cache misses overlap, tests
// the stages one bit at a time in the pattern's order (firstMissing, restMissingAt) and stage 0's
// row as Test does (rowTest), and writes a new key into the first stage of the current generation
// whose shard has room straight from its stage hash (putAt). It returns done = false, having done
// nothing, when the key's shard of stage 0 has room or the live generations have more than
// maxRowStages stages; a key for which every stage of the current generation is full (it grows)
// or that a rotation overtook goes on with its whole probe (addGrown, set).
func (f *Filter) addStaged(v *view, gs *grownSet, h uint64) (seen, done bool) {
	if atomic.LoadUint32(&f.fill[v.cur<<f.shardBits+int(h>>f.shardShift)].full) == 0 {
		return false, false
	}
	g, _ := bits.Mul64(h, f.groups)
	tag := h&tagMask | 1
	var at [maxRowStages]stageWord
	n := 0
	for _, gg := range gs.gens {
		for _, st := range *gg.stages.Load() {
			if n == len(at) {
				return false, false
			}
			at[n] = st.wordOf(stageHash(g, tag, st.index))
			at[n].st = st
			atomic.LoadUint64(&st.words[at[n].w])
			n++
		}
	}
	base := g * f.groupWords
	f.writeFirst(base, f.groupWords)
	f.touch(v, base, patternOutput(tag, 0)&(sectorWords-1), false)
	if f.cfg.Auto { // as lookupIn: an auto-sized generation holds its keys in its stages
		if stageWordsHave(at[:n]) || f.rowTest(v, h) {
			return true, true
		}
	} else if f.rowTest(v, h) || stageWordsHave(at[:n]) {
		return true, true
	}
	f.stagedInsert(v, gs, g, tag)
	return false, true
}

// stagedInsert is addStaged's insertion of a new key of group g and tag tag into the first stage
// of v's current generation whose shard has room, as addToStages does for the single writer.
func (f *Filter) stagedInsert(v *view, gs *grownSet, g, tag uint64) {
	for _, gg := range gs.gens {
		if gg.epoch != v.epoch {
			continue
		}
		for i, st := range *gg.stages.Load() {
			x := stageHash(g, tag, i+1)
			c := &st.count[x>>f.shardShift]
			n := atomic.LoadUint64(&c.n)
			if n >= st.limit {
				continue
			}
			storeWord(&c.n, n+1)
			st.putAt(x, true)
			if nv := f.view.Load(); nv.epoch != v.epoch {
				var p probe // a rotation meanwhile: the key goes to the new current generation too
				f.probeFor(&p, g, tag)
				f.set(nv, &p)
			}
			return
		}
		break
	}
	var p probe // every stage is full, or the generation has none yet: addGrown grows it
	f.probeFor(&p, g, tag)
	f.addGrown(v, &p)
}
