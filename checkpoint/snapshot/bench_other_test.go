//go:build !(linux && (amd64 || arm64))

package snapshot

// syncFS is a no-op where the benchmarks do not control the page cache.
func syncFS() {}
