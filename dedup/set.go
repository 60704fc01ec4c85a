package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/checkpoint/snapshot"
	"github.com/kdedup/kdedup/window"
)

// Scope says which records share a filter.
type Scope string

// The scopes a Set offers. Their names are those snapshots record (snapshot.Header.Scope).
const (
	// ScopePartition keeps one filter per input partition. A partition's state can move to another
	// replica on rebalance, and duplicates are only caught within a partition. It is the default.
	ScopePartition Scope = snapshot.ScopePartition
	// ScopeGlobal keeps one filter for all partitions, so that duplicates that arrive on different
	// partitions are caught too. It suits single-replica deployments: replicas do not share it.
	ScopeGlobal Scope = snapshot.ScopeGlobal
)

// globalUnit names the global filter: its snapshot unit and its metrics label.
const globalUnit = string(ScopeGlobal)

// ParseScope returns the Scope named s (ScopePartition or ScopeGlobal).
func ParseScope(s string) (Scope, error) {
	return parseChoice("scope", s, ScopePartition, ScopeGlobal)
}

// parseChoice returns s as a T if it names a or b, else an error that names what, s and both
// choices. It parses the two-valued settings of a Set (Scope, Clock, LatePolicy).
func parseChoice[T ~string](what, s string, a, b T) (T, error) {
	if v := T(s); v == a || v == b {
		return v, nil
	}
	return "", fmt.Errorf("dedup: unknown %s %q (want %s or %s)", what, s, a, b)
}

// Restored describes where a restored filter came from.
type Restored struct {
	// Outcome says which snapshot was restored: the newest (checkpoint.OutcomeWarm), an older
	// one (OutcomeFallback), or none, so that the filter starts empty (OutcomeCold).
	Outcome checkpoint.Outcome
	// OutputOffsets are the output partitions' end offsets when the snapshot was taken: every
	// output record before them is in the snapshot, the ones after must be re-warmed.
	OutputOffsets map[int32]int64
	// Snapshot names the snapshot restored (zero for OutcomeCold).
	Snapshot SnapshotRef
}

// SnapshotRef identifies one saved snapshot of a unit: the name its store gave it (unique within
// the store, checkpoint.Info.Name), its place in the unit's order (checkpoint.Info.Seq: a later
// save has a larger Seq) and its size. The zero SnapshotRef stands for no snapshot.
type SnapshotRef struct {
	Name string
	Seq  uint64
	Size int64
}

// SnapshotInfo is what a Set knows about a snapshot besides the filter.
type SnapshotInfo struct {
	Scope     Scope
	Topic     string
	Partition int32 // -1 under ScopeGlobal
	// InputOffsets maps input partitions to the offset before which every record is covered.
	InputOffsets map[int32]int64
	// OutputOffsets maps output partitions to their end offsets taken before the copy.
	OutputOffsets map[int32]int64
}

// Persister saves and restores a filter's state. NewCheckpointPersister returns the
// checkpoint-backed one. Implementations must be safe for concurrent use.
type Persister interface {
	// Restore returns the filter saved for unit, restored into cfg and aged to now, or a nil
	// filter with Outcome checkpoint.OutcomeCold when no snapshot is usable. An error means the state could not be
	// read at all (for example an I/O error) and the caller should retry.
	Restore(ctx context.Context, unit string, cfg window.Config) (*window.Filter, Restored, error)
	// Save writes f's state for unit. It calls seal after the data is written and before the
	// snapshot becomes visible; if seal fails, nothing is saved. It returns the saved snapshot, or
	// an error when it could not be saved durably.
	Save(ctx context.Context, unit string, f *window.Filter, info SnapshotInfo, seal func(context.Context) error) (SnapshotRef, error)
	// Newest returns the newest snapshot of unit, without reading it, or the zero SnapshotRef when
	// there is none. A Set calls it when a partition it kept in memory comes back, to learn whether
	// anyone saved a newer state of it meanwhile; it should be cheap (one listing).
	Newest(ctx context.Context, unit string) (SnapshotRef, error)
}

