package dedup

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/window"
)

// persistSave saves f as unit through p, sealing at once.
func persistSave(t *testing.T, p *CheckpointPersister, unit string, f *window.Filter) SaveStats {
	t.Helper()
	info := SnapshotInfo{Scope: ScopePartition, Topic: "orders", InputOffsets: map[int32]int64{}}
	_, st, err := p.Save(context.Background(), unit, f, info, func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func addKeys(f *window.Filter, prefix string, n int) {
	for i := range n {
		f.TestAndAdd(fmt.Appendf(nil, "%s-%d", prefix, i))
	}
}

func seenKeys(f *window.Filter, prefix string, n int) int {
	seen := 0
	for i := range n {
		if f.Test(fmt.Appendf(nil, "%s-%d", prefix, i)) {
			seen++
		}
	}
	return seen
}

// TestPersisterWritesWhatChanged follows a filter through rotations: a save writes the current
// generation and the generations that changed since the last save (a generation just sealed, once
// more); the others are referenced again. A restored filter's sealed generations are not written
// again by its first save.
func TestPersisterWritesWhatChanged(t *testing.T) {
	for _, auto := range []bool{false, true} {
		t.Run(fmt.Sprintf("auto=%v", auto), func(t *testing.T) { testPersisterWritesWhatChanged(t, auto) })
	}
}

// testPersisterWritesWhatChanged is TestPersisterWritesWhatChanged with a fixed capacity, or
// auto sizing with three times the keys, so that the generations have stages of different sizes.
func testPersisterWritesWhatChanged(t *testing.T, auto bool) {
	ctx := context.Background()
	p, store := dirPersister(t)
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	cfg := window.Config{Generations: 4, Interval: time.Minute, Capacity: 5_000, FalsePositiveRate: 1e-4, Clock: clock, SingleWriter: true}
	scale := 1
	if auto {
		cfg.Capacity, cfg.Auto, scale = 0, true, 3
	}
	f, err := window.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	step := func(name string, keys, wantCreated, wantReused int) {
		t.Helper()
		addKeys(f, name, keys*scale)
		if st := persistSave(t, p, "orders.p0", f); st.Created != wantCreated || st.Reused != wantReused {
			t.Fatalf("%s: wrote %d generations and reused %d, want %d and %d", name, st.Created, st.Reused, wantCreated, wantReused)
		}
	}
	step("a", 1000, 1, 0)
	step("b", 0, 1, 0) // the current generation is always written
	now = now.Add(time.Minute)
	f.AdvanceTo(now)
	step("c", 1000, 2, 0) // generation 0 was current at its last save: written once more, sealed
	step("d", 10, 1, 1)
	now = now.Add(time.Minute)
	f.AdvanceTo(now)
	step("e", 10, 2, 1)

	r, res, err := p.Restore(ctx, "orders.p0", cfg)
	if err != nil || r == nil || res.Outcome != checkpoint.OutcomeWarm {
		t.Fatalf("Restore: %v, %v", res.Outcome, err)
	}
	for _, prefix := range []string{"a", "c", "d", "e"} {
		if n := map[string]int{"a": 1000, "c": 1000, "d": 10, "e": 10}[prefix] * scale; seenKeys(r, prefix, n) != n {
			t.Fatalf("restored filter lost keys %q", prefix)
		}
	}
	if st := persistSave(t, p, "orders.p0", r); st.Created != 1 || st.Reused != 2 {
		t.Fatalf("first save after a restore wrote %d generations and reused %d, want 1 and 2", st.Created, st.Reused)
	}
	if infos, err := store.List(ctx, "orders.p0"); err != nil || len(infos) != 3 {
		t.Fatalf("store lists %d snapshots (%v), want keep=3", len(infos), err)
	}
}

// TestPersisterEventTimeRewritesOlderGeneration: under event time a key can go to an older
// generation; the next save writes that generation again, so its key survives a restore.
func TestPersisterEventTimeRewritesOlderGeneration(t *testing.T) {
	for _, auto := range []bool{false, true} {
		t.Run(fmt.Sprintf("auto=%v", auto), func(t *testing.T) { testPersisterEventTimeRewritesOlderGeneration(t, auto) })
	}
}

// testPersisterEventTimeRewritesOlderGeneration is TestPersisterEventTimeRewritesOlderGeneration
// with a fixed capacity or auto sizing.
func testPersisterEventTimeRewritesOlderGeneration(t *testing.T, auto bool) {
	ctx := context.Background()
	p, _ := dirPersister(t)
	cfg := window.Config{Generations: 4, Interval: time.Minute, Capacity: 5_000, FalsePositiveRate: 1e-4,
		Clock: func() time.Time { return window.EventTimeOrigin }, SingleWriter: true, Auto: auto}
	if auto {
		cfg.Capacity = 0
	}
	f, err := window.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t0 := window.EventTimeOrigin.Add(time.Hour)
	f.AdvanceEventTo(t0.Add(2 * time.Minute))
	f.TestAndAddAt([]byte("current"), t0.Add(2*time.Minute))
	persistSave(t, p, "orders.p0", f)
	if st := persistSave(t, p, "orders.p0", f); st.Created != 1 {
		t.Fatalf("save without changes to older generations wrote %d generations, want 1", st.Created)
	}
	if seen, late := f.TestAndAddAt([]byte("late"), t0); seen || late {
		t.Fatal("setup: the key should go to an older generation")
	}
	if st := persistSave(t, p, "orders.p0", f); st.Created != 2 {
		t.Fatalf("save after a key went to an older generation wrote %d generations, want 2", st.Created)
	}
	cfg.Clock = func() time.Time { return t0.Add(2 * time.Minute) }
	r, _, err := p.Restore(ctx, "orders.p0", cfg)
	if err != nil || r == nil || !r.Test([]byte("late")) || !r.Test([]byte("current")) {
		t.Fatalf("restored filter lacks a key (err %v)", err)
	}
}

// writtenObserver adds up what checkpoints wrote.
type writtenObserver struct {
	recordingObserver
	written atomic.Int64
}

func (o *writtenObserver) CheckpointWritten(_ string, n int64) { o.written.Add(n) }

// TestCheckpointCostFollowsChanges is the claim of incremental checkpoints, at the scale of a
// test: 16 partitions of a filter sized for 200k keys per interval hold 2,500 keys each. The store
// holds a fraction of what full snapshots would take (a size that follows the keys, not the
// capacity); an interval without records writes nothing; records on one partition cost that
// partition's current generation and a manifest.
func TestCheckpointCostFollowsChanges(t *testing.T) {
	ctx := context.Background()
	const parts, keys = 16, 2500
	store, dir := dirStore(t)
	obs := &writtenObserver{}
	s, err := NewSet(ctx, Config{
		Window: window.Config{Generations: 8, Interval: 15 * time.Minute, Capacity: 200_000, FalsePositiveRate: 1e-6},
		Topic:  "orders", Persister: NewCheckpointPersister(store, slog.New(slog.DiscardHandler)), Observer: obs,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	feed := func(p int32, prefix string, n int) {
		s.Processing(p, int64(n))
		for i := range n {
			s.Seen(p, fmt.Appendf(nil, "%s-%d-%d", prefix, p, i), time.Time{})
		}
		s.Acked(p, int64(n))
	}
	for p := range int32(parts) {
		if err := s.Assign(ctx, p); err != nil {
			t.Fatal(err)
		}
		feed(p, "load", keys)
	}
	sz, err := window.Size(s.windowFor(nil))
	if err != nil {
		t.Fatal(err)
	}
	full := int64(sz.TotalBytes) * parts
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	size := dirBytes(t, dir)
	t.Logf("store after the load: %d bytes for %d keys; full snapshots: %d bytes", size, parts*keys, full)
	if size > full/50 {
		t.Errorf("the store holds %d bytes, more than 2%% of the %d bytes full snapshots take", size, full)
	}
	before := obs.written.Load()
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if w := obs.written.Load() - before; w != 0 {
		t.Errorf("a checkpoint without new records wrote %d bytes", w)
	}
	feed(3, "more", keys+10)
	before = obs.written.Load()
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if w := obs.written.Load() - before; w == 0 || w > size/parts*2 {
		t.Errorf("a checkpoint after records on one partition wrote %d bytes; one partition's share of the store is %d", w, size/parts)
	}
}

// countingPersister counts the saves under way at once.
type countingPersister struct {
	Persister
	cur, peak atomic.Int32
	mu        sync.Mutex
}

func (c *countingPersister) Save(ctx context.Context, unit string, f *window.Filter, info SnapshotInfo, seal func(context.Context) error) (SnapshotRef, SaveStats, error) {
	n := c.cur.Add(1)
	defer c.cur.Add(-1)
	c.mu.Lock()
	c.peak.Store(max(c.peak.Load(), n))
	c.mu.Unlock()
	time.Sleep(5 * time.Millisecond) // hold the slot so that others queue
	return c.Persister.Save(ctx, unit, f, info, seal)
}

// TestSavesBounded revokes many partitions at once, as a shutdown does: their final saves run in
// parallel, never more than SaveConcurrency at a time, and Close logs what they wrote.
func TestSavesBounded(t *testing.T) {
	ctx := context.Background()
	p, _ := dirPersister(t)
	cp := &countingPersister{Persister: p}
	var logs strings.Builder
	var logMu sync.Mutex
	s, err := NewSet(ctx, Config{Window: testWindow(), Topic: "orders", Persister: cp, SaveConcurrency: 3,
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	const parts = 12
	for i := range int32(parts) {
		if err := s.Assign(ctx, i); err != nil {
			t.Fatal(err)
		}
		s.Processing(i, 1)
		s.Seen(i, []byte("k"), time.Time{})
		s.Acked(i, 1)
	}
	s.Generation(1, nil, nil)
	var wg sync.WaitGroup
	for i := range int32(parts) {
		wg.Go(func() {
			if err := s.Revoke(ctx, i); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if peak := cp.peak.Load(); peak > 3 || peak < 2 {
		t.Errorf("%d saves ran at once, want up to SaveConcurrency=3 (and more than one)", peak)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(logs.String(), `msg="final checkpoints" units=12 saved=12`) {
		t.Errorf("Close does not log what the final saves wrote:\n%q", logs.String())
	}
}

type lockedWriter struct {
	w  *strings.Builder
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
