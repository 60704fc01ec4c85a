package window

import (
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestHashKeyMatchesXXHash checks hashKey against xxhash's seeded Digest for every length up to
// past the long path and several seeds: the filter's bits, and so its snapshots, depend on it.
func TestHashKeyMatchesXXHash(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, seed := range []uint64{0, 1, 0x9e3779b97f4a7c15, ^uint64(0), rng.Uint64()} {
		for n := 0; n <= 2*xxhashLong+9; n++ {
			for range 4 {
				key := make([]byte, n)
				for i := range key {
					key[i] = byte(rng.Uint32())
				}
				d := xxhash.NewWithSeed(seed)
				d.Write(key)
				if got, want := hashKey(key, seed), d.Sum64(); got != want {
					t.Fatalf("seed %#x, %d bytes: hashKey %#x, xxhash %#x", seed, n, got, want)
				}
			}
		}
	}
}
