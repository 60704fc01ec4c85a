package kafkaio

import (
	"context"
	"errors"
	"testing"
)

// TestProduceMemory checks the bound on the records being produced at once: a call takes its
// records' size while it fits under the limit, waits while it does not until bytes are given
// back, goes alone when it is larger than the limit, and gives up when its context ends; a nil
// bound takes nothing.
func TestProduceMemory(t *testing.T) {
	ctx := context.Background()
	m := newProduceMemory(100)
	a, err := m.acquire(ctx, 60)
	if a != 60 || err != nil {
		t.Fatalf("acquire(60) = %d, %v", a, err)
	}
	b, err := m.acquire(ctx, 40) // fits beside a
	if b != 40 || err != nil {
		t.Fatalf("acquire(40) beside 60 = %d, %v", b, err)
	}
	got := make(chan int64)
	go func() {
		n, err := m.acquire(ctx, 50) // 150 > 100: waits
		if err != nil {
			t.Error(err)
		}
		got <- n
	}()
	m.release(b) // 60 + 50 > 100: still waits
	select {
	case n := <-got:
		t.Fatalf("acquire(50) returned %d with 60 held of 100", n)
	default:
	}
	m.release(a) // now it fits
	if n := <-got; n != 50 || m.held != 50 {
		t.Fatalf("acquire(50) = %d, %d held, after the others gave back", n, m.held)
	}
	m.release(50)
	big, err := m.acquire(ctx, 1000) // nothing held: goes alone, counted as the whole limit
	if big != 100 || err != nil {
		t.Fatalf("acquire(1000) alone = %d, %v; want the limit, 100", big, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	go cancel()
	if n, err := m.acquire(cctx, 1); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire(1) at the limit with a canceled context = %d, %v", n, err)
	}
	m.release(big)
	if m.held != 0 {
		t.Fatalf("%d bytes held after everything was given back", m.held)
	}
	var none *produceMemory
	if n, err := none.acquire(ctx, 1<<40); n != 0 || err != nil || newProduceMemory(0) != nil {
		t.Fatal("no bound takes something")
	}
	none.release(0)
}
