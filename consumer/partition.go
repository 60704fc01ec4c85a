package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/identity"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// partitionState is the reusable per-partition working memory.
type partitionState struct {
	p   int32
	in  []kafkaio.Record // the records of the batch in hand: the reader's, valid until its next Fetch
	ids [][]byte         // ids[i]: the identity of in[i], or nil (see absent)
	// absent[i]: why in[i] has no identity (identity.Found when it has one)
	absent     []identity.Reason
	identified int // records of in whose identity was extracted
	// verdicts[i]: the verdict on in[i] when it has an identity (judgeBatch)
	verdicts   []Verdict
	timeOf     func(int) time.Time // in[i]'s timestamp, for a BatchJudge
	putVerdict func(int, Verdict)  // sets verdicts[i], for a BatchJudge
	out        []kafkaio.Record
	outStale   int // the length of the last batch's out, kept for this one (endBatch)
	dups       []kafkaio.Record
	latency    []time.Duration // the batch's produced records' times since their timestamps (acked)

	byPart [][]kafkaio.Record // hash and identity partitioning: out grouped by output partition
	hash   partitioner        // nil under PartitionSame
	outIDs [][]byte           // identity partitioning: outIDs[i] is the identity of out[i], or nil
	route  routeArena         // Config.Route: the batch's routing headers

	hdr    headerSource
	hdrSeq func(yield func(string, []byte) bool)

	src SourceTally // nil unless Config.SourceKey is set

	audit   auditArena       // the batch's audit headers (audit.go)
	stamps  []kafkaio.Header // the batch's output headers with Config.ProcessedHeader (stamp.go)
	stampAt []byte           // the value of the batch's processed header
	prog    *progress        // the partition's progress, for Observer.Progress and readiness

	next int64 // next offset to commit; -1 until a batch was handled

	tx     *txnSink // the partition's transactions under DeliveryExactlyOnce, else nil
	txnErr error    // the transaction failure that ended consume

	// Refused records (see refuse.go).
	lanes     []lane            // what a refusal left to write of the current batch
	diverted  int               // records of the batch's output written to the dead-letter topic
	blocked   *BlockedPartition // where the partition is blocked; nil while it is not
	discarded bool              // the state was discarded at a block and not assigned again
}

// headerSource adapts the current record's headers to the iterator a KeyFunc takes. One is kept
// per partition with a pre-bound method value, so calling the KeyFunc allocates nothing.
type headerSource struct{ cur []kafkaio.Header }

func (h *headerSource) all(yield func(string, []byte) bool) {
	for _, x := range h.cur {
		if !yield(x.Key, x.Value) {
			return
		}
	}
}

// partition consumes one assigned partition from from (the committed offset, and the leader epoch
// committed with it, which the reader checks before its first fetch) until gctx ends, then
// drains: the batch in hand is produced, its offsets are committed and the Deduper's Revoke is
// called. Produce, commit and Revoke may take the release budget (Config.releaseBudget) after
// gctx ended, and never longer than hard allows. Under DeliveryExactlyOnce the partition first fences its previous
// owner (see txn.go), and starts over after a transaction that had to be aborted.
func (w *Worker) partition(gctx, hard context.Context, c *committer, tc topicCounts, p int32, from kafkaio.Committed) {
	pctx, cancel := graceContext(hard, gctx, w.cfg.releaseBudget())
	defer cancel()
	ended := newEndClock(gctx)
	defer ended.stop()

	var tx *txnSink
	if w.cfg.Delivery == DeliveryExactlyOnce {
		tx = w.newTxnSink(p)
		defer tx.close()
	}
	for restarts := 0; ; restarts++ {
		start, ok := w.prepare(gctx, tx, p, from, restarts > 0)
		if restarts == 0 {
			w.pendingAssign.Add(-1)
			w.updateReady()
		}
		if !ok {
			return
		}
		st, drained, restart := w.run(gctx, pctx, hard, c, tx, tc, p, start, ended)
		if restart {
			w.handBack(pctx, hard, c.ownership(), p, false)
			if !kafkaio.Sleep(gctx, w.cfg.retry().Delay(restarts)) { // a failure that repeats is not retried hot
				return
			}
			continue
		}
		ended.note()
		w.release(pctx, hard, c, st, drained, ended.since)
		return
	}
}

