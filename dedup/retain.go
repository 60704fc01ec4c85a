package dedup

// Retained partitions.
//
// kafka-go's consumer group is eager: at the end of every generation each partition is revoked,
// and with sticky assignment most of them come straight back to the same replica. Revoke saves the
// partition's final snapshot and then parks the stopped filter with its lineage. When the
// partition is assigned again, Assign lists the unit's snapshots (Persister.Newest, no download):
// if the newest is the one the lineage names, nobody saved a newer state, and the parked filter is
// reused, aged to now and re-warmed from the lineage's output offsets; otherwise it is dropped and
// the unit is loaded from the store as for any assignment. Generation drops the parked filters of
// partitions the new generation did not bring back, so parked memory never outlives one
// rebalance.
//
// Why reuse is safe. A drained partition's filter holds the identity of every output record below
// the lineage's output offsets (those read at the last save attempt: everything below them was
// acknowledged before, so it passed through the filter or was restored into it), and the re-warm
// adds every output record after them, whoever produced it. So the reused filter is complete
// whatever happened meanwhile; the check against the store only picks the cheaper of two correct
// states, because a newer snapshot places its records in their generations whereas a re-warm puts
// all of them in the current one. The cases:
//
//   - The final snapshot was saved and the partition comes back: the newest snapshot is it; the
//     filter is reused and the re-warm reads nothing new.
//   - The replica missed a generation (a long pause, a network partition), another replica took
//     the partition, restored our final snapshot and crashed before saving one of its own: the
//     newest is still ours; the filter is reused and the re-warm reads what the other replica
//     produced.
//   - Another replica saved a newer snapshot: the newest is not ours; the filter is dropped and the
//     newer snapshot loaded.
//   - The final save failed (the store was down, or the release budget ran out): the lineage still
//     names the last snapshot that succeeded, and its output offsets are those read at the failed
//     attempt. If that snapshot is still the newest, nobody saved since and the filter is reused;
//     the re-warm covers anything produced after the partition was drained. If the failed save
//     became visible after all (an upload that completed after its deadline) or anyone else saved,
//     the newest differs and is loaded. A filter is never reused on a guess: only the store's
//     answer or a complete re-warm makes it current.
//   - The store cannot be listed: the filter is reused with a warning when its lineage has output
//     offsets (the re-warm makes it complete); without them Assign fails and is retried.
//   - The generation ends while Assign prepares the filter (the context is cancelled): a filter
//     that was restored and re-warmed, or rebuilt, before that is parked as a revoked one would
//     be, with the lineage it got; one whose preparation was cut short is dropped.
//   - Records that were processed but not acknowledged: the worker calls Discard, which never
//     parks; the next owner, this replica included, loads from the store.
//   - The process dies: parked filters die with it; the next owner loads from the store.
//
// Without a Persister the lineage's output offsets are read at Revoke, and the parked filter is
// reused, re-warmed from them.

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/window"
)

// lineage is what a Set knows of the coverage of a partition's filter: snap is the newest snapshot
// taken of it or restored into it (zero: none), and out are output end offsets below which the
// identity of every output record of the unit is in the filter (nil: unknown). Re-warming the
// filter from out makes it current.
type lineage struct {
	snap SnapshotRef
	out  map[int32]int64
	// epoch is the owner epoch of the assignment the filter serves (see Set.ownerEpoch).
	epoch uint64
}

// after returns l updated by a save attempt: output offsets read before the copy hold even if the
// save then failed (the filter only grows, so each partition keeps the larger offset, whatever
// order overlapping attempts end in); the snapshot only if it succeeded and is newer than the one
// l names.
func (l lineage) after(r saveResult, err error) lineage {
	if r.out != nil {
		out := maps.Clone(l.out)
		if out == nil {
			out = make(map[int32]int64, len(r.out))
		}
		for q, o := range r.out {
			if cur, ok := out[q]; !ok || o > cur {
				out[q] = o
			}
		}
		l.out = out
	}
	if err == nil && r.snap != (SnapshotRef{}) && r.snap.Seq >= l.snap.Seq {
		l.snap = r.snap
	}
	return l
}

// park keeps the stopped filter of a revoked partition until the next Generation.
func (s *Set) park(partition int32, pt *part) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.parked[partition] = pt
		return
	}
	pt.f.Release()
}

