package window

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// Claim words serialise the insertion of new keys into a group without a lock. The low 48 bits
// hold the tag of the key being inserted (0 when the group is idle); the high 16 bits count
// completed insertions, so that a claim taken from an idle word proves that no insertion happened
// since the word was read.
const (
	tagBits = 48
	tagMask = 1<<tagBits - 1
	seqOne  = 1 << tagBits
)

// Filter is a sliding-window Bloom filter of N rotating generations.
//
// TestAndAdd, Test and their Hash variants are safe for concurrent use by any number of
// goroutines, never block, never allocate, and take no lock: they use atomic loads, atomic ORs and,
// when inserting a new key, one compare-and-swap on a per-group claim word. Rotation, snapshots and
// Stats are safe to call concurrently with them and with each other.
//
// Layout: a key hashes to one of Groups key groups and, inside it, to a pattern of K bits in a
// 512-bit block. A group holds one block per generation slot, side by side in memory, so testing a
// key against all N generations reads N adjacent cache lines. There are N+1 slots: N hold the
// live generations and the spare one is cleared in the background, so that rotation only swaps a
// pointer.
//
// Use New or Restore to make one; the zero value is not usable. Call Start to rotate on the
// clock in the background and Close to stop; or drive rotation yourself with AdvanceTo.
type Filter struct {
	words  []uint64        // groups × slots × blockWords, 64-byte aligned
	claims []atomic.Uint64 // one per group
	view   atomic.Pointer[view]

	groups uint64
	slots  int
	k      int
	seed   uint64
	cfg    Config
	sizing Sizing

	rotations atomic.Uint64

	mu        sync.Mutex // serialises rotation, clearing and snapshots
	origin    time.Time  // start of generation 0
	slotEpoch []int64    // generation held by each slot, -1 when free
	dirty     []bool     // a free slot that still holds expired bits
	clearAt   time.Time  // when the background goroutine clears dirty slots

	runMu sync.Mutex
	stop  chan struct{}
	done  chan struct{}
}

// view is an immutable description of which slots are live. Readers load it once per operation.
type view struct {
	epoch  uint64   // the current generation number, counted from origin
	cur    int      // slot of the current generation
	active []int    // slots of the live generations, newest first; active[0] == cur
	epochs []uint64 // generation numbers of the active slots
}

// probe is where a key lives: its group and the bit pattern inside a block.
type probe struct {
	group uint64
	base  uint64 // index of the group's first word
	tag   uint64
	mask  [blockWords]uint64
}

// New returns an empty Filter for cfg whose generation 0 starts at cfg.Clock(). It returns the
// errors Size returns for a bad Config. The filter does not rotate until Start or AdvanceTo is
// called.
func New(cfg Config) (*Filter, error) {
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
	f.view.Store(&view{epoch: 0, cur: 0, active: []int{0}, epochs: []uint64{0}})
	return f, nil
}

func newFilter(cfg Config, s Sizing) *Filter {
	f := &Filter{
		words:     alignedWords(s.Groups * uint64(s.Slots) * blockWords),
		claims:    make([]atomic.Uint64, s.Groups),
		groups:    s.Groups,
		slots:     s.Slots,
		k:         s.K,
		seed:      cfg.Seed,
		cfg:       cfg,
		sizing:    s,
		slotEpoch: make([]int64, s.Slots),
		dirty:     make([]bool, s.Slots),
	}
	for i := range f.slotEpoch {
		f.slotEpoch[i] = -1
	}
	return f
}

// alignedWords returns n zeroed words starting on a 64-byte boundary, so that each block is one
// cache line and writers to different blocks never share a line.
func alignedWords(n uint64) []uint64 {
	buf := make([]uint64, n+blockWords)
	off := (64 - uintptr(unsafe.Pointer(&buf[0]))%64) % 64 / 8
	return buf[off : off+uintptr(n) : off+uintptr(n)]
}

// Sizing returns the layout the filter was built with.
func (f *Filter) Sizing() Sizing { return f.sizing }

// Config returns the configuration the filter was built with, with defaults filled in.
func (f *Filter) Config() Config { return f.cfg }

