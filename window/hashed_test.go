package window

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestHashedMethodsMatchKeys holds the hashed methods to the key methods on twin filters, one
// offered the keys and the other their HashKey: the same answers and the same words, for the
// single writer and the shared mode, a fixed and an auto-sized capacity, in processing time, event
// time and with refresh.
func TestHashedMethodsMatchKeys(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"single-auto", Config{Generations: 4, Auto: true, FalsePositiveRate: 1e-4, SingleWriter: true}},
		{"shared-auto", Config{Generations: 4, Auto: true, FalsePositiveRate: 1e-4}},
		{"single-fixed", Config{Generations: 8, Capacity: 3000, FalsePositiveRate: 1e-3, SingleWriter: true}},
		{"shared-fixed-seed", Config{Generations: 8, Capacity: 3000, FalsePositiveRate: 1e-3, Seed: 99}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := newFakeClock()
			start := clk.Now()
			cfg := c.cfg
			cfg.Interval, cfg.Clock = time.Minute, clk.Now
			a, b := mustNew(t, cfg), mustNew(t, cfg)
			if a.HashKey(key(1, 2)) != HashKey(key(1, 2), cfg.Seed) {
				t.Fatal("Filter.HashKey differs from HashKey with the filter's seed")
			}
			rng := rand.New(rand.NewPCG(21, uint64(len(c.name))))
			for e := range 6 {
				clk.Set(start.Add(time.Duration(e) * time.Minute))
				a.AdvanceTo(clk.Now())
				b.AdvanceTo(clk.Now())
				for i := range 6000 {
					k := key(uint64(rng.IntN(6)), uint64(rng.IntN(8000)))
					h := b.HashKey(k)
					b.PrefetchHash(h)
					at := clk.Now().Add(-time.Duration(rng.IntN(5)) * time.Minute)
					var got, want [3]bool
					switch i % 5 {
					case 0:
						want[0], got[0] = a.TestAndAdd(k), b.TestAndAddHash(h)
					case 1:
						want[0], want[1] = a.TestAndAddAt(k, at)
						got[0], got[1] = b.TestAndAddAtHash(h, at)
					case 2:
						want[0], want[1] = a.TestAndRefresh(k)
						got[0], got[1] = b.TestAndRefreshHash(h)
					case 3:
						want[0], want[1], want[2] = a.TestAndRefreshAt(k, at)
						got[0], got[1], got[2] = b.TestAndRefreshAtHash(h, at)
					default:
						want[0], got[0] = a.Test(k), b.TestHash(h)
					}
					if got != want {
						t.Fatalf("generation %d key %d (method %d): hashed %v, key %v", e, i, i%5, got, want)
					}
				}
			}
			if !slices.Equal(a.words, b.words) || a.Stats().TotalBytes != b.Stats().TotalBytes {
				t.Fatal("the filters differ")
			}
		})
	}
}
