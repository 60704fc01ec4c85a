package dedup

import (
	"fmt"
	"testing"

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

// TestPrefetchChangesNoVerdict proves that Prefetch, of an assigned partition or of one that is
// not, changes no verdict: identities prefetched and never judged stay new.
func TestPrefetchChangesNoVerdict(t *testing.T) {
	w := window.Config{Generations: 4, Interval: 1 << 40, Auto: true, FalsePositiveRate: 1e-6}
	s := newAssigned(t, Config{Scope: ScopePartition, Window: w}, 0)
	for i := range 3000 {
		s.Prefetch(0, fmt.Appendf(nil, "k%d", i))
		s.Prefetch(7, fmt.Appendf(nil, "k%d", i)) // not assigned: ignored
	}
	for i := range 3000 {
		id := fmt.Appendf(nil, "k%d", i)
		s.Prefetch(0, id)
		if got := s.Judge(0, id, at(0, 0)); got != VerdictNew {
			t.Fatalf("k%d, prefetched only: verdict %d, want new", i, got)
		}
		if got := s.Judge(0, id, at(0, 0)); got != VerdictDuplicate {
			t.Fatalf("k%d, judged before: verdict %d, want a duplicate", i, got)
		}
	}
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
