package dedup

// The global filter after a Discard.
//
// Under ScopeGlobal every partition feeds one filter, so when the worker discards a partition
// whose last batch never reached the output topic, the shared filter keeps the identities of those
// records. Global scope runs on one replica, so the partition comes back to the same filter, and
// its re-delivered records would be dropped as duplicates of records the output never got: lost.
// A Discard therefore taints the filter (no snapshot is taken of it), and the next Assign rebuilds
// it before serving any partition: restore the last good snapshot (or start cold, or rebuild from
// the output topic, as at a start), re-warm it from the output topic, and swap it in.
//
// Partitions still assigned keep running during the rebuild. A record they pass to Seen before
// the swap goes to the old filter, so after the swap the rebuild waits until every such record was
// acknowledged (Config.SealTimeout), then re-warms the new filter again from the output end it
// read before its first re-warm: every record the old filter let through is then in the new one.
// Only then is the taint cleared. A rebuild that fails or times out leaves the filter tainted and
// Assign returns the error, so that the worker retries.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/window"
)

// shared is the global filter and its stream time under ClockEvent (nil under ClockProcessing).
type shared struct {
	f  *window.Filter
	ev *eventClock
}

// sharedScope is the scope of one filter for every partition (ScopeGlobal).
type sharedScope struct {
	s *Set
	// global is the filter every partition shares. It is replaced when a rebuild follows a
	// Discard (see rebuild).
	global atomic.Pointer[shared]
	// taints counts the Discards that left identities of records that never reached the output in
	// the global filter; cleared is the count the last rebuild of the global filter covers. The
	// filter is tainted while they differ (see tainted).
	taints, cleared atomic.Uint64
	rebuildMu       sync.Mutex               // serialises rebuilds of the global filter
	mark            atomic.Pointer[saveMark] // the global filter's last checkpoint
	// floor is the highest owner epoch of the global unit's snapshots when the global filter was
	// prepared (see "Owner epochs" in epoch.go).
	floor atomic.Uint64
}

func newShared(s *Set) scope { return &sharedScope{s: s} }

// globalUnit names the global filter: its snapshot unit and its metrics label.
const globalUnit = string(ScopeGlobal)

// allPartitions is the partition the global unit is saved, restored and rebuilt as: its output
// partitions are every one the OutputLog has (see OutputLog.End), and observers see -1.
const allPartitions = -1

// start restores (or builds) the global filter, re-warming it from the output topic.
func (g *sharedScope) start(ctx context.Context) error {
	ev := g.s.newEventClock()
	f, err := g.open(ctx, ev)
	if err != nil {
		return err
	}
	g.global.Store(&shared{f: f, ev: ev})
	return nil
}

// open prepares a global filter from the store and starts it, and records its owner epoch floor.
func (g *sharedScope) open(ctx context.Context, ev *eventClock) (*window.Filter, error) {
	f, _, floor, err := g.s.open(ctx, globalUnit, allPartitions, ev)
	if err != nil {
		return nil, err
	}
	g.floor.Store(floor)
	startRotation(f, ev)
	return f, nil
}

// epoch returns the owner epoch of the global filter's saves.
func (g *sharedScope) epoch() uint64 { return g.s.ownerEpoch(g.floor.Load()) }

func (*sharedScope) unit(int32) string { return globalUnit }

// prepare rebuilds the global filter if a Discard left it holding identities of records that
// never reached the output; the partition is then served by the global filter.
func (g *sharedScope) prepare(ctx context.Context, _ int32) (*window.Filter, *eventClock, lineage, error) {
	return nil, nil, lineage{}, g.rebuild(ctx)
}

// serving returns the global filter: read under the Set's mu, as a rebuild swaps it under mu.
func (g *sharedScope) serving(*window.Filter, *eventClock) (*window.Filter, *eventClock) {
	cur := g.global.Load()
	return cur.f, cur.ev
}

// revoke does nothing: the global filter is saved periodically and on Close.
func (*sharedScope) revoke(context.Context, int32, *part) error { return nil }

// discard taints the global filter: it holds identities of the partition's records that were
// not produced, so it is not snapshotted until the next Assign rebuilds it.
func (g *sharedScope) discard(partition int32, _ *part) {
	g.taints.Add(1)
	g.s.cfg.Logger.Warn("the global filter holds identities of records that were not produced; "+
		"it is not snapshotted until it is rebuilt, at the next partition assignment", "partition", partition)
}

func (g *sharedScope) stats() ([]FilterStats, []*window.Filter) {
	cur := g.global.Load()
	return []FilterStats{filterStats(globalUnit, cur.f, cur.ev)}, []*window.Filter{cur.f}
}

func (g *sharedScope) checkpoint(ctx context.Context) error {
	cur := g.global.Load()
	_, err := g.s.save(ctx, globalUnit, cur.f, allPartitions, g.s.parts.Load().byID, &g.mark, nil, g.epoch())
	if err != nil && ctx.Err() == nil {
		g.s.logSaveError("checkpoint failed", globalUnit, err)
	}
	return err
}

