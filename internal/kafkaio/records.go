package kafkaio

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/segmentio/kafka-go"
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
//
// The batches were checked by scanBatches first. A batch the response holds only in part (the
// fetch's size limit cut it) ends the walk; the next fetch starts at it. The records yielded are slices into the response and the decoder's
// buffers (see BatchDecoder), valid as long as those are. A recordSet is not safe for concurrent
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
	recs []kmsg.Record    // its records; recs[i:] not yielded yet
	i    int

	skipped int   // records of aborted transactions skipped
	err     error // the first batch that could not be decoded, and was skipped
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
	rec    *kmsg.Record
	offset int64
	time   int64 // milliseconds since the epoch
}

// nextRecord returns the next data record, or false when every complete batch was walked.
func (s *recordSet) nextRecord() (record, bool) {
	for {
		for s.i < len(s.recs) {
			rec := &s.recs[s.i]
			s.i++
			off := s.hdr.FirstOffset + int64(rec.OffsetDelta)
			if off < s.from {
				continue
			}
			s.next = off + 1
			if s.i == len(s.recs) {
				s.next = max(s.next, batchNext(&s.hdr))
			}
			ts := s.hdr.FirstTimestamp + rec.TimestampDelta64
			if s.hdr.Attributes&attrLogAppendTime != 0 {
				ts = s.hdr.MaxTimestamp
			}
			return record{rec: rec, offset: off, time: ts}, true
		}
		s.recs, s.i = nil, 0
		if !s.advance() {
			return record{}, false
		}
	}
}

// batchNext returns the offset after the batch of hdr.
func batchNext(hdr *kmsg.RecordBatch) int64 {
	return hdr.FirstOffset + int64(hdr.LastOffsetDelta) + 1
}

// advance walks to the next batch that has data records to yield and decodes it into s.recs. It
// returns false at the end of the walk. A batch whose records cannot be decoded (its checksum
// matched: the producer wrote it so) is skipped; s.err keeps the first such error.
func (s *recordSet) advance() bool {
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
		recs, err := s.dec.decodeRecords(&hdr)
		if err != nil {
			s.err = cmp.Or(s.err, fmt.Errorf("kafkaio: record batch at offset %d skipped: %w", hdr.FirstOffset, err))
			s.next = max(s.next, batchNext(&hdr))
			continue
		}
		s.hdr, s.recs, s.i = hdr, recs, 0
		return true
	}
	return false
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
	recs, err := s.dec.decodeRecords(hdr)
	if err != nil || len(recs) == 0 || len(recs[0].Key) < 4 {
		return false
	}
	return binary.BigEndian.Uint16(recs[0].Key[2:]) == controlAbort
}

// headerSlab holds the kafka-go headers of the records handed out since its last reset, in one
// slice reused from batch to batch. Header names are interned: kmsg decodes them as strings that
// alias the fetched bytes, which are overwritten when the buffer is reused, so each distinct name
// is copied once and shared after that (up to maxInterned names; past that, each is copied).
type headerSlab struct {
	hdrs  []kafka.Header
	names map[string]string
}

const maxInterned = 1024

// add returns hs as kafka-go headers in the slab, valid until reset; nil for none.
func (s *headerSlab) add(hs []kmsg.Header) []kafka.Header {
	if len(hs) == 0 {
		return nil
	}
	n := len(s.hdrs)
	for i := range hs {
		s.hdrs = append(s.hdrs, kafka.Header{Key: s.intern(hs[i].Key), Value: clip(hs[i].Value)})
	}
	return s.hdrs[n:len(s.hdrs):len(s.hdrs)]
}

// intern returns a string equal to name that does not alias the fetched bytes.
func (s *headerSlab) intern(name string) string {
	if v, ok := s.names[name]; ok {
		return v
	}
	v := strings.Clone(name)
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