// CheckpointObserver receives checkpoint measurements; metrics.Metrics implements it. A Set calls
// it from Assign, Revoke, Close and its checkpoint loop at once, so methods must be safe for
// concurrent use; they should return quickly, as they run on those paths.
type CheckpointObserver interface {
	// CheckpointSaved reports a snapshot that became visible: how long saving it took, from
	// reading the output end offsets to the store's commit (including the wait for the seal), and
	// its size in bytes.
	CheckpointSaved(duration time.Duration, sizeBytes int64)
	// CheckpointFailed reports a snapshot that was not saved: the output end offsets could not be
	// read, the seal timed out or the Persister failed. The previous snapshots stay usable.
	CheckpointFailed()
	// Restored reports how the state of a unit was prepared (the snapshot restored, the filter
	// kept in memory, or none: a cold start, rebuilt or empty) and how long restoring, rebuilding
	// and re-warming took. Only a Set with a Persister or a rebuild calls it: once per Assign under
	// ScopePartition, once in NewSet under ScopeGlobal.
	Restored(outcome checkpoint.Outcome, duration time.Duration)
	// Rewarmed reports how many output records were read back into a restored filter.
	Rewarmed(n int)
}

// OutputLog is the output topic as the snapshot protocol sees it: where it ends when a snapshot is
// taken, and what was produced after that. consumer.OutputReader implements it; cmd/kdedup joins
// the two, so that dedup imports no Kafka client. Implementations must be safe for concurrent use:
// a Set calls them from Assign, Revoke, Close and its checkpoint loop at once.
//
// The interface grows with the snapshot protocol (a rebuild of a filter from a timestamp of the
// output topic is planned); consumer.OutputReader is where new methods are implemented.
type OutputLog interface {
	// End returns the end offsets (high watermarks) of the output partitions that can hold
	// records of inputPartition, by output partition; inputPartition -1 (ScopeGlobal) means every
	// input partition, so every output partition. A snapshot records them before its copy
	// starts: every output record below them is then covered by the snapshot. On failure it
	// returns an error and no offsets, and the snapshot is not taken.
	End(ctx context.Context, inputPartition int32) (map[int32]int64, error)
	// Rewarm reads each output partition q of from, from offset from[q] up to the partition's
	// end at the time of the call, and calls add with the identity and the timestamp of every
	// record that has an identity. add is called on the calling goroutine, one record at a time,
	// in offset order within a partition; id is only valid during the call. Records that are
	// duplicates themselves (marked in ModeMark) may be skipped. Rewarm returns the number of
	// records passed to add; on failure also an error, and the Set does not use the filter (the
	// caller of Assign retries). Records already deleted by retention are skipped, not an error.
	Rewarm(ctx context.Context, from map[int32]int64, add func(id []byte, ts time.Time)) (int, error)
}

