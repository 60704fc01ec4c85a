package consumer_test

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/segmentio/kafka-go"
)

// genLog is a slog.Handler that records, per consumer group generation, the partitions the
// worker logged at "generation started".
type genLog struct {
	mu   sync.Mutex
	gens map[int64][]int
}

func (g *genLog) Enabled(context.Context, slog.Level) bool { return true }
func (g *genLog) WithAttrs([]slog.Attr) slog.Handler       { return g }
func (g *genLog) WithGroup(string) slog.Handler            { return g }
func (g *genLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "generation started" {
		var gen int64
		var parts []int
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "generation":
				gen = a.Value.Int64()
			case "partitions":
				parts, _ = a.Value.Any().([]int)
			}
			return true
		})
		g.mu.Lock()
		if g.gens == nil {
			g.gens = map[int64][]int{}
		}
		g.gens[gen] = slices.Clone(parts)
		g.mu.Unlock()
	}
	return testLog.Handler().Handle(ctx, r)
}

func (g *genLog) snapshot() map[int64][]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.gens)
}

// generations merges the workers' logs: generation → worker index → partitions.
func generations(logs []*genLog) map[int64]map[int][]int {
	out := map[int64]map[int][]int{}
	for i, l := range logs {
		for gen, parts := range l.snapshot() {
			if out[gen] == nil {
				out[gen] = map[int][]int{}
			}
			out[gen][i] = parts
		}
	}
	return out
}

// complete reports whether a generation's assignment covers every partition of n exactly once,
// among exactly members workers.
func complete(a map[int][]int, members, n int) bool {
	seen := map[int]bool{}
	for _, ps := range a {
		for _, p := range ps {
			if seen[p] {
				return false
			}
			seen[p] = true
		}
	}
	return len(a) == members && len(seen) == n
}

// waitSettled waits until the newest generation of the workers that logged to logs has them all
// hold every one of parts partitions, once each of them reached it, and returns it.
func waitSettled(t *testing.T, logs []*genLog, parts int, timeout time.Duration, what string) int64 {
	t.Helper()
	var newest int64
	eventually(t, timeout, what, func() bool {
		gens := generations(logs)
		if len(gens) == 0 {
			return false
		}
		newest = slices.Max(slices.Collect(maps.Keys(gens)))
		return complete(gens[newest], len(logs), parts)
	})
	return newest
}

// TestStickyAssignmentOnJoin runs two workers, then a third, on kfake with 12 partitions, and
// counts the partitions that changed owner between the last generation of two workers and the
// first generation of three, from the generation logs: the sticky balancer moves only the
// newcomer's share (4), where range would move 6.
func TestStickyAssignmentOnJoin(t *testing.T) {
	t.Parallel()
	const parts = 12
	e := newEnv(t, parts, parts, embedkafka.Options{})
	logs := []*genLog{{}, {}, {}}
	var workers []*running
	start := func(i int) {
		workers = append(workers, e.startLogged(e.config(), newMapDeduper(false, nil), keyFuncFor(t, "key"), slog.New(logs[i])))
	}
	start(0)
	waitSettled(t, logs[:1], parts, 20*time.Second, "worker 0 alone in a generation")
	start(1)
	waitSettled(t, logs[:2], parts, 30*time.Second, "two workers sharing the partitions")
	start(2)
	g3 := waitSettled(t, logs, parts, 30*time.Second, "three workers sharing the partitions")
	gens := generations(logs)
	// The last generation before g3 in which the two first workers held every partition.
	var g2 int64 = -1
	for g, a := range gens {
		if g < g3 && g > g2 && complete(a, 2, parts) {
			g2 = g
		}
	}
	if g2 < 0 {
		t.Fatalf("no two-worker generation before %d: %v", g3, gens)
	}
	before, after := gens[g2], gens[g3]
	moved := 0
	for w, ps := range after {
		for _, p := range ps {
			if !slices.Contains(before[w], p) {
				moved++
			}
		}
	}
	t.Logf("generation %d: %v; generation %d: %v; %d partitions moved", g2, before, g3, after, moved)
	if limit := (parts+2)/3 + 1; moved > limit {
		t.Errorf("%d partitions moved when a third worker joined, want at most %d", moved, limit)
	}
	if moved != len(after[2]) {
		t.Errorf("%d partitions moved but the newcomer got %d: the old workers swapped partitions", moved, len(after[2]))
	}
	for i, r := range workers {
		if err := r.stop(t, 10*time.Second); err != nil {
			t.Errorf("worker %d: %v", i, err)
		}
	}
}

// recordingSticky is a StickyBalancer that counts the assignments it computed as group leader for
// more than one member.
type recordingSticky struct {
	kafkaio.StickyBalancer
	calls atomic.Int32
}

func (r *recordingSticky) AssignGroups(m []kafka.GroupMember, p []kafka.Partition) kafka.GroupMemberAssignments {
	if len(m) > 1 {
		r.calls.Add(1)
	}
	return r.StickyBalancer.AssignGroups(m, p)
}

// TestStickyMixedGroup joins two members to one group. Both offering the sticky and the range
// protocols agree on sticky. A member offering both with one offering range only (an older kdedup
// during a rolling upgrade) agree on range: they share a generation, and the sticky balancer never
// assigned for both (the first member alone may use it; had the coordinator picked sticky for
// both, a range-only leader could not assign at all).
func TestStickyMixedGroup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		rangeOnly  bool // the second member offers range only
		wantSticky bool
	}{
		{"both sticky", false, true},
		{"sticky and range-only", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 4, 4, embedkafka.Options{})
			sticky := []*recordingSticky{{}, {}}
			balancers := [][]kafka.GroupBalancer{
				{sticky[0], kafka.RangeGroupBalancer{}},
				{sticky[1], kafka.RangeGroupBalancer{}},
			}
			if tc.rangeOnly {
				balancers[1] = []kafka.GroupBalancer{kafka.RangeGroupBalancer{}}
			}
			shared := joinAll(t, e, balancers)
			calls := sticky[0].calls.Load() + sticky[1].calls.Load()
			t.Logf("shared generation %v; sticky balancer assigned for both %d times", shared, calls)
			if (calls > 0) != tc.wantSticky {
				t.Errorf("sticky balancer ran %d times, want it to run: %v", calls, tc.wantSticky)
			}
		})
	}
}

// joinAll makes one consumer group member per balancer list and returns the first generation in
// which they share the input partitions: member index → partitions.
func joinAll(t *testing.T, e *env, balancers [][]kafka.GroupBalancer) map[int][]int {
	t.Helper()
	var mu sync.Mutex
	gens := map[int32]map[int][]int{} // generation → member → partitions
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i, b := range balancers {
		cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
			ID: "mixed", Brokers: e.cl.Addrs(), Topics: []string{e.in}, GroupBalancers: b,
			HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 2 * time.Second, RebalanceTimeout: 2 * time.Second,
			JoinGroupBackoff: 100 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cg.Close() })
		wg.Go(func() {
			for ctx.Err() == nil {
				gen, err := cg.Next(ctx)
				if err != nil {
					continue
				}
				var ps []int
				for _, a := range gen.Assignments[e.in] {
					ps = append(ps, a.ID)
				}
				mu.Lock()
				if gens[gen.ID] == nil {
					gens[gen.ID] = map[int][]int{}
				}
				gens[gen.ID][i] = ps
				mu.Unlock()
			}
		})
	}
	var shared map[int][]int
	eventually(t, 30*time.Second, "all members in one generation", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range gens {
			if complete(a, len(balancers), e.inParts) {
				shared = a
				return true
			}
		}
		return false
	})
	return shared
}
