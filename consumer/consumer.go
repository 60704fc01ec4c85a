// Package consumer is kdedup's Kafka plumbing: it consumes the input topic as a member of a
// consumer group, asks a Deduper whether each record's identity was already seen, produces the
// survivors (or every record, marked, in mark mode) to the output topic in input order, and commits
// input offsets only after the output write was acknowledged (at-least-once delivery).
//
// One goroutine runs per assigned partition. Every output batch is produced with one request per
// output partition and acknowledged by all in-sync replicas before the batch's input offsets are
// handed to the single committer goroutine of the consumer group generation.
//
// The group assigns partitions with kafkaio.StickyBalancer, which keeps partitions with the members
// that consumed them in the previous generation (so a member joining or leaving moves about 1/K of
// the partitions), and falls back to range in a group with members that do not offer it.
// Rebalances stay eager: every partition is revoked at the end of a generation, and the member
// keeps heartbeating (Worker.groupHeartbeats) while it releases them.
//
// With Config.Delivery DeliveryExactlyOnce, the output and the input offsets are written in Kafka
// transactions instead, one transactional producer per input partition that fences the partition's
// previous owner before its state is assigned (see txn.go).
//
// Records are produced by kafkaio.Producer, idempotently unless Config.DisableIdempotence is set:
// the worker takes a producer id from the brokers, and each output partition's batches carry
// consecutive sequence numbers, one batch in flight at a time, so a retried batch that the broker
// already appended is not appended again (see kafkaio.Producer for the protocol and its one
// residual case). Every Kafka byte is encoded and decoded in internal/kafkaio; this package
// decides what is read, produced and committed, and when.
//
// An OutputReader reads the output topic back for the deduplication state's crash-consistent
// snapshots: where it ends before a snapshot, and what was produced after one (see
// Deduper.Processing and Deduper.Acked for the Worker's side of that protocol).
//
// The package never reads environment variables; internal/app builds a Config from them.
package consumer

import (
	"context"
	"time"

	"github.com/kdedup/kdedup/identity"
)

