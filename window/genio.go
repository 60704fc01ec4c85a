package window

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Per-generation snapshots. SnapshotGenerations exports each live generation on its own, in a
// canonical form that does not depend on how the filter lays generations out in memory, and
// RestoreGenerations builds a filter back from such exports. A generation's canonical words are
// its block in every group, group after group, each block its sectors in order and each sector
// its eight words (in memory, sector 0's words lie a row of Slots words apart: see blocks), with
// the use tag cleared (a word of an expired use reads as 0); then the words
// of each of its grown stages, in stage order, as the stage stores them. A caller that keeps
// generations apart (kdedup writes each to its own object) uses GenerationVersion to learn which
// ones changed since it last exported them.

// exportChunkWords is how many canonical words an export passes to its sink at a time.
const exportChunkWords = 4096

// exportBufs holds the chunk buffers of Export.Generation: a checkpoint round of many partitions
// exports one generation each, and a fresh buffer per export was garbage.
var exportBufs = sync.Pool{New: func() any { b := make([]uint64, exportChunkWords); return &b }}

// filterIDs numbers filters, so that generation versions of different filters never compare
// equal.
var filterIDs atomic.Uint64

// GenerationVersion identifies the content of one live generation of one Filter at the time of a
// snapshot (Meta.Versions). Versions are comparable with ==. A generation keeps its version while
// nothing is added to it; the current generation takes keys all the time, so only the version of
// an older generation (Sealed) can be relied on.
type GenerationVersion struct {
	filter uint64
	epoch  uint64
	use    uint64
	writes uint64 // keys added to the generation after it stopped being current (event time)
	stages int
	sealed bool
}

// Sealed reports whether the generation was not the current one when the version was taken: new
// keys go to the current generation, so a sealed generation changes only when a key is added by
// its own time (TestAndAddAt), which changes its version.
func (v GenerationVersion) Sealed() bool { return v.sealed }

// Unchanged reports whether a generation whose export was taken at version v still holds exactly
// what that export holds, now that its version is now: v is sealed and nothing was added since.
// A key being added while the export ran may be in neither (it is no older than the export, as
// with any snapshot), and a key added to the generation by a writer that had not seen the rotation
// yet is also in the newer generation it then writes (see set).
func (v GenerationVersion) Unchanged(now GenerationVersion) bool { return v.sealed && v == now }

// versionLocked returns the version of the generation slot s holds in view v. The caller holds
// f.mu.
func (f *Filter) versionLocked(v *view, s int) GenerationVersion {
	e := f.slotEpoch[s]
	if e < 0 {
		return GenerationVersion{}
	}
	gv := GenerationVersion{
		filter: f.id, epoch: uint64(e), use: f.uses[s].Load(), writes: uint64(f.oldWrites[s].n.Load()),
		sealed: uint64(e) != v.epoch,
	}
	if gg := f.grownGenIfAny(uint64(e)); gg != nil {
		gv.stages = len(*gg.stages.Load())
	}
	return gv
}

// Sections returns the number of canonical words of generation epoch's sections, as its export
// passes them: its stage 0 block in every group, then each of its grown stages in m. It returns
// nil if the generation is not live in m.
func (m Meta) Sections(epoch uint64) []uint64 {
	live := false
	for _, e := range m.SlotEpochs {
		live = live || e >= 0 && uint64(e) == epoch
	}
	if !live {
		return nil
	}
	secs := []uint64{m.Groups * uint64(m.Sectors*m.SectorBits/64)}
	for _, st := range m.Stages {
		if st.Epoch == epoch {
			secs = append(secs, st.Words)
		}
	}
	return secs
}

// Export is a snapshot under way, handed to the function SnapshotGenerations calls. Generation
// and Meta may be called from several goroutines at once; Release must not run meanwhile.
type Export struct {
	f      *Filter
	meta   Meta
	stages []*stage
	held   bool
}

// Meta returns the metadata of the snapshot: the state that the exported generations belong to.
func (x *Export) Meta() Meta { return x.meta }

// Generation passes the canonical words of live generation epoch to sink, a chunk at a time
// (sink must not keep the slice), and returns sink's first error. Every word is read atomically
// while writers continue; a key added before SnapshotGenerations was called is in the export of
// its generation. It fails after Release, or for a generation that is not live in Meta.
func (x *Export) Generation(epoch uint64, sink func(words []uint64) error) error {
	defer runtime.KeepAlive(x) // its stage 0 is unmapped when it is collected (newFilter)
	if !x.held {
		return errors.New("window: generation exported after the snapshot was released")
	}
	slot := -1
	for s, e := range x.meta.SlotEpochs {
		if e >= 0 && uint64(e) == epoch {
			slot = s
		}
	}
	if slot < 0 {
		return fmt.Errorf("window: generation %d is not live in the snapshot", epoch)
	}
	bp := exportBufs.Get().(*[]uint64)
	defer exportBufs.Put(bp)
	buf := *bp
	f := x.f
	tag := tagOf(x.meta.SlotUses[slot])
	step := max(exportChunkWords/(uint64(f.sectors)*sectorWords), 1)
	for g := uint64(0); g < f.groups; g += step {
		end := min(g+step, f.groups)
		n := f.gatherSlot(slot, g, end, tag, buf)
		if err := sink(buf[:n]); err != nil {
			return err
		}
	}
	for j, sm := range x.meta.Stages { // x.stages[j] is the stage sm describes
		if sm.Epoch != epoch {
			continue
		}
		if err := exportStage(x.stages[j].words, buf, sink); err != nil {
			return err
		}
	}
	return nil
}

