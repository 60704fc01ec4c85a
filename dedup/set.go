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

	"github.com/kdedup/kdedup/window"
)

// Scope says which records share a filter.
type Scope string

// The scopes a Set offers.
const (
	// ScopePartition keeps one filter per input partition. A partition's state can move to another
	// replica on rebalance, and duplicates are only caught within a partition. It is the default.
	ScopePartition Scope = "partition"
	// ScopeGlobal keeps one filter for all partitions, so that duplicates that arrive on different
	// partitions are caught too. It suits single-replica deployments: replicas do not share it.
	ScopeGlobal Scope = "global"
)

// ParseScope returns the Scope named s ("partition" or "global").
func ParseScope(s string) (Scope, error) {
	switch Scope(s) {
	case ScopePartition, ScopeGlobal:
		return Scope(s), nil
	}
	return "", fmt.Errorf("dedup: unknown scope %q (want partition or global)", s)
}

// Restored describes where a restored filter came from.
type Restored struct {
	// Outcome is "warm" (newest snapshot), "fallback" (an older one, the newer were unusable) or
	// "cold" (none usable: the filter starts empty).
	Outcome string
	// OutputOffsets are the output partitions' end offsets when the snapshot was taken: every
	// output record before them is in the snapshot, the ones after must be re-warmed.
	OutputOffsets map[int32]int64
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
	// filter with Outcome "cold" when no snapshot is usable. An error means the state could not be
	// read at all (for example an I/O error) and the caller should retry.
	Restore(ctx context.Context, unit string, cfg window.Config) (*window.Filter, Restored, error)
	// Save writes f's state for unit. It calls seal after the data is written and before the
	// snapshot becomes visible; if seal fails, nothing is saved. It returns the snapshot's size.
	Save(ctx context.Context, unit string, f *window.Filter, info SnapshotInfo, seal func(context.Context) error) (int64, error)
}

// CheckpointObserver receives checkpoint measurements; metrics.Metrics implements it. Methods must
// be safe for concurrent use.
type CheckpointObserver interface {
	CheckpointSaved(duration time.Duration, sizeBytes int64)
	CheckpointFailed()
	Restored(outcome string, duration time.Duration)
	Rewarmed(n int)
}

// Config configures a Set.
type Config struct {
	// Scope selects per-partition or global filters. Default: ScopePartition.
	Scope Scope
	// Window configures each filter. Under ScopePartition, Capacity is per partition and
	// SingleWriter is set (one goroutine writes each partition's filter, see Set.Seen); under
	// ScopeGlobal SingleWriter is cleared.
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
	// OutputEnd returns the end offsets of the output partitions that can hold records of an input
	// partition (-1: all). Snapshots record them; nil disables re-warming.
	OutputEnd func(ctx context.Context, inputPartition int32) (map[int32]int64, error)
	// Rewarm reads the output topic from the given offsets to its end and calls add with each
	// record's identity, returning how many it read. Nil disables re-warming.
	Rewarm func(ctx context.Context, from map[int32]int64, add func(id []byte)) (int, error)
	// Observer receives checkpoint measurements. Default: none.
	Observer CheckpointObserver
	// Logger receives lifecycle messages (never one per record). Default: slog.Default().
	Logger *slog.Logger
}

// FilterStats is a filter's state with the name metrics label it with: the partition number, or
// "global".
type FilterStats struct {
	Name string
	window.Stats
}

// part is an assigned partition: its filter (the shared one under ScopeGlobal) and how far the
// worker got with it.
type part struct {
	f *window.Filter
	// processed is the offset after the last batch handed to Seen, acked the offset after the last
	// batch whose output was acknowledged; -1 until the first batch.
	processed, acked atomic.Int64
	gone             atomic.Bool // revoked or discarded
}

