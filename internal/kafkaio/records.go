package kafkaio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Batch attributes (the int16 Attributes of a record batch, magic v2).
const (
	attrCompression   = 0x07
	attrLogAppendTime = 0x08 // timestamps are the broker's append time, MaxTimestamp
	attrTransactional = 0x10
	attrControl       = 0x20
)

// controlAbort is the type of the control record that ends an aborted transaction (the record's
// key is an int16 version and an int16 type: 0 abort, 1 commit).
const controlAbort = 0

// recordSet walks the record batches of one fetched partition in offset order and yields its data
// records, as the Java consumer's fetcher does:
//
//   - Control batches (transaction markers) are never data, in either isolation level.
//   - Under read_committed, a transactional batch of a producer whose aborted transaction the
//     walk is in is skipped whole. The fetch response lists the aborted transactions that overlap
//     the fetched range by producer id and first offset; a producer's transaction is entered when
//     the walk reaches its first offset and left at that producer's abort marker. Several
//     producers can be inside open transactions at once, interleaved on one partition, and a
//     transaction can start in an earlier response: the broker lists every aborted transaction
//     whose abort marker is at or after the fetched offset.
//   - Records below the fetched offset (the broker answers with whole batches) are skipped.
//   - Input that cannot be decoded within the decoder's limits, or at all although its checksum
//     matches, is refused (RefusedInput): a whole batch when its records cannot be decompressed
//     or framed, one record when it has too many headers, the rest of the batch from a record
//     that cannot be decoded. The walk stops there until takeRefused hands the refusal out; it
//     then goes on after the refused offsets.
//
// The batches were checked by scanBatches first. A batch the response holds only in part (the
// fetch's size limit cut it) ends the walk; the next fetch starts at it. The records yielded are
// slices into the response and the decoder's buffers (see BatchDecoder), their headers in the
// slab given to nextRecord, valid as long as those are. A recordSet is not safe for concurrent
// use.
type recordSet struct {
	dec       *BatchDecoder
	rest      []byte // the batches not walked yet
	from      int64  // the offset fetched
	next      int64  // the offset after everything walked so far
	committed bool

	aborted []kmsg.FetchResponseTopicPartitionAbortedTransaction // by first offset; [ai:] not reached yet
	ai      int
	open    []int64 // producers inside an aborted transaction at the walk's position

	hdr  kmsg.RecordBatch // the data batch being walked
	recs batchRecords     // its records not walked yet
	rec  batchRecord      // the record yielded last

	skipped int           // records of aborted transactions skipped
	refused *RefusedInput // a refusal not handed out yet: the walk stops at it
}

// reset starts walking res's records with dec; committed selects read_committed.
func (s *recordSet) reset(dec *BatchDecoder, res *fetchResponse, committed bool) {
	*s = recordSet{dec: dec, from: res.from, next: res.from, committed: committed, open: s.open[:0],
		aborted: s.aborted[:0]}
	if res.part == nil {
		return
	}
	s.rest = res.part.RecordBatches
	if committed {
		s.aborted = append(s.aborted, res.part.AbortedTransactions...)
		slices.SortFunc(s.aborted, func(a, b kmsg.FetchResponseTopicPartitionAbortedTransaction) int {
			return compareInt64(a.FirstOffset, b.FirstOffset)
		})
	}
}

