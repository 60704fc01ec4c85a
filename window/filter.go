package window

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Filter is a sliding-window Bloom filter of N rotating generations.
//
// TestAndAdd, Test and their event-time and refresh variants never block, never allocate, and take
// no lock. Test is safe for concurrent use by any number of goroutines. TestAndAdd and its
// variants are too, unless Config.SingleWriter is set: then calls to them must not overlap
// (see Config.SingleWriter). Rotation, snapshots and Stats are safe to call concurrently with all
// of them and with each other.
//
// Layout: a key hashes to one of Groups key groups and, inside it, to a pattern of K bits in the
// S sectors (cache lines) of a block: FirstBits of them in one word of sector 0, the rest spread
// over sectors 1 … S-1. A group holds one block per generation slot, and sector 0 is stored
// word-major, so that the word a key uses in every slot sits in one row of N adjacent words:
// testing a new key against all N generations usually reads that row alone (one cache line for
// N ≤ 8). There are exactly N slots: an expiring slot is reused by the next generation at once,
// without being cleared first (see the package documentation).
//
// Use New or Restore to make one; the zero value is not usable. Call Start to rotate on the
// clock in the background and Close to stop; or drive rotation yourself with AdvanceTo.
type Filter struct {
	blocks                  // stage 0: one block per slot in each group (see layout.go)
	claims  []atomic.Uint64 // one per group; shared mode only
	touched touched         // per slot: the groups its current use may have written (touched.go)
	view    atomic.Pointer[view]

	single bool // Config.SingleWriter
	seed   uint64
	cfg    Config
	sizing Sizing

	uses      []atomic.Uint64 // per slot: how many generations it held before the current one
	inflight  []counter       // per slot: shared-mode writers between their use check and their CAS
	oldWrites []counter       // per slot: keys added to its generation after it stopped being current
	id        uint64          // tells this filter's generation versions from another's

	rotations atomic.Uint64

	statsSample uint64 // groups Stats reads per generation at most: statsSampleGroups (a test lowers it)

	// Growth (see grow.go). fill counts the keys offered to each slot's stage 0, per shard of the
	// key hash's top shardBits bits; a shard past limit0 keys (its share of GrowAt) makes insert
	// add up the slot's shards.
	fill       []fillCounter
	shardBits  uint
	shardShift uint
	limit0     uint64
	maxBytes   uint64
	budget     *budgetShare             // what the filter holds of Config.Budget; nil without one
	grown      atomic.Pointer[grownSet] // nil until a generation grows
	stageBytes atomic.Int64             // bytes of the live grown stages
	growths    atomic.Uint64            // stages added since the filter was made
	refreshes  fillCounter              // re-arms of seen keys (refresh.go), on a line of its own
	forgotten  atomic.Uint64            // new keys not remembered at the memory cap (OverloadPass)
	snapStages []*stage                 // the stages the snapshot under way writes; guarded by mu

	mu         sync.Mutex // serialises rotation, sweeping and snapshots
	origin     time.Time  // start of generation 0
	slotEpoch  []int64    // generation held by each slot, -1 when free
	dirty      []bool     // the slot holds bits of its current use and must be reused with a new one
	sweepSlot  int        // the slot whose stale words are being converted, -1 when none
	sweepNext  uint64     // the next group the sweep converts
	deferSweep bool       // tests: leave sweeps to the next rotation instead of finishing them in AdvanceTo

	runMu sync.Mutex
	stop  chan struct{}
	done  chan struct{}
}

// counter is an atomic counter alone on its cache line.
type counter struct {
	n atomic.Int64
	_ [56]byte
}

// view is an immutable description of which slots are live. Readers load it once per operation.
type view struct {
	epoch     uint64   // the current generation number, counted from origin
	cur       int      // slot of the current generation
	active    []int    // slots of the live generations, newest first; active[0] == cur
	epochs    []uint64 // generation numbers of the active slots
	curUse    uint64   // the use of cur this view writes to
	curTag    uint64   // the tag bit of curUse: tagBit if it is odd, else 0
	curTagged bool     // cur may still hold words of its previous use: check tags
	// rowLive has bit s set for every live slot s whose words carry no stale tag (every active
	// slot but a tagged cur), for filters of at most 64 slots (rowSlots): the slots whose word of
	// a row contains tests without tag checks.
	rowLive uint64
}

// rowSlots is the most slots a row can have for contains to test it as a bitmask (view.rowLive).
const rowSlots = 64

