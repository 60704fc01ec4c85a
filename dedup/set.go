package dedup

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/window"
)

// Set routes records to the filter of their scope and answers whether each record's identity was
// seen. It implements the worker's Deduper: Assign before a partition's records, Seen for each
// record, Revoke when the partition goes away. With a Persister it also keeps the filters' state
// on disk so that a restarted worker remembers what it saw (see Persister and the package docs).
//
// Seen, Processing and Acked take no lock: they read an immutable partMap that Assign, Revoke and
// Discard replace. Every method is safe for concurrent use, except that under ScopePartition the
// Seen calls for one partition must not overlap (see Seen). Use NewSet; the zero value is not
// usable.
type Set struct {
	cfg   Config
	parts atomic.Pointer[partMap]
	// scope is what depends on cfg.Scope, chosen once in NewSet (see scope.go).
	scope scope

	mu     sync.Mutex // serialises Assign, Revoke, Discard and Close
	closed bool
	// parked holds the filters of revoked partitions that may come back (see Revoke); guarded by
	// mu.
	parked map[int32]*part

	stop chan struct{}
	done chan struct{}

	unassigned atomic.Uint64
	late       atomic.Uint64 // ClockEvent: records older than their filter's oldest live generation
	capped     atomic.Uint64 // ClockEvent: records judged at the MaxAhead cap
	// atCap holds the filters found at their memory cap by the last Stats under
	// window.OverloadDrop (nil while none is): Judge reports their drops as VerdictOverload.
	atCap atomic.Pointer[map[*window.Filter]bool]

	tracked   atomic.Bool   // Processing was called: Seen calls follow it
	saveSlots chan struct{} // one per save under way (Config.SaveConcurrency)
	releases  releaseLog    // what the final saves of the last release wrote
	// owns confirms, before a save, that the worker still owns the partitions of its consumer
	// group generation (see Generation); nil: no check.
	owns atomic.Pointer[func(context.Context) error]
	// gen is the consumer group generation of the last Generation call (0 before). See
	// ownerEpoch.
	gen atomic.Int32
}

// partMap is the immutable set of assigned partitions that Assign, Revoke and Discard replace:
// byID, and the same parts indexed by partition number in dense for the lookups of every record
// (a slice index costs less than a map lookup) up to denseMax partitions.
type partMap struct {
	byID  map[int32]*part
	dense []*part
}

// denseMax bounds partMap.dense: partitions numbered from it on are looked up in byID. A topic
// has its partitions numbered from 0, so only a topic of more partitions than that uses it.
const denseMax = 1 << 16

// newPartMap returns the partMap of byID, which the caller must not change afterwards.
func newPartMap(byID map[int32]*part) *partMap {
	n := int32(0)
	for p := range byID {
		if p >= 0 && p < denseMax {
			n = max(n, p+1)
		}
	}
	pm := &partMap{byID: byID, dense: make([]*part, n)}
	for p, pt := range byID {
		if p >= 0 && p < n {
			pm.dense[p] = pt
		}
	}
	return pm
}

// part returns the part of partition, or nil if it is not assigned.
func (s *Set) part(partition int32) *part {
	pm := s.parts.Load()
	if uint32(partition) < uint32(len(pm.dense)) {
		return pm.dense[partition]
	}
	if partition < denseMax && partition >= 0 {
		return nil
	}
	return pm.byID[partition]
}

// NewSet validates cfg and returns a Set. Under ScopeGlobal it restores (or builds) the single
// filter now, re-warming it from the output topic; under ScopePartition filters are built as
// partitions are assigned. It returns an error wrapping window.ErrConfig or window.ErrMemory for a
// bad window configuration, a "dedup: ..." error for an unknown scope, and the Persister's or
// Output's error if restoring the global filter fails.
func NewSet(ctx context.Context, cfg Config) (*Set, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Set{cfg: cfg, parked: map[int32]*part{}, saveSlots: make(chan struct{}, cfg.SaveConcurrency)}
	empty := map[int32]*part{}
	s.parts.Store(newPartMap(empty))
	s.scope = cfg.Scope.kind().new(s)
	if err := s.scope.start(ctx); err != nil {
		return nil, err
	}
	if cfg.Persister != nil && cfg.CheckpointInterval > 0 {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.checkpointLoop()
	}
	return s, nil
}

