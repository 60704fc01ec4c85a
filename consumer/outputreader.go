package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/kdedup/kdedup/identity"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// OutputReader reads the output topic for dedup's snapshot protocol; it implements dedup.OutputLog
// (internal/app wires it in: consumer does not import dedup). End tells
// where the output partitions end before a snapshot is copied, and Rewarm feeds the identities of
// the records produced after a snapshot back into the restored filter. OffsetsAt and Read serve a
// rebuild of a filter that has no usable snapshot: where the window starts in the output topic by
// record timestamp, and the records of each stretch of it. It connects with the same brokers,
// client ID, TLS and SASL settings as the Worker of the same Config. It is safe for concurrent use;
// create it with NewOutputReader.
type OutputReader struct {
	cfg    Config
	key    KeyFunc
	log    *slog.Logger
	client *kafkaio.Client

	poolMu sync.Mutex
	pool   *kafkaio.FetchPool // the re-warm's fetches, one request per broker; replaced by Close

	// fetchWait bounds how long one fetch waits on the broker when no record is available.
	fetchWait time.Duration
	// emptyFetches is how many fetches in a row may return nothing below the end offset before
	// the rest of the range is given up as unreadable.
	emptyFetches int
	// skipped hears the records retention deleted before they were read back; nil: nobody.
	skipped func(n int64)
	// truncated hears the output offsets gone from below a checkpoint's recorded end; nil: nobody.
	truncated func(n int64)
}

// OnSkipped makes r report to fn the output records that retention deleted before a re-warm or
// rebuild read them back (their identities are not in the filter, so their duplicates pass). It
// must be called before r is used; fn must be safe for concurrent use.
func (r *OutputReader) OnSkipped(fn func(n int64)) { r.skipped = fn }

// skip reports n records deleted by retention before they were read back.
func (r *OutputReader) skip(n int64) {
	if r.skipped != nil && n > 0 {
		r.skipped(n)
	}
}

// OnTruncated makes r report to fn the output offsets that a checkpoint recorded as written but the
// output partition no longer has when a re-warm or rebuild reads it: its log was truncated below
// them (an unclean leader election) or the topic was deleted and created again. Those records are
// gone from the output although their identities are in the restored filter, so a copy of them
// sent again is dropped: the events are lost downstream. It must be called before r is used; fn
// must be safe for concurrent use.
func (r *OutputReader) OnTruncated(fn func(n int64)) { r.truncated = fn }

// truncate reports n output offsets gone from below a checkpoint's recorded end.
func (r *OutputReader) truncate(n int64) {
	if r.truncated != nil && n > 0 {
		r.truncated(n)
	}
}

// NewOutputReader returns an OutputReader for cfg's output topic that extracts identities with
// key (the Worker's KeyFunc: output records keep the key, value and headers of their input
// records) and logs to log (nil means slog.Default()). It does not connect; the first call does.
// cfg is not validated: it must be a Config that Validate accepts, as the Worker's is.
func NewOutputReader(cfg Config, key KeyFunc, log *slog.Logger) *OutputReader {
	if log == nil {
		log = slog.Default()
	}
	r := &OutputReader{
		cfg:          cfg,
		key:          key,
		log:          log,
		client:       cfg.conn().Client(cfg.ProduceTimeout),
		fetchWait:    100 * time.Millisecond,
		emptyFetches: 5,
	}
	r.pool = r.newPool()
	return r
}

// newPool returns a fetch pool for the reader's re-warm reads (it starts nothing until used),
// its buffers bounded by rewarmMemory.
func (r *OutputReader) newPool() *kafkaio.FetchPool {
	return kafkaio.NewFetchPool(r.client, kafkaio.FetchPoolConfig{
		Isolation: r.cfg.isolation(), MaxWait: r.fetchWait, MaxBytes: 4 * r.cfg.FetchMaxBytes,
		MaxBufferedBytes: rewarmMemory(r.cfg.InputMemoryLimit),
	})
}

// rewarmShares is the part of Config.InputMemoryLimit the re-warm reads' fetch pool takes: a
// quarter. A re-warm of many partitions at once (a restart, a rebalance) fetched responses of
// four times FetchMaxBytes for all of them with nothing bounding the buffers kept: 48 MiB beside
// the input partitions' 32 MiB at a 256 MiB DEDUP_MEMORY_LIMIT.
const rewarmShares = 4

