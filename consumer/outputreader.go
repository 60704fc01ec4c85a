package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
)

// OutputReader reads the output topic for dedup's snapshot protocol: End tells where the output
// partitions end before a snapshot is copied, and Rewarm feeds the identities of the records
// produced after a snapshot back into the restored filter. It connects with the same brokers,
// client ID, TLS and SASL settings as the Worker of the same Config. It is safe for concurrent use;
// create it with NewOutputReader.
type OutputReader struct {
	cfg       Config
	key       KeyFunc
	log       *slog.Logger
	transport *kafka.Transport
	client    *kafka.Client

	// fetchWait bounds how long one fetch waits on the broker when no record is available.
	fetchWait time.Duration
	// emptyFetches is how many fetches in a row may return nothing below the end offset before
	// the rest of the range is given up as unreadable.
	emptyFetches int
}

// NewOutputReader returns an OutputReader for cfg's output topic that extracts identities with
// key (the Worker's KeyFunc: output records keep the key, value and headers of their input
// records) and logs to log (nil means slog.Default()). It does not connect; the first call does.
// cfg is not validated: a Config the Worker rejects makes every call fail.
func NewOutputReader(cfg Config, key KeyFunc, log *slog.Logger) *OutputReader {
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.Default()
	}
	tr := newTransport(cfg)
	return &OutputReader{
		cfg:          cfg,
		key:          key,
		log:          log,
		transport:    tr,
		client:       &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Transport: tr, Timeout: cfg.ProduceTimeout},
		fetchWait:    100 * time.Millisecond,
		emptyFetches: 5,
	}
}

// Close releases the reader's idle broker connections. A later call opens new ones.
func (r *OutputReader) Close() error {
	r.transport.CloseIdleConnections()
	return nil
}

// End returns the end offsets (high watermarks) of the output partitions that can hold records of
// inputPartition: {inputPartition} under PartitionSame, every output partition under
// PartitionHash or when inputPartition < 0 (global scope). On failure it returns a "consumer: ..."
// error wrapping the broker's and no offsets.
func (r *OutputReader) End(ctx context.Context, inputPartition int32) (map[int32]int64, error) {
	var parts []int
	if r.cfg.Partitioning == PartitionSame && inputPartition >= 0 {
		parts = []int{int(inputPartition)}
	} else {
		n, err := r.partitionCount(ctx)
		if err != nil {
			return nil, err
		}
		parts = make([]int, n)
		for i := range parts {
			parts[i] = i
		}
	}
	offs, err := r.listOffsets(ctx, parts, false)
	if err != nil {
		return nil, err
	}
	end := make(map[int32]int64, len(parts))
	for _, p := range parts {
		o := offs[p]
		if o.Error != nil {
			return nil, fmt.Errorf("consumer: end offset of output partition %s/%d: %w", r.cfg.OutputTopic, p, o.Error)
		}
		end[int32(p)] = o.LastOffset
	}
	return end, nil
}

// Rewarm reads each output partition q of from, from offset from[q] up to the partition's end
// offset at the time of the call (records produced during the call are not read), and calls add
// with the identity of every record that has one (the KeyFunc's ok). In ModeMark, records carrying
// the mark header are skipped: they are duplicates, so their identities are already known. It
// returns the number of records passed to add.
//
// add is called from the calling goroutine only, one record at a time, partition by partition;
// its id is only valid during the call. A partition with nothing to read (from[q] at or past its
// end) costs no fetch. Records deleted by retention are skipped with a warning (reading starts at
// the earliest available offset), as are partitions the topic does not have and ranges that
// cannot be read. On a broker error that retries do not cure, or when ctx ends, it returns a
// "consumer: ..." error together with the number of records added so far.
func (r *OutputReader) Rewarm(ctx context.Context, from map[int32]int64, add func(id []byte)) (int, error) {
	if len(from) == 0 {
		return 0, nil
	}
	parts := slices.Sorted(maps.Keys(from))
	ids := make([]int, len(parts))
	for i, q := range parts {
		ids[i] = int(q)
	}
	offs, err := r.listOffsets(ctx, ids, true)
	if err != nil {
		return 0, err
	}
	rs := rewarmState{r: r, add: add, key: make([]byte, 0, 256), value: make([]byte, 0, 1024)}
	rs.hdrSeq = rs.hdr.all
	for _, q := range parts {
		o := offs[int(q)]
		start, end := from[q], o.LastOffset
		switch {
		case errors.Is(o.Error, kafka.UnknownTopicOrPartition):
			r.log.Warn("output partition in the checkpoint does not exist; nothing to re-warm from it",
				"topic", r.cfg.OutputTopic, "partition", q, "from", start)
			continue
		case o.Error != nil:
			return rs.added, fmt.Errorf("consumer: offsets of output partition %s/%d: %w", r.cfg.OutputTopic, q, o.Error)
		case end < start:
			r.log.Warn("output partition ends before the offset the checkpoint recorded (topic recreated or truncated?); nothing to re-warm from it",
				"topic", r.cfg.OutputTopic, "partition", q, "from", start, "end", end)
			continue
		case end == start:
			continue
		case start < o.FirstOffset:
			r.log.Warn("output records were deleted by retention before they could be re-read; their identities are not re-warmed and their duplicates may pass",
				"topic", r.cfg.OutputTopic, "partition", q, "from", start, "earliest", o.FirstOffset, "skipped", o.FirstOffset-start)
			start = o.FirstOffset
		}
		if err := rs.partition(ctx, int(q), start, end); err != nil {
			return rs.added, err
		}
	}
	return rs.added, nil
}

