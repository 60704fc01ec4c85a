package kafkaio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Record batches (magic v2) are encoded and decoded with franz-go's kmsg: kmsg.RecordBatch for
// the header, kmsg.Record for decoding each record. kafka-go's protocol package cannot stamp a
// producer id and sequence into a batch, so the idempotent producer cannot use it. What kmsg
// leaves to its caller is done here: the lengths (a record's Length and the batch's Length), the
// CRC-32C that covers everything after the CRC field, and compression of the records as one
// block.
//
// Records are encoded by appendRecord, a run of varint fields in kmsg.Record's order, rather than
// by kmsg.Record.AppendTo: on a batch of 1000 records of the worker's shape, AppendTo took 18-31%
// longer (BenchmarkBatchEncode, 20 interleaved runs), and TestAppendRecordIsKmsg proves the bytes
// are the same.
//
// The producer sends a batch with RawProduce, which copies protocol.RawRecordSet's bytes onto the
// wire as a partition's record set; a record set is preceded by its int32 size there, so an
// encoded batch here starts with that size prefix.
const (
	// sizePrefix is the int32 size of a produce request's record set.
	sizePrefix = 4
	// batchLengthStart is where the batch's Length field counts from: after FirstOffset (int64)
	// and Length (int32).
	batchLengthStart = 12
	// crcEnd is where the CRC's coverage starts: after FirstOffset (int64), Length (int32),
	// PartitionLeaderEpoch (int32), Magic (int8) and CRC (int32).
	crcEnd = 21
	// magicOffset is where the magic byte is, in every format: after FirstOffset (int64), Length
	// (int32) and PartitionLeaderEpoch (int32) of a batch, or Offset, MessageSize and CRC of a
	// v0/v1 message.
	magicOffset = 16
)

// batchHeaderLen is the size of a record batch header: kmsg's encoding of a batch without records.
var batchHeaderLen = len((&kmsg.RecordBatch{}).AppendTo(nil))

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// ErrCorruptBatch is wrapped by the error of a record batch whose checksum, lengths, magic byte,
// compression or records are wrong: a fetch that returns a batch with a wrong checksum fails (and
// is retried; a PartitionReader refuses the batch when it is still wrong after a few fetches); a
// batch whose checksum matches but whose records are wrong is refused input.
var ErrCorruptBatch = errors.New("kafkaio: corrupt record batch")

// ErrOldMessageFormat is wrapped by the error of a fetch that returned a message set of magic v0 or
// v1 (the formats before Kafka 0.11), which kdedup does not read: see scanBatches.
var ErrOldMessageFormat = errors.New("kafkaio: message format v0/v1 (before Kafka 0.11) is not supported")

// ErrBatchTooLarge is wrapped by the error of a fetch whose response holds part of a record batch
// and no complete one: the batch is larger than the fetch's size limit (a broker older than
// Kafka 0.10.1 does not send such a batch whole).
var ErrBatchTooLarge = errors.New("kafkaio: record batch larger than the fetch size limit")

// errEmptyBatch is returned by batchEncoder.encode for an empty message list.
var errEmptyBatch = errors.New("kafkaio: record batch without records")

// recordBatch is one encoded record batch, ready for RawProduce: raw is the size prefix, the
// header and the records; hdr is the header as encoded (its Records field is unused).
type recordBatch struct {
	raw []byte
	hdr kmsg.RecordBatch
}

// batchEncoder builds record batches. It keeps scratch space between calls and is not safe for
// concurrent use.
type batchEncoder struct {
	compression kafka.Compression
	records     []byte  // uncompressed records, when compressing
	lens        []int32 // the body length of each record of the batch being encoded
	now         func() time.Time
}

