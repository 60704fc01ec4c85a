package kafkaio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// checkDecode decodes b (one batch and nothing after it) and compares it with want, the header
// encode produced, and msgs, the records it was given (a zero Time stands for now).
func checkDecode(t *testing.T, b []byte, want kmsg.RecordBatch, msgs []kafka.Message, now time.Time) {
	t.Helper()
	var d BatchDecoder
	hdr, recs, rest, err := d.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	hdr.Records, want.Records = nil, nil
	if fmt.Sprint(hdr) != fmt.Sprint(want) || len(rest) != 0 || len(recs) != len(msgs) {
		t.Fatalf("decoded header %+v, %d records, %d bytes left; want %+v, %d records, none left", hdr, len(recs), len(rest), want, len(msgs))
	}
	for i, m := range msgs {
		if m.Time.IsZero() {
			m.Time = now
		}
		r := recs[i]
		got := kafka.Message{Key: r.Key, Value: r.Value, Time: time.UnixMilli(hdr.FirstTimestamp + r.TimestampDelta64)}
		for _, h := range r.Headers {
			got.Headers = append(got.Headers, kafka.Header(h))
		}
		if d := recordDiff(got, m); d != "" || r.OffsetDelta != int32(i) {
			t.Errorf("record %d (offset delta %d): %s", i, r.OffsetDelta, d)
		}
	}
}

// testBatch returns an encoded, sealed batch of msgs.
func testBatch(t testing.TB, c kafka.Compression, msgs ...kafka.Message) []byte {
	enc := batchEncoder{compression: c}
	b, err := enc.encode(nil, [][]kafka.Message{msgs})
	if err != nil {
		t.Fatal(err)
	}
	b.seal(7, 1, 0)
	return b.raw[sizePrefix:]
}

// TestBatchDecode proves that Decode walks a record set of several batches, leaves a batch cut
// short for the next fetch, and reports corruption as ErrCorruptBatch.
func TestBatchDecode(t *testing.T) {
	a := testBatch(t, 0, testMsgs("a", 3)...)
	b := testBatch(t, kafka.Lz4, testMsgs("b", 5)...)
	set := append(append([]byte{}, a...), b...)
	var d BatchDecoder
	var got []string
	rest := set
	for len(rest) > 0 {
		_, recs, r, err := d.Decode(rest)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			got = append(got, string(rec.Value))
		}
		rest = r
	}
	equalStrings(t, "record set", got, valuesOf(testMsgs("a", 3), testMsgs("b", 5)))

	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, io.ErrUnexpectedEOF},
		{"header cut", a[:30], io.ErrUnexpectedEOF},
		{"records cut", set[:len(a)+len(b)-1][len(a):], io.ErrUnexpectedEOF},
		{"checksum", flip(a, len(a)-1), ErrCorruptBatch},
		{"magic", flip(a, 16), ErrCorruptBatch},
		{"negative length", binary.BigEndian.AppendUint32(bytes.Clone(a[:8]), math.MaxUint32), ErrCorruptBatch},
		{"record count", withCount(a, 4), ErrCorruptBatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, rest, err := d.Decode(tc.b)
			if !errors.Is(err, tc.want) || len(rest) != len(tc.b) {
				t.Errorf("Decode = %v with %d of %d bytes left, want %v and all of them", err, len(rest), len(tc.b), tc.want)
			}
		})
	}
}

// flip returns a copy of b with the bits of byte i inverted.
func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0xff
	return c
}

// withCount returns a copy of the batch b claiming n records, with a valid checksum.
func withCount(b []byte, n int32) []byte {
	var hdr kmsg.RecordBatch
	if err := hdr.ReadFrom(b); err != nil {
		panic(err)
	}
	rb := recordBatch{raw: append(make([]byte, sizePrefix), b...), hdr: hdr}
	rb.hdr.NumRecords = n
	rb.seal(hdr.ProducerID, hdr.ProducerEpoch, hdr.FirstSequence)
	return rb.raw[sizePrefix:]
}

// TestBatchDecodeAllocs proves that a decoder in steady use allocates nothing per batch of an
// uncompressed record set.
func TestBatchDecodeAllocs(t *testing.T) {
	b := testBatch(t, 0, testMsgs("a", 100)...)
	var d BatchDecoder
	if _, _, _, err := d.Decode(b); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _, _, _ = d.Decode(b) }); n != 0 {
		t.Errorf("%v allocations per Decode", n)
	}
}

