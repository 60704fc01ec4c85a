package dedup

// How saves are scheduled: at most Config.SaveConcurrency at a time, none for a filter that no
// record reached since its last checkpoint, and a summary of what the final saves of a release
// (a rebalance, or the shutdown) wrote.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultSaveConcurrency is the number of saves a Set runs at once when Config.SaveConcurrency is
// not set.
const DefaultSaveConcurrency = 8

// saveMark remembers the last checkpoint of a filter and how far each partition feeding it had
// got when it was taken: the offset after the last batch handed to Seen (part.processed).
//
// Why an unchanged progress means an unchanged filter. A mark is recorded only when the save
// found every partition quiet: each had acknowledged everything it had processed, so no Seen was
// running, and every key any Seen added before is in the checkpoint. A later Seen call is
// preceded by Processing, which moves processed on (the worker calls it before every batch; a
// Set whose caller never called Processing never skips a save). So if a later save finds the same
// progress, no key reached the filter since the mark: the filter holds what the checkpoint holds
// (it may have rotated since; a restore ages the filter anyway), and the save is skipped.
// Anything else that adds keys, a re-warm or a rebuild, happens before the filter has a part,
// whose mark starts empty.
type saveMark struct {
	progress map[int32]int64
	snap     SnapshotRef
	stats    SaveStats
}

// markOf returns the mark mark points to, or nil.
func markOf(mark *atomic.Pointer[saveMark]) *saveMark {
	if mark == nil {
		return nil
	}
	return mark.Load()
}

// progressOf returns how far each of parts got (part.processed), and whether every one had
// acknowledged all of it.
func progressOf(parts map[int32]*part) (map[int32]int64, bool) {
	progress := make(map[int32]int64, len(parts))
	quiet := true
	for p, pt := range parts {
		n := pt.processed.Load()
		quiet = quiet && pt.acked.Load() == n
		progress[p] = n
	}
	return progress, quiet
}

// acquireSave waits for a save slot, or for ctx; release returns the slot.
func (s *Set) acquireSave(ctx context.Context) (release func(), err error) {
	select {
	case s.saveSlots <- struct{}{}:
		return func() { <-s.saveSlots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// releaseLog adds up the final saves of the partitions a release gives up (Revoke), from the
// first one after a Generation call, so that Close can say what the shutdown wrote.
type releaseLog struct {
	mu                              sync.Mutex
	units, written, skipped, failed int
	bytes                           int64
	created, reused                 int
	first, last                     time.Time
}

// add records one final save that started at start.
func (l *releaseLog) add(start time.Time, stats SaveStats, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.units == 0 || start.Before(l.first) {
		l.first = start
	}
	if now := time.Now(); now.After(l.last) {
		l.last = now
	}
	l.units++
	l.bytes += stats.Written
	l.created += stats.Created
	l.reused += stats.Reused
	switch {
	case err != nil:
		l.failed++
	case stats.Skipped:
		l.skipped++
	default:
		l.written++
	}
}

// reset starts a new release.
func (l *releaseLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.units, l.written, l.skipped, l.failed, l.bytes, l.created, l.reused = 0, 0, 0, 0, 0, 0, 0
}

// logArgs returns what the release wrote, as log attributes, and whether it saved anything.
func (l *releaseLog) logArgs() ([]any, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return []any{"units", l.units, "saved", l.written, "unchanged", l.skipped, "failed", l.failed,
		"bytes_written", l.bytes, "objects_written", l.created, "objects_reused", l.reused,
		"took", l.last.Sub(l.first).String()}, l.units > 0
}

// revokeAll revokes every partition left, in parallel (the saves wait for their slots), and
// returns the errors joined.
func (s *Set) revokeAll(ctx context.Context) error {
	parts := s.partitions()
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Go(func() { errs[i] = s.Revoke(ctx, p) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