// exportStage passes a grown stage's words to sink, loaded atomically into buf a chunk at a time.
func exportStage(words, buf []uint64, sink func([]uint64) error) error {
	for i := 0; i < len(words); i += len(buf) {
		n := min(len(buf), len(words)-i)
		for j := range n {
			buf[j] = atomic.LoadUint64(&words[i+j])
		}
		if err := sink(buf[:n]); err != nil {
			return err
		}
	}
	return nil
}

// Counts returns the fill counts as they are now, in Meta's form: stage 0's per slot and shard
// (Meta.Fill), and each grown stage's (Meta.Stages[i].Counts, in that order). A count is raised
// before its key's bits are set, so counts read after a generation's words were exported cover
// every key in them. A caller that stores these rather than Meta's (read before the words) writes
// a snapshot whose counts fit its bits however many keys the writers added meanwhile: a stage that
// goes on taking keys at the memory cap needs that (see checkFill). It fails after Release, when
// the slots may hold other generations.
func (x *Export) Counts() (fill []uint64, stages [][]uint64, err error) {
	if !x.held {
		return nil, nil, errors.New("window: counts read after the snapshot was released")
	}
	fill = make([]uint64, len(x.f.fill))
	for i := range fill {
		fill[i] = atomic.LoadUint64(&x.f.fill[i].n)
	}
	stages = make([][]uint64, len(x.stages))
	for j, st := range x.stages {
		stages[j] = make([]uint64, len(st.count))
		for i := range stages[j] {
			stages[j][i] = atomic.LoadUint64(&st.count[i].n)
		}
	}
	return fill, stages, nil
}

// Release ends the hold on rotation; Generation fails afterwards. It is idempotent.
func (x *Export) Release() {
	if x.held {
		x.held = false
		x.f.snapStages = nil
		x.f.mu.Unlock()
	}
}

// SnapshotGenerations calls fn with an Export of the filter's current state: its Meta, with the
// version of every live generation (Meta.Versions), and the means to export any of them. Rotation
// waits until fn calls Release or returns, so the exports agree with the Meta; fn can go on after
// Release (wait for acknowledgements, say) while the filter rotates again: under event time the
// goroutine that adds keys also rotates, and must not wait for what fn waits for. fn must not
// call other methods of f that rotate or snapshot before Release. SnapshotGenerations returns fn's
// error.
func (f *Filter) SnapshotGenerations(fn func(x *Export) error) error {
	defer runtime.KeepAlive(f) // its stage 0 is unmapped when it is collected (newFilter)
	f.mu.Lock()
	x := &Export{f: f, meta: f.metaLocked(), held: true}
	x.stages = f.snapStages
	defer x.Release()
	return fn(x)
}

// GenerationReader reads one generation's canonical words, as Export.Generation passed them.
type GenerationReader interface {
	// ReadWords fills dst with the next len(dst) words.
	ReadWords(dst []uint64) error
	// Close releases the reader. RestoreGenerations calls it once it has read the words it
	// needs, or given up.
	Close() error
}

// RestoreGenerations builds a Filter for cfg from a snapshot's Meta and the canonical words of
// each live generation, which open returns (m.Sections gives their sizes), and ages it to
// cfg.Clock() as Restore does. It reads the generations in parallel, up to GOMAXPROCS at a time,
// so open must be safe for concurrent use. It returns Restore's errors for an incompatible or bad
// configuration, and open's or the reader's error, wrapped, if a generation cannot be read; a
// failed RestoreGenerations returns no Filter.
func RestoreGenerations(cfg Config, m Meta, open func(epoch uint64) (GenerationReader, error)) (*Filter, error) {
	return restore(cfg, m, func(f *Filter) error {
		if err := f.restoreStages(m, nil); err != nil {
			return err
		}
		return f.importGenerations(m, open)
	})
}

