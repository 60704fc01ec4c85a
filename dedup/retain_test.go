package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/window"
)

// countingBackend counts the snapshots a checkpoint.Backend reads (not the generation objects a
// manifest brings with it) and its listings.
type countingBackend struct {
	checkpoint.Backend
	mu           sync.Mutex
	opens, lists int
}

func (c *countingBackend) count(n *int) {
	c.mu.Lock()
	*n++
	c.mu.Unlock()
}

func (c *countingBackend) Open(ctx context.Context, name string) (checkpoint.ObjectReader, error) {
	if strings.HasSuffix(name, ".snap") {
		c.count(&c.opens)
	}
	return c.Backend.Open(ctx, name)
}

func (c *countingBackend) List(ctx context.Context, prefix string) ([]checkpoint.Object, error) {
	c.count(&c.lists)
	return c.Backend.List(ctx, prefix)
}

func (c *countingBackend) counts() (opens, lists int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opens, c.lists
}

// faultyPersister wraps a Persister: its Save can fail before or after the snapshot became visible,
// and its Newest can fail.
type faultyPersister struct {
	Persister
	mu                      sync.Mutex
	failSave, failAfterSave bool
	failNewest              bool
}

var errStore = errors.New("store unavailable")

func (p *faultyPersister) set(fn func(p *faultyPersister)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(p)
}

func (p *faultyPersister) Save(ctx context.Context, unit string, f *window.Filter, info SnapshotInfo, seal func(context.Context) error) (SnapshotRef, SaveStats, error) {
	p.mu.Lock()
	before, after := p.failSave, p.failAfterSave
	p.mu.Unlock()
	if before {
		return SnapshotRef{}, SaveStats{}, errStore
	}
	ref, st, err := p.Persister.Save(ctx, unit, f, info, seal)
	if err == nil && after { // e.g. an upload that completed after the client gave up on it
		return SnapshotRef{}, st, fmt.Errorf("upload timed out: %w", errStore)
	}
	return ref, st, err
}

func (p *faultyPersister) Newest(ctx context.Context, unit string) (SnapshotRef, error) {
	p.mu.Lock()
	fail := p.failNewest
	p.mu.Unlock()
	if fail {
		return SnapshotRef{}, errStore
	}
	return p.Persister.Newest(ctx, unit)
}

// recordingObserver keeps the restore outcomes and rebuild reports it hears.
type recordingObserver struct {
	mu       sync.Mutex
	restores map[checkpoint.Outcome]int
	rewarmed int
	rebuilds []rebuildReport
	started  int
	records  int
	skews    []time.Duration
	// byRecordTime counts RebuildByRecordTime.
	byRecordTime int
}

type rebuildReport struct {
	skipped int64
	failed  bool
}

func (o *recordingObserver) CheckpointSaved(int32, time.Duration, int64) {}
func (o *recordingObserver) CheckpointFailed(int32, string)              {}
func (o *recordingObserver) CheckpointWritten(string, int64)             {}
func (o *recordingObserver) Restored(_ int32, outcome checkpoint.Outcome, _ time.Duration, _ time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.restores == nil {
		o.restores = map[checkpoint.Outcome]int{}
	}
	o.restores[outcome]++
}
func (o *recordingObserver) Rewarmed(n int) { o.mu.Lock(); o.rewarmed += n; o.mu.Unlock() }
func (o *recordingObserver) ClockSkew(d time.Duration) {
	o.mu.Lock()
	o.skews = append(o.skews, d)
	o.mu.Unlock()
}
func (o *recordingObserver) RebuildStarted() {
	o.mu.Lock()
	o.started++
	o.mu.Unlock()
}
func (o *recordingObserver) RebuildRecords(n int) { o.mu.Lock(); o.records += n; o.mu.Unlock() }
func (o *recordingObserver) RebuildByRecordTime() { o.mu.Lock(); o.byRecordTime++; o.mu.Unlock() }
func (o *recordingObserver) RebuildDone(_ time.Duration, skipped int64, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rebuilds = append(o.rebuilds, rebuildReport{skipped, err != nil})
}

