package kafkaio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// bombWriter streams a batch's records into a compressor without holding them: a value of
// valueSize zero bytes is written in chunks of one shared zero buffer.
type bombWriter struct {
	w     io.Writer
	zeros []byte
}

func (b *bombWriter) varint(v int64) { b.write(binary.AppendVarint(nil, v)) }

func (b *bombWriter) write(p []byte) {
	if _, err := b.w.Write(p); err != nil {
		panic(err)
	}
}

// zeros writes n zero bytes.
func (b *bombWriter) zeroBytes(n int) {
	for n > 0 {
		k := min(n, len(b.zeros))
		b.write(b.zeros[:k])
		n -= k
	}
}

// valueRecord writes record i with a null key and a value of size zero bytes.
func (b *bombWriter) valueRecord(i, size int) {
	body := 1 + varintLen(0) + varintLen(int64(i)) + 1 + varintLen(int64(size)) + size + 1
	b.varint(int64(body))
	b.write([]byte{0})
	b.varint(0)
	b.varint(int64(i))
	b.varint(-1)
	b.varint(int64(size))
	b.zeroBytes(size)
	b.varint(0)
}

// headersRecord writes record 0 with null key and value and n empty headers (name "", value "").
func (b *bombWriter) headersRecord(n int) {
	body := 1 + 1 + 1 + 1 + 1 + varintLen(int64(n)) + 2*n
	b.varint(int64(body))
	b.write([]byte{0, 0, 0}) // attributes, timestamp delta 0, offset delta 0
	b.varint(-1)
	b.varint(-1)
	b.varint(int64(n))
	b.zeroBytes(2 * n) // each header: name length 0, value length 0
}

// countWriter counts what is written to it.
type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// craftBatch returns a sealed record batch at offset first of n records, written by write into
// compressor c's stream (zstd: klauspost's encoder, declaring the content's size in the frame
// when declare is set), never holding the records uncompressed.
func craftBatch(t testing.TB, c kafka.Compression, first int64, n int, declare bool, write func(*bombWriter)) []byte {
	t.Helper()
	var out bytes.Buffer
	var w io.WriteCloser
	if c == kafka.Zstd {
		size := int64(-1)
		if declare {
			var cw countWriter
			write(&bombWriter{w: &cw, zeros: make([]byte, 1<<20)})
			size = cw.n
		}
		enc, err := zstd.NewWriter(nil)
		if err != nil {
			t.Fatal(err)
		}
		enc.ResetContentSize(&out, size)
		w = enc
	} else {
		w = c.Codec().NewWriter(&out)
	}
	write(&bombWriter{w: w, zeros: make([]byte, 1<<20)})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	hdr := kmsg.RecordBatch{FirstOffset: first, PartitionLeaderEpoch: -1, Magic: 2, Attributes: int16(c),
		LastOffsetDelta: int32(n - 1), ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(n)}
	rb := recordBatch{raw: append(make([]byte, sizePrefix+batchHeaderLen), out.Bytes()...), hdr: hdr}
	rb.hdr.Length = int32(len(rb.raw) - sizePrefix - batchLengthStart)
	rb.seal(-1, -1, -1)
	return rb.raw[sizePrefix:]
}

// at returns a copy of the batch b with its first offset set to offset (outside the checksum).
func at(b []byte, offset int64) []byte {
	c := bytes.Clone(b)
	binary.BigEndian.PutUint64(c, uint64(offset))
	return c
}

// snappyClaim returns a xerial snappy stream of one chunk whose block claims n decoded bytes.
func snappyClaim(n uint64) []byte {
	b := append(bytes.Clone(xerialMagic), 0, 0, 0, 1, 0, 0, 0, 1)
	block := binary.AppendUvarint(nil, n)
	block = append(block, 0) // a literal tag, cut short
	b = binary.BigEndian.AppendUint32(b, uint32(len(block)))
	return append(b, block...)
}