// newView returns the view of the given live slots, newest first, whose current slot's use is
// use; tagged says that the current slot's sweep is unfinished.
func newView(epoch uint64, active []int, epochs []uint64, use uint64, tagged bool) *view {
	v := &view{
		epoch: epoch, cur: active[0], active: active, epochs: epochs,
		curUse: use, curTag: tagOf(use), curTagged: tagged,
	}
	for i, s := range active {
		if s < rowSlots && (i > 0 || !tagged) {
			v.rowLive |= 1 << s
		}
	}
	return v
}

// New returns an empty Filter for cfg whose generation 0 starts at cfg.Clock(). It returns the
// errors Size returns for a bad Config. The filter does not rotate until Start or AdvanceTo is
// called.
func New(cfg Config) (*Filter, error) {
	cfg = cfg.withAuto()
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	s, err := Size(cfg)
	if err != nil {
		return nil, err
	}
	f := newFilter(cfg, s)
	f.origin = cfg.Clock()
	f.slotEpoch[0] = 0
	f.dirty[0] = true
	f.view.Store(newView(0, []int{0}, []uint64{0}, 0, false))
	return f, nil
}

// newFilter returns an empty filter of sizing s. Its stage 0 is mapped outside the Go heap where
// the system allows (mapWords) and unmapped when the filter is garbage collected: every method
// keeps f reachable while it reads or writes the words (runtime.KeepAlive where its last use of f
// could come before its last use of them), and no slice of them leaves the package.
func newFilter(cfg Config, s Sizing) *Filter {
	lp := layoutParams{sectors: s.Sectors, k: s.K, first: s.FirstBits}
	words, unmap := mapWords(blockWords(s.Groups, s.Slots, lp))
	if words == nil {
		words = alignedWords(blockWords(s.Groups, s.Slots, lp), false)
	}
	f := &Filter{
		blocks:    blocksIn(words, s.Groups, s.Slots, lp, false),
		claims:    newClaims(s.Groups, cfg.SingleWriter),
		touched:   newTouched(s.Slots, s.Groups),
		single:    cfg.SingleWriter,
		seed:      cfg.Seed,
		cfg:       cfg,
		sizing:    s,
		uses:      make([]atomic.Uint64, s.Slots),
		inflight:  make([]counter, s.Slots),
		oldWrites: make([]counter, s.Slots),
		id:        filterIDs.Add(1),
		slotEpoch: make([]int64, s.Slots),
		dirty:     make([]bool, s.Slots),
		sweepSlot: -1,

		statsSample: statsSampleGroups,
	}
	f.shardBits = shardLayout(s.GrowAt)
	f.shardShift = 64 - f.shardBits
	f.limit0 = max(s.GrowAt>>f.shardBits, 1) // shards·limit0 ≤ GrowAt: the sum decides
	f.fill = make([]fillCounter, s.Slots<<f.shardBits)
	f.maxBytes = capBytes(cfg)
	for i := range f.slotEpoch {
		f.slotEpoch[i] = -1
	}
	if unmap != nil {
		runtime.AddCleanup(f, func(unmap func()) { unmap() }, unmap)
	}
	f.attachBudget()
	return f
}

// alignedWords returns n zeroed words starting on a 64-byte boundary, so that each sector is one
// cache line and writers to different sectors never share a line. With eager, its pages are
// mapped writable already (populateWords).
func alignedWords(n uint64, eager bool) []uint64 {
	buf := make([]uint64, n+sectorWords)
	off := (64 - uintptr(unsafe.Pointer(&buf[0]))%64) % 64 / 8
	words := buf[off : off+uintptr(n) : off+uintptr(n)]
	if eager {
		populateWords(words)
	}
	return words
}

// newClaims returns the claim words of groups groups: populated in shared mode, which writes
// them, and left to the kernel with a single writer, which never touches them.
func newClaims(groups uint64, single bool) []atomic.Uint64 {
	c := make([]atomic.Uint64, groups)
	if !single && groups > 0 {
		populateWords(unsafe.Slice((*uint64)(unsafe.Pointer(&c[0])), len(c)))
	}
	return c
}

// hash returns the seeded 64-bit hash of key that the hash-level methods take. Hashing once and calling
// testAndAddHash on several filters with the same seed saves the hashing cost.
func (f *Filter) hash(key []byte) uint64 {
	return hashKey(key, f.seed)
}

