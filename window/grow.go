package window

import (
	"math/bits"
	"runtime"
	"sync/atomic"
)

// stage is a grown stage of one generation: a blocked Bloom filter of its own (blocks of one
// slot, in the layout of stage 0 but without use tags: its words are fresh and die with the
// generation), with fill counters sharded by the high bits of the key's stage hash. Its layout is
// immutable; its words and counters are written with atomics (shared mode) or by the single
// writer.
type stage struct {
	blocks
	index    int
	limit    uint64 // keys per shard at which the stage is full
	capacity uint64
	target   float64
	bytes    uint64
	count    []fillCounter // per shard: keys the stage was offered
	mapped   bool          // words is a mapping of its own (newStage)
}

// fillCounter counts keys offered to one shard of a stage, alone on its cache line. full is set
// (to 1) on every stage-0 shard of a slot once the slot's stage 0 has taken GrowAt keys; it shares
// the line with the count, so the hot path reads no further line to learn it.
type fillCounter struct {
	n    uint64
	full uint32
	_    [52]byte
}

// grownGen is the growth of one generation: its stages after stage 0, and whether it wanted a
// stage the memory cap refused. stages only grows, by compare-and-swap of an immutable slice.
type grownGen struct {
	epoch  uint64
	stages atomic.Pointer[[]*stage]
	capped atomic.Bool
}

// grownSet is the immutable list of grown live generations; Filter.grown is nil until one grows.
type grownSet struct {
	gens []*grownGen
}