// rawBatch returns a sealed batch at offset first of n records whose compressed records are
// records, as given.
func rawBatch(c kafka.Compression, first int64, n int, records []byte) []byte {
	hdr := kmsg.RecordBatch{FirstOffset: first, PartitionLeaderEpoch: -1, Magic: 2, Attributes: int16(c),
		LastOffsetDelta: int32(n - 1), ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(n)}
	rb := recordBatch{raw: append(make([]byte, sizePrefix+batchHeaderLen), records...), hdr: hdr}
	rb.hdr.Length = int32(len(rb.raw) - sizePrefix - batchLengthStart)
	rb.seal(-1, -1, -1)
	return rb.raw[sizePrefix:]
}

// walked is what walking a record set gave: the values of its records, the refusals, in order,
// and the offset after the walk.
type walked struct {
	values  []string
	refused []RefusedInput
	next    int64
}

// walk walks set (fetched from offset from) as PartitionReader does, refusals handed out and
// walked past, and returns what it gave and the bytes it allocated.
func walk(t *testing.T, limits DecodeLimits, set []byte, from int64) (walked, uint64) {
	t.Helper()
	d := BatchDecoder{retain: true, limits: limits}
	var s recordSet
	var hs headerSlab
	var w walked
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s.reset(&d, &fetchResponse{part: &kmsg.FetchResponseTopicPartition{RecordBatches: set}, from: from}, false)
	for {
		rec, ok := s.nextRecord(&hs)
		if ok {
			w.values = append(w.values, string(rec.rec.value))
			continue
		}
		r := s.takeRefused()
		if r == nil {
			break
		}
		w.refused = append(w.refused, *r)
	}
	runtime.ReadMemStats(&after)
	w.next = s.next
	return w, after.TotalAlloc - before.TotalAlloc
}

// TestDecodeBombs proves that a batch that expands past the decode limit, in every codec, and a
// record with more headers than the limit, are refused within a bounded allocation, that the
// records around them are walked, and that the walk goes on after them.
func TestDecodeBombs(t *testing.T) {
	const limit = 32 << 20
	limits := DecodeLimits{MaxBatchBytes: limit, MaxHeaders: 1 << 16}
	sixteen := func(b *bombWriter) { // 16 values of 8 MiB: 128 MiB
		for i := range 16 {
			b.valueRecord(i, 8<<20)
		}
	}
	for _, tc := range []struct {
		name   string
		bomb   func(t *testing.T) []byte
		n      int
		reason string
	}{
		{"zstd stream", func(t *testing.T) []byte { return craftBatch(t, kafka.Zstd, 3, 16, false, sixteen) }, 16, RefusalInputTooLarge},
		{"zstd declared size", func(t *testing.T) []byte { return craftBatch(t, kafka.Zstd, 3, 16, true, sixteen) }, 16, RefusalInputTooLarge},
		{"gzip", func(t *testing.T) []byte { return craftBatch(t, kafka.Gzip, 3, 16, false, sixteen) }, 16, RefusalInputTooLarge},
		{"lz4", func(t *testing.T) []byte { return craftBatch(t, kafka.Lz4, 3, 16, false, sixteen) }, 16, RefusalInputTooLarge},
		{"snappy", func(t *testing.T) []byte { return craftBatch(t, kafka.Snappy, 3, 16, false, sixteen) }, 16, RefusalInputTooLarge},
		{"snappy claims 4 GiB", func(*testing.T) []byte { return rawBatch(kafka.Snappy, 3, 1, snappyClaim(1<<32-1)) }, 1, RefusalInputTooLarge},
		{"10 million headers", func(t *testing.T) []byte {
			return craftBatch(t, kafka.Zstd, 3, 1, false, func(b *bombWriter) { b.headersRecord(10_000_000) })
		}, 1, RefusalInputTooManyHeaders},
		{"record count", func(t *testing.T) []byte {
			return withCount(at(testBatch(t, kafka.Zstd, testMsgs("x", 3)...), 3), 1<<30)
		}, 3, RefusalInputCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := at(testBatch(t, kafka.Zstd, testMsgs("a", 3)...), 0)
			after := at(testBatch(t, 0, testMsgs("b", 2)...), int64(3+tc.n))
			set := append(append(append([]byte{}, before...), tc.bomb(t)...), after...)
			w, alloc := walk(t, limits, set, 0)
			equalStrings(t, "records", w.values, valuesOf(testMsgs("a", 3), testMsgs("b", 2)))
			if len(w.refused) != 1 {
				t.Fatalf("refusals %+v, want one", w.refused)
			}
			r := w.refused[0]
			if r.Offset != 3 || r.LastOffset != int64(3+tc.n-1) || r.Reason != tc.reason || w.next != int64(5+tc.n) {
				t.Errorf("refused %d-%d (%s: %v), walked to %d; want 3-%d (%s), walked to %d", r.Offset, r.LastOffset, r.Reason, r.Err, w.next, 3+tc.n-1, tc.reason, 5+tc.n)
			}
			if !errors.Is(r.Err, ErrDecodeLimit) && !errors.Is(r.Err, ErrCorruptBatch) {
				t.Errorf("refusal error %v wraps neither ErrDecodeLimit nor ErrCorruptBatch", r.Err)
			}
			// The buffer doubles up to limit+1 bytes (about 2*limit allocated in all), plus the
			// codec's own memory (zstd's window).
			if alloc > 4*limit {
				t.Errorf("walking allocated %d MiB, want at most %d MiB", alloc>>20, 4*limit>>20)
			}
		})
	}
}