// prepare fences the partition's previous owner under DeliveryExactlyOnce (then the offset to
// start from is the one committed by then; again: after an abort, see txnSink.fence) and assigns
// its state. It returns false when gctx ended first.
func (w *Worker) prepare(gctx context.Context, tx *txnSink, p int32, from kafkaio.Committed, again bool) (kafkaio.Committed, bool) {
	if tx != nil {
		var ok bool
		if from, ok = tx.fence(gctx, from, again); !ok {
			return from, false
		}
	}
	return from, w.assign(gctx, p)
}

// run consumes p from from until gctx ends or the partition fails, then commits what it
// handled: drained says every record passed to Seen is written and committed (or the partition
// stopped at a block, with its state discarded), restart that an aborted transaction calls for
// discarding the state and starting over. It notes on ended when it saw gctx end.
func (w *Worker) run(gctx, pctx, hard context.Context, c *committer, tx *txnSink, tc topicCounts, p int32, from kafkaio.Committed, ended *endClock) (st *partitionState, drained, restart bool) {
	prog := newProgress(p, from.Offset, w.obs)
	defer w.progress.add(prog)()
	defer w.updateReady()
	r := w.newReader(p, from, prog)
	st = w.newPartitionState(p, tc, tx)
	st.prog = prog
	var sink offsetSink = c
	if tx != nil {
		sink = tx
	}
	drained, stopped := w.consume(gctx, pctx, r, sink, st, tc)
	ended.note()
	readerClosed := r.Close() // stop fetching; records fetched and not handled are simply not committed
	defer func() { <-readerClosed }()
	if tx != nil {
		drained, restart = w.finishTxn(gctx, pctx, hard, st, drained || stopped)
		return st, drained && !st.discarded, restart
	}
	if (drained || stopped) && st.next >= 0 {
		err := kafkaio.Backoff{Max: time.Second}.Retry(pctx, 3, func(int) error {
			return c.flush(pctx, int(p), st.next)
		})
		if err != nil {
			// Everything was produced, so the state is consistent with the output topic; the
			// next owner re-consumes from the last committed offset and treats what it finds
			// in the restored state as duplicates, which they are.
			w.log.Warn("final offset commit failed; records after the last committed offset will be re-consumed",
				"topic", w.cfg.InputTopic, "partition", p, "offset", st.next, "error", err.Error())
		}
	}
	return st, drained, false
}

// newPartitionState returns the working memory of partition p.
func (w *Worker) newPartitionState(p int32, tc topicCounts, tx *txnSink) *partitionState {
	st := &partitionState{p: p, next: -1, tx: tx}
	st.hdrSeq = st.hdr.all
	if w.cfg.SourceKey != nil {
		st.src = w.cfg.Sources()
	}
	switch w.cfg.Partitioning {
	case PartitionHash:
		st.hash = newHashPartitioner(tc.output)
	case PartitionIdentity:
		st.hash = identityPartitioner{n: tc.output}
		st.outIDs = [][]byte{}
	}
	if st.hash != nil {
		st.byPart = make([][]kafkaio.Record, tc.output)
	}
	return st
}

