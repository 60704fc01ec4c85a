package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// sequencer serializes the batches of one partition for the Producer. It keeps exactly one batch
// in flight and, with idempotence, owns the partition's sequence numbers: the next batch is
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
// ready, and when several input partitions feed one output partition (the worker's
// consumer.PartitionHash) the batches that queue up meanwhile are merged into one request.
//
// Its methods are safe for concurrent use.
type sequencer struct {
	p  *Producer
	tp topicPartition

	lim *topicLimit // the topic's max.message.bytes, shared by its sequencers

	mu      sync.Mutex
	queue   []chunk      // submitted, not encoded yet, in submission order
	running bool         // a sender (a leading caller or the send loop) is active
	enc     batchEncoder // used under mu, so a caller that gave up knows it is done with its records
	parts   [][]Record   // scratch for enc
	lastErr error        // the last failed attempt's error, nil after a success

	// Owned by the active sender.
	id      *producerID // identity of the last sealed batch; nil before the first
	nextSeq int32       // base sequence of the next batch under id
}

// batchMemory holds the memory of acknowledged batches for new ones (*[]byte). A pool rather
// than a buffer per partition: idle partitions then hold nothing once the GC cleared it.
var batchMemory sync.Pool

// chunk is a run of one submission's records small enough for one request.
type chunk struct {
	msgs  []Record
	size  int // estimated (messageSize); only set for queued chunks
	first int // index of msgs[0] in the submission's records
	sub   *submission
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
	rb      recordBatch
	records int32
	chunks  []chunk     // in order (a submission may have several)
	id      *producerID // nil until sealed; noProducer without idempotence
	err     error       // encoding failed
}

// submit queues msgs and makes sure they will be sent. With inline set, a caller that finds the
// partition idle becomes its leader: wait then sends the caller's own records on the caller's
// goroutine, saving two goroutine switches per batch when nobody else produces to the partition
// (the worker's consumer.PartitionSame). Otherwise, and for callers that queue up behind a busy
// partition, a send loop goroutine sends them. The records must stay unchanged until wait
// returned.
func (s *sequencer) submit(ctx context.Context, msgs []Record, inline bool) *submission {
	sub := &submission{ctx: ctx, done: make(chan error, 1)}
	limit := s.batchBytes()
	s.mu.Lock()
	for first := 0; first < len(msgs); {
		n, size := nextRequest(msgs[first:], limit)
		s.queue = append(s.queue, chunk{msgs: msgs[first : first+n], size: size, first: first, sub: sub})
		sub.pending++
		first += n
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
			s.settle(b)
		}
	}
}

// gaveUp returns the error of a caller that stopped waiting because of cause. s.mu is held.
func (s *sequencer) gaveUp(cause error) error {
	if s.lastErr != nil {
		return fmt.Errorf("kafkaio: produce to %s/%d: %w (gave up: %w)", s.tp.topic, s.tp.partition, s.lastErr, cause)
	}
	return fmt.Errorf("kafkaio: produce to %s/%d: gave up: %w", s.tp.topic, s.tp.partition, cause)
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
		s.settle(b)
	}
}

// next takes the queued chunks that fit into one request off the queue and encodes them, or
// returns nil when nothing is queued. With only set, it takes only leading chunks of that
// submission. Chunks of callers that gave up are dropped. s.mu is held.
func (s *sequencer) next(only *submission) *batch {
	s.queue = s.live(s.queue)
	if len(s.queue) == 0 || only != nil && s.queue[0].sub != only {
		return nil
	}
	limit := s.batchBytes()
	n, size := 1, s.queue[0].size
	for n < len(s.queue) && size+s.queue[n].size <= limit && (only == nil || s.queue[n].sub == only) {
		size += s.queue[n].size
		n++
	}
	b := s.encode(append([]chunk(nil), s.queue[:n]...))
	rest := copy(s.queue, s.queue[n:])
	clear(s.queue[rest:])
	s.queue = s.queue[:rest]
	return b
}

