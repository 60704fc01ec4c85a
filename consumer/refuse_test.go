package consumer_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// The output topics of these tests take 64 KiB (max.message.bytes); a big record has 100 KiB,
// which the input topic (kfake's default, 1 MiB) takes.
const (
	outLimit = 64 << 10
	bigSize  = 100 << 10
)

// limit sets the max.message.bytes of topic and waits until the broker reports it: a real broker
// applies a configuration change once its metadata log replays it, after it answered the change,
// and a worker started before then would find the topic taking what the test has it refuse.
func (e *env) limit(topic string, n int) {
	e.t.Helper()
	if err := e.cl.SetTopicConfig(context.Background(), topic, map[string]string{"max.message.bytes": strconv.Itoa(n)}); err != nil {
		e.t.Fatal(err)
	}
	eventually(e.t, 10*time.Second, fmt.Sprintf("the broker to report %s's max.message.bytes as %d", topic, n), func() bool {
		got, err := kafkaio.MaxMessageBytes(context.Background(), e.cl.Client(), topic)
		return err == nil && got[0] == n
	})
}

// bigStream returns n records of partition p with unique keys, those at the offsets in big
// carrying a value of bigSize bytes.
func bigStream(p, n int, big ...int) []kafkaio.Record {
	msgs := make([]kafkaio.Record, n)
	for i := range msgs {
		msgs[i] = record("key", p, i, fmt.Sprintf("id-%d-%d", p, i))
		if slices.Contains(big, i) {
			msgs[i].Value = append(msgs[i].Value, bytes.Repeat([]byte{'x'}, bigSize)...)
		}
	}
	return msgs
}

// without returns msgs without the records at the offsets in skip.
func without(msgs []kafkaio.Record, skip ...int) []kafkaio.Record {
	var out []kafkaio.Record
	for i, m := range msgs {
		if !slices.Contains(skip, i) {
			out = append(out, m)
		}
	}
	return out
}

// committed returns the group's committed offset of input partition p (-1 when none or unknown).
func (e *env) committed(p int) int64 {
	com, err := e.cl.Committed(context.Background(), e.group, e.in)
	if off, ok := com[p]; err == nil && ok {
		return off
	}
	return -1
}

// blockedAt reports whether w reports exactly the blocks of partition → offset in want.
func blockedAt(w *consumer.Worker, want map[int32]int64) bool {
	got := w.Blocked()
	if len(got) != len(want) {
		return false
	}
	for _, b := range got {
		if want[b.Partition] != b.Offset {
			return false
		}
	}
	return true
}

// TestRefusedRecordBlocks proves fail-stop: without a dead-letter topic, a partition whose
// record the output refuses writes and commits everything before it and stops there, reports the
// block (Blocked, the Observer, its state discarded), while the other partition completes; once
// the output topic's limit is raised, the partition resumes by itself, its state assigned again,
// and everything is delivered exactly once.
//
// It runs on kfake and on real Kafka (see testbroker), whose refusal of a batch over the output
// topic's max.message.bytes is the broker's own.
func TestRefusedRecordBlocks(t *testing.T) {
	t.Parallel()
	testbroker.Each(t, testbroker.Options{}, testRefusedRecordBlocks)
}