// rewarmMemory returns the input memory of the re-warm reads for an InputMemoryLimit of limit:
// a quarter of it, at least 1 (0, no bound, when limit is 0).
func rewarmMemory(limit int64) int64 {
	if limit <= 0 {
		return 0
	}
	return max(limit/rewarmShares, 1)
}

// partitionMemory returns the input memory of the input partitions' fetch pool for an
// InputMemoryLimit of limit: what rewarmMemory leaves of it, at least 1 (0, no bound, when limit
// is 0).
func partitionMemory(limit int64) int64 {
	if limit <= 0 {
		return 0
	}
	return max(limit-rewarmMemory(limit), 1)
}

// fetchPool returns the current fetch pool.
func (r *OutputReader) fetchPool() *kafkaio.FetchPool {
	r.poolMu.Lock()
	defer r.poolMu.Unlock()
	return r.pool
}

// lookup runs fn, an offset or metadata request, in a lookup slot of the fetch pool: partitions
// assigned at once then share a few connections instead of opening one each.
func (r *OutputReader) lookup(ctx context.Context, fn func() error) error {
	return r.fetchPool().Lookup(ctx, fn)
}

// stableOffsets is kafkaio.StableOffsets of parts of the output topic, in a lookup slot.
func (r *OutputReader) stableOffsets(ctx context.Context, parts []int, iso kafkaio.Isolation) (map[int]kafkaio.PartitionOffsets, error) {
	var offs map[int]kafkaio.PartitionOffsets
	err := r.lookup(ctx, func() (err error) {
		offs, err = kafkaio.StableOffsets(ctx, r.client, r.cfg.OutputTopic, parts, iso)
		return err
	})
	return offs, err
}

// Close stops the reader's fetch goroutines and releases its idle broker connections. A later
// call opens new ones; a read in flight fails.
func (r *OutputReader) Close() error {
	r.poolMu.Lock()
	old := r.pool
	r.pool = r.newPool()
	r.poolMu.Unlock()
	old.Close()
	kafkaio.CloseIdle(r.client)
	return nil
}

// End returns the end offsets of the output partitions that can hold records of inputPartition:
// {inputPartition} under PartitionSame, every output partition under PartitionHash or when
// inputPartition < 0 (global scope). The end is where Config.Isolation reads up to: the last
// stable offset under kafkaio.ReadCommitted (the high watermark unless another producer holds a
// transaction open on the output topic), the high watermark under kafkaio.ReadUncommitted. A
// partition whose leader is moving or not known yet (a topic just created, a failover) is asked
// again after a backoff, up to rewarmAttempts times. On failure it returns a "consumer: ..." error
// wrapping the broker's and no offsets.
func (r *OutputReader) End(ctx context.Context, inputPartition int32) (map[int32]int64, error) {
	parts, err := r.outputPartitions(ctx, inputPartition)
	if err != nil {
		return nil, err
	}
	var end map[int32]int64
	err = r.cfg.retry().Retry(ctx, rewarmAttempts, func(int) error {
		end, err = r.end(ctx, parts)
		return err
	})
	if err != nil {
		return nil, err
	}
	return end, nil
}

// end is one attempt of End over output partitions parts: an error for which
// kafkaio.LeaderMoving holds is worth another attempt, any other is Permanent.
func (r *OutputReader) end(ctx context.Context, parts []int) (map[int32]int64, error) {
	offs, err := r.stableOffsets(ctx, parts, r.cfg.isolation())
	if err != nil {
		return nil, transient(fmt.Errorf("consumer: end offsets of the output topic: %w", err))
	}
	end := make(map[int32]int64, len(parts))
	for _, p := range parts {
		o := offs[p]
		if o.Error != nil {
			return nil, transient(fmt.Errorf("consumer: end offset of output partition %s/%d: %w", r.cfg.OutputTopic, p, o.Error))
		}
		end[int32(p)] = o.LastOffset
	}
	return end, nil
}

// transient returns err when kafkaio.LeaderMoving says another attempt may succeed, and err
// marked kafkaio.Permanent otherwise.
func transient(err error) error {
	if kafkaio.LeaderMoving(err) {
		return err
	}
	return kafkaio.Permanent(err)
}

