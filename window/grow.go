package window

import (
	"fmt"
	"io"
	"math"
	"math/bits"
	"sync/atomic"
)

// GrowthShare is ε, the share of a generation's false-positive budget that its grown stages may
// use together. Stage 0 counts as full when its own rate reaches (1-ε) of the generation's share
// p_g of the target, and stage i ≥ 1 is sized for ε·p_g·2^-i, so the generation's rate stays at
// or under (1-ε)·p_g + ε·p_g·Σ2^-i < p_g at any load.
const GrowthShare = 1.0 / 8

// maxShardBits bounds the number of fill-counter shards per stage: 64.
const maxShardBits = 6

// keysPerShard is the least number of keys a stage-0 shard should hold before the filter splits
// its count further. A shard is full at its share of GrowAt, and keys spread over shards by
// chance (Poisson), so the first shard fills early by about two standard deviations of its count:
// 4096 keys per shard keep that under 3% of GrowAt.
const keysPerShard = 4096

// OverloadPolicy says what a filter does with new keys once its memory cap stops it from growing
// and the last stage of the current generation is full.
type OverloadPolicy int

const (
	// OverloadDrop keeps adding new keys to the full last stage: every key is remembered, and the
	// false-positive rate rises above the target (real events may be reported as seen).
	OverloadDrop OverloadPolicy = iota
	// OverloadPass stops adding new keys to a full last stage at the cap: the false-positive
	// rate stays at the target, and a later duplicate of a key that was not added is reported new.
	OverloadPass
)

// String returns "drop" or "pass".
func (p OverloadPolicy) String() string {
	if p == OverloadPass {
		return "pass"
	}
	return "drop"
}

// stage is a grown stage of one generation: a blocked Bloom filter of its own (one block of
// sectors per group, no use tags: its words are fresh and die with the generation), with fill
// counters sharded by the high bits of the key's stage hash. Its layout is immutable; its words
// and counters are written with atomics (shared mode) or by the single writer.
type stage struct {
	index    int
	words    []uint64
	groups   uint64
	sectors  int
	k        int
	ks       [MaxSectors]int
	offs     [maxK]uint8
	limit    uint64 // keys per shard at which the stage is full
	capacity uint64
	target   float64
	bytes    uint64
	count    []fillCounter // per shard: keys the stage was offered
}

