package window

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestPrefetchCoversStagedInsert checks, on an auto-sized filter grown as the workload's are
// (stagedBenchFilter), that every cache line a new key's insertion writes in a grown stage is one
// prefetchLines asked for.
func TestPrefetchCoversStagedInsert(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	f := stagedBenchFilter(t, rng)
	var lines [maxPrefetchLines]unsafe.Pointer
	missed, checked := 0, 0
	for range 2000 {
		h := rng.Uint64()
		n := f.prefetchLines(h, &lines)
		want := map[uintptr]bool{}
		for _, l := range lines[:n] {
			want[uintptr(l)&^63] = true
		}
		gs := f.grown.Load()
		var before [][]uint64
		var sts []*stage
		for _, gg := range gs.gens {
			for _, st := range *gg.stages.Load() {
				sts = append(sts, st)
				before = append(before, append([]uint64(nil), st.words...))
			}
		}
		if f.testAndAddHash(h) {
			continue
		}
		for i, st := range sts {
			for w := range st.words {
				if st.words[w] != before[i][w] {
					checked++
					if !want[uintptr(unsafe.Pointer(&st.words[w]))&^63] {
						missed++
					}
				}
			}
		}
	}
	if checked == 0 || missed > 0 {
		t.Fatalf("%d of %d words written in grown stages were on lines not prefetched", missed, checked)
	}
}
