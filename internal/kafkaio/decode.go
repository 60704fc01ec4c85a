package kafkaio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/segmentio/kafka-go"
)

// Bounded decoding.
//
// Anyone who may produce to a topic can write a record batch that is small on the wire and huge
// once decompressed (a zstd batch of zeros expands about 10,000 times), or a record with
// millions of empty headers, each of which costs tens of bytes of memory for two bytes of input.
// The broker accepts such batches: max.message.bytes bounds the compressed size only. So decoding
// is bounded by DecodeLimits, and what goes over a limit is refused (RefusedInput) rather than
// decoded:
//
//   - A batch's records are decompressed into a buffer of at most MaxBatchBytes: zstd with a
//     decoder whose decoded size and window are capped at that (a zstd frame declares its window
//     and content size, and a decoder without a cap allocates what they claim), snappy chunk by
//     chunk after checking each chunk's declared length, gzip and lz4 through a limited reader.
//   - The record count a batch claims is checked against its bytes (a record takes at least
//     minRecordLen bytes), and the length prefixes of its records must add up to its bytes, before
//     any record is handed out.
//   - Records are then decoded one at a time, in place (keys and values are slices of the
//     batch), and their headers straight into the reader's header slab: at most MaxHeaders per
//     record, and a Fetch ends its batch early once the slab holds MaxHeaders, so the slab holds
//     at most twice that.
//   - A Fetch also ends its batch early once the decompressed batches whose records it holds
//     reach MaxBatchBytes, and spare decompression buffers larger than an eighth of it are freed
//     rather than kept.

// DecodeLimits bound the memory that decoding the input takes (see "Bounded decoding"). The zero
// value means the defaults of DefaultDecodeLimits.
type DecodeLimits struct {
	// MaxBatchBytes caps the decompressed records of one record batch, and what the records of
	// one Fetch may hold of decompressed batches. Default: DefaultDecodeMaxBytes of the fetch
	// size.
	MaxBatchBytes int
	// MaxHeaders caps the headers of one record, and the headers one Fetch hands out.
	// Default: MaxBatchBytes / 256.
	MaxHeaders int
}

// DefaultDecodeMaxBytes returns the default DecodeLimits.MaxBatchBytes for a fetch size of
// fetchMaxBytes: four times it, at least 16 MiB. A batch is at most about a fetch's size on the
// wire, and ordinary data compresses less than four times; a batch that expands more is refused.
func DefaultDecodeMaxBytes(fetchMaxBytes int) int {
	return max(4*fetchMaxBytes, 16<<20)
}

// DefaultDecodeLimits returns the limits for a decode limit of maxBatchBytes (0 or less: the
// default for fetchMaxBytes); the header limit follows from it.
func DefaultDecodeLimits(maxBatchBytes, fetchMaxBytes int) DecodeLimits {
	if maxBatchBytes <= 0 {
		maxBatchBytes = DefaultDecodeMaxBytes(fetchMaxBytes)
	}
	return DecodeLimits{MaxBatchBytes: maxBatchBytes, MaxHeaders: max(maxBatchBytes/256, 64)}
}

// withDefaults returns l with its zero fields set for fetchMaxBytes.
func (l DecodeLimits) withDefaults(fetchMaxBytes int) DecodeLimits {
	d := DefaultDecodeLimits(l.MaxBatchBytes, fetchMaxBytes)
	if l.MaxHeaders > 0 {
		d.MaxHeaders = l.MaxHeaders
	}
	return d
}

// ErrDecodeLimit is wrapped by the error of input refused for going over a DecodeLimits limit.
var ErrDecodeLimit = errors.New("kafkaio: input over the decode limit")

// Reasons of refused input (RefusedInput.Reason). The set is closed; see InputRefusalReasons.
const (
	// RefusalInputTooLarge: a batch's records decompress to more than DecodeLimits.MaxBatchBytes.
	RefusalInputTooLarge = "input_too_large"
	// RefusalInputTooManyHeaders: a record has more headers than DecodeLimits.MaxHeaders.
	RefusalInputTooManyHeaders = "input_too_many_headers"
	// RefusalInputCorrupt: a batch whose checksum matches (its producer wrote it so) cannot be
	// decoded: its compression, record count or records are invalid.
	RefusalInputCorrupt = "input_corrupt"
)

// InputRefusalReasons returns every reason a RefusedInput can carry.
func InputRefusalReasons() []string {
	return []string{RefusalInputTooLarge, RefusalInputTooManyHeaders, RefusalInputCorrupt}
}

