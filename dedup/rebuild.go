package dedup

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/window"
)

// rebuilds reports whether a unit without a usable snapshot is rebuilt from the output topic
// (Config.RebuildMaxRecords) rather than started empty.
func (s *Set) rebuilds() bool { return s.cfg.RebuildMaxRecords > 0 }

// rebuildProgressEvery is how often a long rebuild logs its progress.
const rebuildProgressEvery = 10 * time.Second

// rebuild builds the filter of a unit that has no usable snapshot from the output topic, with the
// identities of the output records of the last (N-1) intervals: the span a window of N
// generations of Interval remembers for sure (a key is remembered at least (N-1)·Interval).
//
// Each generation gets the records of its own interval. The filter's generation 0 starts at
// now - N·Interval; for k = 1 … N-1 the records between the output offsets where the interval of
// generation k starts and where it ends (by record timestamp, OutputLog.OffsetsAt) are added
// after the filter was rotated to generation k, and the filter is then rotated to now. So the
// rebuilt filter forgets each record when a filter that saw it live would have, and no generation
// holds more than its interval's records: adding the whole window to the current generation would
// load it N-1 times over its capacity and multiply its false-positive rate. A record whose
// timestamp is out of order lands in the generation of its place in the log. Records whose
// timestamps lie before the window (producers' clocks, replays of old data, a catch-up) are read
// only when they carry the time they were processed (Config.ProcessedTime; see "Rebuild after a
// catch-up").
//
// Bound: when the window holds more than Config.RebuildMaxRecords output records, only the newest
// RebuildMaxRecords are read, each output partition giving up its oldest records in proportion.
// The others are skipped, logged and reported to the CheckpointObserver: duplicates of them can pass
// until they would have left the window.
//
// Under ClockEvent (ev not nil) the window ends at the stream time the output shows instead of
// the wall clock (see rebuildAnchor): the records stamped in the last N-1 intervals before it are
// read in one pass, and each identity goes to the generation of its record's timestamp, the
// stream time advancing as it would for live records (Set.addFunc); the filter is not rotated to
// the wall clock afterwards. So a replay far behind the wall clock is rebuilt over its own window.
//
// It returns the filter, not started, and the output end offsets it read up to. It runs on the
// caller's goroutine; a long rebuild logs its progress every rebuildProgressEvery.
func (s *Set) rebuild(ctx context.Context, unit string, partition int32, ev *eventClock) (f *window.Filter, end map[int32]int64, err error) {
	start := time.Now()
	ro := s.cfg.Observer
	var plan rebuildPlan
	if ro != nil {
		ro.RebuildStarted()
		defer func() { ro.RebuildDone(time.Since(start), plan.skipped, err) }()
	}
	gens, iv := s.cfg.Window.Generations, s.cfg.Window.Interval
	anchor, err := s.rebuildAnchor(ctx, partition, ev)
	if err != nil {
		return nil, nil, fmt.Errorf("dedup: rebuilding %s from the output topic: %w", unit, err)
	}
	origin := anchor.Add(-time.Duration(gens) * iv)
	if ev != nil {
		f, err = window.New(s.windowFor(ev))
	} else {
		f, err = newFilterAt(s.cfg.Window, origin)
	}
	if err != nil {
		return nil, nil, err
	}
	if plan, err = s.planRebuild(ctx, partition, origin); err != nil {
		return nil, nil, fmt.Errorf("dedup: rebuilding %s from the output topic: %w", unit, err)
	}
	log := s.cfg.Logger.With("unit", unit)
	switch {
	case ev != nil:
	case s.cfg.ProcessedTime:
		if err = s.extendBack(ctx, &plan, origin.Add(iv)); err != nil {
			return nil, nil, fmt.Errorf("dedup: rebuilding %s from the output topic: %w", unit, err)
		}
	default:
		log.Info("rebuilding by the output records' own timestamps: records processed within the window but stamped before it (a catch-up with more lag than the window) are not read; set DEDUP_PROCESSED_HEADER to find them")
		if ro != nil {
			ro.RebuildByRecordTime()
		}
	}
	log.Info("no usable snapshot: rebuilding the filter from the output topic", "since", origin.Add(iv).Format(time.RFC3339),
		"records", plan.total-plan.skipped, "skipped", plan.skipped, "max_records", s.cfg.RebuildMaxRecords,
		"older_timestamps", plan.extended)
	if plan.skipped > 0 {
		log.Warn("the window holds more output records than the rebuild may read: the oldest are skipped, and their duplicates can pass until they leave the window",
			"skipped", plan.skipped, "max_records", s.cfg.RebuildMaxRecords)
	}
	prog := rebuildProgress{log: log, obs: ro, total: plan.total - plan.skipped, last: start}
	switch {
	case ev != nil:
		add := s.addFunc(f, ev)
		_, err = s.readRange(ctx, plan.bounds[0], plan.end, func(id []byte, ts time.Time) {
			add(id, ts)
			prog.add()
		})
	case len(plan.end) == 1:
		err = s.readInOnePass(ctx, f, plan, origin, &prog)
	default:
		err = s.readByGeneration(ctx, f, plan, origin, &prog)
	}
	prog.flush()
	if err != nil {
		return nil, nil, fmt.Errorf("dedup: rebuilding %s from the output topic: %w", unit, err)
	}
	if ev == nil {
		f.AdvanceTo(s.now())
	}
	// What was written while the rebuild read (another owner's late writes, other input partitions
	// under hash partitioning) lies after plan.end: the baseline save that follows reads the end
	// again and would claim it.
	tail, err := s.cfg.Output.Rewarm(ctx, plan.end, s.addFunc(f, ev))
	if err != nil {
		return nil, nil, fmt.Errorf("dedup: rebuilding %s: re-warming the tail written during the rebuild: %w", unit, err)
	}
	log.Info("filter rebuilt from the output topic", "records", prog.done, "skipped", plan.skipped,
		"tail_records", tail, "duration", time.Since(start).String())
	return f, plan.end, nil
}