func testRefusedRecordBlocks(t *testing.T, kb testbroker.Broker) {
	e := newEnvOn(t, kb, 2, 2)
	e.limit(e.out, outLimit)
	in0, in1 := presentStream(0, 80, 40), presentStream(1, 80)
	e.produce(0, in0)
	e.produce(1, in1)
	d := newMapDeduper(false, nil)
	logs := &captureHandler{}
	r := e.startLogged(e.config(), d, keyFuncFor(t, "key"), slog.New(logs))

	eventually(t, 20*time.Second, "partition 0 blocked at 40, partition 1 committed", func() bool {
		return blockedAt(r.w, map[int32]int64{0: 40}) && e.committed(1) == 80 && e.committed(0) == 40
	})
	time.Sleep(2 * time.Second) // a few attempts to write the record again (100ms, 200ms, 400ms, 800ms)
	if n := logs.count("partition blocked"); n != 1 {
		t.Errorf("%d log lines of the block, want 1", n)
	}
	b := r.w.Blocked()[0]
	if b.Topic != e.out || b.Reason != kafkaio.RefusalMessageTooLarge || b.Error == "" || b.Since.IsZero() {
		t.Errorf("blocked %+v", b)
	}
	if reason, _ := r.obs.blocked.Load(int32(0)); reason != kafkaio.RefusalMessageTooLarge {
		t.Errorf("observer: partition 0 blocked for %v", reason)
	}
	if !r.w.Ready() {
		t.Error("a blocked partition made the worker not ready")
	}
	got := e.readOut(e.out)
	compareSeq(t, "partition 0 while blocked", got[0], in0[:40])
	compareSeq(t, "partition 1", got[1], in1)
	if _, _, discards := d.counts(); discards[0] != 1 {
		t.Errorf("partition 0 discarded %d times at the block, want 1", discards[0])
	}

	e.limit(e.out, 1<<20)
	e.waitAllCommitted(60 * time.Second)
	eventually(t, 5*time.Second, "the block ends", func() bool { return len(r.w.Blocked()) == 0 })
	if _, ok := r.obs.blocked.Load(int32(0)); ok {
		t.Error("observer: partition 0 still blocked")
	}
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if logs.count("partition unblocked") != 1 {
		t.Error("the end of the block was not logged")
	}
	got = e.readOut(e.out)
	compareSeq(t, "partition 0", got[0], in0)
	d.check(t)
	if assigns, revokes, _ := d.counts(); assigns[0] != 2 || revokes[0] != 1 {
		t.Errorf("partition 0: %d assigns, %d revokes; want 2 (again after the block) and 1", assigns[0], revokes[0])
	}
}

// TestRestartWhileBlocked proves that a blocked partition releases cleanly (committed up to the
// refused record, no state handed back) and that the next worker blocks at the same offset
// without writing anything twice; nothing is lost once the limit is raised.
func TestRestartWhileBlocked(t *testing.T) {
	t.Parallel()
	testbroker.Each(t, testbroker.Options{}, testRestartWhileBlocked)
}

func testRestartWhileBlocked(t *testing.T, kb testbroker.Broker) {
	e := newEnvOn(t, kb, 1, 1)
	e.limit(e.out, outLimit)
	in := presentStream(0, 60, 25)
	e.produce(0, in)
	st := newStore()
	d1 := newMapDeduper(false, st)
	r1 := e.start(e.config(), d1, keyFuncFor(t, "key"))
	eventually(t, 20*time.Second, "blocked at 25", func() bool { return blockedAt(r1.w, map[int32]int64{0: 25}) && e.committed(0) == 25 })
	if err := r1.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, revokes, discards := d1.counts(); revokes[0] != 0 || discards[0] != 1 {
		t.Errorf("first worker: %d revokes, %d discards; want 0 and 1 (at the block)", revokes[0], discards[0])
	}
	if _, ok := r1.obs.blocked.Load(int32(0)); ok {
		t.Error("observer: still blocked after the release")
	}
	d1.check(t)

	d2 := newMapDeduper(false, st)
	r2 := e.start(e.config(), d2, keyFuncFor(t, "key"))
	eventually(t, 20*time.Second, "blocked again at 25", func() bool { return blockedAt(r2.w, map[int32]int64{0: 25}) })
	compareSeq(t, "output while blocked again", e.readOut(e.out)[0], in[:25])
	e.limit(e.out, 1<<20)
	e.waitAllCommitted(60 * time.Second)
	if err := r2.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	compareSeq(t, "output", e.readOut(e.out)[0], in)
	d2.check(t)
}

