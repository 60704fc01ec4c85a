package dedup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/window"
)

func testWindow() window.Config {
	return window.Config{Generations: 4, Interval: time.Hour, Capacity: 10_000, FalsePositiveRate: 1e-9}
}

func TestScopes(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		scope          Scope
		crossPartition bool // is a duplicate on another partition caught?
	}{
		{ScopePartition, false},
		{ScopeGlobal, true},
		{"", false}, // the default is partition
	}
	for _, tt := range tests {
		t.Run(string(tt.scope), func(t *testing.T) {
			s, err := NewSet(ctx, Config{Scope: tt.scope, Window: testWindow()})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			for _, p := range []int32{0, 1} {
				if err := s.Assign(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			if s.Seen(0, []byte("a"), time.Time{}) {
				t.Fatal("first sighting reported seen")
			}
			if !s.Seen(0, []byte("a"), time.Time{}) {
				t.Fatal("duplicate on the same partition not caught")
			}
			if got := s.Seen(1, []byte("a"), time.Time{}); got != tt.crossPartition {
				t.Fatalf("duplicate on another partition: seen=%v, want %v", got, tt.crossPartition)
			}
		})
	}
}

func TestParseScope(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    Scope
		wantErr string
	}{
		{"partition", ScopePartition, ""},
		{"global", ScopeGlobal, ""},
		{"routed", ScopeRouted, ""},
		{"Global", "", `dedup: unknown scope "Global" (want partition, global or routed)`},
		{"", "", `dedup: unknown scope ""`},
	} {
		got, err := ParseScope(tt.in)
		if tt.wantErr != "" {
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tt.wantErr)) {
				t.Errorf("ParseScope(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseScope(%q) = %v, %v", tt.in, got, err)
		}
	}
}

func TestNewSetRejectsBadWindow(t *testing.T) {
	_, err := NewSet(context.Background(), Config{Window: window.Config{}})
	if !errors.Is(err, window.ErrConfig) {
		t.Fatalf("error = %v, want window.ErrConfig", err)
	}
	if _, err := NewSet(context.Background(), Config{Scope: "galaxy", Window: testWindow()}); err == nil {
		t.Fatal("unknown scope accepted")
	}
}

func TestUnassignedPasses(t *testing.T) {
	ctx := context.Background()
	s, err := NewSet(ctx, Config{Window: testWindow()})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if s.Seen(7, []byte("x"), time.Time{}) {
			t.Fatal("record of an unassigned partition was dropped")
		}
	}
	if s.Unassigned() != 2 {
		t.Fatalf("Unassigned = %d, want 2", s.Unassigned())
	}
}

// dirStore returns a Store keeping 3 snapshots per unit in a fresh directory, and the directory.
func dirStore(t testing.TB) (*checkpoint.Store, string) {
	t.Helper()
	dir := t.TempDir()
	store, err := checkpoint.OpenLocation(context.Background(), checkpoint.Location{Scheme: checkpoint.SchemeFile, Dir: dir}, checkpoint.Options{Keep: 3})
	if err != nil {
		t.Fatal(err)
	}
	return store, dir
}

// putSnapshot writes, with write, an object that store lists as unit's newest snapshot straight
// to the store's backend b, as another writer of the store would (an older kdedup, or an attacker
// who may write the store), and returns its name.
func putSnapshot(tb testing.TB, store *checkpoint.Store, b checkpoint.Backend, unit string, write func(io.Writer) error) string {
	tb.Helper()
	ctx := context.Background()
	infos, err := store.List(ctx, unit)
	if err != nil {
		tb.Fatal(err)
	}
	seq := uint64(1)
	if len(infos) > 0 {
		seq = infos[0].Seq + 1
	}
	name := fmt.Sprintf("%s.%020d.snap", unit, seq)
	if _, err := b.Create(ctx, name, write); err != nil {
		tb.Fatal(err)
	}
	return name
}

func dirPersister(t *testing.T) (*CheckpointPersister, *checkpoint.Store) {
	t.Helper()
	store, _ := dirStore(t)
	return NewCheckpointPersister(store, slog.New(slog.DiscardHandler)), store
}

