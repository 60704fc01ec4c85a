package app

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/txntest"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// logShape is what a partition's log looks like on the wire after the log cleaner ran.
type logShape struct {
	batches, empty, control, records int
	gaps                             int // offsets with no record: between batches and inside them
}

func (s logShape) String() string {
	return fmt.Sprintf("%d batches (%d empty, %d control), %d records, %d offsets compacted away",
		s.batches, s.empty, s.control, s.records, s.gaps)
}

// scanLog fetches every partition of topic from offset 0 to its high watermark with a raw
// (read_uncommitted) Fetch and counts batches, empty batches, control batches, records and the
// offsets that hold no record.
func scanLog(t *testing.T, addrs []string, topic string, partitions int) logShape {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.MaxVersions(kversion.V3_0_0()))
	must(t, err)
	defer cl.Close()
	var s logShape
	for p := range int32(partitions) {
		for offset, hwm := int64(0), int64(1); offset < hwm; {
			req := kmsg.NewPtrFetchRequest()
			req.ReplicaID, req.MaxWaitMillis, req.MaxBytes = -1, 0, 4<<20
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = topic
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes, rp.LogStartOffset = p, offset, 4<<20, -1
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(t.Context(), cl)
			must(t, err)
			part := resp.Topics[0].Partitions[0]
			if part.ErrorCode != 0 {
				t.Fatalf("fetch %s/%d at %d: error code %d", topic, p, offset, part.ErrorCode)
			}
			hwm = part.HighWatermark
			raw, next := part.RecordBatches, offset
			for len(raw) >= 12 {
				n := 12 + int(binary.BigEndian.Uint32(raw[8:12]))
				if len(raw) < n {
					break // a partial batch at the end of the response
				}
				var b kmsg.RecordBatch
				must(t, b.ReadFrom(raw[:n]))
				raw = raw[n:]
				s.batches++
				if b.NumRecords == 0 {
					s.empty++
				}
				if b.Attributes&0x20 != 0 {
					s.control++
				}
				s.records += int(b.NumRecords)
				s.gaps += int(max(b.FirstOffset-next, 0)) + int(b.LastOffsetDelta) + 1 - int(b.NumRecords)
				next = b.FirstOffset + int64(b.LastOffsetDelta) + 1
			}
			if next == offset {
				t.Fatalf("fetch %s/%d at %d below the high watermark %d returned no batch", topic, p, offset, hwm)
			}
			offset = next
		}
	}
	return s
}

// TestCompactedInput writes an input topic with cleanup.policy=compact and a 100ms segment.ms on
// a real broker whose log cleaner runs every 200ms: 8 rounds over the same 400 keys, each round
// a committed transaction of its own transactional producer, each followed by an aborted
// transaction over 40 of the keys. Once the cleaner has left empty batches (a producer's last
// batch whose records were all compacted away is kept empty, for its producer state) and gaps
// in the offsets, a worker reads the topic: every key must reach the output exactly once, no
// aborted value may, and the group must commit the end of every partition. kfake has no log
// cleaner, so this runs on real Kafka only.
func TestCompactedInput(t *testing.T) {
	t.Parallel()
	b := testbroker.RealOnly(t, restartTopics)
	in := b.Name("in")
	must(t, b.SetTopicConfig(t.Context(), in, map[string]string{
		"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
		"min.compaction.lag.ms": "0", "delete.retention.ms": "0",
	}))
	const keys, rounds = 400, 8
	w := txntest.New(t, b.Addrs(), in)
	unique := map[string]bool{}
	for r := range rounds {
		recs := make([]txntest.Record, keys)
		for i := range recs {
			k := fmt.Sprintf("k%03d", i)
			recs[i] = txntest.Record{Partition: int32(i % restartPartitions), Key: []byte(k), Value: fmt.Appendf(nil, "round %d", r)}
			unique[k] = true
		}
		w.Txn(fmt.Sprintf("p%d", r), true, recs...)
		aborted := make([]txntest.Record, 0, keys/10)
		for i := 0; i < keys; i += 10 {
			aborted = append(aborted, txntest.Record{Partition: int32(i % restartPartitions), Key: []byte(fmt.Sprintf("k%03d", i)), Value: []byte("aborted")})
		}
		w.Txn("x", false, aborted...)
	}
	// A segment rolls at the first append after segment.ms, and the cleaner never touches the
	// active segment: append a record with a key of its own to each partition until the
	// cleaner has left empty batches and gaps everywhere.
	var shape logShape
	ticks := 0
	poll(t, 90*time.Second, "the log cleaner to leave empty batches and gaps", func() (bool, error) {
		for p := range restartPartitions {
			k := fmt.Sprintf("tick-%04d", ticks)
			ticks++
			unique[k] = true
			if err := b.Produce(t.Context(), in, p, kafkaio.Record{Key: []byte(k), Value: []byte("tick")}); err != nil {
				return false, err
			}
		}
		shape = scanLog(t, b.Addrs(), in, restartPartitions)
		return shape.empty >= restartPartitions && shape.gaps > keys*rounds/2, nil
	}, func() string { return shape.String() })
	t.Logf("input after compaction: %v; %d ticks", shape, ticks)

	environ := restartEnviron(b, t.TempDir(), "partition")
	w2 := startWorker(t, environ)
	waitFor(t, w2, 60*time.Second, "every input offset committed", func() bool { return caughtUp(b) })
	w2.signal(t, syscall.SIGTERM)
	if code := w2.wait(t, 20*time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM; log:\n%s", code, tail(w2.log(), logTail))
	}
	c := checkOutput(t, b, unique)
	got, err := b.ReadAll(t.Context(), b.Name("out"))
	must(t, err)
	abortedOut := 0
	for _, msgs := range got {
		for _, m := range msgs {
			if string(m.Value) == "aborted" {
				abortedOut++
			}
		}
	}
	t.Logf("output: %d records, %d of %d distinct keys lost, %d leaked, %d aborted", c.records, c.lost, len(unique), c.leaked, abortedOut)
	if c.lost != 0 || c.leaked != 0 || abortedOut != 0 {
		t.Errorf("%d lost (e.g. %v), %d leaked, %d aborted values in the output", c.lost, c.lostIDs[:min(5, len(c.lostIDs))], c.leaked, abortedOut)
	}
	for _, e := range parseEvents(w2.log()) {
		if e.str("level") == "ERROR" {
			t.Errorf("worker log: %s %s", e.str("msg"), e.str("error"))
		}
	}
}
