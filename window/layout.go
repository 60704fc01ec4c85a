package window

import (
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// blocks is a set of key groups in the layout of the package documentation. A group holds one
// block per slot, a block being sectors sectors of eight words; a key sets first bits in one word
// of its block's sector 0 (the word its pattern picks) and the rest of its k bits spread over the
// words of sectors 1 … sectors-1.
//
// Sector 0 is stored word-major: word w of sector 0 of every slot side by side (for eight slots,
// one cache line holds word w of all of them), so that one line answers for every live
// generation whether a key's first bits are set. Sectors 1 … sectors-1 are stored sector-major:
// sector i of every slot side by side, eight words each. Word w of sector 0 of slot s in the group
// starting at base is base + w·slots + s; word w of sector i ≥ 1 is base + i·slots·8 + s·8 + w.
//
// Stage 0 is a blocks of Generations slots whose words carry use tags; a grown stage is a blocks
// of one slot whose words carry none (bit 63 is 0).
type blocks struct {
	words        []uint64 // groups × sectors × slots × sectorWords, 64-byte aligned
	groups       uint64
	slots        int
	sectors      int
	k            int             // bits a key sets in a block
	first        int             // of which in its word of sector 0
	ks           [MaxSectors]int // bits a key sets in each sector: ks[0] = first
	rest4        bool            // every ks[i] is a multiple of four: see putRest4
	touch1       bool            // a short-path TestAndAdd loads sector 1 of all eight slots: see touchSector1
	restOff      []uint64        // per bit i of the pattern, k of them: the offset of its sector, sector·sectorStride
	sectorStride uint64          // words from sector i of a slot to sector i+1 of it: slots·8
	groupWords   uint64
	// pages is nil for blocks populated when made; else it has one bit per page of words, set
	// once the page was written (see writeFirst), and pageOff is the index of words[0] in its
	// page.
	pages   []uint64
	pageOff uint64
}

// newBlocks allocates zeroed blocks of the given layout. Eager blocks have every page mapped
// writable at once (populateWords); the others are mapped page by page, each with a write
// (writeFirst).
func newBlocks(groups uint64, slots int, lp layoutParams, eager bool) blocks {
	return blocksIn(alignedWords(blockWords(groups, slots, lp), eager), groups, slots, lp, eager)
}

// blockWords returns the number of words of blocks of the given layout.
func blockWords(groups uint64, slots int, lp layoutParams) uint64 {
	return groups * uint64(slots*lp.sectors) * sectorWords
}

// blocksIn returns blocks of the given layout over words, which must be zero, 64-byte aligned and
// blockWords long; eager says whether their pages were populated.
func blocksIn(words []uint64, groups uint64, slots int, lp layoutParams, eager bool) blocks {
	b := blocks{
		words:        words,
		groups:       groups,
		slots:        slots,
		sectors:      lp.sectors,
		k:            lp.k,
		first:        lp.first,
		sectorStride: uint64(slots) * sectorWords,
		groupWords:   uint64(slots*lp.sectors) * sectorWords,
	}
	s := Sizing{K: lp.k, Sectors: lp.sectors, FirstBits: lp.first}
	b.restOff = make([]uint64, 0, lp.k)
	b.rest4 = true
	for i := range lp.sectors {
		b.ks[i] = s.sectorBits(i)
		b.rest4 = b.rest4 && b.ks[i]&3 == 0
		for range b.ks[i] {
			b.restOff = append(b.restOff, uint64(i)*b.sectorStride)
		}
	}
	b.touch1 = b.rest4 && lp.sectors >= 2 && slots == sectorWords
	if !eager {
		b.pageOff = uint64(uintptr(unsafe.Pointer(&b.words[0])) % pageSize / 8)
		b.pages = make([]uint64, ((uint64(len(b.words))+b.pageOff)/pageWords+64)/64)
	}
	return b
}

// pageWords is the number of words in a page (pageSize).
const pageWords = pageSize / 8

// writeFirst makes sure that the pages holding words [from, from+n) were written before they are
// read, so that none is first mapped as the shared zero page by a read and then copied by a write
// (see populate.go). A page not yet marked in pages gets an atomic add of 0 to one of the range's
// words in it (a write that changes nothing, safe against every concurrent access), and then its
// mark. Two goroutines may both write a page; a spare write costs a few nanoseconds. Blocks
// populated when made have nothing to do.
func (b *blocks) writeFirst(from, n uint64) {
	if b.pages == nil || n == 0 {
		return
	}
	last := (from + n - 1 + b.pageOff) / pageWords
	for pg := (from + b.pageOff) / pageWords; pg <= last; pg++ {
		w, bit := &b.pages[pg/64], uint64(1)<<(pg%64)
		if atomic.LoadUint64(w)&bit != 0 {
			continue
		}
		i := max(from, (pg*pageWords)-min(pg*pageWords, b.pageOff))
		atomic.AddUint64(&b.words[i], 0)
		atomic.OrUint64(w, bit)
	}
}

// pagesWritten reports whether the pages holding words [from, from+n) are marked written, for a
// range of at most two pages (a key group of stage 0 within a page of words): writeFirst has
// nothing to do for it then. For more pages it reports false.
func (b *blocks) pagesWritten(from, n uint64) bool {
	if b.pages == nil {
		return true
	}
	first, last := (from+b.pageOff)/pageWords, (from+n-1+b.pageOff)/pageWords
	return last-first <= 1 && atomic.LoadUint64(&b.pages[first/64])&(1<<(first%64)) != 0 &&
		atomic.LoadUint64(&b.pages[last/64])&(1<<(last%64)) != 0
}

// markPages marks the pages holding words [from, from+n) written, for a caller that writes them
// itself before anything reads them. Safe for concurrent use.
func (b *blocks) markPages(from, n uint64) {
	if b.pages == nil || n == 0 {
		return
	}
	last := (from + n - 1 + b.pageOff) / pageWords
	for pg := (from + b.pageOff) / pageWords; pg <= last; pg++ {
		if w, bit := &b.pages[pg/64], uint64(1)<<(pg%64); atomic.LoadUint64(w)&bit == 0 {
			atomic.OrUint64(w, bit)
		}
	}
}

// writtenBytes returns the bytes of the pages of words marked written, at most the size of words.
func (b *blocks) writtenBytes() uint64 {
	if b.pages == nil {
		return uint64(len(b.words)) * 8
	}
	n := uint64(0)
	for i := range b.pages {
		n += uint64(bits.OnesCount64(atomic.LoadUint64(&b.pages[i])))
	}
	return min(n*pageSize, uint64(len(b.words))*8)
}

// markWritten marks every page of the blocks written: a restore wrote them all.
func (b *blocks) markWritten() {
	for i := range b.pages {
		atomic.StoreUint64(&b.pages[i], ^uint64(0))
	}
}

// firstWord returns the word of sector 0 of slot s that the probe uses.
func (b *blocks) firstWord(p *probe, s int) *uint64 {
	return &b.words[p.base+p.w0*uint64(b.slots)+uint64(s)]
}

// sector returns the eight words of a sector starting at word i.
func (b *blocks) sector(i uint64) *[sectorWords]uint64 {
	return (*[sectorWords]uint64)(b.words[i : i+sectorWords])
}

// restSector returns the index of the first word of sector sec ≥ 1 of slot s in the group at base.
func (b *blocks) restSector(base uint64, s, sec int) uint64 {
	return base + uint64(sec)*b.sectorStride + uint64(s)*sectorWords
}

// slotWords calls fn with every word of slot s in group g.
func (b *blocks) slotWords(g uint64, s int, fn func(w *uint64)) {
	base := g * b.groupWords
	for w := range uint64(sectorWords) {
		fn(&b.words[base+w*uint64(b.slots)+uint64(s)])
	}
	for sec := 1; sec < b.sectors; sec++ {
		sw := b.sector(b.restSector(base, s, sec))
		for w := range sw {
			fn(&sw[w])
		}
	}
}

// has reports whether all of the probe's bits are set in slot s, whose words carry no stale tag
// (a grown stage, or a slot of stage 0 without a pending sweep).
func (b *blocks) has(p *probe, s int) bool {
	return p.mask[p.w0&(sectorWords-1)]&^atomic.LoadUint64(b.firstWord(p, s)) == 0 && b.restHas(p, s)
}

// restHas reports whether the probe's bits are set in the sectors after the first of slot s's
// block, whose words carry no stale tag. It completes the probe's pattern if it has to, after it
// issued the load of sector 1, so that the cache miss overlaps with that work.
func (b *blocks) restHas(p *probe, s int) bool {
	if b.sectors == 1 {
		return true
	}
	if !p.rest {
		atomic.LoadUint64(&b.words[b.restSector(p.base, s, 1)])
		b.fillRest(p)
	}
	for sec := 1; sec < b.sectors; sec++ {
		if missing(b.sector(b.restSector(p.base, s, sec)), p.sectorMask(sec)) != 0 {
			return false
		}
	}
	return true
}

// restMissing reports whether one of the bits of the key whose tag is tag is missing from the
// sectors after the first of slot s's block in the group at base, whose words carry no stale
// tag. It tests the bits in the order fillRest sets them, and stops at the first missing one:
// about two for a key that was never added.
func (b *blocks) restMissing(base uint64, s int, tag uint64) bool {
	n := b.first // the next bit of the pattern
	var z uint64
	if n&3 != 0 {
		z = patternOutput(tag, n>>2) >> (16 * (n & 3))
	}
	for sec := 1; sec < b.sectors; sec++ {
		sw := b.sector(b.restSector(base, s, sec))
		for range b.ks[sec] {
			if n&3 == 0 {
				z = patternOutput(tag, n>>2)
			}
			if atomic.LoadUint64(&sw[z&(sectorWords-1)])&dataBit(z) == 0 {
				return true
			}
			z >>= 16
			n++
		}
	}
	return false
}

// putRest sets the bits after the first of the key whose tag is tag in the sectors after the first
// of slot s's block in the group at base, for the single writer: a plain read and store of each
// bit's word (see storeSector), without building the key's mask. The slot's words must carry no
// stale tag. It walks the pattern one output of the stream at a time, each bit's sector from
// restOff, with fewer live values than fillRest's walk by sector, so that the compiler keeps them
// in registers.
func (b *blocks) putRest(base uint64, s int, tag uint64) {
	words, off := b.words[base+uint64(s)*sectorWords:], b.restOff
	for n := b.first; n < len(off); {
		z := patternOutput(tag, n>>2) >> (16 * (n & 3))
		for end := min(n|3+1, len(off)); n < end; n++ {
			w := &words[off[n]+z&(sectorWords-1)]
			storeWord(w, loadWord(w)|dataBit(z))
			z >>= 16
		}
	}
}

// put sets the probe's bits in slot s, whose words carry no stale tag: atomic ORs, or the single
// writer's plain read and store of each word.
func (b *blocks) put(p *probe, s int, single bool) {
	if !p.rest {
		b.fillRest(p)
	}
	w, m := b.firstWord(p, s), p.mask[p.w0&(sectorWords-1)]
	if single {
		storeWord(w, atomic.LoadUint64(w)|m)
	} else {
		orWord(w, m)
	}
	for sec := 1; sec < b.sectors; sec++ {
		sw := b.sector(b.restSector(p.base, s, sec))
		if single {
			storeSector(sw, p.sectorMask(sec))
		} else {
			orSector(sw, p.sectorMask(sec))
		}
	}
}

// probe is where a key lives: its group, the word of sector 0 it uses and its bit pattern.
type probe struct {
	group uint64
	base  uint64 // index of the group's first word
	tag   uint64
	shard uint64 // fill-counter shard: the hash's top shardBits bits
	w0    uint64 // the word of sector 0 the key uses
	rest  bool   // mask holds the bits of sectors 1 … sectors-1 (fillRest ran)
	// xs caches the key's stage hashes (stageHash) of stages 1 … maxCachedStages, 0 where not
	// computed yet: a lookup computes them, and an insertion into a grown stage reuses them.
	xs [maxCachedStages]uint64
	// mask[w0] holds the key's bits in its word of sector 0 (the other words of mask[0:8] are not
	// used); mask[8i+w] its bits in word w of sector i ≥ 1.
	mask [MaxSectors * sectorWords]uint64
}

// sectorMask returns the probe's bit pattern in sector sec ≥ 1 of a block.
func (p *probe) sectorMask(sec int) *[sectorWords]uint64 {
	return (*[sectorWords]uint64)(p.mask[sec*sectorWords:])
}

// The bit pattern of a key comes from a SplitMix64 stream seeded by its tag: output n is
// patternOutput(tag, n), and bit i of the key takes the 16 bits i%4 of output i/4: 3 for a word
// and 13 for one of the word's 63 data bits by multiply-shift (each data bit gets 130 or 131 of
// the 8192 values: 0.8% apart, far below what a false-positive rate could show). The first bits
// all go to the word that bit 0 picks, in sector 0; the others, in order, Sizing.sectorBits(i) to
// sector i, each to the word it picks there. Unlike double hashing inside a block, which can make
// only 2^17 distinct patterns and so puts a floor under the false-positive rate near 1e-5, this
// gives every tag its own pattern.

// patternOutput returns output n of the pattern stream of tag.
func patternOutput(tag uint64, n int) uint64 {
	z := tag + uint64(n+1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// dataBit returns the data bit a 16-bit chunk of the pattern stream picks in its word.
func dataBit(z uint64) uint64 { return 1 << ((z >> 3 & (1<<13 - 1)) * wordBits >> 13) }

// fillFirst sets the probe's word of sector 0 and its first bits in it, from z0, the pattern
// stream's output 0 for the probe's tag.
func (b *blocks) fillFirst(p *probe, z0 uint64) {
	p.w0 = z0 & (sectorWords - 1)
	m := firstBits4(z0)
	if b.first != 4 {
		m = firstMask(p.tag, z0, b.first)
	}
	p.mask[p.w0] = m
}

// firstMask returns the first n bits of the pattern of tag in their word of sector 0, from z0,
// the pattern stream's output 0 for the tag. The hot paths take firstBits4 for the usual n = 4
// and call it for other layouts; for n > 4 (the first bits of the lower rates' layouts) it starts
// from firstBits4 too, and takes the bits past the fourth from the stream's later outputs.
func firstMask(tag, z0 uint64, n int) uint64 {
	if n >= 4 {
		m := firstBits4(z0)
		for i := 4; i < n; i += 4 {
			z := patternOutput(tag, i>>2)
			for range min(n-i, 4) {
				m |= dataBit(z)
				z >>= 16
			}
		}
		return m
	}
	m, z := uint64(0), z0
	for i := range n {
		if i&3 == 0 && i > 0 {
			z = patternOutput(tag, i>>2)
		}
		m |= dataBit(z)
		z >>= 16
	}
	return m
}

// firstBits4 is firstMask for n = 4: dataBit of the four 16-bit chunks of z0, one output of the
// stream, in straight code that the compiler inlines. It computes two chunks per multiplication:
// the 13 bits of chunks 0 and 2 (then 1 and 3) go to the two 32-bit halves of a word, where each
// times 63 stays below 2^19 and so never reaches the other half; shifted right by 13, the low six
// bits of each half are dataBit's bit offsets.
func firstBits4(z0 uint64) uint64 {
	const halves = 1<<13 - 1 | (1<<13-1)<<32
	a := (z0 >> 3 & halves) * wordBits >> 13  // chunks 0 and 2
	b := (z0 >> 19 & halves) * wordBits >> 13 // chunks 1 and 3
	return 1<<(a&63) | 1<<(a>>32&63) | 1<<(b&63) | 1<<(b>>32&63)
}

// fillRest sets the probe's bits in sectors 1 … sectors-1. It walks the sectors in order, ks[sec]
// bits each, so that each bit's word is its 16-bit chunk's
// low 3 bits inside the sector's eight mask words, with no table lookup and no bounds check.
func (b *blocks) fillRest(p *probe) {
	n := b.first // the next bit of the pattern
	var z uint64
	if n&3 != 0 {
		z = patternOutput(p.tag, n>>2) >> (16 * (n & 3))
	}
	for sec := 1; sec < b.sectors; sec++ {
		sm := p.sectorMask(sec)
		*sm = [sectorWords]uint64{}
		for range b.ks[sec] {
			if n&3 == 0 {
				z = patternOutput(p.tag, n>>2)
			}
			sm[z&(sectorWords-1)] |= dataBit(z)
			z >>= 16
			n++
		}
	}
	p.rest = true
}

// fillPattern sets the probe's whole pattern for its tag.
func (b *blocks) fillPattern(p *probe) {
	b.fillFirst(p, patternOutput(p.tag, 0))
	b.fillRest(p)
}

// missing returns the bits of m that are not set in b.
func missing(b, m *[sectorWords]uint64) uint64 {
	return m[0]&^atomic.LoadUint64(&b[0]) | m[1]&^atomic.LoadUint64(&b[1]) |
		m[2]&^atomic.LoadUint64(&b[2]) | m[3]&^atomic.LoadUint64(&b[3]) |
		m[4]&^atomic.LoadUint64(&b[4]) | m[5]&^atomic.LoadUint64(&b[5]) |
		m[6]&^atomic.LoadUint64(&b[6]) | m[7]&^atomic.LoadUint64(&b[7])
}

// missingWordTagged returns the bits of m that are not set in the word at w, reading a word whose
// tag bit differs from tag as empty.
func missingWordTagged(w *uint64, m, tag uint64) uint64 {
	x := atomic.LoadUint64(w)
	valid := ^uint64(int64(x^tag) >> 63) // all ones if x carries tag
	return m &^ (x & valid)
}

// missingTagged is missing that reads a word whose tag bit differs from tag as empty.
func missingTagged(b, m *[sectorWords]uint64, tag uint64) uint64 {
	var miss uint64
	for w := range sectorWords {
		miss |= missingWordTagged(&b[w], m[w], tag)
	}
	return miss
}