// Seen reports whether id was already seen in the partition's scope, and records it if not. A
// partition that is not assigned has no state: Seen returns false (the record passes) and counts
// it, so that nothing is ever dropped by mistake.
//
// ts is the record's timestamp. Under ClockProcessing it is ignored. Under ClockEvent it is the
// record's time: it advances the filter's stream time (capped at the wall clock plus
// Config.MaxAhead) and the identity goes to the generation of ts; a record stamped before the
// oldest live generation is late, counted (Late) and passed or dropped by Config.LateRecords.
//
// With Config.Refresh a duplicate re-arms its identity in the generation a new one would go to,
// so that the window counts from its last sighting (see window.Filter.TestAndRefresh); exactly one
// of concurrent offers of a new id still gets false.
//
// Under ScopePartition the calls for one partition must not overlap: one goroutine at a time
// handles a partition (as the worker does, and Assign's re-warm runs in the caller of Assign
// before any Seen), because its filter is single-writer (window.Config.SingleWriter). Calls for
// different partitions may run concurrently. Under ScopeGlobal any number of goroutines may call
// Seen, and if several offer the same new id at once, exactly one gets false.
func (s *Set) Seen(partition int32, id []byte, ts time.Time) bool {
	return s.Judge(partition, id, ts) != VerdictNew
}

// Verdict is Set.Judge's decision on a record.
type Verdict uint8

const (
	// VerdictNew: the identity was not seen; the record passes.
	VerdictNew Verdict = iota
	// VerdictDuplicate: the identity was seen within the window (or the filter's false
	// positive, which cannot be told apart from it).
	VerdictDuplicate
	// VerdictLate: under ClockEvent the record is late and Config.LateRecords is LateDrop.
	VerdictLate
	// VerdictOverload: the identity was reported seen by a filter at its memory cap under
	// window.OverloadDrop, whose false-positive rate is above target: it may be a unique record.
	VerdictOverload
)

// Judge is Seen with the reason of a drop: VerdictNew where Seen returns false, VerdictLate for
// a late record dropped by Config.LateRecords, VerdictOverload for a record seen by a filter that
// the last Stats found at its memory cap under window.OverloadDrop (Stats runs at every metrics
// scrape and the worker's cap check, so the verdict lags a filter reaching or leaving the cap by
// up to their interval), else VerdictDuplicate. It has Seen's contract.
func (s *Set) Judge(partition int32, id []byte, ts time.Time) Verdict {
	pt := s.part(partition)
	if pt == nil {
		s.unassigned.Add(1)
		return VerdictNew
	}
	return s.overloaded(pt, s.judge(pt, pt.f.HashKey(id), ts))
}

// judge is Judge on the filter of pt for the identity whose hash is h, without the overload
// verdict.
func (s *Set) judge(pt *part, h window.KeyHash, ts time.Time) Verdict {
	switch {
	case pt.ev != nil:
		return s.seenAt(pt.f, pt.ev, h, ts)
	case s.cfg.Refresh:
		if seen, _ := pt.f.TestAndRefreshHash(h); seen {
			return VerdictDuplicate
		}
	case pt.f.TestAndAddHash(h):
		return VerdictDuplicate
	}
	return VerdictNew
}

// overloaded returns v, or VerdictOverload for a duplicate of a filter at its memory cap (see
// Judge).
func (s *Set) overloaded(pt *part, v Verdict) Verdict {
	if v == VerdictDuplicate {
		if capped := s.atCap.Load(); capped != nil && (*capped)[pt.f] {
			return VerdictOverload
		}
	}
	return v
}

// prefetchAhead is how many identities before judging one JudgeBatch prefetches it: enough for a
// filter's cache misses to arrive while the identities between are judged, few enough that the
// lines are still cached when it is.
const prefetchAhead = 4

