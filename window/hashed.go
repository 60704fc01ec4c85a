package window

import "unsafe"

// Hash returns the hash of key that PrefetchHash and TestAndAddHash take, so that a caller that
// prefetches a key ahead of testing it hashes it once. The hash depends on Config.Seed: it is good
// for the filter it came from and for filters with the same seed. Safe for concurrent use.
func (f *Filter) Hash(key []byte) uint64 {
	return hashKey(key, f.seed)
}

// PrefetchHash is Prefetch for the key whose Hash is h.
func (f *Filter) PrefetchHash(h uint64) {
	var lines [maxPrefetchLines]unsafe.Pointer
	if n := f.prefetchLines(h, &lines); n > 0 {
		prefetch(&lines, n)
	}
}

// TestAndAddHash is TestAndAdd for the key whose Hash is h, with TestAndAdd's contract.
func (f *Filter) TestAndAddHash(h uint64) (seen bool) {
	return f.testAndAddHash(h)
}
