package kafkaio

import (
	"context"
	"errors"
	"runtime"
	"testing"
)

// TestProduceMemory checks the bound on the records being produced at once: a call takes its
// records' size while it fits under the limit, waits while it does not until bytes are given
// back, goes alone when it is larger than the limit, is served in order (a call that would fit
// waits behind an earlier one that does not), and gives up when its context ends; a nil bound
// takes nothing.
func TestProduceMemory(t *testing.T) {
	ctx := context.Background()
	m := NewProduceMemory(100)
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

// waiting returns how many calls wait.
func (m *ProduceMemory) waiting() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.queue)
}
