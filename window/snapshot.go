package window

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"sync/atomic"
	"time"
	"unsafe"
)

// ErrIncompatible is returned (wrapped) by Restore when a snapshot was taken with parameters that
// give a different layout or hashing than the Config it is restored into.
var ErrIncompatible = errors.New("window: snapshot incompatible with configuration")

// Meta is everything besides the bit data that a snapshot must keep to restore a Filter. The file
// format that stores it belongs to the checkpoint package; Meta is a plain value.
type Meta struct {
	Generations       int
	Interval          time.Duration
	Capacity          uint64
	FalsePositiveRate float64
	Seed              uint64
	// K is the number of bits a key sets in one generation, over all sectors.
	K int
	// FirstBits is how many of them go to one word of sector 0 (Sizing.FirstBits). 0 marks the
	// layout of an older kdedup (every sector of a block stored side by side, K spread evenly),
	// which Restore refuses.
	FirstBits int
	// Sectors is the number of sectors of one generation's block.
	Sectors int
	// SectorBits is the size of a sector in bits (SectorBits).
	SectorBits int
	Groups     uint64
	Slots      int
	// Origin is the start of generation 0; generation e starts at Origin + e·Interval.
	Origin time.Time
	// Epoch is the current generation's number when the snapshot was taken.
	Epoch uint64
	// Rotations is the rotation count when the snapshot was taken.
	Rotations uint64
	// SlotEpochs holds, for each slot, the generation it holds, or -1 for a free slot.
	SlotEpochs []int64
	// SlotUses holds, for each slot, its use: how many generations it held before its current
	// one. Bit 63 of every data word is the parity of the use that last wrote it; a word whose
	// parity differs from its slot's use is stale and reads as empty.
	SlotUses []uint64
	// Words is the number of 64-bit data words of stage 0, which a single-file snapshot's data
	// holds first: Groups × Sectors × Slots × SectorBits/64, group after group. In group g, which starts at word
	// G = g·Sectors·Slots·SectorBits/64, sector 0 is stored word-major and the other sectors
	// sector-major: word w of sector 0 of slot s's block is word G + w·Slots + s, and word w of
	// sector i ≥ 1 is word G + (i·Slots + s)·SectorBits/64 + w.
	Words uint64
	// ShardBits is how many top bits of a key's hash select its fill-counter shard: each stage
	// has 2^ShardBits counters.
	ShardBits int
	// Fill holds the keys offered to each slot's stage 0 per shard: Slots × 2^ShardBits entries,
	// slot-major. Nil for a snapshot of an older kdedup: Restore then estimates them from the
	// generations' fill.
	Fill []uint64
	// Stages describes the grown stages of the live generations, whose words a single-file
	// snapshot's data holds after stage 0's, in this order.
	Stages []StageMeta
	// Versions holds, per slot, the version of the generation the slot holds (the zero value for
	// a free slot): what a caller that exports generations separately compares to learn whether
	// one changed since its last export (see GenerationVersion). Restore ignores it.
	Versions []GenerationVersion
}

// StageMeta describes one grown stage of a generation: a blocked Bloom filter of Groups blocks
// of Sectors sectors (no use tags), laid out as stage 0 with one slot: word w of sector i of
// group g's block is its word (g·Sectors + i)·SectorBits/64 + w.
type StageMeta struct {
	// Epoch is the number of the generation the stage belongs to.
	Epoch uint64
	// Index is the stage's number in its generation, from 1: stage i holds up to
	// Capacity·2^(i-1) keys at false-positive rate GrowthShare·p_g·2^-i; with Config.Auto, the
	// keys its Groups hold at the rate of its index (autoTarget), so that generations of
	// different sizes need nothing more in a snapshot.
	Index int
	// Groups, K, FirstBits and Sectors are the stage's layout, which Restore checks against the
	// Config (with Config.Auto, K, FirstBits and Sectors only: Groups may be anything the memory
	// cap allows).
	Groups    uint64
	K         int
	FirstBits int
	Sectors   int
	// Counts holds the keys offered to each of the stage's 2^ShardBits shards.
	Counts []uint64
	// Words is Groups × Sectors × SectorBits/64.
	Words uint64
}

// GenerationStart returns the start time of generation e.
func (m Meta) GenerationStart(e uint64) time.Time {
	return m.Origin.Add(time.Duration(e) * m.Interval)
}

// snapshotChunk is how many words a snapshot's data is converted by at a time.
const snapshotChunk = 32 << 10

// Meta returns the metadata a snapshot taken now would carry.
func (f *Filter) Meta() Meta {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.metaLocked()
}

