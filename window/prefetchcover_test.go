package window

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestPrefetchCoversStagedInsert checks, on an auto-sized filter grown as the workload's are
// (stagedBenchFilter: stage 1 full, stage 2 taking the keys), that every cache line a new key's
// insertion writes in a grown stage is one prefetchLines asked for: the lines PrefetchHash
// prefetches are the ones the single writer's staged insertion (addStaged, putAt) then writes.
func TestPrefetchCoversStagedInsert(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	f := stagedBenchFilter(t, rng)
	var lines [maxPrefetchLines]unsafe.Pointer
	missed, checked := 0, 0
	for range 300 {
		h := rng.Uint64()
		prefetched := map[uintptr]bool{}
		for _, l := range lines[:f.prefetchLines(h, &lines)] {
			prefetched[uintptr(l)&^63] = true
		}
		var sts []*stage
		var before [][]byte
		for _, gg := range f.grown.Load().gens {
			for _, st := range *gg.stages.Load() {
				sts = append(sts, st)
				before = append(before, bytes.Clone(wordBytes(st.words)))
			}
		}
		if f.testAndAddHash(h) {
			continue
		}
		for i, st := range sts {
			after := wordBytes(st.words)
			for off := 0; off < len(after); off += 64 {
				end := min(off+64, len(after))
				if bytes.Equal(after[off:end], before[i][off:end]) {
					continue
				}
				checked++
				if !prefetched[uintptr(unsafe.Pointer(&after[off]))&^63] {
					missed++
				}
			}
		}
	}
	if checked == 0 || missed > 0 {
		t.Fatalf("%d of %d lines written in grown stages were not prefetched", missed, checked)
	}
}

// wordBytes returns the bytes of words.
func wordBytes(words []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(words)*8)
}
