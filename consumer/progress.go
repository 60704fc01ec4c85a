package consumer

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// Progress is an input partition's progress as the Worker reports it to Observer.Progress: after
// every fetch, and while the partition's records are not taken (it is blocked at a refused record,
// or its writes hang) every few seconds, from the offsets the reader looks up.
type Progress struct {
	// Lag is the number of records between the worker's position (the next record to handle) and
	// the end of the partition: its last stable offset under kafkaio.ReadCommitted, its high
	// watermark under kafkaio.ReadUncommitted.
	Lag int64
	// LagTime is how far behind the worker is in time: the age, by its Kafka timestamp, of the
	// first record of the oldest batch not yet acknowledged; 0 when Lag is 0 or no record was
	// seen yet (LagTimeKnown false).
	LagTime time.Duration
	// LagTimeKnown says whether LagTime was measured.
	LagTimeKnown bool
	// Lead is the number of records between the log start and the worker's position: how many
	// more records retention may delete before it deletes records the worker has not read yet.
	// -1 when the broker does not report the log start.
	Lead int64
	// LastProgress is when the worker's position last moved, or it was last found at the end of
	// the partition (nothing to do is progress too).
	LastProgress time.Time
}

// progress tracks one assigned partition's position for the Progress reports and for readiness.
// The partition goroutine moves it (handled, batch); the reader's fetch goroutine reports the
// partition's offsets to it (offsets, failed). It is safe for concurrent use; the methods of a nil
// *progress do nothing.
type progress struct {
	p   int32
	obs Observer

	pos          atomic.Int64 // the next offset to handle; -1 until known
	head         atomic.Int64 // Kafka timestamp of the first record of the batch in hand, Unix ns; 0: none
	lastProgress atomic.Int64 // Unix ns
	failingSince atomic.Int64 // Unix ns of the first failed fetch since the last good one; 0: fetching
}

// newProgress returns the tracker of partition p, which starts at offset (negative: unknown until
// the first fetch).
func newProgress(p int32, offset int64, obs Observer) *progress {
	pr := &progress{p: p, obs: obs}
	pr.pos.Store(-1)
	if offset >= 0 {
		pr.pos.Store(offset)
	}
	pr.lastProgress.Store(time.Now().UnixNano())
	return pr
}

// batch records that a batch whose first record is stamped first is being handled.
func (pr *progress) batch(first time.Time) {
	if pr != nil && !first.IsZero() {
		pr.head.Store(first.UnixNano())
	}
}

// handled records that every record below next was handled.
func (pr *progress) handled(next int64) {
	if pr != nil && pr.pos.Swap(next) != next {
		pr.lastProgress.Store(time.Now().UnixNano())
	}
}

// offsets reports the partition's offsets o (PartitionReaderConfig.OnOffsets): the fetch works.
func (pr *progress) offsets(o kafkaio.Offsets) {
	if pr == nil {
		return
	}
	pr.failingSince.Store(0)
	now := time.Now()
	if o.From >= 0 { // the first fetch's offset is where the worker starts
		pr.pos.CompareAndSwap(-1, o.From)
	}
	pos := pr.pos.Load()
	if pos < 0 {
		return
	}
	rep := Progress{Lag: max(0, o.End-pos), Lead: -1}
	if o.LogStart >= 0 {
		rep.Lead = max(0, pos-o.LogStart)
	}
	if rep.Lag == 0 {
		pr.lastProgress.Store(now.UnixNano())
		rep.LagTimeKnown = true
	} else if h := pr.head.Load(); h != 0 {
		rep.LagTime, rep.LagTimeKnown = max(0, now.Sub(time.Unix(0, h))), true
	}
	rep.LastProgress = time.Unix(0, pr.lastProgress.Load())
	pr.obs.Progress(pr.p, rep)
}

// failed records a failed fetch (PartitionReaderConfig.OnError).
func (pr *progress) failed() {
	pr.failingSince.CompareAndSwap(0, time.Now().UnixNano())
	pr.obs.FetchError(pr.p)
}

// failingFor returns for how long the partition's fetches have been failing (0: they are not).
func (pr *progress) failingFor(now time.Time) time.Duration {
	if s := pr.failingSince.Load(); s != 0 {
		return now.Sub(time.Unix(0, s))
	}
	return 0
}

// progressSet holds the trackers of the worker's assigned partitions, for readiness. It is safe
// for concurrent use.
type progressSet struct {
	mu    sync.Mutex
	parts map[int32]*progress
}

// add registers pr until the returned function is called.
func (s *progressSet) add(pr *progress) (remove func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.parts == nil {
		s.parts = make(map[int32]*progress)
	}
	s.parts[pr.p] = pr
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.parts[pr.p] == pr {
			delete(s.parts, pr.p)
		}
	}
}

// failing reports whether the fetches of some partition have been failing for longer than bound.
func (s *progressSet) failing(bound time.Duration) bool {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pr := range s.parts {
		if pr.failingFor(now) > bound {
			return true
		}
	}
	return false
}