// TestAndAdd reports whether key was seen in the window and, if it was not, adds it to the current
// generation. If several goroutines offer the same key that is not in the filter at the same time,
// exactly one of them gets false (with Config.SingleWriter, calls must not overlap). A key that
// is seen is not added again, so its expiry stays tied to its first sighting.
func (f *Filter) TestAndAdd(key []byte) (seen bool) {
	if len(key) < xxhashLong { // hashKey's short path, one call less (see Test)
		return f.testAndAddHash(xxhashShort(key, f.seed))
	}
	return f.testAndAddHash(hashKey(key, f.seed))
}

// Test reports whether key was seen in the window, without adding it.
func (f *Filter) Test(key []byte) bool {
	// hashKey and testHash written out, so that a miss is one call deep (the hash of a short key
	// and rowTest): fewer instructions between one operation's cache miss and the next one's.
	var h uint64
	if len(key) < xxhashLong {
		h = xxhashShort(key, f.seed)
	} else {
		h = hashKey(key, f.seed)
	}
	v := f.view.Load()
	if v.curTagged || f.slots > rowSlots || f.grown.Load() != nil {
		return f.testLookup(v, h)
	}
	seen := f.rowTest(v, h)
	runtime.KeepAlive(f)
	return seen
}

// testAndAddHash is TestAndAdd for a hash returned by hash. While the current slot has no pending
// sweep, the single writer takes addRow if no generation has grown and the key's shard of stage 0
// has room, and addStaged once one has grown and the shard is full (the key goes to a grown
// stage). In shared mode addShared takes a key whose group is idle while no generation has grown.
// Otherwise the whole probe (testAndAddProbe).
func (f *Filter) testAndAddHash(h uint64) (seen bool) {
	if f.single {
		v := f.view.Load()
		if !v.curTagged && f.slots <= rowSlots {
			var done bool
			if gs := f.grown.Load(); gs == nil {
				seen, done = f.addRow(v, h)
			} else {
				seen, done = f.addStaged(v, gs, h)
			}
			if done {
				runtime.KeepAlive(f)
				return seen
			}
		}
	} else if seen, done := f.addShared(h); done {
		runtime.KeepAlive(f)
		return seen
	}
	return f.testAndAddProbe(h)
}

// testAndAddProbe is testAndAddHash through the key's whole probe: makeProbe, lookup, and insert
// or the shared mode's claim (testAndAdd).
func (f *Filter) testAndAddProbe(h uint64) (seen bool) {
	var p probe
	if f.single {
		v := f.view.Load()
		f.makeProbe(&p, h, v, true, true)
		if seen = f.lookup(v, &p); !seen {
			f.insert(v, &p)
		}
	} else {
		f.makeProbe(&p, h, f.view.Load(), true, true)
		seen = f.testAndAdd(&p)
	}
	runtime.KeepAlive(f)
	return seen
}

// testHash is Test for a hash returned by hash. While no generation has grown and no slot is
// being swept, rowTest answers without building the key's probe; otherwise it takes the whole
// lookup.
func (f *Filter) testHash(h uint64) bool {
	v := f.view.Load()
	if !v.curTagged && f.slots <= rowSlots && f.grown.Load() == nil {
		seen := f.rowTest(v, h)
		runtime.KeepAlive(f)
		return seen
	}
	return f.testLookup(v, h)
}

// testLookup is testHash's whole lookup, for a filter that has grown, is being swept or has more
// than rowSlots slots.
func (f *Filter) testLookup(v *view, h uint64) bool {
	var p probe
	f.makeProbe(&p, h, v, false, false)
	seen := f.lookup(v, &p)
	runtime.KeepAlive(f)
	return seen
}

// rowTest is contains for the key whose hash is h, for a filter of at most rowSlots slots whose
// view has no tagged slot. It computes only what it tests (the group, the row's word and the first
// bits: what makeProbe and fillFirst compute; then, for a slot whose word has them, the key's bits
// one at a time, as restMissing does), so that a miss costs few instructions besides its cache
// misses and the processor reaches the next operation's loads while it waits.
func (f *Filter) rowTest(v *view, h uint64) bool {
	g, _ := bits.Mul64(h, f.groups)
	tag := h&tagMask | 1
	z0 := patternOutput(tag, 0)
	base := g * f.groupWords
	at := base + (z0&(sectorWords-1))*uint64(f.slots)
	if f.first != 4 || f.slots != sectorWords || v.rowLive != 1<<sectorWords-1 {
		return f.rowHasZ0(v, base, at, tag, z0)
	}
	// Eight live slots and four first bits: lineHas, inlined (lineLacks), before any call, so that
	// a miss spills nothing.
	m := firstBits4(z0)
	if lineLacks(f.row8(at), ^m)>>63 != 0 {
		return false
	}
	return f.rowHas8(base, at, tag, m)
}

