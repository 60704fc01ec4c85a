//go:build race

package window

import "sync/atomic"

// clearWords zeroes a block with atomic stores, so that the race detector accepts operations that
// loaded an older view and still read the retired slot.
func clearWords(w []uint64) {
	for i := range w {
		atomic.StoreUint64(&w[i], 0)
	}
}