// RefusedInput is input that a PartitionReader refuses to decode (see "Bounded decoding"): the
// offsets Offset to LastOffset (inclusive) of the partition. It is handed out once, with the
// records before it (Batch.Refused); the next Fetch goes on after it.
type RefusedInput struct {
	Offset, LastOffset int64
	// Reason is one of the RefusalInput* constants.
	Reason string
	// Err says what is wrong and names the limit; it wraps ErrDecodeLimit or ErrCorruptBatch.
	Err error
}

// Error says which offsets were refused, and why.
func (e *RefusedInput) Error() string {
	return fmt.Sprintf("kafkaio: input offsets %d-%d refused (%s): %v", e.Offset, e.LastOffset, e.Reason, e.Err)
}

// Unwrap returns the cause.
func (e *RefusedInput) Unwrap() error { return e.Err }

// refusalOf returns the reason of a decoding error.
func refusalOf(err error) string {
	switch {
	case errors.Is(err, errTooManyHeaders):
		return RefusalInputTooManyHeaders
	case errors.Is(err, ErrDecodeLimit):
		return RefusalInputTooLarge
	}
	return RefusalInputCorrupt
}

var errTooManyHeaders = fmt.Errorf("%w: headers per record", ErrDecodeLimit)

// overLimit returns the error of a batch whose records decompress to more than limit bytes.
func overLimit(codec string, limit int) error {
	return fmt.Errorf("%w: records decompress (%s) to more than %d bytes, the limit per batch", ErrDecodeLimit, codec, limit)
}

// decompressor holds what decompression reuses from batch to batch: the reader of the
// compressed bytes, and the pool of zstd decoders of its limit.
type decompressor struct {
	src   bytes.Reader
	zpool *sync.Pool
}

// decompress appends the records of a batch compressed with c to dst, up to limit bytes, and
// returns dst.
func (z *decompressor) decompress(dst, src []byte, c kafka.Compression, limit int) ([]byte, error) {
	switch c {
	case kafka.Zstd:
		return z.zstd(dst, src, limit)
	case kafka.Snappy:
		return decompressSnappy(dst, src, limit)
	}
	codec := c.Codec()
	if codec == nil {
		return dst, fmt.Errorf("%w: unknown compression codec %d", ErrCorruptBatch, c)
	}
	z.src.Reset(src)
	zr := codec.NewReader(&z.src)
	defer zr.Close()
	dst, err := readLimited(dst, zr, limit)
	if errors.Is(err, ErrDecodeLimit) {
		return dst, overLimit(codec.Name(), limit)
	}
	if err != nil {
		return dst, fmt.Errorf("%w: decompress (%s): %w", ErrCorruptBatch, codec.Name(), err)
	}
	return dst, nil
}

// readLimited appends what r reads to b until EOF, and fails with ErrDecodeLimit once b would
// grow past limit bytes. It grows b itself, never to more than limit+1 bytes.
func readLimited(b []byte, r io.Reader, limit int) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			if len(b) > limit {
				return b, ErrDecodeLimit
			}
			grown := make([]byte, len(b), min(max(2*cap(b), 64<<10), limit+1))
			copy(grown, b)
			b = grown
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if len(b) > limit {
			return b, ErrDecodeLimit
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// zstdPools holds idle zstd decoders by their limit (int to *sync.Pool): a decoder keeps its
// window's memory, so decoders are shared by the readers rather than kept by each.
var zstdPools sync.Map

// zstd decodes src as a stream with a decoder whose window (the history it allocates, which a
// frame declares) is capped at limit: a frame that declares more, or whose content size is more,
// is refused before anything is allocated for it; what it expands to is read through
// readLimited.
func (z *decompressor) zstd(dst, src []byte, limit int) ([]byte, error) {
	if z.zpool == nil {
		p, _ := zstdPools.LoadOrStore(limit, &sync.Pool{})
		z.zpool = p.(*sync.Pool)
	}
	zd, _ := z.zpool.Get().(*zstd.Decoder)
	if zd == nil {
		capped := uint64(max(limit, zstd.MinWindowSize))
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(capped), zstd.WithDecoderMaxWindow(capped))
		if err != nil {
			return dst, fmt.Errorf("kafkaio: zstd decoder: %w", err)
		}
		zd = d
	}
	defer z.zpool.Put(zd)
	z.src.Reset(src)
	if err := zd.Reset(&z.src); err != nil {
		return dst, fmt.Errorf("%w: decompress (zstd): %w", ErrCorruptBatch, err)
	}
	defer zd.Reset(nil) //nolint:errcheck // drops the reference to src
	out, err := readLimited(dst, zd, limit)
	switch {
	case errors.Is(err, ErrDecodeLimit) || errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded):
		return dst, overLimit("zstd", limit)
	case err != nil:
		return dst, fmt.Errorf("%w: decompress (zstd): %w", ErrCorruptBatch, err)
	}
	return out, nil
}

