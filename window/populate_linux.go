package window

import (
	"sync/atomic"
	"syscall"
)

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14): fault every page of a range in as if it
// were written, without changing its contents.
const madvPopulateWrite = 23

// noPopulate is set once the kernel refused MADV_POPULATE_WRITE as unknown, so that later arrays
// go straight to touchPages.
var noPopulate atomic.Bool

// adviseWrite populates the whole pages of words with MADV_POPULATE_WRITE and writes the partial
// pages at either end. It reports false, having done nothing that matters, when the kernel does
// not have the advice or refused it (the caller then writes every page).
func adviseWrite(words []uint64) bool {
	if noPopulate.Load() {
		return false
	}
	pages, from, to := interior(words)
	if pages == nil {
		return false
	}
	if err := syscall.Madvise(pages, madvPopulateWrite); err != nil {
		if err == syscall.EINVAL {
			noPopulate.Store(true)
		}
		return false
	}
	if from > 0 {
		words[0] = 0
	}
	if to < len(words) {
		words[len(words)-1] = 0
	}
	return true
}
