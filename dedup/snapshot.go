package dedup

// The snapshot protocol: what a Set saves, when a snapshot may become visible (seal), and the
// interfaces it saves through (Persister) and re-warms from (OutputLog).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/window"
)

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
	// Epoch is the highest owner epoch among the unit's snapshots, restored or not (0 without
	// any): the Set's owner epoch for the unit is above it (see Set.ownerEpoch).
	Epoch uint64
	// Created is when the snapshot restored was taken, by its saver's clock (zero: unknown).
	Created time.Time
	// SavedAt is when the snapshot restored was written, by the store's clock (zero for
	// OutcomeCold, or when the store does not say).
	SavedAt time.Time
}

// SnapshotRef identifies one saved snapshot of a unit: the name its store gave it (unique within
// the store, checkpoint.Info.Name), its place in the unit's order (checkpoint.Info.Seq: a later
// save has a larger Seq) and its size. The zero SnapshotRef stands for no snapshot.
type SnapshotRef struct {
	Name string
	Seq  uint64
	Size int64
	// Epoch is the owner epoch of the replica that saved the snapshot (see SnapshotInfo).
	Epoch uint64
}

// SaveStats says what a save sent to the store and what the checkpoint it saved holds.
type SaveStats struct {
	// Store is the kind of store ("file", "s3"): the label of kdedup_checkpoint_written_bytes_total.
	Store string
	// Written is the number of bytes sent to the store, by a failed save too.
	Written int64
	// Size is the size of the checkpoint saved, what a restore reads: the manifest and every
	// generation object it references (0 if the save failed).
	Size int64
	// Created and Reused count the generation objects the save wrote and those it referenced
	// again.
	Created, Reused int
	// Skipped is set when the Set did not save because nothing changed since the last checkpoint
	// of the filter (see Set.save): the last checkpoint is current.
	Skipped bool
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
	// OwnerEpoch is the saving replica's owner epoch for the unit: above the epoch of every
	// snapshot of the unit listed when the replica got the unit (see Set.ownerEpoch), so that a
	// store can refuse or ignore the saves of a replica that lost the unit (checkpoint.ErrFenced).
	OwnerEpoch uint64
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
	// an error when it could not be saved durably, and in both cases what it sent to the store.
	Save(ctx context.Context, unit string, f *window.Filter, info SnapshotInfo, seal func(context.Context) error) (SnapshotRef, SaveStats, error)
	// Newest returns the newest snapshot of unit (ignoring stale ones, see
	// checkpoint.Store.Snapshots), without reading its data, or the zero SnapshotRef when there is
	// none; its Epoch is the unit's highest owner epoch. A Set calls it when a partition it kept in memory comes back, to learn whether
	// anyone saved a newer state of it meanwhile; it should be cheap (one listing).
	Newest(ctx context.Context, unit string) (SnapshotRef, error)
}

// CheckpointObserver receives checkpoint measurements; metrics.Metrics implements it. A Set calls
// it from Assign, Revoke, Close and its checkpoint loop at once, so methods must be safe for
// concurrent use; they should return quickly, as they run on those paths.
type CheckpointObserver interface {
	// CheckpointSaved reports a snapshot of the unit of partition (-1: the global unit) that became
	// visible, or that is current because nothing changed since the last one: how long saving it
	// took, from reading the output end offsets to the store's commit (including the wait for the
	// seal), and its size in bytes.
	CheckpointSaved(partition int32, duration time.Duration, sizeBytes int64)
	// CheckpointFailed reports a snapshot of the unit of partition (-1: the global unit) that was
	// not saved, for reason (one of CheckpointFailureReasons). The previous snapshots stay usable.
	CheckpointFailed(partition int32, reason string)
	// CheckpointWritten reports bytes sent to the checkpoint store, of kind store ("file",
	// "s3"), by one save, whether it succeeded or not.
	CheckpointWritten(store string, bytes int64)
	// Restored reports how the state of the unit of partition (-1: the global unit) was prepared
	// (the snapshot restored, the filter kept in memory, or none: a cold start, rebuilt or empty),
	// how long restoring, rebuilding and re-warming took, and when the snapshot restored was
	// written (zero when none was, or the filter was kept). Only a Set with a Persister or a
	// rebuild calls it: once per Assign under ScopePartition, once in NewSet under ScopeGlobal.
	Restored(partition int32, outcome checkpoint.Outcome, duration time.Duration, savedAt time.Time)
	// Rewarmed reports how many output records were read back into a restored filter.
	Rewarmed(n int)
	// ClockSkew reports, for every snapshot restored, how far its creation time lies ahead of the
	// local clock (0 or less: it does not; see Set.checkSkew).
	ClockSkew(d time.Duration)
	// RebuildStarted reports that a unit started rebuilding from the output topic.
	RebuildStarted()
	// RebuildRecords reports n more output records added to a filter being rebuilt.
	RebuildRecords(n int)
	// RebuildDone ends what RebuildStarted began: how long the rebuild took, how many output
	// records of the window it skipped because of Config.RebuildMaxRecords, and how it ended: err
	// is nil for a complete rebuild, wraps the context's error when the assignment was called off
	// (the generation ended), and is another error when it failed (the caller of Assign retries).
	RebuildDone(d time.Duration, skipped int64, err error)
	// RebuildByRecordTime reports a rebuild under ClockProcessing that selected the window's
	// output records by their timestamps because they carry no processing time
	// (Config.ProcessedTime false): records processed within the window but stamped before it
	// were not read, and their duplicates can pass.
	RebuildByRecordTime()
}

