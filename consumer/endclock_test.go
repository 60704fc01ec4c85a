package consumer

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestEndClock: the clock of a context's end reads 0 until the context ended and someone saw it;
// a partition that saw the end first (before context.AfterFunc's callback ran, as on a loaded
// machine) times from then, and the callback running later does not move the end.
func TestEndClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		c := newEndClock(ctx)
		defer c.stop()
		c.note() // not ended: nothing to note
		time.Sleep(time.Second)
		if d := c.since(); d != 0 {
			t.Fatalf("since %v before the end, want 0", d)
		}
		cancel()
		c.note() // the partition saw the end before the callback could run
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if d := c.since(); d != 2*time.Second {
			t.Errorf("since %v, want the 2s since the partition saw the end", d)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		c := newEndClock(ctx)
		defer c.stop()
		cancel()
		synctest.Wait() // the callback notes the end
		time.Sleep(3 * time.Second)
		c.note()
		if d := c.since(); d != 3*time.Second {
			t.Errorf("since %v, want the 3s since the callback noted the end", d)
		}
	})
}
