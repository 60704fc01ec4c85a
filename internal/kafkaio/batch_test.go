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

// wholeDecoder decodes a record batch whole, the way tests want it: header checked, checksum
// checked, every record decoded (headers in its slab). Its memory is reused from call to call.
type wholeDecoder struct {
	BatchDecoder
	recs []batchRecord
	hdrs headerSlab
}

// Decode decodes the first record batch of b and returns its header, its records and the rest
// of b; on failure, the whole of b. The records are valid until the next call.
func (d *wholeDecoder) Decode(b []byte) (hdr kmsg.RecordBatch, recs []batchRecord, rest []byte, err error) {
	d.hdrs.reset()
	d.recs = d.recs[:0]
	if hdr, rest, err = d.header(b); err != nil {
		return hdr, nil, b, err
	}
	if err = checkCRC(&hdr, b); err != nil {
		return hdr, nil, b, err
	}
	it, err := d.open(&hdr)
	if err != nil {
		return hdr, nil, b, err
	}
	for it.left > 0 {
		d.recs = append(d.recs, batchRecord{})
		if err := it.next(&d.recs[len(d.recs)-1], &d.hdrs, d.limit().MaxHeaders); err != nil {
			return hdr, nil, b, err
		}
	}
	return hdr, d.recs, rest, nil
}

// checkDecode decodes b (one batch and nothing after it) and compares it with want, the header
// encode produced, and msgs, the records it was given (a zero Time stands for now).
func checkDecode(t *testing.T, b []byte, want kmsg.RecordBatch, msgs []Record, now time.Time) {
	t.Helper()
	var d wholeDecoder
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
		got := Record{Key: r.key, Value: r.value, Time: time.UnixMilli(hdr.FirstTimestamp + r.tsDelta), Headers: r.headers}
		if d := recordDiff(got, m); d != "" || r.offsetDelta != int32(i) {
			t.Errorf("record %d (offset delta %d): %s", i, r.offsetDelta, d)
		}
	}
}