// OutputLog is the output topic as the snapshot protocol sees it: where it ends when a snapshot is
// taken, what was produced after that (to re-warm a restored filter), and, read by time, what the
// window holds (to rebuild the filter of a unit that has no usable snapshot, see Set.rebuild).
// consumer.OutputReader implements it; internal/app joins the two, so that dedup imports no Kafka
// client. Implementations must be safe for concurrent use: a Set calls them from Assign, Revoke,
// Close and its checkpoint loop at once.
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
	// OffsetsAt returns, for each output partition that can hold records of inputPartition (those
	// End returns offsets of), the offset of its first record whose timestamp is at or after t, or
	// its end offset when it has none. On failure it returns an error and no offsets.
	OffsetsAt(ctx context.Context, inputPartition int32, t time.Time) (map[int32]int64, error)
	// Read is Rewarm bounded above: it reads each output partition q of from, from offset from[q]
	// up to (not including) to[q] or the partition's end, whichever comes first, and calls add as
	// Rewarm does, with the record's identity and timestamp. It returns the number of records
	// passed to add, and an error as Rewarm does.
	Read(ctx context.Context, from, to map[int32]int64, add func(id []byte, ts time.Time)) (int, error)
}

// saveResult is what a save attempt learned: the snapshot saved (zero unless it succeeded), the
// output end offsets read before the copy (nil unless they could be read), below which every
// identity of the output is in the filter, and what the save wrote.
type saveResult struct {
	snap  SnapshotRef
	out   map[int32]int64
	stats SaveStats
}