func newPart(f *window.Filter) *part {
	p := &part{f: f}
	p.processed.Store(-1)
	p.acked.Store(-1)
	return p
}

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

	mu      sync.Mutex // serialises Assign, Revoke, Discard and Close
	closed  bool
	tainted atomic.Bool // ScopeGlobal: the filter holds identities that never reached the output

	stop chan struct{}
	done chan struct{}

	unassigned atomic.Uint64
}

// NewSet validates cfg and returns a Set. Under ScopeGlobal it restores (or builds) the single
// filter now, re-warming it from the output topic; under ScopePartition filters are built as
// partitions are assigned. It returns an error wrapping window.ErrConfig or window.ErrMemory for a
// bad window configuration, a "dedup: ..." error for an unknown scope, and the Persister's or
// Rewarm's error if restoring the global filter fails.
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
	if _, err := window.Size(cfg.Window); err != nil {
		return nil, fmt.Errorf("dedup: %w", err)
	}
	// A partition's records reach Seen from one goroutine, after Assign's re-warm (which runs
	// in the caller of Assign): its filter can skip the atomic read-modify-writes.
	cfg.Window.SingleWriter = cfg.Scope == ScopePartition
	s := &Set{cfg: cfg}
	empty := map[int32]*part{}
	s.parts.Store(&empty)
	if cfg.Scope == ScopeGlobal {
		f, err := s.open(ctx, "global", -1)
		if err != nil {
			return nil, err
		}
		s.global = f
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
		return "global"
	}
	return s.cfg.Topic + ".p" + strconv.Itoa(int(partition))
}

// open restores the unit's filter (or builds a cold one), re-warms it from the output topic, and
// starts its rotation. A cold filter is snapshotted at once, so that a crash before the first
// periodic checkpoint can still re-warm from the output offsets of this moment.
func (s *Set) open(ctx context.Context, unit string, partition int32) (*window.Filter, error) {
	if s.cfg.Persister == nil {
		f, err := window.New(s.cfg.Window)
		if err != nil {
			return nil, fmt.Errorf("dedup: %w", err)
		}
		f.Start()
		return f, nil
	}
	start := time.Now()
	f, r, err := s.cfg.Persister.Restore(ctx, unit, s.cfg.Window)
	if err != nil {
		return nil, fmt.Errorf("dedup: restoring %s: %w", unit, err)
	}
	if f != nil && s.cfg.Rewarm != nil && r.OutputOffsets != nil {
		n, err := s.cfg.Rewarm(ctx, r.OutputOffsets, func(id []byte) { f.TestAndAdd(id) })
		if err != nil {
			return nil, fmt.Errorf("dedup: re-warming %s from the output topic: %w", unit, err)
		}
		if s.cfg.Observer != nil {
			s.cfg.Observer.Rewarmed(n)
		}
		s.cfg.Logger.Info("state restored", "unit", unit, "outcome", r.Outcome, "rewarmed_records", n,
			"duration", time.Since(start).String())
	}
	cold := f == nil
	if cold {
		if f, err = window.New(s.cfg.Window); err != nil {
			return nil, fmt.Errorf("dedup: %w", err)
		}
		r.Outcome = "cold"
	}
	if s.cfg.Observer != nil {
		s.cfg.Observer.Restored(r.Outcome, time.Since(start))
	}
	if cold {
		// The baseline: an empty filter that covers the output up to now. Failing to write it
		// only weakens crash recovery (counted and logged), so consumption is not held up.
		if err := s.save(ctx, unit, f, partition, map[int32]*part{}); err != nil {
			s.cfg.Logger.Error("baseline checkpoint failed; until a checkpoint succeeds, a crash may let duplicates through",
				"unit", unit, "error", err.Error())
		}
	}
	f.Start()
	return f, nil
}

