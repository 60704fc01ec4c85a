package consumer

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// Refused records.
//
// The output topic can refuse a record for good: larger than its max.message.bytes, or invalid
// for it (kafkaio.RefusalReasons). The Producer splits refused batches, so that every record the
// topic takes is written and only a record refused on its own fails, with a
// kafkaio.RefusedError (see "Refused records" in kafkaio). handleBatch produces a batch as
// usual; only when a produce call reports a refusal does resolve take over, with the batch's
// records that were not written as lanes: one per topic partition, in input order, the refused
// record first.
//
//   - With Config.DeadLetterTopic, a refused record is written to the dead-letter topic (see
//     deadLetter) and its lane goes on. The batch's offsets are committed, as always, once every
//     lane is written, so past the record only once its dead letter was acknowledged. Its
//     identity stays in the deduplication state: Bloom filters cannot forget, and its duplicates
//     are then dropped within the window rather than sent to the dead-letter topic again.
//   - Without it, or when the dead-letter topic refuses the record too, the partition blocks at
//     the lowest refused offset. Each lane was written up to its own refusal, so everything
//     before that offset was, and the input is committed up to it. The partition's state is
//     discarded (Deduper.Discard): it holds identities of the batch's unwritten records, so no
//     snapshot may be taken of it. The block is reported once (a log line with the offset and
//     what to change, Observer.PartitionBlocked, Worker.Blocked), and the refused records are
//     tried again under a backoff of up to blockedRetryMax, without a log line per attempt.
//     Raising the topic's limit thus lifts the block: the rest of the batch is written, the
//     state is assigned again (restored, and re-warmed from the output topic, which now holds
//     the batch) and the partition goes on. A blocked partition that is released has committed
//     up to the refused record and hands no state back; its next owner blocks at the same offset.
//
// The batch's records point into the PartitionReader's fetch buffers, valid only until its next
// Fetch (kafkaio.Batch), and the lanes first share them. A refused record outlives the batch's
// ordinary path, so refused records own what they carry: a dead letter is built from copies of
// the record's key, value and headers (deadLetterMessage), and once the partition blocks, its
// lanes are copied (ownLanes) before it waits, so that nothing it holds while blocked, or writes
// once the block lifts, depends on the reader's buffers.
//
// Lanes are written one after another, each as far as it goes, so a lane's records after the
// lowest refusal may be written while the input is committed only up to it: records of other
// output partitions (PartitionHash, whose partitions are written at once anyway) or duplicates
// for the duplicates topic. If the partition is released while blocked, its next owner reads
// them again: output records are found in the re-warmed state and dropped as duplicates (ModeMark
// writes them again, marked), and the duplicates topic gets its records again.

// blockedRetryMax caps the backoff between attempts to write a blocked partition's refused
// records.
const blockedRetryMax = 30 * time.Second

// errStopped is returned by handleBatch when the generation ended while the partition was blocked
// or its state was being assigned again after a block: the input is committed up to st.next and
// the partition holds no state.
var errStopped = errors.New("consumer: partition stopped while blocked")

// Headers added to a record written to Config.DeadLetterTopic.
const (
	// DeadLetterHeaderError holds the reason of the refusal: one of kafkaio.RefusalReasons.
	DeadLetterHeaderError = "kdedup-error"
	// DeadLetterHeaderErrorMessage holds the broker's error.
	DeadLetterHeaderErrorMessage = "kdedup-error-message"
	// DeadLetterHeaderSourceTopic, DeadLetterHeaderSourcePartition and
	// DeadLetterHeaderSourceOffset name the input record (partition and offset in decimal).
	DeadLetterHeaderSourceTopic     = "kdedup-source-topic"
	DeadLetterHeaderSourcePartition = "kdedup-source-partition"
	DeadLetterHeaderSourceOffset    = "kdedup-source-offset"
	// DeadLetterHeaderSourceLastOffset is set on the dead letter of refused input: the last
	// offset of the refused range, which starts at DeadLetterHeaderSourceOffset.
	DeadLetterHeaderSourceLastOffset = "kdedup-source-last-offset"
	// DeadLetterHeaderOutputTopic and DeadLetterHeaderOutputPartition name where the record was
	// refused: the output topic, or the duplicates topic.
	DeadLetterHeaderOutputTopic     = "kdedup-output-topic"
	DeadLetterHeaderOutputPartition = "kdedup-output-partition"
)

