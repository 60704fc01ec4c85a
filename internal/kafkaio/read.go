package kafkaio

import (
	"context"
	"errors"
	"fmt"
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
	// Isolation says which records of transactional producers are read. Under ReadCommitted
	// nothing at or past the last stable offset is read: an End past it (a high watermark while
	// a transaction is open) makes Read stall there (see Stalls). Default: ReadCommitted.
	Isolation Isolation
	// End is the offset Read stops before. A negative End reads until ctx ends.
	End int64
	// MaxBytes caps one fetch response. Default: 8 MiB.
	MaxBytes int
	// MaxWait bounds how long one fetch waits on the broker when no record is available.
	// Default: 100ms.
	MaxWait time.Duration
	// Pool, when not nil and of the same Isolation, sends the fetches with those of the pool's
	// other readers, one request per broker (see FetchPool); its MaxWait replaces MaxWait.
	// Default: nil, a request of its own per fetch.
	Pool *FetchPool
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
	// OnRefused, when not nil, hears of input Read refused to decode (see "Bounded decoding");
	// Read goes on after it. Default limits: DefaultDecodeLimits for MaxBytes.
	OnRefused func(*RefusedInput)
	// OnAdvance, when not nil, hears each offset Read goes on from once everything below it was
	// passed to fn (or skipped: control records, aborted transactions, refused or deleted input),
	// so that a caller can resume a read that failed where it got to.
	OnAdvance func(next int64)
}

// Read fetches r.Partition of r.Topic from r.Start up to (not including) r.End, in offset order,
// one fetch request at a time, and calls fn on the calling goroutine with the data records of
// each fetch response that has any. It reads as PartitionReader does (records decoded in place,
// control records and, under ReadCommitted, aborted transactions skipped, input over the decode
// limits refused and passed to r.OnRefused), one fetch at a time; fn gets at most as many records
// of a response as the decode limits let one fetch hold. The records' Key, Value and header values (not
// the header names) point into Read's memory: like the slice that holds them, they are only
// valid until fn returns: copy what you keep. When retention deleted records before Read got to them (an
// OffsetOutOfRange answer), it tells r.OnSkip and goes on from the earliest available offset.
//
// A batch whose checksum or header is wrong is fetched again (it may have been damaged on the
// way); once corruptAttempts fetches in a row found it corrupt at the same offset, Read stops
// with an error wrapping ErrCorruptBatch instead of retrying it, whatever r.Failures says: Read
// never skips it, so the caller decides (the re-warm fails, as for any read it cannot finish).
//
// It returns nil once it reached r.End. Otherwise it returns fn's error unchanged, or a
// "kafkaio: ..." error naming the partition and offset that wraps ctx's error when ctx ended, the
// last fetch error after r.Failures failed fetches in a row, ErrCorruptBatch, or ErrStalled.
// Records already passed to fn stay passed.
func Read(ctx context.Context, c *kafka.Client, r Range, fn func([]Record) error) error {
	r = r.withDefaults()
	d := decoder{clientID: clientIDOf(c)}
	d.dec.retain = true
	d.dec.limits = DecodeLimits{}.withDefaults(r.MaxBytes)
	defer d.release()
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
			if r.OnAdvance != nil {
				r.OnAdvance(offset)
			}
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
	corrupt := 0
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
		if errors.Is(err, ErrCorruptBatch) {
			if corrupt++; corrupt >= corruptAttempts {
				return Permanent(fmt.Errorf("still corrupt after %d fetches: %w", corrupt, err))
			}
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
	if r.Isolation == "" {
		r.Isolation = ReadCommitted
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

// send sends f through r.Pool when it reads r's Isolation, else as a request of its own; either
// way the answer is awaited for the longest a fetch may take plus FetchSlack.
func (r *Range) send(ctx context.Context, c *kafka.Client, f *fetchRequest) (*fetchResponse, error) {
	if r.Pool != nil && r.Pool.cfg.Isolation == r.Isolation {
		// A fetch can wait for the broker's request in flight, then for its own.
		fctx, cancel := context.WithTimeout(ctx, 2*r.Pool.cfg.MaxWait+FetchSlack)
		defer cancel()
		return r.Pool.fetch(fctx, f)
	}
	fctx, cancel := context.WithTimeout(ctx, r.MaxWait+FetchSlack)
	defer cancel()
	return fetchPartition(fctx, c, f)
}

// decoder holds the records of the last fetch response and the memory they are decoded in; all
// of it is reused from fetch to fetch.
type decoder struct {
	clientID string
	bufs     bufferPool
	res      *fetchResponse // the last response, until the next fetch
	dec      BatchDecoder
	set      recordSet
	recs     []Record
	hdrs     headerSlab
}

// fetch fetches from offset and decodes the records in [offset, r.End) into d.recs. It returns
// the offset after the last record looked at (offset when there was none), or r.End once a record
// at or past it shows up.
func (d *decoder) fetch(ctx context.Context, c *kafka.Client, r *Range, offset int64) (int64, error) {
	d.release()
	res, err := r.send(ctx, c, &fetchRequest{
		clientID: d.clientID, topic: r.Topic, partition: int32(r.Partition), offset: offset,
		maxWait: r.MaxWait, maxBytes: int32(r.MaxBytes), isolation: r.Isolation, bufs: &d.bufs, epoch: -1,
	})
	if res != nil {
		d.res = res
	}
	if err != nil {
		return offset, err
	}
	if err := goodBatches(res, offset); err != nil {
		return offset, err
	}
	d.set.reset(&d.dec, res, r.Isolation.committed())
	for {
		rec, ok := d.set.nextRecord(&d.hdrs)
		if !ok {
			if ref := d.set.takeRefused(); ref != nil {
				if r.OnRefused != nil {
					r.OnRefused(ref)
				}
				continue
			}
			break
		}
		if r.End >= 0 && rec.offset >= r.End {
			return r.End, nil
		}
		d.recs = append(d.recs, Record{
			Topic: r.Topic, Partition: r.Partition, Offset: rec.offset, Time: time.UnixMilli(rec.time), Key: rec.rec.key, Value: rec.rec.value, Headers: rec.rec.headers,
		})
		if d.full() { // the rest of the response is fetched again
			return rec.offset + 1, nil
		}
	}
	if r.End >= 0 {
		return min(d.set.next, r.End), nil
	}
	return d.set.next, nil
}

// goodBatches checks the record batches of res, fetched at offset, and cuts a corrupt batch and
// what follows it off when good batches before it reach past offset: those are read, and the
// corrupt one is fetched again next, as PartitionReader does. It returns the scan's error when
// nothing before the first bad batch can be read.
func goodBatches(res *fetchResponse, offset int64) error {
	next, n, err := scanBatches(res.part.RecordBatches, offset)
	if err == nil {
		return nil
	}
	if !errors.Is(err, ErrCorruptBatch) || next <= offset {
		return err
	}
	res.part.RecordBatches = res.part.RecordBatches[:n]
	return nil
}

// full reports whether the records decoded so far hold as much decoded memory as one fetch may
// (see "Bounded decoding"): their headers, or the decompressed batches they point into, reached
// the decode limits.
func (d *decoder) full() bool {
	return d.hdrs.len() >= d.dec.limits.MaxHeaders || d.dec.holding() >= d.dec.limits.MaxBatchBytes
}

// release makes the memory of the last response's records available again.
func (d *decoder) release() {
	if d.res != nil {
		d.res.free(&d.bufs)
		d.res = nil
	}
	d.set.drop()
	d.dec.recycle()
	clear(d.recs)
	d.recs = d.recs[:0]
	d.hdrs.reset()
}
