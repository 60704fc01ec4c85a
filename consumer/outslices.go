package consumer

import (
	"sync"
	"unsafe"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// recordSlices holds the output record slices of a worker's partitions between batches: a
// partition takes one when it handles a batch and gives it back once the batch was written, so a
// partition waiting for records holds none, and the slices held are as many as the batches being
// handled at once (themselves bounded by the fetch pool's records in hand), not one as large as
// the largest batch per partition. The free slices hold at most maxFreeOutputBytes: after all
// the partitions handled a batch at once (a catch-up), the rest are dropped as they are given
// back. It is safe for concurrent use; the zero value is empty.
type recordSlices struct {
	mu        sync.Mutex
	free      [][]kafkaio.Record
	freeBytes int64
}

// maxFreeOutputBytes bounds the output record slices a worker keeps free: 2 MiB, about 16,000
// records, so the batches of a few partitions at once reuse their slices.
const maxFreeOutputBytes = 2 << 20

// outRecordSize is the memory of one element of an output record slice.
const outRecordSize = int64(unsafe.Sizeof(kafkaio.Record{}))

// get returns an empty slice with room for n records: the smallest free one that has it, else a
// new one of capacity n, so that a batch's output is not grown by doubling (each step garbage
// for the collector, which at the memory budget runs more often for it).
func (p *recordSlices) get(n int) []kafkaio.Record {
	p.mu.Lock()
	best := -1
	for i, s := range p.free {
		if cap(s) >= n && (best < 0 || cap(s) < cap(p.free[best])) {
			best = i
		}
	}
	if best < 0 {
		p.mu.Unlock()
		return make([]kafkaio.Record, 0, n)
	}
	s := p.free[best]
	last := len(p.free) - 1
	p.free[best] = p.free[last]
	p.free[last] = nil
	p.free = p.free[:last]
	p.freeBytes -= int64(cap(s)) * outRecordSize
	p.mu.Unlock()
	return s
}

// put clears s and gives it back, or drops it when the free slices would hold more than
// maxFreeOutputBytes with it; a nil s is ignored.
func (p *recordSlices) put(s []kafkaio.Record) {
	if cap(s) == 0 {
		return
	}
	clear(s)
	n := int64(cap(s)) * outRecordSize
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.freeBytes+n > maxFreeOutputBytes {
		return
	}
	p.free = append(p.free, s[:0])
	p.freeBytes += n
}
