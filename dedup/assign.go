package dedup

// Assignment: preparing the state of a partition when it is assigned (kept, restored, rebuilt or
// cold, then re-warmed) and giving it up when it is revoked or discarded.

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/window"
)

// Unit returns the snapshot unit name of a partition's state: "<topic>.p<partition>", or "global"
// under ScopeGlobal.
func (s *Set) Unit(partition int32) string { return s.scope.unit(partition) }

// open prepares the unit's filter from the store: it restores the newest usable snapshot and
// re-warms it from the output topic; without one it rebuilds the filter from the output topic
// (Config.RebuildMaxRecords) or starts it empty, and snapshots it at once, so that a crash before
// the first periodic checkpoint can still re-warm from the output offsets of this moment.
// partition is the one the unit is saved as and whose output partitions it owns (see
// OutputLog.End). It returns what the filter covers and the highest owner epoch of the unit's
// snapshots (see ownerEpoch); the caller starts the filter's rotation (startRotation).
func (s *Set) open(ctx context.Context, unit string, partition int32, ev *eventClock) (*window.Filter, lineage, uint64, error) {
	start := time.Now()
	f, r, err := s.restore(ctx, unit, ev)
	if err != nil {
		return nil, lineage{}, 0, err
	}
	lin := lineage{snap: r.Snapshot, out: r.OutputOffsets, epoch: s.ownerEpoch(r.Epoch)}
	cold := f == nil
	if cold {
		r.Outcome = checkpoint.OutcomeCold
		if f, lin.out, err = s.coldFilter(ctx, unit, partition, ev); err != nil {
			return nil, lineage{}, 0, err
		}
	}
	if s.cfg.Observer != nil && (s.cfg.Persister != nil || s.rebuilds()) {
		s.cfg.Observer.Restored(partition, r.Outcome, time.Since(start), r.SavedAt)
	}
	if cold && s.cfg.Persister != nil {
		// The baseline: a filter that covers the output up to now. Failing to write it only
		// weakens crash recovery (counted and logged), so consumption is not held up.
		res, err := s.save(ctx, unit, f, partition, map[int32]*part{}, nil, nil, lin.epoch)
		if err != nil && ctx.Err() == nil {
			s.logSaveError("baseline checkpoint failed; until a checkpoint succeeds, a crash may let duplicates through",
				unit, err)
		}
		lin = lin.after(res, err)
	}
	return f, lin, r.Epoch, nil
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
	if f != nil {
		s.checkSkew(unit, r.Created)
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
	if s.rebuilds() {
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
// starts tracking the partition's progress, after rebuilding the shared filter if a Discard left
// it holding identities of records that never reached the output (see sharedScope.rebuild). It returns
// the Persister's or Output's error, wrapped, if the state could not be prepared; the caller
// should retry.
func (s *Set) Assign(ctx context.Context, partition int32) error {
	s.mu.Lock()
	closed := s.closed
	assigned := s.part(partition) != nil
	s.mu.Unlock()
	switch {
	case closed:
		return errClosed
	case assigned:
		return nil
	}
	// Restoring and re-warming can take a while; other partitions restore meanwhile.
	f, ev, lin, err := s.scope.prepare(ctx, partition)
	if err != nil {
		return err
	}
	return s.add(partition, f, ev, lin)
}

// add makes the prepared filter f serve partition, or, under ScopeGlobal (f nil), the shared one
// (see scope.serving).
// A filter that is not needed any more (the Set was closed, or the partition assigned meanwhile)
// is closed.
func (s *Set) add(partition int32, f *window.Filter, ev *eventClock, lin lineage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.parts.Load().byID
	_, assigned := cur[partition]
	if s.closed || assigned {
		if f != nil {
			f.Close()
			f.Release()
		}
		if s.closed {
			return errClosed
		}
		return nil
	}
	f, ev = s.scope.serving(f, ev)
	next := maps.Clone(cur)
	next[partition] = newPart(f, ev, lin)
	s.parts.Store(newPartMap(next))
	return nil
}

// Revoke saves the partition's state through the Persister, stops its filter and parks it, in
// case the partition comes back to this Set (see "Retained partitions" in retain.go). The caller
// must have produced every record it passed to Seen for the partition. Revoking a partition that
// is not assigned does nothing. Under ScopeGlobal it only stops tracking the partition: the global
// filter is saved periodically and on Close. The state is parked even if saving fails; the error
// is returned.
func (s *Set) Revoke(ctx context.Context, partition int32) error {
	pt := s.remove(partition)
	if pt == nil {
		return nil
	}
	return s.scope.revoke(ctx, partition, pt)
}

// Discard drops the partition's state without saving it. The worker calls it instead of Revoke
// when records it passed to Seen never reached the output topic: a snapshot would make the next
// owner drop them as duplicates. Under ScopeGlobal the shared filter holds those identities too:
// it is tainted, no snapshot is taken of it, and the next Assign rebuilds it from the last good
// snapshot and the output topic before the partition is served again (see sharedScope.rebuild). A save
// of the partition sealing meanwhile gives up at once (errDiscarded) and frees its save slot.
func (s *Set) Discard(_ context.Context, partition int32) error {
	pt := s.remove(partition)
	if pt == nil {
		return nil
	}
	pt.discarded.Store(true)
	s.scope.discard(partition, pt)
	return nil
}

func (s *Set) remove(partition int32) *part {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.parts.Load().byID
	pt, ok := cur[partition]
	if !ok {
		return nil
	}
	next := maps.Clone(cur)
	delete(next, partition)
	s.parts.Store(newPartMap(next))
	pt.gone.Store(true)
	return pt
}
