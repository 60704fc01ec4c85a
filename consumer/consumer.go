// Package consumer is kdedup's Kafka plumbing: it consumes the input topic as a member of a
// consumer group, asks a Deduper whether each record's identity was already seen, produces the
// survivors (or every record, marked, in mark mode) to the output topic in input order, and commits
// input offsets only after the output write was acknowledged (at-least-once delivery).
//
// One goroutine runs per assigned partition. Every output batch is produced with one request per
// output partition and acknowledged by all in-sync replicas before the batch's input offsets are
// handed to the single committer goroutine of the consumer group generation.
//
// The group assigns partitions with StickyBalancer, which keeps partitions with the members that
// consumed them in the previous generation (so a member joining or leaving moves about 1/K of the
// partitions), and falls back to range in a group with members that do not offer it. Rebalances
// stay eager: every partition is revoked at the end of a generation.
//
// Production is idempotent unless Config.DisableIdempotence is set: the worker takes a producer
// id from the brokers, and each output partition's batches carry consecutive sequence numbers,
// one batch in flight at a time, so a retried batch that the broker already appended is not
// appended again (see idempotent.go and sequencer.go for the protocol and its one residual case).
//
// An OutputReader reads the output topic back for the deduplication state's crash-consistent
// snapshots: where it ends before a snapshot, and what was produced after one (see
// ProgressTracker for the Worker's side of that protocol).
//
// The package never reads environment variables; cmd/kdedup builds a Config from them.
package consumer

import (
	"context"
	"time"
)

// Deduper decides duplicates. dedup.Set implements it, together with the optional Discarder and
// ProgressTracker interfaces.
//
// The Worker calls Assign for a partition before it consumes the partition and Revoke after it
// stopped consuming it, committed its offsets and produced every record it passed to Seen. Seen is
// called from one goroutine per assigned partition, concurrently across partitions; Assign and
// Revoke for one partition never overlap each other or Seen for the same partition.
type Deduper interface {
	// Assign prepares state for a newly assigned partition (it may restore a checkpoint).
	// An error makes the Worker log it and retry with backoff; the partition is not consumed
	// until Assign succeeds.
	Assign(ctx context.Context, partition int32) error
	// Revoke is called when the partition was taken away (it may snapshot). The state of the
	// partition is dropped after. Every record passed to Seen for this partition has been
	// produced and acknowledged when Revoke is called (and, for a ProgressTracker, Acked was
	// called for its last batch), unless the Deduper implements Discarder.
	Revoke(ctx context.Context, partition int32) error
	// Seen tests and adds id: true means id was already seen (a duplicate). ts is the record's
	// Kafka timestamp (the output record keeps it), for a Deduper whose window follows event time;
	// others ignore it. It must be safe for concurrent use.
	Seen(partition int32, id []byte, ts time.Time) bool
}

// Discarder is an optional interface of a Deduper. When the Worker has to give up a partition
// while some records it passed to Seen were not acknowledged by the output topic (the drain at the
// end of a generation ran out of time, for example because the brokers are down), it calls
// Discard instead of Revoke: the state must be dropped without being snapshotted, because a
// snapshot would make the next owner drop those records as duplicates although they never
// reached the output topic. A Deduper that does not implement Discarder gets Revoke instead.
type Discarder interface {
	Discard(ctx context.Context, partition int32) error
}

// GenerationTracker is an optional interface of a Deduper (dedup.Set implements it). At the start
// of every consumer group generation, before any Assign of that generation, the Worker calls
// Generation with the input partitions the generation gives this worker, in ascending order (none
// for a member without partitions). Every partition of the previous generation was revoked or
// discarded before. Rebalances are eager, so a partition that stays with the worker is revoked and
// assigned again: a Deduper that keeps a revoked partition's state in memory in case it comes back
// drops the state of the partitions that did not. Generation must return quickly.
type GenerationTracker interface {
	Generation(partitions []int32)
}