// encode returns the records of parts, in order, as one record batch without producer id, epoch
// and sequence (-1 each) and without checksum: seal sets them. Only Key, Value, Headers and Time
// of the messages are used; a zero Time means now, as in kafka-go. The batch is built in dst's
// memory when it is large enough (dst must not be in use any more), else in a new slice; e keeps
// no reference to it.
func (e *batchEncoder) encode(dst []byte, parts [][]Record) (recordBatch, error) {
	now := time.Now
	if e.now != nil {
		now = e.now
	}
	nowMs := now().UnixMilli()
	n, first, size := 0, int64(0), sizePrefix+batchHeaderLen
	e.lens = e.lens[:0]
	for _, msgs := range parts {
		for i := range msgs {
			ts := recordTime(&msgs[i], nowMs)
			if n == 0 {
				first = ts
			}
			body := recordBodyLen(&msgs[i], int64(n), ts-first)
			e.lens = append(e.lens, int32(body))
			size += varintLen(int64(body)) + body
			n++
		}
	}
	if n == 0 {
		return recordBatch{}, errEmptyBatch
	}
	codec := e.compression.Codec()
	compressed := e.compression != 0 && codec != nil
	b := dst[:0]
	if cap(b) < size && (!compressed || dst == nil) { // compressed output is smaller, or grows by append
		b = make([]byte, 0, size)
	}
	b = append(b, make([]byte, sizePrefix+batchHeaderLen)...)
	hdr := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(n - 1), FirstTimestamp: first,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(n),
	}
	if !compressed {
		b, hdr.MaxTimestamp = appendRecords(b, parts, e.lens, first, nowMs)
	} else {
		e.records, hdr.MaxTimestamp = appendRecords(e.records[:0], parts, e.lens, first, nowMs)
		var err error
		if b, err = compress(b, e.records, codec); err != nil {
			return recordBatch{}, err
		}
		hdr.Attributes = int16(e.compression) & 0x7
	}
	hdr.Length = int32(len(b) - sizePrefix - batchLengthStart)
	binary.BigEndian.PutUint32(b, uint32(len(b)-sizePrefix))
	rb := recordBatch{raw: b, hdr: hdr}
	rb.writeHeader()
	return rb, nil
}

// compress appends records compressed with codec to b.
func compress(b, records []byte, codec kafka.CompressionCodec) ([]byte, error) {
	out := bytes.NewBuffer(b)
	zw := codec.NewWriter(out)
	_, err := zw.Write(records)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("kafkaio: compress record batch (%s): %w", codec.Name(), err)
	}
	return out.Bytes(), nil
}

// appendRecords appends the records of parts, whose body lengths are lens, to b, with timestamps
// relative to first, and returns b and the largest timestamp.
func appendRecords(b []byte, parts [][]Record, lens []int32, first, nowMs int64) ([]byte, int64) {
	n, maxTs := int64(0), first
	for _, msgs := range parts {
		for i := range msgs {
			m := &msgs[i]
			ts := recordTime(m, nowMs)
			maxTs = max(maxTs, ts)
			b = appendRecordBody(b, m, int(lens[n]), n, ts-first)
			n++
		}
	}
	return b, maxTs
}

// writeHeader encodes b.hdr over the header of b.raw.
func (b *recordBatch) writeHeader() {
	b.hdr.AppendTo(b.raw[sizePrefix:sizePrefix])
}

// seal stamps producer id, epoch and base sequence into the batch and computes its checksum. The
// batch must not have been handed to a request yet: the bytes of a sent batch are never changed
// (a retry re-sends them as they are), so a batch that needs another identity is copied first
// (see resealed). Without idempotence, seal(-1, -1, -1) only computes the checksum.
func (b *recordBatch) seal(producerID int64, epoch int16, baseSeq int32) {
	b.hdr.ProducerID, b.hdr.ProducerEpoch, b.hdr.FirstSequence, b.hdr.CRC = producerID, epoch, baseSeq, 0
	b.writeHeader()
	b.hdr.CRC = int32(crc32.Checksum(b.raw[sizePrefix+crcEnd:], crc32c))
	b.writeHeader()
}

// resealed returns a copy of b sealed with another identity and sequence.
func (b *recordBatch) resealed(producerID int64, epoch int16, baseSeq int32) recordBatch {
	c := recordBatch{raw: bytes.Clone(b.raw), hdr: b.hdr}
	c.seal(producerID, epoch, baseSeq)
	return c
}