// BlockedPartition is an input partition that stopped at a record the output refuses (see
// Worker.Blocked).
type BlockedPartition struct {
	// Partition is the input partition.
	Partition int32
	// Offset is the refused record's: everything before it was written and committed.
	Offset int64
	// Topic refused the record: the output or duplicates topic, or the dead-letter topic; the
	// input topic for input the reader refused to decode (see "Refused input").
	Topic string
	// Reason is one of RefusalReasons; Error is the broker's error, or the reader's.
	Reason, Error string
	// Since is when the partition blocked at this record.
	Since time.Time
}

// Blocked returns the worker's partitions that are blocked at a record the output refuses, or at
// input the reader refused, in partition order: the output (or duplicates) topic refuses it, or
// the reader cannot decode it within its limits, and no dead-letter topic is configured or it
// refuses the record too. Everything before the record was written and
// committed; nothing after it is processed until the record is written. It is safe for
// concurrent use.
func (w *Worker) Blocked() []BlockedPartition {
	w.blockedMu.Lock()
	defer w.blockedMu.Unlock()
	out := make([]BlockedPartition, 0, len(w.blocked))
	for _, b := range w.blocked {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b BlockedPartition) int { return int(a.Partition - b.Partition) })
	return out
}

// lane is a run of a batch's records still to be written to one topic partition, in input order.
type lane struct {
	topic     string
	partition int
	output    bool // the output topic's: its dead letters are not counted as produced
	msgs      []kafkaio.Record
	refused   *kafkaio.RefusedError // msgs[0] was refused (by the dead-letter topic, if Topic says so)
}

// addRefused appends to st.lanes a lane for each refusal err holds, whose records are msgsOf(its
// partition) from the refused one on, and reports whether err held any.
func (st *partitionState) addRefused(err error, topic string, output bool, msgsOf func(q int) []kafkaio.Record) bool {
	rs := kafkaio.Refusals(err)
	for _, re := range rs {
		st.lanes = append(st.lanes, lane{topic: topic, partition: re.Partition, output: output,
			msgs: msgsOf(re.Partition)[re.Index:], refused: re})
	}
	return len(rs) > 0
}

// write produces out to the output topic and then dups to the audit (duplicates) topic, with the
// partition's producer (its transaction under DeliveryExactlyOnce), so that the caller marks the
// batch's offsets only once both were acknowledged. When a record is refused, resolve writes
// what is left; next is the offset after the batch. It returns an error only when pctx ended
// first, or errStopped.
func (w *Worker) write(gctx, pctx context.Context, c offsetSink, st *partitionState, tc topicCounts, out, dups []kafkaio.Record, next int64) error {
	st.lanes, st.diverted = st.lanes[:0], 0
	dupPart := 0
	if len(dups) > 0 {
		dupPart = int(st.p) % tc.duplicates
	}
	err := w.produceOut(pctx, st, out)
	switch {
	case err == nil && len(dups) > 0:
		if err = st.producer(w).Produce(pctx, w.cfg.DuplicatesTopic, dupPart, dups); err != nil {
			w.obs.AuditProduceError()
			if !st.addRefused(err, w.cfg.DuplicatesTopic, false, func(int) []kafkaio.Record { return dups }) {
				return err
			}
		}
	case err != nil:
		refused := st.addRefused(err, w.cfg.OutputTopic, true, func(q int) []kafkaio.Record {
			if st.hash == nil {
				return out
			}
			return st.byPart[q]
		})
		if !refused {
			return err
		}
		if len(dups) > 0 {
			st.lanes = append(st.lanes, lane{topic: w.cfg.DuplicatesTopic, partition: dupPart, msgs: dups})
		}
	}
	if err == nil {
		return nil
	}
	return w.resolve(gctx, pctx, c, st, tc, next)
}