// TestDecodeHeadersLimitOneRecord proves that a record with too many headers is refused alone:
// the records of its batch before and after it are walked.
func TestDecodeHeadersLimitOneRecord(t *testing.T) {
	msgs := testMsgs("a", 3)
	msgs[1].Headers = make([]Header, 10)
	for i := range msgs[1].Headers {
		msgs[1].Headers[i] = Header{Key: "h", Value: []byte("v")}
	}
	set := testBatch(t, kafka.Lz4, msgs...)
	w, _ := walk(t, DecodeLimits{MaxBatchBytes: 1 << 20, MaxHeaders: 9}, set, 0)
	equalStrings(t, "records", w.values, []string{string(msgs[0].Value), string(msgs[2].Value)})
	if len(w.refused) != 1 || w.refused[0].Offset != 1 || w.refused[0].LastOffset != 1 || w.refused[0].Reason != RefusalInputTooManyHeaders || w.next != 3 {
		t.Errorf("refused %+v, walked to %d; want offset 1 alone for its headers, walked to 3", w.refused, w.next)
	}
}

// TestDecodeLimitsDefaults proves the defaults follow the fetch size and one setting raises them.
func TestDecodeLimitsDefaults(t *testing.T) {
	for _, tc := range []struct{ max, fetch, wantBytes, wantHeaders int }{
		{0, 16 << 20, 64 << 20, 256 << 10},
		{0, 1 << 20, 16 << 20, 64 << 10},
		{1 << 30, 16 << 20, 1 << 30, 4 << 20},
	} {
		if got := DefaultDecodeLimits(tc.max, tc.fetch); got.MaxBatchBytes != tc.wantBytes || got.MaxHeaders != tc.wantHeaders {
			t.Errorf("DefaultDecodeLimits(%d, %d) = %+v, want %d bytes, %d headers", tc.max, tc.fetch, got, tc.wantBytes, tc.wantHeaders)
		}
	}
}

