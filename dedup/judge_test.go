package dedup

import (
	"fmt"
	"testing"
	"time"

	"github.com/kdedup/kdedup/window"
)

// TestJudgeLate proves that Judge tells a late record dropped by LateDrop from a duplicate, and
// that Seen agrees with it.
func TestJudgeLate(t *testing.T) {
	cfg := eventConfig(ScopePartition, newFakeClock(at(24, 0)))
	cfg.LateRecords = LateDrop
	s := newAssigned(t, cfg, 0)
	for i, r := range []struct {
		id   string
		hour int
		want Verdict
	}{
		{"a", 0, VerdictNew},
		{"a", 1, VerdictDuplicate},
		{"b", 6, VerdictNew}, // stream time 6:00: generations before 3:00 expired
		{"c", 1, VerdictLate},
		{"b", 6, VerdictDuplicate},
	} {
		if got := s.Judge(0, []byte(r.id), at(r.hour, 0)); got != r.want {
			t.Fatalf("record %d (%s at %d:00): verdict %d, want %d", i, r.id, r.hour, got, r.want)
		}
	}
}

// TestJudgeOverload proves that once Stats found a filter at its memory cap under OverloadDrop,
// Judge reports what it drops as VerdictOverload, and as VerdictDuplicate under OverloadPass.
func TestJudgeOverload(t *testing.T) {
	w := window.Config{Generations: 2, Interval: 1 << 40, Capacity: 1000, FalsePositiveRate: 1e-6}
	base := newAssigned(t, Config{Scope: ScopePartition, Window: w}, 0).Stats()[0].TotalBytes
	for _, tc := range []struct {
		policy window.OverloadPolicy
		want   Verdict
	}{{window.OverloadDrop, VerdictOverload}, {window.OverloadPass, VerdictDuplicate}} {
		t.Run(fmt.Sprint(tc.policy), func(t *testing.T) {
			cw := w
			cw.MaxBytes, cw.Overload = base, tc.policy // no room for a second stage
			s := newAssigned(t, Config{Scope: ScopePartition, Window: cw}, 0)
			if got := s.Judge(0, []byte("first"), at(0, 0)); got != VerdictNew {
				t.Fatalf("first record: verdict %d", got)
			}
			if got := s.Judge(0, []byte("first"), at(0, 0)); got != VerdictDuplicate {
				t.Fatalf("below the cap: verdict %d, want a duplicate", got)
			}
			for i := range 5000 {
				s.Judge(0, fmt.Appendf(nil, "k%d", i), at(0, 0))
			}
			if st := s.Stats()[0]; !st.AtCap {
				t.Fatalf("filter not at its cap: %d bytes of %d, %d stages", st.TotalBytes, st.MaxBytes, st.Stages)
			}
			if got := s.Judge(0, []byte("first"), at(0, 0)); got != tc.want {
				t.Errorf("at the cap: verdict %d, want %d", got, tc.want)
			}
		})
	}
}

// TestJudgeBatchMatchesJudge proves that JudgeBatch gives every identity the verdict that Judge
// gives it one call after another on a twin Set, skips nil identities, and counts those of a
// partition not assigned; batches repeat identities within and beyond the prefetch distance.
func TestJudgeBatchMatchesJudge(t *testing.T) {
	plain := window.Config{Generations: 4, Interval: 1 << 40, Auto: true, FalsePositiveRate: 1e-6}
	capped := window.Config{Generations: 2, Interval: 1 << 40, Capacity: 1000, FalsePositiveRate: 1e-6}
	capped.MaxBytes = newAssigned(t, Config{Scope: ScopePartition, Window: capped}, 0).Stats()[0].TotalBytes
	refresh := Config{Scope: ScopePartition, Window: plain, Refresh: true}
	event := eventConfig(ScopePartition, newFakeClock(at(24, 0)))
	event.LateRecords = LateDrop
	for _, tc := range []struct {
		name string
		cfg  Config
		part int32   // the partition judged; 0 is assigned
		want Verdict // a verdict some identity must get
	}{
		{"processing", Config{Scope: ScopePartition, Window: plain}, 0, VerdictDuplicate},
		{"refresh", refresh, 0, VerdictDuplicate},
		{"event-time", event, 0, VerdictLate},
		{"at-cap", Config{Scope: ScopePartition, Window: capped}, 0, VerdictOverload},
		{"unassigned", Config{Scope: ScopePartition, Window: plain}, 5, VerdictNew},
	} {
		t.Run(tc.name, func(t *testing.T) {
			batched, single := newAssigned(t, tc.cfg, 0), newAssigned(t, tc.cfg, 0)
			next, kinds := 0, map[Verdict]int{}
			for _, n := range []int{0, 1, 3, 4, 5, 9, 200, 3000, 100} {
				ids, ts := judgeBatchInput(next, n)
				next += n
				got := make([]Verdict, n)
				puts := 0
				batched.JudgeBatch(tc.part, ids, func(i int) time.Time { return ts[i] }, func(i int, v Verdict) {
					if ids[i] == nil {
						t.Fatalf("batch of %d: verdict for the nil identity %d", n, i)
					}
					got[i] = v
					puts++
				})
				for i, id := range ids {
					if id == nil {
						continue
					}
					puts--
					kinds[got[i]]++
					if want := single.Judge(tc.part, id, ts[i]); got[i] != want {
						t.Fatalf("batch of %d, identity %d (%s): verdict %d, Judge %d", n, i, id, got[i], want)
					}
				}
				if puts != 0 {
					t.Fatalf("batch of %d: %d verdicts more than keyed identities", n, puts)
				}
				batched.Stats() // the overload verdict follows the last Stats, on both
				single.Stats()
			}
			if kinds[tc.want] == 0 {
				t.Errorf("no identity got verdict %d: %v", tc.want, kinds)
			}
			if b, s := batched.Unassigned(), single.Unassigned(); b != s {
				t.Errorf("unassigned: %d batched, %d single", b, s)
			}
		})
	}
}

// judgeBatchInput returns n identities from the next-th on, with repeats of the identity 1, 4 and
// 37 places earlier, every 7th nil (a record without identity), and timestamps over a day, some
// late under an event-time window of 24:00.
func judgeBatchInput(next, n int) ([][]byte, []time.Time) {
	ids, ts := make([][]byte, n), make([]time.Time, n)
	for i := range n {
		k := next + i
		ts[i] = at(k%24, 0)
		switch {
		case k%7 == 0:
			continue
		case k%5 == 0 && i >= 1:
			ids[i] = ids[i-1]
		case k%11 == 0 && i >= 4:
			ids[i] = ids[i-4]
		case k%13 == 0 && k >= 37:
			ids[i] = fmt.Appendf(nil, "k%d", k-37)
		default:
			ids[i] = fmt.Appendf(nil, "k%d", k)
		}
	}
	return ids, ts
}

// TestPartLookup proves that a Set finds its parts by partition number in the dense index and
// past it, and nothing for a partition not assigned.
func TestPartLookup(t *testing.T) {
	byID := map[int32]*part{0: {}, 3: {}, denseMax - 1: {}, denseMax: {}, 1 << 30: {}}
	s := &Set{}
	s.parts.Store(newPartMap(byID))
	for _, p := range []int32{0, 1, 3, 4, denseMax - 2, denseMax - 1, denseMax, denseMax + 1, 1 << 30, -1} {
		if got, want := s.part(p), byID[p]; got != want {
			t.Errorf("part(%d) = %p, want %p", p, got, want)
		}
	}
}
