package consumer

import (
	"strconv"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// The audit topic.
//
// With Config.DuplicatesTopic set, every record the Worker drops is written there instead of
// disappearing: duplicates (in ModeMark too, although they are also produced, marked), records
// without an extractable key under UnkeyedDrop, and records a Judge drops for a policy (late
// records, a filter over its memory cap). A false positive of the filter is a unique record
// dropped as a duplicate, so it is found in the audit topic, with its coordinates, and can be
// re-injected.
//
// An audit record is the input record (key, value, headers, timestamp; under AuditHeadersOnly
// without key and value) plus the AuditHeader* headers: source topic, partition and offset, and
// the reason (one of DropReasons). It goes to partition input partition % the audit topic's
// partition count: the same partition number when the counts match. The audit records of a batch
// are written after its output records, with the same producer (inside the same transaction
// under DeliveryExactlyOnce), and the batch's input offsets are marked for commit only once both
// were acknowledged; a record the audit topic refuses follows the rules of "Refused records".

// AuditContent says what an audit record keeps of the dropped record.
type AuditContent string

const (
	// AuditFull keeps the whole record: key, value, headers and timestamp. It is what makes a
	// false positive recoverable.
	AuditFull AuditContent = "full"
	// AuditHeadersOnly keeps the record's headers and timestamp but not its key and value: the
	// audit topic then says what was dropped where and why, at a fraction of the volume.
	AuditHeadersOnly AuditContent = "headers"
)

// Reasons a record is dropped (the value of the AuditHeaderReason header, and of the reason
// label of the diverted-records metric).
const (
	// DropDuplicate is a record whose identity was already seen within the window (or a false
	// positive of the filter, which cannot be told apart from one).
	DropDuplicate = "duplicate"
	// DropUnkeyed is a record without an extractable identity, under UnkeyedDrop.
	DropUnkeyed = "unkeyed"
	// DropLate is a record too old for its event-time window, under the late-record drop policy.
	DropLate = "late"
	// DropOverload is a record reported seen by a filter over its memory cap under the overload
	// drop policy: its false-positive rate is above target, so the record may be unique.
	DropOverload = "overload"
)

// DropReasons lists the reasons a record is dropped, in the order of the Verdicts that give them.
var DropReasons = []string{DropDuplicate, DropUnkeyed, DropLate, DropOverload}

// Headers added to a record written to the audit topic. The source headers have the names of the
// dead-letter topic's (DeadLetterHeaderSource*), so one tool reads both.
const (
	AuditHeaderSourceTopic     = DeadLetterHeaderSourceTopic
	AuditHeaderSourcePartition = DeadLetterHeaderSourcePartition
	AuditHeaderSourceOffset    = DeadLetterHeaderSourceOffset
	// AuditHeaderReason holds the reason the record was dropped: one of DropReasons.
	AuditHeaderReason = "kdedup-reason"
)

// Verdict is a Judge's decision on one record.
type Verdict uint8

const (
	// VerdictNew passes the record: its identity was not seen.
	VerdictNew Verdict = iota
	// VerdictDuplicate drops the record as a duplicate (DropDuplicate).
	VerdictDuplicate
	// verdictUnkeyed is the Worker's own verdict on a record without identity under UnkeyedDrop.
	verdictUnkeyed
	// VerdictLate drops the record by the late-record policy (DropLate).
	VerdictLate
	// VerdictOverload drops the record by the overload policy (DropOverload).
	VerdictOverload
)

// reason returns the drop reason of v (one of DropReasons); VerdictNew has none.
func (v Verdict) reason() string {
	switch v {
	case VerdictDuplicate:
		return DropDuplicate
	case verdictUnkeyed:
		return DropUnkeyed
	case VerdictLate:
		return DropLate
	case VerdictOverload:
		return DropOverload
	}
	return ""
}

// reasonIndex returns the index of v's reason in DropReasons.
func (v Verdict) reasonIndex() int {
	switch v {
	case verdictUnkeyed:
		return 1
	case VerdictLate:
		return 2
	case VerdictOverload:
		return 3
	}
	return 0
}

// A Judge is a Deduper that says why it drops a record. Judge is Deduper.Seen with a reason:
// VerdictNew where Seen returns false, another Verdict where it returns true; it has Seen's
// contract otherwise, and the Worker calls it instead of Seen. A Deduper that is not a Judge has
// its drops reported as duplicates.
type Judge interface {
	Judge(partition int32, id []byte, ts time.Time) Verdict
}

// seenJudge makes a Judge of a Deduper that is not one.
type seenJudge struct{ d Deduper }

func (j seenJudge) Judge(p int32, id []byte, ts time.Time) Verdict {
	if j.d.Seen(p, id, ts) {
		return VerdictDuplicate
	}
	return VerdictNew
}

// A BatchJudge is a Judge that judges the identities of a batch in one call, which lets it overlap
// their lookups (prefetch the memory of the next identities while judging one) and do once per
// batch what Judge does per record. JudgeBatch must judge ids in order, as Judge would one after
// another, skip each nil id (a record without identity), and pass the verdict of ids[i] to put(i,
// v); ts(i) is the timestamp of ids[i]. It has Judge's contract otherwise. The Worker calls it
// once per batch instead of Judge, from the partition's goroutine.
type BatchJudge interface {
	JudgeBatch(partition int32, ids [][]byte, ts func(int) time.Time, put func(int, Verdict))
}

// judgeOf returns d as a Judge.
func judgeOf(d Deduper) Judge {
	if j, ok := d.(Judge); ok {
		return j
	}
	return seenJudge{d}
}

// auditArena holds a partition's audit headers and their decimal values for one batch, so that
// diverting a record allocates nothing once the arena has grown: the records of a batch are
// written before the next one is handled, and a blocked partition copies what it holds
// (ownLanes). A slice handed out stays valid when the arena grows (it keeps the old array).
type auditArena struct {
	hdrs   []kafkaio.Header
	digits []byte
	part   []byte // the input partition in decimal
}

// reset starts a batch.
func (a *auditArena) reset() {
	clear(a.hdrs) // drop references to the reader's header values
	a.hdrs, a.digits = a.hdrs[:0], a.digits[:0]
}

// auditRecord returns the audit record of m, input partition st.p's record dropped for v.
func (w *Worker) auditRecord(st *partitionState, m *kafkaio.Record, v Verdict) kafkaio.Record {
	a := &st.audit
	if a.part == nil {
		a.part = strconv.AppendInt(nil, int64(st.p), 10)
	}
	start := len(a.digits)
	a.digits = strconv.AppendInt(a.digits, m.Offset, 10)
	offset := a.digits[start:len(a.digits):len(a.digits)]
	h0 := len(a.hdrs)
	a.hdrs = append(a.hdrs, m.Headers...)
	a.hdrs = append(a.hdrs,
		kafkaio.Header{Key: AuditHeaderSourceTopic, Value: w.inputTopic},
		kafkaio.Header{Key: AuditHeaderSourcePartition, Value: a.part},
		kafkaio.Header{Key: AuditHeaderSourceOffset, Value: offset},
		kafkaio.Header{Key: AuditHeaderReason, Value: reasonValues[v.reasonIndex()]},
	)
	o := kafkaio.Record{Offset: m.Offset, Headers: a.hdrs[h0:len(a.hdrs):len(a.hdrs)], Time: m.Time}
	if w.cfg.DuplicatesContent != AuditHeadersOnly {
		o.Key, o.Value = m.Key, m.Value
	}
	return o
}

// reasonValues holds the header values of DropReasons.
var reasonValues = func() [][]byte {
	out := make([][]byte, len(DropReasons))
	for i, r := range DropReasons {
		out[i] = []byte(r)
	}
	return out
}()
