package kafkaio

import (
	"slices"
	"testing"
)

// TestBufferPoolKeeps checks that a pool keeps at most its limit of free buffers, the largest
// given back, and that a broker's frame pool keeps one: a broker has one request in flight, so
// frames of earlier, smaller responses would only hold memory.
func TestBufferPoolKeeps(t *testing.T) {
	sizes := []int{4 << 10, 64 << 10, 16 << 10, 1 << 20, 256 << 10, 8 << 10}
	for _, tc := range []struct {
		name string
		pool *bufferPool
		want []int // capacities kept, sorted
	}{
		{"default", &bufferPool{}, []int{16 << 10, 64 << 10, 256 << 10, 1 << 20}},
		{"keep 1", &bufferPool{keep: 1}, []int{1 << 20}},
		{"broker frames", &newBrokerFetcher(&FetchPool{}, 1).bufs, []int{1 << 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, n := range sizes {
				tc.pool.put(make([]byte, n))
			}
			var got []int
			for _, b := range tc.pool.free {
				got = append(got, cap(b))
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("kept %v, want %v", got, tc.want)
			}
			if b := tc.pool.get(300 << 10); cap(b) != 1<<20 || len(b) != 300<<10 {
				t.Fatalf("get(300KiB) = len %d cap %d, want the 1MiB buffer", len(b), cap(b))
			}
		})
	}
}

// TestInputAccount checks that the buffers of a pool's readers and brokers are counted while
// they are held or kept free, that over the limit given-back buffers are dropped, and that a
// request asks for what is free, at least minRequestBytes.
func TestInputAccount(t *testing.T) {
	p := &FetchPool{cfg: FetchPoolConfig{MaxBytes: 16 << 20}, acct: &inputAccount{limit: 8 << 20}}
	reader, frames := bufferPool{acct: p.acct}, newBrokerFetcher(p, 1).bufs
	if got := p.requestMaxBytes(); got != 8<<20 {
		t.Fatalf("requestMaxBytes with nothing held = %d, want the limit %d", got, 8<<20)
	}
	frame := frames.get(3 << 20)
	a, b := reader.get(2<<20), reader.get(2<<20)
	if got := p.BufferedBytes(); got != 7<<20 {
		t.Fatalf("BufferedBytes = %d, want %d", got, 7<<20)
	}
	if got := p.requestMaxBytes(); got != 1<<20 {
		t.Fatalf("requestMaxBytes = %d, want what is free, %d", got, 1<<20)
	}
	c := reader.get(2 << 20) // over the limit: reads go on, at the least request size
	if got := p.requestMaxBytes(); got != minRequestBytes {
		t.Fatalf("requestMaxBytes over the limit = %d, want %d", got, minRequestBytes)
	}
	reader.put(a) // over the limit: dropped
	if len(reader.free) != 0 || p.BufferedBytes() != 7<<20 {
		t.Fatalf("over the limit: %d free buffers kept, %d bytes counted; want 0 and %d", len(reader.free), p.BufferedBytes(), 7<<20)
	}
	reader.put(b) // under it again: kept, still counted
	frames.put(frame)
	if len(reader.free) != 1 || len(frames.free) != 1 || p.BufferedBytes() != 7<<20 {
		t.Fatalf("under the limit: %d+%d free buffers kept, %d bytes counted; want 1+1 and %d", len(reader.free), len(frames.free), p.BufferedBytes(), 7<<20)
	}
	if got := reader.get(1 << 20); cap(got) != 2<<20 || p.BufferedBytes() != 7<<20 {
		t.Fatalf("a reused buffer: cap %d, %d bytes counted; want %d and %d", cap(got), p.BufferedBytes(), 2<<20, 7<<20)
	}
	reader.put(c)
	var none *inputAccount // a pool without an account counts nothing and limits nothing
	none.add(1)
	if none.over() || none.free(5) != 5 {
		t.Fatal("a nil account limits")
	}
}
