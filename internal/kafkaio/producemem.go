package kafkaio

import (
	"context"
	"sync"
)

// Produce memory. The records a Producer is given are encoded into a batch of their own (and
// compressed, with compression), and kafka-go copies each request into its own buffer to send
// it, so a batch in flight holds about twice its records' size besides the records themselves.
// Each partition has one batch in flight, so without a bound a worker of many partitions holds
// that for all of them at once: at 96 partitions in a catch-up, tens of MiB for a moment. With
// ProducerConfig.MaxBufferedBytes set, Produce and ProduceParts wait until the records of the
// calls in progress (their estimated size, messageSize) leave room for theirs; a call larger than
// the bound goes alone.

// DefaultMaxProduceBytes is the bound on the records being produced at once that the worker
// sets (ProducerConfig.MaxBufferedBytes): 8 MiB, eight full requests of DefaultBatchBytes.
const DefaultMaxProduceBytes = 8 << 20

// produceMemory counts the estimated bytes of the records of the Produce calls in progress
// against a limit. It is safe for concurrent use; a nil produceMemory bounds nothing.
type produceMemory struct {
	limit int64
	mu    sync.Mutex
	held  int64
	freed chan struct{} // closed (and replaced) when bytes are given back
}

// newProduceMemory returns a bound of limit bytes, or nil for none (limit <= 0).
func newProduceMemory(limit int64) *produceMemory {
	if limit <= 0 {
		return nil
	}
	return &produceMemory{limit: limit, freed: make(chan struct{})}
}

// acquire waits until n more bytes fit under the limit, or nothing is held, and takes them; it
// returns the bytes taken (n, at most the limit) to give back to release, or ctx's error once
// ctx ends first.
func (m *produceMemory) acquire(ctx context.Context, n int64) (int64, error) {
	if m == nil {
		return 0, nil
	}
	n = min(n, m.limit)
	for {
		m.mu.Lock()
		if m.held == 0 || m.held+n <= m.limit {
			m.held += n
			m.mu.Unlock()
			return n, nil
		}
		freed := m.freed
		m.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// release gives back n bytes taken by acquire.
func (m *produceMemory) release(n int64) {
	if m == nil || n == 0 {
		return
	}
	m.mu.Lock()
	m.held -= n
	close(m.freed)
	m.freed = make(chan struct{})
	m.mu.Unlock()
}

// recordsSize returns the estimated encoded size of msgs (messageSize of each).
func recordsSize(msgs []Record) int64 {
	var n int64
	for i := range msgs {
		n += int64(messageSize(&msgs[i]))
	}
	return n
}
