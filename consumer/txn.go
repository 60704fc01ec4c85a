package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// Exactly-once delivery (DeliveryExactlyOnce).
//
// Every input partition has a transactional producer of its own, with the transactional id
// TransactionalID(group, topic, partition) (Kafka Streams' EOS-v1; docs/design.md says why not
// one per member). A partition goroutine, before anything else:
//
//  1. starts its producer (InitProducerId): this fences the partition's previous owner, whatever
//     it is doing (a zombie paused past its session, a process killed with an open transaction),
//     and aborts its open transaction, so nothing of it can become visible any more;
//  2. reads the partition's committed offset again (kafkaio.CommittedOffsets), now stable;
//  3. assigns the deduplication state (Deduper.Assign), whose re-warm and rebuild read the
//     output read_committed up to its last stable offset: after the fence, that is everything
//     the previous owner will ever have written.
//
// It then writes the output (and the duplicates and dead-letter topics) in transactions, and
// commits the input offsets inside them (TxnOffsetCommit): records and offsets become visible
// together or never. A transaction is committed when it holds TxnMaxRecords input records or is
// TxnInterval old, when the partition blocks at a refused record, and when the partition is
// released. Deduper.Acked follows the commit, so a snapshot never claims records of a
// transaction that may still abort.
//
// A fenced producer stops its partition for good: it never produces or commits for it again, its
// state is discarded (not saved), and it logs why. A transaction that must be aborted (the broker
// lost the producer state) is aborted, the state discarded, and the partition starts over from
// step 1. A partition released with a transaction that could not be committed aborts it.

// errFencedPartition ends a partition whose producer was fenced.
var errFencedPartition = errors.New("consumer: the partition's transactional producer was fenced")

// TransactionalID returns the transactional id of input partition p of topic in group: one per
// input partition, the same for every owner, so that each new owner fences the previous one.
func TransactionalID(group, topic string, p int32) string {
	return group + "-" + topic + "-" + strconv.Itoa(int(p))
}

// offsetSink takes the input offsets a partition handled: the committer (at-least-once) or the
// partition's transactions (exactly-once). Each partition goroutine calls mark after every
// handled batch, and flush when it releases the partition.
type offsetSink interface {
	// mark records that every input record of partition before next was handled.
	mark(partition int, next int64)
	// readAt records the leader epoch of the record before next, for a commit of next.
	readAt(partition int, next int64, epoch int32)
	// rewind records that the partition is read again from next, below what was marked (an
	// offset reset): next is committed although it is lower, and marks go on from it.
	rewind(partition int, next int64)
	// flush marks next and waits until it is committed.
	flush(ctx context.Context, partition int, next int64) error
	// owned returns an error wrapping ErrNotOwner once the partition's writes must stop because
	// its generation was lost.
	owned(ctx context.Context) error
}

// txnSink is one input partition's transactions. Only its partition goroutine uses it.
type txnSink struct {
	w    *Worker
	p    int32
	prod *kafkaio.Producer

	open      bool      // Begin was called and the transaction not ended
	first     time.Time // when the open transaction got its first batch; zero while empty
	records   int       // input records handled in the open transaction
	pending   int64     // next input offset to commit; -1 for none
	committed int64     // next input offset committed; -1 for none
	read      epochAt   // the leader epoch of the record before an offset, as readAt was told
}

// newTxnSink returns partition p's transactions, with a producer that is not started.
func (w *Worker) newTxnSink(p int32) *txnSink {
	prod := kafkaio.NewProducer(w.client, kafkaio.ProducerConfig{
		TransactionalID:    TransactionalID(w.cfg.GroupID, w.cfg.InputTopic, p),
		TransactionTimeout: w.cfg.TxnTimeout,
		Compression:        kafkaio.Compression(w.cfg.Compression),
		BatchBytes:         w.cfg.BatchBytes,
		Backoff:            w.cfg.retry(),
		Observer:           w.obs,
		Log:                w.sample,
		OnFailing:          w.updateReady,
		Memory:             w.produceMem,
	})
	for topic, n := range w.limits {
		prod.SetMaxMessageBytes(topic, n)
	}
	w.txnMu.Lock()
	w.txnProds[p] = prod
	w.txnMu.Unlock()
	return &txnSink{w: w, p: p, prod: prod, pending: -1, committed: -1, read: epochAt{next: -1}}
}

// close forgets the sink's producer (for Ready) once its partition goroutine ends.
func (t *txnSink) close() {
	t.w.txnMu.Lock()
	if t.w.txnProds[t.p] == t.prod {
		delete(t.w.txnProds, t.p)
	}
	t.w.txnMu.Unlock()
	t.w.updateReady()
}

