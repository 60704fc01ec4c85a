package dedup

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// evBase is the start of the event-time tests' data: generation boundaries fall on whole hours.
var evBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at returns evBase plus h hours and m minutes.
func at(h, m int) time.Time {
	return evBase.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute)
}

// eventConfig is a Set configuration under ClockEvent with testWindow's 4 × 1h window and wall
// as the wall clock.
func eventConfig(scope Scope, wall *fakeClock) Config {
	w := testWindow()
	w.Clock = wall.now
	return Config{Scope: scope, Window: w, Clock: ClockEvent}
}

// evRecord is one record offered to a Set, with the answer Seen must give.
type evRecord struct {
	part int32
	id   string
	ts   time.Time
	dup  bool
}

func offer(t *testing.T, s *Set, recs []evRecord) {
	t.Helper()
	for i, r := range recs {
		if got := s.Seen(r.part, []byte(r.id), r.ts); got != r.dup {
			t.Fatalf("record %d: Seen(%d, %s, %s) = %v, want %v", i, r.part, r.id, r.ts.Format("Jan 2 15:04"), got, r.dup)
		}
	}
}

func newAssigned(t *testing.T, cfg Config, parts ...int32) *Set {
	t.Helper()
	ctx := context.Background()
	s, err := NewSet(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(ctx) })
	for _, p := range parts {
		if err := s.Assign(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// TestEventTimeSeen checks Seen under ClockEvent with a wall clock a day ahead of the data (a
// replay): in-order re-sends within the window are duplicates, re-sends after it pass once,
// out-of-order records go to their own generation and expire by their own time, and late records
// are passed or dropped by the policy and counted.
func TestEventTimeSeen(t *testing.T) {
	for _, policy := range []LatePolicy{LatePass, LateDrop} {
		t.Run(string(policy), func(t *testing.T) {
			cfg := eventConfig(ScopePartition, newFakeClock(at(24, 0)))
			cfg.LateRecords = policy
			s := newAssigned(t, cfg, 0)
			drop := policy == LateDrop
			offer(t, s, []evRecord{
				{id: "a", ts: at(0, 0)},
				{id: "a", ts: at(2, 0), dup: true},  // a re-send 2 h later
				{id: "a", ts: at(2, 59), dup: true}, // and just under 3 h
				{id: "b", ts: at(4, 30)},            // stream time 4:30: generation 0 expired
				{id: "a", ts: at(4, 30)},            // a re-send 4.5 h later passes
				{id: "a", ts: at(4, 40), dup: true}, // once
				{id: "d", ts: at(2, 10)},            // out of order: generation 2
				{id: "d", ts: at(4, 50), dup: true}, // judged against generation 2
				{id: "e", ts: at(4, 40)},
				{id: "s", ts: at(6, 0)},             // stream time 6:00: generation 2 expired with d
				{id: "d", ts: at(6, 1)},             // d expired by its own time
				{id: "e", ts: at(6, 2), dup: true},  // e, in generation 4, did not
				{id: "f", ts: at(1, 0), dup: drop},  // late: before generation 3
				{id: "f", ts: at(1, 0), dup: drop},  // and not added
				{id: "f", ts: at(3, 0)},             // the oldest live generation
				{id: "f", ts: at(6, 10), dup: true}, // remembered there
			})
			if got := s.Late(); got != 2 {
				t.Errorf("Late() = %d, want 2", got)
			}
			if st := s.Stats()[0].StreamTime; !st.Equal(at(6, 10)) {
				t.Errorf("stream time %v, want the highest timestamp %v", st, at(6, 10))
			}
		})
	}
}

// TestEventTimeCap checks that a timestamp far ahead of the wall clock advances the stream time
// only to the wall clock plus MaxAhead, and is judged there: the window is not wiped.
func TestEventTimeCap(t *testing.T) {
	cfg := eventConfig(ScopePartition, newFakeClock(at(6, 30)))
	s := newAssigned(t, cfg, 0)
	offer(t, s, []evRecord{
		{id: "g3", ts: at(3, 0)},
		{id: "g5", ts: at(5, 0)},
		{id: "g6", ts: at(6, 20)},
		{id: "future", ts: at(24*365*10, 0)}, // a producer's clock ten years ahead
		{id: "future", ts: at(7, 0), dup: true},
		{id: "g5", ts: at(7, 1), dup: true}, // stream time 7:30: generations 4 … 7 live
		{id: "g6", ts: at(7, 2), dup: true},
		{id: "g3", ts: at(7, 3)}, // generation 3 expired by one interval of stream time, no more
	})
	if got := s.Capped(); got != 1 {
		t.Errorf("Capped() = %d, want 1", got)
	}
	if st := s.Stats()[0].StreamTime; !st.Equal(at(7, 30)) {
		t.Errorf("stream time %v, want the cap %v", st, at(7, 30))
	}
}

// TestEventTimeIdlePartitions checks how partitions that skew apart are judged: under
// ScopePartition an idle partition does not age while another moves on; under ScopeGlobal the
// fastest partition drives the shared stream time, and a lagging partition's records become late
// once they fall before the oldest live generation.
func TestEventTimeIdlePartitions(t *testing.T) {
	for _, tt := range []struct {
		scope  Scope
		lagDup bool // is p1's re-send at 2:00 a duplicate of its record at 0:30?
		late   uint64
	}{
		{ScopePartition, true, 0},
		{ScopeGlobal, false, 1},
	} {
		t.Run(string(tt.scope), func(t *testing.T) {
			s := newAssigned(t, eventConfig(tt.scope, newFakeClock(at(24, 0))), 0, 1)
			offer(t, s, []evRecord{
				{part: 1, id: "x", ts: at(0, 30)},
				{part: 0, id: "y", ts: at(6, 0)}, // partition 0 runs ahead; partition 1 is idle
				{part: 1, id: "x", ts: at(2, 0), dup: tt.lagDup},
			})
			if got := s.Late(); got != tt.late {
				t.Errorf("Late() = %d, want %d", got, tt.late)
			}
		})
	}
}

// TestEventTimeRestart saves a partition under ClockEvent, restores it in a new Set while the wall
// clock is ten days later, and re-warms it from the output topic: the stream time resumes where
// the data left off (nothing expires by the wall clock), and every re-warmed identity lands in
// the generation of its record's timestamp.
func TestEventTimeRestart(t *testing.T) {
	ctx := context.Background()
	wall := newFakeClock(at(5, 30))
	p, _ := dirPersister(t)
	var rewarmed []fakeRecord
	out := &fakeOutput{end: 7, rewarm: func(_ map[int32]int64, add func([]byte, time.Time)) {
		for _, r := range rewarmed {
			add([]byte(r.id), r.ts)
		}
	}}
	cfg := eventConfig(ScopePartition, wall)
	cfg.Persister, cfg.Output = p, out
	a := newAssigned(t, cfg, 0)
	offer(t, a, []evRecord{
		{id: "g1", ts: at(1, 10)},
		{id: "g2", ts: at(2, 10)},
		{id: "g5", ts: at(5, 10)},
	})
	if err := a.Revoke(ctx, 0); err != nil {
		t.Fatal(err)
	}
	wall.set(at(24*10, 0))
	rewarmed = []fakeRecord{
		{id: "r2", ts: at(2, 20)}, // after the snapshot, produced out of order
		{id: "r5", ts: at(5, 20)},
		{id: "r6", ts: at(6, 10)}, // opens generation 6: generation 2 expires
	}
	b := newAssigned(t, cfg, 0)
	if st := b.Stats()[0].StreamTime; !st.Equal(at(6, 10)) {
		t.Errorf("stream time after the restore and re-warm: %v, want %v", st, at(6, 10))
	}
	offer(t, b, []evRecord{
		{id: "g1", ts: at(6, 11)},            // generation 1 had expired before the snapshot
		{id: "g5", ts: at(6, 12), dup: true}, // kept across the restart, ten days of wall clock later
		{id: "r5", ts: at(6, 13), dup: true}, // re-warmed into generation 5
		{id: "r6", ts: at(6, 14), dup: true},
		{id: "r2", ts: at(6, 15)}, // re-warmed into generation 2, which expired at 6:00
		{id: "g2", ts: at(6, 16)},
		{id: "z", ts: at(9, 0)},             // generation 5 expires
		{id: "r5", ts: at(9, 1)},            // with r5, by its own time
		{id: "r6", ts: at(9, 2), dup: true}, // r6 in generation 6 stays
	})
}

// TestEventTimeRebuild rebuilds a cold filter under ClockEvent: each output record of the window
// lands in the generation of its timestamp. The window ends at the newest output record's time, so
// a replay far behind the wall clock is rebuilt as well as a live stream.
func TestEventTimeRebuild(t *testing.T) {
	for _, tc := range []struct {
		name string
		wall time.Time // the wall clock at the rebuild
	}{
		{"live", at(6, 30)},
		{"replay two days behind", at(54, 30)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wall := newFakeClock(tc.wall)
			topic := &fakeTopic{parts: map[int32][]fakeRecord{0: {
				{id: "r3", ts: at(3, 40)},
				{id: "r5", ts: at(5, 40)},
				{id: "r4", ts: at(4, 40)}, // out of order
				{id: "r6", ts: at(6, 10)},
			}}}
			cfg := eventConfig(ScopePartition, wall)
			cfg.Output, cfg.RebuildMaxRecords = topic, 1000
			s := newAssigned(t, cfg, 0)
			wall.set(tc.wall.Add(24 * time.Hour)) // so that the cap lets the records below advance the stream time
			recs := []evRecord{{id: "r3", ts: at(6, 20), dup: true}}
			for h := 7; h <= 9; h++ { // each hour of stream time expires one generation
				id := fmt.Sprintf("r%d", h-4)
				recs = append(recs, evRecord{id: "tick", ts: at(h, 0), dup: h > 7}, evRecord{id: id, ts: at(h, 1)})
				if h < 9 {
					recs = append(recs, evRecord{id: fmt.Sprintf("r%d", h-3), ts: at(h, 2), dup: true})
				}
			}
			offer(t, s, recs)
		})
	}
}

// TestEventTimeGlobalOneWinner offers the same identities from every partition at once under
// ScopeGlobal and ClockEvent, with timestamps that move the shared stream time across generation
// boundaries while the partitions race: every identity must pass exactly once (all are stamped
// within 3 h of each other, so none may pass twice, and none is late).
func TestEventTimeGlobalOneWinner(t *testing.T) {
	const parts, ids = 4, 20_000
	s := newAssigned(t, eventConfig(ScopeGlobal, newFakeClock(at(24, 0))), 0, 1, 2, 3)
	passed := make([]atomic.Int32, ids)
	var wg sync.WaitGroup
	for p := range int32(parts) {
		wg.Go(func() {
			for j := range ids {
				i := (j + int(p)*997) % ids
				// Identity i is stamped between 0:00 and 2:47, in order of i: each partition
				// drives the stream time forward from its own place in the sequence.
				ts := evBase.Add(time.Duration(i) * 500 * time.Millisecond)
				if !s.Seen(p, fmt.Appendf(nil, "id-%d", i), ts) {
					passed[i].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for i := range passed {
		if n := passed[i].Load(); n != 1 {
			t.Fatalf("id-%d passed %d times", i, n)
		}
	}
	if s.Late() != 0 {
		t.Errorf("%d late records", s.Late())
	}
}

// newBenchSet returns a Set of cfg with testWindow's 4 generations of 4M keys at 1e-3, partition
// 0 assigned; it is closed at the end of the benchmark.
func newBenchSet(b *testing.B, cfg Config) *Set {
	b.Helper()
	cfg.Window = testWindow()
	cfg.Window.Capacity = 1 << 22
	cfg.Window.FalsePositiveRate = 1e-3
	s, err := NewSet(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close(context.Background()) })
	if err := s.Assign(context.Background(), 0); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkSeenClock compares Set.Seen under ClockEvent (in-order timestamps, one generation
// boundary every 3.6M records) with ClockProcessing, on one partition with all four generations
// live, in the same run; quote the ratio:
//
//	go test ./dedup -run '^$' -bench SeenClock -count 5
func BenchmarkSeenClock(b *testing.B) {
	for _, clock := range []Clock{ClockProcessing, ClockEvent} {
		b.Run(string(clock), func(b *testing.B) {
			s := newBenchSet(b, Config{Clock: clock})
			if clock == ClockProcessing {
				// All N generations live, as in steady state and as the event-time filter has
				// them from its first record: each test reads N cache lines.
				s.Filter(0).AdvanceTo(time.Now().Add(3 * time.Hour))
			}
			start := time.Now().Add(-time.Hour)
			var key [8]byte
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				binary.LittleEndian.PutUint64(key[:], uint64(i)*0x9e3779b97f4a7c15)
				s.Seen(0, key[:], start.Add(time.Duration(i)*time.Microsecond))
			}
		})
	}
}