// live returns the chunks of cs whose callers still wait, in cs's memory; a caller whose context
// ended meanwhile is finished with the error of giving up. s.mu is held.
func (s *sequencer) live(cs []chunk) []chunk {
	kept := cs[:0]
	for _, c := range cs {
		switch {
		case c.sub.finished:
		case c.sub.ctx.Err() != nil:
			c.sub.finished = true
			c.sub.done <- s.gaveUp(c.sub.ctx.Err())
		default:
			kept = append(kept, c)
		}
	}
	clear(cs[len(kept):])
	return kept
}

// encode returns a batch of chunks (which it keeps), or nil for none. s.mu is held.
func (s *sequencer) encode(chunks []chunk) *batch {
	if len(chunks) == 0 {
		return nil
	}
	b := &batch{chunks: chunks}
	s.parts = s.parts[:0]
	for _, c := range chunks {
		s.parts = append(s.parts, c.msgs)
		b.records += int32(len(c.msgs))
	}
	var mem []byte
	if m, ok := batchMemory.Get().(*[]byte); ok {
		mem = *m
	}
	b.rb, b.err = s.enc.encode(mem, s.parts)
	clear(s.parts)
	return b
}

// finish hands the result of b to its callers: err to all of them, or on success one
// acknowledged chunk each (a caller is done with its last chunk).
func (s *sequencer) finish(b *batch, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range b.chunks {
		sub := c.sub
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
// retriable errors and re-sealing it under a new producer id after a reset error, under the retry
// policy. It gives up when every caller whose records b carries stopped waiting, or after
// ProducerConfig.Attempts failed attempts. A refusal (see refusalReason) ends it at once with the
// broker's error.
func (s *sequencer) deliver(b *batch) error {
	if b.err != nil {
		return b.err
	}
	ctx, release := b.context()
	defer release()
	d := &delivery{s: s, b: b, ctx: ctx}
	err := s.p.cfg.Backoff.Retry(ctx, s.p.cfg.Attempts, d.attempt)
	if d.failing {
		s.p.setFailing(-1)
	}
	switch {
	case err == nil:
		// The answer arrived, so the transport is done reading the bytes (after a failed
		// attempt it may not be, and that memory is left alone).
		raw := b.rb.raw[:0]
		batchMemory.Put(&raw)
		return nil
	case refusalReason(err) != "":
		return err // not retried: settle splits b or refuses its record
	case errors.Is(err, ErrNotSent):
		return fmt.Errorf("kafkaio: produce to %s/%d: %w", s.tp.topic, s.tp.partition, err)
	case s.p.txn != nil && (errors.Is(err, ErrFenced) || errors.Is(err, ErrTxnAbortable) || errors.Is(err, ErrNoTransaction)):
		return fmt.Errorf("kafkaio: produce to %s/%d: %w", s.tp.topic, s.tp.partition, err)
	case ctx.Err() != nil:
		return s.giveUpLocked(ctx.Err())
	}
	return fmt.Errorf("kafkaio: produce to %s/%d: %w (gave up after %d attempts)", s.tp.topic, s.tp.partition, err, s.p.cfg.Attempts)
}

// delivery is the state of one deliver call across its attempts.
type delivery struct {
	s   *sequencer
	b   *batch
	ctx context.Context // done when every caller of b stopped waiting

	failing   bool // an attempt failed: the Producer counts b as failing
	uncertain bool // the last failed attempt may have been written
}

// attempt makes one attempt to deliver the batch: it seals it if it is not sealed yet, sends it,
// and after a failure counts, logs and, for a reset error, re-seals it for the next attempt.
func (d *delivery) attempt(attempt int) error {
	s, b, p := d.s, d.b, d.s.p
	if p.cfg.BeforeSend != nil {
		if err := p.cfg.BeforeSend(d.ctx); err != nil {
			return Permanent(fmt.Errorf("%w: %w", ErrNotSent, err))
		}
	}
	if b.id == nil {
		if err := s.seal(d.ctx, b); err != nil {
			return err // only when ctx ended
		}
	}
	if p.txn != nil {
		if err := p.addPartition(d.ctx, s.tp, b.id); err != nil {
			return Permanent(err) // fenced, refused, or ctx ended: the coordinator requests retry by themselves
		}
	}
	if d.uncertain {
		p.cfg.Observer.UncertainRetry()
	}
	err := p.send(d.ctx, s.tp, &b.rb)
	if err != nil && p.txn != nil {
		err = p.txnProduceError(err)
	}
	if err == nil || !ended(d.ctx) { // not an attempt cut short by giving up
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
	}
	switch {
	case err == nil:
		if d.failing {
			p.cfg.Log.Log(slog.LevelInfo, "produce-recovered:"+s.tp.topic, "produce recovered",
				"topic", s.tp.topic, "partition", s.tp.partition, "attempts", attempt+1)
		}
		return nil
	case d.ctx.Err() != nil:
		return err
	case refusalReason(err) != "":
		return Permanent(err) // the same bytes would be refused again
	case isPermanent(err):
		return err // fenced, or the transaction must be aborted
	}
	if !d.failing {
		d.failing = true
		p.setFailing(1)
	}
	p.cfg.Observer.ProduceError()
	d.uncertain = false
	if reason := resetReason(err); reason != "" && p.ids != nil {
		if rerr := s.reset(d.ctx, b, reason, err); rerr != nil {
			return rerr // only when ctx ended
		}
		return err
	}
	d.uncertain = uncertain(err)
	d.logFailure(attempt, err)
	return err
}

// logFailure logs the failed attempt (sampled per topic).
func (d *delivery) logFailure(attempt int, err error) {
	s, p := d.s, d.s.p
	msg := "produce failed, retrying; input offsets are not committed until it succeeds"
	if p.cfg.Attempts > 0 && attempt+1 >= p.cfg.Attempts {
		msg = "produce failed; giving up"
	}
	attrs := []any{"topic", s.tp.topic, "partition", s.tp.partition, "records", d.b.records, "attempt", attempt + 1,
		"error", err.Error()}
	if hint := idempotenceHint(err); hint != "" && p.ids != nil {
		attrs = append(attrs, "hint", hint)
	}
	p.cfg.Log.Log(slog.LevelWarn, "produce-failed:"+s.tp.topic, msg, attrs...)
}

// giveUpLocked returns gaveUp(cause) under s.mu.
func (s *sequencer) giveUpLocked(cause error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gaveUp(cause)
}

// seal stamps b with the partition's identity and next sequence (without idempotence: with no
// producer). A partition switches to the newest identity here, with sequence 0: nothing of it is
// in flight at this point.
func (s *sequencer) seal(ctx context.Context, b *batch) error {
	ids := s.p.ids
	if ids == nil {
		b.rb.seal(noProducer.id, noProducer.epoch, -1)
		b.id = noProducer
		return nil
	}
	id := ids.current()
	if id == nil { // Start was not called: take a first identity now
		var err error
		if id, err = ids.renew(ctx, nil); err != nil {
			return err
		}
	}
	if id != s.id {
		s.id, s.nextSeq = id, 0
	}
	if s.p.txn != nil {
		b.rb.hdr.Attributes |= attrTransactional
	}
	b.rb.seal(id.id, id.epoch, s.nextSeq)
	b.id = id
	s.nextSeq = nextSequence(s.nextSeq, b.records)
	return nil
}

// reset re-seals b, whose producer state the broker rejected with cause, under an identity newer
// than the one it carries, with sequence 0.
func (s *sequencer) reset(ctx context.Context, b *batch, reason string, cause error) error {
	old := b.id
	id, err := s.p.ids.renew(ctx, old)
	if err != nil {
		return err
	}
	b.rb = b.rb.resealed(id.id, id.epoch, 0)
	b.id = id
	s.id, s.nextSeq = id, nextSequence(0, b.records)
	s.p.cfg.Observer.ProducerReset(reason)
	s.p.cfg.Log.Log(slog.LevelWarn, "producer-reset:"+s.tp.topic,
		"idempotent producer reset: the broker rejected the producer state; the batch is re-sent under a new producer id "+
			"(if it had been written before, it is now written twice)",
		"topic", s.tp.topic, "partition", s.tp.partition, "reason", reason, "error", cause.Error(),
		"old_producer_id", old.id, "old_epoch", old.epoch, "producer_id", id.id, "epoch", id.epoch)
	return nil
}

// context returns a context that is done when the contexts of all of b's callers are.
func (b *batch) context() (context.Context, context.CancelFunc) {
	var subs []*submission
	for _, c := range b.chunks {
		if len(subs) == 0 || subs[len(subs)-1] != c.sub {
			subs = append(subs, c.sub)
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
