package window

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"
)

// fakeClock is an injected clock that only moves when told to.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// key returns a 16-byte key for i in namespace ns.
func key(ns, i uint64) []byte {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], ns)
	binary.LittleEndian.PutUint64(b[8:], i)
	return b[:]
}

func mustNew(t testing.TB, cfg Config) *Filter {
	t.Helper()
	f, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return f
}