// newReader returns the reader of input partition p from from on (checked against the leader
// epoch committed with it), which reports its offsets, failures and skipped records to prog and
// the Observer.
func (w *Worker) newReader(p int32, from kafkaio.Committed, prog *progress) *kafkaio.PartitionReader {
	return kafkaio.NewPartitionReader(w.client, kafkaio.PartitionReaderConfig{
		Topic: w.cfg.InputTopic, Partition: int(p), Offset: from.Offset, OffsetEpoch: &from.LeaderEpoch, Isolation: w.cfg.isolation(),
		ResetToLatest: w.cfg.StartFromLatest, MaxBytes: w.cfg.FetchMaxBytes, MaxWait: w.cfg.FetchMaxWait,
		Backoff: w.cfg.retry(), Log: w.sample, IdlePoll: w.cfg.ProgressInterval,
		Limits:    kafkaio.DefaultDecodeLimits(w.cfg.DecodeMaxBytes, w.cfg.FetchMaxBytes),
		OnHeld:    func(d time.Duration) { w.obs.TransactionHeld(p, d) },
		OnOffsets: func(o kafkaio.Offsets) { w.fetched(prog, o) },
		OnError:   func(error) { prog.failed(); w.updateReady() },
		OnSkipped: func(reason string, n int64) { w.obs.InputSkipped(p, reason, n) },
		Pool:      w.pool,
		OnReread:  func(reason string, n int64) { w.obs.InputReread(p, reason, n) },
	})
}

// fetched reports the offsets o of prog's partition, and readiness when its fetches had been
// failing.
func (w *Worker) fetched(prog *progress, o kafkaio.Offsets) {
	wasFailing := prog.failingSince.Load() != 0
	prog.offsets(o)
	if wasFailing {
		w.updateReady()
	}
}

// consume handles the batches of r until gctx ends (drained: every record passed to Seen was
// acknowledged) or a batch could not be written before pctx ended (neither), or ended blocked
// at a refused record (stopped: committed up to it, no state held; see refuse.go). Under
// DeliveryExactlyOnce it also ends, with neither, when a transaction failed (st.txnErr).
func (w *Worker) consume(gctx, pctx context.Context, r *kafkaio.PartitionReader, c offsetSink, st *partitionState, tc topicCounts) (drained, stopped bool) {
	for gctx.Err() == nil {
		b, err := w.fetch(gctx, r, st)
		if err == nil {
			if perr := w.handle(gctx, pctx, c, st, tc, b); errors.Is(perr, errHeld) {
				return true, false // nothing of the batch reached the Deduper
			} else if perr != nil {
				return false, errors.Is(perr, errStopped)
			}
		} else if gctx.Err() == nil && !errors.Is(err, errTxnDue) { // the reader retries by itself; the next Fetch waits for it
			w.sample.Log(slog.LevelWarn, "fetch", "fetch failed; the reader keeps retrying",
				"topic", w.cfg.InputTopic, "partition", st.p, "error", err.Error())
		}
		if st.tx != nil && st.tx.due() {
			if st.txnErr = st.tx.commit(pctx); st.txnErr != nil {
				return false, false
			}
		}
	}
	return true, false
}

// endClock tells how long ago a context ended, from the earliest moment the worker knew it: the
// callback context.AfterFunc runs, or a goroutine that saw the context done and said so (note),
// whichever came first. On a loaded machine the callback's goroutine may be scheduled long after
// the context ended, even after the release it times, so the partition notes the end itself as
// soon as it sees it. Its methods are safe for concurrent use.
type endClock struct {
	ctx   context.Context
	base  time.Time
	ended atomic.Int64 // monotonic nanoseconds since base, plus one; 0 while not known to have ended
	stop  func() bool  // releases the watch on ctx
}

// newEndClock returns the clock of ctx's end; call stop when done with it.
func newEndClock(ctx context.Context) *endClock {
	c := &endClock{ctx: ctx, base: time.Now()}
	c.stop = context.AfterFunc(ctx, c.note)
	return c
}

// note records now as the end, if ctx is done and no earlier end was recorded.
func (c *endClock) note() {
	if c.ctx.Err() != nil {
		c.ended.CompareAndSwap(0, int64(time.Since(c.base))+1)
	}
}

// since returns the time since ctx ended, 0 while it is not known to have ended.
func (c *endClock) since() time.Duration {
	e := c.ended.Load()
	if e == 0 {
		return 0
	}
	return time.Since(c.base) - time.Duration(e-1)
}