// Config configures a Set.
type Config struct {
	// Scope selects per-partition or global filters. Default: ScopePartition.
	Scope Scope
	// Window configures each filter. Under ScopePartition, Capacity is per partition and
	// SingleWriter is set (one goroutine writes each partition's filter, see Set.Seen); under
	// ScopeGlobal SingleWriter is cleared. Window.Clock is the wall clock: it rotates filters under
	// ClockProcessing, and bounds stream time (MaxAhead) and places the rebuild under ClockEvent,
	// where each filter gets its stream time as its own Clock.
	Window window.Config
	// Topic names the input topic; it prefixes snapshot unit names. Default: "input".
	Topic string
	// Persister saves and restores filters. Default: nil, no persistence; every filter starts cold.
	Persister Persister
	// CheckpointInterval is how often every filter is snapshotted in the background, besides on
	// Revoke and Close. Default: 0, only on Revoke and Close.
	CheckpointInterval time.Duration
	// SealTimeout bounds how long a snapshot waits for the records it may contain to be
	// acknowledged by the output topic. Default: 30s.
	SealTimeout time.Duration
	// Output is the output topic: snapshots record its end offsets, and a restored filter is
	// re-warmed from the records after them. Default: nil, snapshots record no output offsets and
	// restored filters are not re-warmed.
	Output OutputLog
	// Observer receives checkpoint measurements. Default: none.
	Observer CheckpointObserver
	// Logger receives lifecycle messages (never one per record). Default: slog.Default().
	Logger *slog.Logger
	// RebuildMaxRecords, when positive, makes a unit that has no usable snapshot (or no Persister)
	// rebuild its filter from the output records of the window instead of starting empty, reading
	// at most this many records: the newest; the older ones are skipped, logged and counted, and
	// their duplicates can pass (see Set.rebuild). Output must implement OutputHistory. Default: 0,
	// no rebuild.
	RebuildMaxRecords int64
	// Clock selects the time the windows follow: the worker's wall clock or the records'
	// timestamps (see "Event time" in the package documentation). Default: ClockProcessing.
	Clock Clock
	// LateRecords says what happens under ClockEvent to a record stamped before its filter's
	// oldest live generation, which cannot be judged: under LateDrop, Seen reports it as a
	// duplicate. Default: LatePass.
	LateRecords LatePolicy
	// MaxAhead caps, under ClockEvent, how far ahead of the wall clock (Window.Clock) a record's
	// timestamp may advance a filter's stream time; a record stamped later is judged at the cap.
	// Default: Window.Interval.
	MaxAhead time.Duration
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

// part is an assigned partition: its filter (the shared one under ScopeGlobal) and how far the
// worker got with it.
type part struct {
	f  *window.Filter
	ev *eventClock // the filter's stream time under ClockEvent (shared under ScopeGlobal), else nil
	// processed is the offset after the last batch handed to Seen, acked the offset after the last
	// batch whose output was acknowledged; -1 until the first batch.
	processed, acked atomic.Int64
	gone             atomic.Bool // revoked or discarded
	lin              atomic.Pointer[lineage]
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

// Set routes records to the filter of their scope and answers whether each record's identity was
// seen. It implements the worker's Deduper: Assign before a partition's records, Seen for each
// record, Revoke when the partition goes away. With a Persister it also keeps the filters' state
// on disk so that a restarted worker remembers what it saw (see Persister and the package docs).
//
// Seen, Processing and Acked take no lock: they read an immutable map that Assign, Revoke and
// Discard replace. Every method is safe for concurrent use, except that under ScopePartition the
// Seen calls for one partition must not overlap (see Seen). Use NewSet; the zero value is not
// usable.
type Set struct {
	cfg    Config
	parts  atomic.Pointer[map[int32]*part]
	global *window.Filter // ScopeGlobal
	// globalEv is the global filter's stream time under ClockEvent.
	globalEv *eventClock

	mu      sync.Mutex // serialises Assign, Revoke, Discard and Close
	closed  bool
	tainted atomic.Bool // ScopeGlobal: the filter holds identities that never reached the output
	// parked holds the filters of revoked partitions that may come back (see Revoke); guarded by
	// mu.
	parked  map[int32]*part
	history OutputHistory // Output, when RebuildMaxRecords > 0

	stop chan struct{}
	done chan struct{}

	unassigned atomic.Uint64
	late       atomic.Uint64 // ClockEvent: records older than their filter's oldest live generation
	capped     atomic.Uint64 // ClockEvent: records judged at the MaxAhead cap
}

// NewSet validates cfg and returns a Set. Under ScopeGlobal it restores (or builds) the single
// filter now, re-warming it from the output topic; under ScopePartition filters are built as
// partitions are assigned. It returns an error wrapping window.ErrConfig or window.ErrMemory for a
// bad window configuration, a "dedup: ..." error for an unknown scope, and the Persister's or
// Output's error if restoring the global filter fails.
func NewSet(ctx context.Context, cfg Config) (*Set, error) {
	if cfg.Scope == "" {
		cfg.Scope = ScopePartition
	}
	if _, err := ParseScope(string(cfg.Scope)); err != nil {
		return nil, err
	}
	if cfg.Topic == "" {
		cfg.Topic = "input"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SealTimeout <= 0 {
		cfg.SealTimeout = 30 * time.Second
	}
	if err := cfg.defaultClock(); err != nil {
		return nil, err
	}
	if _, err := window.Size(cfg.Window); err != nil {
		return nil, fmt.Errorf("dedup: %w", err)
	}
	// A partition's records reach Seen from one goroutine, after Assign's re-warm or rebuild (which
	// run in the caller of Assign, the partition's goroutine): its filter can skip the atomic
	// read-modify-writes. A filter kept across a rebalance is written by the next generation's
	// goroutine only after the previous one returned.
	cfg.Window.SingleWriter = cfg.Scope == ScopePartition
	s := &Set{cfg: cfg, parked: map[int32]*part{}}
	if cfg.RebuildMaxRecords > 0 {
		h, ok := cfg.Output.(OutputHistory)
		if !ok {
			return nil, errors.New("dedup: RebuildMaxRecords needs an Output that implements OutputHistory")
		}
		s.history = h
	}
	empty := map[int32]*part{}
	s.parts.Store(&empty)
	if cfg.Scope == ScopeGlobal {
		ev := s.newEventClock()
		f, _, err := s.open(ctx, globalUnit, -1, ev)
		if err != nil {
			return nil, err
		}
		s.global, s.globalEv = f, ev
	}
	if cfg.Persister != nil && cfg.CheckpointInterval > 0 {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.checkpointLoop()
	}
	return s, nil
}

// Unit returns the snapshot unit name of a partition's state: "<topic>.p<partition>", or "global"
// under ScopeGlobal.
func (s *Set) Unit(partition int32) string {
	if s.cfg.Scope == ScopeGlobal {
		return globalUnit
	}
	return s.cfg.Topic + ".p" + strconv.Itoa(int(partition))
}

// open prepares the unit's filter from the store: it restores the newest usable snapshot and
// re-warms it from the output topic; without one it rebuilds the filter from the output topic
// (Config.RebuildMaxRecords) or starts it empty, and snapshots it at once, so that a crash before
// the first periodic checkpoint can still re-warm from the output offsets of this moment. It
// starts the filter's rotation (under ClockProcessing; under ClockEvent the records rotate it,
// through ev) and returns what the filter covers.
func (s *Set) open(ctx context.Context, unit string, partition int32, ev *eventClock) (*window.Filter, lineage, error) {
	start := time.Now()
	f, r, err := s.restore(ctx, unit, ev)
	if err != nil {
		return nil, lineage{}, err
	}
	lin := lineage{snap: r.Snapshot, out: r.OutputOffsets}
	cold := f == nil
	if cold {
		r.Outcome = checkpoint.OutcomeCold
		if f, lin.out, err = s.coldFilter(ctx, unit, partition, ev); err != nil {
			return nil, lineage{}, err
		}
	}
	if s.cfg.Observer != nil && (s.cfg.Persister != nil || s.history != nil) {
		s.cfg.Observer.Restored(r.Outcome, time.Since(start))
	}
	if cold && s.cfg.Persister != nil {
		// The baseline: a filter that covers the output up to now. Failing to write it only
		// weakens crash recovery (counted and logged), so consumption is not held up.
		res, err := s.save(ctx, unit, f, partition, map[int32]*part{})
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Error("baseline checkpoint failed; until a checkpoint succeeds, a crash may let duplicates through",
				"unit", unit, "error", err.Error())
		}
		lin = lin.after(res, err)
	}
	if err := ctx.Err(); err != nil && partition >= 0 {
		// The assignment was called off (the generation ended) after the filter was prepared:
		// it is as current as a revoked one, so it is parked for the next generation.
		s.park(partition, newPart(f, ev, lin))
		return nil, lineage{}, fmt.Errorf("dedup: preparing %s: %w", unit, err)
	}
	if ev == nil {
		f.Start()
	}
	return f, lin, nil
}

// restore returns the unit's newest usable snapshot, restored and re-warmed from the output
// topic, or a nil filter when there is none (or no Persister). Under ClockEvent the filter resumes
// at the stream time of its current generation (eventClock.resume), and the re-warm places each
// output record in the generation of its timestamp.
func (s *Set) restore(ctx context.Context, unit string, ev *eventClock) (*window.Filter, Restored, error) {
	if s.cfg.Persister == nil {
		return nil, Restored{Outcome: checkpoint.OutcomeCold}, nil
	}
	start := time.Now()
	f, r, err := s.cfg.Persister.Restore(ctx, unit, s.windowFor(ev))
	if err != nil {
		return nil, r, fmt.Errorf("dedup: restoring %s: %w", unit, err)
	}
	if f != nil && ev != nil {
		ev.resume(f)
	}
	if f != nil && s.cfg.Output != nil && r.OutputOffsets != nil {
		n, err := s.cfg.Output.Rewarm(ctx, r.OutputOffsets, s.addFunc(f, ev))
		if err != nil {
			return nil, r, fmt.Errorf("dedup: re-warming %s from the output topic: %w", unit, err)
		}
		if s.cfg.Observer != nil {
			s.cfg.Observer.Rewarmed(n)
		}
		s.cfg.Logger.Info("state restored", "unit", unit, "outcome", r.Outcome, "snapshot", r.Snapshot.Name,
			"rewarmed_records", n, "duration", time.Since(start).String())
	}
	return f, r, nil
}

// coldFilter returns the filter of a unit without a usable snapshot: rebuilt from the output
// topic when Config.RebuildMaxRecords is set (with the output offsets it covers), else empty.
func (s *Set) coldFilter(ctx context.Context, unit string, partition int32, ev *eventClock) (*window.Filter, map[int32]int64, error) {
	if s.history != nil {
		return s.rebuild(ctx, unit, partition, ev)
	}
	f, err := window.New(s.windowFor(ev))
	if err != nil {
		return nil, nil, fmt.Errorf("dedup: %w", err)
	}
	return f, nil, nil
}

// Assign prepares the state of a newly assigned partition: it reuses the filter kept since the
// partition's Revoke when the store holds nothing newer (see Revoke), or restores the partition's
// snapshot through the Persister, or rebuilds it from the output topic, or starts a cold filter;
// and re-warms it from the output topic. A restored, rebuilt or cold filter is snapshotted at
// once. Assigning a partition that is already assigned does nothing. Under ScopeGlobal it only
// starts tracking the partition's progress. It returns the Persister's or Output's error, wrapped,
// if the state could not be prepared; the caller should retry.
func (s *Set) Assign(ctx context.Context, partition int32) error {
	s.mu.Lock()
	closed := s.closed
	_, assigned := (*s.parts.Load())[partition]
	s.mu.Unlock()
	switch {
	case closed:
		return errClosed
	case assigned:
		return nil
	}
	// Restoring and re-warming can take a while; other partitions restore meanwhile.
	f, ev, lin := s.global, s.globalEv, lineage{}
	if f == nil {
		var err error
		if f, ev, lin, err = s.prepare(ctx, s.Unit(partition), partition); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.parts.Load()
	_, assigned = cur[partition]
	if s.closed || assigned {
		if f != s.global {
			f.Close()
		}
		if s.closed {
			return errClosed
		}
		return nil
	}
	next := maps.Clone(cur)
	next[partition] = newPart(f, ev, lin)
	s.parts.Store(&next)
	return nil
}

// prepare returns the filter of a newly assigned partition and its stream time (nil under
// ClockProcessing): the parked one if it may serve (see unpark), else the one open prepares from
// the store.
func (s *Set) prepare(ctx context.Context, unit string, partition int32) (*window.Filter, *eventClock, lineage, error) {
	if f, ev, lin, ok, err := s.unpark(ctx, unit, partition); ok || err != nil {
		return f, ev, lin, err
	}
	ev := s.newEventClock()
	f, lin, err := s.open(ctx, unit, partition, ev)
	return f, ev, lin, err
}

// Revoke saves the partition's state through the Persister, stops its filter and parks it, in
// case the partition comes back to this Set (see "Retained partitions" in retain.go). The caller
// must have produced every record it passed to Seen for the partition. Revoking a partition that
// is not assigned does nothing. Under ScopeGlobal it only stops tracking the partition: the global
// filter is saved periodically and on Close. The state is parked even if saving fails; the error
// is returned.
func (s *Set) Revoke(ctx context.Context, partition int32) error {
	pt := s.remove(partition)
	if pt == nil || s.global != nil {
		return nil
	}
	pt.f.Close()
	var res saveResult
	var err error
	if s.cfg.Persister != nil {
		res, err = s.save(ctx, s.Unit(partition), pt.f, partition, map[int32]*part{partition: pt})
	} else if s.cfg.Output != nil {
		res.out, err = s.cfg.Output.End(ctx, partition)
		if err != nil {
			err = fmt.Errorf("dedup: revoking %s: reading output end offsets: %w", s.Unit(partition), err)
		}
	}
	pt.saved(res, err)
	s.park(partition, pt)
	return err
}

// Discard drops the partition's state without saving it. The worker calls it instead of Revoke
// when records it passed to Seen never reached the output topic: a snapshot would make the next
// owner drop them as duplicates. Under ScopeGlobal the shared filter holds those identities too,
// so no snapshot is taken from then on; the next start re-warms from the last good one.
func (s *Set) Discard(_ context.Context, partition int32) error {
	pt := s.remove(partition)
	if pt == nil {
		return nil
	}
	if s.global != nil {
		if !s.tainted.Swap(true) {
			s.cfg.Logger.Warn("the global filter holds identities of records that were not produced; it will not be snapshotted again until restart",
				"partition", partition)
		}
		return nil
	}
	pt.f.Close()
	return nil
}

func (s *Set) remove(partition int32) *part {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.parts.Load()
	pt, ok := cur[partition]
	if !ok {
		return nil
	}
	next := maps.Clone(cur)
	delete(next, partition)
	s.parts.Store(&next)
	pt.gone.Store(true)
	return pt
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
// Under ScopePartition the calls for one partition must not overlap: one goroutine at a time
// handles a partition (as the worker does, and Assign's re-warm runs in the caller of Assign
// before any Seen), because its filter is single-writer (window.Config.SingleWriter). Calls for
// different partitions may run concurrently. Under ScopeGlobal any number of goroutines may call
// Seen, and if several offer the same new id at once, exactly one gets false.
func (s *Set) Seen(partition int32, id []byte, ts time.Time) bool {
	pt := (*s.parts.Load())[partition]
	if pt == nil {
		s.unassigned.Add(1)
		return false
	}
	if pt.ev != nil {
		return s.seenAt(pt.f, pt.ev, id, ts)
	}
	return pt.f.TestAndAdd(id)
}

// Processing records that the records of partition before nextOffset are about to be passed to
// Seen. Snapshots use it to know which identities they may contain.
func (s *Set) Processing(partition int32, nextOffset int64) {
	if pt := (*s.parts.Load())[partition]; pt != nil {
		pt.processed.Store(nextOffset)
	}
}

// Acked records that every record of partition before nextOffset reached the output topic (or was
// a duplicate). A snapshot becomes visible only once everything it may contain is acknowledged.
func (s *Set) Acked(partition int32, nextOffset int64) {
	if pt := (*s.parts.Load())[partition]; pt != nil {
		pt.acked.Store(nextOffset)
	}
}

// saveResult is what a save attempt learned: the snapshot saved (zero unless it succeeded) and the
// output end offsets read before the copy (nil unless they could be read), below which every
// identity of the output is in the filter.
type saveResult struct {
	snap SnapshotRef
	out  map[int32]int64
}

// save snapshots f as unit. parts are the partitions whose records f holds; the snapshot is only
// sealed once each has acknowledged everything it had processed when the copy ended.
func (s *Set) save(ctx context.Context, unit string, f *window.Filter, partition int32, parts map[int32]*part) (saveResult, error) {
	var res saveResult
	if s.cfg.Persister == nil {
		return res, nil
	}
	if s.tainted.Load() {
		return res, nil
	}
	start := time.Now()
	info := SnapshotInfo{Scope: s.cfg.Scope, Topic: s.cfg.Topic, Partition: partition, InputOffsets: map[int32]int64{}}
	if s.cfg.Output != nil {
		out, err := s.cfg.Output.End(ctx, partition)
		if err != nil {
			s.failed()
			return res, fmt.Errorf("dedup: saving %s: reading output end offsets: %w", unit, err)
		}
		info.OutputOffsets, res.out = out, out
	}
	for p, pt := range parts {
		if a := pt.acked.Load(); a >= 0 {
			info.InputOffsets[p] = a
		}
	}
	seal := func(ctx context.Context) error { return s.seal(ctx, parts) }
	snap, err := s.cfg.Persister.Save(ctx, unit, f, info, seal)
	if err != nil {
		s.failed()
		return res, fmt.Errorf("dedup: saving %s: %w", unit, err)
	}
	res.snap = snap
	if s.cfg.Observer != nil {
		s.cfg.Observer.CheckpointSaved(time.Since(start), snap.Size)
	}
	return res, nil
}

func (s *Set) failed() {
	if s.cfg.Observer != nil {
		s.cfg.Observer.CheckpointFailed()
	}
}

// errSealTimeout is returned when records that a snapshot may contain were not acknowledged in
// time; the snapshot is dropped.
var errSealTimeout = errors.New("dedup: records in the snapshot were not acknowledged by the output topic in time")

// seal waits until every partition acknowledged what it had processed when seal was called.
// Under ScopeGlobal every partition assigned by then feeds the shared filter, so it waits for those
// too: a partition assigned while the copy ran may have records in it.
func (s *Set) seal(ctx context.Context, parts map[int32]*part) error {
	targets := make(map[*part]int64, len(parts))
	add := func(m map[int32]*part) {
		for _, pt := range m {
			targets[pt] = pt.processed.Load()
		}
	}
	add(parts)
	if s.global != nil {
		add(*s.parts.Load())
	}
	deadline := time.Now().Add(s.cfg.SealTimeout)
	wait := 100 * time.Microsecond
	for {
		if s.tainted.Load() {
			return errors.New("dedup: the filter holds identities of records that were not produced")
		}
		pending := false
		for pt, target := range targets {
			if pt.acked.Load() < target {
				pending = true
				break
			}
		}
		if !pending {
			return nil
		}
		if time.Now().After(deadline) {
			return errSealTimeout
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Millisecond)
	}
}

// checkpointLoop snapshots every filter each CheckpointInterval until Close.
func (s *Set) checkpointLoop() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.CheckpointInterval)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stop
		cancel()
	}()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.checkpointAll(ctx)
	}
}