// close saves the global filter, sealed against the partitions still assigned (if the worker
// did not drain them, the snapshot waits for their acknowledgements and is dropped when they
// never come), releases it and stops tracking the partitions.
func (g *sharedScope) close(ctx context.Context) error {
	s, cur := g.s, g.global.Load()
	cur.f.Close()
	start := time.Now()
	res, err := s.save(ctx, globalUnit, cur.f, allPartitions, s.parts.Load().byID, &g.mark, nil, g.epoch())
	s.releases.add(start, res.stats, err)
	cur.f.Release()
	for _, p := range s.partitions() {
		s.remove(p)
	}
	return err
}

// sealed adds every partition assigned by now to parts: they all feed the global filter, and one
// assigned while the copy ran may have records in it.
func (g *sharedScope) sealed(parts map[int32]*part) []map[int32]*part {
	return []map[int32]*part{parts, g.s.parts.Load().byID}
}

// tainted reports whether the global filter may hold identities of records that never reached
// the output topic (a Discard since the last rebuild).
func (g *sharedScope) tainted() bool { return g.taints.Load() != g.cleared.Load() }

// ownershipChecked is false: global scope runs on one replica, and its final save at Close comes
// after the worker left the group.
func (*sharedScope) ownershipChecked() bool { return false }

// rebuild replaces a tainted global filter by one built from the last good snapshot and the
// output topic (see "The global filter after a Discard"). It does nothing when the filter is not
// tainted. It returns an error, and the filter stays tainted, when the store or the output topic
// fails or the partitions still assigned do not acknowledge their records in time.
func (g *sharedScope) rebuild(ctx context.Context) error {
	g.rebuildMu.Lock()
	defer g.rebuildMu.Unlock()
	taints := g.taints.Load()
	if taints == g.cleared.Load() {
		return nil
	}
	s, start := g.s, time.Now()
	var from map[int32]int64
	if s.cfg.Output != nil {
		var err error
		if from, err = s.cfg.Output.End(ctx, allPartitions); err != nil {
			return fmt.Errorf("dedup: rebuilding the global filter: reading output end offsets: %w", err)
		}
	}
	ev := s.newEventClock()
	f, err := g.open(ctx, ev)
	if err != nil {
		return fmt.Errorf("dedup: rebuilding the global filter: %w", err)
	}
	old, stale, fresh := g.swap(f, ev)
	old.f.Close()
	defer old.f.Release() // after the Seen calls that still read it are acknowledged
	if err := s.awaitAcked(ctx, stale, fresh); err != nil {
		return fmt.Errorf("dedup: rebuilding the global filter: %w", err)
	}
	n := 0
	if from != nil {
		if n, err = s.cfg.Output.Rewarm(ctx, from, s.addFunc(f, ev)); err != nil {
			return fmt.Errorf("dedup: rebuilding the global filter: re-warming the tail: %w", err)
		}
	}
	g.cleared.Store(taints)
	s.cfg.Logger.Info("global filter rebuilt after a discard", "rewarmed_tail_records", n,
		"duration", time.Since(start).String())
	return nil
}

// swap makes f (with stream time ev) the global filter, serving every partition assigned, and
// returns the one it replaces, the parts that served them before (Seen calls that read those may
// still add to the old filter) and the parts that replace them.
func (g *sharedScope) swap(f *window.Filter, ev *eventClock) (old *shared, stale, fresh map[int32]*part) {
	s := g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	old = g.global.Swap(&shared{f: f, ev: ev})
	stale = s.parts.Load().byID
	fresh = make(map[int32]*part, len(stale))
	for p, pt := range stale {
		np := newPart(f, ev, lineage{})
		np.processed.Store(pt.processed.Load())
		np.acked.Store(pt.acked.Load())
		fresh[p] = np
		pt.gone.Store(true)
	}
	s.parts.Store(newPartMap(fresh))
	g.mark.Store(nil)
	return old, stale, fresh
}

// awaitAcked waits until every partition of stale acknowledged what it had passed to the old
// filter's Seen, or Config.SealTimeout passes (errSealTimeout), or ctx ends. A Seen that read the
// old parts was preceded by its Processing on the old part, so the old part's processed bounds
// it; its Acked may go to either part. A partition given up meanwhile is not waited for: its
// records either reached the output or were discarded, which taints the filter again.
func (s *Set) awaitAcked(ctx context.Context, stale, fresh map[int32]*part) error {
	return s.awaitUntil(ctx, func() bool { return s.staleAcked(stale, fresh) })
}

// staleAcked reports whether every partition of stale still served by its part of fresh
// acknowledged what its old part processed.
func (s *Set) staleAcked(stale, fresh map[int32]*part) bool {
	cur := s.parts.Load().byID
	for p, old := range stale {
		np := fresh[p]
		if cur[p] != np {
			continue // given up since, and perhaps assigned again
		}
		if max(old.acked.Load(), np.acked.Load()) < old.processed.Load() {
			return false
		}
	}
	return true
}