// save snapshots f as unit. parts are the partitions whose records f holds; the snapshot is only
// sealed once each has acknowledged everything it had processed when the copy ended. mark, nil
// for a filter no part holds yet, remembers the filter's last checkpoint: when no record reached
// the filter since (see saveMark), save writes nothing and returns that checkpoint. Saves wait for
// one of Config.SaveConcurrency slots; once a save has its slot, it re-checks that it may still
// save (see mayProceed: live, nil for always, and the generation's ownership), because the
// partition may have been handed over while it waited.
func (s *Set) save(ctx context.Context, unit string, f *window.Filter, partition int32, parts map[int32]*part, mark *atomic.Pointer[saveMark], live func() bool, epoch uint64) (saveResult, error) {
	var res saveResult
	if s.cfg.Persister == nil || s.scope.tainted() {
		return res, nil
	}
	start := time.Now()
	progress, quiet := progressOf(parts)
	if m := markOf(mark); m != nil && s.tracked.Load() && maps.Equal(m.progress, progress) {
		res.snap, res.stats = m.snap, SaveStats{Store: m.stats.Store, Size: m.stats.Size, Skipped: true}
		s.saved(partition, time.Since(start), res.stats)
		return res, nil
	}
	release, err := s.acquireSave(ctx)
	if err != nil {
		s.failed(partition, FailureCancelled)
		return res, fmt.Errorf("dedup: saving %s: waiting for a save slot: %w", unit, err)
	}
	defer release()
	if err := s.mayProceed(ctx, partition, unit, live); err != nil {
		return res, err
	}
	info := SnapshotInfo{Scope: s.cfg.Scope, Topic: s.cfg.Topic, Partition: partition, InputOffsets: map[int32]int64{},
		OwnerEpoch: epoch}
	if s.cfg.Output != nil {
		out, err := s.cfg.Output.End(ctx, partition)
		if err != nil {
			s.failed(partition, FailureOutputOffsets)
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
	snap, stats, err := s.cfg.Persister.Save(ctx, unit, f, info, seal)
	if s.cfg.Observer != nil && stats.Written > 0 {
		s.cfg.Observer.CheckpointWritten(stats.Store, stats.Written)
	}
	res.stats = stats
	if err != nil {
		s.failed(partition, failureReason(err))
		return res, fmt.Errorf("dedup: saving %s: %w", unit, err)
	}
	res.snap = snap
	s.saved(partition, time.Since(start), stats)
	if mark != nil && quiet {
		mark.Store(&saveMark{progress: progress, snap: snap, stats: stats})
	}
	return res, nil
}

// errSaveCancelled is returned by a periodic save whose partition was revoked or discarded while
// it waited for a save slot: the revoke saves (or the discard drops) the state itself.
var errSaveCancelled = errors.New("dedup: save cancelled: the partition was released while the save waited")

// errNotOwned is wrapped by the error of a save refused because the worker could not confirm that
// it still owns the partition (its consumer group generation was lost, or the coordinator did not
// confirm it within the session): the partition may have moved, and a save now could replace
// what its new owner saved. Around a rebalance that is expected, not a failure of the store:
// nothing is lost, the next owner restores the last snapshot and re-warms from the output topic.
var errNotOwned = errors.New("dedup: not saved: the ownership of the partition is not confirmed")

// logSaveError logs err, the error of a save of unit that the caller does not return to anyone
// who would log it. What a rebalance or a release brings about is not a failure of the
// checkpoint: a save refused for want of ownership (errNotOwned) is a warning, since the
// partition may have moved; a snapshot dropped because a partition it covers was discarded while
// it sealed (errDiscarded, errTainted) is information, as the worker logs the discard itself
// and the next owner re-consumes those records. Any other failure is an Error, logged as msg.
// Each is counted all the same (CheckpointObserver.CheckpointFailed).
func (s *Set) logSaveError(msg, unit string, err error) {
	switch {
	case errors.Is(err, errNotOwned):
		s.cfg.Logger.Warn("checkpoint not saved: the partition may have moved to another replica", "unit", unit,
			"error", err.Error())
	case errors.Is(err, errDiscarded), errors.Is(err, errTainted):
		s.cfg.Logger.Info("checkpoint dropped: a partition it covers was released with records the output never got",
			"unit", unit, "error", err.Error())
	default:
		s.cfg.Logger.Error(msg, "unit", unit, "error", err.Error())
	}
}

// mayProceed returns nil if a save of unit that got its slot may go on: live (nil for always)
// still holds and the worker still owns its consumer group generation (see Set.Generation).
// Otherwise nothing may be saved: errSaveCancelled, or the ownership check's error wrapped with
// errNotOwned, counted as a failed checkpoint. The global filter is not checked: global scope runs on one replica, and its
// final save at Close comes after the worker left the group.
func (s *Set) mayProceed(ctx context.Context, partition int32, unit string, live func() bool) error {
	if live != nil && !live() {
		return errSaveCancelled
	}
	if owns := s.owns.Load(); owns != nil && s.scope.ownershipChecked() {
		if err := (*owns)(ctx); err != nil {
			s.failed(partition, FailureOwnership)
			return fmt.Errorf("dedup: saving %s: %w: %w", unit, errNotOwned, err)
		}
	}
	return nil
}

// saved reports a checkpoint of partition's unit that is current: saved now, or skipped because
// the last one is.
func (s *Set) saved(partition int32, d time.Duration, stats SaveStats) {
	if s.cfg.Observer != nil {
		s.cfg.Observer.CheckpointSaved(partition, d, stats.Size)
	}
}

// failed reports a failed save of partition's unit, for reason.
func (s *Set) failed(partition int32, reason string) {
	if s.cfg.Observer != nil {
		s.cfg.Observer.CheckpointFailed(partition, reason)
	}
}

// Reasons of CheckpointObserver.CheckpointFailed.
const (
	// FailureCancelled: the save was called off (shutdown, or the generation ended) before it
	// could start.
	FailureCancelled = "cancelled"
	// FailureOutputOffsets: the output topic's end offsets could not be read.
	FailureOutputOffsets = "output_offsets"
	// FailureSeal: records the snapshot holds were not acknowledged by the output topic in time
	// (or were given up): the snapshot was dropped.
	FailureSeal = "seal"
	// FailureStore: the Persister (the checkpoint store) failed.
	FailureStore = "store"
	// FailureOwnership: the worker could not confirm that it still owns the partition (its
	// consumer group generation was lost, or the coordinator could not be asked), so nothing
	// was saved.
	FailureOwnership = "ownership"
)

// CheckpointFailureReasons returns every reason CheckpointObserver.CheckpointFailed is given.
func CheckpointFailureReasons() []string {
	return []string{FailureCancelled, FailureOutputOffsets, FailureSeal, FailureStore, FailureOwnership}
}

// failureReason classifies the error of a Persister's Save.
func failureReason(err error) string {
	switch {
	case errors.Is(err, errSealTimeout), errors.Is(err, errTainted), errors.Is(err, errDiscarded):
		return FailureSeal
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return FailureCancelled
	}
	return FailureStore
}

// errSealTimeout is returned when records that a snapshot may contain were not acknowledged in
// time; the snapshot is dropped.
var errSealTimeout = errors.New("dedup: records in the snapshot were not acknowledged by the output topic in time")

// errTainted is returned by seal when the filter holds identities of records that were not
// produced; the snapshot is dropped.
var errTainted = errors.New("dedup: the filter holds identities of records that were not produced")

// errDiscarded is returned by seal when a partition it waits for was discarded: what it processed
// and did not acknowledge will never be, and the snapshot is dropped.
var errDiscarded = errors.New("dedup: a partition of the snapshot was discarded with records that were not produced")

// seal waits until every partition acknowledged what it had processed when seal was called.
// Under ScopeGlobal every partition assigned by then feeds the shared filter, so it waits for those
// too: a partition assigned while the copy ran may have records in it. A partition discarded while
// it waits ends the wait at once (errDiscarded): its acknowledgements will never come, and a wait
// until the seal timeout would hold a save slot that the next generation's saves need.
func (s *Set) seal(ctx context.Context, parts map[int32]*part) error {
	targets := make(map[*part]int64, len(parts))
	add := func(m map[int32]*part) {
		for _, pt := range m {
			targets[pt] = pt.processed.Load()
		}
	}
	for _, m := range s.scope.sealed(parts) {
		add(m)
	}
	var err error
	ok := func() bool {
		if s.scope.tainted() {
			err = errTainted
			return true
		}
		for pt, target := range targets {
			if pt.acked.Load() >= target {
				continue
			}
			if pt.discarded.Load() {
				err = errDiscarded
				return true
			}
			return false
		}
		return true
	}
	if werr := s.awaitUntil(ctx, ok); werr != nil {
		return werr
	}
	return err
}

// awaitUntil polls ok, backing off from 100µs to 10ms, until it holds (nil), ctx ends (its error)
// or the seal timeout passes (errSealTimeout).
func (s *Set) awaitUntil(ctx context.Context, ok func() bool) error {
	deadline := time.Now().Add(s.cfg.SealTimeout)
	wait := 100 * time.Microsecond
	for !ok() {
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
	return nil
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

// checkpointAll snapshots every filter of the Set's scope now.
func (s *Set) checkpointAll(ctx context.Context) error { return s.scope.checkpoint(ctx) }

// checkpointParts snapshots the filter of every partition assigned, in parallel (as many at once
// as save slots allow), and returns the errors joined.
func (s *Set) checkpointParts(ctx context.Context) error {
	cur := s.parts.Load().byID
	errs := make([]error, 0, len(cur))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range slices.Sorted(maps.Keys(cur)) {
		pt := cur[p]
		if pt.gone.Load() {
			continue
		}
		wg.Go(func() { // as many at once as save slots allow
			unit := s.Unit(p)
			res, err := s.save(ctx, unit, pt.f, p, map[int32]*part{p: pt}, &pt.mark, func() bool { return !pt.gone.Load() },
				pt.lineage().epoch)
			pt.saved(res, err)
			if errors.Is(err, errSaveCancelled) {
				return
			}
			if err != nil {
				if ctx.Err() == nil {
					s.logSaveError("checkpoint failed", unit, err)
				}
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
