package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/window"
)

// gatedPersister holds the first Save of unit (once armed) until gate is closed, as a slow store
// would: entered is closed when it starts waiting.
type gatedPersister struct {
	Persister
	unit    string
	armed   atomic.Bool
	once    sync.Once
	entered chan struct{}
	gate    chan struct{}
}

func (p *gatedPersister) Save(ctx context.Context, unit string, f *window.Filter, info SnapshotInfo, seal func(context.Context) error) (SnapshotRef, SaveStats, error) {
	if unit == p.unit && p.armed.Load() {
		waited := false
		p.once.Do(func() { waited = true })
		if waited {
			close(p.entered)
			select {
			case <-p.gate:
			case <-ctx.Done():
				return SnapshotRef{}, SaveStats{}, ctx.Err()
			}
		}
	}
	return p.Persister.Save(ctx, unit, f, info, seal)
}

// owner is a generation's ownership as the worker reports it to Generation: owned until lose.
type owner struct{ lost atomic.Bool }

var errLost = errors.New("generation lost (test)")

func (o *owner) owns(context.Context) error {
	if o.lost.Load() {
		return errLost
	}
	return nil
}

// handle passes ids of partition q through s as one acknowledged batch ending at next, producing
// the new ones to topic.
func handle(t *testing.T, s *Set, topic *fakeTopic, q int32, next int64, ids ...string) {
	t.Helper()
	s.Processing(q, next)
	for _, id := range ids {
		if !s.Seen(q, []byte(id), time.Time{}) {
			topic.produce(q, id)
		}
	}
	s.Acked(q, next)
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// fenceEnv is two replicas' Sets over one store and one output topic.
type fenceEnv struct {
	store Persister
	topic *fakeTopic
}

func newFenceEnv(t *testing.T) *fenceEnv {
	p, _ := dirPersister(t)
	return &fenceEnv{store: p, topic: &fakeTopic{parts: map[int32][]fakeRecord{0: nil, 1: nil}}}
}

func (e *fenceEnv) set(t *testing.T, p Persister, concurrency int) *Set {
	t.Helper()
	s, err := NewSet(context.Background(), Config{Window: testWindow(), Topic: "orders", Persister: p, Output: e.topic,
		SaveConcurrency: concurrency, SealTimeout: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// heldBy reports the ids of want that a fresh replica restoring partition q misses: what would
// leak after a restart.
func (e *fenceEnv) missedAfterRestart(t *testing.T, q int32, want []string) int {
	t.Helper()
	s := e.set(t, e.store, 0)
	s.Generation(9, []int32{q}, nil)
	if err := s.Assign(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	missed := 0
	for _, id := range want {
		if !s.Filter(q).Test([]byte(id)) {
			missed++
		}
	}
	return missed
}

// TestZombieFinalSave: replica A is paused past its session timeout; its partition moves to B,
// which produces more and saves. When A resumes, its generation is lost, so its final save must
// not publish: that save would read the output's end, past B's records, and copy a filter that
// lacks them. Then B's partition goes through a rebalance (revoked, assigned back) and a
// restart: B's records stay duplicates in both.
func TestZombieFinalSave(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check bool
	}{
		{"ownership checked", true},
		// The pause falls between the ownership check and the save: the store's owner epochs fence it.
		{"store fence alone", false},
	} {
		t.Run(tc.name, func(t *testing.T) { zombieFinalSave(t, tc.check) })
	}
}

func zombieFinalSave(t *testing.T, check bool) {
	ctx := context.Background()
	e := newFenceEnv(t)
	a, b := e.set(t, e.store, 0), e.set(t, e.store, 0)
	var ownA owner
	owns := ownA.owns
	if !check {
		owns = nil
	}
	a.Generation(1, []int32{1}, owns)
	if err := a.Assign(ctx, 1); err != nil {
		t.Fatal(err)
	}
	handle(t, a, e.topic, 1, 100, ids("before", 50)...)
	if err := a.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	handle(t, a, e.topic, 1, 110, ids("last", 5)...) // records flow when A pauses
	// A pauses; the coordinator expels it and gives partition 1 to B.
	ownA.lost.Store(true)
	b.Generation(2, []int32{1}, nil)
	if err := b.Assign(ctx, 1); err != nil {
		t.Fatal(err)
	}
	handle(t, b, e.topic, 1, 200, ids("moved", 50)...)
	if err := b.Revoke(ctx, 1); err != nil { // a rebalance of the new owner begins: its snapshot
		t.Fatal(err)
	}
	// A resumes and releases its partition.
	if err := a.Revoke(ctx, 1); err == nil {
		t.Error("a replica whose generation was lost saved its partition")
	} else if check && !errors.Is(err, errNotOwned) {
		t.Errorf("the refused save's error %q is not errNotOwned", err)
	}
	if n := e.missedAfterRestart(t, 1, ids("moved", 50)); n != 0 {
		t.Errorf("after a restart, %d of the new owner's 50 records would leak", n)
	}
	// The partition comes back to B, which kept its filter: it may reuse it only if the store
	// holds nothing newer than its own snapshot.
	b.Generation(3, []int32{1}, nil)
	if err := b.Assign(ctx, 1); err != nil {
		t.Fatal(err)
	}
	missed := 0
	for _, id := range ids("moved", 50) {
		if !b.Filter(1).Test([]byte(id)) {
			missed++
		}
	}
	if missed != 0 {
		t.Errorf("after the rebalance, the new owner forgot %d of its 50 records", missed)
	}
}

// TestRefusedSaveIsNotAnError: a periodic save refused because the ownership of its partition
// is not confirmed (the partition may have moved: expected around a rebalance) returns
// errNotOwned and is logged at Warn, not as a failed checkpoint at Error.
func TestRefusedSaveIsNotAnError(t *testing.T) {
	ctx := context.Background()
	e := newFenceEnv(t)
	var logs levelCounts
	s, err := NewSet(ctx, Config{Window: testWindow(), Topic: "orders", Persister: e.store, Output: e.topic,
		SealTimeout: time.Minute, Logger: slog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	var own owner
	s.Generation(1, []int32{1}, own.owns)
	if err := s.Assign(ctx, 1); err != nil {
		t.Fatal(err)
	}
	handle(t, s, e.topic, 1, 100, ids("before", 20)...)
	own.lost.Store(true)
	handle(t, s, e.topic, 1, 110, ids("after", 5)...)
	if err := s.Checkpoint(ctx); !errors.Is(err, errNotOwned) || !errors.Is(err, errLost) {
		t.Fatalf("checkpoint without ownership: %v, want errNotOwned wrapping the ownership check's error", err)
	}
	if w, e := logs.get(slog.LevelWarn), logs.get(slog.LevelError); w != 1 || e != 0 {
		t.Errorf("a refused save logged %d warnings and %d errors, want 1 and 0", w, e)
	}
}

// levelCounts is a slog.Handler that counts records by level; safe for concurrent use.
type levelCounts struct {
	mu sync.Mutex
	n  map[slog.Level]int
}

func (h *levelCounts) Enabled(context.Context, slog.Level) bool { return true }
func (h *levelCounts) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *levelCounts) WithGroup(string) slog.Handler            { return h }
func (h *levelCounts) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[slog.Level]int{}
	}
	h.n[r.Level]++
	return nil
}

func (h *levelCounts) get(l slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[l]
}

// TestQueuedSaveDuringHandover: a periodic save of partition 1 waits for the only save slot behind
// a slow final save of partition 0; meanwhile partition 1 is handed over and its new owner
// produces. Once the queued save gets its slot it must not save: it would read the output's end
// after the handover and publish a filter that lacks the new owner's records. The handover is a
// lost generation (the release outlived the rebalance timeout), or a release that discarded the
// partition while the rest of the release waited for the store.
func TestQueuedSaveDuringHandover(t *testing.T) {
	for _, tc := range []struct {
		name     string
		handover func(a *Set, own *owner)
	}{
		{"generation lost", func(_ *Set, own *owner) { own.lost.Store(true) }},
		{"released", func(a *Set, _ *owner) { a.Discard(context.Background(), 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e := newFenceEnv(t)
			slow := &gatedPersister{Persister: e.store, unit: "orders.p0", entered: make(chan struct{}), gate: make(chan struct{})}
			a, b := e.set(t, slow, 1), e.set(t, e.store, 0)
			var ownA owner
			a.Generation(1, []int32{0, 1}, ownA.owns)
			for _, q := range []int32{0, 1} {
				if err := a.Assign(ctx, q); err != nil {
					t.Fatal(err)
				}
				handle(t, a, e.topic, q, 100, ids(fmt.Sprint("before", q), 20)...)
			}
			slow.armed.Store(true)
			revoked := make(chan error, 1)
			go func() { revoked <- a.Revoke(ctx, 0) }() // takes the only slot, then waits for the store
			select {
			case <-slow.entered:
			case <-time.After(time.Minute):
				t.Fatal("the slow save never started")
			}
			checkpointed := make(chan error, 1)
			go func() { checkpointed <- a.Checkpoint(ctx) }() // partition 1's save waits for the slot
			tc.handover(a, &ownA)
			b.Generation(2, []int32{1}, nil)
			if err := b.Assign(ctx, 1); err != nil {
				t.Fatal(err)
			}
			handle(t, b, e.topic, 1, 200, ids("moved", 50)...)
			close(slow.gate)
			for _, ch := range []chan error{revoked, checkpointed} {
				select {
				case <-ch:
				case <-time.After(time.Minute):
					t.Fatal("a save never ended")
				}
			}
			if n := e.missedAfterRestart(t, 1, ids("moved", 50)); n != 0 {
				t.Fatalf("after a restart, %d of the new owner's 50 records would leak", n)
			}
		})
	}
}

// sealSignal is a Persister whose Save reports, once armed, that the save of unit started to seal.
type sealSignal struct {
	Persister
	unit    string
	armed   atomic.Bool
	once    sync.Once
	sealing chan struct{}
}

func (p *sealSignal) Save(ctx context.Context, unit string, f *window.Filter, info SnapshotInfo, seal func(context.Context) error) (SnapshotRef, SaveStats, error) {
	if unit != p.unit || !p.armed.Load() {
		return p.Persister.Save(ctx, unit, f, info, seal)
	}
	signalled := func(ctx context.Context) error {
		p.once.Do(func() { close(p.sealing) })
		return seal(ctx)
	}
	return p.Persister.Save(ctx, unit, f, info, signalled)
}

// TestDiscardEndsSealingSave: a periodic save sealing a partition whose batch is never
// acknowledged (its transaction was fenced) gives up when the partition is discarded, instead of
// holding its save slot until the seal timeout, so the next generation's final saves get a slot.
func TestDiscardEndsSealingSave(t *testing.T) {
	ctx := context.Background()
	e := newFenceEnv(t)
	store := &sealSignal{Persister: e.store, unit: "orders.p0", sealing: make(chan struct{})}
	var logs levelCounts
	s, err := NewSet(ctx, Config{Window: testWindow(), Topic: "orders", Persister: store, Output: e.topic,
		SaveConcurrency: 1, SealTimeout: time.Hour, Logger: slog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(ctx) })
	s.Generation(1, []int32{0}, nil)
	if err := s.Assign(ctx, 0); err != nil {
		t.Fatal(err)
	}
	s.Processing(0, 100) // a batch handed to Seen whose output is never acknowledged
	s.Seen(0, []byte("unacked"), time.Time{})
	store.armed.Store(true)
	checkpointed := make(chan error, 1)
	go func() { checkpointed <- s.Checkpoint(ctx) }()
	select {
	case <-store.sealing:
	case <-time.After(time.Minute):
		t.Fatal("the save never started to seal")
	}
	s.Discard(ctx, 0)
	select {
	case err := <-checkpointed:
		if !errors.Is(err, errDiscarded) {
			t.Fatalf("Checkpoint = %v, want errDiscarded", err)
		}
		if n := logs.get(slog.LevelError); n != 0 { // the discard is the worker's to log
			t.Errorf("the save the discard dropped logged %d errors, want 0", n)
		}
	case <-time.After(time.Minute):
		t.Fatal("the sealing save still holds its slot after the partition was discarded")
	}
	s.Generation(2, []int32{1}, nil)
	if err := s.Assign(ctx, 1); err != nil {
		t.Fatal(err)
	}
	handle(t, s, e.topic, 1, 10, ids("next", 5)...)
	if err := s.Revoke(ctx, 1); err != nil {
		t.Fatalf("the next generation's final save: %v", err)
	}
}