// assign calls Deduper.Assign for p, retrying under the retry policy, until it succeeds (true) or
// gctx ends (false). Every failure is logged and counted (Observer.AssignRetry).
func (w *Worker) assign(gctx context.Context, p int32) bool {
	err := w.cfg.retry().Retry(gctx, 0, func(attempt int) error {
		err := w.dedup.Assign(gctx, p)
		if err != nil && gctx.Err() == nil {
			w.obs.AssignRetry()
			w.log.Error("deduplication state for partition could not be prepared; retrying",
				"partition", p, "attempt", attempt+1, "error", err.Error())
		}
		return err
	})
	return err == nil
}

// release hands the partition's deduplication state back: Revoke when every record passed to
// Seen was acknowledged by the output topic, otherwise Discard so that no snapshot claims records
// the output never got; nothing when a block discarded it (and the block is no longer reported).
// since returns the time since the generation ended; the release is logged and reported to the
// Observer with it. A release that gave up a batch unacknowledged logs how many output records
// it held (unacknowledged_records): under DeliveryAtLeastOnce a request of them may still land
// after the next owner's re-warm, and they are then written twice (docs/design.md, Failure
// model: the previous owner's late writes), so that is the most such a release can leak.
func (w *Worker) release(pctx, hard context.Context, c *committer, st *partitionState, drained bool, since func() time.Duration) {
	p := st.p
	var outcome string
	attrs := []any{"partition", p}
	switch {
	case st.discarded:
		outcome = "discarded at the block"
		if b := st.blocked; b != nil {
			w.setBlocked(p, b, nil)
			w.log.Warn("partition released while blocked at a refused record; its next owner blocks at the same offset "+
				"unless the topic takes the record by then", "partition", p, "offset", b.Offset, "refused_by", b.Topic, "reason", b.Reason)
		}
	default:
		outcome = w.handBack(pctx, hard, c.ownership(), p, drained)
		if !drained {
			attrs = append(attrs, "unacknowledged_records", len(st.out))
		}
	}
	took := since()
	w.obs.Released(took)
	w.log.Info("partition released", append(attrs, "state", outcome, "took", took.String(),
		"budget", w.cfg.releaseBudget().String())...)
}

// handBack calls Revoke or Discard for p and returns what became of the state: "revoked",
// "revoke failed", "discarded" or "discarded: generation lost" (own, nil in tests, says the
// generation was lost: the partition may have moved, and a save now could hide what its new owner
// produced).
func (w *Worker) handBack(pctx, hard context.Context, own *ownership, p int32, drained bool) string {
	if own != nil && drained {
		if err := own.check(pctx); errors.Is(err, ErrNotOwner) {
			w.log.Warn("partition released after the consumer group generation was lost: its state is dropped, not saved",
				"partition", p, "error", err.Error())
			if err := w.dedup.Discard(hard, p); err != nil {
				w.log.Error("discard failed", "partition", p, "error", err.Error())
			}
			return "discarded: generation lost"
		}
	}
	if drained {
		err := w.dedup.Revoke(pctx, p)
		switch {
		case err == nil:
			return "revoked"
		case errors.Is(err, ErrNotOwner): // lost after the check above: the save was refused
			w.log.Warn("partition released after the consumer group generation was lost: its state is dropped, not saved",
				"partition", p, "error", err.Error())
			return "discarded: generation lost"
		case pctx.Err() != nil:
			w.log.Error("revoke did not finish within the release budget: the partition's final snapshot may be missing, "+
				"so its next owner restores an older one and re-warms from the output topic",
				"partition", p, "budget", w.cfg.releaseBudget().String(), "error", err.Error())
		default:
			w.log.Error("revoke failed", "partition", p, "error", err.Error())
		}
		return "revoke failed"
	}
	w.log.Warn("partition released with records that were processed but not acknowledged by the output topic; "+
		"they will be re-consumed by the next owner and their deduplication state is discarded",
		"partition", p)
	if err := w.dedup.Discard(hard, p); err != nil {
		w.log.Error("discard failed", "partition", p, "error", err.Error())
	}
	return "discarded"
}

