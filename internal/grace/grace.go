// Package grace runs something a fixed time after a context ends: the "timer after cancel" of a
// graceful stop (the drain deadline of a worker, the grace of a revoked partition, the watchdog
// of the process), written once.
package grace

import (
	"context"
	"sync"
	"time"
)

// AfterCancel arranges for f to run in its own goroutine d after ctx is done. Calling the returned
// stop before that prevents f from running, whether ctx is done yet or not; once f started, stop
// does not wait for it. stop may be called more than once. AfterCancel is safe for concurrent
// use, and so is stop.
func AfterCancel(ctx context.Context, d time.Duration, f func()) (stop func()) {
	var mu sync.Mutex
	var timer *time.Timer
	stopped := false
	stopArm := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			timer = time.AfterFunc(d, f)
		}
	})
	return func() {
		stopArm()
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		if timer != nil {
			timer.Stop()
		}
	}
}

// Context returns a context that is cancelled when parent is, or d after trigger is done: trigger
// asks for a stop, and d is the grace the work under the returned context gets to finish.
// Calling the CancelFunc cancels the context and releases the timer.
func Context(parent, trigger context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	stop := AfterCancel(trigger, d, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}
