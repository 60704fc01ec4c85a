package consumer

import "testing"

// TestInputMemoryShares checks how InputMemoryLimit is split between the input partitions' fetch
// pool and the re-warm reads' pool: a quarter for the re-warm reads, the rest for the partitions,
// never more than the limit together, and no bound for either without a limit.
func TestInputMemoryShares(t *testing.T) {
	for _, tc := range []struct {
		limit, rewarm, parts int64
	}{
		{0, 0, 0},
		{32 << 20, 8 << 20, 24 << 20},
		{10 << 20, 10 << 20 / 4, 10<<20 - 10<<20/4},
		{3, 1, 2},
		{1, 1, 1}, // both bounded; the least a pool takes is a byte
	} {
		if r, p := rewarmMemory(tc.limit), partitionMemory(tc.limit); r != tc.rewarm || p != tc.parts {
			t.Errorf("limit %d: re-warm %d, partitions %d; want %d, %d", tc.limit, r, p, tc.rewarm, tc.parts)
		}
	}
}