// resolve writes st.lanes: it dead-letters or blocks at their refused records (see "Refused
// records"), and while blocked tries them again until every lane is written or gctx ends (then
// it returns errStopped). It returns pctx's error when a write was cut short.
func (w *Worker) resolve(gctx, pctx context.Context, c offsetSink, st *partitionState, tc topicCounts, next int64) error {
	retry := kafkaio.Backoff{Max: blockedRetryMax}
	for attempt := 0; ; attempt++ {
		b, err := w.drain(pctx, st, tc)
		switch {
		case err != nil:
			return err
		case b == nil:
			return w.unblock(gctx, c, st, next)
		}
		if attempt == 0 {
			st.ownLanes() // held while blocked: not the reader's buffers, before the block is seen
		}
		w.block(pctx, c, st, b)
		if !kafkaio.Sleep(gctx, retry.Delay(attempt)) {
			return errStopped
		}
		for i := range st.lanes {
			st.lanes[i].refused = nil // try the refused records again
		}
	}
}

// drain writes each lane as far as it goes and returns where the partition blocks: at the lowest
// record refused on its own that could not be dead-lettered (nil when every lane was written).
func (w *Worker) drain(pctx context.Context, st *partitionState, tc topicCounts) (*BlockedPartition, error) {
	var low *lane
	for i := range st.lanes {
		l := &st.lanes[i]
		if err := w.drainLane(pctx, st, tc, l); err != nil {
			return nil, err
		}
		if l.refused != nil && (low == nil || l.msgs[0].Offset < low.msgs[0].Offset) {
			low = l
		}
	}
	if low == nil {
		return nil, nil
	}
	re := low.refused
	return &BlockedPartition{Partition: st.p, Offset: low.msgs[0].Offset, Topic: re.Topic, Reason: re.Reason, Error: re.Err.Error()}, nil
}

// drainLane writes l up to its end, or up to a refused record that cannot be dead-lettered.
func (w *Worker) drainLane(pctx context.Context, st *partitionState, tc topicCounts, l *lane) error {
	for len(l.msgs) > 0 {
		if l.refused == nil {
			err := st.producer(w).Produce(pctx, l.topic, l.partition, l.msgs)
			if err == nil {
				l.msgs = nil
				return nil
			}
			if l.topic == w.cfg.DuplicatesTopic {
				w.obs.AuditProduceError()
			}
			rs := kafkaio.Refusals(err)
			if len(rs) == 0 {
				return err
			}
			l.msgs, l.refused = l.msgs[rs[0].Index:], rs[0]
		}
		if w.cfg.DeadLetterTopic == "" || l.refused.Topic == w.cfg.DeadLetterTopic {
			return nil
		}
		if err := w.deadLetter(pctx, st, tc, l); err != nil {
			rs := kafkaio.Refusals(err)
			if len(rs) == 0 {
				return err
			}
			l.refused = rs[0] // the dead-letter topic refuses it too
			return nil
		}
		if l.output {
			st.diverted++
		}
		l.msgs, l.refused = l.msgs[1:], nil
	}
	return nil
}

// deadLetter writes l's refused first record to the dead-letter topic, unchanged plus the
// DeadLetterHeader* headers, and counts it. It returns the Producer's error: a RefusedError when
// the dead-letter topic refuses the record too.
func (w *Worker) deadLetter(pctx context.Context, st *partitionState, tc topicCounts, l *lane) error {
	m, re := &l.msgs[0], l.refused
	dl := []kafkaio.Record{w.deadLetterMessage(st.p, l, m)}
	if err := st.producer(w).Produce(pctx, w.cfg.DeadLetterTopic, int(st.p)%tc.deadLetters, dl); err != nil {
		return err
	}
	w.obs.DeadLetter(st.p, re.Reason)
	w.sample.Log(slog.LevelWarn, "dead-letter", "record refused by the output written to the dead-letter topic",
		"topic", w.cfg.InputTopic, "partition", st.p, "offset", m.Offset, "refused_by", l.topic, "reason", re.Reason,
		"error", re.Err.Error(), "dead_letter_topic", w.cfg.DeadLetterTopic)
	return nil
}