// fence starts the producer, fencing the partition's previous owner, and returns the offset to
// consume from: the group's committed offset, read after the fence, or from when there is
// none. It retries until gctx ends (false). After an abort (again), the producer's new epoch is
// the fence: a worker that was itself fenced meanwhile learnt it from the abort, and must not
// take the transactional id back from the partition's new owner with a fresh InitProducerId.
func (t *txnSink) fence(gctx context.Context, from kafkaio.Committed, again bool) (kafkaio.Committed, bool) {
	w := t.w
	if !again && !t.start(gctx) {
		return from, false
	}
	var committed map[int]kafkaio.Committed
	err := w.cfg.retry().Retry(gctx, 0, func(int) error {
		var err error
		committed, err = kafkaio.CommittedOffsets(gctx, w.client, w.cfg.GroupID, w.cfg.InputTopic, []int{int(t.p)})
		if err != nil && gctx.Err() == nil {
			w.sample.Log(slog.LevelWarn, "committed-offsets", "cannot read the committed offset after the fence; retrying",
				"partition", t.p, "error", err.Error())
		}
		return err
	})
	if err != nil {
		return from, false
	}
	if c := committed[int(t.p)]; c.Offset >= 0 {
		from = c
	}
	t.pending, t.committed, t.open, t.records, t.first = -1, -1, false, 0, time.Time{}
	return from, true
}

// start starts the producer (InitProducerId), retrying until gctx ends (false).
func (t *txnSink) start(gctx context.Context) bool {
	err := t.prod.Start(gctx)
	if err != nil && gctx.Err() == nil {
		t.w.log.Error("transactional producer cannot start; the partition is not consumed",
			"partition", t.p, "error", err.Error())
	}
	return err == nil
}

// begin opens a transaction unless one is open.
func (t *txnSink) begin() error {
	if t.open {
		return nil
	}
	if err := t.prod.Begin(); err != nil {
		return err
	}
	t.open = true
	return nil
}

// mark records next as the offset to commit with the open transaction.
func (t *txnSink) mark(_ int, next int64) {
	if next > t.pending {
		t.pending = next
	}
}

// readAt implements offsetSink: the transaction's offset commit of next carries epoch (KIP-320);
// one of another offset carries -1, no epoch.
func (t *txnSink) readAt(_ int, next int64, epoch int32) {
	t.read = epochAt{next: next, epoch: epoch}
}

// rewind makes next the input offset the transaction commits, below the one marked before, and
// forgets the committed one, so that commit sends it.
func (t *txnSink) rewind(_ int, next int64) {
	t.pending, t.committed = next, -1
}

// handled counts a batch of n input records in the open transaction.
func (t *txnSink) handled(n int) {
	if t.first.IsZero() {
		t.first = time.Now()
	}
	t.records += n
}

// flush marks next and commits the open transaction.
func (t *txnSink) flush(ctx context.Context, partition int, next int64) error {
	t.mark(partition, next)
	return t.commit(ctx)
}

// due reports whether the open transaction is full or old enough to commit.
func (t *txnSink) due() bool {
	return !t.first.IsZero() && (t.records >= t.w.cfg.TxnMaxRecords || time.Since(t.first) >= t.w.cfg.TxnInterval)
}

// deadline returns when the open transaction is due by time (zero: it is empty).
func (t *txnSink) deadline() time.Time {
	if t.first.IsZero() {
		return time.Time{}
	}
	return t.first.Add(t.w.cfg.TxnInterval)
}

// commit sends the pending input offset with the open transaction and commits it, then tells
// the Deduper that everything before that offset is acknowledged.
func (t *txnSink) commit(ctx context.Context) error {
	if !t.open {
		return nil
	}
	w := t.w
	if t.pending > t.committed {
		c := kafkaio.Committed{Offset: t.pending, LeaderEpoch: -1}
		if t.read.next == t.pending {
			c.LeaderEpoch = t.read.epoch
		}
		err := t.prod.SendOffsets(ctx, w.cfg.GroupID, w.cfg.InputTopic, map[int]kafkaio.Committed{int(t.p): c})
		if err != nil {
			return fmt.Errorf("consumer: partition %d: %w", t.p, err)
		}
	}
	if err := t.prod.Commit(ctx); err != nil {
		return fmt.Errorf("consumer: partition %d: %w", t.p, err)
	}
	t.open, t.records, t.first = false, 0, time.Time{}
	if t.pending > t.committed {
		t.committed = t.pending
		w.dedup.Acked(t.p, t.committed)
	}
	return t.begin() // sends nothing: the next records have their transaction
}

