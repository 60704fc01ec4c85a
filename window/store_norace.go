//go:build !race

package window

// storeWord stores v at p for the single writer (Config.SingleWriter) with a plain store. Every
// other access to filter words is atomic: readers load them and the sweeper swaps them. An
// aligned 64-bit store is a single indivisible write on every platform Go supports, and the Go
// memory model guarantees that a racing read of a machine word observes either the old or the new
// value, which is all the readers need; a plain store avoids the full barrier of atomic.Store
// (XCHG on amd64), which costs as much as the read-modify-write the single writer avoids. Under
// the race detector storeWord is an atomic store instead (store_race.go), so that the detector
// checks everything else.
func storeWord(p *uint64, v uint64) { *p = v }

// loadWord loads the filter word at p with a plain load, for the short paths (addRow's
// insertion, putRest; lineLacks reads the same way) where an atomic load costs instructions: the
// compiler recomputes the address of each word of a row for it rather than folding the offset
// into the load, and keeps fewer values in registers around it. A plain aligned 64-bit load
// observes either the old or the new value of a concurrent store, atomic or plain, which is all a
// filter reader needs (see storeWord); under the race detector it is an atomic load
// (store_race.go).
func loadWord(p *uint64) uint64 { return *p }

// lineLacks is the AND over the eight words w of row of (nm|w) + 1 (see lineHas), with plain
// loads (see loadWord), which keep it small enough for the compiler to inline.
func lineLacks(row *[sectorWords]uint64, nm uint64) uint64 {
	return ((nm | row[0]) + 1) & ((nm | row[1]) + 1) & ((nm | row[2]) + 1) & ((nm | row[3]) + 1) &
		((nm | row[4]) + 1) & ((nm | row[5]) + 1) & ((nm | row[6]) + 1) & ((nm | row[7]) + 1)
}