// failingPersister fails every Save and restores nothing.
type failingPersister struct{ err error }

func (f failingPersister) Restore(context.Context, string, window.Config) (*window.Filter, Restored, error) {
	return nil, Restored{Outcome: checkpoint.OutcomeCold}, nil
}

func (f failingPersister) Save(context.Context, string, *window.Filter, SnapshotInfo, func(context.Context) error) (SnapshotRef, SaveStats, error) {
	return SnapshotRef{}, SaveStats{}, f.err
}

func (f failingPersister) Newest(context.Context, string) (SnapshotRef, error) {
	return SnapshotRef{}, nil
}

// fakeOutput is an OutputLog whose partitions all end at end, and whose reads (Rewarm, Read) call
// rewarm once and report one record.
type fakeOutput struct {
	end    int64
	rewarm func(from map[int32]int64, add func([]byte, time.Time))
}

func (o *fakeOutput) End(_ context.Context, in int32) (map[int32]int64, error) {
	return map[int32]int64{in: o.end}, nil
}

func (o *fakeOutput) Rewarm(_ context.Context, from map[int32]int64, add func([]byte, time.Time)) (int, error) {
	o.rewarm(from, add)
	return 1, nil
}

func (o *fakeOutput) OffsetsAt(ctx context.Context, in int32, _ time.Time) (map[int32]int64, error) {
	return o.End(ctx, in)
}

func (o *fakeOutput) Read(ctx context.Context, from, _ map[int32]int64, add func([]byte, time.Time)) (int, error) {
	return o.Rewarm(ctx, from, add)
}

