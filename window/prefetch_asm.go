//go:build amd64 || arm64

package window

import "unsafe"

// prefetch issues a prefetch instruction (PREFETCHT0, PRFM PLDL1KEEP) for each of the first n > 0
// addresses of lines. A prefetch never faults and never waits for the line: the processor drops
// it if the address is not mapped.
//
//go:noescape
func prefetch(lines *[maxPrefetchLines]unsafe.Pointer, n int)
