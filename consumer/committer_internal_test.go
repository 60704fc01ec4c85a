package consumer

import (
	"context"
	"testing"
	"time"
)

// TestCommitterLeaderEpoch proves that a commit carries the leader epoch readAt gave for the
// committed offset, and no epoch (-1) for an offset readAt was not told of (a refused record's,
// say).
func TestCommitterLeaderEpoch(t *testing.T) {
	g := &fakeGen{}
	c := newCommitter(g, "in", time.Hour, NopObserver{}, discardSampler())
	go c.run()
	defer c.close()
	c.readAt(0, 10, 3)
	c.readAt(1, 7, 5)
	for _, tc := range []struct {
		p         int
		next      int64
		wantEpoch int32
	}{{0, 10, 3}, {1, 8, -1}, {0, 12, -1}} {
		if err := c.flush(context.Background(), tc.p, tc.next); err != nil {
			t.Fatal(err)
		}
		g.mu.Lock()
		got := g.epochs[tc.p]
		g.mu.Unlock()
		if got != tc.wantEpoch {
			t.Errorf("commit of partition %d at %d: leader epoch %d, want %d", tc.p, tc.next, got, tc.wantEpoch)
		}
	}
}
