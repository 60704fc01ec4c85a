package kafkaio

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// newTxnProducer returns a started transactional producer of id for cl.
func newTxnProducer(t *testing.T, cl *testCluster, id string) *Producer {
	t.Helper()
	return newTestProducer(t, cl, ProducerConfig{TransactionalID: id})
}

// committedValues returns the values of topic/partition a read_committed consumer reads, up to
// the last stable offset, which must be the high watermark: no transaction may be open.
func committedValues(t *testing.T, cl *testCluster, topic string, partition int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hw, err := ListOffsets(ctx, cl.client, topic, []int{partition})
	if err != nil {
		t.Fatal(err)
	}
	lso, err := StableOffsets(ctx, cl.client, topic, []int{partition}, ReadCommitted)
	if err != nil {
		t.Fatal(err)
	}
	if hw[partition].LastOffset != lso[partition].LastOffset {
		t.Fatalf("a transaction is still open: last stable offset %d, high watermark %d",
			lso[partition].LastOffset, hw[partition].LastOffset)
	}
	var out []string
	err = Read(ctx, cl.client, Range{Topic: topic, Partition: partition, End: lso[partition].LastOffset,
		Isolation: ReadCommitted, Failures: 1}, func(recs []Record) error {
		for _, r := range recs {
			out = append(out, string(r.Value))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// committedOffset returns the offset group committed for topic/partition, -1 for none.
func committedOffset(t *testing.T, cl *testCluster, group, topic string, partition int) int64 {
	t.Helper()
	offs, err := CommittedOffsets(context.Background(), cl.client, group, topic, []int{partition})
	if err != nil {
		t.Fatal(err)
	}
	return offs[partition].Offset
}

// TestTxnCommitAndAbort proves the transaction's records and offsets become visible together on
// Commit, and never on Abort, and that the producer goes on after an Abort. The offsets carry
// the leader epoch given with them (kafka-go's TxnOffsetCommit would send 0).
func TestTxnCommitAndAbort(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 2, "in": 1})
	p := newTxnProducer(t, cl, "txn-commit")
	ctx := context.Background()
	a, b, c := testMsgs("a", 10), testMsgs("b", 5), testMsgs("c", 3)
	step := func(msgs []Record, offset int64, leaderEpoch int32, commit bool) {
		t.Helper()
		if err := p.Begin(); err != nil {
			t.Fatal(err)
		}
		if err := p.ProduceParts(ctx, "out", [][]Record{msgs, msgs[:1]}); err != nil {
			t.Fatal(err)
		}
		if err := p.SendOffsets(ctx, "g", "in", map[int]Committed{0: {Offset: offset, LeaderEpoch: leaderEpoch}}); err != nil {
			t.Fatal(err)
		}
		end := p.Commit
		if !commit {
			end = p.Abort
		}
		if err := end(ctx); err != nil {
			t.Fatal(err)
		}
	}
	step(a, 10, -1, true)
	epoch := p.ids.current().epoch
	step(b, 15, 7, false)
	if e := p.ids.current().epoch; e <= epoch {
		t.Errorf("Abort kept epoch %d, want a newer one than %d", e, epoch)
	}
	if got := committedOffset(t, cl, "g", "in", 0); got != 10 {
		t.Errorf("after the abort the committed offset is %d, want 10", got)
	}
	step(c, 18, 4, true)
	equalStrings(t, "read_committed partition 0", committedValues(t, cl, "out", 0), valuesOf(a, c))
	equalStrings(t, "read_committed partition 1", committedValues(t, cl, "out", 1), valuesOf(a[:1], c[:1]))
	got, err := CommittedOffsets(ctx, cl.client, "g", "in", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Committed{Offset: 18, LeaderEpoch: 4}); got[0] != want {
		t.Errorf("committed %+v, want %+v", got[0], want)
	}
}

// TestTxnZombieFenced proves that a producer whose transactional id a new producer took over
// (InitProducerId) can no longer append or commit: its open transaction is aborted, its next
// produce and its commit fail with ErrFenced, and a read_committed consumer sees only the new
// producer's records.
func TestTxnZombieFenced(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 1, "in": 1})
	ctx := context.Background()
	zombie := newTxnProducer(t, cl, "txn-p0")
	if err := zombie.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := zombie.Produce(ctx, "out", 0, testMsgs("zombie-open", 4)); err != nil {
		t.Fatal(err)
	}
	owner := newTxnProducer(t, cl, "txn-p0") // fences the zombie, aborts its transaction
	mine := testMsgs("owner", 3)
	if err := owner.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := owner.Produce(ctx, "out", 0, mine); err != nil {
		t.Fatal(err)
	}

	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := zombie.Produce(tctx, "out", 0, testMsgs("zombie-late", 2)); !errors.Is(err, ErrFenced) {
		t.Fatalf("zombie produce after the fence: %v, want ErrFenced", err)
	}
	if err := zombie.SendOffsets(tctx, "g", "in", map[int]Committed{0: {Offset: 99, LeaderEpoch: -1}}); !errors.Is(err, ErrFenced) {
		t.Errorf("zombie SendOffsets: %v, want ErrFenced", err)
	}
	if err := zombie.Commit(tctx); !errors.Is(err, ErrFenced) {
		t.Errorf("zombie Commit: %v, want ErrFenced", err)
	}
	if err := zombie.Begin(); !errors.Is(err, ErrFenced) {
		t.Errorf("zombie Begin: %v, want ErrFenced", err)
	}
	if err := owner.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	equalStrings(t, "read_committed", committedValues(t, cl, "out", 0), valuesOf(mine))
	if got := committedOffset(t, cl, "g", "in", 0); got != -1 {
		t.Errorf("the zombie committed offset %d", got)
	}
}

