package dedup

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRefreshSeen checks Config.Refresh through Set.Seen under both clocks: an identity re-sent
// every 1.5 intervals stays a duplicate with refresh (and passes again every window without), and
// under ClockEvent the re-arm follows the record's timestamp.
func TestRefreshSeen(t *testing.T) {
	for _, clock := range []Clock{ClockProcessing, ClockEvent} {
		for _, refresh := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/refresh=%v", clock, refresh), func(t *testing.T) {
				wall := newFakeClock(at(0, 0))
				cfg := eventConfig(ScopePartition, wall)
				cfg.Clock, cfg.Refresh = clock, refresh
				s := newAssigned(t, cfg, 0)
				passes := 0
				for k := range 6 { // every 90 minutes for 7.5 h, on a 4 × 1h window
					ts := at(0, 90*k)
					wall.set(ts)
					s.Filter(0).AdvanceTo(ts) // the processing clock's rotation, done by hand
					if !s.Seen(0, []byte("x"), ts) {
						passes++
					}
				}
				// Without refresh the window counts from the first sighting: 4.5 h later it passes
				// again (and is remembered from there to the end).
				if want := map[bool]int{true: 1, false: 2}[refresh]; passes != want {
					t.Errorf("passed %d times, want %d", passes, want)
				}
				if got, want := s.Stats()[0].Refreshes, map[bool]uint64{true: 5, false: 0}[refresh]; got != want {
					t.Errorf("Refreshes = %d, want %d", got, want)
				}
			})
		}
	}
}

// TestRefreshGlobalOneWinner offers the same identities from four partitions at once to a global
// Set with Refresh, half of them seen before: every new identity passes exactly once, and no
// identity seen before passes.
func TestRefreshGlobalOneWinner(t *testing.T) {
	const parts, ids = 4, 20_000
	for _, clock := range []Clock{ClockProcessing, ClockEvent} {
		t.Run(string(clock), func(t *testing.T) {
			cfg := eventConfig(ScopeGlobal, newFakeClock(at(24, 0)))
			cfg.Clock, cfg.Refresh = clock, true
			s := newAssigned(t, cfg, 0, 1, 2, 3)
			ts := func(i int) time.Time { return evBase.Add(time.Duration(i) * 500 * time.Millisecond) }
			for i := 0; i < ids; i += 2 {
				s.Seen(0, fmt.Appendf(nil, "id-%d", i), ts(i))
			}
			passed := make([]atomic.Int32, ids)
			var wg sync.WaitGroup
			for p := range int32(parts) {
				wg.Go(func() {
					for j := range ids {
						i := (j + int(p)*997) % ids
						if !s.Seen(p, fmt.Appendf(nil, "id-%d", i), ts(i)) {
							passed[i].Add(1)
						}
					}
				})
			}
			wg.Wait()
			for i := range passed {
				if n, want := passed[i].Load(), int32(i%2); n != want {
					t.Fatalf("id-%d passed %d times, want %d", i, n, want)
				}
			}
		})
	}
}

// BenchmarkSeenRefresh compares Set.Seen with and without Config.Refresh on one partition, all
// four generations live, in the same run: "new" offers unique identities (refresh changes nothing
// but the call), "dup" offers identities of an older generation, so that each is re-armed once in
// the current one and then found there (the steady state of a producer that keeps re-sending).
//
//	go test ./dedup -run '^$' -bench SeenRefresh -count 6
func BenchmarkSeenRefresh(b *testing.B) {
	for _, load := range []string{"new", "dup"} {
		for _, refresh := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/refresh=%v", load, refresh), func(b *testing.B) {
				s := newBenchSet(b, Config{Refresh: refresh})
				f := s.Filter(0)
				var key [8]byte
				const pool = 1 << 20
				if load == "dup" {
					for i := range pool {
						binary.LittleEndian.PutUint64(key[:], uint64(i)*0x9e3779b97f4a7c15)
						s.Seen(0, key[:], time.Time{})
					}
				}
				f.AdvanceTo(time.Now().Add(3 * time.Hour)) // all four generations live
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					n := uint64(i)
					if load == "dup" {
						n %= pool
					} else {
						n += pool
					}
					binary.LittleEndian.PutUint64(key[:], n*0x9e3779b97f4a7c15)
					s.Seen(0, key[:], time.Time{})
				}
			})
		}
	}
}