// TestAppendRecordIsKmsg proves that appendRecord writes the bytes kmsg.Record.AppendTo writes.
func TestAppendRecordIsKmsg(t *testing.T) {
	ts := time.UnixMilli(1_700_000_000_123)
	for i, m := range []kafka.Message{
		{Key: []byte("k"), Value: []byte("v"), Headers: []kafka.Header{{Key: "h", Value: []byte("x")}, {Key: "", Value: nil}}, Time: ts},
		{Key: nil, Value: []byte{}},
		{Key: []byte{}, Value: nil},
		{Key: bytes.Repeat([]byte("k"), 300), Value: bytes.Repeat([]byte("v"), 70000)},
	} {
		for _, delta := range []struct{ off, ts int64 }{{0, 0}, {1, -5}, {63, 64}, {99999, -1 << 40}} {
			var hs []kmsg.Header
			for _, h := range m.Headers {
				hs = append(hs, kmsg.Header(h))
			}
			rec := kmsg.Record{Length: int32(recordBodyLen(&m, delta.off, delta.ts)), TimestampDelta64: delta.ts,
				OffsetDelta: int32(delta.off), Key: m.Key, Value: m.Value, Headers: hs}
			want := rec.AppendTo(nil)
			got := appendRecord(nil, &m, delta.off, delta.ts)
			if !bytes.Equal(got, want) || recordLen(&m, delta.off, delta.ts) != len(want) {
				t.Errorf("record %d, deltas %+v: %x (length %d), kmsg writes %x", i, delta, got, recordLen(&m, delta.off, delta.ts), want)
			}
		}
	}
}

func TestVarintLen(t *testing.T) {
	for _, v := range []int64{0, 1, -1, 63, 64, -64, -65, 1 << 20, -(1 << 40), math.MaxInt64, math.MinInt64} {
		var buf [16]byte
		if got, want := varintLen(v), len(binary.AppendVarint(buf[:0], v)); got != want {
			t.Errorf("varintLen(%d) = %d, want %d", v, got, want)
		}
	}
}

// FuzzBatchDecode proves that Decode never panics and never returns more records than the
// batch claims, whatever the bytes.
func FuzzBatchDecode(f *testing.F) {
	for _, c := range []kafka.Compression{0, kafka.Gzip, kafka.Snappy} {
		f.Add(testBatch(f, c, testMsgs(fmt.Sprint(c), 4)...))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var d BatchDecoder
		hdr, recs, rest, err := d.Decode(b)
		if err == nil && (len(recs) != int(hdr.NumRecords) || len(rest) >= len(b)) {
			t.Fatalf("%d records of %d, %d of %d bytes left", len(recs), hdr.NumRecords, len(rest), len(b))
		}
		if err != nil && len(rest) != len(b) {
			t.Fatalf("error %v with %d of %d bytes left", err, len(rest), len(b))
		}
	})
}

// benchMsgs returns 1000 records of the worker's shape: 16-byte key, 100-byte value, one header.
func benchMsgs() []kafka.Message {
	msgs := make([]kafka.Message, 1000)
	value := bytes.Repeat([]byte("v"), 100)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: fmt.Appendf(nil, "key-%012d", i), Value: value, Time: time.UnixMilli(1_700_000_000_000 + int64(i)),
			Headers: []kafka.Header{{Key: "trace", Value: []byte("0123456789abcdef")}}}
	}
	return msgs
}

// BenchmarkBatchEncode measures encoding and sealing a batch of 1000 records of the worker's
// shape (16-byte key, 100-byte value, one header), uncompressed, into reused memory: the
// idempotent produce path's per-batch cost.
func BenchmarkBatchEncode(b *testing.B) {
	parts := [][]kafka.Message{benchMsgs()}
	var enc batchEncoder
	var mem []byte
	b.ReportAllocs()
	for b.Loop() {
		rb, err := enc.encode(mem, parts)
		if err != nil {
			b.Fatal(err)
		}
		rb.seal(1, 0, 0)
		mem = rb.raw
	}
	b.SetBytes(int64(len(mem)))
}

// BenchmarkBatchDecode measures decoding the batch of BenchmarkBatchEncode.
func BenchmarkBatchDecode(b *testing.B) {
	raw := testBatch(b, 0, benchMsgs()...)
	var d BatchDecoder
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, _, _, err := d.Decode(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// TestScanBatchesOldFormat proves that a message set of magic v0 or v1 (Kafka before 0.11, or a
// topic still on message.format.version < 0.11) is refused with ErrOldMessageFormat, not misread:
// kdedup reads and writes record batches (magic v2) only.
func TestScanBatchesOldFormat(t *testing.T) {
	for _, magic := range []byte{0, 1} {
		// offset, message size, CRC, magic, attributes, (v1: timestamp), null key, value "v".
		msg := binary.BigEndian.AppendUint64(nil, 7)
		body := []byte{magic, 0}
		if magic == 1 {
			body = binary.BigEndian.AppendUint64(body, 1700000000000)
		}
		body = binary.BigEndian.AppendUint32(body, 0xffffffff)
		body = append(binary.BigEndian.AppendUint32(body, 1), 'v')
		msg = binary.BigEndian.AppendUint32(msg, uint32(4+len(body)))
		msg = append(binary.BigEndian.AppendUint32(msg, crc32.ChecksumIEEE(body)), body...)
		if _, _, err := scanBatches(msg, 7); !errors.Is(err, ErrOldMessageFormat) {
			t.Errorf("magic %d: scanBatches = %v, want ErrOldMessageFormat", magic, err)
		}
	}
}
