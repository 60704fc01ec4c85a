package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/window"
)

// fakeTopic is an output topic in memory: an OutputLog whose offsets are indexes
// into each partition's records. Under the global scope (input partition -1) every output
// partition serves; otherwise the partition with the input partition's number.
type fakeTopic struct {
	mu    sync.Mutex
	parts map[int32][]fakeRecord
	reads int
}

type fakeRecord struct {
	id string
	ts time.Time
	// processed, when set, is the time the record was produced, as the worker's processed-time
	// header gives it: Read reports it instead of ts, OffsetsAt still finds records by ts.
	processed time.Time
}

// readTime is the time Read reports for r.
func (r fakeRecord) readTime() time.Time {
	if !r.processed.IsZero() {
		return r.processed
	}
	return r.ts
}

func (f *fakeTopic) serving(in int32) []int32 {
	if in >= 0 {
		return []int32{in}
	}
	return slices.Sorted(maps.Keys(f.parts))
}

func (f *fakeTopic) End(_ context.Context, in int32) (map[int32]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int32]int64{}
	for _, q := range f.serving(in) {
		out[q] = int64(len(f.parts[q]))
	}
	return out, nil
}

func (f *fakeTopic) OffsetsAt(_ context.Context, in int32, t time.Time) (map[int32]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int32]int64{}
	for _, q := range f.serving(in) {
		recs := f.parts[q]
		out[q] = int64(len(recs))
		for i, r := range recs {
			if !r.ts.Before(t) {
				out[q] = int64(i)
				break
			}
		}
	}
	return out, nil
}

func (f *fakeTopic) Read(_ context.Context, from, to map[int32]int64, add func([]byte, time.Time)) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	n := 0
	for _, q := range slices.Sorted(maps.Keys(from)) {
		recs := f.parts[q]
		end := int64(len(recs))
		if t, ok := to[q]; ok && t < end {
			end = t
		}
		for i := from[q]; i < end; i++ {
			add([]byte(recs[i].id), recs[i].readTime())
			n++
		}
	}
	return n, nil
}

func (f *fakeTopic) Rewarm(ctx context.Context, from map[int32]int64, add func([]byte, time.Time)) (int, error) {
	return f.Read(ctx, from, nil, add)
}

// minuteRecords returns n records "<prefix>-<i>", one a minute from first.
func minuteRecords(prefix string, first time.Time, n int) []fakeRecord {
	recs := make([]fakeRecord, n)
	for i := range recs {
		recs[i] = fakeRecord{id: fmt.Sprintf("%s-%d", prefix, i), ts: first.Add(time.Duration(i) * time.Minute)}
	}
	return recs
}

// fakeClock is a settable clock for window.Config.Clock.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time       { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) set(t time.Time)      { c.ns.Store(t.UnixNano()) }
func newFakeClock(t time.Time) *fakeClock { c := &fakeClock{}; c.set(t); return c }

// rebuildWindow is a window of 4 generations of an hour on clock: a rebuild reads the last 3 hours.
func rebuildWindow(c *fakeClock) window.Config {
	w := testWindow()
	w.Clock = c.now
	return w
}

// held returns, for each of recs, whether the filter holds its identity.
func held(f *window.Filter, recs []fakeRecord) []bool {
	out := make([]bool, len(recs))
	for i, r := range recs {
		out[i] = f.Test([]byte(r.id))
	}
	return out
}

// span reports whether got[from:to] are all want.
func span(got []bool, from, to int, want bool) bool {
	for _, g := range got[from:to] {
		if g != want {
			return false
		}
	}
	return true
}