// anchorTail is how many of each output partition's last records rebuildAnchor reads to find the
// newest timestamp: records without an identity (or marked duplicates) are not passed to add, so
// the very last one may not tell.
const anchorTail = 64

// rebuildAnchor returns the time a rebuilt window ends at: the wall clock under ClockProcessing
// (ev nil). Under ClockEvent it is the stream time the lost filter had reached, as far as the
// output shows it: the newest timestamp among the last anchorTail records of the output
// partitions that hold the input partition's records, capped at the wall clock plus
// Config.MaxAhead as a live record is; the wall clock when they hold none. It returns the
// OutputLog's error.
func (s *Set) rebuildAnchor(ctx context.Context, partition int32, ev *eventClock) (time.Time, error) {
	now := s.now()
	if ev == nil {
		return now, nil
	}
	end, err := s.cfg.Output.End(ctx, partition)
	if err != nil {
		return time.Time{}, err
	}
	from := make(map[int32]int64, len(end))
	for q, e := range end {
		from[q] = max(e-anchorTail, 0)
	}
	var newest time.Time
	if _, err := s.readRange(ctx, from, end, func(_ []byte, ts time.Time) {
		if ts.After(newest) {
			newest = ts
		}
	}); err != nil {
		return time.Time{}, err
	}
	if newest.IsZero() {
		return now, nil
	}
	return minTime(newest, now.Add(s.cfg.MaxAhead)), nil
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// readByGeneration adds the records of each generation's interval after rotating f to it, one
// Read per generation across every output partition.
func (s *Set) readByGeneration(ctx context.Context, f *window.Filter, plan rebuildPlan, origin time.Time, prog *rebuildProgress) error {
	add := func(id []byte, _ time.Time) {
		f.TestAndAdd(id)
		prog.add()
	}
	for k := 1; k < len(plan.bounds); k++ {
		f.AdvanceTo(origin.Add(time.Duration(k) * s.cfg.Window.Interval))
		if _, err := s.readRange(ctx, plan.bounds[k-1], plan.bounds[k], add); err != nil {
			return err
		}
	}
	if plan.extended == 0 {
		return nil
	}
	// extendBack's records, each in the generation of its processing time: every generation of the
	// window is live, as the loop above rotated f one generation at a time.
	from := origin.Add(s.cfg.Window.Interval)
	_, err := s.readRange(ctx, plan.start, plan.bounds[0], func(id []byte, ts time.Time) {
		if ts.Before(from) {
			return // processed before the window: part of extendBack's last step
		}
		f.TestAndAddAt(id, ts)
		prog.add()
	})
	return err
}

// readInOnePass reads a single output partition in one Read, which saves the fetches that
// readByGeneration's Reads would repeat at each generation's bound: records come in log order,
// and f is rotated to a record's generation when its timestamp enters a later one than the last.
// A record whose timestamp is out of order lands in the generation reached so far, as with
// readByGeneration.
func (s *Set) readInOnePass(ctx context.Context, f *window.Filter, plan rebuildPlan, origin time.Time, prog *rebuildProgress) error {
	iv, last := s.cfg.Window.Interval, int64(len(plan.bounds)-1)
	cur := int64(1)
	f.AdvanceTo(origin.Add(iv))
	add := func(id []byte, ts time.Time) {
		if plan.extended > 0 && ts.Before(origin.Add(iv)) {
			return // produced before the window: part of extendBack's last step
		}
		if k := min(int64(ts.Sub(origin)/iv), last); k > cur {
			cur = k
			f.AdvanceTo(origin.Add(time.Duration(k) * iv))
		}
		f.TestAndAdd(id)
		prog.add()
	}
	_, err := s.readRange(ctx, plan.start, plan.end, add)
	return err
}

// readRange is OutputLog.Read of [from[q], to[q]) without the call when no range holds an offset:
// a rebuild of an empty output topic (or of an interval without records) then asks the broker
// nothing, as Read would read nothing. A partition of from without an entry in to is read up to
// its end, so it always calls Read.
func (s *Set) readRange(ctx context.Context, from, to map[int32]int64, add func(id []byte, ts time.Time)) (int, error) {
	for q, lo := range from {
		if hi, ok := to[q]; !ok || lo < hi {
			return s.cfg.Output.Read(ctx, from, to, add)
		}
	}
	return 0, nil
}

// rebuildPlan is what a rebuild reads: bounds[k-1] are the output offsets where the records of
// generation k start by timestamp (k = 1 … N-1), and bounds[N-1] = end; start is where each
// output partition's read starts: bounds[0], or before it where extendBack found records
// processed within the window. total counts the records from start to end, skipped those the
// bound leaves out.
type rebuildPlan struct {
	bounds         []map[int32]int64
	start, end     map[int32]int64
	total, skipped int64
	extended       int64 // records before the window by timestamp that extendBack added
}

// Rebuild after a catch-up. Under ClockProcessing the window ends at the wall clock, but
// OffsetsAt finds records by their timestamp, which is the input's: a worker that caught up with
// more lag than the window produced records whose timestamps lie before it, and planRebuild
// leaves them out. When the output records carry the time they were processed
// (Config.ProcessedTime: the worker's processed-time header, which the OutputLog reports as a
// record's time), extendBack finds them: reading back from the plan's start of each output
// partition, in steps that double from one record, as long as the records it reads were
// processed within the window. It reads every record it adds twice, and one record per output
// partition when there is nothing to add. A plan over one output partition then reads them in
// its one pass; one over several (ScopeGlobal) adds them after its generations, each to the
// generation of its processing time (window.Filter.TestAndAddAt). Without the header the rebuild
// selects by timestamp alone, logs it and reports it (CheckpointObserver.RebuildByRecordTime):
// the catch-up limit (docs/design.md, Failure model).

// extendBack moves the start of each output partition of a plan back over the records before it
// that were processed at or after from (see "Rebuild after a catch-up"), within
// Config.RebuildMaxRecords shared by all of them, and counts them in plan.extended and
// plan.total. It returns the OutputLog's error.
func (s *Set) extendBack(ctx context.Context, plan *rebuildPlan, from time.Time) error {
	if plan.skipped > 0 {
		return nil
	}
	budget := s.cfg.RebuildMaxRecords - plan.total
	for _, q := range slices.Sorted(maps.Keys(plan.end)) {
		n, err := s.extendPartition(ctx, plan, q, from, budget)
		if err != nil {
			return err
		}
		budget -= n
	}
	plan.total += plan.extended
	return nil
}

// extendPartition is extendBack for output partition q, within budget records; it returns how
// many records it added.
func (s *Set) extendPartition(ctx context.Context, plan *rebuildPlan, q int32, from time.Time, budget int64) (int64, error) {
	first := plan.start[q]
	start := first
	for step := int64(1); start > 0 && budget > 0; step *= 2 {
		lo := max(start-min(step, budget), 0)
		all, some := true, false // the step's records with an identity: all, some processed since from
		_, err := s.cfg.Output.Read(ctx, map[int32]int64{q: lo}, map[int32]int64{q: start}, func(_ []byte, ts time.Time) {
			in := !ts.Before(from)
			all, some = all && in, some || in
		})
		if err != nil {
			return 0, err
		}
		if !some {
			break // processed before the window, or nothing tells when
		}
		budget -= start - lo
		start = lo
		if !all {
			break
		}
	}
	plan.start[q] = start
	plan.extended += first - start
	return first - start, nil
}

// planRebuild finds the offsets where each generation's interval starts, given generation 0
// starting at origin, and applies Config.RebuildMaxRecords.
func (s *Set) planRebuild(ctx context.Context, partition int32, origin time.Time) (rebuildPlan, error) {
	gens, iv := s.cfg.Window.Generations, s.cfg.Window.Interval
	end, err := s.cfg.Output.End(ctx, partition)
	if err != nil {
		return rebuildPlan{}, err
	}
	p := rebuildPlan{bounds: make([]map[int32]int64, gens), end: end}
	for k := 1; k < gens && !allZero(end); k++ {
		if p.bounds[k-1], err = s.cfg.Output.OffsetsAt(ctx, partition, origin.Add(time.Duration(k)*iv)); err != nil {
			return rebuildPlan{}, err
		}
	}
	for k := range p.bounds { // an empty output: every bound is the end, 0, without asking
		if p.bounds[k] == nil {
			p.bounds[k] = maps.Clone(end)
		}
	}
	// From one interval to the next the offsets only grow, and they never pass the end.
	for q, e := range end {
		lo := int64(0)
		for k := range p.bounds {
			v, ok := p.bounds[k][q]
			if !ok {
				v = e
			}
			v = min(max(v, lo), e)
			p.bounds[k][q], lo = v, v
		}
		p.total += e - p.bounds[0][q]
	}
	limit := s.cfg.RebuildMaxRecords
	if p.total <= limit {
		p.start = maps.Clone(p.bounds[0])
		return p, nil
	}
	for q, e := range end {
		n := e - p.bounds[0][q]
		keep := int64(float64(n) * float64(limit) / float64(p.total))
		p.skipped += n - keep
		for k := range p.bounds {
			p.bounds[k][q] = max(p.bounds[k][q], e-keep)
		}
	}
	p.start = maps.Clone(p.bounds[0])
	return p, nil
}

// allZero reports whether every offset of end is 0: the output partitions have never held a
// record, so every interval's records start and end at 0 and OffsetsAt would find nothing.
func allZero(end map[int32]int64) bool {
	for _, e := range end {
		if e != 0 {
			return false
		}
	}
	return true
}

// newFilterAt returns an empty filter for cfg whose generation 0 starts at origin rather than at
// cfg.Clock() (window.New's choice); after New the filter reads cfg.Clock again.
func newFilterAt(cfg window.Config, origin time.Time) (*window.Filter, error) {
	clock := cfg.Clock
	if clock == nil {
		clock = time.Now
	}
	var pinned atomic.Bool
	pinned.Store(true)
	cfg.Clock = func() time.Time {
		if pinned.Load() {
			return origin
		}
		return clock()
	}
	f, err := window.New(cfg)
	pinned.Store(false)
	if err != nil {
		return nil, fmt.Errorf("dedup: %w", err)
	}
	return f, nil
}

// rebuildProgress counts the records of a rebuild, reports them to the observer in batches and
// logs progress every rebuildProgressEvery. It is used from one goroutine.
type rebuildProgress struct {
	log         *slog.Logger
	obs         CheckpointObserver
	total, done int64
	unreported  int
	last        time.Time
}

func (p *rebuildProgress) add() {
	p.done++
	if p.unreported++; p.unreported < 4096 {
		return
	}
	p.flush()
	if time.Since(p.last) >= rebuildProgressEvery {
		p.last = time.Now()
		p.log.Info("rebuilding the filter from the output topic", "records", p.done, "of", p.total)
	}
}

func (p *rebuildProgress) flush() {
	if p.obs != nil && p.unreported > 0 {
		p.obs.RebuildRecords(p.unreported)
	}
	p.unreported = 0
}