// recordTime returns m's timestamp in milliseconds, nowMs for a zero time.
func recordTime(m *Record, nowMs int64) int64 {
	if m.Time.IsZero() {
		return nowMs
	}
	return m.Time.UnixMilli()
}

// recordLen returns the encoded size of m in a batch, including its length prefix.
func recordLen(m *Record, offsetDelta, tsDelta int64) int {
	n := recordBodyLen(m, offsetDelta, tsDelta)
	return varintLen(int64(n)) + n
}

// recordBodyLen returns the encoded size of m without its length prefix: kmsg.Record's Length.
func recordBodyLen(m *Record, offsetDelta, tsDelta int64) int {
	n := 1 + varintLen(tsDelta) + varintLen(offsetDelta) + nullBytesLen(m.Key) + nullBytesLen(m.Value) +
		varintLen(int64(len(m.Headers)))
	for i := range m.Headers {
		h := &m.Headers[i]
		n += varintLen(int64(len(h.Key))) + len(h.Key) + nullBytesLen(h.Value)
	}
	return n
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

// BatchDecoder decodes record batches (magic v2) in place, within its DecodeLimits (see "Bounded
// decoding"): the keys, values and header values of the records it yields are slices into the
// fetched batch (or into the decoder's buffer, for a compressed batch), and its memory is reused
// from batch to batch, so a decoder in steady use allocates nothing per record. The zero value
// uses the default limits; it is not safe for concurrent use.
type BatchDecoder struct {
	limits DecodeLimits
	buf    []byte // decompressed records of the last batch
	// retain keeps the records decompressed for earlier batches valid until recycle: each
	// compressed batch gets a buffer of its own (kept in held), so that records of several
	// compressed batches can be in use at once.
	retain      bool
	held, spare [][]byte
	heldBytes   int
	z           decompressor
}

// maxSpareBuffers is how many decompression buffers a decoder keeps for reuse.
const maxSpareBuffers = 8

// limit returns d's limits, the defaults when none were set.
func (d *BatchDecoder) limit() DecodeLimits {
	if d.limits.MaxBatchBytes <= 0 || d.limits.MaxHeaders <= 0 {
		d.limits = d.limits.withDefaults(0)
	}
	return d.limits
}

// header decodes the header of the first record batch of b and returns it with the rest of b,
// without looking at the records. A batch that b holds only in part, as a fetch cut short by its
// size limit ends, gives io.ErrUnexpectedEOF; a batch whose magic byte is not 2 or whose length
// is impossible gives an error wrapping ErrCorruptBatch.
func (d *BatchDecoder) header(b []byte) (hdr kmsg.RecordBatch, rest []byte, err error) {
	if len(b) > magicOffset && b[magicOffset] != 2 {
		return hdr, b, fmt.Errorf("%w: magic %d", ErrCorruptBatch, b[magicOffset])
	}
	if err := hdr.UnsafeReadFrom(b); err != nil {
		if len(b) >= batchLengthStart && int(hdr.Length) < batchHeaderLen-batchLengthStart {
			return hdr, b, fmt.Errorf("%w: length %d", ErrCorruptBatch, hdr.Length)
		}
		return hdr, b, io.ErrUnexpectedEOF
	}
	return hdr, b[batchLengthStart+int(hdr.Length):], nil
}

// checkCRC checks the checksum of hdr, the header of the batch b starts with.
func checkCRC(hdr *kmsg.RecordBatch, b []byte) error {
	end := batchLengthStart + int(hdr.Length)
	if crc := crc32.Checksum(b[crcEnd:end], crc32c); int32(crc) != hdr.CRC {
		return fmt.Errorf("%w: checksum %08x, want %08x", ErrCorruptBatch, crc, uint32(hdr.CRC))
	}
	return nil
}

// open returns the records of the batch of hdr, whose checksum was checked, to be walked one at
// a time: decompressed within the limit, and framed (frameRecords). Its error wraps
// ErrDecodeLimit or ErrCorruptBatch.
func (d *BatchDecoder) open(hdr *kmsg.RecordBatch) (batchRecords, error) {
	records, err := d.uncompressed(hdr)
	if err != nil {
		return batchRecords{}, err
	}
	if err := frameRecords(records, int(hdr.NumRecords)); err != nil {
		return batchRecords{}, err
	}
	return batchRecords{b: records, left: int(hdr.NumRecords)}, nil
}

// uncompressed returns the records of hdr, decompressed into a buffer of d when they are
// compressed. A buffer that went over the limit is dropped at once.
func (d *BatchDecoder) uncompressed(hdr *kmsg.RecordBatch) ([]byte, error) {
	c := kafka.Compression(hdr.Attributes & attrCompression)
	if c == 0 {
		return hdr.Records, nil
	}
	out, err := d.z.decompress(d.nextBuffer(), hdr.Records, c, d.limit().MaxBatchBytes)
	if err != nil {
		d.buf = nil
		return nil, err
	}
	d.buf = out
	return out, nil
}

// nextBuffer returns an empty buffer for the next decompressed batch: the one of the last batch,
// or with retain a spare one, keeping the last one in held. A buffer larger than spareMax is not
// reused.
func (d *BatchDecoder) nextBuffer() []byte {
	if d.buf != nil && d.retain {
		d.held = append(d.held, d.buf)
		d.heldBytes += cap(d.buf)
		d.buf = nil
	}
	if cap(d.buf) > d.spareMax() {
		d.buf = nil
	}
	if d.buf == nil {
		if n := len(d.spare); n > 0 {
			d.buf, d.spare[n-1], d.spare = d.spare[n-1], nil, d.spare[:n-1]
		}
	}
	return d.buf[:0]
}

// spareMax is the largest buffer d keeps for reuse.
func (d *BatchDecoder) spareMax() int { return d.limit().MaxBatchBytes / 8 }

// holding returns how many bytes of decompressed batches before the last one the records
// yielded since recycle may point into.
func (d *BatchDecoder) holding() int { return d.heldBytes }

// recycle makes the buffers of the batches decompressed before the last one available again
// (with retain): no record of theirs may be in use any more. The last batch's records stay
// valid. Buffers larger than spareMax, and more than maxSpareBuffers, are freed.
func (d *BatchDecoder) recycle() {
	for _, b := range d.held {
		if cap(b) <= d.spareMax() && len(d.spare) < maxSpareBuffers {
			d.spare = append(d.spare, b)
		}
	}
	clear(d.held)
	d.held, d.heldBytes = d.held[:0], 0
}

// appendRecord appends the encoding of m to b: the fields of kmsg.Record, in its order.
func appendRecord(b []byte, m *Record, offsetDelta, tsDelta int64) []byte {
	return appendRecordBody(b, m, recordBodyLen(m, offsetDelta, tsDelta), offsetDelta, tsDelta)
}

// appendRecordBody appends the encoding of m, whose body is bodyLen bytes long (recordBodyLen),
// to b. The encoder computes every record's length for the batch's size first, and keeps it for
// this.
func appendRecordBody(b []byte, m *Record, bodyLen int, offsetDelta, tsDelta int64) []byte {
	b = appendVarint(b, int64(bodyLen))
	b = append(b, 0) // attributes
	b = appendVarint(b, tsDelta)
	b = appendVarint(b, offsetDelta)
	b = appendNullBytes(b, m.Key)
	b = appendNullBytes(b, m.Value)
	b = appendVarint(b, int64(len(m.Headers)))
	for i := range m.Headers {
		h := &m.Headers[i]
		b = appendVarint(b, int64(len(h.Key)))
		b = append(b, h.Key...)
		b = appendNullBytes(b, h.Value)
	}
	return b
}

// appendVarint appends v as a zigzag varint, as binary.AppendVarint does; a one-byte varint
// (most of a record's lengths) inline.
func appendVarint(b []byte, v int64) []byte {
	if u := uint64(v<<1) ^ uint64(v>>63); u < 0x80 {
		return append(b, byte(u))
	}
	return binary.AppendVarint(b, v)
}

// appendNullBytes appends v with its varint length, -1 for nil.
func appendNullBytes(b, v []byte) []byte {
	if v == nil {
		return append(b, 1) // -1
	}
	b = appendVarint(b, int64(len(v)))
	return append(b, v...)
}
