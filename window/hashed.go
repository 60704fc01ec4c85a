package window

import (
	"time"
	"unsafe"
)

// KeyHash is a key's hash under a seed (Config.Seed), as HashKey returns it: what the hashed
// methods (PrefetchHash, TestHash, TestAndAddHash, TestAndAddAtHash, TestAndRefreshHash,
// TestAndRefreshAtHash) take instead of the key. A caller that offers each key to a filter twice,
// as a worker that prefetches a batch's keys before judging them does, hashes it once. A KeyHash
// is valid for every filter whose Config.Seed is the one it was computed with; passed to a filter
// of another seed it names another key, and the answers mean nothing.
type KeyHash uint64

// HashKey returns the hash of key under seed, for the hashed methods of filters whose Config.Seed
// is seed: the hash the key methods compute (xxhash64 seeded by seed). It is safe for concurrent
// use and does not keep key.
func HashKey(key []byte, seed uint64) KeyHash {
	return KeyHash(hashKey(key, seed))
}

// HashKey returns the hash of key under f's Config.Seed: HashKey(key, f.Config().Seed).
func (f *Filter) HashKey(key []byte) KeyHash {
	return KeyHash(f.hash(key))
}

// PrefetchHash is Prefetch for the key whose hash is h.
func (f *Filter) PrefetchHash(h KeyHash) {
	var lines [maxPrefetchLines]unsafe.Pointer
	if n := f.prefetchLines(uint64(h), &lines); n > 0 {
		prefetch(&lines, n)
	}
}

// TestHash is Test for the key whose hash is h.
func (f *Filter) TestHash(h KeyHash) bool {
	return f.testHash(uint64(h))
}

// TestAndAddHash is TestAndAdd for the key whose hash is h, with its guarantees.
func (f *Filter) TestAndAddHash(h KeyHash) (seen bool) {
	return f.testAndAddHash(uint64(h))
}

// TestAndAddAtHash is TestAndAddAt for the key whose hash is h, with its guarantees.
func (f *Filter) TestAndAddAtHash(h KeyHash, t time.Time) (seen, late bool) {
	return f.testAndAddHashAt(uint64(h), t)
}

// TestAndRefreshHash is TestAndRefresh for the key whose hash is h, with its guarantees.
func (f *Filter) TestAndRefreshHash(h KeyHash) (seen, refreshed bool) {
	return f.testAndRefreshHash(uint64(h))
}

// TestAndRefreshAtHash is TestAndRefreshAt for the key whose hash is h, with its guarantees.
func (f *Filter) TestAndRefreshAtHash(h KeyHash, t time.Time) (seen, late, refreshed bool) {
	return f.testAndRefreshHashAt(uint64(h), t)
}