// Assign prepares the state of a newly assigned partition: it restores the partition's snapshot
// through the Persister and re-warms it from the output topic, or starts a cold filter and
// snapshots it at once. Assigning
// a partition that is already assigned does nothing. Under ScopeGlobal it only starts tracking the
// partition's progress. It returns the Persister's or Rewarm's error, wrapped, if the state could
// not be prepared; the caller should retry.
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
	f := s.global
	if f == nil {
		var err error
		if f, err = s.open(ctx, s.Unit(partition), partition); err != nil {
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
	next[partition] = newPart(f)
	s.parts.Store(&next)
	return nil
}

// Revoke saves the partition's state through the Persister and drops it. The caller must have
// produced every record it passed to Seen for the partition. Revoking a partition that is not
// assigned does nothing. Under ScopeGlobal it only stops tracking the partition: the global
// filter is saved periodically and on Close. The state is dropped even if saving fails; the
// error is returned.
func (s *Set) Revoke(ctx context.Context, partition int32) error {
	pt := s.remove(partition)
	if pt == nil || s.global != nil {
		return nil
	}
	pt.f.Close()
	return s.save(ctx, s.Unit(partition), pt.f, partition, map[int32]*part{partition: pt})
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
// Under ScopePartition the calls for one partition must not overlap: one goroutine at a time
// handles a partition (as the worker does, and Assign's re-warm runs in the caller of Assign
// before any Seen), because its filter is single-writer (window.Config.SingleWriter). Calls for
// different partitions may run concurrently. Under ScopeGlobal any number of goroutines may call
// Seen, and if several offer the same new id at once, exactly one gets false.
func (s *Set) Seen(partition int32, id []byte) bool {
	pt := (*s.parts.Load())[partition]
	if pt == nil {
		s.unassigned.Add(1)
		return false
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

// save snapshots f as unit. parts are the partitions whose records f holds; the snapshot is only
// sealed once each has acknowledged everything it had processed when the copy ended.
func (s *Set) save(ctx context.Context, unit string, f *window.Filter, partition int32, parts map[int32]*part) error {
	if s.cfg.Persister == nil {
		return nil
	}
	if s.tainted.Load() {
		return nil
	}
	start := time.Now()
	info := SnapshotInfo{Scope: s.cfg.Scope, Topic: s.cfg.Topic, Partition: partition, InputOffsets: map[int32]int64{}}
	if s.cfg.OutputEnd != nil {
		out, err := s.cfg.OutputEnd(ctx, partition)
		if err != nil {
			s.failed()
			return fmt.Errorf("dedup: saving %s: reading output end offsets: %w", unit, err)
		}
		info.OutputOffsets = out
	}
	for p, pt := range parts {
		if a := pt.acked.Load(); a >= 0 {
			info.InputOffsets[p] = a
		}
	}
	seal := func(ctx context.Context) error { return s.seal(ctx, parts) }
	n, err := s.cfg.Persister.Save(ctx, unit, f, info, seal)
	if err != nil {
		s.failed()
		return fmt.Errorf("dedup: saving %s: %w", unit, err)
	}
	if s.cfg.Observer != nil {
		s.cfg.Observer.CheckpointSaved(time.Since(start), n)
	}
	return nil
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
		err := s.save(ctx, "global", s.global, -1, cur)
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Error("checkpoint failed", "unit", "global", "error", err.Error())
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
		if err := s.save(ctx, unit, pt.f, p, map[int32]*part{p: pt}); err != nil {
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
		return []FilterStats{{Name: "global", Stats: s.global.Stats()}}
	}
	cur := *s.parts.Load()
	out := make([]FilterStats, 0, len(cur))
	for _, p := range slices.Sorted(maps.Keys(cur)) {
		out = append(out, FilterStats{Name: strconv.Itoa(int(p)), Stats: cur[p].f.Stats()})
	}
	return out
}

// Close stops the background checkpoints, then saves and drops every filter that is left (the
// worker should have revoked its partitions first). Later Assign calls fail; Seen passes records
// of dropped partitions. It returns the saving errors joined.
func (s *Set) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
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
		errs = append(errs, s.save(ctx, "global", s.global, -1, cur))
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