// owned returns nil: under exactly-once the partition's transactional producer is fenced by the
// broker (its epoch), so a write after the generation was lost is refused there, not here.
func (t *txnSink) owned(context.Context) error { return nil }

// abort aborts the open transaction (taking a new producer epoch) within ctx.
func (t *txnSink) abort(ctx context.Context) error {
	t.open, t.records, t.first, t.pending = false, 0, time.Time{}, t.committed
	if err := t.prod.Abort(ctx); err != nil {
		return fmt.Errorf("consumer: partition %d: aborting the transaction: %w", t.p, err)
	}
	return nil
}

// fenced reports whether err says the partition's producer was fenced, and logs it once.
func (t *txnSink) fenced(err error) bool {
	if !errors.Is(err, kafkaio.ErrFenced) && t.prod.Fenced() == nil {
		return false
	}
	t.w.log.Error("partition stopped: another owner took its transactional id over (this worker was expelled from the group, "+
		"or paused past its session); it never writes or commits for the partition again, and its state is discarded",
		"topic", t.w.cfg.InputTopic, "partition", t.p, "transactional_id", TransactionalID(t.w.cfg.GroupID, t.w.cfg.InputTopic, t.p),
		"error", err.Error())
	return true
}

// errTxnDue ends a fetch that waited until the open transaction was due.
var errTxnDue = errors.New("consumer: the open transaction is due")

// producer returns the producer of st's partition: its transactional one, or the Worker's.
func (st *partitionState) producer(w *Worker) *kafkaio.Producer {
	if st.tx != nil {
		return st.tx.prod
	}
	return w.prod
}

// fetch returns r's next batch. With an open transaction that holds records, it waits no longer
// than until the transaction is due, and then returns an error wrapping errTxnDue (also on the next
// call, when the deadline cut a batch short), so that a quiet partition commits on time.
func (w *Worker) fetch(gctx context.Context, r *kafkaio.PartitionReader, st *partitionState) (*kafkaio.Batch, error) {
	ctx := gctx
	if st.tx != nil {
		if dl := st.tx.deadline(); !dl.IsZero() {
			fctx, cancel := context.WithDeadlineCause(gctx, dl, errTxnDue)
			defer cancel()
			ctx = fctx
		}
	}
	b, err := r.Fetch(ctx, w.cfg.BatchSize, w.cfg.BatchTimeout)
	if err != nil && st.tx != nil && gctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		err = errTxnDue
	}
	return b, err
}

// handle handles batch b (handleBatch) inside the partition's transaction, if it has one. A
// transaction failure is kept in st.txnErr.
func (w *Worker) handle(gctx, pctx context.Context, c offsetSink, st *partitionState, tc topicCounts, b *kafkaio.Batch) error {
	if st.tx == nil {
		return w.handleBatch(gctx, pctx, c, st, tc, b)
	}
	if err := st.tx.begin(); err != nil {
		st.txnErr = err
		return err
	}
	err := w.handleBatch(gctx, pctx, c, st, tc, b)
	if errors.Is(err, kafkaio.ErrFenced) || errors.Is(err, kafkaio.ErrTxnAbortable) || errors.Is(err, kafkaio.ErrNoTransaction) {
		st.txnErr = err
	}
	if err == nil {
		st.tx.handled(len(b.Records))
	}
	return err
}

// finishTxn ends the partition's transactions when consume returned: it commits the open one if
// every record in it was written (ok), else aborts it. It returns whether the state may be
// revoked (everything Seen is committed) and whether the partition should start over (an
// aborted transaction while the generation goes on). A fenced partition neither commits nor
// aborts: its state is discarded and it stops.
func (w *Worker) finishTxn(gctx, pctx, hard context.Context, st *partitionState, ok bool) (drained, restart bool) {
	tx := st.tx
	err := st.txnErr
	if err == nil && ok && st.next >= 0 {
		err = tx.flush(pctx, int(st.p), st.next)
	} else if err == nil && ok {
		err = tx.commit(pctx)
	}
	switch {
	case err == nil && ok:
		return true, false
	case err != nil && tx.fenced(err):
		return false, false
	}
	if err != nil {
		w.log.Warn("transaction aborted; the records in it are consumed again", "topic", w.cfg.InputTopic,
			"partition", st.p, "error", err.Error())
	}
	if aerr := tx.abort(hard); aerr != nil && !tx.fenced(aerr) {
		w.log.Error("transaction could not be aborted; it is aborted by the next owner's fence or the transaction timeout",
			"partition", st.p, "error", aerr.Error())
		return false, false
	}
	return false, gctx.Err() == nil && tx.prod.Fenced() == nil
}
