package window

import (
	"sync/atomic"
	"syscall"
	"unsafe"
)

// FiltersMapped says that a filter's words (stage 0 and the grown stages) are anonymous mappings
// of their own, outside the Go heap, so the Go runtime's memory does not include them: true on
// Linux (unless the kernel refuses a mapping, when those words are in the Go heap).
const FiltersMapped = true

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

// mapWords returns n zeroed words in an anonymous private mapping of their own, outside the Go
// heap, and a function that unmaps them; or nil words if the kernel refused the mapping. Stage 0
// lives there because the Go heap zeroes a reused span with a write to every page when it hands
// it out again: a filter made after others were dropped (a worker restarting, a rebalance) would
// be resident whole at once. Fresh pages of a mapping are zero without being written, and munmap
// returns them at once. The caller must not use the words after it called unmap.
func mapWords(n uint64) (words []uint64, unmap func()) {
	size := int((n*8 + pageSize - 1) &^ (pageSize - 1))
	if size == 0 || uint64(size) < n*8 {
		return nil, nil
	}
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		return nil, nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), n), func() { _ = syscall.Munmap(mem) }
}

// dropPages returns the whole pages of words to the system (MADV_DONTNEED): they read as zeros
// afterwards, and a later write maps a fresh page. Errors are ignored: the memory then stays
// resident until the words are unmapped.
func dropPages(words []uint64) {
	if pages, _, _ := interior(words); pages != nil {
		_ = syscall.Madvise(pages, syscall.MADV_DONTNEED)
	}
}
