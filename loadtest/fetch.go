package loadtest

import (
	"bytes"
	"context"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/segmentio/kafka-go"
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

// fetcher reads one output partition from a start offset, in offset order.
type fetcher struct {
	client     *kafka.Client
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

// run reads until ctx ends, retrying failed fetches under kafkaio.Backoff (at most 1s apart) and
// counting them.
func (f *fetcher) run(ctx context.Context) {
	f.pos.Store(f.offset)
	_ = kafkaio.Read(ctx, f.client, kafkaio.Range{
		Topic: f.topic, Partition: f.part, Start: f.offset, End: -1, MaxWait: 200 * time.Millisecond,
		Backoff: kafkaio.Backoff{Max: time.Second},
		OnRetry: func(int, error) { f.st.errors.Add(1) },
	}, func(recs []kafkaio.Record) error {
		at := int64(time.Since(f.start))
		for i := range recs {
			f.observe(recs[i].Headers, at)
		}
		f.offset = recs[len(recs)-1].Offset + 1
		f.pos.Store(f.offset)
		return nil
	}) // it ends only when ctx does
}

// observe records one output record read at at.
func (f *fetcher) observe(headers []kafka.Header, at int64) {
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