// stageHash derives a key's hash for stage i ≥ 1 from its stage-0 group and tag (all a helper
// knows of a claimed key): its group, shard and bit pattern in the stage are independent of
// stage 0's.
func stageHash(group, tag uint64, i int) uint64 {
	z := tag ^ group*0x9e3779b97f4a7c15 ^ uint64(i)*0xd6e8feb86659fd93
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Grown stages. A lookup (lookup) computes the key's word of sector 0 in every grown stage and
// loads it, so that their cache misses overlap with each other and with stage 0's (as touch does
// for stage 0); a second pass tests the first bits of each from what the first computed, and the
// rest of the pattern, one bit at a time, only for a stage whose word has them all. The stage hash
// depends only on the key and the stage's index, so it is computed once per index (generations
// with stages of the same index share it) and kept in the probe for an insertion (addToStages).
// Past maxProbedStages stages, the rest are tested one by one.

// lookup reports whether the key is in a live generation of v, stage 0 or grown. When a generation
// has grown, the loads of the key's words in the grown stages are issued before stage 0 is tested,
// so that all of them overlap with the row of stage 0 (a miss waits for one memory latency, not
// two). An auto-sized generation holds all but its first 1024 keys in its grown stages, so there
// a key that was seen is looked for in them first; a fixed capacity holds its keys in stage 0 and
// tests it first.
func (f *Filter) lookup(v *view, p *probe) bool {
	return f.lookupIn(v, f.grown.Load(), p)
}

// lookupIn is lookup for the grown generations gs (nil when none grew): apart, so that lookup is
// inlined.
func (f *Filter) lookupIn(v *view, gs *grownSet, p *probe) bool {
	if gs == nil {
		return f.contains(v, p)
	}
	var at [maxProbedStages]stageWord
	n, more := loadStageWords(gs, p, &at)
	if f.cfg.Auto {
		return stageWordsHave(at[:n]) || f.contains(v, p) || more && grownHasPast(gs, p, n)
	}
	return f.contains(v, p) || stageWordsHave(at[:n]) || more && grownHasPast(gs, p, n)
}

// loadStageWords computes the key's word of sector 0 in each stage of gs, up to
// maxProbedStages of them, into at and loads it; more says that stages were left out.
func loadStageWords(gs *grownSet, p *probe, at *[maxProbedStages]stageWord) (n int, more bool) {
	for _, gg := range gs.gens {
		for _, st := range *gg.stages.Load() {
			if n == len(at) {
				return n, true
			}
			at[n] = st.wordOf(p.stageHash(st.index))
			at[n].st = st
			atomic.LoadUint64(&st.words[at[n].w])
			n++
		}
	}
	return n, false
}

// stageWordsHave reports whether the key is in one of the stages whose words loadStageWords
// loaded.
func stageWordsHave(at []stageWord) bool {
	for i := range at {
		if a := &at[i]; !a.st.firstMissing(a) && !a.st.restMissingAt(a) {
			return true
		}
	}
	return false
}

// hasAt reports whether all of the bits of the key whose stage hash is x are set in the stage.
func (sg *stage) hasAt(x uint64) bool {
	a := sg.wordOf(x)
	return !sg.firstMissing(&a) && !sg.restMissingAt(&a)
}

// restMissingAt reports whether one of the bits after the first of the key at a is missing from
// the stage: restMissing, one bit at a time in the pattern's order, without building the key's
// mask (a probe, zeroed and filled, was most of a grown stage's test).
func (sg *stage) restMissingAt(a *stageWord) bool {
	return sg.restMissing(a.w-a.z0&(sectorWords-1), 0, a.x&tagMask|1)
}

// grownHasPast tests the stages of gs after the first skip of lookup's walk, one by one. A
// stage added meanwhile to a generation walked before may shift the walk by one: a stage is then
// tested twice, and the new one, empty when the lookup began, not at all.
func grownHasPast(gs *grownSet, p *probe, skip int) bool {
	for _, gg := range gs.gens {
		for _, st := range *gg.stages.Load() {
			if skip > 0 {
				skip--
				continue
			}
			if st.hasAt(p.stageHash(st.index)) {
				return true
			}
		}
	}
	return false
}

// maxProbedStages is how many stages lookup loads ahead of testing them.
const maxProbedStages = 16

// stageWord is where a key's first bits are in a stage: its stage hash x, the index w of its word
// of sector 0 and the pattern stream's output 0 for its tag, z0.
type stageWord struct {
	st       *stage
	x, w, z0 uint64
}

// wordOf returns the position of the first bits of the key whose stage hash is x in the stage.
func (sg *stage) wordOf(x uint64) stageWord {
	g, _ := bits.Mul64(x, sg.groups)
	z0 := patternOutput(x&tagMask|1, 0)
	return stageWord{x: x, w: g*sg.groupWords + z0&(sectorWords-1), z0: z0}
}

// firstMissing reports whether one of the first bits of the key at a is missing from its word of
// sector 0 in the stage: the test of a key that was never added, which usually stops at the first
// or second bit, without building the key's mask (restMissingAt tests the rest when every first
// bit is set).
func (sg *stage) firstMissing(a *stageWord) bool {
	w := atomic.LoadUint64(&sg.words[a.w])
	z := a.z0
	for i := range sg.first {
		if i&3 == 0 && i > 0 {
			z = patternOutput(a.x&tagMask|1, i>>2)
		}
		if w&dataBit(z) == 0 {
			return true
		}
		z >>= 16
	}
	return false
}

// maxCachedStages is how many stage indexes a probe keeps the stage hash of.
const maxCachedStages = 8

// stageHash returns stageHash for the probe's key and stage i, from the probe's cache when it was
// computed before (0 marks an empty entry: a stage hash of 0 is recomputed, which is only slower).
func (p *probe) stageHash(i int) uint64 {
	if i > maxCachedStages {
		return stageHash(p.group, p.tag, i)
	}
	if p.xs[i-1] == 0 {
		p.xs[i-1] = stageHash(p.group, p.tag, i)
	}
	return p.xs[i-1]
}

// bump counts one key offered to a shard counter and returns the new count: an atomic add in
// shared mode, a plain load and store for the single writer.
func (f *Filter) bump(c *fillCounter) uint64 {
	if f.single {
		n := atomic.LoadUint64(&c.n) + 1
		storeWord(&c.n, n)
		return n
	}
	return atomic.AddUint64(&c.n, 1)
}

// insert adds a new key to v's current generation: to stage 0 until it has taken GrowAt keys,
// else to the first grown stage with room (see addGrown). In shared mode the caller holds the
// key's claim.
//
// Stage 0 counts its keys in shards by the hash's top bits, so that writers share no counter, but
// is full when their sum passes GrowAt: a shard is only a share of the count, not of the
// capacity, so a shard that draws more keys than its share by chance does not make the
// generation grow early. A shard within its share (limit0, GrowAt/shards) takes the key at once;
// past it, stage0Room adds up the slot's shards, and marks them all full once the sum passes
// GrowAt. Only keys of the last few percent before GrowAt (a shard's count is within a few
// standard deviations of its share) and of a full stage 0 take that path.
func (f *Filter) insert(v *view, p *probe) {
	c := &f.fill[v.cur<<f.shardBits+int(p.shard)]
	if atomic.LoadUint32(&c.full) == 0 && (f.bump(c) <= f.limit0 || f.stage0Room(v.cur)) {
		f.set(v, p)
		return
	}
	f.addGrown(v, p)
}

// stage0Room reports whether slot's stage 0 has taken at most GrowAt keys, counting the key being
// inserted. Once it has not, it marks every shard of the slot full. Concurrent writers may each
// find room for their key at the boundary: stage 0 takes at most one key per writer more.
func (f *Filter) stage0Room(slot int) bool {
	if f.stage0Keys(slot) <= f.sizing.GrowAt {
		return true
	}
	f.markFull(slot, 1)
	return false
}

// stage0Keys returns the keys slot's stage 0 was offered: the sum of its shards' counts.
func (f *Filter) stage0Keys(slot int) uint64 {
	var sum uint64
	for i := range f.fill[slot<<f.shardBits : (slot+1)<<f.shardBits] {
		sum += atomic.LoadUint64(&f.fill[slot<<f.shardBits+i].n)
	}
	return sum
}

// markFull sets the full flag of every stage-0 shard of slot to full (0 or 1).
func (f *Filter) markFull(slot int, full uint32) {
	for i := range f.fill[slot<<f.shardBits : (slot+1)<<f.shardBits] {
		atomic.StoreUint32(&f.fill[slot<<f.shardBits+i].full, full)
	}
}

// addGrown adds a key that stage 0 has no room for to the first stage of v's current generation
// whose shard has room, growing the generation if every stage is full. At the memory cap it adds
// the key to the last stage, or to stage 0 when the generation has none (OverloadDrop), counted
// there past its capacity (putStage, countStage0), or nowhere (OverloadPass). If a rotation
// happened meanwhile, the key is added to the new current generation too, as set does.
func (f *Filter) addGrown(v *view, p *probe) {
	last, ok := f.addToStages(f.grownGen(v.epoch), p)
	switch {
	case ok:
		f.recheckRotation(v, p)
	case last == nil && f.cfg.Overload == OverloadDrop:
		f.countStage0(v.cur, p)
		f.set(v, p) // no stage could be allocated: stage 0 takes the key
	case last != nil && f.cfg.Overload == OverloadDrop:
		f.putStage(last, p)
		f.recheckRotation(v, p)
	default:
		f.forgotten.Add(1) // OverloadPass: the key is nowhere, so its duplicates pass
	}
}

// addToStages adds the key to the first stage of gg whose shard has room, growing gg if every
// stage is full, and reports whether it did; at the memory cap it returns false and gg's last
// stage (nil if it has none).
func (f *Filter) addToStages(gg *grownGen, p *probe) (last *stage, ok bool) {
	for i := 1; ; i++ {
		sts := *gg.stages.Load()
		if i > len(sts) {
			if !f.grow(gg, i) {
				return last, false
			}
			sts = *gg.stages.Load()
		}
		st := sts[i-1]
		last = st
		x := p.stageHash(i) // the shard first: a full stage needs no pattern
		c := &st.count[x>>f.shardShift]
		if atomic.LoadUint64(&c.n) >= st.limit || f.bump(c) > st.limit {
			continue
		}
		st.putAt(x, f.single)
		return st, true
	}
}

// putAt sets the bits of the key whose stage hash is x in the stage, straight from the key's tag
// without building its mask: the first bits into their word of sector 0, then the others one at a
// time; the single writer with plain loads and stores (putRest), shared mode with atomic ORs of
// the bits a word lacks (orRest).
func (sg *stage) putAt(x uint64, single bool) {
	g, _ := bits.Mul64(x, sg.groups)
	base, tag := g*sg.groupWords, x&tagMask|1
	z0 := patternOutput(tag, 0)
	w, m := &sg.words[base+z0&(sectorWords-1)], firstMask(tag, z0, sg.first)
	if single {
		storeWord(w, loadWord(w)|m)
		sg.putRest(base, 0, tag)
		return
	}
	orWord(w, m)
	sg.orRest(base, 0, tag)
}

// putStage adds a key to stage st at the memory cap, which the stage takes past its capacity, and
// counts it in the key's shard (beyond the shard's limit, which keeps the stage full for
// addToStages): a stage's counts then say how many keys its bits hold, so that a snapshot of a
// filter at its cap is one Restore trusts (checkFill), and the generation's observed load
// (slotKeys) is the load it took. The count comes first: a snapshot copies the counts before the
// words.
func (f *Filter) putStage(st *stage, p *probe) {
	x := p.stageHash(st.index)
	f.bump(&st.count[x>>f.shardShift])
	st.putAt(x, f.single)
}

// countStage0 counts a key that slot's stage 0 takes without growing: at the memory cap past
// GrowAt, or late into an older generation (writeOld), for the reason putStage counts one in a
// grown stage.
func (f *Filter) countStage0(slot int, p *probe) {
	f.bump(&f.fill[slot<<f.shardBits+int(p.shard)])
}

// recheckRotation adds a key that was put in a grown stage of v's current generation to the new
// current generation if a rotation happened meanwhile, so that it is not left only in a
// generation being retired.
func (f *Filter) recheckRotation(v *view, p *probe) {
	if nv := f.view.Load(); nv.epoch != v.epoch {
		f.set(nv, p)
	}
}

// putNewest adds a claimed key for a helper: to the newest stage of v's current generation, so
// that the key is in the generation before the claim is released. The claimant adds and counts it
// where its shard says; a key in two stages only costs a few bits.
func (f *Filter) putNewest(v *view, p *probe) {
	if gs := f.grown.Load(); gs != nil {
		for _, gg := range gs.gens {
			if sts := *gg.stages.Load(); gg.epoch == v.epoch && len(sts) > 0 {
				st := sts[len(sts)-1]
				st.putAt(p.stageHash(st.index), f.single)
				f.recheckRotation(v, p)
				return
			}
		}
	}
	f.set(v, p)
}

// grownGen returns the growth record of generation epoch, adding an empty one if it has none.
func (f *Filter) grownGen(epoch uint64) *grownGen {
	for {
		old := f.grown.Load()
		var gens []*grownGen
		if old != nil {
			for _, gg := range old.gens {
				if gg.epoch == epoch {
					return gg
				}
			}
			gens = old.gens
		}
		gg := &grownGen{epoch: epoch}
		gg.stages.Store(new([]*stage))
		next := &grownSet{gens: append(append(make([]*grownGen, 0, len(gens)+1), gg), gens...)}
		if f.grown.CompareAndSwap(old, next) {
			return gg
		}
	}
}

// grow publishes stage i of gg if it has fewer, and reports whether gg has stage i afterwards. The
// memory is reserved under the cap first; a goroutine that loses the race to publish returns its
// reservation and drops its allocation. At the cap it marks gg capped and returns false.
func (f *Filter) grow(gg *grownGen, i int) bool {
	for {
		cur := gg.stages.Load()
		if len(*cur) >= i {
			return true
		}
		lay := f.nextStageLayout(gg, i)
		if ok, byBudget := f.reserve(lay.bytes); !ok {
			if !gg.capped.Swap(true) && byBudget {
				f.budget.refused()
			}
			return false
		}
		st := newStage(lay, f.shardBits)
		next := append(append(make([]*stage, 0, i), *cur...), st)
		if gg.stages.CompareAndSwap(cur, &next) {
			f.growths.Add(1)
			return true
		}
		f.stageBytes.Add(-int64(lay.bytes))
		f.budget.release(lay.bytes)
	}
}

// reserve adds n bytes to the grown stages' total if the filter stays under its memory cap and
// its Config.Budget has them; byBudget says that the budget refused them.
func (f *Filter) reserve(n uint64) (ok, byBudget bool) {
	for {
		cur := f.stageBytes.Load()
		if f.sizing.TotalBytes+uint64(cur)+n > f.maxBytes {
			return false, false
		}
		if f.stageBytes.CompareAndSwap(cur, cur+int64(n)) {
			break
		}
	}
	if !f.budget.reserve(n) {
		f.stageBytes.Add(-int64(n))
		return false, true
	}
	return true, false
}

// newStage allocates an empty stage, its pages populated. Its words are a mapping of their own
// where the system allows (mapWords), unmapped when the stage is garbage collected and emptied
// (release) as soon as its generation expires; else they are in the Go heap.
func newStage(l stageLayout, shardBits uint) *stage {
	n := blockWords(l.groups, 1, l.layout)
	words, unmap := mapWords(n)
	if words == nil {
		words = alignedWords(n, true)
	} else {
		populateWords(words)
	}
	st := &stage{
		blocks: blocksIn(words, l.groups, 1, l.layout, true),
		index:  l.index, capacity: l.capacity, target: l.target, bytes: l.bytes,
		limit:  max(l.capacity>>shardBits, 1),
		count:  make([]fillCounter, 1<<shardBits),
		mapped: unmap != nil,
	}
	if unmap != nil {
		runtime.AddCleanup(st, func(unmap func()) { unmap() }, unmap)
	}
	return st
}

// release returns the memory of a mapped stage of an expired generation to the system at once
// (dropPages), rather than when the garbage collector finds the stage unreachable. A reader or
// writer with a view from before the expiry may still touch the words: it reads zeros (the
// generation's keys are past their guarantee) or maps a page again, until the stage is collected.
func (sg *stage) release() {
	if sg.mapped {
		dropPages(sg.words)
	}
}

// dropGrownLocked forgets the growth of generations that are no longer live at epoch and returns
// their memory to the cap. The caller holds f.mu.
func (f *Filter) dropGrownLocked(epoch uint64) {
	n := uint64(f.cfg.Generations)
	for {
		old := f.grown.Load()
		if old == nil {
			return
		}
		var kept []*grownGen
		var dropped []*stage
		var freed int64
		for _, gg := range old.gens {
			if gg.epoch+n > epoch {
				kept = append(kept, gg)
				continue
			}
			for _, st := range *gg.stages.Load() {
				freed += int64(st.bytes)
				dropped = append(dropped, st)
			}
		}
		if len(kept) == len(old.gens) {
			return
		}
		var next *grownSet
		if len(kept) > 0 {
			next = &grownSet{gens: kept}
		}
		if f.grown.CompareAndSwap(old, next) {
			f.stageBytes.Add(-freed)
			f.budget.release(uint64(freed))
			for _, st := range dropped {
				st.release()
			}
			return
		}
	}
}