// row8 returns the row of eight slots' words that starts at index at of stage 0, for a filter of
// eight slots, where it always lies within at's group: with the one bounds check of at, not the
// two of a slice of eight words and its conversion.
func (f *Filter) row8(at uint64) *[sectorWords]uint64 {
	return (*[sectorWords]uint64)(unsafe.Pointer(&f.words[at]))
}

// rowHasZ0 is rowHas for the first bits of the pattern stream's output 0 z0 (firstMask): apart, so
// that rowTest makes no call that it must keep values across.
func (f *Filter) rowHasZ0(v *view, base, at, tag, z0 uint64) bool {
	return f.rowHas(v, base, at, tag, firstMask(tag, z0, f.first))
}

// rowHas reports whether a live slot of v whose word of the row at index at has every bit of m,
// the first bits of the key whose tag is tag, has the key's other bits too (restMissing), in the
// group at base. It is rowTest's test once the row's word is known.
func (f *Filter) rowHas(v *view, base, at, tag, m uint64) bool {
	for hits := rowHits(f.words[at:at+uint64(f.slots)], m) & v.rowLive; hits != 0; hits &= hits - 1 {
		if !f.restMissing(base, bits.TrailingZeros64(hits), tag) {
			return true
		}
	}
	return false
}

// addRow is testAndAddHash for the single writer while no generation has grown, v's current slot
// has no pending sweep and the filter has at most rowSlots slots: rowTest's test, then the
// insertion of a new key into stage 0 written straight from its tag (rowInsert), without building
// its probe. It returns done = false, having done nothing, when the key's shard of the current
// generation's stage 0 is full: the key is for a grown stage, which the whole path handles. As
// makeProbe and touch do, it makes sure that the group's pages were written (pagesWritten inline;
// writeFirst in addRowPages when one was not) and loads the current generation's other sectors
// before the row is tested, so that their cache misses overlap with the row's. As in rowTest, every call on the way to a new key's insertion is the last thing its
// caller does (addRowPages, addRowZ0, addRowHits, rowInsert), so that nothing is spilled.
func (f *Filter) addRow(v *view, h uint64) (seen, done bool) {
	c := &f.fill[v.cur<<f.shardBits+int(h>>f.shardShift)]
	if atomic.LoadUint32(&c.full) != 0 {
		return false, false
	}
	g, _ := bits.Mul64(h, f.groups)
	base := g * f.groupWords
	if !f.pagesWritten(base, f.groupWords) {
		return f.addRowPages(v, c, h, g, base)
	}
	return f.addRowWritten(v, c, h, g, base)
}

// addRowWritten is addRow once the pages of the key's group, at base, are written.
func (f *Filter) addRowWritten(v *view, c *fillCounter, h, g, base uint64) (seen, done bool) {
	for sec := 1; sec < f.sectors; sec++ {
		atomic.LoadUint64(&f.words[f.restSector(base, v.cur, sec)])
	}
	if f.touch1 {
		f.touchSector1(base)
	}
	tag := h&tagMask | 1
	z0 := patternOutput(tag, 0)
	at := base + (z0&(sectorWords-1))*uint64(f.slots)
	if f.first != 4 || f.slots != sectorWords || v.rowLive != 1<<sectorWords-1 {
		return f.addRowZ0(v, c, g, at, tag, z0)
	}
	m := firstBits4(z0)
	if lineLacks(f.row8(at), ^m)>>63 == 0 { // lineHas, inlined
		return f.addRowHits8(v, c, g, at, tag, m)
	}
	f.rowInsert(v, c, g, at, tag, m)
	return false, true
}

// addRowPages is addRow for a key whose group has a page not written yet (pagesWritten, which
// also says so for every group over more than two pages): it writes them (writeFirst) and goes
// on, without testing them again.
func (f *Filter) addRowPages(v *view, c *fillCounter, h, g, base uint64) (seen, done bool) {
	f.writeFirst(base, f.groupWords)
	return f.addRowWritten(v, c, h, g, base)
}