// Deduper decides duplicates and follows the partitions of the worker; dedup.Set implements it.
//
// The Worker calls Generation at the start of every consumer group generation, Assign for a
// partition before it consumes the partition, Processing and Acked around every batch, and Revoke
// (or Discard) after it stopped consuming the partition. Seen is called from one goroutine per
// assigned partition, concurrently across partitions; Assign, Processing, Acked and Revoke or
// Discard for one partition are called on that partition's goroutine and never overlap each other
// or Seen for the same partition.
type Deduper interface {
	// Generation is called at the start of every consumer group generation, before any Assign of
	// that generation, with the generation's id (kafka-go's Generation.ID: per group, increasing
	// at the coordinator) and the input partitions the generation gives this worker, in
	// ascending order (none for a member without partitions). Under an eager rebalance
	// (Config.GroupProtocol GroupEager, or a group that fell back to it) every partition of the
	// previous generation was revoked or discarded before, so a partition that stays with the
	// worker is revoked and assigned again: a Deduper that keeps a revoked partition's state in
	// memory in case it comes back drops the state of the partitions that did not. Under a
	// cooperative one, the partitions that stay are not revoked: they keep being consumed, with
	// no new Assign, and are listed again; those the generation takes away are revoked after the
	// call (their final saves check the new owns), and only the new ones are assigned. owns
	// returns nil while the worker still owns the generation's partitions, and an error wrapping
	// ErrNotOwner once the generation was lost involuntarily (a session expiry, ILLEGAL_GENERATION,
	// UNKNOWN_MEMBER_ID) or another error when that cannot be confirmed now: a Deduper calls it
	// right before it saves a partition's state, and saves nothing when it fails, because the
	// partition's next owner may have moved on. owns may block for one request to the
	// coordinator and is safe for concurrent use. Generation must return quickly.
	Generation(id int32, partitions []int32, owns func(context.Context) error)
	// Assign prepares state for a newly assigned partition (it may restore a checkpoint).
	// An error makes the Worker log it and retry with backoff; the partition is not consumed
	// until Assign succeeds.
	Assign(ctx context.Context, partition int32) error
	// Seen tests and adds id: true means id was already seen (a duplicate). ts is the record's
	// Kafka timestamp (the output record keeps it), for a Deduper whose window follows event time;
	// others ignore it. It must be safe for concurrent use.
	Seen(partition int32, id []byte, ts time.Time) bool
	// Processing says that the records of partition below nextOffset are about to be passed to
	// Seen. It is called right before the records of a batch are, with nextOffset strictly
	// increasing within one assignment, except that Rewind moves it back. It must be cheap.
	Processing(partition int32, nextOffset int64)
	// Rewind says that the input offset of partition moved backward to nextOffset: an offset
	// reset (the log was truncated under the reader by an unclean leader election, or the topic
	// was re-created) makes the worker read again from below the last Processing offset. It is
	// called before the Processing of the first batch after the reset; Processing's offsets
	// increase again from nextOffset on, and every record below nextOffset counts as
	// acknowledged, so that a snapshot claims no offset past what the worker commits. The
	// Deduper keeps the identities it holds and treats the re-read records as a re-warm does: an
	// identity it holds is that of a record the output topic already got within the window, so
	// a re-read record that carries it is a duplicate of written output (dropping it loses no
	// event), and a record that the truncation replaced carries an identity of its own and
	// passes. Forgetting the identities instead would let every re-read record through again: a
	// leaked duplicate for each. It must be cheap.
	Rewind(partition int32, nextOffset int64)
	// Acked says that every record of partition below nextOffset was acknowledged by the output
	// topic (and by the duplicates topic, if one is configured), or was dropped. Acked(p, next)
	// always follows Processing(p, next) and, under DeliveryAtLeastOnce, comes before the next
	// Processing of p; a batch whose
	// output writes fail when the partition must be given up gets no Acked, and the partition is
	// discarded. Between Processing and Acked the partition's state holds identities whose records
	// may not have reached the output topic yet, so a crash-consistent snapshot taken concurrently
	// with processing must wait for Acked to catch up with Processing before it is made durable.
	// Under DeliveryExactlyOnce, Acked follows the commit of the transaction that holds the records,
	// so one Acked may cover several batches' Processing calls. It must be cheap.
	Acked(partition int32, nextOffset int64)
	// Revoke is called when the partition was taken away (it may snapshot). The state of the
	// partition is dropped after. A worker whose generation was lost calls Discard instead. Every record passed to Seen for this partition has been
	// produced and acknowledged when Revoke is called, and Acked was called for its last batch.
	Revoke(ctx context.Context, partition int32) error
	// Discard is called instead of Revoke when the Worker has to give up a partition while some
	// records it passed to Seen were not acknowledged by the output topic (the drain at the end
	// of a generation ran out of time, for example because the brokers are down): the state must
	// be dropped without being snapshotted, because a snapshot would make the next owner drop
	// those records as duplicates although they never reached the output topic. The Worker also
	// calls it when the partition blocks at a record the output refuses (see Worker.Blocked),
	// and calls Assign again if the block lifts.
	Discard(ctx context.Context, partition int32) error
}

// KeyFunc extracts the deduplication identity of a record from its key, value and headers: an
// identity (absent == identity.Found), the permanent reason the record has none, or an error
// wrapping identity.ErrRetry after which the Worker holds the partition and tries again.
// identity.Extractor.Extract has this shape.
//
// The headers iterator is only valid during the call. The returned id is used until the batch's
// records were passed to Deduper.Seen, so it may alias key, value or headers, but not a buffer
// reused by the next call. A KeyFunc is called concurrently from one goroutine per partition and
// must be safe for that.
type KeyFunc = identity.Func

// SourceTally counts the records of one partition goroutine by source (metrics.SourceTally
// implements it). Record is called for every record consumed, Flush after every batch; one tally is
// never used by two goroutines at once.
type SourceTally interface {
	// Record counts one record of source src (empty: the record has none), a duplicate if dup. src
	// is only valid during the call.
	Record(src []byte, dup bool)
	// Flush publishes what was recorded since the last Flush.
	Flush()
}

