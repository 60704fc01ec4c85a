package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/segmentio/kafka-go"
)

// ErrStalled is wrapped by Read's error when fetches kept returning nothing below Range.End: the
// records there are gone (compacted or deleted) although the end offset said they existed.
var ErrStalled = errors.New("kafkaio: fetches return nothing below the end offset")

// Range is a span of one partition for Read, and how to read it.
type Range struct {
	// Topic and Partition name the partition.
	Topic     string
	Partition int
	// Start is the first offset to read.
	Start int64
	// End is the offset Read stops before. A negative End reads until ctx ends.
	End int64
	// MaxBytes caps one fetch response. Default: 8 MiB.
	MaxBytes int
	// MaxWait bounds how long one fetch waits on the broker when no record is available.
	// Default: 100ms.
	MaxWait time.Duration
	// Backoff spaces the retries of failed fetches. Default: the zero Backoff's defaults.
	Backoff Backoff
	// Failures is how many fetches in a row may fail before Read gives up; 0 means retry until
	// ctx ends.
	Failures int
	// Stalls is how many fetches in a row may return no record below End before Read gives up
	// with ErrStalled. Default: 5. Unused when End is negative.
	Stalls int
	// OnRetry, when not nil, hears every failed fetch (attempt counts from 1) before it is
	// retried.
	OnRetry func(attempt int, err error)
	// OnSkip, when not nil, hears that the records in [from, to) were deleted by retention before
	// they could be read; Read goes on at to.
	OnSkip func(from, to int64)
}

// Record is one record that Read passes on. Key and Value are nil for a null key or value; like
// the slice of records that holds them, they are only valid until the callback returns.
type Record struct {
	Offset  int64
	Time    time.Time
	Key     []byte
	Value   []byte
	Headers []kafka.Header
}

// Read fetches r.Partition of r.Topic from r.Start up to (not including) r.End, in offset order,
// one fetch request at a time, and calls fn on the calling goroutine with the records of each
// fetch response that has any. When retention deleted records before Read got to them (an
// OffsetOutOfRange answer), it tells r.OnSkip and goes on from the earliest available offset.
//
// It returns nil once it reached r.End. Otherwise it returns fn's error unchanged, or a
// "kafkaio: ..." error naming the partition and offset that wraps ctx's error when ctx ended, the
// last fetch error after r.Failures failed fetches in a row, or ErrStalled. Records already passed
// to fn stay passed.
func Read(ctx context.Context, c *kafka.Client, r Range, fn func([]Record) error) error {
	r = r.withDefaults()
	var d decoder
	offset := r.Start
	stalls := 0
	for r.End < 0 || offset < r.End {
		next, err := r.fetch(ctx, c, &d, offset)
		if err != nil {
			return err
		}
		if len(d.recs) > 0 {
			if err := fn(d.recs); err != nil {
				return err
			}
		}
		if next > offset {
			offset, stalls = next, 0
			continue
		}
		if stalls++; r.End >= 0 && stalls >= r.Stalls {
			return r.errorf(offset, fmt.Errorf("%w %d", ErrStalled, r.End))
		}
	}
	return nil
}

// fetch fetches from offset into d under the retry policy (r.Backoff, r.Failures) and returns the
// offset to go on from. When retention deleted the records at offset, it returns the earliest
// offset left, without records.
func (r *Range) fetch(ctx context.Context, c *kafka.Client, d *decoder, offset int64) (int64, error) {
	var next int64
	err := r.Backoff.Retry(ctx, r.Failures, func(attempt int) error {
		var err error
		next, err = d.fetch(ctx, c, r, offset)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if first, ok := r.retained(ctx, c, offset, err); ok {
			next = first
			return nil
		}
		if r.OnRetry != nil && (r.Failures <= 0 || attempt+1 < r.Failures) {
			r.OnRetry(attempt+1, err)
		}
		return err
	})
	switch {
	case err == nil:
		return next, nil
	case ctx.Err() != nil:
		return offset, r.errorf(offset, ctx.Err())
	}
	return offset, r.errorf(offset, err)
}

func (r Range) withDefaults() Range {
	if r.MaxBytes <= 0 {
		r.MaxBytes = 8 << 20
	}
	if r.MaxWait <= 0 {
		r.MaxWait = 100 * time.Millisecond
	}
	if r.Stalls <= 0 {
		r.Stalls = 5
	}
	return r
}

