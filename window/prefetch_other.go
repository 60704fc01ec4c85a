//go:build !amd64 && !arm64

package window

import "unsafe"

// prefetch does nothing on a platform without a prefetch instruction that Go's assembler has.
func prefetch(lines *[maxPrefetchLines]unsafe.Pointer, n int) {}