// judgeBatch puts in st.verdicts the verdict on each keyed record of st.in: from the Deduper's
// JudgeBatch when it is a BatchJudge, else from Judge record by record.
func (w *Worker) judgeBatch(st *partitionState) {
	n := len(st.in)
	st.verdicts = slices.Grow(st.verdicts[:0], n)[:n]
	clear(st.verdicts) // no verdict of an earlier batch survives: one not put is VerdictNew
	if w.batch != nil {
		if st.timeOf == nil {
			st.timeOf = func(i int) time.Time { return st.in[i].Time }
			st.putVerdict = func(i int, v Verdict) { st.verdicts[i] = v }
		}
		w.batch.JudgeBatch(st.p, st.ids, st.timeOf, st.putVerdict)
		return
	}
	for i, id := range st.ids {
		if id != nil {
			st.verdicts[i] = w.judge.Judge(st.p, id, st.in[i].Time)
		}
	}
}

// handleBatch deduplicates the records of b, produces the result and marks the batch's offsets
// (up to b.Next, which may be past its last record) for commit. The Deduper hears Processing
// before the first Seen of the batch and Acked after its last acknowledged write; a batch without
// records only moves the offsets. It returns an error only when pctx ended before every output
// write was acknowledged, or errStopped when gctx ended while the partition was blocked at a
// record the output refuses (then the input is committed up to that record; see refuse.go),
// errHeld when gctx ended while the batch's identities could not be extracted (then nothing of the
// batch was passed to the Deduper), or an error wrapping ErrNotOwner when the generation was lost
// before the batch was written (see committer.owned).
func (w *Worker) handleBatch(gctx, pctx context.Context, c offsetSink, st *partitionState, tc topicCounts, b *kafkaio.Batch) error {
	p := st.p
	st.in = b.Records
	w.obs.Consumed(p, len(st.in))
	if len(st.in) > 0 {
		st.prog.batch(st.in[0].Time)
	}
	if b.Aborted > 0 {
		w.obs.Aborted(p, b.Aborted)
	}
	if b.Rewound {
		w.rewind(c, st, b.From)
	}
	if err := w.identify(gctx, st); err != nil {
		return err
	}
	if st.out == nil {
		st.out = w.outs.get(len(st.in))
	}
	out, dups := st.out[:0], st.dups[:0]
	st.audit.reset()
	var diverted [4]int // by DropReasons
	nDup := 0
	var unkeyed [identity.NumReasons]int
	mark := w.cfg.Mode == ModeMark
	side := w.cfg.DuplicatesTopic != ""
	w.startOut(st)
	// The processed time is read before Processing, which brings the filter to the clock's
	// generation: every identity of the batch is remembered for the window from this time on, so
	// a rebuild or an audit that reads the header never counts from later than the judging.
	judged := time.Now()
	w.dedup.Processing(p, b.Next)
	w.judgeBatch(st)
	for i := range st.in {
		m := &st.in[i]
		src := w.source(st, m)
		if r := st.absent[i]; r != identity.Found {
			st.counted(src, false)
			if unkeyed[r]++; unkeyed[r] == 1 {
				w.sample.Log(slog.LevelWarn, "unkeyed", "record without an extractable deduplication key",
					"topic", w.cfg.InputTopic, "partition", p, "offset", m.Offset, "reason", r.String(), "policy", string(w.cfg.Unkeyed))
			}
			if w.cfg.Unkeyed == UnkeyedPass {
				out = w.emit(st, out, m, nil)
			} else if side {
				dups = append(dups, w.auditRecord(st, m, verdictUnkeyed))
				diverted[verdictUnkeyed.reasonIndex()]++
			}
			continue
		}
		v := st.verdicts[i]
		if !st.counted(src, v != VerdictNew) {
			out = w.emit(st, out, m, st.ids[i])
			continue
		}
		nDup++
		if side {
			dups = append(dups, w.auditRecord(st, m, v))
			diverted[v.reasonIndex()]++
		}
		if mark {
			out = w.emitMarked(st, out, m, st.ids[i])
		}
	}
	st.out, st.dups = out, dups
	st.flushSources()
	if nDup > 0 {
		w.obs.Duplicates(p, nDup)
	}
	for r, n := range unkeyed {
		if n > 0 {
			w.obs.Unkeyed(p, identity.Reason(r).String(), n)
		}
	}

	if w.cfg.ProcessedHeader != "" {
		st.stamp(out, w.cfg.ProcessedHeader, mark, w.cfg.MarkHeader, judged)
	}
	if err := c.owned(pctx); err != nil {
		return err
	}
	if err := w.write(gctx, pctx, c, st, tc, out, dups, b.Next); err != nil {
		return err
	}
	w.acked(c, st, b, out, diverted)
	w.endBatch(st, b.More)
	if b.Refused != nil {
		return w.refuseInput(gctx, pctx, c, st, tc, b.Refused)
	}
	return nil
}