// TestDeadLetterTopic proves the dead-letter topic: every record the output (or the duplicates
// topic) refuses is written there unchanged, with headers naming the error, the input record and
// the topic that refused it; everything else reaches the output in order, nothing blocks, and
// the input is committed to its end.
func TestDeadLetterTopic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		partitioning consumer.Partitioning
		dups         bool // the big records are duplicates, refused by the duplicates (audit) topic
	}{
		{"same", consumer.PartitionSame, false},
		{"hash", consumer.PartitionHash, false},
		{"duplicates topic", consumer.PartitionSame, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testbroker.Each(t, testbroker.Options{}, func(t *testing.T, b testbroker.Broker) {
				e := newEnvOn(t, b, 2, 2)
				dlq, dups := b.Name("dlq"), b.Name("dups")
				for _, topic := range []string{dlq, dups} {
					if err := b.CreateTopic(t.Context(), topic, 1); err != nil {
						t.Fatal(err)
					}
				}
				refusing := e.out
				if tc.dups {
					refusing = dups
				}
				e.limit(refusing, outLimit)
				in0, in1 := presentStream(0, 60, 10, 30), presentStream(1, 60, 5)
				if tc.dups { // the big records repeat an earlier identity
					in0[10].Key, in0[30].Key, in1[5].Key = in0[0].Key, in0[1].Key, in1[0].Key
				}
				e.produce(0, in0)
				e.produce(1, in1)
				cfg := e.config()
				cfg.DeadLetterTopic, cfg.DuplicatesTopic, cfg.Partitioning = dlq, dups, tc.partitioning
				r := e.start(cfg, newMapDeduper(false, nil), keyFuncFor(t, "key"))
				e.waitAllCommitted(30 * time.Second)
				if err := r.stop(t, 10*time.Second); err != nil {
					t.Fatal(err)
				}
				want := map[int][]kafkaio.Record{0: without(in0, 10, 30), 1: without(in1, 5)}
				checkOutput(t, e, tc.partitioning, want)
				dl := e.readOut(dlq)[0]
				big := []kafkaio.Record{in0[10], in0[30], in1[5]}
				if len(dl) != 3 {
					t.Fatalf("%d dead letters, want 3", len(dl))
				}
				for _, m := range dl {
					checkDeadLetter(t, m, big, e.in, refusing)
				}
				if n := r.obs.deadLetters.Load(); n != 3 {
					t.Errorf("observer: %d dead letters, want 3", n)
				}
				if n := r.obs.auditErrors.Load(); tc.dups != (n > 0) {
					t.Errorf("observer: %d audit produce errors (the audit topic refusing: %v)", n, tc.dups)
				}
				if n := r.obs.produced.Load(); !tc.dups && n != 117 {
					t.Errorf("observer: %d produced, want 117", n)
				}
				if len(r.w.Blocked()) != 0 {
					t.Errorf("blocked: %+v", r.w.Blocked())
				}
			})
		})
	}
}

// checkOutput compares the output topic with want (by input partition): partition by partition
// under PartitionSame, as a set in input order per key under PartitionHash.
func checkOutput(t *testing.T, e *env, partitioning consumer.Partitioning, want map[int][]kafkaio.Record) {
	t.Helper()
	got := e.readOut(e.out)
	if partitioning == consumer.PartitionSame {
		for p, w := range want {
			compareSeq(t, fmt.Sprintf("output partition %d", p), got[p], w)
		}
		return
	}
	var all, wantAll []string
	for _, msgs := range got {
		for _, m := range msgs {
			all = append(all, string(m.Value))
		}
	}
	for _, msgs := range want {
		for _, m := range msgs {
			wantAll = append(wantAll, string(m.Value))
		}
	}
	slices.Sort(all)
	slices.Sort(wantAll)
	if !slices.Equal(all, wantAll) {
		t.Errorf("output holds %d records, want %d", len(all), len(wantAll))
	}
}

// checkDeadLetter checks that m is one of big, unchanged, followed by the dead-letter headers.
func checkDeadLetter(t *testing.T, m kafkaio.Record, big []kafkaio.Record, in, refusedBy string) {
	t.Helper()
	hs := map[string]string{}
	for _, h := range m.Headers[1:] {
		hs[h.Key] = string(h.Value)
	}
	p, _ := strconv.Atoi(hs[consumer.DeadLetterHeaderSourcePartition])
	off, _ := strconv.Atoi(hs[consumer.DeadLetterHeaderSourceOffset])
	i := slices.IndexFunc(big, func(b kafkaio.Record) bool { return bytes.Equal(b.Value, m.Value) })
	if i < 0 {
		t.Fatalf("dead letter %q is none of the big records", m.Key)
	}
	orig := big[i]
	m.Headers = m.Headers[:1]
	if d := sameRecord(m, orig); d != "" {
		t.Errorf("dead letter of partition %d offset %d: %s", p, off, d)
	}
	if hs[consumer.DeadLetterHeaderError] != kafkaio.RefusalMessageTooLarge || hs[consumer.DeadLetterHeaderErrorMessage] == "" ||
		hs[consumer.DeadLetterHeaderSourceTopic] != in || hs[consumer.DeadLetterHeaderOutputTopic] != refusedBy ||
		hs[consumer.DeadLetterHeaderOutputPartition] == "" || fmt.Sprintf("p%d-r%d", p, off) != string(orig.Value[:len(fmt.Sprintf("p%d-r%d", p, off))]) {
		t.Errorf("dead-letter headers %v", hs)
	}
}