// Observer receives the Worker's measurements; metrics.Metrics implements it. Every method must be
// safe for concurrent use and cheap: Consumed, Produced, Duplicates, Unkeyed, Aborted and Latency
// are called on the record path, TransactionHeld and Progress after every fetch. It includes the produce
// path's kafkaio.ProduceObserver (ProduceError, ProducerReset, UncertainRetry).
type Observer interface {
	// Consumed counts n records read from the input partition.
	Consumed(partition int32, n int)
	// Produced counts n records of the input partition acknowledged by the output topic.
	Produced(partition int32, n int)
	// Duplicates counts n records of the input partition recognised as duplicates.
	Duplicates(partition int32, n int)
	// Unkeyed counts n records of the input partition without an extractable key, for reason (one
	// of identity.Reasons).
	Unkeyed(partition int32, reason string, n int)
	// IdentityHeld reports that the input partition is held at a record whose identity could not
	// be extracted for a temporary reason (the schema registry is down), with held true, and that
	// it no longer is, with held false.
	IdentityHeld(partition int32, held bool)
	// Aborted counts n records of aborted transactions skipped in the input partition (under
	// kafkaio.ReadCommitted): they are neither passed to the Deduper nor produced.
	Aborted(partition int32, n int)
	// ProduceError counts one failed produce attempt.
	ProduceError()
	// ProducerReset counts one output batch re-sent under a new producer id after the brokers
	// rejected its producer state (reason is one of kafkaio's Reset* constants). Only such a batch
	// can be written twice with idempotent production; see kafkaio.Producer.
	ProducerReset(reason string)
	// UncertainRetry counts one produce retry of a batch whose previous attempt may have been
	// written. With idempotent production the broker drops the copy; without it each one can be
	// a duplicate in the output.
	UncertainRetry()
	// CommitError counts one failed offset commit.
	CommitError()
	// AssignRetry counts one failed attempt of Deduper.Assign, which the Worker logs and retries
	// (the partition is not consumed and the Worker is not ready meanwhile).
	AssignRetry()
	// ConnectionRetry counts one retried connection failure that would be fatal on the first
	// connection (an authentication, TLS or authorization failure) or that a throttling broker
	// caused; reason is one of RetryReasons.
	ConnectionRetry(reason string)
	// DeadLetter counts one record of the input partition that the output (or duplicates) topic
	// refused and that was written to Config.DeadLetterTopic; reason is one of
	// kafkaio.RefusalReasons.
	DeadLetter(partition int32, reason string)
	// Diverted counts n records of the input partition dropped for reason (one of DropReasons)
	// and written to the audit topic (Config.DuplicatesTopic), counted once their writes were
	// acknowledged (a record the audit topic refused was dead-lettered instead).
	Diverted(partition int32, reason string, n int)
	// AuditProduceError counts one write to the audit topic that failed: refused records (which
	// are then dead-lettered or block the partition) or a write cut short; the produce path's own
	// retries are counted by ProduceError.
	AuditProduceError()
	// PartitionBlocked reports that the input partition blocked at a record that was refused
	// for reason (one of kafkaio.RefusalReasons), with blocked true, and that it no longer is,
	// with blocked false and the same reason: the block lifted, or the partition was released.
	PartitionBlocked(partition int32, reason string, blocked bool)
	// Latency observes the produced records of a batch, measured when the output write was
	// acknowledged: the time since the batch was consumed, once for each record, and the time
	// since each record's Kafka timestamp (sinceRecordTimestamps: one per record; a record without
	// a timestamp is left out of both). One call per batch, not per record, so that observing
	// costs a lock per batch; sinceRecordTimestamps is only valid during the call.
	Latency(sinceConsume time.Duration, sinceRecordTimestamps []time.Duration)
	// Progress reports the input partition's progress (see Progress): after every fetch and every
	// handled batch, and every Config.ProgressInterval while the partition's records are not taken
	// (blocked at a refused record, or its writes hang). It is called on the partition's fetch
	// goroutine or on its processing goroutine.
	Progress(partition int32, p Progress)
	// FetchError counts one failed fetch (or offset lookup) of the input partition; the worker
	// retries by itself. It is called on the partition's fetch goroutine.
	FetchError(partition int32)
	// InputSkipped counts n records of the input partition that were never read, for reason (one
	// of kafkaio.SkipReasons): retention deleted them first, or a reset to the end of a
	// recreated topic passed them. They are neither deduplicated nor produced: lost.
	InputSkipped(partition int32, reason string, n int64)
	// InputReread counts n offsets of the input partition that the worker reads again, for
	// reason (one of kafkaio.RereadReasons): the log was truncated under the reader by an unclean
	// leader election, or the topic was re-created. The records there are deduplicated against
	// what the filter holds (see Deduper.Rewind). It is called on the partition's fetch
	// goroutine.
	InputReread(partition int32, reason string, n int64)
	// TransactionHeld reports, after every fetch of the partition, for how long reading it has
	// been held at its last stable offset by a transaction left open (0: it is not). It is called
	// on the partition's fetch goroutine.
	TransactionHeld(partition int32, d time.Duration)
	// Rebalance counts one new consumer group generation.
	Rebalance()
	// Assigned reports the number of input partitions assigned to this worker.
	Assigned(partitions int)
	// SetReady is called whenever the Worker's readiness (see Worker.Ready) changes.
	SetReady(ready bool)
	// Released is called once for every partition the Worker gives up, at the end of a generation
	// or at shutdown, with the time from the end of the generation until the partition's output
	// was produced, its offsets committed and its state revoked (snapshot saved) or discarded. The
	// Worker allows a release Config.RebalanceTimeout less the heartbeat interval and a margin
	// (see Config.RebalanceTimeout); a release that takes longer is cut short.
	Released(d time.Duration)
}

