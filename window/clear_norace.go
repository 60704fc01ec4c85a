//go:build !race

package window

// clearWords zeroes a block that no current view reads. An operation that loaded an older view
// may still read it with atomic loads; aligned word stores cannot tear, so it sees each word either
// before or after the clear, which is all a retired generation needs.
func clearWords(w []uint64) { clear(w) }
