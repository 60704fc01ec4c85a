package kafkaio

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/segmentio/kafka-go"
)

// Refused records.
//
// Most produce errors are about the cluster (a leader moved, replicas are missing, a request
// timed out) and a retry of the same bytes fixes them. A few are about what a batch carries, and
// the broker gives the same answer however often the batch is sent; the Producer does not retry
// those (see refusalReason for the set):
//
//   - MESSAGE_TOO_LARGE: the batch is larger than the topic's max.message.bytes (the broker's
//     message.max.bytes when the topic does not set it);
//   - RECORD_LIST_TOO_LARGE: the batch is larger than the topic's segment.bytes;
//   - INVALID_RECORD: the broker's validation refused a record (for example a record without key
//     on a compacted topic);
//   - INVALID_TIMESTAMP: a record's timestamp is further from the broker's clock than the topic's
//     message.timestamp.difference.max.ms (message.timestamp.before/after.max.ms) allows.
//
// The broker refuses a batch as a whole and appends nothing of it, so a refused batch of several
// records is split into halves, which are sent in turn (the partition's sequence numbers go back
// to the refused batch's first, as nothing of it was appended), until every record that the
// topic takes is written and each record that it still refuses was refused on its own. Such a
// record fails its caller with a *RefusedError: the caller's records before it were written, the
// ones after it were not sent. Other callers whose records shared the refused batch are not
// affected.
//
// Batches are also bounded by the topic's max.message.bytes when the caller told the Producer
// (SetMaxMessageBytes, read with MaxMessageBytes): records are grouped for at most that many
// bytes, and an encoded batch of several records that is still larger is split before it is
// sent. A single record larger than the limit is sent anyway: the broker decides (the limit may
// have been raised since it was read, and a compressed record may fit). After a broker refused a
// batch of several records for its size, the Producer takes the batch's size less one byte as
// the topic's limit until it is told otherwise, so that a lowered limit costs one split, not one
// per batch.
//
// The rewind assumes that no earlier attempt of the refused batch was appended. The broker checks
// a batch's size and records before its producer state, so the same bytes get the same answer;
// only a topic limit lowered between two attempts of one batch, the first of which was appended
// but timed out, breaks that. Then the first half meets OUT_OF_ORDER_SEQUENCE_NUMBER, resets
// (ProduceObserver.ProducerReset) and is written a second time: the residual duplicate of a
// reset (see Producer).
//
// Other errors that no retry fixes, such as TOPIC_AUTHORIZATION_FAILED, concern every record of
// the topic alike: they are retried (and logged) until an operator fixes them, as before.

// Reasons of a refused record (RefusedError.Reason). The set is closed; see RefusalReasons.
const (
	// RefusalMessageTooLarge: MESSAGE_TOO_LARGE, the record is larger than the topic's
	// max.message.bytes.
	RefusalMessageTooLarge = "message_too_large"
	// RefusalRecordListTooLarge: RECORD_LIST_TOO_LARGE, the record is larger than the topic's
	// segment.bytes.
	RefusalRecordListTooLarge = "record_list_too_large"
	// RefusalInvalidRecord: INVALID_RECORD, the broker's validation refused the record.
	RefusalInvalidRecord = "invalid_record"
	// RefusalInvalidTimestamp: INVALID_TIMESTAMP, the record's timestamp is outside the range the
	// topic accepts.
	RefusalInvalidTimestamp = "invalid_timestamp"
)

// RefusalReasons returns every reason a RefusedError can carry.
func RefusalReasons() []string {
	return []string{RefusalMessageTooLarge, RefusalRecordListTooLarge, RefusalInvalidRecord, RefusalInvalidTimestamp}
}

// refusalReason returns the reason of a produce error that refuses what the batch carries, or ""
// for an error that a retry of the same bytes may fix.
func refusalReason(err error) string {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return ""
	}
	switch ke {
	case kafka.MessageSizeTooLarge:
		return RefusalMessageTooLarge
	case kafka.RecordListTooLarge:
		return RefusalRecordListTooLarge
	case kafka.InvalidRecord:
		return RefusalInvalidRecord
	case kafka.InvalidTimestamp:
		return RefusalInvalidTimestamp
	}
	return ""
}

// sizeRefusal reports whether reason refuses a batch for its size, so that the batch's size is
// an upper bound of what the topic takes.
func sizeRefusal(reason string) bool {
	return reason == RefusalMessageTooLarge || reason == RefusalRecordListTooLarge
}

// RefusedError is the error of Produce (and, per partition, of ProduceParts) for a record that
// the brokers refused on its own for what it is (see Reason): no retry can write it. The
// caller's records before it (msgs[:Index]) were written and acknowledged; the ones after it
// were not sent. errors.Is sees the broker's error, for example kafka.MessageSizeTooLarge.
type RefusedError struct {
	// Topic and Partition name where the record was to be written.
	Topic     string
	Partition int
	// Index is the record's index in the messages given to Produce (parts[Partition] of
	// ProduceParts).
	Index int
	// Reason is one of the Refusal* constants.
	Reason string
	// Err is the broker's error.
	Err error
}

// Error says which record was refused, and why.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("kafkaio: produce to %s/%d: record %d refused (%s): %v", e.Topic, e.Partition, e.Index, e.Reason, e.Err)
}

// Unwrap returns the broker's error.
func (e *RefusedError) Unwrap() error { return e.Err }

// Refusals returns the RefusedErrors that err holds: err itself, or the errors ProduceParts
// joined. It returns nil when err holds none.
func Refusals(err error) []*RefusedError {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*RefusedError
		for _, e := range joined.Unwrap() {
			out = append(out, Refusals(e)...)
		}
		return out
	}
	var re *RefusedError
	if errors.As(err, &re) {
		return []*RefusedError{re}
	}
	return nil
}