// acked counts a written batch (its diverted records, the produced ones and their latency) and
// moves the partition's offsets past it: the Deduper's acknowledgement (at once without
// transactions; with them, after the commit), the offset sink's read and commit positions.
func (w *Worker) acked(c offsetSink, st *partitionState, b *kafkaio.Batch, out []kafkaio.Record, diverted [4]int) {
	p := st.p
	for i, n := range diverted {
		if n > 0 {
			w.obs.Diverted(p, DropReasons[i], n)
		}
	}
	ack := time.Now()
	if len(out) > 0 {
		w.obs.Produced(p, len(out)-st.diverted)
		lat, ackNs := st.latency[:0], ack.UnixNano()
		for i := range out {
			if !out[i].Time.IsZero() {
				lat = append(lat, sinceMilli(ackNs, out[i].Time))
			}
		}
		w.obs.Latency(ack.Sub(b.Start), lat)
		st.latency = lat
	}
	st.next = b.Next
	st.prog.handled(st.next)
	st.prog.offsets(kafkaio.Offsets{From: -1, End: b.End, LogStart: -1})
	if st.tx == nil { // with transactions, after the commit
		w.dedup.Acked(p, st.next)
	}
	c.readAt(int(p), st.next, b.Epoch)
	c.mark(int(p), st.next)
}

// sinceMilli returns the time from t, a record timestamp (a Unix millisecond), to now, in Unix
// nanoseconds: now.Sub(t), saturated the same way, at a fraction of its cost (Time.Sub checks
// its result for overflow with a Time.Add, for every record).
func sinceMilli(now int64, t time.Time) time.Duration {
	const apart = math.MaxInt64 / int64(time.Millisecond) / 2 // ~146 years: no overflow within
	ms, nowMs := t.UnixMilli(), now/int64(time.Millisecond)
	switch {
	case ms < nowMs-apart:
		return math.MaxInt64
	case ms > nowMs+apart:
		return math.MinInt64
	}
	return time.Duration(now - ms*int64(time.Millisecond))
}

// endBatch drops the partition's references to the batch's records, which are the reader's and
// valid only until its next Fetch, and gives the output slice back to the worker's pool, cleared.
// With more (the reader hands out the next batch at once: Batch.More) the partition keeps the
// output slice for the next batch instead, which overwrites these records: it clears only what
// is left of the batch before, which the records of this one did not overwrite, so that the
// slice refers to no batch before the one in hand, and clearing the whole slice, as often as a
// batch is handled, is a pass over memory that the next batch writes anyway.
func (w *Worker) endBatch(st *partitionState, more bool) {
	st.in = nil
	clear(st.ids) // they alias the records
	clear(st.outIDs)
	n := len(st.out)
	if st.outStale > n && st.outStale <= cap(st.out) {
		clear(st.out[n:st.outStale])
	}
	if more {
		st.out, st.outStale = st.out[:0], n
	} else {
		w.outs.put(st.out) // cleared: no references to record bytes until it is reused
		st.out, st.outStale = nil, 0
	}
	clear(st.dups)
	clear(st.stamps)
	st.audit.reset()
	for _, msgs := range st.byPart {
		clear(msgs)
	}
	clear(st.lanes)
}