// TestTxnCrashLeavesNothing proves a crash in the middle of a transaction (the producer is
// dropped without Commit or Abort, as kill -9 leaves it) shows nothing to a read_committed
// consumer once the next owner started, and holds it at the last stable offset until then.
func TestTxnCrashLeavesNothing(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 1, "in": 1})
	ctx := context.Background()
	before := testMsgs("before", 3)
	crashed := newTxnProducer(t, cl, "txn-crash")
	if err := crashed.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := crashed.Produce(ctx, "out", 0, before); err != nil {
		t.Fatal(err)
	}
	if err := crashed.SendOffsets(ctx, "g", "in", map[int]Committed{0: {Offset: 3, LeaderEpoch: -1}}); err != nil {
		t.Fatal(err)
	}
	if err := crashed.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := crashed.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := crashed.Produce(ctx, "out", 0, testMsgs("partial", 50)); err != nil {
		t.Fatal(err)
	}
	if err := crashed.SendOffsets(ctx, "g", "in", map[int]Committed{0: {Offset: 53, LeaderEpoch: -1}}); err != nil {
		t.Fatal(err)
	}
	lso, err := StableOffsets(ctx, cl.client, "out", []int{0}, ReadCommitted)
	if err != nil || lso[0].LastOffset != 4 { // 3 records and a commit marker
		t.Fatalf("last stable offset during the open transaction: %v %v, want 4", lso[0].LastOffset, err)
	}
	newTxnProducer(t, cl, "txn-crash") // the next owner
	equalStrings(t, "read_committed", committedValues(t, cl, "out", 0), valuesOf(before))
	if got := committedOffset(t, cl, "g", "in", 0); got != 3 {
		t.Errorf("committed offset %d, want 3", got)
	}
}

// TestTxnCoordinatorRetries proves the coordinator answers retrying can fix are retried under
// the retry policy: CONCURRENT_TRANSACTIONS, NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE on
// InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn.
func TestTxnCoordinatorRetries(t *testing.T) {
	t.Parallel()
	for _, e := range []*kerr.Error{kerr.ConcurrentTransactions, kerr.NotCoordinator, kerr.CoordinatorNotAvailable} {
		t.Run(e.Message, func(t *testing.T) {
			t.Parallel()
			cl := startCluster(t, map[string]int32{"out": 1, "in": 1}, kfake.NumBrokers(3))
			keys := []kmsg.Key{kmsg.InitProducerID, kmsg.AddPartitionsToTxn, kmsg.AddOffsetsToTxn, kmsg.TxnOffsetCommit, kmsg.EndTxn}
			cl.Fault(kfake.Fault{Keys: keys, Err: e, TopLevel: true, Count: 2 * len(keys)})
			p := newTxnProducer(t, cl, "txn-retry")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			msgs := testMsgs("m", 5)
			if err := p.Begin(); err != nil {
				t.Fatal(err)
			}
			if err := p.Produce(ctx, "out", 0, msgs); err != nil {
				t.Fatal(err)
			}
			if err := p.SendOffsets(ctx, "g", "in", map[int]Committed{0: {Offset: 5, LeaderEpoch: -1}}); err != nil {
				t.Fatal(err)
			}
			if err := p.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			equalStrings(t, "read_committed", committedValues(t, cl, "out", 0), valuesOf(msgs))
			if got := committedOffset(t, cl, "g", "in", 0); got != 5 {
				t.Errorf("committed offset %d, want 5", got)
			}
		})
	}
}

