//go:build race

package window

import "sync/atomic"

// storeWord is the race-detector build of the single writer's store (see store_norace.go): an
// atomic store, so that the detector accepts the concurrent atomic loads of readers and snapshots.
func storeWord(p *uint64, v uint64) { atomic.StoreUint64(p, v) }

// loadWord is the race-detector build of loadWord (see store_norace.go): an atomic load.
func loadWord(p *uint64) uint64 { return atomic.LoadUint64(p) }

// lineLacks is the race-detector build of lineLacks (see store_norace.go): atomic loads.
func lineLacks(row *[sectorWords]uint64, nm uint64) uint64 {
	var and uint64 = ^uint64(0)
	for i := range row {
		and &= (nm | atomic.LoadUint64(&row[i])) + 1
	}
	return and
}
