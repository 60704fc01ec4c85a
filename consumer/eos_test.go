package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// eosConfig returns e's Worker config in exactly-once delivery.
func (e *env) eosConfig() consumer.Config {
	cfg := e.config()
	cfg.Delivery = consumer.DeliveryExactlyOnce
	cfg.TxnInterval = 50 * time.Millisecond
	cfg.TxnMaxRecords = 300
	return cfg
}

// TestExactlyOnce proves exactly-once delivery end to end, with hash partitioning (every output
// partition written by the transactions of several input partitions) and a duplicates topic in
// the same transactions: a read_committed reader of the output sees the first occurrence of every
// identity once, in input order per input partition, and every input offset is committed.
func TestExactlyOnce(t *testing.T) {
	t.Parallel()
	for _, part := range []consumer.Partitioning{consumer.PartitionSame, consumer.PartitionHash} {
		t.Run(string(part), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 3, 3, embedkafka.Options{Topics: map[string]int32{"dups": 1}})
			rng := rand.New(rand.NewPCG(3, 4))
			wantIDs, wantDups := map[string]bool{}, 0
			for p := range 3 {
				in, want := stream("key", p, 700, rng)
				e.produce(p, in)
				for _, m := range want {
					wantIDs[string(m.Key)] = true
				}
				wantDups += len(in) - len(want)
			}
			cfg := e.eosConfig()
			cfg.Partitioning = part
			cfg.DuplicatesTopic = "dups"
			d := newMapDeduper(false, nil)
			r := e.start(cfg, d, keyFuncFor(t, "key"))
			e.waitAllCommitted(30 * time.Second)
			if err := r.stop(t, 15*time.Second); err != nil {
				t.Fatal(err)
			}
			d.check(t)
			got := map[string]int{}
			for _, msgs := range e.readOut("out") {
				for _, m := range msgs {
					got[string(m.Key)]++
				}
			}
			for id := range wantIDs {
				if got[id] != 1 {
					t.Errorf("identity %s: %d times in the output, want once", id, got[id])
				}
			}
			if len(got) != len(wantIDs) {
				t.Errorf("output holds %d identities, want %d", len(got), len(wantIDs))
			}
			if n := len(e.readOut("dups")[0]); n != wantDups {
				t.Errorf("duplicates topic holds %d records, want %d", n, wantDups)
			}
		})
	}
}

// fenceDeduper wraps a Deduper and calls afterAssign once, right after the first Assign of
// partition 0 returned: the moment the new owner finished its re-warm read.
type fenceDeduper struct {
	consumer.Deduper
	once        sync.Once
	afterAssign func()
}

func (d *fenceDeduper) Assign(ctx context.Context, p int32) error {
	err := d.Deduper.Assign(ctx, p)
	if err == nil && p == 0 {
		d.once.Do(d.afterAssign)
	}
	return err
}