// partitionCount returns the number of partitions of the output topic.
func (r *OutputReader) partitionCount(ctx context.Context) (int, error) {
	md, err := r.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{r.cfg.OutputTopic}})
	if err != nil {
		return 0, fmt.Errorf("consumer: metadata of output topic %q: %w", r.cfg.OutputTopic, err)
	}
	for _, t := range md.Topics {
		if t.Name != r.cfg.OutputTopic {
			continue
		}
		if t.Error != nil {
			return 0, fmt.Errorf("consumer: output topic %q: %w", r.cfg.OutputTopic, t.Error)
		}
		if len(t.Partitions) == 0 {
			return 0, fmt.Errorf("consumer: output topic %q has no partitions", r.cfg.OutputTopic)
		}
		return len(t.Partitions), nil
	}
	return 0, fmt.Errorf("consumer: output topic %q not in metadata", r.cfg.OutputTopic)
}

// listOffsets returns the end offset (and the earliest offset, when first is set) of each of the
// output partitions parts, with partition-level errors left in the results. A partition the topic
// does not have gets kafka.UnknownTopicOrPartition.
func (r *OutputReader) listOffsets(ctx context.Context, parts []int, first bool) (map[int]kafka.PartitionOffsets, error) {
	reqs := make([]kafka.OffsetRequest, 0, 2*len(parts))
	for _, p := range parts {
		reqs = append(reqs, kafka.LastOffsetOf(p))
		if first {
			reqs = append(reqs, kafka.FirstOffsetOf(p))
		}
	}
	res, err := r.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{r.cfg.OutputTopic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("consumer: listing offsets of output topic %q: %w", r.cfg.OutputTopic, err)
	}
	out := make(map[int]kafka.PartitionOffsets, len(parts))
	for _, po := range res.Topics[r.cfg.OutputTopic] {
		out[po.Partition] = po
	}
	for _, p := range parts {
		if _, ok := out[p]; !ok {
			out[p] = kafka.PartitionOffsets{Partition: p, Error: kafka.UnknownTopicOrPartition}
		}
	}
	return out, nil
}

// rewarmState is the working memory of one Rewarm call.
type rewarmState struct {
	r     *OutputReader
	add   func([]byte)
	added int

	key, value []byte
	hdr        headerSource
	hdrSeq     func(yield func(string, []byte) bool)
}