// importGenerations reads every live generation of m into f, which is not shared yet.
func (f *Filter) importGenerations(m Meta, open func(epoch uint64) (GenerationReader, error)) error {
	var slots []int
	for s, e := range m.SlotEpochs {
		if e >= 0 {
			slots = append(slots, s)
		}
	}
	errs := make([]error, len(slots))
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(slots)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(slots) && !failed.Load(); i = int(next.Add(1) - 1) {
				if errs[i] = f.importGeneration(m, slots[i], open); errs[i] != nil {
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// importGeneration reads the generation slot s holds in m.
func (f *Filter) importGeneration(m Meta, s int, open func(epoch uint64) (GenerationReader, error)) (err error) {
	epoch := uint64(m.SlotEpochs[s])
	r, err := open(epoch)
	if err != nil {
		return fmt.Errorf("window: generation %d: %w", epoch, err)
	}
	defer func() {
		if cerr := r.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("window: generation %d: %w", epoch, cerr)
		}
	}()
	buf := make([]uint64, exportChunkWords)
	tag := tagOf(m.SlotUses[s])
	step := max(exportChunkWords/(uint64(f.sectors)*sectorWords), 1)
	for g := uint64(0); g < f.groups; g += step {
		end := min(g+step, f.groups)
		n := (end - g) * uint64(f.sectors) * sectorWords
		if err := r.ReadWords(buf[:n]); err != nil {
			return fmt.Errorf("window: generation %d: %w", epoch, err)
		}
		f.scatterSlot(s, g, end, tag, buf[:n])
	}
	for _, st := range f.restoredStages(epoch) {
		if err := r.ReadWords(st.words); err != nil {
			return fmt.Errorf("window: generation %d stage %d: %w", epoch, st.index, err)
		}
	}
	return nil
}

// gatherSlot copies the canonical words of slot s in groups [from, to) into dst (which must hold
// them), reading each word atomically, clearing the tag and zeroing words whose tag is not tag,
// and returns how many it copied. A group the slot's use never wrote (see touched) is copied as
// zeros without being read. A group's canonical words are the slot's words of sector 0 (a
// word-major row apart in memory, see blocks), then those of each other sector.
func (f *Filter) gatherSlot(s int, from, to, tag uint64, dst []uint64) uint64 {
	n := uint64(0)
	slots := uint64(f.slots)
	block := uint64(f.sectors) * sectorWords
	for g := from; g < to; g++ {
		if !f.touched.has(s, g) {
			clear(dst[n : n+block])
			n += block
			continue
		}
		base := g * f.groupWords
		for w := range uint64(sectorWords) {
			dst[n] = canonicalWord(atomic.LoadUint64(&f.words[base+w*slots+uint64(s)]), tag)
			n++
		}
		for sec := 1; sec < f.sectors; sec++ {
			b := f.sector(f.restSector(base, s, sec))
			for w := range sectorWords {
				dst[n] = canonicalWord(atomic.LoadUint64(&b[w]), tag)
				n++
			}
		}
	}
	return n
}

// canonicalWord returns word x of a slot whose use has tag: its data bits, or 0 for a word of an
// earlier use.
func canonicalWord(x, tag uint64) uint64 {
	valid := ^uint64(int64(x^tag) >> 63) // all ones if x carries tag
	return x & valid &^ tagBit
}

// scatterSlot stores canonical words of slot s in groups [from, to), as gatherSlot orders them,
// with the tag of the slot's use, and marks the groups that get data. The filter is not shared
// yet: plain stores. An empty block of a use with tag 0 is left alone: the words of a new filter
// are zero already, and a page that no block of a restored generation needs stays unwritten (and
// out of the resident set) until a key reaches it.
func (f *Filter) scatterSlot(s int, from, to, tag uint64, src []uint64) {
	n := 0
	slots := uint64(f.slots)
	block := int(f.sectors) * sectorWords
	for g := from; g < to; g++ {
		if !allZero(src[n : n+block]) {
			f.touched.mark(s, g)
		} else if tag == 0 {
			n += block
			continue
		}
		base := g * f.groupWords
		f.markPages(base, f.groupWords) // the stores below write them
		for w := range uint64(sectorWords) {
			f.words[base+w*slots+uint64(s)] = src[n]&^tagBit | tag
			n++
		}
		for sec := 1; sec < f.sectors; sec++ {
			b := f.sector(f.restSector(base, s, sec))
			for w := range sectorWords {
				b[w] = src[n]&^tagBit | tag
				n++
			}
		}
	}
}

// restore builds a Filter for cfg from a snapshot's Meta, reading its data with load, and ages it
// to cfg.Clock().
func restore(cfg Config, m Meta, load func(f *Filter) error) (*Filter, error) {
	cfg = cfg.withAuto()
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	s, err := Size(cfg)
	if err != nil {
		return nil, err
	}
	if err := compatible(cfg, s, m); err != nil {
		return nil, err
	}
	if err := checkTrust(cfg, s, m); err != nil {
		return nil, err
	}
	f := newFilter(cfg, s)
	if err := load(f); err != nil {
		f.Release()
		return nil, err
	}
	f.origin = m.Origin
	f.restoreSlots(m)
	f.restoreFill(m)
	if err := f.checkFill(); err != nil {
		f.Release()
		return nil, err
	}
	f.rotations.Store(m.Rotations)
	f.AdvanceTo(cfg.Clock())
	return f, nil
}