// Rewarm reads each output partition q of from, from offset from[q] up to the partition's end
// offset (see End) at the time of the call (records produced during the call are not read), and
// calls add with the identity and the timestamp of every record that has an identity (a record
// without one, for a permanent reason, is skipped). A retry error of the KeyFunc (the schema
// registry is down) ends the call with that error, so the caller retries instead of re-warming
// without those identities. It reads with Config.Isolation: transaction markers are never read, nor under
// kafkaio.ReadCommitted the records of aborted transactions. In ModeMark, records carrying the
// mark header are skipped: they are duplicates, so their identities are already known. It returns
// the number of records passed to add.
//
// add is called from the calling goroutine only, one record at a time, partition by partition;
// its id is only valid during the call. A partition with nothing to read (from[q] at or past its
// end) costs no fetch. Records deleted by retention are skipped with a warning (reading starts at
// the earliest available offset), as are partitions the topic's metadata says it does not have.
// A read that stalls below the end it read, or a transient UNKNOWN_TOPIC_OR_PARTITION, is asked
// again after a backoff, never taken for the end. On a broker error that retries do not cure, or
// when ctx ends, it returns a "consumer: ..." error together with the number of records added so
// far: the caller must not use the filter (dedup's Assign fails and is retried).
func (r *OutputReader) Rewarm(ctx context.Context, from map[int32]int64, add func(id []byte, ts time.Time)) (int, error) {
	return r.read(ctx, from, nil, add)
}

// Read is Rewarm with an upper bound: it reads each output partition q of from from offset from[q]
// up to to[q] (not included), or up to the partition's end at the time of the call if that comes
// first or to has no entry for q. It serves dedup.OutputLog's rebuild, with OffsetsAt.
func (r *OutputReader) Read(ctx context.Context, from, to map[int32]int64, add func(id []byte, ts time.Time)) (int, error) {
	return r.read(ctx, from, to, add)
}

