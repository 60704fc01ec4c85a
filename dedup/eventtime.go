package dedup

import (
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/window"
)

// Clock says which time a Set's windows follow.
type Clock string

// The clocks a Set offers.
const (
	// ClockProcessing rotates every filter on the worker's wall clock (window.Filter.Start): a key
	// is remembered for the window's length of the worker's time, whatever the records' timestamps
	// say. A replay or a catch-up pushes hours of data through a window that spans minutes of
	// processing. It is the default.
	ClockProcessing Clock = "processing"
	// ClockEvent rotates each filter by its stream time, the highest record timestamp it has seen
	// (see "Event time" in the package documentation): a replay is judged by the data's time.
	ClockEvent Clock = "event"
)

// ParseClock returns the Clock named s (ClockProcessing or ClockEvent).
func ParseClock(s string) (Clock, error) {
	return parseChoice("window clock", s, ClockProcessing, ClockEvent)
}

// LatePolicy says what happens to a record that is too old to be judged under ClockEvent.
type LatePolicy string

// The late-record policies.
const (
	// LatePass passes a late record as new (it is produced, never silently dropped) and counts it.
	// It is the default.
	LatePass LatePolicy = "pass"
	// LateDrop drops a late record as if it were a duplicate, and counts it.
	LateDrop LatePolicy = "drop"
)

// ParseLatePolicy returns the LatePolicy named s (LatePass or LateDrop).
func ParseLatePolicy(s string) (LatePolicy, error) {
	return parseChoice("late-record policy", s, LatePass, LateDrop)
}

// streamStep is how far a record's timestamp must pass a filter's recorded stream time to update
// it between generation boundaries: under ScopeGlobal every partition updates the one shared
// value, and a coarser step keeps them from writing its cache line for every record.
const streamStep = int64(time.Millisecond)

// eventClock is the stream time of one filter under ClockEvent. It is safe for concurrent use.
type eventClock struct {
	// high is the stream time in Unix nanoseconds: the highest record timestamp the filter has
	// seen, capped when it opens a later generation (see Set.advance) and updated in steps of
	// streamStep in between; window.EventTimeOrigin before the first record.
	high atomic.Int64
	// next is the start of the generation after the filter's current one, in Unix nanoseconds: a
	// record stamped at or after it rotates the filter.
	next atomic.Int64
	// late counts the filter's late records (see Set.Seen).
	late atomic.Uint64
}

// now returns the stream time; it is the window.Config.Clock of the filter, so that New puts the
// origin of a new filter at window.EventTimeOrigin, Restore does not age a restored one by the
// wall clock, and Stats measures the window in stream time.
func (c *eventClock) now() time.Time { return time.Unix(0, c.high.Load()).UTC() }

// raise moves the stream time up to ns; it never moves it down.
func raise(v *atomic.Int64, ns int64) {
	for {
		old := v.Load()
		if ns <= old || v.CompareAndSwap(old, ns) {
			return
		}
	}
}

// resume sets the clock from a filter that was restored, rebuilt or kept: its stream time is at
// least the start of the filter's current generation. A snapshot keeps no exact stream time, and
// needs none: every judgement depends only on the live generations, which the current one's
// number fixes (AdvanceEventTo keeps all N of the window live), so resuming at the current
// generation's start judges every record as the filter did before.
func (c *eventClock) resume(f *window.Filter) {
	cur := f.CurrentGenerationStart()
	raise(&c.high, cur.UnixNano())
	raise(&c.next, f.NextGenerationStart(cur).UnixNano())
}

// windowFor returns the window configuration of a filter with event clock ev (nil under
// ClockProcessing): ev's stream time is its Clock.
func (s *Set) windowFor(ev *eventClock) window.Config {
	cfg := s.cfg.Window
	if cfg.WallClock == nil {
		cfg.WallClock = cfg.Clock // the wall clock: a restored snapshot is checked against it
	}
	if ev != nil {
		cfg.Clock = ev.now
		cfg.Ahead = s.cfg.MaxAhead
	}
	return cfg
}

// newEventClock returns a fresh stream time under ClockEvent, nil under ClockProcessing.
func (s *Set) newEventClock() *eventClock {
	if s.cfg.Clock != ClockEvent {
		return nil
	}
	ev := &eventClock{}
	ev.high.Store(window.EventTimeOrigin.UnixNano())
	return ev
}

// seenAt is Seen under ClockEvent for filter f with stream time ev: a record that opens a later
// generation first rotates f (advance), then the record is tested against every live generation
// and added to the generation of its timestamp. A late record is counted and passed or dropped
// by Config.LateRecords.
func (s *Set) seenAt(f *window.Filter, ev *eventClock, h window.KeyHash, ts time.Time) Verdict {
	if ns := ts.UnixNano(); ns >= ev.next.Load() {
		ts = s.advance(f, ev, ts)
	} else if ns-ev.high.Load() >= streamStep {
		raise(&ev.high, ns)
	}
	var seen, late bool
	if s.cfg.Refresh {
		seen, late, _ = f.TestAndRefreshAtHash(h, ts)
	} else {
		seen, late = f.TestAndAddAtHash(h, ts)
	}
	if late {
		ev.late.Add(1)
		s.late.Add(1)
		if s.cfg.LateRecords == LateDrop {
			return VerdictLate
		}
		return VerdictNew
	}
	if seen {
		return VerdictDuplicate
	}
	return VerdictNew
}

// advance moves the stream time of f to ts, capped at the wall clock plus Config.MaxAhead, rotates
// f to it and returns the capped time: the record is judged at the cap, so that one record
// stamped far in the future cannot expire the window.
func (s *Set) advance(f *window.Filter, ev *eventClock, ts time.Time) time.Time {
	if limit := s.now().Add(s.cfg.MaxAhead); ts.After(limit) {
		ts = limit
		s.capped.Add(1)
	}
	f.AdvanceEventTo(ts)
	raise(&ev.high, ts.UnixNano())
	raise(&ev.next, f.NextGenerationStart(f.CurrentGenerationStart()).UnixNano())
	return ts
}

// addFunc returns the function that re-warm and rebuild pass output records to: under
// ClockEvent it places each identity in the generation of the record's timestamp, advancing the
// stream time as live records would (a record too old for the window is skipped); under
// ClockProcessing it adds it to the current generation.
func (s *Set) addFunc(f *window.Filter, ev *eventClock) func(id []byte, ts time.Time) {
	if ev == nil {
		return func(id []byte, _ time.Time) { f.TestAndAdd(id) }
	}
	return func(id []byte, ts time.Time) {
		if ts.UnixNano() >= ev.next.Load() {
			ts = s.advance(f, ev, ts)
		}
		f.TestAndAddAt(id, ts)
	}
}

// Late returns how many records were too old to be judged under ClockEvent (older than their
// filter's oldest live generation): passed as new under LatePass, dropped under LateDrop.
func (s *Set) Late() uint64 { return s.late.Load() }

// Capped returns how many records under ClockEvent were stamped further ahead of the wall clock
// than Config.MaxAhead when they would have advanced their filter's stream time, and were judged
// at the cap instead.
func (s *Set) Capped() uint64 { return s.capped.Load() }