// deadLetterMessage returns the dead letter of m, input partition p's record refused in l: a copy
// of its key, value, headers and timestamp that owns its bytes (m may point into the reader's
// fetch buffers), plus the DeadLetterHeader* headers.
func (w *Worker) deadLetterMessage(p int32, l *lane, m *kafkaio.Record) kafkaio.Record {
	re := l.refused
	o := ownedMessage(m, 7)
	dl := kafkaio.Record{Key: o.Key, Value: o.Value, Headers: o.Headers, Time: m.Time}
	dl.Headers = append(dl.Headers,
		kafkaio.Header{Key: DeadLetterHeaderError, Value: []byte(re.Reason)},
		kafkaio.Header{Key: DeadLetterHeaderErrorMessage, Value: []byte(re.Err.Error())},
		kafkaio.Header{Key: DeadLetterHeaderSourceTopic, Value: []byte(w.cfg.InputTopic)},
		kafkaio.Header{Key: DeadLetterHeaderSourcePartition, Value: strconv.AppendInt(nil, int64(p), 10)},
		kafkaio.Header{Key: DeadLetterHeaderSourceOffset, Value: strconv.AppendInt(nil, m.Offset, 10)},
		kafkaio.Header{Key: DeadLetterHeaderOutputTopic, Value: []byte(l.topic)},
		kafkaio.Header{Key: DeadLetterHeaderOutputPartition, Value: strconv.AppendInt(nil, int64(l.partition), 10)},
	)
	return dl
}

// ownLanes replaces the records of st.lanes with copies that own their bytes (ownedMessage).
func (st *partitionState) ownLanes() {
	for i := range st.lanes {
		l := &st.lanes[i]
		msgs := make([]kafkaio.Record, len(l.msgs))
		for j := range l.msgs {
			msgs[j] = ownedMessage(&l.msgs[j], 0)
		}
		l.msgs = msgs
	}
}

// ownedMessage returns a copy of m whose key, value and header values are copies in one
// allocation (a nil key or value stays nil), with room for extra more headers. Header names are
// not copied: the reader interns them, they do not point into its buffers.
func ownedMessage(m *kafkaio.Record, extra int) kafkaio.Record {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Value)
	}
	buf := make([]byte, 0, n)
	own := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, b...) // within n: never reallocates
		return buf[start:len(buf):len(buf)]
	}
	o := *m
	o.Key, o.Value, o.Headers = own(m.Key), own(m.Value), nil
	if len(m.Headers)+extra > 0 {
		o.Headers = make([]kafkaio.Header, len(m.Headers), len(m.Headers)+extra)
		for i, h := range m.Headers {
			o.Headers[i] = kafkaio.Header{Key: h.Key, Value: own(h.Value)}
		}
	}
	return o
}

// block reports the partition blocked at b, once per offset, reason and topic; commits the input
// up to the refused record; and discards the partition's state, which holds identities of records
// that were not written.
func (w *Worker) block(pctx context.Context, c offsetSink, st *partitionState, b *BlockedPartition) {
	if cur := st.blocked; cur != nil {
		if cur.Offset == b.Offset && cur.Reason == b.Reason && cur.Topic == b.Topic {
			return
		}
		w.setBlocked(st.p, cur, nil)
	}
	b.Since = time.Now()
	st.blocked = b
	st.next = b.Offset
	st.prog.handled(b.Offset)
	c.mark(int(st.p), b.Offset)
	if st.tx != nil { // everything before the refused record is written: make it visible
		if err := st.tx.commit(pctx); err != nil {
			w.log.Error("partition blocked: the transaction up to the refused record could not be committed",
				"topic", w.cfg.InputTopic, "partition", st.p, "offset", b.Offset, "error", err.Error())
		}
	}
	if !st.discarded {
		st.discarded = true
		if err := w.dedup.Discard(pctx, st.p); err != nil {
			w.log.Error("discard failed", "partition", st.p, "error", err.Error())
		}
	}
	w.setBlocked(st.p, nil, b)
	w.log.Error("partition blocked: a record is refused for good; everything before it was written and committed, "+
		"nothing after it is processed until it is written (the worker tries again every "+blockedRetryMax.String()+" at most)",
		"topic", w.cfg.InputTopic, "partition", st.p, "offset", b.Offset, "refused_by", b.Topic, "reason", b.Reason,
		"error", b.Error, "hint", w.blockedHint(b))
}

