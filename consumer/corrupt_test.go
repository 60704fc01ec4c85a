package consumer_test

import (
	"fmt"
	"hash/crc32"
	"slices"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/embedkafka/kfaketest"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// keyedBatch returns a sealed record batch at offset first of n records with keys and values
// "k<offset>" and "v<offset>".
func keyedBatch(first int64, n int) []byte {
	var recs []byte
	for i := range n {
		rec := kmsg.Record{OffsetDelta: int32(i), Key: fmt.Appendf(nil, "k%d", first+int64(i)), Value: fmt.Appendf(nil, "v%d", first+int64(i))}
		rec.Length = int32(len(rec.AppendTo(nil)) - 1) // the body after a one-byte length 0
		recs = rec.AppendTo(recs)
	}
	hdr := kmsg.RecordBatch{FirstOffset: first, PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(n - 1),
		FirstTimestamp: time.Now().UnixMilli(), MaxTimestamp: time.Now().UnixMilli(),
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(n), Records: recs}
	b := hdr.AppendTo(nil)
	hdr.Length = int32(len(b) - 12)
	b = hdr.AppendTo(b[:0])
	hdr.CRC = int32(crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return hdr.AppendTo(b[:0])
}

// answerCorrupt makes the broker answer fetches of topic's partition 0 below 10 with records
// 0-4 and then a batch of 5-9 whose checksum is wrong, as a log damaged on a broker's disk
// would be read (kfake checks checksums on produce, so it cannot hold one).
func answerCorrupt(cl *embedkafka.Cluster, topic string) {
	bad := keyedBatch(5, 5)
	bad[len(bad)-1] ^= 0xff
	good := keyedBatch(0, 5)
	kfaketest.Answer(cl, kmsg.Fetch, 1<<30, func(kr kmsg.Request) kmsg.Response {
		req := kr.(*kmsg.FetchRequest)
		if len(req.Topics) != 1 || req.Topics[0].Topic != topic || len(req.Topics[0].Partitions) != 1 {
			return nil
		}
		rp := req.Topics[0].Partitions[0]
		if rp.Partition != 0 || rp.FetchOffset >= 10 {
			return nil
		}
		res := req.ResponseKind().(*kmsg.FetchResponse)
		t := kmsg.NewFetchResponseTopic()
		t.Topic = topic
		p := kmsg.NewFetchResponseTopicPartition()
		p.HighWatermark, p.LastStableOffset, p.LogStartOffset = 10, 10, 0
		p.RecordBatches = bad
		if rp.FetchOffset < 5 {
			p.RecordBatches = slices.Concat(good, bad)
		}
		t.Partitions = append(t.Partitions, p)
		res.Topics = append(res.Topics, t)
		return res
	})
}

// TestCorruptBatch proves that a batch whose checksum stays wrong stops its partition exactly as
// refused input does: without a dead-letter topic the records before it are written and
// committed, the partition is blocked at it (Blocked, the Observer, reason input_corrupt) and
// nothing is committed past it; with one, its offsets go there and the partition goes on.
func TestCorruptBatch(t *testing.T) {
	t.Parallel()
	for _, dlq := range []bool{false, true} {
		t.Run(fmt.Sprintf("dead-letter=%v", dlq), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1, 1, embedkafka.Options{Topics: map[string]int32{"dlq": 1}})
			var in []kafkaio.Record
			for i := range 10 {
				in = append(in, kafkaio.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)})
			}
			e.produce(0, in) // offsets 0-9 exist, as in the answers below
			answerCorrupt(e.cl.Fake(), e.in)
			cfg := e.config()
			if dlq {
				cfg.DeadLetterTopic = "dlq"
			}
			r := e.start(cfg, newMapDeduper(false, nil), keyFuncFor(t, "key"))
			if dlq {
				e.waitAllCommitted(30 * time.Second)
				dl := e.readOut("dlq")[0]
				if len(dl) != 1 {
					t.Fatalf("%d dead letters, want one", len(dl))
				}
				first, _ := header(dl[0], "kdedup-source-offset")
				last, _ := header(dl[0], "kdedup-source-last-offset")
				if first != "5" || last != "9" {
					t.Errorf("dead letter for offsets %s-%s, want 5-9", first, last)
				}
			} else {
				eventually(t, 30*time.Second, "partition 0 blocked at 5", func() bool { return blockedAt(r.w, map[int32]int64{0: 5}) })
				if c := e.committed(0); c != 5 {
					t.Errorf("committed %d, want 5 (the corrupt batch's offset)", c)
				}
				if reason, _ := r.obs.blocked.Load(int32(0)); reason != kafkaio.RefusalInputCorrupt {
					t.Errorf("observer: blocked for %v, want %s", reason, kafkaio.RefusalInputCorrupt)
				}
			}
			if got := e.readOut(e.out)[0]; len(got) != 5 || string(got[4].Key) != "k4" {
				t.Errorf("output %d records, want k0-k4", len(got))
			}
		})
	}
}