// TestDeadLetterTopicRefusesToo proves that a record the dead-letter topic refuses as well blocks
// the partition as without one, naming the dead-letter topic.
func TestDeadLetterTopicRefusesToo(t *testing.T) {
	t.Parallel()
	testbroker.Each(t, testbroker.Options{}, testDeadLetterTopicRefusesToo)
}

func testDeadLetterTopicRefusesToo(t *testing.T, kb testbroker.Broker) {
	e := newEnvOn(t, kb, 1, 1)
	dlq := kb.Name("dlq")
	if err := kb.CreateTopic(t.Context(), dlq, 1); err != nil {
		t.Fatal(err)
	}
	e.limit(e.out, outLimit)
	e.limit(dlq, outLimit)
	in := presentStream(0, 30, 12)
	e.produce(0, in)
	cfg := e.config()
	cfg.DeadLetterTopic = dlq
	r := e.start(cfg, newMapDeduper(false, nil), keyFuncFor(t, "key"))
	eventually(t, 20*time.Second, "blocked at 12", func() bool { return blockedAt(r.w, map[int32]int64{0: 12}) && e.committed(0) == 12 })
	if b := r.w.Blocked()[0]; b.Topic != dlq || b.Reason != kafkaio.RefusalMessageTooLarge {
		t.Errorf("blocked %+v, want refused by the dead-letter topic", b)
	}
	compareSeq(t, "output", e.readOut(e.out)[0], in[:12])
	e.limit(dlq, 1<<20) // the dead-letter topic takes it now
	e.waitAllCommitted(60 * time.Second)
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	compareSeq(t, "output", e.readOut(e.out)[0], without(in, 12))
	if dl := e.readOut(dlq)[0]; len(dl) != 1 || !bytes.Equal(dl[0].Value, in[12].Value) {
		t.Errorf("%d dead letters, want the big record", len(dl))
	}
}

// TestBatchSplitToFit proves that batches that only fit the output topic when split are written
// whole: records of 3 KiB in batches of 200 (600 KiB) against a limit of 64 KiB, read at startup,
// or lowered while the worker runs (the producer then splits what the topic refuses).
func TestBatchSplitToFit(t *testing.T) {
	t.Parallel()
	for _, lowered := range []bool{false, true} {
		t.Run(fmt.Sprintf("lowered=%v", lowered), func(t *testing.T) {
			t.Parallel()
			testbroker.Each(t, testbroker.Options{}, func(t *testing.T, kb testbroker.Broker) {
				e := newEnvOn(t, kb, 1, 1)
				in := presentStream(0, 1000)
				for i := range in {
					in[i].Value = append(in[i].Value, bytes.Repeat([]byte{'y'}, 3<<10)...)
				}
				if !lowered {
					e.limit(e.out, outLimit)
				}
				e.produce(0, in[:200])
				logs := &captureHandler{}
				r := e.startLogged(e.config(), newMapDeduper(false, nil), keyFuncFor(t, "key"), slog.New(logs))
				eventually(t, 20*time.Second, "first batches committed", func() bool { return e.committed(0) == 200 })
				e.limit(e.out, outLimit)
				e.produce(0, in[200:])
				e.waitAllCommitted(30 * time.Second)
				if err := r.stop(t, 10*time.Second); err != nil {
					t.Fatal(err)
				}
				compareSeq(t, "output", e.readOut(e.out)[0], in)
				if split := logs.count("produce refused") > 0; split != lowered {
					t.Errorf("batches split after a refusal: %v, want %v (a limit read at startup bounds them before)", split, lowered)
				}
				if len(r.w.Blocked()) != 0 || r.obs.deadLetters.Load() != 0 {
					t.Errorf("blocked %v, %d dead letters; want none", r.w.Blocked(), r.obs.deadLetters.Load())
				}
			})
		})
	}
}
