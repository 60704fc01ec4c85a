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
	"time"

	"github.com/kdedup/kdedup/window"
)

// shared is the global filter and its stream time under ClockEvent (nil under ClockProcessing).
type shared struct {
	f  *window.Filter
	ev *eventClock
}

// tainted reports whether the global filter may hold identities of records that never reached
// the output topic (a Discard since the last rebuild).
func (s *Set) tainted() bool { return s.taints.Load() != s.cleared.Load() }

// rebuildGlobal replaces a tainted global filter by one built from the last good snapshot and the
// output topic (see "The global filter after a Discard"). It does nothing when the filter is not
// tainted. It returns an error, and the filter stays tainted, when the store or the output topic
// fails or the partitions still assigned do not acknowledge their records in time.
func (s *Set) rebuildGlobal(ctx context.Context) error {
	s.rebuildMu.Lock()
	defer s.rebuildMu.Unlock()
	taints := s.taints.Load()
	if taints == s.cleared.Load() {
		return nil
	}
	start := time.Now()
	var from map[int32]int64
	if s.cfg.Output != nil {
		var err error
		if from, err = s.cfg.Output.End(ctx, -1); err != nil {
			return fmt.Errorf("dedup: rebuilding the global filter: reading output end offsets: %w", err)
		}
	}
	ev := s.newEventClock()
	f, _, err := s.open(ctx, globalUnit, -1, ev)
	if err != nil {
		return fmt.Errorf("dedup: rebuilding the global filter: %w", err)
	}
	old, stale, fresh := s.swapGlobal(f, ev)
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
	s.cleared.Store(taints)
	s.cfg.Logger.Info("global filter rebuilt after a discard", "rewarmed_tail_records", n,
		"duration", time.Since(start).String())
	return nil
}

// swapGlobal makes f (with stream time ev) the global filter, serving every partition assigned,
// and returns the one it replaces, the parts that served them before (Seen calls that read those
// may still add to the old filter) and the parts that replace them.
func (s *Set) swapGlobal(f *window.Filter, ev *eventClock) (old *shared, stale, fresh map[int32]*part) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old = s.global.Swap(&shared{f: f, ev: ev})
	stale = *s.parts.Load()
	fresh = make(map[int32]*part, len(stale))
	for p, pt := range stale {
		np := newPart(f, ev, lineage{})
		np.processed.Store(pt.processed.Load())
		np.acked.Store(pt.acked.Load())
		fresh[p] = np
		pt.gone.Store(true)
	}
	s.parts.Store(&fresh)
	s.globalMark.Store(nil)
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
	cur := *s.parts.Load()
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
