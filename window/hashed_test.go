package window

import (
	"bytes"
	"testing"
	"time"
)

// TestHashedMatchesKeyed proves that TestAndAddHash of Hash(key), with PrefetchHash before it,
// answers as TestAndAdd(key) does and leaves the same words, on twin filters, for keys shorter
// and longer than the hash's short path, single writer and shared, fixed and auto capacity.
func TestHashedMatchesKeyed(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"single/auto", Config{Generations: 4, Interval: time.Minute, Auto: true, FalsePositiveRate: 1e-4, SingleWriter: true}},
		{"single/fixed", Config{Generations: 8, Interval: time.Minute, Capacity: 2000, FalsePositiveRate: 1e-3, SingleWriter: true}},
		{"shared/auto", Config{Generations: 4, Interval: time.Minute, Auto: true, FalsePositiveRate: 1e-6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			cfg := tc.cfg
			cfg.Clock = clk.Now
			keyed, hashed := mustNew(t, cfg), mustNew(t, cfg)
			for i := range 20000 {
				k := bytes.Repeat(key(2, uint64(i/3)), 3)[:(i/3)%48] // lengths 0 to 47; each key thrice
				hashed.PrefetchHash(hashed.Hash(k))
				if got, want := hashed.TestAndAddHash(hashed.Hash(k)), keyed.TestAndAdd(k); got != want {
					t.Fatalf("key %d (%d bytes): TestAndAddHash %v, TestAndAdd %v", i, len(k), got, want)
				}
			}
			a, b := filterArrays(keyed), filterArrays(hashed)
			if len(a) != len(b) {
				t.Fatalf("%d arrays keyed, %d hashed", len(a), len(b))
			}
			for i := range a {
				if !slicesEqual(a[i], b[i]) {
					t.Fatalf("array %d differs", i)
				}
			}
		})
	}
}

func slicesEqual(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
