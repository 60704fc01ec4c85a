package kafkaio

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Produce memory. The records a Producer is given are encoded into a batch of their own (and
// compressed, with compression), and kafka-go copies each request into its own buffer to send
// it, so a batch in flight holds about twice its records' size besides the records themselves.
// Each partition has one batch in flight, so without a bound a worker of many partitions holds
// that for all of them at once: at 96 partitions in a catch-up, tens of MiB for a moment. With
// ProducerConfig.MaxBufferedBytes set, Produce and ProduceParts wait until the records of the
// calls in progress (their estimated size, messageSize) leave room for theirs, in the order they
// came; a call larger than the bound goes alone. A call that waited DefaultProduceMemoryWait
// goes ahead over the bound: a call whose produce the producer retries (a leader moving, too few
// in-sync replicas) holds its bytes until it succeeds, and the bound must not stall the
// partitions of the healthy brokers behind such calls for longer than that. The memory then
// passes the bound by what those calls hold, as it did without one.

// DefaultMaxProduceBytes is the bound on the records being produced at once that the worker
// sets for all its producers together (ProducerConfig.Memory): 8 MiB, eight full requests of
// DefaultBatchBytes.
const DefaultMaxProduceBytes = 8 << 20

// DefaultProduceMemoryWait is how long a call waits for room under a ProduceMemory before it
// goes ahead over the bound: 1 s.
const DefaultProduceMemoryWait = time.Second

// ProduceMemory counts the estimated bytes of the records of the Produce and ProduceParts calls
// in progress of the producers that share it (ProducerConfig.Memory) against a limit. Calls that wait are served in order, so that a large call is not passed over
// for ever by smaller ones that keep fitting. It is safe for concurrent use; a nil
// ProduceMemory bounds nothing.
type ProduceMemory struct {
	limit int64
	wait  time.Duration                        // DefaultProduceMemoryWait
	after func(time.Duration) <-chan time.Time // time.After; a test's own clock
	mu    sync.Mutex
	held  int64
	queue []*memoryWaiter // calls waiting, in order
}

// memoryWaiter is a call waiting for n bytes; ready is closed once they are taken for it.
type memoryWaiter struct {
	n     int64
	ready chan struct{}
}

// NewProduceMemory returns a bound of limit bytes for the producers given it, or nil for none
// (limit <= 0).
func NewProduceMemory(limit int64) *ProduceMemory {
	if limit <= 0 {
		return nil
	}
	return &ProduceMemory{limit: limit, wait: DefaultProduceMemoryWait, after: time.After}
}

// acquire waits until n more bytes fit under the limit, or nothing is held, with no call
// waiting before it, or m.wait passed, and takes them; it returns the bytes taken (n, at most the
// limit) to give back to release, or ctx's error once ctx ends first.
func (m *ProduceMemory) acquire(ctx context.Context, n int64) (int64, error) {
	if m == nil {
		return 0, nil
	}
	n = min(n, m.limit)
	m.mu.Lock()
	if len(m.queue) == 0 && m.fits(n) {
		m.held += n
		m.mu.Unlock()
		return n, nil
	}
	w := &memoryWaiter{n: n, ready: make(chan struct{})}
	m.queue = append(m.queue, w)
	m.mu.Unlock()
	select {
	case <-w.ready:
		return n, nil
	case <-m.after(m.wait):
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.dequeue(w) {
			m.held += n // over the bound
			m.grant()   // the call after it may fit now
		}
		return n, nil
	case <-ctx.Done():
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dequeue(w) {
		m.held -= n // taken for it meanwhile
	}
	m.grant() // the call after it may fit now
	return 0, ctx.Err()
}

// dequeue removes w from the calls waiting and reports whether it was there (else its bytes were
// taken for it). m.mu is held.
func (m *ProduceMemory) dequeue(w *memoryWaiter) bool {
	i := slices.Index(m.queue, w)
	if i >= 0 {
		m.queue = slices.Delete(m.queue, i, i+1)
	}
	return i >= 0
}

// fits reports whether n more bytes may be taken: they fit under the limit, or nothing is held.
// m.mu is held.
func (m *ProduceMemory) fits(n int64) bool {
	return m.held == 0 || m.held+n <= m.limit
}

// grant takes the bytes of the waiting calls, in order, while they fit. m.mu is held.
func (m *ProduceMemory) grant() {
	for len(m.queue) > 0 && m.fits(m.queue[0].n) {
		w := m.queue[0]
		m.queue = slices.Delete(m.queue, 0, 1)
		m.held += w.n
		close(w.ready)
	}
}

// release gives back n bytes taken by acquire.
func (m *ProduceMemory) release(n int64) {
	if m == nil || n == 0 {
		return
	}
	m.mu.Lock()
	m.held -= n
	m.grant()
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
