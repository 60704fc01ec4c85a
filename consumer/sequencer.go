package consumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// sequencer serializes the batches of one output partition for the idempotent producer. It owns
// the partition's sequence numbers and keeps exactly one batch in flight: the next batch is
// encoded and sealed only after the previous one was acknowledged (or given up on), so sequences
// reach the broker in order and a retry is always the newest batch the broker may have. Callers
// submit records and wait. One sender at a time sends: a caller that found the partition idle
// sends its own records on its goroutine (see submit), and a send loop goroutine, started when
// others queued up and ending when the queue is empty, merges everything queued into one batch of
// at most BatchBytes.
//
// Why one batch in flight and not five as in Kafka's Java producer: sequence numbers must reach
// the broker in order, and kafka-go's Transport runs one request at a time per connection and
// opens another connection for a concurrent request to the same broker, so two produce requests
// in flight to one partition can arrive in either order (the later one then fails with
// OUT_OF_ORDER_SEQUENCE_NUMBER and must be re-sent after the earlier one). Pipelining in order
// would need a connection of our own (dial, TLS, SASL, version negotiation, leader routing). It
// would also buy little: a partition goroutine waits for a batch's acknowledgement before it
// reads its next batch, so a partition fed by one input partition never has a second batch
// ready, and with PartitionHash the batches that queue up meanwhile are merged into one request.
//
// Its methods are safe for concurrent use.
type sequencer struct {
	p  *idempotent
	tp topicPartition

	mu      sync.Mutex
	queue   []chunk           // submitted, not encoded yet, in submission order
	running bool              // a sender (a leading caller or the send loop) is active
	enc     batchEncoder      // used under mu, so a caller that gave up knows it is done with its records
	parts   [][]kafka.Message // scratch for enc
	lastErr error             // the last failed attempt's error, nil after a success

	// Owned by the active sender.
	id      *producerID // identity of the last sealed batch; nil before the first
	nextSeq int32       // base sequence of the next batch under id
}

// batchMemory holds the memory of acknowledged batches for new ones (*[]byte). A pool rather
// than a buffer per partition: idle partitions then hold nothing once the GC cleared it.
var batchMemory sync.Pool

// chunk is a run of one submission's records small enough for one request.
type chunk struct {
	msgs []kafka.Message
	size int
	sub  *submission
}

// submission is one caller's records for the partition, split into chunks.
type submission struct {
	ctx      context.Context
	done     chan error // capacity 1; receives the result once
	pending  int        // chunks not acknowledged yet; guarded by the sequencer's mu
	finished bool       // done has received (or the caller gave up); guarded by mu
	leader   bool       // the caller sends its own records (see submit); set before submit returns
}

// batch is one encoded request. Its bytes are never changed once sealed and sent: a retry
// re-sends them, a reset re-seals a copy.
type batch struct {
	raw     []byte
	records int32
	subs    []*submission // per chunk, in order (a submission may repeat)
	id      *producerID   // nil until sealed
	err     error         // encoding failed
}

// submit queues msgs and makes sure they will be sent. With inline set, a caller that finds the
// partition idle becomes its leader: wait then sends the caller's own records on the caller's
// goroutine, saving two goroutine switches per batch when nobody else produces to the partition
// (PartitionSame). Otherwise, and for callers that queue up behind a busy partition, a send loop
// goroutine sends them. The records must stay unchanged until wait returned.
func (s *sequencer) submit(ctx context.Context, msgs []kafka.Message, inline bool) *submission {
	sub := &submission{ctx: ctx, done: make(chan error, 1)}
	s.mu.Lock()
	for len(msgs) > 0 {
		n, size := nextRequest(msgs, s.p.base.batchBytes)
		s.queue = append(s.queue, chunk{msgs: msgs[:n], size: size, sub: sub})
		sub.pending++
		msgs = msgs[n:]
	}
	start := !s.running
	s.running = true
	sub.leader = start && inline
	s.mu.Unlock()
	if start && !inline {
		go s.loop()
	}
	return sub
}

// wait returns nil once every record of sub was acknowledged, or an error once sub's context
// ended. Either way the sequencer holds no reference to sub's records afterwards.
func (s *sequencer) wait(sub *submission) error {
	if sub.leader {
		return s.lead(sub)
	}
	select {
	case err := <-sub.done:
		return err
	case <-sub.ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case err := <-sub.done: // finished meanwhile
		return err
	default:
	}
	sub.finished = true
	kept := s.queue[:0]
	for _, c := range s.queue {
		if c.sub != sub {
			kept = append(kept, c)
		}
	}
	clear(s.queue[len(kept):])
	s.queue = kept
	return s.gaveUp(sub.ctx.Err())
}