// TestRebuild rebuilds a partition's filter from 3.5 hours of output records, one a minute, in a
// window of 4 one-hour generations: the last 3 hours are read, each hour into its own generation,
// so that an hour later the oldest hour is forgotten as a filter that saw the records live would
// forget it. Under the global scope the records of every output partition are placed likewise.
// The bound keeps only the newest records and reports the others as skipped.
func TestRebuild(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	first := now.Add(-210 * time.Minute) // records 0..209; record 30 is at now-3h
	for _, tc := range []struct {
		name      string
		scope     Scope
		max       int64
		wantRead  [2]int // records [from, to) of each partition that are held
		wantSkips int64
	}{
		{"partition", ScopePartition, 1_000_000, [2]int{30, 210}, 0},
		{"global, two output partitions", ScopeGlobal, 1_000_000, [2]int{30, 210}, 0},
		{"bounded", ScopePartition, 60, [2]int{150, 210}, 120},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock(now)
			topic := &fakeTopic{parts: map[int32][]fakeRecord{0: minuteRecords("a", first, 210)}}
			if tc.scope == ScopeGlobal {
				topic.parts[1] = minuteRecords("b", first, 210)
			}
			obs := &recordingObserver{}
			f := rebuiltFilter(t, Config{Scope: tc.scope, Window: rebuildWindow(clock), Output: topic, RebuildMaxRecords: tc.max,
				Observer: obs})
			for q, recs := range topic.parts {
				got := held(f, recs)
				if !span(got, 0, tc.wantRead[0], false) || !span(got, tc.wantRead[0], 210, true) {
					t.Errorf("partition %d: the filter holds records %v, want exactly %d..209", q, ranges(got), tc.wantRead[0])
				}
			}
			// An hour on, generation 1 (records 30..89, now-3h..now-2h) has expired.
			f.AdvanceTo(now.Add(time.Hour))
			for q, recs := range topic.parts {
				got := held(f, recs)
				if lo := max(tc.wantRead[0], 90); !span(got, 0, lo, false) || !span(got, lo, 210, true) {
					t.Errorf("partition %d an hour later: the filter holds records %v, want exactly %d..209", q, ranges(got), lo)
				}
			}
			read := (tc.wantRead[1] - tc.wantRead[0]) * len(topic.parts)
			if len(obs.rebuilds) != 1 || obs.rebuilds[0] != (rebuildReport{skipped: tc.wantSkips}) || obs.records != read || obs.started != 1 {
				t.Errorf("observer heard %d started, %v done, %d records; want 1, [{%d false}], %d", obs.started, obs.rebuilds, obs.records, tc.wantSkips, read)
			}
			if got := obs.outcomes(); !maps.Equal(got, map[checkpoint.Outcome]int{checkpoint.OutcomeCold: 1}) {
				t.Errorf("restore outcomes %v, want one cold", got)
			}
		})
	}
}

// rebuiltFilter returns the filter of partition 0 of a new Set of cfg (logging nowhere), assigned
// without a snapshot, so rebuilt from cfg.Output; the Set is closed with the test.
func rebuiltFilter(t *testing.T, cfg Config) *window.Filter {
	t.Helper()
	ctx := context.Background()
	cfg.Logger = slog.New(slog.DiscardHandler)
	s, err := NewSet(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(ctx) })
	if err := s.Assign(ctx, 0); err != nil {
		t.Fatal(err)
	}
	return s.Filter(0)
}

// ranges describes which records are held, as index ranges.
func ranges(held []bool) []string {
	var out []string
	for i := 0; i < len(held); {
		j := i
		for j < len(held) && held[j] == held[i] {
			j++
		}
		if held[i] {
			out = append(out, fmt.Sprintf("%d..%d", i, j-1))
		}
		i = j
	}
	return out
}