// JudgeBatch judges the identities of ids in order, as Judge would one after another, and passes
// each verdict to put with its index; a nil id is skipped. ts(i) is the timestamp of ids[i] (see
// Seen). It hands each identity to the filter prefetchAhead identities before judging it
// (window.Filter.PrefetchHash), so that their cache misses overlap, and hashes each once for both.
// It has Judge's contract for concurrent use.
func (s *Set) JudgeBatch(partition int32, ids [][]byte, ts func(int) time.Time, put func(int, Verdict)) {
	pt := s.part(partition)
	if pt == nil {
		for i, id := range ids {
			if id != nil {
				s.unassigned.Add(1)
				put(i, VerdictNew)
			}
		}
		return
	}
	f := pt.f
	// ring holds the hashes of the identities prefetched and not judged yet.
	var ring [prefetchAhead]window.KeyHash
	for i, id := range ids[:min(prefetchAhead, len(ids))] {
		if id != nil {
			ring[i] = f.HashKey(id)
			f.PrefetchHash(ring[i])
		}
	}
	for i, id := range ids {
		h := ring[i%prefetchAhead]
		if j := i + prefetchAhead; j < len(ids) && ids[j] != nil {
			ring[j%prefetchAhead] = f.HashKey(ids[j])
			f.PrefetchHash(ring[j%prefetchAhead])
		}
		if id != nil {
			put(i, s.overloaded(pt, s.judge(pt, h, ts(i))))
		}
	}
}

// noteAtCap records which of the filters of stats are at their memory cap, for Judge.
func (s *Set) noteAtCap(stats []window.Stats, filters []*window.Filter) {
	if s.cfg.Window.Overload != window.OverloadDrop {
		return
	}
	var capped map[*window.Filter]bool
	for i, st := range stats {
		if st.AtCap {
			if capped == nil {
				capped = make(map[*window.Filter]bool)
			}
			capped[filters[i]] = true
		}
	}
	if capped == nil {
		s.atCap.Store(nil)
		return
	}
	s.atCap.Store(&capped)
}

// Processing records that the records of partition before nextOffset are about to be passed to
// Seen. Snapshots use it to know which identities they may contain, and, once a caller has called
// it, that no Seen call comes without it: a filter whose partitions made no progress since its last
// checkpoint is not saved again (see saveMark). Under ClockProcessing it also brings the
// partition's filter to the current generation if its rotation is late (see catchUp).
func (s *Set) Processing(partition int32, nextOffset int64) {
	if pt := s.part(partition); pt != nil {
		pt.processed.Store(nextOffset)
		if pt.ev == nil {
			s.catchUp(pt.f)
		}
		if !s.tracked.Load() {
			s.tracked.Store(true)
		}
	}
}

// catchUp rotates f to the generation of the clock's now if its rotation goroutine has not yet
// (ClockProcessing only). The goroutine's timer fires late on a loaded machine (50-225 ms at a
// load average of 26 on 2 cores, more beyond), and until it fires TestAndAdd adds identities to the
// generation before the clock's, which expires one interval earlier: the window would forget them
// before (Generations-1) x Interval. Processing comes before every batch's Seen calls, so a batch's
// identities go to the generation of the time it is judged. It costs two loads and a clock read
// per batch; the rotation, when due, holds the batch as long as it holds the goroutine.
func (s *Set) catchUp(f *window.Filter) {
	if now := s.now(); f.GenerationStart(now).After(f.CurrentGenerationStart()) {
		f.AdvanceTo(now)
	}
}

// Rewind records that the worker reads partition again from nextOffset, below what it processed
// (an offset reset after the log was truncated or the topic re-created): every record before
// nextOffset counts as processed and acknowledged, so that a snapshot's input offset does not
// claim the offsets the worker reads again. The filter keeps its identities: they are records the
// output topic got, so a re-read record that carries one is a duplicate of written output, as
// after a re-warm, and a record the truncation replaced carries an identity of its own.
func (s *Set) Rewind(partition int32, nextOffset int64) {
	if pt := s.part(partition); pt != nil {
		pt.processed.Store(nextOffset)
		pt.acked.Store(nextOffset)
	}
}

// Acked records that every record of partition before nextOffset reached the output topic (or was
// a duplicate). A snapshot becomes visible only once everything it may contain is acknowledged.
func (s *Set) Acked(partition int32, nextOffset int64) {
	if pt := s.part(partition); pt != nil {
		pt.acked.Store(nextOffset)
	}
}