// topicLimit is what a Producer knows of a topic's max.message.bytes: 0 while it knows nothing.
// It is shared by the topic's sequencers and safe for concurrent use.
type topicLimit struct{ n atomic.Int64 }

// lower lowers the limit to n, unless it is lower already.
func (l *topicLimit) lower(n int64) {
	for {
		cur := l.n.Load()
		if cur > 0 && cur <= n || l.n.CompareAndSwap(cur, n) {
			return
		}
	}
}

// SetMaxMessageBytes tells the producer the max.message.bytes of topic (MaxMessageBytes reads it):
// its batches of that topic are then at most that large, and at most BatchBytes. n <= 0 means
// unknown: batches are bounded by BatchBytes and by what the brokers refused. It replaces what the
// producer learned from refusals. It is safe for concurrent use.
func (p *Producer) SetMaxMessageBytes(topic string, n int) {
	p.mu.Lock()
	l := p.limitLocked(topic)
	p.mu.Unlock()
	l.n.Store(int64(max(n, 0)))
}

// limitLocked returns the limit of topic, creating it on first use. p.mu is held.
func (p *Producer) limitLocked(topic string) *topicLimit {
	l := p.limits[topic]
	if l == nil {
		l = &topicLimit{}
		p.limits[topic] = l
	}
	return l
}

// batchBytes returns how many estimated bytes (messageSize) the records of one request may
// have: BatchBytes, less when the topic's limit leaves less room after the batch header.
func (s *sequencer) batchBytes() int {
	n := s.p.cfg.BatchBytes
	if lim := int(s.lim.n.Load()); lim > 0 {
		n = min(n, lim-batchHeaderLen)
	}
	return max(n, 1)
}

// oversize reports whether the encoded batch b holds several records and is larger than the
// topic's limit, so that the broker would refuse it.
func (s *sequencer) oversize(b *batch) bool {
	lim := int(s.lim.n.Load())
	return b.err == nil && b.records > 1 && lim > 0 && len(b.rb.raw)-sizePrefix > lim
}

// errOversize stands for the broker's answer to a batch that oversize found too large to send.
var errOversize = fmt.Errorf("kafkaio: batch larger than the topic's max.message.bytes: %w", kafka.MessageSizeTooLarge)

// settle delivers b and hands the result to its callers. A batch that the brokers refuse for
// what it carries (see refusalReason), or that oversize finds too large to send, is split in two
// halves that are settled in turn; a refused single record fails its caller with a
// *RefusedError. Refused batches were not appended, so the partition's sequence goes back to
// the refused batch's first. It runs on the active sender.
func (s *sequencer) settle(b *batch) {
	var err error
	if s.oversize(b) {
		err = errOversize
		raw := b.rb.raw[:0] // never sent
		batchMemory.Put(&raw)
	} else {
		err = s.deliver(b)
	}
	reason := refusalReason(err)
	if reason == "" {
		s.finish(b, err)
		return
	}
	s.rewind(b)
	if b.records == 1 {
		s.refuse(b, reason, err)
		return
	}
	if sizeRefusal(reason) && err != errOversize {
		s.lim.lower(int64(len(b.rb.raw) - sizePrefix - 1))
	}
	s.p.cfg.Log.Log(slog.LevelInfo, "produce-split:"+s.tp.topic,
		"produce refused; the batch is split so that every record the topic takes is written",
		"topic", s.tp.topic, "partition", s.tp.partition, "records", b.records, "bytes", len(b.rb.raw)-sizePrefix,
		"reason", reason, "error", err.Error())
	s.mu.Lock()
	first, second := s.halves(b.chunks)
	s.mu.Unlock()
	for _, half := range [][]chunk{first, second} {
		s.mu.Lock()
		hb := s.encode(s.live(half)) // the first half may have ended callers of the second
		s.mu.Unlock()
		if hb != nil {
			s.settle(hb)
		}
	}
}

// rewind takes back the sequence numbers of b, which the broker refused and did not append, so
// that the next batch starts at b's first sequence. b is the only batch in flight, so the
// partition's next sequence is the one after b's.
func (s *sequencer) rewind(b *batch) {
	if b.id != nil && b.id != noProducer && b.id == s.id {
		s.nextSeq = b.rb.hdr.FirstSequence
	}
}

// refuse fails the caller of b's one record with a RefusedError.
func (s *sequencer) refuse(b *batch, reason string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range b.chunks {
		if !c.sub.finished {
			c.sub.finished = true
			c.sub.done <- &RefusedError{Topic: s.tp.topic, Partition: s.tp.partition, Index: c.first, Reason: reason, Err: err}
		}
	}
}

// halves splits the live chunks of cs into two runs of about half the records each; a chunk cut
// in two counts as two for its caller. s.mu is held.
func (s *sequencer) halves(cs []chunk) (first, second []chunk) {
	cs = s.live(cs)
	n := 0
	for _, c := range cs {
		n += len(c.msgs)
	}
	left := n / 2
	for _, c := range cs {
		switch {
		case left == 0:
			second = append(second, c)
		case len(c.msgs) <= left:
			first = append(first, c)
			left -= len(c.msgs)
		default:
			first = append(first, chunk{msgs: c.msgs[:left], first: c.first, sub: c.sub})
			second = append(second, chunk{msgs: c.msgs[left:], first: c.first + left, sub: c.sub})
			c.sub.pending++
			left = 0
		}
	}
	return first, second
}