// TestDecoderFreesLargeBuffers proves that a decompression buffer larger than an eighth of the
// limit is not kept for reuse.
func TestDecoderFreesLargeBuffers(t *testing.T) {
	d := BatchDecoder{retain: true, limits: DecodeLimits{MaxBatchBytes: 8 << 20, MaxHeaders: 100}}
	big := craftBatch(t, kafka.Lz4, 0, 1, false, func(b *bombWriter) { b.valueRecord(0, 2<<20) })
	small := testBatch(t, kafka.Lz4, testMsgs("s", 2)...)
	for _, b := range [][]byte{big, small, small} {
		hdr, _, err := d.header(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.open(&hdr); err != nil {
			t.Fatal(err)
		}
	}
	d.recycle()
	for _, b := range d.spare {
		if cap(b) > 1<<20 {
			t.Errorf("a spare buffer of %d bytes is kept, more than %d", cap(b), 1<<20)
		}
	}
	if len(d.spare) != 1 {
		t.Errorf("%d spare buffers, want 1 (the small one; the large one freed)", len(d.spare))
	}
}

// TestFetchResponseSizeCapped proves that a response's 4-byte size prefix is checked against the
// fetch's size before anything is allocated for it.
func TestFetchResponseSizeCapped(t *testing.T) {
	f := fetchRequest{maxBytes: 1 << 20, bufs: &bufferPool{}, epoch: -1}
	prefix := binary.BigEndian.AppendUint32(nil, 1<<31-1)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := f.readResponse(bytes.NewReader(prefix), 1)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrResponseTooLarge) {
		t.Fatalf("readResponse = %v, want ErrResponseTooLarge", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("readResponse allocated %d bytes for a response it refuses", n)
	}
}

// TestFetchResponseOneBatchPastLimit proves that a response far larger than its fetch's size,
// as a broker sends when a partition's first batch is larger than the limit (KIP-74), is read
// whole, and that a size prefix announcing such a response costs only the bytes that arrive.
func TestFetchResponseOneBatchPastLimit(t *testing.T) {
	const maxBytes = 64 << 10
	frame := func(body []byte, size int) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(size))
		return append(b, body...)
	}
	body := make([]byte, 3<<20) // about 48 times maxBytes: past twice it plus 1 MiB
	binary.BigEndian.PutUint32(body, 7)
	for i := 4; i < len(body); i++ {
		body[i] = byte(i)
	}
	got, err := readFrame(bytes.NewReader(frame(body, len(body))), 7, maxBytes, &bufferPool{})
	if err != nil {
		t.Fatalf("readFrame of %d bytes for a fetch of %d: %v", len(body), maxBytes, err)
	}
	if !bytes.Equal(got, body) {
		t.Fatal("readFrame returned other bytes than were sent")
	}

	lie := frame(body[:1<<20], 100<<20) // announces 100 MiB, sends 1 MiB
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = readFrame(bytes.NewReader(lie), 7, maxBytes, &bufferPool{})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("readFrame of a short response = %v, want io.ErrUnexpectedEOF", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 8<<20 {
		t.Errorf("readFrame allocated %d bytes for a response of 1 MiB that announced 100 MiB", n)
	}
}