// testBatch returns an encoded, sealed batch of msgs.
func testBatch(t testing.TB, c kafka.Compression, msgs ...Record) []byte {
	enc := batchEncoder{compression: c}
	b, err := enc.encode(nil, [][]Record{msgs})
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
	var d wholeDecoder
	var got []string
	rest := set
	for len(rest) > 0 {
		_, recs, r, err := d.Decode(rest)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			got = append(got, string(rec.value))
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
	var d wholeDecoder
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
	for i, m := range []Record{
		{Key: []byte("k"), Value: []byte("v"), Headers: []Header{{Key: "h", Value: []byte("x")}, {Key: "", Value: nil}}, Time: ts},
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

// FuzzBatchDecode proves that decoding never panics, never returns more records than the batch
// claims, and that walking a record set yields offsets in order and refusals within their batch,
// whatever the bytes. The checksum is fixed first (fixCRC), so that mutated batches get past it
// to the records.
func FuzzBatchDecode(f *testing.F) {
	for _, c := range []kafka.Compression{0, kafka.Gzip, kafka.Snappy, kafka.Lz4, kafka.Zstd} {
		f.Add(testBatch(f, c, testMsgs(fmt.Sprint(c), 4)...))
	}
	hdrs := testMsgs("h", 2)
	hdrs[0].Headers = []Header{{Key: "a", Value: []byte("b")}, {Key: "", Value: nil}}
	f.Add(testBatch(f, 0, hdrs...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		b = fixCRC(b)
		d := wholeDecoder{BatchDecoder: BatchDecoder{limits: DecodeLimits{MaxBatchBytes: 1 << 20, MaxHeaders: 64}}}
		hdr, recs, rest, err := d.Decode(b)
		if err == nil && (len(recs) != int(hdr.NumRecords) || len(rest) >= len(b)) {
			t.Fatalf("%d records of %d, %d of %d bytes left", len(recs), hdr.NumRecords, len(rest), len(b))
		}
		if err != nil && len(rest) != len(b) {
			t.Fatalf("error %v with %d of %d bytes left", err, len(rest), len(b))
		}
		if _, _, err := scanBatches(b, 0); err == nil {
			checkWalk(t, b)
		}
	})
}

// fixCRC returns b with the checksum of the batch it starts with recomputed, when b holds a
// batch header and the batch.
func fixCRC(b []byte) []byte {
	if len(b) < batchHeaderLen {
		return b
	}
	end := batchLengthStart + int64(int32(binary.BigEndian.Uint32(b[8:])))
	if end < crcEnd || end > int64(len(b)) {
		return b
	}
	b = bytes.Clone(b)
	binary.BigEndian.PutUint32(b[crcEnd-4:], crc32.Checksum(b[crcEnd:end], crc32c))
	return b
}

// checkWalk walks the record set b as the reader does and checks that the walk's position only
// grows, that no record is below the offset fetched, and that refusals are well formed. (A
// crafted batch may repeat offsets within itself; a broker assigns them.)
func checkWalk(t *testing.T, b []byte) {
	dec := BatchDecoder{retain: true, limits: DecodeLimits{MaxBatchBytes: 1 << 20, MaxHeaders: 64}}
	var s recordSet
	var hs headerSlab
	s.reset(&dec, &fetchResponse{part: &kmsg.FetchResponseTopicPartition{RecordBatches: b}}, false)
	next := s.next
	for range 1 << 16 {
		rec, ok := s.nextRecord(&hs)
		r := s.takeRefused()
		switch {
		case ok && rec.offset < 0:
			t.Fatalf("record at offset %d, below the offset fetched", rec.offset)
		case r != nil && (r.Offset > r.LastOffset || r.Offset < 0 || r.Err == nil):
			t.Fatalf("refusal %+v", r)
		case s.next < next:
			t.Fatalf("walk went back from %d to %d", next, s.next)
		case !ok && r == nil:
			return
		}
		next = s.next
	}
}

// benchMsgs returns 1000 records of the worker's shape: 16-byte key, 100-byte value, one header.
func benchMsgs() []Record {
	msgs := make([]Record, 1000)
	value := bytes.Repeat([]byte("v"), 100)
	for i := range msgs {
		msgs[i] = Record{Key: fmt.Appendf(nil, "key-%012d", i), Value: value, Time: time.UnixMilli(1_700_000_000_000 + int64(i)),
			Headers: []Header{{Key: "trace", Value: []byte("0123456789abcdef")}}}
	}
	return msgs
}

// BenchmarkBatchEncode measures encoding and sealing a batch of 1000 records of the worker's
// shape (16-byte key, 100-byte value, one header) and of the loadtest's (loadtestMsgs: three
// headers), uncompressed, into reused memory: the idempotent produce path's per-batch cost.
func BenchmarkBatchEncode(b *testing.B) {
	for _, c := range []struct {
		name string
		msgs func() []Record
	}{{"shape=worker", benchMsgs}, {"shape=loadtest", loadtestMsgs}} {
		b.Run(c.name, func(b *testing.B) {
			parts := [][]Record{c.msgs()}
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
		})
	}
}

// BenchmarkBatchDecode measures decoding the batch of BenchmarkBatchEncode.
func BenchmarkBatchDecode(b *testing.B) {
	raw := testBatch(b, 0, benchMsgs()...)
	var d wholeDecoder
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

// loadtestMsgs returns 1000 records of the shape kdedup loadtest writes with -field json:id: a
// 12-byte key, a JSON value of about 120 bytes with an id, and three headers (run, sequence,
// send time).
func loadtestMsgs() []Record {
	msgs := make([]Record, 1000)
	for i := range msgs {
		msgs[i] = Record{Key: fmt.Appendf(nil, "ent-%08d", i%977), Time: time.UnixMilli(1_700_000_000_000 + int64(i)),
			Value: fmt.Appendf(nil, `{"id":"%016x","lt_pad":"%s"}`, i*7919, bytes.Repeat([]byte("x"), 80)),
			Headers: []Header{{Key: "lt-run", Value: []byte("0123456789abcdef")},
				{Key: "lt-seq", Value: fmt.Appendf(nil, "%d", 100000+i)},
				{Key: "lt-sent", Value: fmt.Appendf(nil, "%d", 1_700_000_000_000_000_000+int64(i))}}}
	}
	return msgs
}

// BenchmarkRecordWalk measures the input path's decoding alone: walking a fetched record set of
// 16 batches of 1000 records, of the worker's shape (benchMsgs: 16-byte key, 100-byte value, one
// header) uncompressed or compressed, and of the loadtest's shape (loadtestMsgs: three headers)
// uncompressed, into kafka-go messages with their headers, as PartitionReader.take does, in
// reused memory (one decoder per goroutine), its memory handed back every 1000 records as Fetch
// does. The same benchmark run against main's decoder is the baseline (docs/hacking.md):
//
//	go test -run '^$' -bench RecordWalk -count 10 ./internal/kafkaio/ | benchstat -
func BenchmarkRecordWalk(b *testing.B) {
	type walkCase struct {
		name string
		c    kafka.Compression
		msgs func() []Record
	}
	cases := []walkCase{{"codec=none", 0, benchMsgs}, {"codec=lz4", kafka.Lz4, benchMsgs},
		{"codec=zstd", kafka.Zstd, benchMsgs}, {"shape=loadtest", 0, loadtestMsgs}}
	for _, wc := range cases {
		c := wc.c
		b.Run(wc.name, func(b *testing.B) {
			var set []byte
			for i := range 16 {
				batch := testBatch(b, c, wc.msgs()...)
				binary.BigEndian.PutUint64(batch, uint64(i*1000))
				set = append(set, batch...)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(set)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := newBenchWalker(set)
				for pb.Next() {
					if n := w.walk(); n != 16000 {
						b.Fatalf("%d records walked", n)
					}
				}
			})
		})
	}
}

// benchWalker walks one record set again and again.
type benchWalker struct {
	dec  BatchDecoder
	set  recordSet
	hs   headerSlab
	res  *fetchResponse
	msgs []Record
}

func newBenchWalker(set []byte) *benchWalker {
	w := &benchWalker{res: &fetchResponse{part: &kmsg.FetchResponseTopicPartition{RecordBatches: set}}}
	w.dec.retain = true
	return w
}

// walk walks the set once and returns how many records it yielded.
func (w *benchWalker) walk() int {
	w.set.reset(&w.dec, w.res, false)
	n := 0
	for ; ; n++ {
		if n%1000 == 0 {
			w.dec.recycle()
			w.hs.reset()
			w.msgs = w.msgs[:0]
		}
		rec, ok := w.set.nextRecord(&w.hs)
		if !ok {
			return n
		}
		w.msgs = append(w.msgs, Record{Offset: rec.offset, Key: rec.rec.key, Value: rec.rec.value,
			Headers: rec.rec.headers, Time: time.UnixMilli(rec.time)})
	}
}