func (o *recordingObserver) outcomes() map[checkpoint.Outcome]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.restores)
}

// retainEnv is a Set over a directory store with counted reads and a fake output topic whose partitions all
// end at end; rewarms records where each Rewarm started.
type retainEnv struct {
	store   *countingBackend
	persist *faultyPersister
	out     *fakeOutput
	obs     *recordingObserver
	rewarms []map[int32]int64
}

func newRetainEnv(t *testing.T) *retainEnv {
	t.Helper()
	dir, err := checkpoint.NewDirBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := &retainEnv{store: &countingBackend{Backend: dir}, obs: &recordingObserver{}}
	e.persist = &faultyPersister{Persister: NewCheckpointPersister(checkpoint.NewStore(e.store, 3), slog.New(slog.DiscardHandler))}
	e.out = &fakeOutput{end: 100, rewarm: func(from map[int32]int64, _ func([]byte, time.Time)) {
		e.rewarms = append(e.rewarms, maps.Clone(from))
	}}
	return e
}

func (e *retainEnv) set(t *testing.T) *Set {
	t.Helper()
	s, err := NewSet(context.Background(), Config{Window: testWindow(), Topic: "orders", Persister: e.persist, Output: e.out,
		Observer: e.obs, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func seeAll(t *testing.T, s *Set, p int32, prefix string, n int, want bool) {
	t.Helper()
	for i := range n {
		if got := s.Seen(p, fmt.Appendf(nil, "%s-%d", prefix, i), time.Time{}); got != want {
			t.Fatalf("Seen(%d, %s-%d) = %v, want %v", p, prefix, i, got, want)
		}
	}
}

// TestRetainedPartitionIsNotDownloaded revokes a partition and assigns it again to the same Set, as
// every eager rebalance does with a partition that stays: the kept filter serves it, nothing is
// downloaded, and it is re-warmed from the output offsets read at revoke.
func TestRetainedPartitionIsNotDownloaded(t *testing.T) {
	ctx := context.Background()
	e := newRetainEnv(t)
	s := e.set(t)
	if err := s.Assign(ctx, 3); err != nil {
		t.Fatal(err)
	}
	seeAll(t, s, 3, "id", 500, false)
	e.out.end = 142 // what the partition produced
	if err := s.Revoke(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if s.Parked() != 1 {
		t.Fatalf("%d filters parked after Revoke, want 1", s.Parked())
	}
	s.Generation(1, []int32{3}, nil)
	opens, lists := e.store.counts()
	if err := s.Assign(ctx, 3); err != nil {
		t.Fatal(err)
	}
	opens2, lists2 := e.store.counts()
	if opens2 != opens || lists2 != lists+1 {
		t.Errorf("assigning the retained partition opened %d snapshots and listed %d times; want 0 and 1", opens2-opens, lists2-lists)
	}
	seeAll(t, s, 3, "id", 500, true)
	if last := e.rewarms[len(e.rewarms)-1]; !maps.Equal(last, map[int32]int64{3: 142}) {
		t.Errorf("re-warmed from %v, want the output offsets read at revoke {3: 142}", last)
	}
	if got := e.obs.outcomes(); got[checkpoint.OutcomeRetained] != 1 || got[checkpoint.OutcomeWarm] != 0 {
		t.Errorf("restore outcomes %v, want one retained and no warm", got)
	}
	if s.Parked() != 0 {
		t.Errorf("%d filters still parked", s.Parked())
	}
}

// TestParkedFilterDroppedWhenNotReassigned: a generation that does not bring the partition back
// drops its kept filter, so memory stays bounded, and a later assignment loads from the store.
func TestParkedFilterDroppedWhenNotReassigned(t *testing.T) {
	ctx := context.Background()
	e := newRetainEnv(t)
	s := e.set(t)
	for _, p := range []int32{1, 2} {
		if err := s.Assign(ctx, p); err != nil {
			t.Fatal(err)
		}
		seeAll(t, s, p, "id", 10, false)
		if err := s.Revoke(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	s.Generation(1, []int32{2, 5}, nil)
	if s.Parked() != 1 {
		t.Fatalf("%d filters parked, want only partition 2's", s.Parked())
	}
	opens, _ := e.store.counts()
	if err := s.Assign(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if o, _ := e.store.counts(); o != opens+1 {
		t.Errorf("partition 1 opened %d snapshots, want 1 (loaded from the store)", o-opens)
	}
	seeAll(t, s, 1, "id", 10, true)
	if err := s.Discard(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if s.Parked() != 1 {
		t.Errorf("Discard parked a filter: %d parked", s.Parked())
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Parked() != 0 {
		t.Errorf("%d filters parked after Close", s.Parked())
	}
}

// TestPartitionMovedAwayAndBack: replica A revokes a partition, B restores it, processes and saves
// a newer snapshot; the partition returns to A before A heard of a generation without it (A
// missed one). The store's newest is not A's, so A loads it rather than reusing its own filter.
func TestPartitionMovedAwayAndBack(t *testing.T) {
	ctx := context.Background()
	e := newRetainEnv(t)
	a, b := e.set(t), e.set(t)
	if err := a.Assign(ctx, 0); err != nil {
		t.Fatal(err)
	}
	seeAll(t, a, 0, "a", 100, false)
	if err := a.Revoke(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := b.Assign(ctx, 0); err != nil {
		t.Fatal(err)
	}
	seeAll(t, b, 0, "a", 100, true)
	seeAll(t, b, 0, "b", 100, false)
	if err := b.Revoke(ctx, 0); err != nil {
		t.Fatal(err)
	}
	opens, _ := e.store.counts()
	if err := a.Assign(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if o, _ := e.store.counts(); o != opens+1 {
		t.Errorf("A opened %d snapshots, want 1: B's newer snapshot", o-opens)
	}
	seeAll(t, a, 0, "b", 100, true)
	seeAll(t, a, 0, "a", 100, true)
	if got := e.obs.outcomes(); got[checkpoint.OutcomeRetained] != 0 || got[checkpoint.OutcomeWarm] != 2 {
		t.Errorf("restore outcomes %v, want two warm (B, then A) and none retained", got)
	}
}

// TestParkedFilterAfterFailedSave covers the kept filters whose final snapshot failed: reused only
// when the store proves nobody saved since, or cannot be asked but the re-warm makes the filter
// current; loaded from the store when the failed save became visible after all.
func TestParkedFilterAfterFailedSave(t *testing.T) {
	for _, tc := range []struct {
		name       string
		fault      func(p *faultyPersister)
		noOutput   bool
		wantReuse  bool
		wantErr    bool
		wantRewarm map[int32]int64
	}{
		{"save failed, nothing newer", func(p *faultyPersister) { p.failSave = true }, false, true, false, map[int32]int64{0: 177}},
		{"save failed but became visible", func(p *faultyPersister) { p.failAfterSave = true }, false, false, false, map[int32]int64{0: 177}},
		{"store cannot be listed", func(p *faultyPersister) { p.failSave, p.failNewest = true, true }, false, true, false, map[int32]int64{0: 177}},
		{"store cannot be listed, no output to re-warm from", func(p *faultyPersister) { p.failSave, p.failNewest = true, true }, true, false, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newRetainEnv(t)
			if tc.noOutput {
				e.out = nil
			}
			cfg := Config{Window: testWindow(), Topic: "orders", Persister: e.persist, Observer: e.obs, Logger: slog.New(slog.DiscardHandler)}
			if e.out != nil {
				cfg.Output = e.out
			}
			s, err := NewSet(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			if err := s.Assign(ctx, 0); err != nil {
				t.Fatal(err)
			}
			seeAll(t, s, 0, "id", 50, false)
			if e.out != nil {
				e.out.end = 177 // what the partition produced before the failed save
			}
			e.persist.set(tc.fault)
			if err := s.Revoke(ctx, 0); !errors.Is(err, errStore) {
				t.Fatalf("Revoke = %v, want the store's error", err)
			}
			e.rewarms = nil
			s.Generation(1, []int32{0}, nil)
			opens, _ := e.store.counts()
			err = s.Assign(ctx, 0)
			if tc.wantErr {
				if err == nil || s.Parked() != 1 {
					t.Fatalf("Assign = %v with %d parked; want an error and the filter still parked for the retry", err, s.Parked())
				}
				e.persist.set(func(p *faultyPersister) { p.failNewest = false })
				if err := s.Assign(ctx, 0); err != nil {
					t.Fatal(err)
				}
				seeAll(t, s, 0, "id", 50, true) // the baseline holds nothing, the store's newest is it: kept filter
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			o, _ := e.store.counts()
			if reused := o == opens; reused != tc.wantReuse {
				t.Errorf("kept filter reused: %v (%d snapshots opened), want %v", reused, o-opens, tc.wantReuse)
			}
			seeAll(t, s, 0, "id", 50, true)
			if len(e.rewarms) != 1 || !maps.Equal(e.rewarms[0], tc.wantRewarm) {
				t.Errorf("re-warmed from %v, want %v", e.rewarms, tc.wantRewarm)
			}
		})
	}
}

// TestRetainedWithoutStore: with no Persister the kept filter is reused, re-warmed from the output
// end offsets read at revoke.
func TestRetainedWithoutStore(t *testing.T) {
	ctx := context.Background()
	var rewarms []map[int32]int64
	out := &fakeOutput{end: 9, rewarm: func(from map[int32]int64, _ func([]byte, time.Time)) { rewarms = append(rewarms, from) }}
	s, err := NewSet(ctx, Config{Window: testWindow(), Output: out})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if err := s.Assign(ctx, 4); err != nil {
		t.Fatal(err)
	}
	seeAll(t, s, 4, "id", 20, false)
	if err := s.Revoke(ctx, 4); err != nil {
		t.Fatal(err)
	}
	s.Generation(1, []int32{4}, nil)
	if err := s.Assign(ctx, 4); err != nil {
		t.Fatal(err)
	}
	seeAll(t, s, 4, "id", 20, true)
	if len(rewarms) != 1 || !maps.Equal(rewarms[0], map[int32]int64{4: 9}) {
		t.Errorf("re-warmed from %v, want once from {4: 9}", rewarms)
	}
}

// TestLineageAfterOverlappingSaves proves that a partition's lineage names the newest snapshot
// and the largest output offsets whatever order overlapping save attempts (a periodic checkpoint
// still running when the partition is revoked) end in, and that a failed attempt keeps its output
// offsets but not a snapshot.
func TestLineageAfterOverlappingSaves(t *testing.T) {
	older := saveResult{snap: SnapshotRef{Name: "u.1.snap", Seq: 1}, out: map[int32]int64{0: 10, 1: 7}}
	newer := saveResult{snap: SnapshotRef{Name: "u.2.snap", Seq: 2}, out: map[int32]int64{0: 12}}
	failed := saveResult{out: map[int32]int64{0: 15}}
	for _, tc := range []struct {
		name     string
		attempts []saveResult
		errs     []error
		snap     string
		out      map[int32]int64
	}{
		{"in order", []saveResult{older, newer}, []error{nil, nil}, "u.2.snap", map[int32]int64{0: 12, 1: 7}},
		{"newer ends first", []saveResult{newer, older}, []error{nil, nil}, "u.2.snap", map[int32]int64{0: 12, 1: 7}},
		{"failed save keeps offsets only", []saveResult{older, failed}, []error{nil, errors.New("store down")}, "u.1.snap", map[int32]int64{0: 15, 1: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l lineage
			for i, r := range tc.attempts {
				l = l.after(r, tc.errs[i])
			}
			if l.snap.Name != tc.snap || !maps.Equal(l.out, tc.out) {
				t.Errorf("lineage %+v, want snapshot %s and offsets %v", l, tc.snap, tc.out)
			}
		})
	}
	if older.out[0] != 10 || newer.out[0] != 12 {
		t.Error("after changed the offsets of a save result")
	}
}
