package consumer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/segmentio/kafka-go"
)

// A record batch (magic v2) as the idempotent producer sends it in a RawProduce request. The
// encoded form starts with the 4-byte size that a produce request puts before a partition's
// record set, so it is exactly what protocol.RawRecordSet copies onto the wire. Offsets below are
// relative to the start of the batch, i.e. 4 bytes into the encoded form; all integers are
// big-endian:
//
//	 0 int64  base offset (0; the broker assigns offsets)
//	 8 int32  batch length: bytes after this field
//	12 int32  partition leader epoch (-1; the broker sets it)
//	16 int8   magic (2)
//	17 uint32 CRC-32C of every byte from offset 21 to the end
//	21 int16  attributes: compression codec in the low 3 bits, nothing else
//	23 int32  last offset delta (record count - 1)
//	27 int64  first timestamp (ms)
//	35 int64  max timestamp (ms)
//	43 int64  producer id
//	51 int16  producer epoch
//	53 int32  base sequence
//	57 int32  record count
//	61        records, compressed as one block when the attributes name a codec
//
// Each record is: varint length of the rest, int8 attributes (0), varint timestamp delta from the
// first timestamp, varint offset delta, varint key length (-1 for null) and key, varint value
// length (-1 for null) and value, varint header count, and per header a varint key length and
// key, varint value length (-1 for null) and value (varints are zigzag, as in protobuf).
const (
	batchSizePrefix   = 4
	batchHeaderLen    = 61
	batchCRCStart     = 21
	batchOffCRC       = 17
	batchOffProducer  = 43
	batchOffEpoch     = 51
	batchOffSequence  = 53
	batchOffCount     = 57
	batchOffLastDelta = 23
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// errEmptyBatch is returned by batchEncoder.encode for an empty message list.
var errEmptyBatch = errors.New("consumer: record batch without records")

// batchEncoder builds record batches. It keeps scratch space between calls and is not safe for
// concurrent use.
type batchEncoder struct {
	compression kafka.Compression
	records     appendWriter // uncompressed records, when compressing
	now         func() time.Time
}

// appendWriter is an io.Writer that appends to a byte slice.
type appendWriter struct{ b []byte }

// Write appends p; it never fails.
func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// encode returns the records of parts, in order, as one new record batch in the encoded form
// described above, without producer id, epoch and sequence: sealBatch sets them. Only Key,
// Value, Headers and Time of the messages are used; a zero Time means now, as in kafka-go. The
// batch is built in dst's memory when it is large enough (dst must not be in use any more), else
// in a new slice; e keeps no reference to it.
func (e *batchEncoder) encode(dst []byte, parts [][]kafka.Message) ([]byte, error) {
	now := time.Now
	if e.now != nil {
		now = e.now
	}
	nowMs := now().UnixMilli()
	n, first := 0, int64(0)
	size := batchSizePrefix + batchHeaderLen
	for _, msgs := range parts {
		for i := range msgs {
			ts := recordTime(&msgs[i], nowMs)
			if n == 0 {
				first = ts
			}
			size += recordLen(&msgs[i], int64(n), ts-first)
			n++
		}
	}
	if n == 0 {
		return nil, errEmptyBatch
	}
	codec := e.compression.Codec()
	compressed := e.compression != 0 && codec != nil
	b := dst[:0]
	if cap(b) < size && (!compressed || dst == nil) { // compressed output is smaller, or grows by append
		b = make([]byte, 0, size)
	}
	b = append(b, make([]byte, batchSizePrefix+batchHeaderLen)...)
	if !compressed {
		var maxTs int64
		b, maxTs = appendRecords(b, parts, first, nowMs)
		writeBatchHeader(b, n, first, maxTs, 0)
		return b, nil
	}
	var maxTs int64
	e.records.b, maxTs = appendRecords(e.records.b[:0], parts, first, nowMs)
	out := &appendWriter{b: b}
	zw := codec.NewWriter(out)
	_, err := zw.Write(e.records.b)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("consumer: compress record batch (%s): %w", codec.Name(), err)
	}
	b = out.b
	writeBatchHeader(b, n, first, maxTs, int16(e.compression)&0x7)
	return b, nil
}

// appendRecords appends the records of parts to b, with timestamps relative to first, and
// returns b and the largest timestamp.
func appendRecords(b []byte, parts [][]kafka.Message, first, nowMs int64) ([]byte, int64) {
	n, maxTs := int64(0), first
	for _, msgs := range parts {
		for i := range msgs {
			ts := recordTime(&msgs[i], nowMs)
			maxTs = max(maxTs, ts)
			b = appendRecord(b, &msgs[i], n, ts-first)
			n++
		}
	}
	return b, maxTs
}

