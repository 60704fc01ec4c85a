package window

import (
	"math/bits"
	"sync/atomic"
)

// Claim words serialise the insertion of new keys into a group without a lock, in shared mode
// (one word per key group; the single writer takes none). The layout of a word:
//
//   - the low tagBits bits hold the tag of the key being inserted: the low 48 bits of its hash,
//     forced odd, 0 when the group is idle; a helper recomputes the key's pattern from it;
//   - the next genBits bits say where the key goes: 0 for the current generation (TestAndAdd), or
//     1 + e mod N for generation e (TestAndAddAt of an older record). The N live generations are
//     N consecutive numbers once AdvanceEventTo rotated the filter, so e mod N names one of them;
//   - the bits above count completed insertions, so that a claim taken from an idle word proves
//     that no insertion happened since the word was read. The counter is 16 - genBits bits wide.
const (
	tagBits = 48
	tagMask = 1<<tagBits - 1
)

// testAndAdd is testAndAddHash in shared mode: it tests the probe and, if it is new, claims its
// group and sets its bits.
//
// The claim word is read before the membership test, and a claim is only taken by a
// compare-and-swap from that idle word. Every insertion sets a tag in the word and bumps its
// counter on release, so a successful swap proves that no insertion touched the group between the
// read and the swap: the "not seen" answer of the test is still true, and no other goroutine can
// give it for the same key. A goroutine that finds the claim taken completes that insertion itself
// (sets the claimed key's bits and releases the claim) and tries again, so no goroutine ever waits
// for another.
func (f *Filter) testAndAdd(p *probe) (seen bool) {
	c := &f.claims[p.group]
	for {
		cw := c.Load()
		v := f.view.Load() // after cw: sees every view an earlier claimant wrote to
		if f.lookup(v, p) {
			return true
		}
		if cw&tagMask != 0 {
			f.help(v, p.group, cw)
			continue
		}
		if !c.CompareAndSwap(cw, cw|p.tag) {
			continue
		}
		f.insert(v, p)
		c.CompareAndSwap(cw|p.tag, cw+f.seqOne())
		return false
	}
}

// help completes another goroutine's claimed insertion, into the generation the claim names (see
// claimGen), and releases its claim. A key for the current generation goes to its newest stage
// (stage 0 unless the generation grew); the claimant adds and counts it where the key's shard
// says.
func (f *Filter) help(v *view, group, cw uint64) {
	var hp probe
	f.probeFor(&hp, group, cw&tagMask)
	gm := f.claimGenMask()
	if cw&gm != 0 {
		f.helpOld(v, &hp, cw&gm)
	} else {
		f.putNewest(v, &hp)
	}
	f.claims[group].CompareAndSwap(cw, cw&^(tagMask|gm)+f.seqOne())
}

// testAndAddOld is testAndAdd for a key whose target is generation e, older than
// the current one when the caller read the view. The claim word carries the target generation
// (claimGen), so that a goroutine that helps the insertion writes the key where its claimant
// would have.
func (f *Filter) testAndAddOld(p *probe, e uint64) (seen, late bool) {
	c := &f.claims[p.group]
	for {
		cw := c.Load()
		v := f.view.Load() // after cw: sees every view an earlier claimant wrote to
		if f.lookup(v, p) {
			return true, false
		}
		if cw&tagMask != 0 {
			f.help(v, p.group, cw)
			continue
		}
		i, ok := v.generationFor(e)
		if !ok {
			return false, true
		}
		if !f.claimWrite(c, cw, v, p, i) {
			continue
		}
		return false, false
	}
}

// genBits returns the width of the claim word's generation field: enough for 0 … N.
func (f *Filter) genBits() uint { return uint(bits.Len(uint(f.cfg.Generations))) }

// seqOne returns the increment of the claim word's insertion counter.
func (f *Filter) seqOne() uint64 { return 1 << (tagBits + f.genBits()) }

// claimGen returns the generation field of a claim whose key goes to generation e.
func (f *Filter) claimGen(e uint64) uint64 {
	return (e%uint64(f.cfg.Generations) + 1) << tagBits
}

// claimGenMask returns the mask of the claim word's generation field.
func (f *Filter) claimGenMask() uint64 { return (1<<f.genBits() - 1) << tagBits }

// helpOld writes a claimed key whose claim names an older generation (field, the claim word's
// generation bits) into the older live generation of v that matches. If none does, the generation
// expired since the claim (the current generation cannot match: it is newer than the claim's
// target, and within N of it): the key is late, and is not added.
func (f *Filter) helpOld(v *view, p *probe, field uint64) {
	r := field>>tagBits - 1
	for i := len(v.epochs) - 1; i > 0; i-- {
		if v.epochs[i]%uint64(f.cfg.Generations) == r {
			f.writeOld(v, i, p)
			return
		}
	}
}

// claimWrite claims the group word c, read as cw, for p's insertion into generation i of v (0 the
// current one), writes p there and releases the claim. It returns false, having written nothing,
// when another goroutine changed the word first: the caller reads it again.
func (f *Filter) claimWrite(c *atomic.Uint64, cw uint64, v *view, p *probe, i int) bool {
	claim := cw | p.tag
	if i > 0 {
		claim |= f.claimGen(v.epochs[i])
	}
	if !c.CompareAndSwap(cw, claim) {
		return false
	}
	if i == 0 {
		f.insert(v, p)
	} else {
		f.writeOld(v, i, p)
	}
	c.CompareAndSwap(claim, cw+f.seqOne())
	return true
}
