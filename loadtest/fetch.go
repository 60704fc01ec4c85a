package loadtest

import (
	"bytes"
	"context"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// Obs is one record of this run read from the output topic.
type Obs struct {
	// Seq is the record's lt-seq.
	Seq int64
	// At is when the verifier read it, in nanoseconds since the run's start: an upper bound of
	// when the worker processed it.
	At int64
	// Marked is true when the record carries the mark header with value "1" (mark mode).
	Marked bool
}

// outputState is what the fetchers share with the run loop; every field is safe for concurrent
// use.
type outputState struct {
	observed atomic.Int64 // records of this run read (markers excluded)
	lastAt   atomic.Int64 // At of the newest record of this run read
	markers  []atomic.Bool
	nMarkers atomic.Int64
	foreign  atomic.Int64 // records without this run's lt-run header
	errors   atomic.Int64 // failed fetch requests
}

// fetchMaxWait is how long the broker holds the verifier's fetch while the output has no new
// record.
const fetchMaxWait = 200 * time.Millisecond

// fetcher reads one output partition from a start offset, in offset order.
type fetcher struct {
	client     *kafkaio.Client
	pool       *kafkaio.FetchPool // the fetches of every output partition, one request per broker
	topic      string
	part       int
	offset     int64
	start      time.Time
	runID      []byte
	markHeader string
	count      int64 // records planned: lt-seq at or above is a marker
	st         *outputState

	pos atomic.Int64 // next offset to read
	out []Obs        // owned by run until it returns
}

// run reads until ctx ends (read_committed, like a consumer of the output must under exactly-once
// delivery), counting failed fetches; the reader retries them by itself (at most 1s apart). pos
// follows the reader's next offset, which moves past transaction markers and aborted records, so
// a partition whose log ends with a marker is read up to its end.
func (f *fetcher) run(ctx context.Context) {
	f.pos.Store(f.offset)
	r := kafkaio.NewPartitionReader(f.client, kafkaio.PartitionReaderConfig{
		Topic: f.topic, Partition: f.part, Offset: f.offset, MaxWait: fetchMaxWait,
		Backoff: kafkaio.Backoff{Max: time.Second}, Pool: f.pool,
	})
	defer func() { <-r.Close() }()
	for ctx.Err() == nil {
		b, err := r.Fetch(ctx, 10000, 0)
		if err != nil {
			if ctx.Err() == nil {
				f.st.errors.Add(1)
			}
			continue
		}
		at := int64(time.Since(f.start))
		for i := range b.Records {
			f.observe(b.Records[i].Headers, at)
		}
		f.offset = b.Next
		f.pos.Store(f.offset)
	}
}

// observe records one output record read at at.
func (f *fetcher) observe(headers []kafkaio.Header, at int64) {
	seq := int64(-1)
	ours, end, marked := false, false, false
	for _, h := range headers {
		switch h.Key {
		case HeaderRun:
			ours = bytes.Equal(h.Value, f.runID)
		case HeaderSeq:
			seq = parseSeq(h.Value)
		case HeaderEnd:
			end = true
		default:
			if f.markHeader != "" && h.Key == f.markHeader {
				marked = string(h.Value) == "1"
			}
		}
	}
	if !ours || seq < 0 {
		f.st.foreign.Add(1)
		return
	}
	f.out = append(f.out, Obs{Seq: seq, At: at, Marked: marked})
	if end {
		if i := seq - f.count; i >= 0 && i < int64(len(f.st.markers)) && !f.st.markers[i].Swap(true) {
			f.st.nMarkers.Add(1)
		}
	} else {
		f.st.observed.Add(1)
	}
	for {
		old := f.st.lastAt.Load()
		if at <= old || f.st.lastAt.CompareAndSwap(old, at) {
			break
		}
	}
}

// parseSeq parses a non-negative decimal lt-seq, or returns -1.
func parseSeq(b []byte) int64 {
	if len(b) == 0 || len(b) > 18 {
		return -1
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int64(c-'0')
	}
	return n
}