// partition reads output partition q from start up to (not including) end.
func (s *rewarmState) partition(ctx context.Context, q int, start, end int64) error {
	r := s.r
	began, added := time.Now(), s.added
	mark := r.cfg.Mode == ModeMark
	offset := start
	empty, failed := 0, 0
	for offset < end {
		res, err := r.client.Fetch(ctx, &kafka.FetchRequest{
			Topic: r.cfg.OutputTopic, Partition: q, Offset: offset,
			MinBytes: 1, MaxBytes: int64(r.cfg.FetchMaxBytes), MaxWait: r.fetchWait,
		})
		if err == nil && res.Error != nil {
			err = res.Error
		}
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("consumer: re-warming from output partition %s/%d at offset %d: %w", r.cfg.OutputTopic, q, offset, ctx.Err())
			}
			if errors.Is(err, kafka.OffsetOutOfRange) {
				// Retention deleted records while they were read: go on from the earliest one.
				if first, ferr := r.firstOffset(ctx, q); ferr == nil && first > offset {
					r.log.Warn("output records were deleted by retention while they were re-read; their identities are not re-warmed and their duplicates may pass",
						"topic", r.cfg.OutputTopic, "partition", q, "from", offset, "earliest", first, "skipped", first-offset)
					offset = first
					continue
				}
			}
			if failed++; failed >= 3 {
				return fmt.Errorf("consumer: re-warming from output partition %s/%d at offset %d: %w", r.cfg.OutputTopic, q, offset, err)
			}
			if !sleepCtx(ctx, backoff(failed-1, r.cfg.RetryBackoffMax)) {
				return fmt.Errorf("consumer: re-warming from output partition %s/%d at offset %d: %w", r.cfg.OutputTopic, q, offset, ctx.Err())
			}
			continue
		}
		failed = 0
		next, err := s.records(res.Records, offset, end, mark)
		if err != nil {
			return fmt.Errorf("consumer: re-warming from output partition %s/%d at offset %d: %w", r.cfg.OutputTopic, q, offset, err)
		}
		if next > offset {
			offset, empty = next, 0
			continue
		}
		// Nothing at or after offset: the records below end are gone (compacted away), since
		// they existed when end was read.
		if empty++; empty >= r.emptyFetches {
			r.log.Warn("output records could not be read; their identities are not re-warmed",
				"topic", r.cfg.OutputTopic, "partition", q, "from", offset, "end", end)
			break
		}
	}
	r.log.Debug("re-warmed from output partition", "topic", r.cfg.OutputTopic, "partition", q,
		"from", start, "end", end, "identities", s.added-added, "took", time.Since(began).String())
	return nil
}

// records passes the identities of the fetched records in [offset, end) to add and returns the
// offset after the last record it looked at (offset when there was none), or end once a record at
// or past end shows up.
func (s *rewarmState) records(rr kafka.RecordReader, offset, end int64, mark bool) (int64, error) {
	next := offset
	for {
		rec, err := rr.ReadRecord()
		if errors.Is(err, io.EOF) {
			return next, nil
		}
		if err != nil {
			return next, err
		}
		if rec.Offset < next { // the broker answers with whole batches
			closeBytes(rec)
			continue
		}
		if rec.Offset >= end {
			closeBytes(rec)
			return end, nil
		}
		next = rec.Offset + 1
		if mark && isMarked(rec.Headers, s.r.cfg.MarkHeader) {
			closeBytes(rec)
			continue
		}
		var key, value []byte
		if key, s.key, err = readInto(rec.Key, s.key); err == nil {
			value, s.value, err = readInto(rec.Value, s.value)
		}
		closeBytes(rec)
		if err != nil {
			return next, err
		}
		s.hdr.cur = rec.Headers
		id, ok := s.r.key(key, value, s.hdrSeq)
		s.hdr.cur = nil
		if ok {
			s.add(id)
			s.added++
		}
	}
}

// isMarked reports whether headers end with the mark header the Worker appends to duplicates.
func isMarked(headers []kafka.Header, name string) bool {
	if len(headers) == 0 {
		return false
	}
	h := headers[len(headers)-1]
	return h.Key == name && string(h.Value) == MarkValue
}

// readInto reads b into buf (grown as needed) and returns the bytes read (nil for a null b) and
// the buffer to reuse.
func readInto(b kafka.Bytes, buf []byte) (data, reuse []byte, err error) {
	if b == nil {
		return nil, buf, nil
	}
	n := b.Len()
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(b, buf); err != nil {
		return nil, buf, err
	}
	return buf, buf, nil
}

func closeBytes(rec *kafka.Record) {
	if rec.Key != nil {
		rec.Key.Close()
	}
	if rec.Value != nil {
		rec.Value.Close()
	}
}

// firstOffset returns the earliest available offset of output partition q.
func (r *OutputReader) firstOffset(ctx context.Context, q int) (int64, error) {
	res, err := r.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{
		Topics: map[string][]kafka.OffsetRequest{r.cfg.OutputTopic: {kafka.FirstOffsetOf(q)}},
	})
	if err != nil {
		return 0, err
	}
	for _, po := range res.Topics[r.cfg.OutputTopic] {
		if po.Partition == q {
			return po.FirstOffset, po.Error
		}
	}
	return 0, kafka.UnknownTopicOrPartition
}