// TestRebuildThenSnapshot: a rebuilt filter is snapshotted at once, with the output offsets it was
// rebuilt up to, so the next owner restores it warm instead of rebuilding again.
func TestRebuildThenSnapshot(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	clock := newFakeClock(now)
	topic := &fakeTopic{parts: map[int32][]fakeRecord{2: minuteRecords("r", now.Add(-time.Hour), 60)}}
	p, store := dirPersister(t)
	cfg := Config{Window: rebuildWindow(clock), Topic: "orders", Persister: p, Output: topic, RebuildMaxRecords: 100}
	a, err := NewSet(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Assign(ctx, 2); err != nil {
		t.Fatal(err)
	}
	infos, err := store.List(ctx, "orders.p2")
	if err != nil || len(infos) != 1 {
		t.Fatalf("snapshots after the rebuild: %v, %v; want the baseline", infos, err)
	}
	b, err := NewSet(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	reads := topic.reads
	if err := b.Assign(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if !span(held(b.Filter(2), topic.parts[2]), 0, 60, true) {
		t.Error("the next owner does not hold the rebuilt records")
	}
	if topic.reads != reads+1 {
		t.Errorf("the next owner read the output %d times, want once (the re-warm after the baseline's offsets)", topic.reads-reads)
	}
}

// TestRebuildNeedsOutput: a rebuild reads the output topic.
func TestRebuildNeedsOutput(t *testing.T) {
	_, err := NewSet(context.Background(), Config{Window: testWindow(), RebuildMaxRecords: 10})
	if err == nil || err.Error() != "dedup: RebuildMaxRecords needs an Output" {
		t.Errorf("NewSet = %v, want the missing Output error", err)
	}
}

// cancellingPersister cancels the assignment's context when the baseline snapshot is saved, as
// the end of a generation does while Assign runs.
type cancellingPersister struct {
	Persister
	cancel context.CancelFunc
}

func (p cancellingPersister) Save(ctx context.Context, unit string, f *window.Filter, info SnapshotInfo, seal func(context.Context) error) (SnapshotRef, SaveStats, error) {
	p.cancel()
	return SnapshotRef{}, SaveStats{}, ctx.Err()
}

// TestCalledOffAssignmentParksTheFilter: when the generation ends after a filter was rebuilt,
// Assign fails but keeps the rebuilt filter for the next generation, which reuses it instead of
// rebuilding again.
func TestCalledOffAssignmentParksTheFilter(t *testing.T) {
	now := time.Now()
	topic := &fakeTopic{parts: map[int32][]fakeRecord{1: minuteRecords("r", now.Add(-time.Hour), 60)}}
	dir, _ := dirPersister(t)
	ctx, cancel := context.WithCancel(context.Background())
	obs := &recordingObserver{}
	s, err := NewSet(context.Background(), Config{Window: rebuildWindow(newFakeClock(now)), Persister: cancellingPersister{dir, cancel},
		Output: topic, RebuildMaxRecords: 1000, Observer: obs, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if err := s.Assign(ctx, 1); !errors.Is(err, context.Canceled) || s.Parked() != 1 {
		t.Fatalf("Assign = %v with %d filters parked; want the cancellation and the rebuilt filter parked", err, s.Parked())
	}
	s.Generation(1, []int32{1}, nil)
	if err := s.Assign(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if !span(held(s.Filter(1), topic.parts[1]), 0, 60, true) {
		t.Error("the reused filter lost the rebuilt records")
	}
	if obs.started != 1 || obs.outcomes()[checkpoint.OutcomeRetained] != 1 {
		t.Errorf("%d rebuilds and outcomes %v; want one rebuild, then the filter retained", obs.started, obs.outcomes())
	}
}

// tailTopic is a fakeTopic to which a record is produced right after the first bounded Read of a
// rebuild: written while the rebuild runs.
type tailTopic struct {
	*fakeTopic
	once sync.Once
}

func (f *tailTopic) Read(ctx context.Context, from, to map[int32]int64, add func([]byte, time.Time)) (int, error) {
	n, err := f.fakeTopic.Read(ctx, from, to, add)
	if to != nil {
		f.once.Do(func() {
			for q := range from {
				f.produce(q, "written-during-the-rebuild")
			}
		})
	}
	return n, err
}

// TestRebuildRewarmsItsTail: a record written to the output while a rebuild reads it lies after
// the rebuild's end offsets; the baseline save that follows reads the end again, so the rebuilt
// filter must hold that record, or its duplicates pass now and after a restart.
func TestRebuildRewarmsItsTail(t *testing.T) {
	now := time.Now()
	topic := &tailTopic{fakeTopic: &fakeTopic{parts: map[int32][]fakeRecord{1: minuteRecords("r", now.Add(-time.Hour), 60)}}}
	dir, _ := dirPersister(t)
	cfg := Config{Window: rebuildWindow(newFakeClock(now)), Persister: dir, Output: topic, RebuildMaxRecords: 1000,
		Logger: slog.New(slog.DiscardHandler)}
	s, err := NewSet(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if err := s.Assign(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if !s.Filter(1).Test([]byte("written-during-the-rebuild")) {
		t.Error("the rebuilt filter lacks the record written during the rebuild")
	}
	restarted, err := NewSet(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer restarted.Close(context.Background())
	if err := restarted.Assign(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if !restarted.Filter(1).Test([]byte("written-during-the-rebuild")) {
		t.Error("after a restart, the record written during the rebuild is forgotten: the baseline claims it")
	}
}

// TestRebuildAfterCatchUp: a worker that caught up with 6 hours of lag, more than the 3 hours a
// rebuild reads, produced records whose timestamps (the input's) all lie before the window. With
// the processed-time header the rebuild finds the ones produced in the last 3 hours and places
// each in the generation of its processing time; without it (the records' own timestamps only) it
// finds none, the documented limit.
func TestRebuildAfterCatchUp(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	first := now.Add(-210 * time.Minute) // processed one a minute; record 30 at now-3h
	for _, tc := range []struct {
		scope  Scope
		header bool
	}{{ScopePartition, true}, {ScopePartition, false}, {ScopeGlobal, true}, {ScopeGlobal, false}} {
		t.Run(fmt.Sprintf("%s header=%v", tc.scope, tc.header), func(t *testing.T) {
			topic := &fakeTopic{parts: map[int32][]fakeRecord{}}
			qs := []int32{0}
			if tc.scope == ScopeGlobal {
				qs = []int32{0, 1, 2}
			}
			for _, q := range qs {
				recs := minuteRecords(fmt.Sprintf("p%d", q), first, 210)
				for i := range recs {
					if tc.header {
						recs[i].processed = recs[i].ts
					}
					// The input's timestamps: 6 hours of lag (and a different lag per partition).
					recs[i].ts = recs[i].ts.Add(-6*time.Hour - time.Duration(q)*time.Hour)
				}
				topic.parts[q] = recs
			}
			clock := newFakeClock(now)
			obs := &recordingObserver{}
			f := rebuiltFilter(t, Config{Scope: tc.scope, Window: rebuildWindow(clock), Output: topic, RebuildMaxRecords: 1_000_000,
				ProcessedTime: tc.header, Observer: obs})
			for _, q := range qs {
				recs := topic.parts[q]
				got := held(f, recs)
				if !tc.header {
					if !span(got, 0, 210, false) {
						t.Fatalf("partition %d: without the header the filter holds %v, want none (the catch-up limit)", q, ranges(got))
					}
					continue
				}
				if !span(got, 0, 30, false) || !span(got, 30, 210, true) {
					t.Errorf("partition %d: the filter holds records %v, want exactly 30..209", q, ranges(got))
				}
			}
			if want := map[bool]int{true: 0, false: 1}[tc.header]; obs.byRecordTime != want {
				t.Errorf("RebuildByRecordTime reported %d times, want %d", obs.byRecordTime, want)
			}
			if !tc.header {
				return
			}
			f.AdvanceTo(now.Add(time.Hour))
			for _, q := range qs {
				if got := held(f, topic.parts[q]); !span(got, 0, 90, false) || !span(got, 90, 210, true) {
					t.Errorf("partition %d an hour later: the filter holds records %v, want exactly 90..209", q, ranges(got))
				}
			}
		})
	}
}

// emptyTopic is a fakeTopic that counts the calls a rebuild makes and produces a record to each
// output partition it reports the end of, right after the first End: written while the rebuild
// runs, after the offsets it read up to.
type emptyTopic struct {
	*fakeTopic
	once                          sync.Once
	ends, offsetsAt, reads, warms atomic.Int32
}

func (f *emptyTopic) End(ctx context.Context, in int32) (map[int32]int64, error) {
	f.ends.Add(1)
	end, err := f.fakeTopic.End(ctx, in)
	f.once.Do(func() {
		for q := range end {
			f.produce(q, fmt.Sprintf("written-during-the-rebuild-%d", q))
		}
	})
	return end, err
}

func (f *emptyTopic) OffsetsAt(ctx context.Context, in int32, t time.Time) (map[int32]int64, error) {
	f.offsetsAt.Add(1)
	return f.fakeTopic.OffsetsAt(ctx, in, t)
}

func (f *emptyTopic) Read(ctx context.Context, from, to map[int32]int64, add func([]byte, time.Time)) (int, error) {
	f.reads.Add(1)
	return f.fakeTopic.Read(ctx, from, to, add)
}

func (f *emptyTopic) Rewarm(ctx context.Context, from map[int32]int64, add func([]byte, time.Time)) (int, error) {
	f.warms.Add(1)
	return f.fakeTopic.Read(ctx, from, nil, add)
}

// TestRebuildOfAnEmptyOutput: a rebuild from an output topic that has never held a record asks
// for its end offsets and re-warms from them, and nothing else (no offsets by time, no bounded
// read, which can find nothing); the record written meanwhile is still re-warmed and, as the
// baseline claims the end offsets 0, a restart still holds it. The filter is the one a rebuild
// from a topic with only older records gives: the same generations, nothing else held.
func TestRebuildOfAnEmptyOutput(t *testing.T) {
	now := time.Now()
	for _, scope := range []Scope{ScopePartition, ScopeGlobal} {
		t.Run(fmt.Sprint(scope), func(t *testing.T) {
			topic := &emptyTopic{fakeTopic: &fakeTopic{parts: map[int32][]fakeRecord{1: nil}}}
			if scope == ScopeGlobal {
				topic.parts[0] = nil
			}
			dir, _ := dirPersister(t)
			clock := newFakeClock(now)
			cfg := Config{Scope: scope, Window: rebuildWindow(clock), Persister: dir, Output: topic, RebuildMaxRecords: 1000,
				Logger: slog.New(slog.DiscardHandler)}
			const unit = 1
			f := newAssigned(t, cfg, unit).Filter(unit)
			if n, m, w := topic.offsetsAt.Load(), topic.reads.Load(), topic.warms.Load(); n != 0 || m != 0 || w != 1 {
				t.Errorf("the rebuild asked %d offsets by time, %d bounded reads, %d re-warms; want 0, 0, 1", n, m, w)
			}
			for q := range topic.parts {
				if id := fmt.Sprintf("written-during-the-rebuild-%d", q); !f.Test([]byte(id)) {
					t.Errorf("the rebuilt filter lacks %s", id)
				}
			}
			// The full path over records that all lie before the window gives the same filter.
			old := &fakeTopic{parts: map[int32][]fakeRecord{}}
			for q := range topic.parts {
				old.parts[q] = minuteRecords(fmt.Sprint("old", q), now.Add(-10*time.Hour), 5)
			}
			full := newAssigned(t, Config{Scope: scope, Window: rebuildWindow(clock), Output: old, RebuildMaxRecords: 1000,
				Logger: slog.New(slog.DiscardHandler)}, unit).Filter(unit)
			if g, w := f.Meta(), full.Meta(); !g.Origin.Equal(w.Origin) || g.Epoch != w.Epoch || !slices.Equal(g.SlotEpochs, w.SlotEpochs) {
				t.Errorf("generations %v from %v (current %d), want %v from %v (current %d) as the full path gives",
					g.SlotEpochs, g.Origin, g.Epoch, w.SlotEpochs, w.Origin, w.Epoch)
			}
			for q, recs := range old.parts {
				if got := held(f, recs); slices.Contains(got, true) {
					t.Errorf("partition %d: the filter holds %v of the older records", q, ranges(got))
				}
			}
			restarted := newAssigned(t, cfg, unit).Filter(unit)
			for q := range topic.parts {
				if id := fmt.Sprintf("written-during-the-rebuild-%d", q); !restarted.Test([]byte(id)) {
					t.Errorf("after a restart, %s is forgotten: the baseline claims it", id)
				}
			}
		})
	}
}