// addRowZ0 is addRow's test and insertion for a layout without four first bits or a row of other
// than eight live slots: the first bits from z0 by firstMask, then addRowHits.
func (f *Filter) addRowZ0(v *view, c *fillCounter, g, at, tag, z0 uint64) (seen, done bool) {
	return f.addRowHits(v, c, g, at, tag, firstMask(tag, z0, f.first))
}

// addRowHits is addRow for a key whose first bits m are in a word of the row at index at: rowHas
// decides, and a new key is inserted (rowInsert).
func (f *Filter) addRowHits(v *view, c *fillCounter, g, at, tag, m uint64) (seen, done bool) {
	if f.rowHas(v, g*f.groupWords, at, tag, m) {
		return true, true
	}
	f.rowInsert(v, c, g, at, tag, m)
	return false, true
}

// addRowHits8 is addRowHits for a row of eight live slots and four first bits: rowHas8 decides.
func (f *Filter) addRowHits8(v *view, c *fillCounter, g, at, tag, m uint64) (seen, done bool) {
	if f.rowHas8(g*f.groupWords, at, tag, m) {
		return true, true
	}
	f.rowInsert(v, c, g, at, tag, m)
	return false, true
}

// rowInsert adds a new key, whose tag is tag and whose first bits m go to the row at index at of
// group g, to stage 0 of v's current generation for the single writer, counting it in its shard's
// counter c: the first bits into the row's word, the others one at a time into their words
// (putRest). If stage 0 turns out full (stage0Room), or a rotation happened meanwhile, it takes
// insert's or set's path with the key's whole probe.
func (f *Filter) rowInsert(v *view, c *fillCounter, g, at, tag, m uint64) {
	if f.bump(c) > f.limit0 && !f.stage0Room(v.cur) {
		var p probe // stage 0 became full with this key: insert's path to the grown stages
		f.probeFor(&p, g, tag)
		f.addGrown(v, &p)
		return
	}
	f.touched.mark(v.cur, g)
	w := &f.words[at+uint64(v.cur)]
	storeWord(w, loadWord(w)|m)
	if f.rest4 {
		f.putRest4(g*f.groupWords, v.cur, tag)
	} else {
		f.putRest(g*f.groupWords, v.cur, tag)
	}
	if nv := f.view.Load(); nv.epoch != v.epoch {
		var p probe // a rotation meanwhile: the key goes to the new current generation too (set)
		f.probeFor(&p, g, tag)
		f.set(nv, &p)
	}
}

// lineHas reports whether one of the eight words of a row has every bit of m, a mask of data
// bits (bit 63 clear). With nm = ^m, a word w has them all when nm|w is all ones: then nm|w + 1
// is 0, and otherwise it keeps bit 63 (nm has it, and the sum does not carry out); so the AND of
// the eight sums (lineLacks) has bit 63 clear exactly when a word matched. It is rowHits without
// the mask of which word matched, in fewer instructions (a load, an OR, an increment and an AND
// per word): a miss's common case. rowTest and addRow call lineLacks, which
// the compiler inlines, where a call would make them spill what they keep for the hits.
func lineHas(row *[sectorWords]uint64, m uint64) bool {
	return lineLacks(row, ^m)>>63 == 0
}

// makeProbe maps a hash to its group (by the high bits, with Lemire's multiply-shift range
// reduction), its tag (the low 48 bits, forced non-zero) and its word of sector 0. Before it
// computes the bit pattern it touches the cache lines the operation will use in v (see touch);
// add says the operation will write the current generation, and needs the whole pattern; write,
// that it may write some generation of the group, whose pages it then writes first (writeFirst).
// A test gets the first bits only: contains completes the pattern for a generation whose word of sector
// 0 has them all, which a key that was never added rarely finds. So does an insertion whose shard
// of the current generation's stage 0 is full (an auto-sized generation past its first 1024 keys):
// the key goes to a grown stage, whose own pattern addToStages computes, and stage 0 needs the rest
// of the pattern only if it is written after all (put and writeBlock complete it then).
func (f *Filter) makeProbe(p *probe, h uint64, v *view, add, write bool) {
	g, _ := bits.Mul64(h, f.groups)
	p.group, p.base, p.tag = g, g*f.groupWords, h&tagMask|1
	p.shard = h >> f.shardShift
	if write {
		f.writeFirst(p.base, f.groupWords)
	}
	add = add && atomic.LoadUint32(&f.fill[v.cur<<f.shardBits+int(p.shard)].full) == 0
	z0 := patternOutput(p.tag, 0)
	f.touch(v, p.base, z0&(sectorWords-1), add)
	f.fillFirst(p, z0)
	if add {
		f.fillRest(p)
	}
}

