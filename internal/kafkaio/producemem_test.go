package kafkaio

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// TestProduceMemory checks the bound on the records being produced at once: a call takes its
// records' size while it fits under the limit, waits while it does not until bytes are given
// back, goes alone when it is larger than the limit, is served in order (a call that would fit
// waits behind an earlier one that does not), and gives up when its context ends; a nil bound
// takes nothing. Its wait never times out (TestProduceMemoryWait).
func TestProduceMemory(t *testing.T) {
	ctx := context.Background()
	m := NewProduceMemory(100)
	m.after = func(time.Duration) <-chan time.Time { return nil }
	acquire := func(n int64) <-chan int64 { // acquire(n) on a goroutine of its own, once it waits
		waiting := m.waiting()
		got := make(chan int64, 1)
		go func() {
			k, err := m.acquire(ctx, n)
			if err != nil {
				t.Error(err)
			}
			got <- k
		}()
		for m.waiting() == waiting {
			runtime.Gosched()
		}
		return got
	}
	a, err := m.acquire(ctx, 60)
	if a != 60 || err != nil {
		t.Fatalf("acquire(60) = %d, %v", a, err)
	}
	b, err := m.acquire(ctx, 40) // fits beside a
	if b != 40 || err != nil {
		t.Fatalf("acquire(40) beside 60 = %d, %v", b, err)
	}
	c := acquire(50) // 150 > 100: waits
	m.release(b)     // 60 + 50 > 100: still waits
	if m.waiting() != 1 {
		t.Fatal("acquire(50) went on with 60 held of 100")
	}
	m.release(a) // now it fits
	if n := <-c; n != 50 || m.held != 50 {
		t.Fatalf("acquire(50) = %d, %d held, after the others gave back", n, m.held)
	}
	big := acquire(1000) // more than the limit: waits until nothing is held
	small := acquire(10) // would fit beside the 50, but comes after big
	if m.waiting() != 2 {
		t.Fatalf("%d calls wait, want big and small", m.waiting())
	}
	m.release(50)
	if n := <-big; n != 100 {
		t.Fatalf("acquire(1000) alone = %d; want the limit, 100", n)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if n, err := m.acquire(cctx, 1); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire(1) at the limit with a canceled context = %d, %v", n, err)
	}
	m.release(100)
	if n := <-small; n != 10 {
		t.Fatalf("acquire(10) = %d after big", n)
	}
	m.release(10)
	if m.held != 0 || m.waiting() != 0 {
		t.Fatalf("%d bytes held, %d waiting after everything was given back", m.held, m.waiting())
	}
	var none *ProduceMemory
	if n, err := none.acquire(ctx, 1<<40); n != 0 || err != nil || NewProduceMemory(0) != nil {
		t.Fatal("no bound takes something")
	}
	none.release(0)
}

// TestProduceMemoryWait checks that a call that waited DefaultProduceMemoryWait goes ahead over
// the bound, so that calls that hold the bytes while their produce is retried do not stall the
// others for longer; a call behind it that still does not fit waits its own while.
func TestProduceMemoryWait(t *testing.T) {
	ctx := context.Background()
	m := NewProduceMemory(100)
	timers := make(chan chan time.Time, 2)
	m.after = func(d time.Duration) <-chan time.Time {
		if d != DefaultProduceMemoryWait {
			t.Errorf("waits %v, want %v", d, DefaultProduceMemoryWait)
		}
		c := make(chan time.Time, 1)
		timers <- c
		return c
	}
	if n, err := m.acquire(ctx, 90); n != 90 || err != nil { // a call being retried: held
		t.Fatalf("acquire(90) = %d, %v", n, err)
	}
	got := make(chan int64, 2)
	go func() { n, _ := m.acquire(ctx, 50); got <- n }()
	first := <-timers
	go func() { n, _ := m.acquire(ctx, 5); got <- n }() // fits beside 90, but comes after 50
	second := <-timers
	first <- time.Time{} // 50 waited its while
	if n := <-got; n != 50 {
		t.Fatalf("the first waiting call took %d, want 50", n)
	}
	if m.waiting() != 1 { // 140 held: 5 does not fit either
		t.Fatalf("%d calls wait, want the second", m.waiting())
	}
	second <- time.Time{}
	if n := <-got; n != 5 {
		t.Fatalf("the second waiting call took %d, want 5", n)
	}
	m.mu.Lock()
	held, waiting := m.held, len(m.queue)
	m.mu.Unlock()
	if held != 145 || waiting != 0 {
		t.Fatalf("%d bytes held and %d calls waiting, want 145 (over the bound of 100) and none", held, waiting)
	}
	m.release(90)
	m.release(50)
	m.release(5)
	if m.held != 0 {
		t.Fatalf("%d bytes held after everything was given back", m.held)
	}
}

// waiting returns how many calls wait.
func (m *ProduceMemory) waiting() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.queue)
}