// writeBatchHeader fills the size prefix and the header of the encoded batch b, with producer
// id -1, epoch -1 and sequence -1 (no producer) and no checksum yet.
func writeBatchHeader(b []byte, n int, first, maxTs int64, attrs int16) {
	be := binary.BigEndian
	be.PutUint32(b[0:], uint32(len(b)-batchSizePrefix))
	h := b[batchSizePrefix:]
	be.PutUint64(h[0:], 0)
	be.PutUint32(h[8:], uint32(len(h)-12))
	be.PutUint32(h[12:], 0xffffffff)
	h[16] = 2
	be.PutUint32(h[batchOffCRC:], 0) // sealBatch computes it
	be.PutUint16(h[21:], uint16(attrs))
	be.PutUint32(h[batchOffLastDelta:], uint32(n-1))
	be.PutUint64(h[27:], uint64(first))
	be.PutUint64(h[35:], uint64(maxTs))
	be.PutUint64(h[batchOffProducer:], ^uint64(0))
	be.PutUint16(h[batchOffEpoch:], 0xffff)
	be.PutUint32(h[batchOffSequence:], 0xffffffff)
	be.PutUint32(h[batchOffCount:], uint32(n))
}

// sealBatch stamps producer id, epoch and base sequence into the encoded batch b and computes
// its checksum. b must not have been handed to a request yet: the bytes of a sent batch are never
// changed (a retry re-sends them as they are), so a batch that needs another identity is copied
// first (see resealBatch).
func sealBatch(b []byte, id producerID, baseSeq int32) {
	be := binary.BigEndian
	h := b[batchSizePrefix:]
	be.PutUint64(h[batchOffProducer:], uint64(id.id))
	be.PutUint16(h[batchOffEpoch:], uint16(id.epoch))
	be.PutUint32(h[batchOffSequence:], uint32(baseSeq))
	be.PutUint32(h[batchOffCRC:], crc32.Checksum(h[batchCRCStart:], crc32c))
}

// resealBatch returns a copy of the encoded batch b sealed with another identity and sequence.
func resealBatch(b []byte, id producerID, baseSeq int32) []byte {
	c := make([]byte, len(b))
	copy(c, b)
	sealBatch(c, id, baseSeq)
	return c
}

// batchRecords returns the record count of the encoded batch b.
func batchRecords(b []byte) int32 {
	return int32(binary.BigEndian.Uint32(b[batchSizePrefix+batchOffCount:]))
}

// recordTime returns m's timestamp in milliseconds, nowMs for a zero time.
func recordTime(m *kafka.Message, nowMs int64) int64 {
	if m.Time.IsZero() {
		return nowMs
	}
	return m.Time.UnixMilli()
}

// recordLen returns the encoded size of m, including its length prefix.
func recordLen(m *kafka.Message, offsetDelta, tsDelta int64) int {
	n := recordBodyLen(m, offsetDelta, tsDelta)
	return varintLen(int64(n)) + n
}

// recordBodyLen returns the encoded size of m without its length prefix.
func recordBodyLen(m *kafka.Message, offsetDelta, tsDelta int64) int {
	n := 1 + varintLen(tsDelta) + varintLen(offsetDelta) + nullBytesLen(m.Key) + nullBytesLen(m.Value) +
		varintLen(int64(len(m.Headers)))
	for i := range m.Headers {
		h := &m.Headers[i]
		n += varintLen(int64(len(h.Key))) + len(h.Key) + nullBytesLen(h.Value)
	}
	return n
}

// appendRecord appends the encoding of m to b.
func appendRecord(b []byte, m *kafka.Message, offsetDelta, tsDelta int64) []byte {
	b = binary.AppendVarint(b, int64(recordBodyLen(m, offsetDelta, tsDelta)))
	b = append(b, 0)
	b = binary.AppendVarint(b, tsDelta)
	b = binary.AppendVarint(b, offsetDelta)
	b = appendNullBytes(b, m.Key)
	b = appendNullBytes(b, m.Value)
	b = binary.AppendVarint(b, int64(len(m.Headers)))
	for i := range m.Headers {
		h := &m.Headers[i]
		b = binary.AppendVarint(b, int64(len(h.Key)))
		b = append(b, h.Key...)
		b = appendNullBytes(b, h.Value)
	}
	return b
}

func appendNullBytes(b, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(b, -1)
	}
	b = binary.AppendVarint(b, int64(len(v)))
	return append(b, v...)
}

func nullBytesLen(v []byte) int {
	if v == nil {
		return 1
	}
	return varintLen(int64(len(v))) + len(v)
}

// varintLen returns the size of v as a zigzag varint.
func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}