// TestVarintIsBinaryVarint proves that the decoder's varints (varint, readVarint and readBytes,
// with their one- and two-byte paths) read what encoding/binary reads: the same value and length
// for every value around the one- to three-byte boundaries, non-minimal encodings, and truncated
// or overlong input failing the same way, from any index, and that a failed read makes every
// later one fail.
func TestVarintIsBinaryVarint(t *testing.T) {
	var inputs [][]byte
	for _, v := range []int64{0, 1, -1, 2, 31, 32, 63, 64, -64, -65, 127, 128, 8191, 8192, -8192, -8193, 1 << 20, -1 << 40, 1<<63 - 1, -1 << 63} {
		enc := binary.AppendVarint(nil, v)
		inputs = append(inputs, enc, append(enc, 0x55, 0x01), enc[:len(enc)-1])
	}
	inputs = append(inputs, []byte{0x80, 0x00}, []byte{0x81, 0x80, 0x00}, []byte{}, bytes.Repeat([]byte{0xff}, 11))
	for _, in := range inputs {
		wantV, wantN := binary.Varint(in)
		if v, n := varint(in); v != wantV || n != wantN {
			t.Errorf("varint(% x) = %d, %d; binary.Varint = %d, %d", in, v, n, wantV, wantN)
		}
		for _, pre := range []int{0, 3} { // read at index 0, and after three bytes
			b := append(bytes.Repeat([]byte{0x7f}, pre), in...)
			v, i := readVarint(b, pre)
			if bad := wantN <= 0; (i > len(b)) != bad || (!bad && (v != wantV || i != pre+wantN)) {
				t.Errorf("readVarint(% x, %d) = %d, %d; want %d, bad %v", b, pre, v, i, wantV, bad)
			}
			if _, j := readVarint(b, badIndex(b)); j <= len(b) {
				t.Errorf("readVarint(% x) after a failed read = index %d", b, j)
			}
		}
	}
	for _, n := range []int{-2, -1, 0, 1, 5, 63, 64, 65, 200} {
		for _, have := range []int{n - 1, n, n + 3} {
			in := append(binary.AppendVarint(nil, int64(n)), bytes.Repeat([]byte{'x'}, max(have, 0))...)
			got, i := readBytes(in, 0)
			left := len(in) - i
			wantBad := n < -1 || n > max(have, 0)
			switch {
			case (i > len(in)) != wantBad:
				t.Errorf("readBytes(len %d, %d there): index %d of %d", n, have, i, len(in))
			case wantBad:
				if _, j := readBytes(in, i); j <= len(in) {
					t.Errorf("readBytes after a failed read = index %d", j)
				}
			case n == -1 && (got != nil || left != max(have, 0)):
				t.Errorf("readBytes(len -1): %q, %d left", got, left)
			case n >= 0 && (len(got) != n || cap(got) != n || got == nil || left != max(have, 0)-n):
				t.Errorf("readBytes(len %d, %d there): len %d cap %d nil %v, %d left", n, have, len(got), cap(got), got == nil, left)
			}
		}
	}
}

// TestHeaderNamesInterned proves that header names come out right whatever their order from
// record to record (the slab compares each with the name last seen at its position first), and
// never alias the fetched bytes.
func TestHeaderNamesInterned(t *testing.T) {
	records := [][]Header{
		{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}},
		{{Key: "b", Value: []byte("3")}, {Key: "a", Value: []byte("4")}},
		{{Key: "a", Value: []byte("5")}, {Key: "bb", Value: nil}, {Key: "", Value: []byte{}}},
		{{Key: "a", Value: []byte("6")}, {Key: "b", Value: []byte("7")}},
	}
	var msgs []Record
	for i, hs := range records {
		msgs = append(msgs, Record{Value: []byte{byte('0' + i)}, Headers: hs})
	}
	raw := testBatch(t, 0, msgs...)
	var w benchWalker
	w.res = &fetchResponse{part: &kmsg.FetchResponseTopicPartition{RecordBatches: raw}}
	w.set.reset(&w.dec, w.res, false)
	for i, want := range records {
		rec, ok := w.set.nextRecord(&w.hs)
		if !ok {
			t.Fatalf("record %d missing", i)
		}
		if len(rec.rec.headers) != len(want) {
			t.Fatalf("record %d: %d headers, want %d", i, len(rec.rec.headers), len(want))
		}
		for j, h := range rec.rec.headers {
			if h.Key != want[j].Key || !bytes.Equal(h.Value, want[j].Value) || (h.Value == nil) != (want[j].Value == nil) {
				t.Errorf("record %d header %d = %q=%q, want %q=%q", i, j, h.Key, h.Value, want[j].Key, want[j].Value)
			}
		}
	}
	for i := range raw {
		raw[i] = 'z' // the fetched bytes are reused: the names must not change with them
	}
	for _, h := range w.hs.hdrs {
		if strings.Contains(h.Key, "z") {
			t.Errorf("header name %q aliases the fetched bytes", h.Key)
		}
	}
}

