//go:build !linux

package window

// adviseWrite reports false: only Linux has MADV_POPULATE_WRITE, so populateWords writes every
// page.
func adviseWrite([]uint64) bool { return false }