// blockedHint says what an operator can change to lift the block b.
func (w *Worker) blockedHint(b *BlockedPartition) string {
	switch {
	case b.Topic == w.cfg.DeadLetterTopic:
		return "the dead-letter topic refuses the record too: raise its max.message.bytes (or fix what it refuses); the partition resumes by itself"
	case b.Topic == w.cfg.InputTopic:
		return inputHint(b.Reason)
	case b.Reason == kafkaio.RefusalMessageTooLarge || b.Reason == kafkaio.RefusalRecordListTooLarge:
		return "raise max.message.bytes (and segment.bytes) of topic " + strconv.Quote(b.Topic) +
			" above the record's size: the partition resumes by itself; or configure a dead-letter topic for such records and restart"
	}
	return "topic " + strconv.Quote(b.Topic) + " refuses the record (for example a record without key on a compacted topic, or a timestamp " +
		"outside message.timestamp.*.max.ms): change the topic's configuration, or configure a dead-letter topic and restart"
}

// unblock, once every lane was written, ends a block: the state is assigned again (restored, and
// re-warmed from the output topic, which now holds the batch) and the block is no longer
// reported. It returns errStopped, with the batch committed, when gctx ended before the state was
// assigned.
func (w *Worker) unblock(gctx context.Context, c offsetSink, st *partitionState, next int64) error {
	b := st.blocked
	if b == nil {
		return nil
	}
	st.blocked = nil
	w.setBlocked(st.p, b, nil)
	w.log.Info("partition unblocked: the refused record was written; the partition goes on",
		"topic", w.cfg.InputTopic, "partition", st.p, "offset", b.Offset, "blocked_for", time.Since(b.Since).Round(time.Second).String())
	if !w.assign(gctx, st.p) {
		st.next = next
		c.mark(int(st.p), next)
		return errStopped
	}
	st.discarded = false
	w.dedup.Processing(st.p, next) // handleBatch acknowledges the batch next
	return nil
}

// setBlocked replaces the report of partition p's block old (nil: none) with b (nil: none).
func (w *Worker) setBlocked(p int32, old, b *BlockedPartition) {
	w.blockedMu.Lock()
	defer w.blockedMu.Unlock()
	if old != nil {
		delete(w.blocked, p)
		w.obs.PartitionBlocked(p, old.Reason, false)
	}
	if b != nil {
		w.blocked[p] = *b
		w.obs.PartitionBlocked(p, b.Reason, true)
	}
}

// Refused input.
//
// The reader refuses input it cannot decode within its limits (Config.DecodeMaxBytes: a batch
// that decompresses to more, a record with more headers), or at all although its checksum
// matches (see "Bounded decoding" in kafkaio): anyone who may produce to the input topic can
// write such a batch, and decoding it would exhaust the worker's memory. The reader hands the
// records before it out as usual, and then the refusal (kafkaio.Batch.Refused), which is treated
// like a record the output refuses:
//
//   - With Config.DeadLetterTopic, a dead letter without key or value carries the refused
//     offsets and the error (the DeadLetterHeader* headers; its content is what was refused, so
//     it is not copied), and once it is acknowledged the input is committed past the refused
//     offsets and the partition goes on.
//   - Without it, or when the dead-letter topic refuses the dead letter, the partition blocks at
//     the refused offset: everything before it was written and is committed, nothing at or after
//     it is, and the block is reported (a log line naming the limit and the offsets,
//     Observer.PartitionBlocked, Worker.Blocked). The input cannot change, so the block lasts
//     until the worker releases the partition; raising the limit (or configuring a dead-letter
//     topic) and restarting lifts it. The partition's state is consistent (every record it holds
//     was written), so it is revoked and saved as usual.