// Hash returns the seeded 64-bit hash of key that the Hash methods take. Hashing once and calling
// TestAndAddHash on several filters with the same seed saves the hashing cost.
func (f *Filter) Hash(key []byte) uint64 {
	var d xxhash.Digest
	d.ResetWithSeed(f.seed)
	d.Write(key)
	return d.Sum64()
}

// TestAndAdd reports whether key was seen in the window and, if it was not, adds it to the current
// generation. If several goroutines offer the same key that is not in the filter at the same time,
// exactly one of them gets false. A key that is seen is not added again, so its expiry stays tied
// to its first sighting.
func (f *Filter) TestAndAdd(key []byte) (seen bool) {
	return f.TestAndAddHash(f.Hash(key))
}

// Test reports whether key was seen in the window, without adding it.
func (f *Filter) Test(key []byte) bool {
	return f.TestHash(f.Hash(key))
}

// TestAndAddHash is TestAndAdd for a hash returned by Hash.
func (f *Filter) TestAndAddHash(h uint64) (seen bool) {
	var p probe
	f.makeProbe(&p, h)
	return f.testAndAdd(&p)
}

// TestHash is Test for a hash returned by Hash.
func (f *Filter) TestHash(h uint64) bool {
	var p probe
	f.makeProbe(&p, h)
	return f.contains(f.view.Load(), &p)
}

// makeProbe maps a hash to its group (by the high bits, with Lemire's multiply-shift range
// reduction) and its tag (the low 48 bits, forced non-zero).
func (f *Filter) makeProbe(p *probe, h uint64) {
	g, _ := bits.Mul64(h, f.groups)
	f.probeFor(p, g, h&tagMask|1)
}

// probeFor fills p for a group and tag. The K bit positions are independent 9-bit draws from a
// SplitMix64 stream seeded by the tag. Unlike double hashing (g1 + i·g2 mod 512), which can make
// only 2^17 distinct patterns per block and so puts a floor under the false-positive rate near
// 1e-5, this gives every tag its own pattern.
func (f *Filter) probeFor(p *probe, group, tag uint64) {
	p.group = group
	p.base = group * uint64(f.slots) * blockWords
	p.tag = tag
	p.mask = [blockWords]uint64{}
	s := tag
	for i := 0; i < f.k; {
		s += 0x9e3779b97f4a7c15
		z := (s ^ s>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		for j := 0; j < 7 && i < f.k; j++ {
			pos := z & (BlockBits - 1)
			p.mask[pos>>6] |= 1 << (pos & 63)
			z >>= 9
			i++
		}
	}
}

// block returns the block of slot s in the probe's group.
func (f *Filter) block(p *probe, s int) *[blockWords]uint64 {
	i := p.base + uint64(s)*blockWords
	return (*[blockWords]uint64)(f.words[i : i+blockWords])
}

// contains reports whether all of the probe's bits are set in one of the view's live generations.
func (f *Filter) contains(v *view, p *probe) bool {
	for _, s := range v.active {
		b := f.block(p, s)
		var missing uint64
		for w := range blockWords {
			missing |= p.mask[w] &^ atomic.LoadUint64(&b[w])
		}
		if missing == 0 {
			return true
		}
	}
	return false
}

// testAndAdd tests the probe and, if it is new, claims its group and sets its bits.
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
		if f.contains(v, p) {
			return true
		}
		if cw&tagMask != 0 {
			f.help(v, p.group, cw)
			continue
		}
		if !c.CompareAndSwap(cw, cw|p.tag) {
			continue
		}
		f.set(v, p)
		c.CompareAndSwap(cw|p.tag, cw+seqOne)
		return false
	}
}

// help completes another goroutine's claimed insertion and releases its claim.
func (f *Filter) help(v *view, group, cw uint64) {
	var hp probe
	f.probeFor(&hp, group, cw&tagMask)
	f.set(v, &hp)
	f.claims[group].CompareAndSwap(cw, cw&^tagMask+seqOne)
}

// set ORs the probe's bits into the current generation and, if a rotation happened meanwhile,
// into the new current generation too, so the key is never left only in a slot being retired.
func (f *Filter) set(v *view, p *probe) {
	for {
		b := f.block(p, v.cur)
		for w := range blockWords {
			if m := p.mask[w]; m != 0 {
				atomic.OrUint64(&b[w], m)
			}
		}
		nv := f.view.Load()
		if nv == v {
			return
		}
		v = nv
	}
}