// OffsetsAt returns, for the output partitions that can hold records of inputPartition (those End
// returns offsets of), the offset of the first record whose timestamp is at or after t, or the
// partition's end offset when no record is. On failure it returns a "consumer: ..." error and no
// offsets. It serves dedup.OutputLog's rebuild: a filter is rebuilt from the records after
// OffsetsAt(now - window).
func (r *OutputReader) OffsetsAt(ctx context.Context, inputPartition int32, t time.Time) (map[int32]int64, error) {
	parts, err := r.outputPartitions(ctx, inputPartition)
	if err != nil {
		return nil, err
	}
	var at map[int]int64
	err = r.lookup(ctx, func() (err error) {
		at, err = kafkaio.OffsetsAfter(ctx, r.client, r.cfg.OutputTopic, parts, t)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("consumer: output offsets by time: %w", err)
	}
	var end map[int32]int64
	out := make(map[int32]int64, len(parts))
	for _, p := range parts {
		if at[p] >= 0 {
			out[int32(p)] = at[p]
			continue
		}
		if end == nil { // nothing at or after t: start at the end
			if end, err = r.End(ctx, inputPartition); err != nil {
				return nil, err
			}
		}
		out[int32(p)] = end[int32(p)]
	}
	return out, nil
}

// read reads the ranges [from[q], to[q]) (to nil or without q: up to the end) for Rewarm and Read.
func (r *OutputReader) read(ctx context.Context, from, to map[int32]int64, add func(id []byte, ts time.Time)) (int, error) {
	if len(from) == 0 {
		return 0, nil
	}
	parts := slices.Sorted(maps.Keys(from))
	ids := make([]int, len(parts))
	for i, q := range parts {
		ids[i] = int(q)
	}
	offs, err := r.offsets(ctx, ids)
	if err != nil {
		return 0, err
	}
	rs := rewarmState{r: r, add: add, ctx: ctx}
	rs.hdrSeq = rs.hdr.all
	for _, q := range parts {
		o := offs[int(q)]
		start, end := from[q], o.LastOffset
		if stop, ok := to[q]; ok && stop < end {
			end = stop
		}
		switch {
		case errors.Is(o.Error, errNoPartition):
			r.log.Warn("output partition in the checkpoint does not exist; nothing to re-warm from it",
				"topic", r.cfg.OutputTopic, "partition", q, "from", start)
			continue
		case o.Error != nil:
			return rs.added, fmt.Errorf("consumer: offsets of output partition %s/%d: %w", r.cfg.OutputTopic, q, o.Error)
		case o.LastOffset < start:
			r.log.Warn("output partition ends before the offset the checkpoint recorded: its log was truncated or the topic re-created, and the records in between are gone from the output; nothing to re-warm from it",
				"topic", r.cfg.OutputTopic, "partition", q, "from", start, "end", o.LastOffset, "truncated", start-o.LastOffset)
			r.truncate(start - o.LastOffset)
			continue
		case end <= start:
			continue
		case start < o.FirstOffset:
			r.log.Warn("output records were deleted by retention before they could be re-read; their identities are not re-warmed and their duplicates may pass",
				"topic", r.cfg.OutputTopic, "partition", q, "from", start, "earliest", o.FirstOffset, "skipped", o.FirstOffset-start)
			r.skip(min(o.FirstOffset, end) - start)
			start = o.FirstOffset
		}
		if err := rs.partition(ctx, int(q), start, end); err != nil {
			return rs.added, err
		}
	}
	return rs.added, nil
}

// errNoPartition marks, in the offsets offsets returns, a partition that the output topic's
// metadata says it does not have.
var errNoPartition = errors.New("consumer: the output topic has no such partition")

// rewarmAttempts is how many times a re-warm asks again, after a backoff, when the brokers answer
// UNKNOWN_TOPIC_OR_PARTITION for a partition the topic has, or a read stalls below the end offset
// it read (see rewarmState.partition); then it fails and the caller (Assign) retries.
const rewarmAttempts = 4

// offsets returns the log start and end (Config.Isolation) of output partitions ids. A partition
// answered UNKNOWN_TOPIC_OR_PARTITION is accepted as missing (errNoPartition in its Error) only
// when the topic's metadata has fewer partitions; otherwise the answer was transient (a leader
// that moved) and offsets asks again after a backoff, up to rewarmAttempts times, then fails.
func (r *OutputReader) offsets(ctx context.Context, ids []int) (map[int]kafkaio.PartitionOffsets, error) {
	// Under exactly-once delivery the read goes up to the high watermark, read_committed: a
	// transaction that another input partition's producer holds open on a shared output
	// partition (PartitionHash) must not hide what the fenced previous owner committed after it.
	iso := r.cfg.isolation()
	if r.cfg.Delivery == DeliveryExactlyOnce {
		iso = kafkaio.ReadUncommitted
	}
	var offs map[int]kafkaio.PartitionOffsets
	err := r.cfg.retry().Retry(ctx, rewarmAttempts, func(attempt int) error {
		var err error
		if offs, err = r.stableOffsets(ctx, ids, iso); err != nil {
			return fmt.Errorf("consumer: offsets of the output topic: %w", err)
		}
		return r.missing(ctx, offs, attempt)
	})
	if err != nil {
		return nil, err
	}
	return offs, nil
}

// missing checks the partitions of offs answered UNKNOWN_TOPIC_OR_PARTITION against the topic's
// partition count: one the topic does not have gets errNoPartition; one it has makes missing
// return an error, so that the offsets are asked again.
func (r *OutputReader) missing(ctx context.Context, offs map[int]kafkaio.PartitionOffsets, attempt int) error {
	n := -1
	for p, o := range offs {
		if !errors.Is(o.Error, kafkaio.ErrUnknownTopicOrPartition) {
			continue
		}
		if n < 0 {
			var err error
			if n, err = r.partitionCount(ctx); err != nil {
				return err
			}
		}
		if p < n {
			r.log.Warn("output partition answered UNKNOWN_TOPIC_OR_PARTITION although the topic has it; asking again",
				"topic", r.cfg.OutputTopic, "partition", p, "partitions", n, "attempt", attempt+1)
			return fmt.Errorf("consumer: offsets of output partition %s/%d: %w", r.cfg.OutputTopic, p, o.Error)
		}
		o.Error = errNoPartition
		offs[p] = o
	}
	return nil
}

// outputPartitions returns the output partitions that can hold records of inputPartition
// (UnitPartitions); it looks the output topic's partition count up only when they are not one.
func (r *OutputReader) outputPartitions(ctx context.Context, inputPartition int32) ([]int, error) {
	if own := UnitPartitions(r.cfg.Partitioning, inputPartition, 0); own != nil {
		return own, nil
	}
	n, err := r.partitionCount(ctx)
	if err != nil {
		return nil, err
	}
	return UnitPartitions(r.cfg.Partitioning, inputPartition, n), nil
}

// UnitPartitions is the unit-ownership function of the re-warm and the rebuild: the output
// partitions, of n, that can hold the records of a deduplication unit. A unit is the input
// partition of that number (under the routed scope's second stage, a route partition), or, when
// unit < 0, every partition at once (global scope). Under PartitionSame a unit owns the output
// partition of its number, whatever n; under PartitionHash and PartitionIdentity every output
// partition can hold its records, and so can every unit's under unit < 0: it returns all n (nil
// when n is 0, for a caller that has not looked n up yet). It is safe for concurrent use.
func UnitPartitions(part Partitioning, unit int32, n int) []int {
	if (part == PartitionSame || part == "") && unit >= 0 {
		return []int{int(unit)}
	}
	if n == 0 {
		return nil
	}
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	return parts
}

// partitionCount returns the number of partitions of the output topic.
func (r *OutputReader) partitionCount(ctx context.Context) (int, error) {
	var n int
	err := r.lookup(ctx, func() (err error) {
		n, err = kafkaio.PartitionCount(ctx, r.client, r.cfg.OutputTopic)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("consumer: output topic: %w", err)
	}
	return n, nil
}

// rewarmState is the working memory of one Rewarm call.
type rewarmState struct {
	r     *OutputReader
	ctx   context.Context // the call's, for the KeyFunc
	add   func([]byte, time.Time)
	added int

	hdr    headerSource
	hdrSeq func(yield func(string, []byte) bool)
}

// partition reads output partition q from start up to (not including) end. A read that stalls
// (kafkaio.ErrStalled: fetches return nothing below end, as from a new leader whose high watermark
// has not caught up yet) is not taken as the end: after a backoff, the partition's log start is
// read again, only what lies below it is skipped (deleted by retention), and the read goes on from
// where it got to, up to rewarmAttempts times; then partition fails, and with it the re-warm. A
// batch that stays corrupt (kafkaio.ErrCorruptBatch, after Read's own fetches of it) fails it at
// once.
func (s *rewarmState) partition(ctx context.Context, q int, start, end int64) error {
	r := s.r
	began, added := time.Now(), s.added
	err := r.cfg.retry().Retry(ctx, rewarmAttempts, func(attempt int) error {
		if attempt > 0 {
			var err error
			if start, err = s.resume(ctx, q, start, end); err != nil {
				return err
			}
		}
		err := s.read(ctx, q, &start, end)
		if errors.Is(err, kafkaio.ErrCorruptBatch) { // Read fetched it again already
			r.log.Error("a record batch of the output partition is still corrupt when fetched again; the re-warm fails rather than skip its identities",
				"topic", r.cfg.OutputTopic, "partition", q, "at", start, "error", err.Error())
			return kafkaio.Permanent(err)
		}
		if errors.Is(err, kafkaio.ErrStalled) {
			r.log.Warn("re-warm read stalled below the end offset; reading the partition's offsets again",
				"topic", r.cfg.OutputTopic, "partition", q, "at", start, "end", end, "attempt", attempt+1)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("consumer: re-warming from output partition %s/%d: %w", r.cfg.OutputTopic, q, err)
	}
	r.log.Debug("re-warmed from output partition", "topic", r.cfg.OutputTopic, "partition", q,
		"from", start, "end", end, "identities", s.added-added, "took", time.Since(began).String())
	return nil
}

// read reads output partition q from *at up to end, moving *at past every record it passes on.
func (s *rewarmState) read(ctx context.Context, q int, at *int64, end int64) error {
	r := s.r
	return kafkaio.Read(ctx, r.client, kafkaio.Range{
		Topic: r.cfg.OutputTopic, Partition: q, Start: *at, End: end, Isolation: r.cfg.isolation(),
		MaxBytes: r.cfg.FetchMaxBytes, MaxWait: r.fetchWait, Pool: r.fetchPool(),
		Backoff: r.cfg.retry(), Failures: 3, Stalls: r.emptyFetches,
		OnSkip: func(from, to int64) {
			r.log.Warn("output records were deleted by retention while they were re-read; their identities are not re-warmed and their duplicates may pass",
				"topic", r.cfg.OutputTopic, "partition", q, "from", from, "earliest", to, "skipped", to-from)
			r.skip(min(to, end) - from)
		},
		OnRefused: func(ref *kafkaio.RefusedInput) {
			r.log.Warn("output records could not be decoded within the decode limits and were skipped; their identities are not re-warmed",
				"topic", r.cfg.OutputTopic, "partition", q, "offset", ref.Offset, "last_offset", ref.LastOffset, "reason", ref.Reason, "error", ref.Err.Error())
		},
		// *at moves only past what was passed on (or skipped): after an error of s.records a retry
		// reads the batch again (adding an identity twice is harmless).
		OnAdvance: func(next int64) { *at = next },
	}, s.records)
}

// resume returns the offset a stalled read of output partition q (up to end) goes on from: at,
// or the partition's log start if retention deleted the records from at on.
func (s *rewarmState) resume(ctx context.Context, q int, at, end int64) (int64, error) {
	r := s.r
	offs, err := r.offsets(ctx, []int{q})
	if err != nil {
		return at, err
	}
	o := offs[q]
	if o.Error != nil {
		return at, fmt.Errorf("consumer: offsets of output partition %s/%d: %w", r.cfg.OutputTopic, q, o.Error)
	}
	if o.FirstOffset > at {
		r.log.Warn("output records were deleted by retention before they could be re-read; their identities are not re-warmed and their duplicates may pass",
			"topic", r.cfg.OutputTopic, "partition", q, "from", at, "earliest", o.FirstOffset, "skipped", o.FirstOffset-at)
		r.skip(min(o.FirstOffset, end) - at)
		return o.FirstOffset, nil
	}
	return s.undecided(ctx, q, at, end)
}

// undecided returns end when a read_committed re-warm of output partition q stalled at at because
// everything from at on is held by open transactions (at is the last stable offset): those records
// are not decided yet, and a transaction left open by a worker that died stays open until its
// transactional id is fenced or its timeout, so waiting for it would hold the assignment that
// long. Their identities are not re-warmed; should the transaction commit later, a duplicate of
// them can pass (see "Exactly-once delivery" in docs/design.md). Otherwise it returns at.
func (s *rewarmState) undecided(ctx context.Context, q int, at, end int64) (int64, error) {
	r := s.r
	if r.cfg.isolation() != kafkaio.ReadCommitted {
		return at, nil
	}
	offs, err := r.stableOffsets(ctx, []int{q}, kafkaio.ReadCommitted)
	if err != nil {
		return at, fmt.Errorf("consumer: offsets of output partition %s/%d: %w", r.cfg.OutputTopic, q, err)
	}
	if lso := offs[q].LastOffset; offs[q].Error == nil && lso <= at {
		r.log.Warn("output records after the last stable offset belong to open transactions; the re-warm ends there and their identities are not re-warmed",
			"topic", r.cfg.OutputTopic, "partition", q, "last_stable_offset", lso, "end", end)
		return end, nil
	}
	return at, nil
}

// records passes the identities of recs to add, skipping marked records in ModeMark and records
// without an identity. It returns the KeyFunc's retry error.
func (s *rewarmState) records(recs []kafkaio.Record) error {
	mark := s.r.cfg.Mode == ModeMark
	for i := range recs {
		rec := &recs[i]
		if mark && isMarked(rec.Headers, s.r.cfg.MarkHeader) {
			continue
		}
		s.hdr.cur = rec.Headers
		id, absent, err := s.r.key(s.ctx, rec.Key, rec.Value, s.hdrSeq)
		s.hdr.cur = nil
		if err != nil {
			return fmt.Errorf("consumer: identity of the output record at offset %d: %w", rec.Offset, err)
		}
		if absent == identity.Found {
			ts := rec.Time
			if name := s.r.cfg.ProcessedHeader; name != "" {
				if at, ok := processedAt(rec.Headers, name); ok {
					ts = at
				}
			}
			s.add(id, ts)
			s.added++
		}
	}
	return nil
}

// isMarked reports whether headers end with the mark header the Worker appends to duplicates.
func isMarked(headers []kafkaio.Header, name string) bool {
	if len(headers) == 0 {
		return false
	}
	h := headers[len(headers)-1]
	return h.Key == name && string(h.Value) == MarkValue
}
