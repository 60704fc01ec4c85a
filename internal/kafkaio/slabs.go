package kafkaio

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Record memory between batches. A reader decodes a batch's records into a record slice and
// their headers into a header slab (headerSlab), both reused from batch to batch so that steady
// reading allocates nothing. Kept per reader, they would stay as large as the largest batch the
// reader ever handed out, for every partition the worker reads, idle or not: at 96 partitions
// and 1000-record batches of four headers that is about 40 MB. Instead a reader takes a pair
// from its slabPool when a Fetch starts walking a response and gives it back when the batch is
// handed back (the next Fetch), so a reader waiting for records holds none. The readers of one
// FetchPool share one slabPool: the slabs held are as many as the batches in hand at once, a
// slab left unused for a whole trim period (slabTrimEvery) is dropped, so that the memory
// follows the batches in hand, not the partitions, and with a bound on the records in hand a
// slab given back is dropped when the free slabs would take the pool past it.
//
// The records in hand are bounded per pool too (FetchPoolConfig.MaxRecordBytes): a reader's
// Fetch ends its batch early, after at least MinBatchInHand records, while the pool's readers
// hold more decoded records than that, so that a worker catching up on many partitions at once
// (every partition's batch full, all waiting for the producer) holds about MaxRecordBytes of
// them, not partitions x batch size. The count is kept per Fetch, not per record, so it can go
// over by the records of the Fetches running at that moment.

// DefaultMaxRecordBytes is FetchPoolConfig.MaxRecordBytes's default: 8 MiB, about 29,000 records
// of four headers, so 1000-record batches of up to 29 partitions at once.
const DefaultMaxRecordBytes = 8 << 20

// MinBatchInHand is the fewest records a Fetch hands out before the pool's bound on records in
// hand ends its batch: every partition goes on in batches of at least that many.
const MinBatchInHand = 64

// Sizes of the decoded records a reader holds.
const (
	recordSize = int64(unsafe.Sizeof(Record{}))
	headerSize = int64(unsafe.Sizeof(Header{}))
)

// slabTrimEvery is how often a slabPool drops the slabs that stayed free since its last trim.
const slabTrimEvery = 10 * time.Second

// slab is a record slice and a header slice, empty, with the capacity of earlier batches.
type slab struct {
	recs []Record
	hdrs []Header
}

// slabPool holds free slabs. It is safe for concurrent use.
type slabPool struct {
	mu        sync.Mutex
	free      []slab
	freeBytes int64     // the bytes of the free slabs (slabBytes)
	minFree   int       // the fewest free slabs since the last trim: as many were not needed
	trimmed   time.Time // the last trim
	now       func() time.Time

	inHand atomic.Int64 // bytes of decoded records the readers hold
	limit  int64        // the most inHand should reach; 0: no bound
}

// newSlabPool returns an empty pool whose readers hold at most limit bytes of decoded records
// (0: no bound).
func newSlabPool(limit int64) *slabPool {
	return &slabPool{now: time.Now, trimmed: time.Now(), limit: limit}
}

// over reports whether the readers hold more decoded records than the limit, counting pending
// bytes a reader has not added yet.
func (p *slabPool) over(pending int64) bool {
	return p.limit > 0 && p.inHand.Load()+pending > p.limit
}

// take returns a free slab, or an empty one (whose slices the reader grows) when none is free.
func (p *slabPool) take() slab {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.free)
	if n == 0 {
		p.minFree = 0
		return slab{}
	}
	s := p.free[n-1]
	p.free[n-1] = slab{}
	p.free = p.free[:n-1]
	p.freeBytes -= slabBytes(s)
	p.minFree = min(p.minFree, n-1)
	return s
}

// put gives s back, its elements cleared so that it keeps no fetched bytes reachable. It drops s
// instead when the free slabs and the records in hand would hold more than the pool's limit
// together: the slabs are memory of the records in hand, and a worker whose partitions all
// caught up at once (each given a slab as large as its batch) would keep them all otherwise.
// Every slabTrimEvery it drops as many free slabs as stayed free since the last trim.
func (p *slabPool) put(s slab) {
	clear(s.recs)
	clear(s.hdrs)
	s.recs, s.hdrs = s.recs[:0], s.hdrs[:0]
	p.mu.Lock()
	defer p.mu.Unlock()
	n := slabBytes(s)
	if n > 0 && (p.limit <= 0 || p.freeBytes+n+p.inHand.Load() <= p.limit) {
		p.free = append(p.free, s)
		p.freeBytes += n
	}
	if now := p.now(); now.Sub(p.trimmed) >= slabTrimEvery {
		p.trim()
		p.trimmed = now
	}
}

// trim drops the minFree slabs that were not needed since the last trim, the largest first: a
// slab grown by one large batch is not kept for the small ones.
func (p *slabPool) trim() {
	for drop := p.minFree; drop > 0 && len(p.free) > 0; drop-- {
		i := 0
		for j := range p.free {
			if size(p.free[j]) > size(p.free[i]) {
				i = j
			}
		}
		last := len(p.free) - 1
		p.freeBytes -= slabBytes(p.free[i])
		p.free[i] = p.free[last]
		p.free[last] = slab{}
		p.free = p.free[:last]
	}
	p.minFree = len(p.free)
}

// size returns the capacity of s in elements, weighing a record as about three headers.
func size(s slab) int { return 3*cap(s.recs) + cap(s.hdrs) }

// slabBytes returns the memory of s: the capacity of its record and header slices.
func slabBytes(s slab) int64 { return int64(cap(s.recs))*recordSize + int64(cap(s.hdrs))*headerSize }

// held returns how many free slabs p holds.
func (p *slabPool) held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// handCount is the bytes of decoded records one reader holds, counted in its slabPool's
// inHand. It is safe for use by Fetch and Close at once: once closed, it counts nothing more.
type handCount struct {
	mu     sync.Mutex
	n      int64
	closed bool
}

// add counts n more bytes in p, unless closed.
func (h *handCount) add(p *slabPool, n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed && n != 0 {
		h.n += n
		p.inHand.Add(n)
	}
}

// drop takes every byte counted back out of p; close stops the counting for good.
func (h *handCount) drop(p *slabPool, close bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n != 0 {
		p.inHand.Add(-h.n)
		h.n = 0
	}
	h.closed = h.closed || close
}