// Checkpoint snapshots every filter now. It returns the errors joined; a failed unit does not stop
// the others.
func (s *Set) Checkpoint(ctx context.Context) error {
	return s.checkpointAll(ctx)
}

func (s *Set) checkpointAll(ctx context.Context) error {
	cur := *s.parts.Load()
	if s.global != nil {
		_, err := s.save(ctx, globalUnit, s.global, -1, cur)
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Error("checkpoint failed", "unit", globalUnit, "error", err.Error())
		}
		return err
	}
	var errs []error
	for _, p := range slices.Sorted(maps.Keys(cur)) {
		pt := cur[p]
		if pt.gone.Load() {
			continue
		}
		unit := s.Unit(p)
		res, err := s.save(ctx, unit, pt.f, p, map[int32]*part{p: pt})
		pt.saved(res, err)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Error("checkpoint failed", "unit", unit, "error", err.Error())
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Unassigned returns how many records Seen passed because their partition had no state. It should
// stay zero; anything else points at a worker bug.
func (s *Set) Unassigned() uint64 { return s.unassigned.Load() }

// Filter returns the filter serving a partition (the global filter under ScopeGlobal), or nil.
func (s *Set) Filter(partition int32) *window.Filter {
	if s.global != nil {
		return s.global
	}
	if pt := (*s.parts.Load())[partition]; pt != nil {
		return pt.f
	}
	return nil
}

// Partitions returns the assigned partitions in ascending order.
func (s *Set) Partitions() []int32 {
	return slices.Sorted(maps.Keys(*s.parts.Load()))
}

// Stats returns the state of every filter, for metrics.
func (s *Set) Stats() []FilterStats {
	if s.global != nil {
		return []FilterStats{filterStats(globalUnit, s.global, s.globalEv)}
	}
	cur := *s.parts.Load()
	out := make([]FilterStats, 0, len(cur))
	for _, p := range slices.Sorted(maps.Keys(cur)) {
		out = append(out, filterStats(strconv.Itoa(int(p)), cur[p].f, cur[p].ev))
	}
	return out
}

// Close stops the background checkpoints, then saves and drops every filter that is left (the
// worker should have revoked its partitions first) and drops the parked ones. Later Assign calls
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
	var errs []error
	if s.global != nil {
		// Seal against the partitions still assigned: if the worker did not drain them, the
		// snapshot waits for their acknowledgements and is dropped when they never come.
		cur := *s.parts.Load()
		s.global.Close()
		_, err := s.save(ctx, globalUnit, s.global, -1, cur)
		errs = append(errs, err)
		for _, p := range s.Partitions() {
			s.remove(p)
		}
	}
	for _, p := range s.Partitions() {
		errs = append(errs, s.Revoke(ctx, p))
	}
	return errors.Join(errs...)
}

var errClosed = errors.New("dedup: set is closed")

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

// defaultClock fills in and checks the event-time settings.
func (cfg *Config) defaultClock() error {
	if cfg.Clock == "" {
		cfg.Clock = ClockProcessing
	}
	if cfg.LateRecords == "" {
		cfg.LateRecords = LatePass
	}
	if cfg.MaxAhead <= 0 {
		cfg.MaxAhead = cfg.Window.Interval
	}
	if _, err := ParseClock(string(cfg.Clock)); err != nil {
		return err
	}
	_, err := ParseLatePolicy(string(cfg.LateRecords))
	return err
}