// xerialMagic starts the framing of Kafka's Java client's snappy batches (snappy-java): a
// 16-byte header (magic, version, compatible version), then chunks of an int32 length and a
// snappy block.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// decompressSnappy decodes src, xerial-framed or one snappy block, checking each block's declared
// length against what is left of limit before decoding it.
func decompressSnappy(dst, src []byte, limit int) ([]byte, error) {
	if len(src) < 16 || !bytes.Equal(src[:8], xerialMagic) {
		return snappyBlock(dst, src, limit)
	}
	for src = src[16:]; len(src) > 0; {
		if len(src) < 4 || int(binary.BigEndian.Uint32(src)) > len(src)-4 {
			return dst, fmt.Errorf("%w: decompress (snappy): chunk overruns the batch", ErrCorruptBatch)
		}
		n := int(binary.BigEndian.Uint32(src))
		var err error
		if dst, err = snappyBlock(dst, src[4:4+n], limit); err != nil {
			return dst, err
		}
		src = src[4+n:]
	}
	return dst, nil
}

// snappyBlock appends the snappy block src decoded to dst, within limit bytes in all.
func snappyBlock(dst, src []byte, limit int) ([]byte, error) {
	n, err := snappy.DecodedLen(src)
	if err != nil {
		return dst, fmt.Errorf("%w: decompress (snappy): %w", ErrCorruptBatch, err)
	}
	if n > limit-len(dst) {
		return dst, overLimit("snappy", limit)
	}
	if cap(dst)-len(dst) < n {
		grown := make([]byte, len(dst), min(max(2*cap(dst), len(dst)+n), limit))
		copy(grown, dst)
		dst = grown
	}
	if _, err := snappy.Decode(dst[len(dst):len(dst)+n], src); err != nil {
		return dst, fmt.Errorf("%w: decompress (snappy): %w", ErrCorruptBatch, err)
	}
	return dst[:len(dst)+n], nil
}

// minRecordLen is the smallest encoded record: its length, attributes, timestamp delta, offset
// delta, key length, value length and header count, one byte each.
const minRecordLen = 7

// frameRecords checks that b holds exactly n records, by their length prefixes, before any of
// them is decoded: a batch that claims more records than its bytes can hold, or whose records
// do not add up to its bytes, is refused whole.
func frameRecords(b []byte, n int) error {
	if n < 0 || n > len(b)/minRecordLen {
		return fmt.Errorf("%w: %d records in %d bytes", ErrCorruptBatch, n, len(b))
	}
	for i := range n {
		length, k := varint(b)
		if k <= 0 || length < minRecordLen-1 || length > int64(len(b)-k) {
			return fmt.Errorf("%w: record %d overruns the batch", ErrCorruptBatch, i)
		}
		b = b[k+int(length):]
	}
	if len(b) > 0 {
		return fmt.Errorf("%w: %d bytes after the last record", ErrCorruptBatch, len(b))
	}
	return nil
}

// batchRecord is one record of a batch, decoded in place: key and value are slices of the
// batch (nil for null), headers are in the header slab it was decoded with.
type batchRecord struct {
	offsetDelta int32
	tsDelta     int64
	key, value  []byte
	headers     []Header
}

// batchRecords walks the records of one batch whose framing frameRecords checked, one at a time.
type batchRecords struct {
	b    []byte // the records not walked yet
	left int
}

// next decodes the next record into rec, its headers into hs (nil: the headers are checked and
// dropped), at most maxHeaders of them. A record that cannot be decoded is walked past all the
// same, and its error wraps ErrCorruptBatch or ErrDecodeLimit; rec.offsetDelta is -1 when it is
// not known.
func (it *batchRecords) next(rec *batchRecord, hs *headerSlab, maxHeaders int) error {
	length, k, ok := shortVarint(it.b, 0) // framed: frameRecords checked it
	if !ok {
		length, k = varint(it.b)
	}
	body := it.b[k : k+int(length)]
	it.b, it.left = it.b[k+int(length):], it.left-1
	mark := hs.mark()
	if err := decodeRecord(rec, body, hs, maxHeaders); err != nil {
		hs.truncate(mark)
		return err
	}
	return nil
}

// Reading a record's fields. A record is a run of varints and length-prefixed byte strings, most
// of them one byte long; the readers below take the record and an index into it, and return the
// value and the index after it, so that a record is decoded in registers rather than through a
// cursor in memory. shortVarint and shortBytes read the one-byte case without a call (they are
// inlined: the hot loops call them first, and readVarint or readBytes when they say no).
// An index past len(b) (badIndex) says that a read failed: every later read fails too, and the
// caller checks the index once at the end.