// ProgressTracker is an optional interface of a Deduper (dedup.Set implements it), for
// crash-consistent snapshots taken concurrently with processing. For every batch of a partition,
// the partition's goroutine calls Processing(p, next) right before it passes the batch's records
// (input offsets below next) to Seen, and Acked(p, next) once every record of that batch was
// acknowledged by the output topic (and by the duplicates topic, if one is configured) or was
// dropped. Both calls happen on the partition's goroutine, between Assign and Revoke (or Discard)
// of the partition, with next strictly increasing within one assignment; Acked(p, next) always
// follows Processing(p, next) and comes before the next Processing of p.
//
// A batch whose output writes fail when the partition must be given up gets Processing but no
// Acked; the Worker then calls Discard (see Discarder) instead of Revoke. Between Processing and
// Acked the partition's state holds identities whose records may not have reached the output
// topic yet, so a snapshot must wait for Acked to catch up with Processing before it is made
// durable. Both methods are called once per batch and must be cheap.
type ProgressTracker interface {
	// Processing says that the records of partition below nextOffset are about to be passed to Seen.
	Processing(partition int32, nextOffset int64)
	// Acked says that every record of partition below nextOffset was acknowledged by the output
	// topic, or was dropped.
	Acked(partition int32, nextOffset int64)
}

// KeyFunc extracts the deduplication identity of a record from its key, value and headers;
// ok=false means the record has no extractable key. dedup.KeySpec.Extract has this shape.
//
// The headers iterator is only valid during the call. The returned id is only used during the
// call to Deduper.Seen that follows, so it may alias key, value or a reused buffer. A KeyFunc is
// called concurrently from one goroutine per partition and must be safe for that.
type KeyFunc func(key, value []byte, headers func(yield func(name string, value []byte) bool)) (id []byte, ok bool)

// Observer receives the Worker's measurements; metrics.Metrics implements it. Every method must be
// safe for concurrent use and cheap: Consumed, Produced, Duplicates, Unkeyed, Lag and Latency are
// called on the record path.
type Observer interface {
	// Consumed counts n records read from the input partition.
	Consumed(partition int32, n int)
	// Produced counts n records of the input partition acknowledged by the output topic.
	Produced(partition int32, n int)
	// Duplicates counts n records of the input partition recognised as duplicates.
	Duplicates(partition int32, n int)
	// Unkeyed counts n records of the input partition without an extractable key.
	Unkeyed(partition int32, n int)
	// ProduceError counts one failed produce attempt.
	ProduceError()
	// CommitError counts one failed offset commit.
	CommitError()
	// Latency observes one produced record: time since its Kafka timestamp and since its batch
	// was consumed, both measured when the output write was acknowledged.
	Latency(sinceRecordTimestamp, sinceConsume time.Duration)
	// Lag reports the number of records behind the partition's high watermark.
	Lag(partition int32, lag int64)
	// Rebalance counts one new consumer group generation.
	Rebalance()
	// Assigned reports the number of input partitions assigned to this worker.
	Assigned(partitions int)
}

// ReadyObserver is an optional interface of an Observer (metrics.Metrics implements it): the
// Worker calls SetReady whenever its readiness changes.
type ReadyObserver interface {
	SetReady(ready bool)
}

// ReleaseObserver is an optional interface of an Observer (metrics.Metrics implements it). The
// Worker calls Released once for every partition it gives up, at the end of a generation or at
// shutdown, with the time from the end of the generation until the partition's output was
// produced, its offsets committed and its state revoked (snapshot saved) or discarded. The Worker
// allows a release Config.RebalanceTimeout less the heartbeat interval and a margin (see
// Config.RebalanceTimeout); a release that takes longer is cut short.
type ReleaseObserver interface {
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
func (NopObserver) Unkeyed(int32, int) {}

// ProduceError does nothing.
func (NopObserver) ProduceError() {}

// CommitError does nothing.
func (NopObserver) CommitError() {}

// Latency does nothing.
func (NopObserver) Latency(time.Duration, time.Duration) {}

// Lag does nothing.
func (NopObserver) Lag(int32, int64) {}

// Rebalance does nothing.
func (NopObserver) Rebalance() {}

// Assigned does nothing.
func (NopObserver) Assigned(int) {}
