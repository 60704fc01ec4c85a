//go:build !linux

package window

// FiltersMapped says that a filter's words are anonymous mappings outside the Go heap: false
// here, where they are in the Go heap.
const FiltersMapped = false

// adviseWrite reports false: only Linux has MADV_POPULATE_WRITE, so populateWords writes every
// page.
func adviseWrite([]uint64) bool { return false }

// mapWords returns nil: stage 0 stays in the Go heap where the mapping is not written for.
func mapWords(uint64) ([]uint64, func()) { return nil, nil }

// dropPages does nothing: mapWords maps nothing here.
func dropPages([]uint64) {}
