package window

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// TestStage0Unmapped checks that a filter's stage 0 lives in a mapping of its own, not in the Go
// heap, and that the mapping goes when the filter is collected.
func TestStage0Unmapped(t *testing.T) {
	mapped := func(addr uintptr) bool {
		b, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Skip(err)
		}
		return strings.Contains("\n"+string(b), fmt.Sprintf("\n%x-", addr))
	}
	f := mustNew(t, Config{Generations: 8, Interval: time.Minute, Capacity: 1_000_000, FalsePositiveRate: 1e-6})
	f.TestAndAdd([]byte("a"))
	if !f.Test([]byte("a")) {
		t.Fatal("key lost")
	}
	addr := uintptr(unsafe.Pointer(&f.words[0]))
	if !mapped(addr) {
		t.Fatalf("stage 0 at %x is not a mapping of its own", addr)
	}
	f = nil
	for range 1000 {
		runtime.GC()
		runtime.Gosched()
		if !mapped(addr) {
			return
		}
	}
	t.Fatal("stage 0 still mapped after the filter was collected")
}
