package consumer_test

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// sealBatch returns hdr as a record batch with its length and checksum computed.
func sealBatch(hdr kmsg.RecordBatch) []byte {
	b := hdr.AppendTo(nil)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// rawRecord returns one record of a v2 batch, as bytes: offset delta d, key "h<d>", value "x",
// and headers as the header count (negative for a hostile one, with no headers following).
func rawRecord(d int64, headers int64) []byte {
	v := binary.AppendVarint
	body := v(v(v([]byte{0}, 0), d), 2) // attributes, timestamp delta, offset delta, key length
	body = append(body, 'h', byte('0'+d))
	body = append(v(body, 1), 'x')
	body = v(body, headers)
	return append(v(nil, int64(len(body))), body...)
}

// hostileHeader is a valid header of an uncompressed batch of n records at offset 0.
func hostileHeader(n int, records []byte) kmsg.RecordBatch {
	now := time.Now().UnixMilli()
	return kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(n - 1), FirstTimestamp: now,
		MaxTimestamp: now, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(n), Records: records}
}

// hostileBatches are record batches a hostile or broken producer can send. real is the error
// code Kafka 4.4's LogValidator answers at produce time (0: it appends the batch); kfake checks
// the checksum and the offset range against the record count, and appends the rest. delivered
// are the keys of its records the worker delivers when a broker appends it; a batch without
// becomes a dead letter.
var hostileBatches = []struct {
	name      string
	batch     func() []byte
	real      int16
	delivered []string
}{
	{"wrong checksum", func() []byte {
		b := keyedBatch(0, 5)
		b[len(b)-1] ^= 0xff
		return b
	}, kerr.CorruptMessage.Code, nil},
	{"record count over the records", func() []byte {
		hdr := hostileHeader(3, append(rawRecord(0, 0), rawRecord(1, 0)...))
		hdr.LastOffsetDelta = 1
		return sealBatch(hdr)
	}, kerr.InvalidRecord.Code, nil},
	{"offset range over the records", func() []byte {
		hdr := hostileHeader(2, append(rawRecord(0, 0), rawRecord(1, 0)...))
		hdr.LastOffsetDelta = 9
		return sealBatch(hdr)
	}, kerr.InvalidRecord.Code, nil},
	// Neither broker checks the deltas of an uncompressed batch's records (it rewrites only the
	// base offset), and the worker's decoder takes a batch's records in their order without
	// checking their deltas (a compacted log's batches have gaps), so it delivers both.
	{"offset deltas out of order", func() []byte {
		return sealBatch(hostileHeader(2, append(rawRecord(1, 0), rawRecord(0, 0)...)))
	}, 0, []string{"h1", "h0"}},
	{"negative header count", func() []byte {
		return sealBatch(hostileHeader(1, rawRecord(0, -7)))
	}, kerr.InvalidRecord.Code, nil},
	{"record longer than the batch", func() []byte {
		r := rawRecord(0, 0)
		r[0] += 2 * 40 // a zigzag varint length 40 bytes longer than the record
		return sealBatch(hostileHeader(1, r))
	}, kerr.InvalidRecord.Code, nil},
	// Kafka 4.4 decompresses the batch to validate it and answers the decompressor's failure as
	// an unexpected error; kfake does not decompress, and the worker's decoder refuses it.
	{"zstd batch that does not decompress", func() []byte {
		hdr := hostileHeader(1, []byte("not zstd at all, but 40 bytes of garbage"))
		hdr.Attributes = 4 // zstd
		return sealBatch(hdr)
	}, kerr.UnknownServerError.Code, nil},
}

// TestHostileBatches sends each of hostileBatches, between two runs of good records, to a
// partition of its own, and runs the worker with a dead-letter topic over them. On real Kafka the
// broker must answer each as hostileBatches says; whatever a broker appends (more on kfake, which
// does not validate batches as LogValidator does) must reach the worker's decoder and be
// delivered as hostileBatches says or become a dead letter. Either way every good record is
// delivered in order, no partition is blocked, and the input is committed to its end.
func TestHostileBatches(t *testing.T) {
	t.Parallel()
	testbroker.Each(t, testbroker.Options{}, func(t *testing.T, b testbroker.Broker) {
		parts := len(hostileBatches)
		e := newEnvOn(t, b, parts, parts)
		dlq := b.Name("dlq")
		if err := b.CreateTopic(t.Context(), dlq, 1); err != nil {
			t.Fatal(err)
		}
		deadLetters, appended, streams := 0, make([]bool, parts), make([][]kafkaio.Record, parts)
		for p := range parts {
			streams[p] = presentStream(p, 10)
		}
		for p, h := range hostileBatches {
			in := streams[p]
			e.produce(p, in[:5])
			code := produceRawCode(t, e.cl.Addrs(), e.in, int32(p), h.batch())
			t.Logf("%s: %s", h.name, codeName(code))
			if b.Kind() == testbroker.Real && code != h.real {
				t.Errorf("%s: real Kafka answered %s, want %s", h.name, codeName(code), codeName(h.real))
			}
			if code == 0 {
				appended[p] = true
				if h.delivered == nil {
					deadLetters++
				}
			}
			e.produce(p, in[5:])
		}
		cfg := e.config()
		cfg.DeadLetterTopic = dlq
		r := e.start(cfg, newMapDeduper(false, nil), keyFuncFor(t, "key"))
		e.waitAllCommitted(60 * time.Second)
		got := e.readOut(e.out)
		for p, h := range hostileBatches {
			want, out := streams[p], got[p]
			if appended[p] && len(h.delivered) > 0 {
				var keys []string
				for _, m := range out[min(5, len(out)):min(5+len(h.delivered), len(out))] {
					keys = append(keys, string(m.Key))
				}
				if !slices.Equal(keys, h.delivered) {
					t.Errorf("%s: delivered %q after the first records, want %q", h.name, keys, h.delivered)
				}
				out = slices.Delete(slices.Clone(out), 5, min(5+len(h.delivered), len(out)))
			}
			compareSeq(t, fmt.Sprintf("output partition %d (%s)", p, h.name), out, want)
		}
		if dl := e.readOut(dlq)[0]; len(dl) != deadLetters {
			t.Errorf("%d dead letters, want %d", len(dl), deadLetters)
		}
		if bl := r.w.Blocked(); len(bl) != 0 {
			t.Errorf("blocked partitions %+v, want none", bl)
		}
	})
}

// presentStream is bigStream(p, n, big...) with timestamps moved from baseTime (in 2030) to the
// last minute: real Kafka 4 refuses records more than an hour ahead of its clock
// (message.timestamp.after.max.ms), which kfake does not check.
func presentStream(p, n int, big ...int) []kafkaio.Record {
	msgs := bigStream(p, n, big...)
	shift := time.Now().Add(-time.Minute).Sub(baseTime)
	for i := range msgs {
		msgs[i].Time = msgs[i].Time.Add(shift).Truncate(time.Millisecond)
	}
	return msgs
}

// codeName names a Kafka error code.
func codeName(code int16) string {
	if code == 0 {
		return "appended"
	}
	return "refused: " + kerr.ErrorForCode(code).Error()
}
