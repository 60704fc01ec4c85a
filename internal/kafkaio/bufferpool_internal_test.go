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
		{"broker frames", &newBrokerFetcher(nil, 1).bufs, []int{1 << 20}},
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