// NopObserver is an Observer that discards everything. Its zero value is ready to use and it is
// safe for concurrent use.
type NopObserver struct{}

// Consumed does nothing.
func (NopObserver) Consumed(int32, int) {}

// Produced does nothing.
func (NopObserver) Produced(int32, int) {}

// Duplicates does nothing.
func (NopObserver) Duplicates(int32, int) {}

// Unkeyed does nothing.
func (NopObserver) Unkeyed(int32, string, int) {}

// IdentityHeld does nothing.
func (NopObserver) IdentityHeld(int32, bool) {}

// Aborted does nothing.
func (NopObserver) Aborted(int32, int) {}

// TransactionHeld does nothing.
func (NopObserver) TransactionHeld(int32, time.Duration) {}

// ProduceError does nothing.
func (NopObserver) ProduceError() {}

// ProducerReset does nothing.
func (NopObserver) ProducerReset(string) {}

// UncertainRetry does nothing.
func (NopObserver) UncertainRetry() {}

// CommitError does nothing.
func (NopObserver) CommitError() {}

// AssignRetry does nothing.
func (NopObserver) AssignRetry() {}

// ConnectionRetry does nothing.
func (NopObserver) ConnectionRetry(string) {}

// DeadLetter does nothing.
func (NopObserver) DeadLetter(int32, string) {}

// Diverted does nothing.
func (NopObserver) Diverted(int32, string, int) {}

// AuditProduceError does nothing.
func (NopObserver) AuditProduceError() {}

// PartitionBlocked does nothing.
func (NopObserver) PartitionBlocked(int32, string, bool) {}

// Latency does nothing.
func (NopObserver) Latency(time.Duration, []time.Duration) {}

// Progress does nothing.
func (NopObserver) Progress(int32, Progress) {}

// FetchError does nothing.
func (NopObserver) FetchError(int32) {}

// InputSkipped does nothing.
func (NopObserver) InputSkipped(int32, string, int64) {}

// InputReread does nothing.
func (NopObserver) InputReread(int32, string, int64) {}

// Rebalance does nothing.
func (NopObserver) Rebalance() {}

// Assigned does nothing.
func (NopObserver) Assigned(int) {}

// SetReady does nothing.
func (NopObserver) SetReady(bool) {}

// Released does nothing.
func (NopObserver) Released(time.Duration) {}
