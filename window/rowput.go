package window

import (
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// The short paths' walks of a key's bits after the first, for the layouts whose sectors each take a
// multiple of four bits (blocks.rest4: the layout of 1e-3 at eight generations, 4 + 4 + 4, and of
// 1e-2 at four, 4 + 4): each output of the pattern stream then gives four bits of one sector.
// putRest, orRest and restMissing walk any layout one bit at a time, with a test of whether the
// bit starts a new output, a load of restOff and a bounds check per bit; putRest4 (the single
// writer's insertion, rowInsert), orRest4 (shared mode's, sharedInsert) and restMissing4 (the test
// of a slot whose word of the row has the key's first bits, rowHas8) take the four bits of an
// output in straight code on the sector's eight words. With rowHits8 they cut the instructions of
// a TestAndAdd by about an eighth and those of a miss by about a tenth (callgrind). TestRest4MatchesRest holds
// them to the general walks.

// putRest4 is putRest for a layout of rest4: the single writer's plain read and store of each
// bit's word in the sectors after the first of slot s's block in the group at base.
func (b *blocks) putRest4(base uint64, s int, tag uint64) {
	n := b.first >> 2 // the next output of the pattern stream
	for sec := 1; sec < b.sectors; sec++ {
		sw := b.sector(b.restSector(base, s, sec))
		for end := n + b.ks[sec]>>2; n < end; n++ {
			z := patternOutput(tag, n)
			w := &sw[z&(sectorWords-1)]
			storeWord(w, loadWord(w)|dataBit(z))
			w = &sw[z>>16&(sectorWords-1)]
			storeWord(w, loadWord(w)|dataBit(z>>16))
			w = &sw[z>>32&(sectorWords-1)]
			storeWord(w, loadWord(w)|dataBit(z>>32))
			w = &sw[z>>48&(sectorWords-1)]
			storeWord(w, loadWord(w)|dataBit(z>>48))
		}
	}
}

// orRest4 is orRest for a layout of rest4: each bit goes into its word of the sectors after the
// first of slot s's block in the group at base with an atomic OR, unless the word has it already
// (orWord).
func (b *blocks) orRest4(base uint64, s int, tag uint64) {
	n := b.first >> 2
	for sec := 1; sec < b.sectors; sec++ {
		sw := b.sector(b.restSector(base, s, sec))
		for end := n + b.ks[sec]>>2; n < end; n++ {
			z := patternOutput(tag, n)
			orWord(&sw[z&(sectorWords-1)], dataBit(z))
			orWord(&sw[z>>16&(sectorWords-1)], dataBit(z>>16))
			orWord(&sw[z>>32&(sectorWords-1)], dataBit(z>>32))
			orWord(&sw[z>>48&(sectorWords-1)], dataBit(z>>48))
		}
	}
}

// restMissing4 is restMissing for a layout of rest4: whether one of the key's bits after the
// first is missing from slot s's block in the group at base, tested in order, stopping at the
// first missing one.
func (b *blocks) restMissing4(base uint64, s int, tag uint64) bool {
	n := b.first >> 2
	for sec := 1; sec < b.sectors; sec++ {
		sw := b.sector(b.restSector(base, s, sec))
		for end := n + b.ks[sec]>>2; n < end; n++ {
			z := patternOutput(tag, n)
			if loadWord(&sw[z&(sectorWords-1)])&dataBit(z) == 0 ||
				loadWord(&sw[z>>16&(sectorWords-1)])&dataBit(z>>16) == 0 ||
				loadWord(&sw[z>>32&(sectorWords-1)])&dataBit(z>>32) == 0 ||
				loadWord(&sw[z>>48&(sectorWords-1)])&dataBit(z>>48) == 0 {
				return true
			}
		}
	}
	return false
}

// rowHits8 is rowHits for a row of eight words, with nm = ^m: bit s is set when word s has every
// bit of m, that is when (nm|row[s]) + 1 is 0 (see lineHas). Straight code with plain loads (see
// loadWord), for rowHas8.
func rowHits8(row *[sectorWords]uint64, nm uint64) uint64 {
	return ((nm|loadWord(&row[0]))+1)>>63 ^ 1 | (((nm|loadWord(&row[1]))+1)>>63^1)<<1 |
		(((nm|loadWord(&row[2]))+1)>>63^1)<<2 | (((nm|loadWord(&row[3]))+1)>>63^1)<<3 |
		(((nm|loadWord(&row[4]))+1)>>63^1)<<4 | (((nm|loadWord(&row[5]))+1)>>63^1)<<5 |
		(((nm|loadWord(&row[6]))+1)>>63^1)<<6 | (((nm|loadWord(&row[7]))+1)>>63^1)<<7
}

// rowHas8 is rowHas for a row of eight live slots (rowTest's and addRowWritten's usual case),
// with rowHits8 and, for a layout of rest4, restMissing4.
func (f *Filter) rowHas8(base, at, tag, m uint64) bool {
	for hits := rowHits8(f.row8(at), ^m); hits != 0; hits &= hits - 1 {
		s := bits.TrailingZeros64(hits)
		if f.rest4 {
			if !f.restMissing4(base, s, tag) {
				return true
			}
		} else if !f.restMissing(base, s, tag) {
			return true
		}
	}
	return false
}

// touchSector1 loads one word of sector 1 of each of the eight slots of the group at base, for a
// TestAndAdd whose row may have the key's first bits in another generation's word (about a
// third of new keys at 1e-3): that slot's sector 1 is then read after the row, a second cache miss
// after the first, unless it was loaded with it. The eight lines are adjacent. The short paths call
// it for the layouts of rest4 with eight slots only (blocks.touch1), where it was measured to pay:
// at 1e-6 (fewer rows match a key's first bits) the eight lines measured no gain.
func (f *Filter) touchSector1(base uint64) {
	s1 := (*[sectorWords * sectorWords]uint64)(unsafe.Pointer(&f.words[base+f.sectorStride]))
	atomic.LoadUint64(&s1[0])
	atomic.LoadUint64(&s1[8])
	atomic.LoadUint64(&s1[16])
	atomic.LoadUint64(&s1[24])
	atomic.LoadUint64(&s1[32])
	atomic.LoadUint64(&s1[40])
	atomic.LoadUint64(&s1[48])
	atomic.LoadUint64(&s1[56])
}