// TestStateFollowsPartition revokes a partition from one Set and assigns it to another sharing
// the checkpoint directory, as on a rebalance between replicas: the second Set remembers what the
// first saw, and re-warms from the output offsets the snapshot recorded.
func TestStateFollowsPartition(t *testing.T) {
	ctx := context.Background()
	p, store := dirPersister(t)
	var rewarmFrom map[int32]int64
	out := &fakeOutput{end: 42, rewarm: func(from map[int32]int64, add func([]byte, time.Time)) {
		rewarmFrom = from
		add([]byte("produced-after-the-snapshot"), time.Now())
	}}
	cfg := Config{Window: testWindow(), Topic: "orders", Persister: p, Output: out}
	a, err := NewSet(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewSet(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Assign(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		a.Seen(3, fmt.Appendf(nil, "id-%d", i), time.Time{})
	}
	if err := a.Revoke(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if infos, err := store.List(ctx, "orders.p3"); err != nil || len(infos) != 2 { // baseline + revoke
		t.Fatalf("snapshots of orders.p3: %v, %v; want the cold-start baseline and the revoke", infos, err)
	}
	if a.Filter(3) != nil || len(a.Partitions()) != 0 {
		t.Fatal("revoked partition still has state")
	}
	if err := b.Assign(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if rewarmFrom[3] != 42 {
		t.Fatalf("re-warmed from %v, want the recorded output offset 42", rewarmFrom)
	}
	for i := range 1000 {
		if !b.Seen(3, fmt.Appendf(nil, "id-%d", i), time.Time{}) {
			t.Fatalf("id-%d forgotten after the partition moved", i)
		}
	}
	if !b.Seen(3, []byte("produced-after-the-snapshot"), time.Time{}) {
		t.Fatal("re-warmed id not seen")
	}
	if b.Seen(3, []byte("new"), time.Time{}) {
		t.Fatal("a new id was reported seen")
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Assign(ctx, 4); err == nil {
		t.Fatal("Assign after Close succeeded")
	}
}

// TestSnapshotWaitsForAcks checks the seal rule: a snapshot that may contain identities of records
// not yet acknowledged by the output topic becomes visible only once they are, and is dropped if
// they never are. It runs in a synctest bubble: the seal timeout passes on the fake clock, and
// synctest.Wait proves the snapshot is waiting for the acknowledgement when it arrives.
func TestSnapshotWaitsForAcks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background()) // its Done channel is the bubble's
		defer cancel()
		p, store := dirPersister(t)
		s, err := NewSet(ctx, Config{Window: testWindow(), Persister: p, SealTimeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		if err := s.Assign(ctx, 0); err != nil {
			t.Fatal(err)
		}
		// Let the filter's rotation goroutine run its first tick: a snapshot holds the filter's
		// lock while it waits for the seal, and a rotation blocked on that lock (not a durable
		// block) would keep the fake clock from reaching the seal timeout.
		synctest.Wait()
		count := func() int {
			infos, err := store.List(ctx, s.Unit(0))
			if err != nil {
				t.Fatal(err)
			}
			return len(infos)
		}
		base := count()
		s.Processing(0, 10)
		s.Seen(0, []byte("in-flight"), time.Time{})
		// Never acknowledged: the snapshot must be dropped.
		if err := s.Checkpoint(ctx); !errors.Is(err, errSealTimeout) {
			t.Fatalf("Checkpoint = %v, want the seal timeout", err)
		}
		if count() != base {
			t.Fatal("a snapshot with unacknowledged identities became visible")
		}
		// Acknowledged while the snapshot waits: it must be saved then, and not before.
		done := make(chan error, 1)
		go func() { done <- s.Checkpoint(ctx) }()
		synctest.Wait() // the checkpoint has written its copy and blocks in the seal
		select {
		case err := <-done:
			t.Fatalf("Checkpoint = %v before the records were acknowledged", err)
		default:
		}
		if count() != base {
			t.Fatal("the snapshot became visible before its records were acknowledged")
		}
		s.Acked(0, 10)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if count() != base+1 {
			t.Fatal("acknowledged snapshot not saved")
		}
		// Discard never saves.
		s.Processing(0, 20)
		if err := s.Discard(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if count() != base+1 || s.Filter(0) != nil {
			t.Fatal("Discard saved or kept the state")
		}
	})
}

// TestRestoreFallsBackAndStartsCold corrupts the newest snapshot (fallback to the older one) and
// then changes the configuration (cold start).
func TestRestoreFallsBackAndStartsCold(t *testing.T) {
	ctx := context.Background()
	store, dir := dirStore(t)
	p := NewCheckpointPersister(store, slog.New(slog.DiscardHandler))
	cfg := Config{Window: testWindow(), Persister: p}
	s, err := NewSet(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Assign(ctx, 0); err != nil {
		t.Fatal(err)
	}
	s.Seen(0, []byte("old"), time.Time{})
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	s.Seen(0, []byte("newer"), time.Time{})
	if err := s.Revoke(ctx, 0); err != nil {
		t.Fatal(err)
	}
	infos, _ := store.List(ctx, s.Unit(0))
	newest := filepath.Join(dir, infos[0].Name)
	data, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(newest, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, r, err := p.Restore(ctx, s.Unit(0), cfg.Window)
	if err != nil || f == nil || r.Outcome != checkpoint.OutcomeFallback {
		t.Fatalf("Restore after corruption: f=%v outcome=%q err=%v, want a fallback", f != nil, r.Outcome, err)
	}
	if !f.Test([]byte("old")) || f.Test([]byte("newer")) {
		t.Fatal("fallback snapshot does not hold exactly the older state")
	}
	changed := cfg.Window
	changed.Generations++
	f, r, err = p.Restore(ctx, s.Unit(0), changed)
	if err != nil || f != nil || r.Outcome != checkpoint.OutcomeCold {
		t.Fatalf("Restore with a changed window: f=%v outcome=%q err=%v, want cold", f != nil, r.Outcome, err)
	}
}

func TestRevokeReportsSaveError(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("disk full")
	s, err := NewSet(ctx, Config{Window: testWindow(), Persister: failingPersister{boom}})
	if err != nil {
		t.Fatal(err)
	}
	// A failed baseline snapshot must not hold up the partition.
	if err := s.Assign(ctx, 0); err != nil {
		t.Fatalf("Assign = %v, want success despite the failing store", err)
	}
	if err := s.Revoke(ctx, 0); !errors.Is(err, boom) {
		t.Fatalf("Revoke error = %v, want %v", err, boom)
	}
	if s.Filter(0) != nil {
		t.Fatal("state kept after a failed save")
	}
}

// TestSeenDuringRebalance runs Seen on every partition while others are assigned and revoked:
// one goroutine per partition, as the worker does (a ScopePartition filter is single-writer).
func TestSeenDuringRebalance(t *testing.T) {
	ctx := context.Background()
	s, err := NewSet(ctx, Config{Window: testWindow()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if err := s.Assign(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if !s.windowFor(nil).SingleWriter { // the configuration its filters are built with
		t.Error("a ScopePartition filter is not single-writer")
	}
	// 8000 ids stay under the 10,000 capacity, so at 1e-9 no fresh id may be seen.
	var wg sync.WaitGroup
	for p := range int32(4) {
		wg.Go(func() {
			for i := range 8000 {
				id := fmt.Appendf(nil, "%d-%d", p, i)
				if s.Seen(p, id, time.Time{}) && p == 0 {
					t.Errorf("fresh id %s reported seen", id)
					return
				}
			}
		})
	}
	for i := range 50 {
		p := int32(1 + i%3)
		if err := s.Assign(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := s.Revoke(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if got := s.Stats(); len(got) != 1 || got[0].Name != "0" {
		t.Fatalf("Stats = %+v, want partition 0 only", got)
	}
}

// TestGlobalScopePersists restores the single global filter in NewSet, saves it on Close, and
// stops snapshotting it once a partition was discarded with unacknowledged records.
func TestGlobalScopePersists(t *testing.T) {
	ctx := context.Background()
	p, store := dirPersister(t)
	cfg := Config{Scope: ScopeGlobal, Window: testWindow(), Persister: p}
	a, err := NewSet(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []int32{0, 1} {
		if err := a.Assign(ctx, part); err != nil {
			t.Fatal(err)
		}
	}
	a.Seen(0, []byte("x"), time.Time{})
	if !a.Seen(1, []byte("x"), time.Time{}) {
		t.Fatal("global scope missed a cross-partition duplicate")
	}
	for _, part := range []int32{0, 1} {
		if err := a.Revoke(ctx, part); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := NewSet(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Assign(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if !b.Seen(0, []byte("x"), time.Time{}) {
		t.Fatal("global state lost across a restart")
	}
	before, _ := store.List(ctx, "global")
	b.Processing(0, 5)
	b.Seen(0, []byte("never-produced"), time.Time{})
	if err := b.Discard(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	after, _ := store.List(ctx, "global")
	if len(after) != len(before) || after[0].Name != before[0].Name {
		t.Fatal("a tainted global filter was snapshotted")
	}
}

// blockingPersister's Save waits on gate before calling seal, and remembers whether seal let the
// snapshot through.
type blockingPersister struct {
	entered chan struct{}
	gate    chan struct{}
	sealed  chan error
}

func (b *blockingPersister) Restore(context.Context, string, window.Config) (*window.Filter, Restored, error) {
	return nil, Restored{Outcome: checkpoint.OutcomeCold}, nil
}

func (b *blockingPersister) Save(ctx context.Context, unit string, f *window.Filter, info SnapshotInfo, seal func(context.Context) error) (SnapshotRef, SaveStats, error) {
	if b.gate == nil { // baseline
		return SnapshotRef{}, SaveStats{}, nil
	}
	close(b.entered)
	<-b.gate // the copy is taken here (f holds whatever was Seen so far)
	inSnapshot := f.Test([]byte("x"))
	err := seal(ctx)
	if err == nil && inSnapshot {
		b.sealed <- nil
	} else {
		b.sealed <- err
	}
	return SnapshotRef{}, SaveStats{}, err
}

func (b *blockingPersister) Newest(context.Context, string) (SnapshotRef, error) {
	return SnapshotRef{}, nil
}

// TestGlobalSealWaitsForLateAssignments: under global scope a partition assigned while a snapshot
// is being copied feeds the shared filter too, so the seal must wait for its acknowledgements.
func TestGlobalSealWaitsForLateAssignments(t *testing.T) {
	ctx := context.Background()
	p := &blockingPersister{}
	s, err := NewSet(ctx, Config{Scope: ScopeGlobal, Window: testWindow(), Persister: p, SealTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p.entered, p.gate, p.sealed = make(chan struct{}), make(chan struct{}), make(chan error, 1)
	done := make(chan error, 1)
	go func() { done <- s.Checkpoint(ctx) }() // loads the assigned partitions: none
	<-p.entered
	// Meanwhile the worker gets partition 0 and processes a batch whose produce is still in flight.
	if err := s.Assign(ctx, 0); err != nil {
		t.Fatal(err)
	}
	s.Processing(0, 10)
	s.Seen(0, []byte("x"), time.Time{}) // no Acked(0, 10): the record is not in the output topic
	close(p.gate)
	if err := <-p.sealed; err == nil {
		t.Error("snapshot sealed although it holds identity x whose record was processed but never acknowledged")
	}
	<-done
}

// TestRestoreUnderAnotherKeySpecStartsCold proves that a snapshot records the key spec its
// identities were extracted with, and that a persister with another key spec rejects it as
// incompatible (cold start, so the unit is rebuilt) and says why, while the same key spec
// restores it.
func TestRestoreUnderAnotherKeySpecStartsCold(t *testing.T) {
	ctx := context.Background()
	store, _ := dirStore(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	p := NewCheckpointPersister(store, log).WithKeySpec("json:meta.id")
	cfg := Config{Window: testWindow(), Persister: p}
	s, err := NewSet(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Assign(ctx, 0); err != nil {
		t.Fatal(err)
	}
	s.Seen(0, []byte("id-1"), time.Time{})
	if err := s.Revoke(ctx, 0); err != nil {
		t.Fatal(err)
	}
	f, r, err := NewCheckpointPersister(store, log).WithKeySpec("json:meta.id").Restore(ctx, s.Unit(0), cfg.Window)
	if err != nil || f == nil || !f.Test([]byte("id-1")) {
		t.Fatalf("Restore under the same key spec: f=%v outcome=%q err=%v, want the saved filter", f != nil, r.Outcome, err)
	}
	f, r, err = NewCheckpointPersister(store, log).WithKeySpec("header:event-id").Restore(ctx, s.Unit(0), cfg.Window)
	if err != nil || f != nil || r.Outcome != checkpoint.OutcomeCold {
		t.Fatalf("Restore under another key spec: f=%v outcome=%q err=%v, want cold", f != nil, r.Outcome, err)
	}
	if !strings.Contains(logs.String(), `DEDUP_KEY=\"json:meta.id\", this worker's is \"header:event-id\"`) {
		t.Errorf("the rejection does not name both key specs:\n%s", logs.String())
	}
}

// TestLateRotationKeepsTheWindow checks the window's promise when the filter's rotation goroutine
// fires late (a loaded machine): an identity judged in a batch at time t is remembered until
// t + (Generations-1) x Interval, not one interval less because it went to the generation before
// t's. The injected clock never wakes the goroutine, which stands for one that is late; the test
// then rotates the filter on time itself.
func TestLateRotationKeepsTheWindow(t *testing.T) {
	for _, scope := range []Scope{ScopePartition, ScopeGlobal} {
		t.Run(string(scope), func(t *testing.T) {
			ctx := context.Background()
			t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
			var mu sync.Mutex
			now := t0
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			set := func(d time.Duration) { mu.Lock(); now = t0.Add(d); mu.Unlock() }
			w := testWindow()
			w.Interval, w.Clock = time.Minute, clock
			s, err := NewSet(ctx, Config{Scope: scope, Window: w})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			if err := s.Assign(ctx, 0); err != nil {
				t.Fatal(err)
			}
			set(90 * time.Second) // generation 1; the goroutine has not rotated yet
			s.Processing(0, 1)
			if s.Seen(0, []byte("a"), time.Time{}) {
				t.Fatal("first sighting reported seen")
			}
			s.Acked(0, 1)
			set(4 * time.Minute) // 2.5 minutes later, within the 3 minutes promised
			s.part(0).f.AdvanceTo(clock())
			s.Processing(0, 2)
			if !s.Seen(0, []byte("a"), time.Time{}) {
				t.Fatal("identity judged 2.5 minutes ago forgotten: the window promises 3 (4 generations of 1 minute)")
			}
		})
	}
}