// refuseInput handles input the reader refused (see "Refused input"), after the records before
// it were written and committed. It returns pctx's error when the dead letter could not be
// written before pctx ended, and nil once the partition moved past the input or, blocked, once
// gctx ended.
func (w *Worker) refuseInput(gctx, pctx context.Context, c offsetSink, st *partitionState, tc topicCounts, ref *kafkaio.RefusedInput) error {
	if w.cfg.DeadLetterTopic != "" {
		dl := []kafkaio.Record{w.inputDeadLetter(st.p, ref)}
		err := st.producer(w).Produce(pctx, w.cfg.DeadLetterTopic, int(st.p)%tc.deadLetters, dl)
		if err == nil {
			w.passInput(c, st, ref)
			return nil
		}
		if len(kafkaio.Refusals(err)) == 0 {
			return err
		}
	}
	b := &BlockedPartition{Partition: st.p, Offset: ref.Offset, Topic: w.cfg.InputTopic, Reason: ref.Reason,
		Error: ref.Err.Error(), Since: time.Now()}
	st.blocked = b
	w.setBlocked(st.p, nil, b)
	if st.tx != nil { // everything before the refused input is written: make it visible
		if err := st.tx.commit(pctx); err != nil {
			w.log.Error("partition blocked: the transaction up to the refused input could not be committed",
				"topic", w.cfg.InputTopic, "partition", st.p, "offset", ref.Offset, "error", err.Error())
		}
	}
	w.log.Error("partition blocked: input refused, it cannot be decoded within the limits; everything before it was written and committed, "+
		"nothing at or after it is processed", "topic", w.cfg.InputTopic, "partition", st.p, "offset", ref.Offset,
		"last_offset", ref.LastOffset, "reason", ref.Reason, "error", ref.Err.Error(), "hint", inputHint(ref.Reason))
	<-gctx.Done()
	st.blocked = nil
	w.setBlocked(st.p, b, nil)
	w.log.Warn("partition released while blocked at refused input; its next owner blocks at the same offset unless its limits or dead-letter topic differ",
		"partition", st.p, "offset", ref.Offset, "reason", ref.Reason)
	return nil
}

// passInput, once the dead letter of ref was written, commits the input past it and reports it.
func (w *Worker) passInput(c offsetSink, st *partitionState, ref *kafkaio.RefusedInput) {
	w.obs.DeadLetter(st.p, ref.Reason)
	w.sample.Log(slog.LevelWarn, "dead-letter-input", "input refused (it cannot be decoded within the limits); its coordinates and error written to the dead-letter topic",
		"topic", w.cfg.InputTopic, "partition", st.p, "offset", ref.Offset, "last_offset", ref.LastOffset, "reason", ref.Reason,
		"error", ref.Err.Error(), "dead_letter_topic", w.cfg.DeadLetterTopic)
	next := ref.LastOffset + 1
	w.dedup.Processing(st.p, next)
	st.next = next
	if st.tx == nil { // with transactions, after the commit
		w.dedup.Acked(st.p, next)
	}
	c.mark(int(st.p), next)
}

// inputDeadLetter returns the dead letter of input partition p's refused input ref: no key, no
// value, the DeadLetterHeader* headers of its coordinates and error.
func (w *Worker) inputDeadLetter(p int32, ref *kafkaio.RefusedInput) kafkaio.Record {
	return kafkaio.Record{Time: time.Now(), Headers: []kafkaio.Header{
		{Key: DeadLetterHeaderError, Value: []byte(ref.Reason)},
		{Key: DeadLetterHeaderErrorMessage, Value: []byte(ref.Err.Error())},
		{Key: DeadLetterHeaderSourceTopic, Value: []byte(w.cfg.InputTopic)},
		{Key: DeadLetterHeaderSourcePartition, Value: strconv.AppendInt(nil, int64(p), 10)},
		{Key: DeadLetterHeaderSourceOffset, Value: strconv.AppendInt(nil, ref.Offset, 10)},
		{Key: DeadLetterHeaderSourceLastOffset, Value: strconv.AppendInt(nil, ref.LastOffset, 10)},
	}}
}

// inputHint says what an operator can change to lift a block at input refused for reason.
func inputHint(reason string) string {
	if reason == kafkaio.RefusalInputCorrupt {
		return "the batch cannot be decoded (its producer wrote it so, or its checksum is wrong in the broker's log: check the brokers' disks " +
			"and the partition's other replicas): configure a dead-letter topic (KAFKA_DEAD_LETTER_TOPIC) and restart, " +
			"or move the group's committed offset past the refused offsets"
	}
	return "if the input is legitimate, raise KAFKA_DECODE_MAX_BYTES (it bounds the worker's memory per partition) and restart; " +
		"otherwise configure a dead-letter topic (KAFKA_DEAD_LETTER_TOPIC) and restart"
}