// badIndex returns the index that marks a failed read of b.
func badIndex(b []byte) int { return len(b) + 1 }

// shortVarint reads the one-byte zigzag varint at b[i:]: its value, the index after it, and
// false when there is none there (a longer varint, the end of b, or a failed read before).
func shortVarint(b []byte, i int) (int64, int, bool) {
	if uint(i) < uint(len(b)) {
		if x := b[i]; x < 0x80 {
			return int64(x>>1) ^ -int64(x&1), i + 1, true
		}
	}
	return 0, i, false
}

// readVarint reads the zigzag varint of any length at b[i:] and returns it and the index after
// it, or badIndex when there is none.
func readVarint(b []byte, i int) (int64, int) {
	if uint(i) >= uint(len(b)) {
		return 0, badIndex(b)
	}
	if i+1 < len(b) && b[i] >= 0x80 && b[i+1] < 0x80 { // two bytes: varint's fast path, without its call
		u := uint64(b[i]&0x7f) | uint64(b[i+1])<<7
		return int64(u>>1) ^ -int64(u&1), i + 2
	}
	v, n := varint(b[i:])
	if n <= 0 {
		return 0, badIndex(b)
	}
	return v, i + n
}

// varint decodes the zigzag varint b starts with, as binary.Varint does, and returns it and its
// length (0 or less when b does not start with one). Varints of one and two bytes (a record's
// length, its deltas in a batch of up to 8,192 records) are decoded without binary.Varint's loop.
func varint(b []byte) (int64, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return int64(b[0]>>1) ^ -int64(b[0]&1), 1
	}
	if len(b) > 1 && b[1] < 0x80 {
		u := uint64(b[0]&0x7f) | uint64(b[1])<<7
		return int64(u>>1) ^ -int64(u&1), 2
	}
	return binary.Varint(b)
}

// shortBytes reads a one-byte varint length below 64 at b[i:] and that many bytes: them (their
// capacity cut to their length), the index after them, and false when they are not there that
// way (a null, a longer length, too few bytes, a failed read before).
func shortBytes(b []byte, i int) ([]byte, int, bool) {
	if uint(i) < uint(len(b)) {
		if x := b[i]; x&0x81 == 0 {
			if j := i + 1 + int(x>>1); j <= len(b) {
				return b[i+1 : j : j], j, true
			}
		}
	}
	return nil, i, false
}

// readBytes reads a varint length of any value at b[i:] and that many bytes, and returns them
// (nil for length -1; their capacity cut to their length) and the index after them, or badIndex
// when they are not there.
func readBytes(b []byte, i int) ([]byte, int) {
	n, i := readVarint(b, i)
	switch {
	case i > len(b):
		return nil, i
	case n == -1:
		return nil, i
	case n < 0 || n > int64(len(b)-i):
		return nil, badIndex(b)
	}
	j := i + int(n)
	return b[i:j:j], j
}

// decodeRecord decodes the record body b (without its length) into rec. The fields are read
// inline when they are one byte long (see "Reading a record's fields").
func decodeRecord(rec *batchRecord, b []byte, hs *headerSlab, maxHeaders int) error {
	rec.offsetDelta = -1
	ts, i, ok := shortVarint(b, 1) // b[0], the attributes: unused in v2
	if !ok {
		ts, i = readVarint(b, 1)
	}
	off, j, ok := shortVarint(b, i)
	if !ok {
		off, j = readVarint(b, i)
	}
	rec.tsDelta = ts
	if rec.key, i, ok = shortBytes(b, j); !ok {
		rec.key, i = readBytes(b, j)
	}
	if rec.value, j, ok = shortBytes(b, i); !ok {
		rec.value, j = readBytes(b, i)
	}
	n, i, ok := shortVarint(b, j)
	if !ok {
		n, i = readVarint(b, j)
	}
	if i > len(b) || off < 0 || off > 1<<31-1 || n < 0 || n > int64(len(b)-i)/2 {
		return fmt.Errorf("%w: invalid record", ErrCorruptBatch)
	}
	rec.offsetDelta = int32(off)
	if n > int64(maxHeaders) {
		return fmt.Errorf("%w: %d headers, more than the limit of %d per record", errTooManyHeaders, n, maxHeaders)
	}
	rec.headers, i = hs.decode(b, i, int(n))
	if i != len(b) {
		return fmt.Errorf("%w: invalid record headers", ErrCorruptBatch)
	}
	return nil
}