// rewind tells the Deduper and the offset sink that p's input is read again from from, below
// what the partition handled (an offset reset), and logs it: the offsets between are read a
// second time (the reader logged and counted the reset).
func (w *Worker) rewind(c offsetSink, st *partitionState, from int64) {
	w.log.Warn("input offset moved backward after an offset reset; committing the lower offset and reading on from it",
		"topic", w.cfg.InputTopic, "partition", st.p, "from", st.next, "to", from)
	w.dedup.Rewind(st.p, from)
	c.rewind(int(st.p), from)
	st.next = from
}

// source returns the source of m, for the per-source counts: nil when they are off
// (Config.SourceKey unset) or the record has none (a retry error included: the counts never hold
// the partition).
func (w *Worker) source(st *partitionState, m *kafkaio.Record) []byte {
	if st.src == nil {
		return nil
	}
	st.hdr.cur = m.Headers
	src, _, _ := w.cfg.SourceKey(context.Background(), m.Key, m.Value, st.hdrSeq)
	st.hdr.cur = nil
	return src
}

// errHeld is handleBatch's error when its context ended while the partition was held at a record
// whose identity could not be extracted.
var errHeld = errors.New("consumer: partition held at an identity until the generation ended")

// identify extracts the identity of every record of the batch into st.ids and st.absent, before
// any of them is passed to the Deduper, so that a batch is deduplicated whole or not at all. An
// extraction that fails for a temporary reason (identity.ErrRetry: the schema registry is down)
// holds the partition: it is retried with the retry policy from the record that failed, for as
// long as it takes; the Observer hears IdentityHeld at once, and the worker is not ready once the
// hold lasted Config.IdentityHold. No record is passed as unkeyed meanwhile. It returns errHeld
// when gctx ends first.
func (w *Worker) identify(gctx context.Context, st *partitionState) error {
	n := len(st.in)
	st.ids = slices.Grow(st.ids[:0], n)[:n]
	st.absent = slices.Grow(st.absent[:0], n)[:n]
	st.identified = 0
	var began time.Time // when the hold began; zero while there is none
	unready := false
	err := w.cfg.retry().Retry(gctx, 0, func(int) error {
		err := w.identifyFrom(gctx, st)
		if err == nil || gctx.Err() != nil {
			return err
		}
		if began.IsZero() {
			began = time.Now()
			w.obs.IdentityHeld(st.p, true)
		}
		w.sample.Log(slog.LevelWarn, "identity", "record identity cannot be extracted for now; the partition is held and retried",
			"topic", w.cfg.InputTopic, "partition", st.p, "offset", st.in[st.identified].Offset,
			"held", time.Since(began).Round(time.Millisecond).String(), "error", err.Error())
		if !unready && time.Since(began) >= w.cfg.IdentityHold {
			unready = true
			w.identityHeld.Add(1)
			w.updateReady()
		}
		return err
	})
	if unready {
		w.identityHeld.Add(-1)
		w.updateReady()
	}
	if !began.IsZero() {
		w.obs.IdentityHeld(st.p, false)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errHeld, err)
	}
	return nil
}

// identifyFrom extracts the identities of st.in from st.identified on, and stops at the first
// retry error, which it returns. Under Config.StripRouteHeaders a record's identity is its
// RouteHeaderID header, read without calling the KeyFunc, when it has one.
func (w *Worker) identifyFrom(ctx context.Context, st *partitionState) error {
	for i := st.identified; i < len(st.in); i++ {
		m := &st.in[i]
		if w.cfg.StripRouteHeaders {
			if id := routeID(m.Headers); id != nil {
				st.ids[i], st.absent[i] = id, identity.Found
				st.identified = i + 1
				continue
			}
		}
		st.hdr.cur = m.Headers
		id, absent, err := w.key(ctx, m.Key, m.Value, st.hdrSeq)
		st.hdr.cur = nil
		if err != nil {
			return err
		}
		switch {
		case absent != identity.Found:
			id = nil // JudgeBatch skips nil identities
		case id == nil:
			id = []byte{} // an empty identity is judged, as Judge judged it
		}
		st.ids[i], st.absent[i] = id, absent
		st.identified = i + 1
	}
	return nil
}

