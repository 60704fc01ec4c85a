package window

import "unsafe"

// First touch. A fresh allocation of this size is memory the kernel has not mapped yet. Left to
// itself, the first access to each page of a filter is a read (a test, or touch's prefetch), which
// maps the shared zero page, and the write that follows takes a copy-on-write fault whose TLB
// flush interrupts every CPU the process runs on: half the worker's CPU with 39 MB filters. So no
// page of a filter is first read and then written:
//
//   - Stage 0 is written page by page before it is read (blocks.writeFirst): an operation that
//     may write a group, and the sweep, first write one word of each of the group's pages that is
//     not marked yet (an atomic add of 0) and mark it. Its memory is then resident as keys arrive,
//     not all at once, and each page costs one fault. After the first rotation the sweep of an
//     odd use writes every word of its slot, so the whole of stage 0 is resident from then on.
//   - A grown stage is made for keys that are arriving now, and is populated whole when it is
//     made (populateWords): MADV_POPULATE_WRITE where the kernel has it (Linux 5.14), else one
//     write per page.
//
// The memory stays in the Go heap: the garbage collector frees it when the filter is dropped, so
// no access can outlive it. docs/design.md ("First touch") has the measurements.

// pageSize is the granularity of writeFirst's marks and of touchPages' writes: the smallest page
// size of the platforms Go runs on. A larger page is written more than once.
const pageSize = 4096

// populateWords maps every page of words writable before it is used, so that no page of the
// array is first read and then written. The words must not be in use yet: it may write zeros to
// them.
func populateWords(words []uint64) {
	if len(words) == 0 || adviseWrite(words) {
		return
	}
	touchPages(words)
}

// touchPages writes a zero to one word of every page of words.
func touchPages(words []uint64) {
	for i := 0; i < len(words); i += pageSize / 8 {
		words[i] = 0
	}
	words[len(words)-1] = 0
}

// interior returns the whole pages inside words, as bytes, and the index of the first word and
// one past the last word they hold (from == to when there is no whole page).
func interior(words []uint64) (pages []byte, from, to int) {
	start := uintptr(unsafe.Pointer(&words[0]))
	end := start + uintptr(len(words))*8
	lo := (start + pageSize - 1) &^ (pageSize - 1)
	hi := end &^ (pageSize - 1)
	if hi <= lo {
		return nil, 0, 0
	}
	from, to = int((lo-start)/8), int((hi-start)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[from])), hi-lo), from, to
}
