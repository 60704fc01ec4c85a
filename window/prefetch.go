package window

import (
	"math/bits"
	"unsafe"
)

// maxPrefetchRowLines is the most cache lines of the key's row of stage 0 that Prefetch asks for:
// a row has a word per slot, and more than 4 lines only with more than 24 generations.
const maxPrefetchRowLines = 4

// maxPrefetchLines is the most cache lines Prefetch asks for: the key's row of stage 0 (its first
// maxPrefetchRowLines lines and its last word), its word of sector 0 in up to maxProbedStages
// grown stages, and the other sectors of its block where an insertion writes it.
const maxPrefetchLines = maxPrefetchRowLines + 1 + maxProbedStages + MaxSectors - 1

// Prefetch asks the processor to load the cache lines a TestAndAdd of key would use first, and
// returns at once: it changes nothing, reads no line itself and reports nothing. A caller that
// knows its next keys calls it a few keys ahead of their TestAndAdd, so that their cache misses
// overlap with its work on the keys before them instead of stalling each TestAndAdd in turn: a
// Bloom filter's lookup is a random access to memory the size of the window, one or more cache
// misses per key. It costs a hash and a few multiplications per grown stage; on a platform
// without a prefetch instruction it does nothing. Safe for concurrent use, with every method.
func (f *Filter) Prefetch(key []byte) {
	f.PrefetchHash(KeyHash(f.hash(key)))
}

// prefetchLines puts in lines the address of every cache line a TestAndAdd of the key whose hash
// is h would use first, and returns how many: the key's row of stage 0 and its word of sector 0
// in every grown stage (what lookup reads), and the other sectors of the block an insertion
// writes: in the newest stage of the current generation once it has grown, else in its stage 0.
func (f *Filter) prefetchLines(h uint64, lines *[maxPrefetchLines]unsafe.Pointer) int {
	v := f.view.Load()
	g, _ := bits.Mul64(h, f.groups)
	tag := h&tagMask | 1
	base := g * f.groupWords
	row := f.words[base+(patternOutput(tag, 0)&(sectorWords-1))*uint64(f.slots):][:f.slots:f.slots]
	n := 0
	for i := 0; i < len(row) && n < maxPrefetchRowLines; i += sectorWords {
		lines[n] = unsafe.Pointer(&row[i])
		n++
	}
	if len(row) > sectorWords {
		lines[n] = unsafe.Pointer(&row[len(row)-1])
		n++
	}
	rowLines := n
	var newest *stage
	var nx uint64
	if gs := f.grown.Load(); gs != nil {
		for i, gg := range gs.gens {
			for _, st := range *gg.stages.Load() {
				if n == rowLines+maxProbedStages {
					break
				}
				x := stageHash(g, tag, st.index)
				lines[n] = unsafe.Pointer(&st.words[st.wordOf(x).w])
				n++
				if i == 0 && gg.epoch == v.epoch {
					newest, nx = st, x
				}
			}
		}
	}
	if newest == nil {
		for sec := 1; sec < f.sectors; sec++ {
			lines[n] = unsafe.Pointer(&f.words[f.restSector(base, v.cur, sec)])
			n++
		}
		return n
	}
	sg, _ := bits.Mul64(nx, newest.groups)
	for sec := 1; sec < newest.sectors; sec++ {
		lines[n] = unsafe.Pointer(&newest.words[newest.restSector(sg*newest.groupWords, 0, sec)])
		n++
	}
	return n
}