// Generation drops the parked filters of the partitions that are not in partitions, the ones
// consumer group generation id assigns to this worker, and makes owns the check every later save
// passes before it reads the output's end (see Set.save): a save is refused once owns fails. It
// is part of consumer.Deduper: the worker calls it before the generation's Assign calls. It is
// safe for concurrent use.
func (s *Set) Generation(id int32, partitions []int32, owns func(context.Context) error) {
	s.releases.reset()
	s.gen.Store(max(id, 0))
	if owns != nil {
		s.owns.Store(&owns)
	} else {
		s.owns.Store(nil)
	}
	keep := make(map[int32]bool, len(partitions))
	for _, p := range partitions {
		keep[p] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, pt := range s.parked {
		if !keep[p] {
			delete(s.parked, p)
			pt.f.Release()
		}
	}
}

// Parked returns how many revoked partitions' filters the Set keeps in case they come back.
func (s *Set) Parked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.parked)
}

func (s *Set) dropParked() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pt := range s.parked {
		pt.f.Release()
	}
	clear(s.parked)
}

// unpark takes the parked filter of partition and, if it may serve the new assignment, ages it to
// now, re-warms it from the output topic and starts it (ok). With no parked filter, or when the
// store holds a newer snapshot, ok is false and the caller loads the unit from the store. On an
// error the parked filter stays parked, so that the retried Assign can use it.
func (s *Set) unpark(ctx context.Context, unit string, partition int32) (*window.Filter, *eventClock, lineage, bool, error) {
	s.mu.Lock()
	pt := s.parked[partition]
	delete(s.parked, partition)
	s.mu.Unlock()
	if pt == nil {
		return nil, nil, lineage{}, false, nil
	}
	start := time.Now()
	lin := pt.lineage()
	floor, ok, err := s.stillNewest(ctx, unit, lin)
	if !ok || err != nil {
		if err != nil {
			s.park(partition, pt)
		} else {
			pt.f.Release() // the store holds a newer state: the kept filter is dropped
		}
		return nil, nil, lineage{}, false, err
	}
	lin.epoch = s.ownerEpoch(floor)
	f := pt.f
	if pt.ev == nil {
		f.AdvanceTo(s.now()) // under ClockEvent a kept filter does not age: its records move it
	}
	n := 0
	if s.cfg.Output != nil && lin.out != nil {
		var err error
		n, err = s.cfg.Output.Rewarm(ctx, lin.out, s.addFunc(f, pt.ev))
		if err != nil {
			s.park(partition, pt) // what the re-warm added is in the output topic: harmless
			return nil, nil, lineage{}, false, fmt.Errorf("dedup: re-warming the kept filter of %s from the output topic: %w", unit, err)
		}
		if s.cfg.Observer != nil {
			s.cfg.Observer.Rewarmed(n)
		}
	}
	if s.cfg.Observer != nil && (s.cfg.Persister != nil || s.rebuilds()) {
		s.cfg.Observer.Restored(partition, checkpoint.OutcomeRetained, time.Since(start), time.Time{})
	}
	s.cfg.Logger.Info("state restored", "unit", unit, "outcome", checkpoint.OutcomeRetained, "snapshot", lin.snap.Name,
		"rewarmed_records", n, "duration", time.Since(start).String())
	if pt.ev == nil {
		f.Start()
	}
	return f, pt.ev, lin, true, nil
}

// stillNewest reports whether the parked filter with lineage lin may be reused: the store's newest
// snapshot of unit is the one lin names, or there is no store. When the store cannot be listed it
// says yes (with a warning) if the re-warm from lin's output offsets makes the filter current, and
// returns the error otherwise. It also returns the unit's highest owner epoch as far as it knows
// (lin's when the store cannot be listed).
func (s *Set) stillNewest(ctx context.Context, unit string, lin lineage) (uint64, bool, error) {
	if s.cfg.Persister == nil {
		return lin.epoch, true, nil
	}
	newest, err := s.cfg.Persister.Newest(ctx, unit)
	switch {
	case err != nil && (s.cfg.Output == nil || lin.out == nil):
		return 0, false, fmt.Errorf("dedup: listing the snapshots of %s to check the filter kept in memory: %w", unit, err)
	case err != nil:
		s.cfg.Logger.Warn("cannot list the unit's snapshots: reusing the filter kept in memory, re-warmed from the output topic",
			"unit", unit, "error", err.Error())
		return lin.epoch, true, nil
	case newest != lin.snap:
		s.cfg.Logger.Info("the store holds a newer snapshot than the filter kept in memory: loading it",
			"unit", unit, "newest", newest.Name, "kept", lin.snap.Name)
		return 0, false, nil
	}
	return max(newest.Epoch, lin.epoch), true, nil
}

// now returns the time of the filters' clock.
func (s *Set) now() time.Time {
	if s.cfg.Window.Clock != nil {
		return s.cfg.Window.Clock()
	}
	return time.Now()
}