// drop forgets the fetched data the walk points into (the batches not walked, the batch header
// and the record yielded last), keeping its position, once the response is walked: nothing but
// the records handed out may then keep its buffer reachable, and those are given back with their
// batch. A response shares its buffer with the other partitions of a broker's response
// (sharedFrame), and a buffer the pool drops at the input memory's limit would otherwise stay in
// the heap for as long as any reader that last walked it is idle.
func (s *recordSet) drop() {
	s.rest, s.hdr.Records, s.recs, s.rec = nil, nil, batchRecords{}, batchRecord{}
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// record is one data record the walk yields. Its slices point into the fetched data.
type record struct {
	rec    *batchRecord
	offset int64
	time   int64 // milliseconds since the epoch
}

// nextRecord returns the next data record, its headers decoded into hs, or false when every
// complete batch was walked or the walk stopped at a refusal (s.refused).
func (s *recordSet) nextRecord(hs *headerSlab) (record, bool) {
	for s.refused == nil {
		for s.recs.left > 0 {
			mark := hs.mark()
			err := s.recs.next(&s.rec, hs, s.dec.limit().MaxHeaders)
			off := s.hdr.FirstOffset + int64(s.rec.offsetDelta)
			if err != nil && (s.rec.offsetDelta < 0 || off >= s.from) {
				s.refuse(err, off)
				return record{}, false
			}
			if err != nil || off < s.from {
				hs.truncate(mark)
				continue
			}
			s.next = max(s.next, off+1) // a crafted batch may go back within itself; the position does not
			if s.recs.left == 0 {
				s.next = max(s.next, batchNext(&s.hdr))
			}
			ts := s.hdr.FirstTimestamp + s.rec.tsDelta
			if s.hdr.Attributes&attrLogAppendTime != 0 {
				ts = s.hdr.MaxTimestamp
			}
			return record{rec: &s.rec, offset: off, time: ts}, true
		}
		if !s.advance() {
			return record{}, false
		}
	}
	return record{}, false
}

// refuse stops the walk at a record that could not be decoded: that record alone when its
// offset is known and the batch goes on after it, else the rest of the batch.
func (s *recordSet) refuse(err error, off int64) {
	first := max(s.next, s.hdr.FirstOffset)
	last := max(first, batchNext(&s.hdr)-1) // a batch whose last offset delta is negative was not assigned by a broker
	if s.rec.offsetDelta >= 0 && refusalOf(err) == RefusalInputTooManyHeaders {
		first, last = max(first, off), max(first, off)
	} else {
		s.recs = batchRecords{}
	}
	s.refused = &RefusedInput{Offset: first, LastOffset: last, Reason: refusalOf(err),
		Err: fmt.Errorf("kafkaio: record batch at offset %d: %w", s.hdr.FirstOffset, err)}
}

// takeRefused returns the refusal the walk stopped at, or nil, and goes on after it.
func (s *recordSet) takeRefused() *RefusedInput {
	r := s.refused
	if r != nil {
		s.refused = nil
		s.next = max(s.next, r.LastOffset+1)
		if s.recs.left == 0 {
			s.next = max(s.next, batchNext(&s.hdr))
		}
	}
	return r
}

// batchNext returns the offset after the batch of hdr.
func batchNext(hdr *kmsg.RecordBatch) int64 {
	return hdr.FirstOffset + int64(hdr.LastOffsetDelta) + 1
}

// advance walks to the next batch that has data records to yield and opens it into s.recs. It
// returns false at the end of the walk, or when the batch is refused whole (s.refused).
func (s *recordSet) advance() bool {
	s.passBatch()
	for len(s.rest) > 0 {
		b := s.rest
		hdr, rest, err := s.dec.header(b)
		if err != nil { // a partial batch (the next fetch starts at it); scanBatches caught the rest
			s.rest = nil
			return false
		}
		s.rest = rest
		if !s.isData(&hdr) {
			s.next = max(s.next, batchNext(&hdr))
			continue
		}
		s.hdr = hdr
		if s.recs, err = s.dec.open(&hdr); err != nil {
			s.rec.offsetDelta = -1
			s.refuse(err, 0)
			return false
		}
		return true
	}
	return false
}

// passBatch moves the walk's position past the batch just walked, once none of its records is
// left: a batch can end without yielding its last offset (an empty batch the log cleaner keeps
// for a producer's state, or a compacted batch whose remaining records lie below the fetched
// offset), and the position must still move past it, or a reader stalls below the end offset.
func (s *recordSet) passBatch() {
	if s.hdr.Magic == 2 && s.recs.left == 0 {
		s.next = max(s.next, batchNext(&s.hdr))
	}
}

// scanBatches checks the complete record batches at the start of b, a fetched partition's
// record set fetched from offset from, and returns the offset after the last of them (from when
// there is none) and how many bytes they take. Checksums are checked here, so that a batch
// damaged on the way is fetched again rather than walked. The batch a fetch's size limit cut
// short ends the scan. It fails on a batch whose checksum or header is wrong (ErrCorruptBatch),
// on a message set of magic v0 or v1 (ErrOldMessageFormat), and when b holds bytes but no
// complete batch (ErrBatchTooLarge).
func scanBatches(b []byte, from int64) (next int64, n int, err error) {
	next = from
	for len(b)-n > 0 {
		hdr, err := scanBatch(b[n:])
		if errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return next, n, fmt.Errorf("kafkaio: record batch at offset %d: %w", hdr.FirstOffset, err)
		}
		next = max(next, batchNext(&hdr))
		n += batchLengthStart + int(hdr.Length)
	}
	if n == 0 && len(b) > 0 {
		return next, 0, fmt.Errorf("%w: offset %d, %d bytes fetched", ErrBatchTooLarge, from, len(b))
	}
	return next, n, nil
}

// scanBatch decodes and checks the header of the record batch b starts with.
func scanBatch(b []byte) (kmsg.RecordBatch, error) {
	var hdr kmsg.RecordBatch
	if len(b) > magicOffset && b[magicOffset] < 2 {
		return hdr, fmt.Errorf("%w (magic %d)", ErrOldMessageFormat, b[magicOffset])
	}
	var d BatchDecoder
	hdr, _, err := d.header(b)
	if err != nil {
		return hdr, err
	}
	return hdr, checkCRC(&hdr, b)
}

// isData reports whether the batch of hdr holds data records to yield:
// not a control batch, not aborted under read_committed, not wholly below the fetched offset. It
// keeps the walk's transaction state and the count of skipped aborted records.
func (s *recordSet) isData(hdr *kmsg.RecordBatch) bool {
	last := batchNext(hdr) - 1
	control := hdr.Attributes&attrControl != 0
	if s.committed && hdr.ProducerID >= 0 {
		s.enterAborted(last)
		switch {
		case control:
			if s.isAbortMarker(hdr) {
				s.leaveAborted(hdr.ProducerID)
			}
		case hdr.Attributes&attrTransactional != 0 && slices.Contains(s.open, hdr.ProducerID):
			if last >= s.from {
				s.skipped += int(last - max(hdr.FirstOffset, s.from) + 1)
			}
			return false
		}
	}
	return !control && last >= s.from
}