// lead sends the leader's own records (the head of the queue; nobody else's, so that its
// context alone decides when to give up), then hands the partition to a send loop goroutine if
// others queued up meanwhile.
func (s *sequencer) lead(sub *submission) error {
	for {
		s.mu.Lock()
		if sub.finished {
			err := <-sub.done // finished submissions always have their result here
			if len(s.queue) > 0 {
				go s.loop()
			} else {
				s.running = false
			}
			s.mu.Unlock()
			return err
		}
		b := s.next(sub) // nil only if sub finished meanwhile: its chunks lead the queue until then
		s.mu.Unlock()
		if b != nil {
			s.finish(b, s.deliver(b))
		}
	}
}

// gaveUp returns the error of a caller that stopped waiting because of cause. s.mu is held.
func (s *sequencer) gaveUp(cause error) error {
	if s.lastErr != nil {
		return fmt.Errorf("consumer: produce to %s/%d: %w (gave up: %w)", s.tp.topic, s.tp.partition, s.lastErr, cause)
	}
	return fmt.Errorf("consumer: produce to %s/%d: gave up: %w", s.tp.topic, s.tp.partition, cause)
}

// loop sends batches until the queue is empty.
func (s *sequencer) loop() {
	for {
		s.mu.Lock()
		b := s.next(nil)
		if b == nil {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		s.finish(b, s.deliver(b))
	}
}

// next takes the queued chunks that fit into one request off the queue and encodes them, or
// returns nil when nothing is queued. With only set, it takes only leading chunks of that
// submission. Chunks of callers that gave up are dropped. s.mu is held.
func (s *sequencer) next(only *submission) *batch {
	kept := s.queue[:0]
	for _, c := range s.queue {
		switch {
		case c.sub.finished:
		case c.sub.ctx.Err() != nil:
			c.sub.finished = true
			c.sub.done <- s.gaveUp(c.sub.ctx.Err())
		default:
			kept = append(kept, c)
		}
	}
	clear(s.queue[len(kept):])
	s.queue = kept
	if len(s.queue) == 0 || only != nil && s.queue[0].sub != only {
		return nil
	}
	n, size := 1, s.queue[0].size
	for n < len(s.queue) && size+s.queue[n].size <= s.p.base.batchBytes && (only == nil || s.queue[n].sub == only) {
		size += s.queue[n].size
		n++
	}
	b := &batch{subs: make([]*submission, n)}
	s.parts = s.parts[:0]
	for i, c := range s.queue[:n] {
		s.parts = append(s.parts, c.msgs)
		b.subs[i] = c.sub
		b.records += int32(len(c.msgs))
	}
	var mem []byte
	if m, ok := batchMemory.Get().(*[]byte); ok {
		mem = *m
	}
	b.raw, b.err = s.enc.encode(mem, s.parts)
	clear(s.parts)
	rest := copy(s.queue, s.queue[n:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
	return b
}

// finish hands the result of b to its callers: err to all of them, or on success one
// acknowledged chunk each (a caller is done with its last chunk).
func (s *sequencer) finish(b *batch, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sub := range b.subs {
		if sub.finished {
			continue
		}
		if err != nil {
			sub.finished = true
			sub.done <- err
			continue
		}
		if sub.pending--; sub.pending == 0 {
			sub.finished = true
			sub.done <- nil
		}
	}
}

// deliver seals b and sends it until the brokers acknowledge it, re-sending the same bytes after
// retriable errors and re-sealing it under a new producer id after a reset error. It gives up
// only when every caller whose records b carries stopped waiting.
func (s *sequencer) deliver(b *batch) error {
	if b.err != nil {
		return b.err
	}
	ctx, release := b.context()
	defer release()
	base := s.p.base
	failing, retryUncertain := false, false
	defer func() {
		if failing {
			base.setFailing(-1)
		}
	}()
	for attempt := 0; ; attempt++ {
		if b.id == nil {
			if err := s.seal(ctx, b); err != nil {
				return s.giveUpLocked(err)
			}
		}
		if retryUncertain && s.p.pobs != nil {
			s.p.pobs.UncertainRetry()
		}
		err := s.send(ctx, b)
		if err == nil || !ended(ctx) { // not an attempt cut short by giving up
			s.mu.Lock()
			s.lastErr = err
			s.mu.Unlock()
		}
		if err == nil {
			if failing {
				base.log.Log(slog.LevelInfo, "produce-recovered:"+s.tp.topic, "produce recovered",
					"topic", s.tp.topic, "partition", s.tp.partition, "attempts", attempt+1)
			}
			// The answer arrived, so the transport is done reading b.raw (after a failed
			// attempt it may not be, and that memory is left alone).
			raw := b.raw[:0]
			batchMemory.Put(&raw)
			return nil
		}
		if ctx.Err() != nil {
			return s.giveUpLocked(ctx.Err())
		}
		if !failing {
			failing = true
			base.setFailing(1)
		}
		base.obs.ProduceError()
		retryUncertain = false
		if reason := resetReason(err); reason != "" {
			if rerr := s.reset(ctx, b, reason, err); rerr != nil {
				return s.giveUpLocked(rerr)
			}
		} else {
			retryUncertain = uncertain(err)
			attrs := []any{"topic", s.tp.topic, "partition", s.tp.partition, "records", b.records, "attempt", attempt + 1,
				"error", err.Error()}
			if hint := idempotenceHint(err); hint != "" {
				attrs = append(attrs, "hint", hint)
			}
			base.log.Log(slog.LevelWarn, "produce-failed:"+s.tp.topic,
				"produce failed, retrying; input offsets are not committed until it succeeds", attrs...)
		}
		if !sleepCtx(ctx, backoff(attempt, base.backoffMax)) {
			return s.giveUpLocked(ctx.Err())
		}
	}
}

// giveUpLocked returns gaveUp(cause) under s.mu.
func (s *sequencer) giveUpLocked(cause error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gaveUp(cause)
}

// seal stamps b with the partition's identity and next sequence. A partition switches to the
// newest identity here, with sequence 0: nothing of it is in flight at this point.
func (s *sequencer) seal(ctx context.Context, b *batch) error {
	id := s.p.current()
	if id == nil { // start was not called: take a first identity now
		var err error
		if id, err = s.p.renew(ctx, nil); err != nil {
			return err
		}
	}
	if id != s.id {
		s.id, s.nextSeq = id, 0
	}
	sealBatch(b.raw, *id, s.nextSeq)
	b.id = id
	s.nextSeq = nextSequence(s.nextSeq, b.records)
	return nil
}

// reset re-seals b, whose producer state the broker rejected with cause, under an identity newer
// than the one it carries, with sequence 0.
func (s *sequencer) reset(ctx context.Context, b *batch, reason string, cause error) error {
	old := b.id
	id, err := s.p.renew(ctx, old)
	if err != nil {
		return err
	}
	b.raw = resealBatch(b.raw, *id, 0)
	b.id = id
	s.id, s.nextSeq = id, nextSequence(0, b.records)
	if s.p.pobs != nil {
		s.p.pobs.ProducerReset(reason)
	}
	s.p.base.log.Log(slog.LevelWarn, "producer-reset:"+s.tp.topic,
		"idempotent producer reset: the broker rejected the producer state; the batch is re-sent under a new producer id "+
			"(if it had been written before, it is now written twice)",
		"topic", s.tp.topic, "partition", s.tp.partition, "reason", reason, "error", cause.Error(),
		"old_producer_id", old.id, "old_epoch", old.epoch, "producer_id", id.id, "epoch", id.epoch)
	return nil
}

// send makes one attempt to produce b. DUPLICATE_SEQUENCE_NUMBER counts as success: the broker
// already has the batch.
func (s *sequencer) send(ctx context.Context, b *batch) error {
	res, err := s.p.base.client.RawProduce(ctx, &kafka.RawProduceRequest{
		Topic:        s.tp.topic,
		Partition:    s.tp.partition,
		RequiredAcks: kafka.RequireAll,
		RawRecords:   protocol.RawRecordSet{Reader: bytes.NewReader(b.raw)},
	})
	if err == nil && res != nil && res.Error != nil {
		err = res.Error
	}
	if err == nil && res == nil {
		err = errors.New("no produce response")
	}
	if errors.Is(err, kafka.DuplicateSequenceNumber) {
		return nil
	}
	return err
}

// context returns a context that is done when the contexts of all of b's callers are.
func (b *batch) context() (context.Context, context.CancelFunc) {
	var subs []*submission
	for _, sub := range b.subs {
		if len(subs) == 0 || subs[len(subs)-1] != sub {
			subs = append(subs, sub)
		}
	}
	if len(subs) == 1 {
		return subs[0].ctx, func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int32
	left.Store(int32(len(subs)))
	stops := make([]func() bool, len(subs))
	for i, sub := range subs {
		stops[i] = context.AfterFunc(sub.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// ended reports whether ctx is done or past its deadline (its Err may lag behind the deadline).
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// nextSequence returns the sequence after n records from seq; sequences wrap from MaxInt32 to 0,
// as in Kafka.
func nextSequence(seq, n int32) int32 {
	if seq > math.MaxInt32-n {
		return n - (math.MaxInt32 - seq) - 1
	}
	return seq + n
}