// TestExactlyOnceFencesPreviousOwner proves that the previous owner of a partition can add
// nothing to the output once the new owner started: the previous owner (a producer with the
// partition's transactional id) wrote the first 100 records of the input in a transaction it
// never committed, and tries to write them again, and to commit, right after the new owner's
// re-warm read. The new owner's fence aborted the open transaction and the late attempt fails
// with kafkaio.ErrFenced, so a read_committed reader sees every record exactly once: the new
// owner's.
func TestExactlyOnceFencesPreviousOwner(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1, embedkafka.Options{})
	rng := rand.New(rand.NewPCG(5, 6))
	in, want := stream("key", 0, 300, rng)
	e.produce(0, in)

	client := kafkaio.Conn{Brokers: e.cl.Addrs()}.Client(3 * time.Second)
	zombie := kafkaio.NewProducer(client, kafkaio.ProducerConfig{
		TransactionalID: consumer.TransactionalID(e.group, e.in, 0), Backoff: kafkaio.Backoff{Max: 100 * time.Millisecond},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := zombie.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := zombie.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := zombie.Produce(ctx, e.out, 0, want[:100]); err != nil {
		t.Fatal(err)
	}

	var produceErr, commitErr error
	fd := &fenceDeduper{Deduper: newMapDeduper(false, nil), afterAssign: func() {
		// The broker refuses the append for the fenced epoch (kfake checks the transaction
		// first and answers INVALID_TXN_STATE; Kafka answers PRODUCER_FENCED); the commit is
		// refused by the coordinator for the epoch either way.
		produceErr = zombie.Produce(ctx, e.out, 0, want[:100])
		if commitErr = zombie.SendOffsets(ctx, e.group, e.in, map[int]kafkaio.Committed{0: {Offset: 100, LeaderEpoch: -1}}); commitErr == nil {
			commitErr = zombie.Commit(ctx)
		}
	}}
	r := e.start(e.eosConfig(), fd, keyFuncFor(t, "key"))
	e.waitAllCommitted(30 * time.Second)
	if err := r.stop(t, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	if produceErr == nil {
		t.Error("the previous owner appended after the new owner's re-warm")
	}
	if !errors.Is(commitErr, kafkaio.ErrFenced) {
		t.Errorf("the previous owner's commit after the new owner's re-warm: %v, want kafkaio.ErrFenced", commitErr)
	}
	compareSeq(t, "read_committed output", e.readOut("out")[0], want)
}

// TestExactlyOnceValidation proves exactly-once delivery refuses configurations that would break
// it.
func TestExactlyOnceValidation(t *testing.T) {
	t.Parallel()
	base := consumer.AppDefaults()
	base.Brokers, base.InputTopic, base.OutputTopic = []string{"127.0.0.1:9092"}, "in", "out"
	base.Delivery = consumer.DeliveryExactlyOnce
	for _, tc := range []struct {
		name  string
		edit  func(*consumer.Config)
		field string
	}{
		{"unknown delivery", func(c *consumer.Config) { c.Delivery = "at-most-once" }, "Delivery"},
		{"without idempotence", func(c *consumer.Config) { c.DisableIdempotence = true }, "Delivery"},
		{"read_uncommitted", func(c *consumer.Config) { c.Isolation = string(kafkaio.ReadUncommitted) }, "Isolation"},
		{"interval past the timeout", func(c *consumer.Config) { c.TxnInterval, c.TxnTimeout = time.Minute, 30*time.Second }, "TxnInterval"},
		{"timeout too long", func(c *consumer.Config) { c.TxnTimeout = time.Hour }, "TxnTimeout"},
	} {
		cfg := base
		tc.edit(&cfg)
		fes := consumer.FieldErrors(cfg.Validate())
		if len(fes) != 1 || fes[0].Field != tc.field {
			t.Errorf("%s: %v, want one error on %s", tc.name, fes, tc.field)
		}
	}
	if err := base.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// TestExactlyOnceFencedOwnerStops proves that a worker whose partition was taken over (another
// producer called InitProducerId with the partition's transactional id, as its next owner does)
// stops the partition for good: it writes and commits nothing more for it, discards its state
// without revoking (saving) it, does not start over, and logs why.
func TestExactlyOnceFencedOwnerStops(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1, embedkafka.Options{})
	rng := rand.New(rand.NewPCG(7, 8))
	in, want := stream("key", 0, 400, rng)
	e.produce(0, in[:200])
	h := &captureHandler{}
	d := newMapDeduper(false, nil)
	r := e.startLogged(e.eosConfig(), d, keyFuncFor(t, "key"), slog.New(h))
	e.waitAllCommitted(30 * time.Second)
	before := e.readOut("out")[0]

	client := kafkaio.Conn{Brokers: e.cl.Addrs()}.Client(3 * time.Second)
	next := kafkaio.NewProducer(client, kafkaio.ProducerConfig{TransactionalID: consumer.TransactionalID(e.group, e.in, 0)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := next.Start(ctx); err != nil { // the next owner's fence
		t.Fatal(err)
	}
	e.produce(0, in[200:])
	eventually(t, 30*time.Second, "the fenced partition to stop", func() bool {
		_, _, discards := d.counts()
		return h.count("partition stopped: another owner took its transactional id over") == 1 && discards[0] == 1
	})
	if err := r.stop(t, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	assigns, revokes, discards := d.counts()
	if assigns[0] != 1 || revokes[0] != 0 || discards[0] != 1 {
		t.Errorf("partition 0: %d assigns, %d revokes, %d discards; want 1, 0, 1", assigns[0], revokes[0], discards[0])
	}
	compareSeq(t, "output before the fence", before, want[:len(before)])
	uncommitted := readUncommitted(t, e, "out")
	if len(uncommitted) != len(before) {
		t.Errorf("the fenced worker appended %d records after the fence", len(uncommitted)-len(before))
	}
	com, err := e.cl.Committed(ctx, e.group, e.in)
	if err != nil || com[0] != 200 {
		t.Errorf("committed offset %v (%v), want 200", com[0], err)
	}
}

// readUncommitted returns partition 0 of topic read read_uncommitted: aborted records included.
func readUncommitted(t *testing.T, e *env, topic string) []kafkaio.Record {
	t.Helper()
	return readUncommittedPart(t, e, topic, 0)
}

// readUncommittedPart returns partition p of topic read read_uncommitted: records of aborted and
// open transactions included. Only the number of records and their offsets may be used.
func readUncommittedPart(t *testing.T, e *env, topic string, p int) []kafkaio.Record {
	t.Helper()
	ctx := context.Background()
	ends, err := e.cl.EndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []kafkaio.Record
	err = kafkaio.Read(ctx, e.cl.Client(), kafkaio.Range{Topic: topic, Partition: p, End: ends[p], Isolation: kafkaio.ReadUncommitted, Failures: 1},
		func(recs []kafkaio.Record) error {
			out = append(out, recs...)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestExactlyOnceShutdownCommits proves a graceful stop leaves nothing half done: with a cadence
// that never commits on its own, the records handled so far sit in open transactions (visible
// read_uncommitted only); stopping the worker commits them with their input offsets.
func TestExactlyOnceShutdownCommits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 2, embedkafka.Options{})
	rng := rand.New(rand.NewPCG(9, 10))
	want := map[int][]kafkaio.Record{}
	for p := range 2 {
		in, w := stream("key", p, 300, rng)
		e.produce(p, in)
		want[p] = w
	}
	cfg := e.eosConfig()
	cfg.TxnInterval, cfg.TxnMaxRecords, cfg.TxnTimeout = 10*time.Minute, 1_000_000, 15*time.Minute
	r := e.start(cfg, newMapDeduper(false, nil), keyFuncFor(t, "key"))
	eventually(t, 30*time.Second, "every record written in the open transactions", func() bool {
		return len(readUncommittedPart(t, e, "out", 0)) == len(want[0]) && len(readUncommittedPart(t, e, "out", 1)) == len(want[1])
	})
	ctx := context.Background()
	if com, err := e.cl.Committed(ctx, e.group, e.in); err != nil || com[0] > 0 || com[1] > 0 {
		t.Fatalf("offsets committed before the stop: %v %v", com, err)
	}
	if err := r.stop(t, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	got := e.readOut("out")
	for p := range 2 {
		compareSeq(t, fmt.Sprintf("read_committed partition %d after the stop", p), got[p], want[p])
	}
	com, err := e.cl.Committed(ctx, e.group, e.in)
	if err != nil || com[0] != 300 || com[1] != 300 {
		t.Errorf("committed offsets %v (%v), want 300 each", com, err)
	}
}