func (r *Range) errorf(offset int64, err error) error {
	return fmt.Errorf("kafkaio: reading %s/%d at offset %d: %w", r.Topic, r.Partition, offset, err)
}

// retained reports, after a failed fetch at offset, whether retention deleted the records from
// offset on; if so it returns the earliest offset left, after telling OnSkip.
func (r *Range) retained(ctx context.Context, c *kafka.Client, offset int64, err error) (int64, bool) {
	if !errors.Is(err, kafka.OffsetOutOfRange) {
		return 0, false
	}
	offs, lerr := ListOffsets(ctx, c, r.Topic, []int{r.Partition})
	if lerr != nil {
		return 0, false
	}
	o := offs[r.Partition]
	if o.Error != nil || o.FirstOffset <= offset {
		return 0, false
	}
	if r.OnSkip != nil {
		r.OnSkip(offset, o.FirstOffset)
	}
	return o.FirstOffset, true
}

// decoder holds the records of the last fetch response and the buffer their keys and values are
// copied into; all are reused from fetch to fetch.
type decoder struct {
	recs  []Record
	spans []span // where each record's key and value are in buf, until resolve
	buf   []byte
}

// span locates a key or value in decoder.buf; n < 0 stands for null.
type span struct{ off, n int }

// fetch fetches from offset and decodes the records in [offset, r.End) into d.recs. It returns
// the offset after the last record looked at (offset when there was none), or r.End once a record
// at or past it shows up.
func (d *decoder) fetch(ctx context.Context, c *kafka.Client, r *Range, offset int64) (int64, error) {
	clear(d.recs) // drop references to the previous headers
	d.recs, d.spans, d.buf = d.recs[:0], d.spans[:0], d.buf[:0]
	res, err := c.Fetch(ctx, &kafka.FetchRequest{
		Topic: r.Topic, Partition: r.Partition, Offset: offset,
		MinBytes: 1, MaxBytes: int64(r.MaxBytes), MaxWait: r.MaxWait,
	})
	if err == nil && res.Error != nil {
		err = res.Error
	}
	if err != nil {
		return offset, err
	}
	next := offset
	for {
		rec, err := res.Records.ReadRecord()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			d.recs = d.recs[:0]
			return offset, err
		}
		switch {
		case rec.Offset < next: // the broker answers with whole batches
			closeRecord(rec)
			continue
		case r.End >= 0 && rec.Offset >= r.End:
			closeRecord(rec)
			d.resolve()
			return r.End, nil
		}
		if err := d.add(rec); err != nil {
			d.recs = d.recs[:0]
			return offset, err
		}
		next = rec.Offset + 1
	}
	d.resolve()
	return next, nil
}

// add appends rec to d.recs and copies its key and value into d.buf.
func (d *decoder) add(rec *kafka.Record) error {
	defer closeRecord(rec)
	k, err := d.copy(rec.Key)
	if err != nil {
		return err
	}
	v, err := d.copy(rec.Value)
	if err != nil {
		return err
	}
	d.recs = append(d.recs, Record{Offset: rec.Offset, Time: rec.Time, Headers: rec.Headers})
	d.spans = append(d.spans, k, v)
	return nil
}

// copy appends b to d.buf and returns where it went.
func (d *decoder) copy(b kafka.Bytes) (span, error) {
	if b == nil {
		return span{n: -1}, nil
	}
	s := span{off: len(d.buf), n: b.Len()}
	d.buf = append(d.buf, make([]byte, s.n)...)
	_, err := io.ReadFull(b, d.buf[s.off:])
	return s, err
}

// resolve points every record's Key and Value into d.buf, which no longer moves.
func (d *decoder) resolve() {
	view := func(s span) []byte {
		if s.n < 0 {
			return nil
		}
		return d.buf[s.off : s.off+s.n : s.off+s.n]
	}
	for i := range d.recs {
		d.recs[i].Key, d.recs[i].Value = view(d.spans[2*i]), view(d.spans[2*i+1])
	}
}

func closeRecord(rec *kafka.Record) {
	if rec.Key != nil {
		rec.Key.Close()
	}
	if rec.Value != nil {
		rec.Value.Close()
	}
}