// counted counts a record of source src, a duplicate if dup, when the per-source counts are on,
// and returns dup.
func (st *partitionState) counted(src []byte, dup bool) bool {
	if st.src != nil {
		st.src.Record(src, dup)
	}
	return dup
}

// flushSources publishes the batch's per-source counts, when they are on.
func (st *partitionState) flushSources() {
	if st.src != nil {
		st.src.Flush()
	}
}

// produceOut writes out to the output topic, keeping order per output partition.
func (w *Worker) produceOut(pctx context.Context, st *partitionState, out []kafkaio.Record) error {
	if len(out) == 0 {
		return nil
	}
	if st.hash == nil {
		return st.producer(w).Produce(pctx, w.cfg.OutputTopic, int(st.p), out)
	}
	for i := range st.byPart {
		st.byPart[i] = st.byPart[i][:0]
	}
	for i := range out {
		var id []byte
		if st.outIDs != nil {
			id = st.outIDs[i]
		}
		q := st.hash.partition(&out[i], id, int(st.p))
		st.byPart[q] = append(st.byPart[q], out[i])
	}
	return st.producer(w).ProduceParts(pctx, w.cfg.OutputTopic, st.byPart) // all at once; each keeps its order
}

// hashPartitioner places records like the Java client's default partitioner does for keyed
// records: murmur2(key) & 0x7fffffff % n. Records with a null key go to input partition % n,
// which keeps them in input order and spreads them like the input.
type hashPartitioner struct {
	ids []int // 0..n-1, reused for every call
}

func newHashPartitioner(n int) *hashPartitioner {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	return &hashPartitioner{ids: ids}
}

func (h *hashPartitioner) partition(m *kafkaio.Record, _ []byte, input int) int {
	if m.Key == nil {
		return input % len(h.ids)
	}
	return kafkaio.KeyPartition(m.Key, h.ids...)
}

// startOut prepares the batch's output: the identities kept for identity partitioning and the
// arena of the routing headers.
func (w *Worker) startOut(st *partitionState) {
	if st.outIDs != nil {
		st.outIDs = st.outIDs[:0]
	}
	if w.cfg.Route {
		st.route.reset(len(st.in), 0, w.cfg.InputTopic)
	}
}

// emit appends m, whose identity is id (nil: none), to out as the output topic receives it: with
// the routing headers under Config.Route, without them under Config.StripRouteHeaders, else as
// it is.
func (w *Worker) emit(st *partitionState, out []kafkaio.Record, m *kafkaio.Record, id []byte) []kafkaio.Record {
	if st.outIDs != nil {
		st.outIDs = append(st.outIDs, id)
	}
	switch {
	case w.cfg.Route:
		return append(out, st.route.routed(m, w.cfg.InputTopic, st.p, id))
	case w.cfg.StripRouteHeaders:
		return append(out, stripRouteHeaders(*m))
	}
	return append(out, *m)
}

// emitMarked appends m, a duplicate whose identity is id, to out with the mark header, for
// ModeMark.
func (w *Worker) emitMarked(st *partitionState, out []kafkaio.Record, m *kafkaio.Record, id []byte) []kafkaio.Record {
	o := *m
	if w.cfg.StripRouteHeaders {
		o = stripRouteHeaders(o)
	}
	hs := o.Headers
	o.Headers = make([]kafkaio.Header, len(hs), len(hs)+1)
	copy(o.Headers, hs)
	o.Headers = append(o.Headers, kafkaio.Header{Key: w.cfg.MarkHeader, Value: []byte(MarkValue)})
	if st.outIDs != nil {
		st.outIDs = append(st.outIDs, id)
	}
	return append(out, o)
}
