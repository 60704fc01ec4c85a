//go:build linux && (amd64 || arm64)

package snapshot

import (
	"os"
	"syscall"
	"testing"

	"github.com/kdedup/kdedup/internal/ckpttest"
)

// syncFS flushes dirty pages so writeback does not disturb measurements.
func syncFS() { syscall.Sync() }

// dropCache evicts path's pages from the page cache (posix_fadvise
// DONTNEED on the file alone, after syncing it), so the next read comes from
// the disk. Only this file is affected.
func dropCache(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	const fadvDontNeed = 4
	if _, _, e := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, fadvDontNeed, 0, 0); e != 0 {
		b.Skipf("fadvise: %v", e)
	}
}

// BenchmarkLargeCold compares a restore from disk (page cache dropped for
// the snapshot file) with reading the same number of bytes from disk: the
// "≤ 1.5× raw disk read" budget in its literal sense.
func BenchmarkLargeCold(b *testing.B) {
	fx := newLargeFixture(b)
	size := int64(fx.h.DataBytes())
	dst := make([]uint64, fx.h.Words)
	raw := make([]byte, size)
	ckpttest.Ratio(b, size, map[string]func(){
		"decode-cold": func() {
			dropCache(b, fx.snapF)
			fx.decode(b, dst)
		},
		"readfull-cold": func() {
			dropCache(b, fx.rawF)
			fx.readFull(b, raw)
		},
	}, "decode-cold", "readfull-cold")
}