// fillCounter counts keys offered to one shard of a stage, alone on its cache line.
type fillCounter struct {
	n uint64
	_ [56]byte
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

// stageProbe fills sp with the key's position in st and returns its shard.
func (f *Filter) stageProbe(sp *probe, st *stage, p *probe) uint64 {
	x := stageHash(p.group, p.tag, st.index)
	g, _ := bits.Mul64(x, st.groups)
	sp.group = g
	sp.base = g * uint64(st.sectors) * sectorWords
	sp.tag = x&tagMask | 1
	fillMask(&sp.mask, &st.offs, st.k, sp.tag)
	return x >> f.shardShift
}

// has reports whether all of the probe's bits are set in st.
func (st *stage) has(sp *probe) bool {
	i := sp.base
	for sec := range st.sectors {
		if missing((*[sectorWords]uint64)(st.words[i:i+sectorWords]), sp.sectorMask(sec)) != 0 {
			return false
		}
		i += sectorWords
	}
	return true
}

// put sets the probe's bits in st: atomic ORs, or the single writer's plain stores.
func (st *stage) put(sp *probe, single bool) {
	i := sp.base
	for sec := range st.sectors {
		b := (*[sectorWords]uint64)(st.words[i : i+sectorWords])
		if single {
			storeSector(b, sp.sectorMask(sec))
		} else {
			orSector(b, sp.sectorMask(sec))
		}
		i += sectorWords
	}
}

// grownHas reports whether the key is in a grown stage of a live generation. It costs one atomic
// pointer load while no generation has grown. Otherwise it first loads one word of the key's
// block in every stage, so that their cache misses overlap (as touch does for stage 0), then
// tests the stages one by one.
func (f *Filter) grownHas(p *probe) bool {
	gs := f.grown.Load()
	if gs == nil {
		return false
	}
	for _, gg := range gs.gens {
		for _, st := range *gg.stages.Load() {
			g, _ := bits.Mul64(stageHash(p.group, p.tag, st.index), st.groups)
			atomic.LoadUint64(&st.words[g*uint64(st.sectors)*sectorWords])
		}
	}
	var sp probe
	for _, gg := range gs.gens {
		for _, st := range *gg.stages.Load() {
			f.stageProbe(&sp, st, p)
			if st.has(&sp) {
				return true
			}
		}
	}
	return false
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

// insert adds a new key to v's current generation: to stage 0 while the key's shard of it is
// below its limit, else to the first grown stage with room (see addGrown). In shared mode the
// caller holds the key's claim.
func (f *Filter) insert(v *view, p *probe) {
	if f.bump(&f.fill[v.cur<<f.shardBits+int(p.shard)]) <= f.limit0 {
		f.set(v, p)
		return
	}
	f.addGrown(v, p)
}

// addGrown adds a key whose stage-0 shard is full to the first stage of v's current generation
// whose shard has room, growing the generation if every stage is full. At the memory cap it adds
// the key to the last stage (OverloadDrop) or nowhere (OverloadPass). If a rotation happened
// meanwhile, the key is added to the new current generation too, as set does.
func (f *Filter) addGrown(v *view, p *probe) {
	gg := f.grownGen(v.epoch)
	var sp probe
	var last *stage
	for i := 1; ; i++ {
		sts := *gg.stages.Load()
		if i > len(sts) {
			if !f.grow(gg, i) {
				break
			}
			sts = *gg.stages.Load()
		}
		st := sts[i-1]
		last = st
		c := &st.count[f.stageProbe(&sp, st, p)]
		if atomic.LoadUint64(&c.n) >= st.limit || f.bump(c) > st.limit {
			continue
		}
		st.put(&sp, f.single)
		f.recheckRotation(v, p)
		return
	}
	if last == nil && f.cfg.Overload == OverloadDrop {
		f.set(v, p) // no stage could be allocated: stage 0 takes the key
		return
	}
	if last != nil && f.cfg.Overload == OverloadDrop {
		f.stageProbe(&sp, last, p)
		last.put(&sp, f.single)
		f.recheckRotation(v, p)
	}
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
				var sp probe
				st := sts[len(sts)-1]
				f.stageProbe(&sp, st, p)
				st.put(&sp, f.single)
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
		lay := f.stageLayout(i)
		if !f.reserve(lay.bytes) {
			gg.capped.Store(true)
			return false
		}
		st := newStage(lay, f.shardBits)
		next := append(append(make([]*stage, 0, i), *cur...), st)
		if gg.stages.CompareAndSwap(cur, &next) {
			f.growths.Add(1)
			return true
		}
		f.stageBytes.Add(-int64(lay.bytes))
	}
}

// reserve adds n bytes to the grown stages' total if the filter stays under its memory cap.
func (f *Filter) reserve(n uint64) bool {
	for {
		cur := f.stageBytes.Load()
		if f.sizing.TotalBytes+uint64(cur)+n > f.maxBytes {
			return false
		}
		if f.stageBytes.CompareAndSwap(cur, cur+int64(n)) {
			return true
		}
	}
}

// stageLayout is the layout of stage i ≥ 1 of a generation.
type stageLayout struct {
	index    int
	groups   uint64
	layout   layoutParams
	capacity uint64
	target   float64
	bytes    uint64
}

// stageLayout returns the layout of stage i ≥ 1: capacity Capacity·2^(i-1) at false-positive rate
// GrowthShare·p_g·2^-i, p_g being what stage 0 is sized for.
func (f *Filter) stageLayout(i int) stageLayout {
	return growthStage(f.cfg.Capacity, f.sizing.ShareFPR, i, f.shardBits)
}

func growthStage(capacity uint64, share float64, i int, shardBits uint) stageLayout {
	target := GrowthShare * share * math.Ldexp(1, -i)
	bp := bestLayout(target)
	c := capacity << (i - 1)
	if i-1 >= 64 || c>>(i-1) != capacity {
		c = math.MaxUint64 / 2
	}
	groups := max(uint64(math.Ceil(float64(c)/bp.lambda)), 1)
	return stageLayout{
		index: i, groups: groups, layout: bp, capacity: c, target: target,
		bytes: saturatingMul(groups, uint64(bp.sectors)*SectorBits/8) + 64<<shardBits,
	}
}

// newStage allocates an empty stage.
func newStage(l stageLayout, shardBits uint) *stage {
	s := Sizing{K: l.layout.k, Sectors: l.layout.sectors}
	st := &stage{
		index: l.index, groups: l.groups, sectors: l.layout.sectors, k: l.layout.k,
		capacity: l.capacity, target: l.target, bytes: l.bytes,
		words: alignedWords(l.groups * uint64(l.layout.sectors) * sectorWords),
		limit: max(l.capacity>>shardBits, 1),
		count: make([]fillCounter, 1<<shardBits),
	}
	st.offs = maskOffsets(s)
	for j := range s.Sectors {
		st.ks[j] = s.sectorBits(j)
	}
	return st
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
		var freed int64
		for _, gg := range old.gens {
			if gg.epoch+n > epoch {
				kept = append(kept, gg)
				continue
			}
			for _, st := range *gg.stages.Load() {
				freed += int64(st.bytes)
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
			return
		}
	}
}

// shardLayout returns how many bits of a stage hash select a fill-counter shard for a stage 0
// that is full at growAt keys: up to 64 shards, each holding at least keysPerShard keys.
func shardLayout(growAt uint64) uint {
	b := uint(0)
	for b < maxShardBits && growAt>>(b+1) >= keysPerShard {
		b++
	}
	return b
}

// restoreStages reads the grown stages m describes from r, after stage 0's words, and publishes
// them in f, which is not shared yet; with a nil r it only allocates them, for their generations'
// readers to fill (RestoreGenerations). A stage whose layout differs from what the Config gives
// for its index is incompatible; one of a generation that is not live is corrupt.
func (f *Filter) restoreStages(m Meta, r io.Reader) error {
	if len(m.Stages) == 0 {
		return nil
	}
	if m.ShardBits != int(f.shardBits) {
		return fmt.Errorf("%w: snapshot has %d shard bits, layout needs %d", ErrIncompatible, m.ShardBits, f.shardBits)
	}
	var gens []*grownGen
	for _, sm := range m.Stages {
		if err := f.checkStage(m, sm); err != nil {
			return err
		}
		var gg *grownGen
		if n := len(gens); n > 0 && gens[n-1].epoch == sm.Epoch {
			gg = gens[n-1]
		} else {
			gg = &grownGen{epoch: sm.Epoch}
			gg.stages.Store(new([]*stage))
			gens = append(gens, gg)
		}
		if len(*gg.stages.Load())+1 != sm.Index {
			return fmt.Errorf("%w: generation %d: stage %d out of order", ErrIncompatible, sm.Epoch, sm.Index)
		}
		lay := f.stageLayout(sm.Index)
		st := newStage(lay, f.shardBits)
		if r != nil {
			if err := readWords(r, st.words); err != nil {
				return fmt.Errorf("window: reading snapshot data: %w", err)
			}
		}
		for j, c := range sm.Counts {
			st.count[j].n = c
		}
		sts := append(*gg.stages.Load(), st)
		gg.stages.Store(&sts)
		f.stageBytes.Add(int64(lay.bytes))
	}
	f.grown.Store(&grownSet{gens: gens})
	return nil
}

// restoredStages returns the grown stages of generation epoch of a filter being restored, in
// stage order.
func (f *Filter) restoredStages(epoch uint64) []*stage {
	if gg := f.grownGenIfAny(epoch); gg != nil {
		return *gg.stages.Load()
	}
	return nil
}

// checkStage checks a stage description against the filter's layout and live generations.
func (f *Filter) checkStage(m Meta, sm StageMeta) error {
	live := false
	for _, e := range m.SlotEpochs {
		live = live || (e >= 0 && uint64(e) == sm.Epoch)
	}
	if !live || sm.Index < 1 || sm.Index > 64 || len(sm.Counts) != 1<<f.shardBits {
		return fmt.Errorf("%w: stage %d of generation %d does not fit the generation table", ErrIncompatible, sm.Index, sm.Epoch)
	}
	lay := f.stageLayout(sm.Index)
	if sm.Groups != lay.groups || sm.K != lay.layout.k || sm.Sectors != lay.layout.sectors ||
		sm.Words != lay.groups*uint64(lay.layout.sectors)*sectorWords {
		return fmt.Errorf("%w: stage %d has %d groups, k %d, %d sectors and %d words; layout needs %d, %d, %d",
			ErrIncompatible, sm.Index, sm.Groups, sm.K, sm.Sectors, sm.Words, lay.groups, lay.layout.k, lay.layout.sectors)
	}
	return nil
}

// restoreFill sets the stage-0 fill counters from m, or, for a snapshot without them, spreads
// each live generation's estimated keys evenly over its shards.
func (f *Filter) restoreFill(m Meta) {
	if len(m.Fill) == len(f.fill) && m.ShardBits == int(f.shardBits) {
		for i, c := range m.Fill {
			f.fill[i].n = c
		}
		return
	}
	stride := max(f.groups/statsSampleGroups, 1)
	for s, e := range f.slotEpoch {
		if e < 0 {
			continue
		}
		per := uint64(f.generationStats(s, stride).EstimatedKeys) >> f.shardBits
		for j := range 1 << f.shardBits {
			f.fill[s<<f.shardBits+j].n = per
		}
	}
}

// GrowthCost returns the memory one generation of a filter for cfg takes when it receives
// load × Capacity distinct keys in its interval: its share of stage 0 (TotalBytes / N) plus the
// grown stages that many keys need, and the number of those stages. It ignores the memory cap
// and the early growth of a fill-counter shard that fills before the others (a few percent of
// GrowAt), and allocates nothing. It returns Size's error for a bad cfg.
func GrowthCost(cfg Config, load float64) (bytes uint64, stages int, err error) {
	s, err := Size(cfg)
	if err != nil {
		return 0, 0, err
	}
	bytes = s.TotalBytes / uint64(s.Slots)
	keys := load * float64(cfg.Capacity)
	room := float64(s.GrowAt)
	shardBits := shardLayout(s.GrowAt)
	for i := 1; room < keys && i < 64; i++ {
		l := growthStage(cfg.Capacity, s.ShareFPR, i, shardBits)
		bytes += l.bytes
		room += float64(l.capacity)
		stages = i
	}
	return bytes, stages, nil
}
