package consumer

import (
	"sync"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// recordSlices holds the output record slices of a worker's partitions between batches: a
// partition takes one when it handles a batch and gives it back once the batch was written, so a
// partition waiting for records holds none, and the slices held are as many as the batches being
// handled at once (themselves bounded by the fetch pool's records in hand), not one as large as
// the largest batch per partition. It is safe for concurrent use; the zero value is empty.
type recordSlices struct {
	mu   sync.Mutex
	free [][]kafkaio.Record
}

// get returns a free slice, empty, or nil when none is free.
func (p *recordSlices) get() []kafkaio.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.free)
	if n == 0 {
		return nil
	}
	s := p.free[n-1]
	p.free[n-1] = nil
	p.free = p.free[:n-1]
	return s
}

// put clears s and gives it back; a nil s is ignored.
func (p *recordSlices) put(s []kafkaio.Record) {
	if cap(s) == 0 {
		return
	}
	clear(s)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, s[:0])
}