func (f *Filter) metaLocked() Meta {
	v := f.view.Load()
	uses := make([]uint64, f.slots)
	for i := range uses {
		uses[i] = f.uses[i].Load()
	}
	fill := make([]uint64, len(f.fill))
	for i := range fill {
		fill[i] = atomic.LoadUint64(&f.fill[i].n)
	}
	stages, metas := f.liveStages(v)
	f.snapStages = stages
	versions := make([]GenerationVersion, f.slots)
	for s := range versions {
		versions[s] = f.versionLocked(v, s)
	}
	return Meta{
		Versions:          versions,
		ShardBits:         int(f.shardBits),
		Fill:              fill,
		Stages:            metas,
		Generations:       f.cfg.Generations,
		Interval:          f.cfg.Interval,
		Capacity:          f.cfg.Capacity,
		FalsePositiveRate: f.cfg.FalsePositiveRate,
		Seed:              f.seed,
		K:                 f.sizing.K,
		FirstBits:         f.sizing.FirstBits,
		Sectors:           f.sectors,
		SectorBits:        SectorBits,
		Groups:            f.groups,
		Slots:             f.slots,
		Origin:            f.origin,
		Epoch:             v.epoch,
		Rotations:         f.rotations.Load(),
		SlotEpochs:        append([]int64(nil), f.slotEpoch...),
		SlotUses:          uses,
		Words:             uint64(len(f.words)),
	}
}

// Restore builds a Filter for cfg from a snapshot's Meta and its data, read from r, and then ages
// it to cfg.Clock(): generations that expired while the snapshot sat on disk are dropped. A
// snapshot taken while a reused slot was being swept restores exactly: Restore empties every
// stale word (and every free slot) before the filter is used. cfg.SingleWriter may differ from
// the snapshotted filter's mode.
//
// It returns an error wrapping ErrIncompatible if cfg sizes or hashes differ from the snapshot's
// (generations, interval, capacity, false-positive rate or seed changed) or the snapshot has the
// layout of an older kdedup, an error wrapping ErrConfig for a bad cfg, and io.ErrUnexpectedEOF
// (wrapped) if r ends early. A failed Restore returns no Filter.
func Restore(cfg Config, m Meta, r io.Reader) (*Filter, error) {
	return restore(cfg, m, func(f *Filter) error {
		if err := readWords(r, f.words); err != nil {
			return fmt.Errorf("window: reading snapshot data: %w", err)
		}
		for s := range f.dirty {
			f.dirty[s] = true // the slots' words may be stale: settleSlot checks every tag
		}
		f.touched.markAll() // where the data lies is not known: exports read every group
		f.markWritten()     // and every page was written
		return f.restoreStages(m, r)
	})
}

// restoreSlots sets the slots of f, which is not shared yet, from m and publishes its view. A
// slot whose words were loaded (f.dirty) is settled if it holds a live generation; every free
// slot is emptied.
func (f *Filter) restoreSlots(m Meta) {
	live := make([]int, 0, len(m.SlotEpochs))
	for i, e := range m.SlotEpochs {
		f.slotEpoch[i] = e
		f.uses[i].Store(m.SlotUses[i])
		loaded := f.dirty[i]
		f.dirty[i] = e >= 0
		if loaded || e < 0 && tagOf(m.SlotUses[i]) != 0 { // a new filter's words are empty of use 0
			f.settleSlot(i)
		}
		if e >= 0 {
			live = append(live, i)
		}
	}
	sort.Slice(live, func(a, b int) bool { return f.slotEpoch[live[a]] > f.slotEpoch[live[b]] })
	f.publishLocked(m.Epoch, live) // f is not shared yet
}

// settleSlot puts slot s of a filter that is not shared yet in the state a sweep leaves: a live
// slot's stale words become empty words of its use, and a free slot is emptied entirely so that it
// can take a generation without a new use.
func (f *Filter) settleSlot(s int) {
	tag := tagOf(f.uses[s].Load())
	settle := func(w *uint64) {
		if !f.dirty[s] || *w&tagBit != tag {
			*w = tag
		}
	}
	for g := range f.groups {
		f.slotWords(g, s, settle)
	}
}

// liveStages returns the grown stages of v's live generations, oldest generation first and in
// stage order, and their descriptions.
func (f *Filter) liveStages(v *view) ([]*stage, []StageMeta) {
	var stages []*stage
	var metas []StageMeta
	for i := len(v.epochs) - 1; i >= 0; i-- {
		gg := f.grownGenIfAny(v.epochs[i])
		if gg == nil {
			continue
		}
		for _, st := range *gg.stages.Load() {
			counts := make([]uint64, len(st.count))
			for j := range counts {
				counts[j] = atomic.LoadUint64(&st.count[j].n)
			}
			stages = append(stages, st)
			metas = append(metas, StageMeta{
				Epoch: v.epochs[i], Index: st.index, Groups: st.groups, K: st.k, FirstBits: st.first, Sectors: st.sectors,
				Counts: counts, Words: uint64(len(st.words)),
			})
		}
	}
	return stages, metas
}