// refDecodeRecord is the reference for decodeRecord: the record body b decoded field by field
// with encoding/binary's varints, the plainest way. It returns the record, its headers (names
// as strings, values as slices of b), and an error of the same class decodeRecord returns.
func refDecodeRecord(b []byte, maxHeaders int) (batchRecord, []Header, error) {
	rec := batchRecord{offsetDelta: -1}
	bad := len(b) == 0
	if !bad {
		b = b[1:] // attributes
	}
	num := func() int64 {
		v, n := binary.Varint(b)
		if bad || n <= 0 {
			bad, b = true, nil
			return 0
		}
		b = b[n:]
		return v
	}
	field := func() []byte {
		n := num()
		switch {
		case bad || n == -1:
			return nil
		case n < 0 || n > int64(len(b)):
			bad, b = true, nil
			return nil
		}
		v := b[:n:n]
		b = b[n:]
		return v
	}
	rec.tsDelta = num()
	off := num()
	rec.key, rec.value = field(), field()
	n := num()
	if bad || off < 0 || off > 1<<31-1 || n < 0 || n > int64(len(b)/2) {
		return rec, nil, ErrCorruptBatch
	}
	rec.offsetDelta = int32(off)
	if n > int64(maxHeaders) {
		return rec, nil, errTooManyHeaders
	}
	var hs []Header
	for range n {
		name, value := field(), field()
		hs = append(hs, Header{Key: string(name), Value: value})
	}
	if bad || len(b) > 0 {
		return rec, nil, ErrCorruptBatch
	}
	return rec, hs, nil
}

// FuzzDecodeRecord proves that decodeRecord, with its inline one-byte paths, decodes any record
// body as refDecodeRecord does: the same fields (nil and empty told apart, slices of the body),
// the same headers appended to the slab, the same error class, and a nil slab that checks the
// same.
func FuzzDecodeRecord(f *testing.F) {
	for _, msgs := range [][]Record{loadtestMsgs()[:3], testMsgs("f", 2), benchMsgs()[:1]} {
		for i := range msgs {
			f.Add(appendRecordBody(nil, &msgs[i], recordBodyLen(&msgs[i], int64(i)*70, -int64(i)*9000), int64(i)*70, -int64(i)*9000)[1:], uint8(3))
		}
	}
	f.Add([]byte{0, 0, 0, 1, 1, 4, 1, 1, 0, 0}, uint8(2))
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, maxHeaders uint8) {
		want, wantHs, wantErr := refDecodeRecord(b, int(maxHeaders))
		hs := headerSlab{hdrs: []Header{{Key: "before"}}}
		var rec batchRecord
		err := decodeRecord(&rec, b, &hs, int(maxHeaders))
		switch {
		case (err == nil) != (wantErr == nil) || (err != nil && !errors.Is(err, wantErr)):
			t.Fatalf("error %v, reference %v", err, wantErr)
		case rec.offsetDelta != want.offsetDelta:
			t.Fatalf("offset delta %d, reference %d", rec.offsetDelta, want.offsetDelta)
		case err != nil:
			return // batchRecords.next truncates the slab to where it was
		case len(hs.hdrs) != 1+len(wantHs) || hs.hdrs[0].Key != "before":
			t.Fatalf("slab holds %d headers, want 1 + %d", len(hs.hdrs), len(wantHs))
		}
		if rec.tsDelta != want.tsDelta || !sameBytes(rec.key, want.key) || !sameBytes(rec.value, want.value) || len(rec.headers) != len(wantHs) {
			t.Fatalf("decoded %+v, reference %+v", rec, want)
		}
		for i, h := range rec.headers {
			if h.Key != wantHs[i].Key || !sameBytes(h.Value, wantHs[i].Value) {
				t.Fatalf("header %d = %q=%q, reference %q=%q", i, h.Key, h.Value, wantHs[i].Key, wantHs[i].Value)
			}
		}
		if err := decodeRecord(&rec, b, nil, int(maxHeaders)); err != nil || rec.headers != nil {
			t.Fatalf("with a nil slab: %v, headers %v", err, rec.headers)
		}
	})
}

// sameBytes reports whether a and b are equal and both nil or both not, and share their last
// byte's address with the same capacity (slices of the same body, cut to their length).
func sameBytes(a, b []byte) bool {
	return bytes.Equal(a, b) && (a == nil) == (b == nil) && len(a) == cap(a) && len(b) == cap(b) &&
		(len(a) == 0 || &a[len(a)-1] == &b[len(b)-1])
}