// part is an assigned partition: its filter (the shared one under ScopeGlobal) and how far the
// worker got with it.
type part struct {
	f  *window.Filter
	ev *eventClock // the filter's stream time under ClockEvent (shared under ScopeGlobal), else nil
	// processed is the offset after the last batch handed to Seen, acked the offset after the last
	// batch whose output was acknowledged; -1 until the first batch.
	processed, acked atomic.Int64
	gone             atomic.Bool // revoked or discarded
	discarded        atomic.Bool // discarded: what it processed and did not acknowledge never will be
	lin              atomic.Pointer[lineage]
	mark             atomic.Pointer[saveMark] // the filter's last checkpoint, see saveMark
}

func newPart(f *window.Filter, ev *eventClock, lin lineage) *part {
	p := &part{f: f, ev: ev}
	p.processed.Store(-1)
	p.acked.Store(-1)
	p.lin.Store(&lin)
	return p
}

// lineage returns what is known of the coverage of the part's filter.
func (p *part) lineage() lineage { return *p.lin.Load() }

// saved records a save attempt of the part's filter in its lineage. Saves of one filter may
// overlap (a periodic checkpoint still running when the partition is revoked), so the update is a
// compare-and-swap and after keeps the newest snapshot whatever order the attempts end in.
func (p *part) saved(r saveResult, err error) {
	for {
		old := p.lin.Load()
		if p.lin.CompareAndSwap(old, ptr(old.after(r, err))) {
			return
		}
	}
}

func ptr[T any](v T) *T { return &v }

// Unassigned returns how many records Seen passed because their partition had no state. It should
// stay zero; anything else points at a worker bug.
func (s *Set) Unassigned() uint64 { return s.unassigned.Load() }

// partitions returns the assigned partitions in ascending order.
func (s *Set) partitions() []int32 {
	return slices.Sorted(maps.Keys(s.parts.Load().byID))
}

// Stats returns the state of every filter, for metrics.
// It also notes the filters at their memory cap, for Judge.
func (s *Set) Stats() []FilterStats {
	out, filters := s.scope.stats()
	stats := make([]window.Stats, len(out))
	for i := range out {
		stats[i] = out[i].Stats
	}
	s.noteAtCap(stats, filters)
	return out
}

// FilterStats is a filter's state with the name metrics label it with: the partition number, or
// "global".
type FilterStats struct {
	Name string
	// EventTime is true under ClockEvent.
	EventTime bool
	// StreamTime is the filter's stream time under ClockEvent (see Set.Seen); zero under
	// ClockProcessing and before the filter's first record.
	StreamTime time.Time
	// Late counts the filter's late records under ClockEvent (see Set.Seen) since it was created
	// or restored.
	Late uint64
	window.Stats
}

// filterStats returns the statistics of filter f named name, with stream time ev (nil under
// ClockProcessing).
func filterStats(name string, f *window.Filter, ev *eventClock) FilterStats {
	fs := FilterStats{Name: name, Stats: f.Stats()}
	if ev == nil {
		return fs
	}
	fs.EventTime, fs.Late = true, ev.late.Load()
	if ev.high.Load() > window.EventTimeOrigin.UnixNano() {
		fs.StreamTime = ev.now()
	}
	return fs
}

// Close stops the background checkpoints, then saves and drops every filter that is left (the
// worker should have revoked its partitions first; the saves run in parallel, up to
// Config.SaveConcurrency) and drops the parked ones. Later Assign calls
// fail; Seen passes records of dropped partitions. It returns the saving errors joined.
func (s *Set) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	defer s.dropParked()
	if s.stop != nil {
		close(s.stop)
		<-s.done
	}
	errs := []error{s.scope.close(ctx), s.revokeAll(ctx)}
	if args, ok := s.releases.logArgs(); ok && s.cfg.Persister != nil {
		s.cfg.Logger.Info("final checkpoints", args...)
	}
	return errors.Join(errs...)
}

var errClosed = errors.New("dedup: set is closed")