func compatible(cfg Config, s Sizing, m Meta) error {
	if m.Sectors == 0 || len(m.SlotUses) == 0 || m.FirstBits == 0 {
		return fmt.Errorf("%w: the snapshot holds the filter layout of an older kdedup (no sectors, slot uses or first-word bits)", ErrIncompatible)
	}
	var errs []error
	check := func(name string, snap, now any) {
		if snap != now {
			errs = append(errs, fmt.Errorf("%s is %v in the snapshot, %v now", name, snap, now))
		}
	}
	check("generations", m.Generations, cfg.Generations)
	check("interval", m.Interval, cfg.Interval)
	check("capacity", m.Capacity, cfg.Capacity)
	check("false-positive rate", m.FalsePositiveRate, cfg.FalsePositiveRate)
	if m.Seed != cfg.Seed {
		errs = append(errs, errors.New("hash seed differs"))
	}
	if len(errs) == 0 {
		// Same parameters but a different layout means a snapshot from another sizing algorithm.
		check("k", m.K, s.K)
		check("first-word bits", m.FirstBits, s.FirstBits)
		check("sectors", m.Sectors, s.Sectors)
		check("sector bits", m.SectorBits, s.SectorBits)
		check("groups", m.Groups, s.Groups)
		check("slots", m.Slots, s.Slots)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrIncompatible, errors.Join(errs...))
	}
	want := s.Groups * uint64(s.Slots*s.Sectors) * sectorWords
	if m.Words != want || len(m.SlotEpochs) != s.Slots || len(m.SlotUses) != s.Slots {
		return fmt.Errorf("%w: snapshot has %d words, %d slots and %d slot uses, layout needs %d words and %d slots",
			ErrIncompatible, m.Words, len(m.SlotEpochs), len(m.SlotUses), want, s.Slots)
	}
	return checkGenerations(m)
}

// checkGenerations checks that the snapshot's generation table describes a window.
func checkGenerations(m Meta) error {
	live, cur := 0, false
	for _, e := range m.SlotEpochs {
		if e < 0 {
			continue
		}
		live++
		if uint64(e) > m.Epoch || m.Epoch-uint64(e) >= uint64(m.Generations) {
			return fmt.Errorf("%w: slot holds generation %d outside the window ending at %d", ErrIncompatible, e, m.Epoch)
		}
		cur = cur || uint64(e) == m.Epoch
	}
	if !cur || live > m.Generations {
		return fmt.Errorf("%w: generation table is inconsistent", ErrIncompatible)
	}
	if m.Epoch > math.MaxInt64/uint64(max(m.Interval, 1)) {
		return fmt.Errorf("%w: epoch %d out of range", ErrIncompatible, m.Epoch)
	}
	return nil
}

// readWords fills dst from little-endian bytes in r.
func readWords(r io.Reader, dst []uint64) error {
	if len(dst) == 0 {
		return nil
	}
	if nativeLittleEndian {
		b := unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), len(dst)*8)
		_, err := io.ReadFull(r, b)
		return err
	}
	buf := make([]byte, snapshotChunk*8)
	for i := 0; i < len(dst); i += snapshotChunk {
		end := min(i+snapshotChunk, len(dst))
		b := buf[:(end-i)*8]
		if _, err := io.ReadFull(r, b); err != nil {
			return err
		}
		for j := i; j < end; j++ {
			dst[j] = binary.LittleEndian.Uint64(b[(j-i)*8:])
		}
	}
	return nil
}

var nativeLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

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
		lay, err := f.restoredLayout(sm)
		if err != nil {
			return err
		}
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
		f.budget.take(lay.bytes) // a restored stage is taken even past the budget (see Budget)
	}
	f.grown.Store(&grownSet{gens: gens})
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
	_, err := f.restoredLayout(sm)
	return err
}

// restoreFill sets the stage-0 fill counters from m, or, for a snapshot without them, spreads
// each live generation's estimated keys evenly over its shards; then it marks full every slot
// whose stage 0 has taken more than GrowAt keys, as insert would have.
func (f *Filter) restoreFill(m Meta) {
	if len(m.Fill) == len(f.fill) && m.ShardBits == int(f.shardBits) {
		for i, c := range m.Fill {
			f.fill[i].n = c
		}
	} else {
		stride := max(f.groups/f.statsSample, 1)
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
	for s := range f.slots {
		if f.stage0Keys(s) > f.sizing.GrowAt {
			f.markFull(s, 1)
		}
	}
}

// restoredStages returns the grown stages of generation epoch of a filter being restored, in
// stage order.
func (f *Filter) restoredStages(epoch uint64) []*stage {
	if gg := f.grownGenIfAny(epoch); gg != nil {
		return *gg.stages.Load()
	}
	return nil
}