// probeFor fills p, whole pattern included, for a group and tag: a claimed key's position, which
// a helper knows only by them.
func (f *Filter) probeFor(p *probe, group, tag uint64) {
	p.group = group
	p.base = group * f.groupWords
	p.tag = tag
	p.xs = [maxCachedStages]uint64{}
	f.fillPattern(p)
}

// contains reports whether all of the probe's bits are set in one of the view's live
// generations. It reads the row of the group's sector 0 that holds the probe's word of every
// slot, and goes on to a slot's other sectors only when its word has the probe's first bits, so
// that a key that was never added is usually rejected after one cache line. The row is tested
// without a branch per slot (rowHits), up to rowSlots slots.
func (f *Filter) contains(v *view, p *probe) bool {
	if v.curTagged && f.blockHasTagged(p, v.cur, v.curTag) {
		return true
	}
	row := f.words[p.base+p.w0*uint64(f.slots):][:f.slots:f.slots]
	m := p.mask[p.w0&(sectorWords-1)]
	if len(row) > rowSlots {
		return f.containsWide(v, p, row, m)
	}
	if len(row) == sectorWords && v.rowLive == 1<<sectorWords-1 && !lineHas((*[sectorWords]uint64)(row), m) {
		return false // a new key's usual answer, in fewer instructions than rowHits
	}
	for hits := rowHits(row, m) & v.rowLive; hits != 0; hits &= hits - 1 {
		if f.restHas(p, bits.TrailingZeros64(hits)) {
			return true
		}
	}
	return false
}

// containsWide is contains for a row of more than rowSlots slots: one live slot at a time.
func (f *Filter) containsWide(v *view, p *probe, row []uint64, m uint64) bool {
	active := v.active
	if v.curTagged {
		active = active[1:]
	}
	for _, s := range active {
		if m&^atomic.LoadUint64(&row[s]) == 0 && f.restHas(p, s) {
			return true
		}
	}
	return false
}

// rowHits returns the slots whose word in row has every bit of m, as a mask with bit s for word
// s (len(row) ≤ rowSlots). It has no branch per word: which words match is unpredictable.
func rowHits(row []uint64, m uint64) uint64 {
	var hits uint64
	for s := range row {
		z := m &^ atomic.LoadUint64(&row[s])
		hits |= ((z - 1) &^ z) >> 63 << (uint(s) & (rowSlots - 1)) // 1 if z == 0
	}
	return hits
}

// touch loads one word of every cache line the operation will read or write, before computing
// the bit pattern, so that the cache misses overlap with that work and with each other: the row
// of sector 0 that holds word w0 of every slot and, when adding, the other sectors of the current
// generation. The loads are plain atomic loads whose values are dropped; the compiler keeps them.
// Measured in bench/ with the earlier layout (10M keys, N=8, p=1e-3): Test on a miss 5.1x -> 4.1x
// blobloom, TestAndAdd 1.71x -> 1.43x (shared) and 1.44x -> 0.95x (single writer), medians of 5
// interleaved rounds.
func (f *Filter) touch(v *view, base, w0 uint64, add bool) {
	row := f.words[base+w0*uint64(f.slots):][:f.slots:f.slots]
	for i := 0; i < len(row); i += sectorWords {
		atomic.LoadUint64(&row[i])
	}
	atomic.LoadUint64(&row[len(row)-1])
	if add {
		for sec := 1; sec < f.sectors; sec++ {
			atomic.LoadUint64(&f.words[f.restSector(base, v.cur, sec)])
		}
	}
}

// blockHasTagged is has for a slot whose sweep is unfinished: a word whose tag is not tag
// belongs to the slot's previous use and reads as empty.
func (f *Filter) blockHasTagged(p *probe, s int, tag uint64) bool {
	if missingWordTagged(f.firstWord(p, s), p.mask[p.w0&(sectorWords-1)], tag) != 0 {
		return false
	}
	if !p.rest {
		f.fillRest(p)
	}
	for sec := 1; sec < f.sectors; sec++ {
		if missingTagged(f.sector(f.restSector(p.base, s, sec)), p.sectorMask(sec), tag) != 0 {
			return false
		}
	}
	return true
}

// tagOf returns the tag bit of a use: its parity, in bit 63.
func tagOf(use uint64) uint64 { return use << 63 }
