package grace

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestAfterCancel checks when f runs, on the fake clock of synctest: d after ctx ends, never if
// stop came first or ctx never ends.
func TestAfterCancel(t *testing.T) {
	tests := []struct {
		name     string
		grace    time.Duration
		cancelAt time.Duration // < 0: never
		stopAt   time.Duration // < 0: never
		wantAt   time.Duration // < 0: f must not run
	}{
		{"runs d after the cancel", 10 * time.Second, 3 * time.Second, -1, 13 * time.Second},
		{"stop before the cancel", 10 * time.Second, 5 * time.Second, 2 * time.Second, -1},
		{"stop during the grace", 10 * time.Second, 1 * time.Second, 10 * time.Second, -1},
		{"stop after it ran", 10 * time.Second, 1 * time.Second, 20 * time.Second, 11 * time.Second},
		{"never cancelled", 10 * time.Second, -1, -1, -1},
		{"zero grace", 0, 4 * time.Second, -1, 4 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var ranAt atomic.Int64
				ranAt.Store(-1)
				stop := AfterCancel(ctx, tt.grace, func() { ranAt.Store(int64(time.Since(start))) })
				if tt.cancelAt >= 0 {
					time.AfterFunc(tt.cancelAt, cancel)
				}
				if tt.stopAt >= 0 {
					time.AfterFunc(tt.stopAt, stop)
				}
				time.Sleep(time.Minute) // the fake clock: every timer above fires in order
				synctest.Wait()
				if got := time.Duration(ranAt.Load()); got != tt.wantAt {
					t.Errorf("f ran at %v, want %v (-1: never)", got, tt.wantAt)
				}
				stop() // again: harmless
			})
		})
	}
}

// TestContext checks that the context ends with its parent, or d after the trigger, or on cancel.
func TestContext(t *testing.T) {
	const d = 5 * time.Second
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		trigger, stopTrigger := context.WithCancel(context.Background())
		ctx, cancel := Context(context.Background(), trigger, d)
		defer cancel()
		time.Sleep(time.Second)
		stopTrigger()
		<-ctx.Done()
		if got := time.Since(start); got != time.Second+d {
			t.Errorf("cancelled after %v, want %v", got, time.Second+d)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		parent, cancelParent := context.WithCancel(context.Background())
		ctx, cancel := Context(parent, context.Background(), d)
		defer cancel()
		cancelParent()
		synctest.Wait()
		if ctx.Err() == nil {
			t.Error("the parent was cancelled, the context not")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		trigger, stopTrigger := context.WithCancel(context.Background())
		ctx, cancel := Context(context.Background(), trigger, d)
		cancel()
		if ctx.Err() == nil {
			t.Error("CancelFunc did not cancel")
		}
		stopTrigger() // the timer was released: nothing is left to fire
		synctest.Wait()
	})
}
