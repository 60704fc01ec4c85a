package window

import (
	"testing"
	"time"
	"unsafe"
)

// lineOf returns the cache line of the word at w.
func lineOf(w *uint64) uintptr { return uintptr(unsafe.Pointer(w)) &^ 63 }

// filterArrays returns the word arrays of f: stage 0's and every grown stage's.
func filterArrays(f *Filter) [][]uint64 {
	arrays := [][]uint64{f.words}
	if gs := f.grown.Load(); gs != nil {
		for _, gg := range gs.gens {
			for _, st := range *gg.stages.Load() {
				arrays = append(arrays, st.words)
			}
		}
	}
	return arrays
}

// prefetchSet returns the cache lines Prefetch asks for the key.
func prefetchSet(f *Filter, k []byte) map[uintptr]bool {
	var lines [maxPrefetchLines]unsafe.Pointer
	n := f.prefetchLines(f.hash(k), &lines)
	set := make(map[uintptr]bool, n)
	for _, l := range lines[:n] {
		set[uintptr(l)&^63] = true
	}
	return set
}

// TestPrefetchLines checks that Prefetch asks for the lines a TestAndAdd uses: every line lookup
// reads first (the key's row of stage 0, its word of sector 0 in every grown stage, as touch and
// loadStageWords compute them) and every word an insertion of a new key writes, found by
// comparing the filter's arrays before and after it. Filters: auto-sized with grown stages in
// several generations, a fixed capacity that grew, and rows of more than one line.
func TestPrefetchLines(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		grown bool // the filter has grown stages when the keys are checked
	}{
		{"auto N=8 1e-6", Config{Generations: 8, Auto: true, FalsePositiveRate: 1e-6}, true},
		{"auto N=4 1e-3 shared", Config{Generations: 4, Auto: true, FalsePositiveRate: 1e-3}, true},
		{"fixed grown N=8 1e-4", Config{Generations: 8, Capacity: 2000, FalsePositiveRate: 1e-4}, true},
		{"auto N=16 1e-6", Config{Generations: 16, Auto: true, FalsePositiveRate: 1e-6}, true},
		{"fixed N=40 1e-3", Config{Generations: 40, Capacity: 3000, FalsePositiveRate: 1e-3}, true},
		{"fixed stage 0 N=8 1e-6", Config{Generations: 8, Capacity: 100_000, FalsePositiveRate: 1e-6}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			cfg := tc.cfg
			cfg.Interval, cfg.Clock = time.Minute, clk.Now
			cfg.SingleWriter = tc.name != "auto N=4 1e-3 shared"
			f := mustNew(t, cfg)
			for g := range 3 { // three generations, each grown past stage 0
				f.AdvanceTo(clk.Now().Add(time.Duration(g) * time.Minute))
				for i := range 6000 {
					f.TestAndAdd(key(uint64(g), uint64(i)))
				}
			}
			if grown := f.grown.Load() != nil; grown != tc.grown {
				t.Fatalf("grown stages: %v, want %v", grown, tc.grown)
			}
			for i := range 300 {
				checkPrefetchReads(t, f, key(1, uint64(i)))  // added before
				checkPrefetchWrites(t, f, key(9, uint64(i))) // new
			}
		})
	}
}

// checkPrefetchReads fails the test if a line lookup reads first for k is not in Prefetch's.
func checkPrefetchReads(t *testing.T, f *Filter, k []byte) {
	t.Helper()
	set := prefetchSet(f, k)
	v := f.view.Load()
	var p probe
	f.makeProbe(&p, f.hash(k), v, false, false)
	row := f.words[p.base+p.w0*uint64(f.slots):][:f.slots:f.slots]
	want := []*uint64{&row[0], &row[min(len(row), maxPrefetchRowLines*sectorWords)-1]}
	if gs := f.grown.Load(); gs != nil {
		var at [maxProbedStages]stageWord
		n, _ := loadStageWords(gs, &p, &at)
		for _, a := range at[:n] {
			want = append(want, &a.st.words[a.w])
		}
	}
	for _, w := range want {
		if !set[lineOf(w)] {
			t.Fatalf("key %x: lookup reads line %#x, not prefetched (%d lines)", k, lineOf(w), len(set))
		}
	}
}

// checkPrefetchWrites fails the test if TestAndAdd of the new key k writes a word outside the
// lines Prefetch asks for. A TestAndAdd that grows the generation writes a stage that did not
// exist at the prefetch, and is not checked.
func checkPrefetchWrites(t *testing.T, f *Filter, k []byte) {
	t.Helper()
	set := prefetchSet(f, k)
	arrays := filterArrays(f)
	before := make([][]uint64, len(arrays))
	for i, a := range arrays {
		before[i] = append([]uint64(nil), a...)
	}
	if f.TestAndAdd(k) {
		return // a false positive: nothing written
	}
	if len(filterArrays(f)) != len(arrays) {
		return
	}
	for i, a := range arrays {
		for j := range a {
			if a[j] != before[i][j] && !set[lineOf(&a[j])] {
				t.Fatalf("key %x: TestAndAdd wrote array %d word %d, line %#x not prefetched", k, i, j, lineOf(&a[j]))
			}
		}
	}
}

// TestPrefetchChangesNothing checks that Prefetch leaves the filter as it was: every key tests
// the same after a Prefetch of all of them and of keys never added.
func TestPrefetchChangesNothing(t *testing.T) {
	clk := newFakeClock()
	f := mustNew(t, Config{Generations: 4, Interval: time.Minute, Auto: true, FalsePositiveRate: 1e-4, Clock: clk.Now})
	for i := range 5000 {
		f.TestAndAdd(key(1, uint64(i)))
	}
	arrays := filterArrays(f)
	before := make([][]uint64, len(arrays))
	for i, a := range arrays {
		before[i] = append([]uint64(nil), a...)
	}
	for i := range 10000 {
		f.Prefetch(key(1, uint64(i)))
	}
	for i, a := range filterArrays(f) {
		for j := range a {
			if a[j] != before[i][j] {
				t.Fatalf("array %d word %d changed from %#x to %#x", i, j, before[i][j], a[j])
			}
		}
	}
	for i := range 5000 {
		if !f.Test(key(1, uint64(i))) {
			t.Fatalf("key %d added before is not seen", i)
		}
	}
}