// TestTxnProduceNeedsBegin proves a transactional producer writes nothing outside a transaction.
func TestTxnProduceNeedsBegin(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 1})
	p := newTxnProducer(t, cl, "txn-nobegin")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Produce(ctx, "out", 0, testMsgs("x", 1)); !errors.Is(err, ErrNoTransaction) {
		t.Fatalf("produce outside a transaction: %v, want ErrNoTransaction", err)
	}
	if got := values(t, cl, "out", 0); len(got) != 0 {
		t.Errorf("written: %q", got)
	}
}

// TestTxnProduceErrors proves how a transactional produce treats the broker's producer state
// errors: INVALID_PRODUCER_EPOCH and PRODUCER_FENCED fence the producer for good, and
// OUT_OF_ORDER_SEQUENCE_NUMBER and UNKNOWN_PRODUCER_ID make the transaction abortable (no new
// producer id in the middle of a transaction); after the abort the producer goes on.
func TestTxnProduceErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    *kerr.Error
		fenced bool
	}{
		{kerr.InvalidProducerEpoch, true},
		{kerr.ProducerFenced, true},
		{kerr.OutOfOrderSequenceNumber, false},
		{kerr.UnknownProducerID, false},
	} {
		t.Run(tc.err.Message, func(t *testing.T) {
			t.Parallel()
			cl := startCluster(t, map[string]int32{"out": 1})
			p := newTxnProducer(t, cl, "txn-errors")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := p.Begin(); err != nil {
				t.Fatal(err)
			}
			cl.Fault(produceFault("out", tc.err, 1))
			err := p.Produce(ctx, "out", 0, testMsgs("x", 3))
			if tc.fenced {
				if !errors.Is(err, ErrFenced) || p.Fenced() == nil {
					t.Fatalf("produce: %v, want ErrFenced", err)
				}
				if err := p.Abort(ctx); !errors.Is(err, ErrFenced) {
					t.Errorf("Abort after the fence: %v, want ErrFenced", err)
				}
				return
			}
			if !errors.Is(err, ErrTxnAbortable) || p.Fenced() != nil {
				t.Fatalf("produce: %v, want ErrTxnAbortable", err)
			}
			if err := p.Abort(ctx); err != nil {
				t.Fatal(err)
			}
			ok := testMsgs("ok", 2)
			if err := p.Begin(); err != nil {
				t.Fatal(err)
			}
			if err := p.Produce(ctx, "out", 0, ok); err != nil {
				t.Fatal(err)
			}
			if err := p.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			equalStrings(t, "read_committed", committedValues(t, cl, "out", 0), valuesOf(ok))
		})
	}
}

// TestLegacyTxnCommitEpochIgnored proves that an offset committed the way earlier versions did
// under exactly-once (kafka-go's TxnOffsetCommit, which stores leader epoch 0 whatever the
// record's) reads back with epoch -1, so the partition's next owner does not take a leader
// election since for a truncation to the end of epoch 0.
func TestLegacyTxnCommitEpochIgnored(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"in": 1})
	p := newTxnProducer(t, cl, "txn-legacy")
	ctx := context.Background()
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	id := p.ids.current()
	if _, err := p.client.AddOffsetsToTxn(ctx, &kafka.AddOffsetsToTxnRequest{
		TransactionalID: p.txn.id, ProducerID: int(id.id), ProducerEpoch: int(id.epoch), GroupID: "g"}); err != nil {
		t.Fatal(err)
	}
	p.txn.groups["g"] = true
	res, err := p.client.TxnOffsetCommit(ctx, &kafka.TxnOffsetCommitRequest{
		TransactionalID: p.txn.id, GroupID: "g", ProducerID: int(id.id), ProducerEpoch: int(id.epoch),
		GenerationID: -1, Topics: map[string][]kafka.TxnOffsetCommit{"in": {{Partition: 0, Offset: 9}}}})
	if err == nil && res.Topics["in"][0].Error != nil {
		err = res.Topics["in"][0].Error
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := CommittedOffsets(ctx, cl.client, "g", "in", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Committed{Offset: 9, LeaderEpoch: -1}); got[0] != want {
		t.Errorf("committed %+v, want %+v", got[0], want)
	}
}