// enterAborted notes that the producers of the aborted transactions that start at or before
// offset are inside them.
func (s *recordSet) enterAborted(offset int64) {
	for ; s.ai < len(s.aborted) && s.aborted[s.ai].FirstOffset <= offset; s.ai++ {
		if pid := s.aborted[s.ai].ProducerID; !slices.Contains(s.open, pid) {
			s.open = append(s.open, pid)
		}
	}
}

// leaveAborted notes that producer pid's aborted transaction ended.
func (s *recordSet) leaveAborted(pid int64) {
	if i := slices.Index(s.open, pid); i >= 0 {
		s.open = slices.Delete(s.open, i, i+1)
	}
}

// isAbortMarker reports whether the control batch of hdr is an abort marker. A control batch
// that cannot be decoded counts as none.
func (s *recordSet) isAbortMarker(hdr *kmsg.RecordBatch) bool {
	recs, err := s.dec.open(hdr)
	if err != nil || recs.left == 0 {
		return false
	}
	var rec batchRecord
	if err := recs.next(&rec, nil, s.dec.limit().MaxHeaders); err != nil || len(rec.key) < 4 {
		return false
	}
	return binary.BigEndian.Uint16(rec.key[2:]) == controlAbort
}

// headerSlab holds the kafka-go headers of the records handed out since its last reset, in one
// slice reused from batch to batch: decodeRecord decodes headers straight into it. Header names
// are interned: the fetched bytes are overwritten when the buffer is reused, so each distinct
// name is copied once and shared after that (up to maxInterned names; past that, each is
// copied). The name last interned at each of a record's first header positions is compared
// first (recent): records of one producer carry the same headers in the same order, and a
// comparison costs less than a map lookup. Header values are slices of the fetched bytes. A nil
// slab checks headers and keeps none.
type headerSlab struct {
	hdrs   []Header
	names  map[string]string
	recent [8]string // recent[i]: the name interned last for a record's i-th header
}

const maxInterned = 1024

// decode reads n headers from b[i:] into the slab and returns them, valid until reset (nil for
// none), and the index after them, badIndex when they cannot be read. The slab grows once for
// the record's headers; each name is compared with the name last interned at its position (see
// internAt) inline.
func (s *headerSlab) decode(b []byte, i, n int) ([]Header, int) {
	if n == 0 {
		return nil, i
	}
	if s == nil {
		for range 2 * n {
			_, i = readBytes(b, i)
		}
		return nil, i
	}
	start := len(s.hdrs)
	s.hdrs = slices.Grow(s.hdrs, n)[:start+n]
	hs := s.hdrs[start : start+n : start+n]
	for k := range hs {
		name, j, ok := shortBytes(b, i)
		if !ok {
			name, j = readBytes(b, i)
		}
		var value []byte
		if value, i, ok = shortBytes(b, j); !ok {
			value, i = readBytes(b, j)
		}
		if i > len(b) {
			clear(hs)
			s.hdrs = s.hdrs[:start]
			return nil, i
		}
		h := &hs[k]
		if k < len(s.recent) && s.recent[k] == string(name) {
			h.Key = s.recent[k]
		} else {
			h.Key = s.internAt(k, name)
		}
		h.Value = value
	}
	return hs, i
}

// mark returns the slab's length, for truncate.
func (s *headerSlab) mark() int {
	if s == nil {
		return 0
	}
	return len(s.hdrs)
}

// truncate drops the headers added since mark returned n.
func (s *headerSlab) truncate(n int) {
	if s != nil {
		clear(s.hdrs[n:])
		s.hdrs = s.hdrs[:n]
	}
}

// len returns how many headers the slab holds.
func (s *headerSlab) len() int { return len(s.hdrs) }

// internAt returns intern(name) for the i-th header of a record, compared with the name of
// the last record's i-th header first.
func (s *headerSlab) internAt(i int, name []byte) string {
	if i >= len(s.recent) {
		return s.intern(name)
	}
	if r := s.recent[i]; r == string(name) {
		return r
	}
	v := s.intern(name)
	s.recent[i] = v
	return v
}

// intern returns a string equal to name that does not alias the fetched bytes.
func (s *headerSlab) intern(name []byte) string {
	if v, ok := s.names[string(name)]; ok {
		return v
	}
	v := string(name)
	if s.names == nil {
		s.names = make(map[string]string)
	}
	if len(s.names) < maxInterned {
		s.names[v] = v
	}
	return v
}

// reset empties the slab: the headers handed out are no longer used.
func (s *headerSlab) reset() {
	clear(s.hdrs)
	s.hdrs = s.hdrs[:0]
}

// clip returns b with its capacity cut to its length, so that an append cannot write into the
// fetched data after it.
func clip(b []byte) []byte {
	if b == nil {
		return nil
	}
	return b[:len(b):len(b)]
}
