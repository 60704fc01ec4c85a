package loadtest

import (
	"fmt"
	"strconv"
	"time"
)

// Expect is what the verifier expects of the pipeline under test.
type Expect struct {
	// WindowCount (N) and WindowInterval: an identity inserted at t is seen until at least
	// t+(N−1)·interval and never after t+N·interval.
	WindowCount    int
	WindowInterval time.Duration
	// Global is true under DEDUP_SCOPE=global: one filter for all partitions.
	Global bool
	// ExpectAll expects every record exactly once (a pipeline that does not deduplicate).
	ExpectAll bool
	// FalsePositiveRate is the configured target, for the loss bound.
	FalsePositiveRate float64
	// Refresh is true under DEDUP_WINDOW_REFRESH=true: every copy re-arms its identity, so a
	// beyond-window copy is judged against the event's last copy in its unit, not its first.
	Refresh bool
}

// LossQuantile is the confidence of the loss bound: a correct filter loses more than the bound
// with probability at most 1-LossQuantile.
const LossQuantile = 0.999

// maxExamples bounds the number of failure examples kept in a Verdict.
const maxExamples = 20

// Verdict is the verifier's account of a run.
type Verdict struct {
	// Records is the number of planned records sent (end markers excluded), by kind in ByKind.
	Records int            `json:"records"`
	ByKind  map[string]int `json:"by_kind"`
	// BySource counts the records sent and the records never delivered (dropped as duplicates,
	// or lost) per source, with Config.Sources; nil without.
	BySource map[string]*SourceCount `json:"by_source,omitempty"`
	// Late is the number of the originals that were sent with a Kafka timestamp LateAge before
	// their creation (Config.Late): unique events, each expected once.
	Late int `json:"late"`
	// Delivered is the number of distinct records of this run in the output (marked records and
	// end markers excluded); Appearances counts repeated deliveries too.
	Delivered   int `json:"delivered"`
	Appearances int `json:"appearances"`
	// Marked is the number of records delivered with the mark header (mark mode).
	Marked int `json:"marked"`
	// Markers is the number of end markers seen, of MarkersSent.
	Markers     int `json:"markers"`
	MarkersSent int `json:"markers_sent"`
	// Unknown counts output records with this run's id but a sequence number never sent.
	Unknown int `json:"unknown"`

	// Uniques is the number of events (or copies beyond the window, or on another partition
	// under scope partition) that must appear exactly once.
	Uniques int `json:"uniques"`
	// MustDrop is the number of copies that must not appear.
	MustDrop int `json:"must_drop"`
	// Ambiguous is the number of copies whose fate the timing bounds could not decide (the worker
	// lagged close to the window's edges); they are not judged.
	Ambiguous int `json:"ambiguous"`

	// Leaked counts copies that appeared although they must not: duplicates let through, and
	// every repeated delivery of the same record (DoubleDelivered).
	Leaked          int            `json:"leaked"`
	LeakedByKind    map[string]int `json:"leaked_by_kind"`
	DoubleDelivered int            `json:"double_delivered"`
	// Lost counts unique events that never appeared: false positives of the filter (or bugs).
	Lost       int            `json:"lost"`
	LostByKind map[string]int `json:"lost_by_kind"`
	// ExpectedLoss is Uniques × FalsePositiveRate, and LossBound its Poisson upper bound at
	// LossQuantile: a run with Lost > LossBound fails.
	ExpectedLoss float64 `json:"expected_loss"`
	LossBound    int     `json:"loss_bound"`
	// MeasuredLossRate is Lost/Uniques.
	MeasuredLossRate float64 `json:"measured_loss_rate"`
	// SteadyUniques and SteadyLost count the unique events first sent once the window had
	// filled (N·interval after the start), and SteadyLossRate is their ratio: with a load at the
	// filter's capacity, the false-positive rate of a full window.
	SteadyUniques  int     `json:"steady_uniques"`
	SteadyLost     int     `json:"steady_lost"`
	SteadyLossRate float64 `json:"steady_loss_rate"`
	// SteadyByFilter splits SteadyUniques and SteadyLost by the filter that judged them, named as
	// the worker's metrics name it (the filter label): the input partition in decimal, or
	// "global".
	SteadyByFilter map[string]FilterLoss `json:"steady_by_filter,omitempty"`
	// OrderViolations counts output records whose lt-seq is lower than that of an earlier output
	// record of the same Kafka key from the same input partition.
	OrderViolations int `json:"order_violations"`

	// Oversize is the number of oversized records sent (Config.Oversize); OversizeDelivered of
	// them reached the output. Refused of them did not, but their partitions went on (the worker
	// wrote them to its dead-letter topic: DeadLetters of them were found there); at the others
	// their partitions blocked (Blocked). Refused records and the records behind a block are not
	// judged as events.
	Oversize          int     `json:"oversize,omitempty"`
	OversizeDelivered int     `json:"oversize_delivered,omitempty"`
	Refused           int     `json:"refused,omitempty"`
	DeadLetters       int     `json:"dead_letters,omitempty"`
	Blocked           []Block `json:"blocked,omitempty"`

	// Audit is what the worker's audit topic held (Config.AuditTopic); nil without one.
	Audit *AuditCount `json:"audit,omitempty"`

	// Examples describes up to 20 failures, for debugging.
	Examples []string `json:"examples,omitempty"`
}

// FilterLoss counts the unique events one filter judged and how many of them were lost.
type FilterLoss struct {
	Uniques int `json:"uniques"`
	Lost    int `json:"lost"`
}

// Point is one bucket of the report's time series.
type Point struct {
	// T is the bucket's start in seconds since the run's start.
	T float64 `json:"t"`
	// Sent records were created in the bucket, Dups of them duplicates and Dropped of them never
	// delivered.
	Sent    int `json:"sent"`
	Dups    int `json:"dups"`
	Dropped int `json:"dropped"`
	// MustDrop of the records sent in the bucket had to be dropped.
	MustDrop int `json:"must_drop"`
	// Out records were first delivered in the bucket, with these latency percentiles (ms).
	Out    int     `json:"out"`
	LatP50 float64 `json:"lat_p50_ms"`
	LatP99 float64 `json:"lat_p99_ms"`
}

// verifyInput is everything the verifier looks at.
type verifyInput struct {
	sent   []sentRec // by lt-seq, end markers included
	obs    [][]Obs   // per output partition, in offset order
	end    int64     // when reading stopped, ns since start: bounds records with no later evidence
	expect Expect
	width  time.Duration // time series bucket width; 0 means no time series
	// deadLetters holds the lt-seq of the records found in the worker's dead-letter topic.
	deadLetters map[int64]bool
	// audit holds the records of this run found in the worker's audit topic; nil without one.
	audit []AuditRec
	// sources and seed are Config.Sources and Config.Seed, for Verdict.BySource.
	sources int
	seed    uint64
}

// verifyOutput is the verifier's result.
type verifyOutput struct {
	verdict   Verdict
	latencies []int64 // of every first delivery, ns
	series    []Point
	firstSent int64 // ns
	lastSent  int64 // creation time of the last planned record
	lastSeen  int64 // newest output record of this run, markers included
	firstOut  int64
	lastOut   int64
}

// verify judges a run. It is a pure function of its input. The stages, in order: read the
// deliveries, bound when the worker processed each record, count what was sent, judge every
// event (or, for a pipeline that does not deduplicate, every record), check the per-key order,
// then derive the loss bound, the send times and the time series.
func verify(in verifyInput) verifyOutput {
	vr := newVerifier(in)
	vr.readDeliveries()
	vr.boundProcessing()
	vr.refusals()
	maxOrd := vr.countSent()
	switch {
	case in.expect.ExpectAll:
		vr.judgeAllOnce()
	case vr.v.Records > 0:
		vr.judgeEvents(maxOrd)
	}
	vr.checkAudit()
	vr.checkOrder()
	vr.lossBounds()
	vr.sendTimes()
	if in.width > 0 {
		vr.out.series = series(in, vr.delivered, vr.firstAt, vr.mustDrop, in.width)
	}
	vr.out.verdict = vr.v
	return vr.out
}

// verifier is the state of one verify call, which its stages fill in one after the other.
type verifier struct {
	in  verifyInput
	v   Verdict
	out verifyOutput
	// guaranteed is how long an identity is surely remembered, forgotten when it surely is not.
	guaranteed, forgotten time.Duration

	// By lt-seq: unmarked deliveries (saturating), the first unmarked delivery and the first
	// appearance of any kind (-1: none), when the worker processed the record at the latest
	// (hi), and whether the record is a copy that had to be dropped (for the time series).
	delivered []uint8
	firstAt   []int64
	anyAt     []int64
	hi        []int64
	mustDrop  []bool
	// excluded: not judged (an oversized record the output refused, or behind one that blocked).
	excluded []bool
	// lostSeqs: the lt-seq of every lost unique event (its first copy), for the audit check.
	lostSeqs []int
}

func newVerifier(in verifyInput) *verifier {
	n := len(in.sent)
	vr := &verifier{
		in:         in,
		v:          Verdict{ByKind: map[string]int{}, LeakedByKind: map[string]int{}, LostByKind: map[string]int{}},
		out:        verifyOutput{firstOut: -1, lastOut: -1},
		guaranteed: time.Duration(in.expect.WindowCount-1) * in.expect.WindowInterval,
		forgotten:  time.Duration(in.expect.WindowCount) * in.expect.WindowInterval,
		delivered:  make([]uint8, n),
		firstAt:    make([]int64, n),
		anyAt:      make([]int64, n),
		hi:         make([]int64, n),
		mustDrop:   make([]bool, n),
	}
	for i := range vr.firstAt {
		vr.firstAt[i], vr.anyAt[i] = -1, -1
	}
	return vr
}

// example keeps a description of a failure, up to maxExamples.
func (vr *verifier) example(format string, a ...any) {
	if len(vr.v.Examples) < maxExamples {
		vr.v.Examples = append(vr.v.Examples, fmt.Sprintf(format, a...))
	}
}

// readDeliveries records every output record: its first delivery time (unmarked) and its first
// evidence of processing (any appearance); it counts unknown, marked and repeated records.
func (vr *verifier) readDeliveries() {
	n := int64(len(vr.in.sent))
	for _, part := range vr.in.obs {
		for _, o := range part {
			if o.Seq < 0 || o.Seq >= n {
				vr.v.Unknown++
				continue
			}
			s := o.Seq
			if vr.anyAt[s] < 0 || o.At < vr.anyAt[s] {
				vr.anyAt[s] = o.At
			}
			vr.out.lastSeen = max(vr.out.lastSeen, o.At)
			if vr.in.sent[s].kind == KindMarker {
				continue
			}
			if o.Marked {
				vr.v.Marked++
				continue
			}
			vr.v.Appearances++
			if vr.delivered[s] < 255 {
				vr.delivered[s]++
			}
			if vr.firstAt[s] < 0 || o.At < vr.firstAt[s] {
				vr.firstAt[s] = o.At
			}
		}
	}
}

// boundProcessing sets hi[s], the latest the worker processed record s: its own appearance, else
// the first appearance of a later record of the same input partition (processed after it), else
// the end of reading.
func (vr *verifier) boundProcessing() {
	nextAt := map[int32]int64{}
	for s := len(vr.in.sent) - 1; s >= 0; s-- {
		p := vr.in.sent[s].part
		if at := vr.anyAt[s]; at >= 0 {
			vr.hi[s] = at
			if na, ok := nextAt[p]; !ok || at < na {
				nextAt[p] = at
			}
			continue
		}
		if na, ok := nextAt[p]; ok {
			vr.hi[s] = na
		} else {
			vr.hi[s] = vr.in.end
		}
	}
}

// countSent counts the records sent by kind and the end markers seen, the records delivered
// (with their latencies) and the repeated deliveries, which are leaks. It returns the largest
// event ordinal.
func (vr *verifier) countSent() (maxOrd uint32) {
	v, out := &vr.v, &vr.out
	for s, r := range vr.in.sent {
		if r.kind == KindMarker {
			v.MarkersSent++
			if vr.anyAt[s] >= 0 {
				v.Markers++
			}
			continue
		}
		v.Records++
		v.ByKind[r.kind.String()]++
		vr.countSource(r, vr.delivered[s] == 0)
		if r.late {
			v.Late++
		}
		maxOrd = max(maxOrd, r.ord)
		if d := vr.delivered[s]; d > 1 {
			v.DoubleDelivered += int(d) - 1
			v.Leaked += int(d) - 1
			v.LeakedByKind[r.kind.String()] += int(d) - 1
			vr.example("seq %d (%s of event %d) delivered %d times", s, r.kind, r.ord, d)
		}
		if vr.delivered[s] > 0 {
			v.Delivered++
			at := vr.firstAt[s]
			out.latencies = append(out.latencies, at-r.at)
			if out.firstOut < 0 || at < out.firstOut {
				out.firstOut = at
			}
			out.lastOut = max(out.lastOut, at)
		}
	}
	return maxOrd
}

// SourceCount is what the verifier counted for one source (Verdict.BySource).
type SourceCount struct {
	Records int `json:"records"`
	// Dropped counts the records that never appeared in the output: what the worker's
	// kdedup_source_duplicates_total{source} counts, its false positives included.
	Dropped int `json:"dropped"`
}

// countSource counts a record of r's source, dropped if it was never delivered.
func (vr *verifier) countSource(r sentRec, dropped bool) {
	if vr.in.sources <= 0 {
		return
	}
	if vr.v.BySource == nil {
		vr.v.BySource = map[string]*SourceCount{}
	}
	name := SourceOf(r.ord, vr.in.sources, vr.in.seed)
	c := vr.v.BySource[name]
	if c == nil {
		c = &SourceCount{}
		vr.v.BySource[name] = c
	}
	c.Records++
	if dropped {
		c.Dropped++
	}
}

// judgeAllOnce judges a pipeline that does not deduplicate: every record is unique.
func (vr *verifier) judgeAllOnce() {
	for s, r := range vr.in.sent {
		if r.kind == KindMarker || vr.excluded[s] {
			continue
		}
		vr.v.Uniques++
		if vr.delivered[s] == 0 {
			vr.v.Lost++
			vr.lostSeqs = append(vr.lostSeqs, s)
			vr.v.LostByKind[r.kind.String()]++
			vr.example("seq %d (%s of event %d) never delivered", s, r.kind, r.ord)
		}
	}
}

// epoch is the copies of one event that one filter judges (all of them under scope global, those
// of one input partition under scope partition), beyond-window copies excepted.
type epoch struct {
	unit      int32 // input partition, -1 under scope global
	members   []int
	minSent   int64
	lastIns   int64 // newest delivery of a member, -1 if none
	delivered bool
}

// judgeEvents judges every event: its copies within the window (judgeEpoch), then its copies
// beyond the window (judgeBeyond).
func (vr *verifier) judgeEvents(maxOrd uint32) {
	start, seqs := vr.eventIndex(maxOrd)
	var epochs []epoch
	var beyonds []int
	for ord := 0; ord+1 < len(start); ord++ {
		members := seqs[start[ord]:start[ord+1]]
		if len(members) == 0 {
			continue
		}
		epochs, beyonds = vr.splitEvent(members, epochs[:0], beyonds[:0])
		for i := range epochs {
			vr.judgeEpoch(ord, &epochs[i])
		}
		for _, b := range beyonds {
			vr.judgeBeyond(ord, b, epochs)
		}
	}
}

// eventIndex returns the sequence numbers of every event, in order: those of event ord are
// seqs[start[ord]:start[ord+1]] (a counting sort by ordinal).
func (vr *verifier) eventIndex(maxOrd uint32) (start, seqs []int) {
	start = make([]int, int(maxOrd)+2)
	for s, r := range vr.in.sent {
		if r.kind != KindMarker && !vr.excluded[s] {
			start[r.ord+1]++
		}
	}
	for i := 1; i < len(start); i++ {
		start[i] += start[i-1]
	}
	fill := append([]int(nil), start...)
	seqs = make([]int, start[len(start)-1])
	for s, r := range vr.in.sent {
		if r.kind != KindMarker && !vr.excluded[s] {
			seqs[fill[r.ord]] = s
			fill[r.ord]++
		}
	}
	return start, seqs
}

// unit returns the filter that judges record s: its input partition, or -1 under scope global.
func (vr *verifier) unit(s int) int32 {
	if vr.in.expect.Global {
		return -1
	}
	return vr.in.sent[s].part
}

// splitEvent appends the members of one event to epochs, by unit, and its beyond-window copies
// to beyonds.
func (vr *verifier) splitEvent(members []int, epochs []epoch, beyonds []int) ([]epoch, []int) {
	for _, s := range members {
		r := vr.in.sent[s]
		if r.kind == KindBeyond {
			beyonds = append(beyonds, s)
			continue
		}
		u := vr.unit(s)
		i := 0
		for i < len(epochs) && epochs[i].unit != u {
			i++
		}
		if i == len(epochs) {
			epochs = append(epochs, epoch{unit: u, minSent: r.at, lastIns: -1})
		}
		epochs[i].members = append(epochs[i].members, s)
		epochs[i].minSent = min(epochs[i].minSent, r.at)
	}
	return epochs, beyonds
}

// judgeEpoch judges the copies of event ord in one unit: one must appear (else the event was
// lost); every other copy processed within the guaranteed window of it must not (else it
// leaked), and one that may have been processed later is not judged.
func (vr *verifier) judgeEpoch(ord int, e *epoch) {
	v, sent := &vr.v, vr.in.sent
	v.Uniques++
	steady := e.minSent >= int64(vr.forgotten)
	ins := -1 // the delivered member delivered first: it inserted the identity
	for _, s := range e.members {
		if vr.delivered[s] > 0 {
			if ins < 0 || vr.firstAt[s] < vr.firstAt[ins] {
				ins = s
			}
			e.lastIns = max(e.lastIns, vr.firstAt[s])
		}
	}
	if ins < 0 {
		first := e.members[0]
		v.Lost++
		vr.lostSeqs = append(vr.lostSeqs, first)
		if steady {
			vr.steady(e.unit, true)
		}
		v.LostByKind[sent[first].kind.String()]++
		vr.example("event %d (%s seq %d, partition %d) lost: none of its %d copies in its unit was delivered",
			ord, sent[first].kind, first, sent[first].part, len(e.members))
		return
	}
	if steady {
		vr.steady(e.unit, false)
	}
	e.delivered = true
	for _, s := range e.members {
		if s == ins {
			continue
		}
		// Upper bound of the gap between the two processing times.
		gap := time.Duration(max(vr.hi[s], vr.hi[ins]) - min(sent[s].at, sent[ins].at))
		if gap >= vr.guaranteed {
			v.Ambiguous++
			continue
		}
		v.MustDrop++
		vr.mustDrop[s] = true
		if vr.delivered[s] > 0 {
			v.Leaked++
			v.LeakedByKind[sent[s].kind.String()]++
			vr.example("duplicate leaked: seq %d (%s of event %d, partition %d) delivered although seq %d was delivered at most %v apart",
				s, sent[s].kind, ord, sent[s].part, ins, gap.Round(time.Millisecond))
		}
	}
}

// judgeBeyond judges beyond-window copy b of event ord against the event's epoch in its unit: sent
// surely after the window forgot the event, it must appear; processed surely within the
// guaranteed window, it must not; otherwise it is not judged.
func (vr *verifier) judgeBeyond(ord, b int, epochs []epoch) {
	v, sent := &vr.v, vr.in.sent
	u := vr.unit(b)
	var e *epoch
	for i := range epochs {
		if epochs[i].unit == u {
			e = &epochs[i]
		}
	}
	switch {
	case e == nil:
		// Nothing of the event in its unit: the copy is unique.
		v.Uniques++
		if vr.delivered[b] == 0 {
			v.Lost++
			vr.lostSeqs = append(vr.lostSeqs, b)
			v.LostByKind[KindBeyond.String()]++
			vr.example("event %d (beyond seq %d) lost", ord, b)
		}
		return
	case !e.delivered:
		// Its copies were lost: the beyond copy's fate is tied to the same false positive.
		v.Ambiguous++
		return
	}
	lo := time.Duration(sent[b].at - e.lastIns)  // lower bound of the gap
	hiGap := time.Duration(vr.hi[b] - e.minSent) // upper bound of the gap
	if vr.in.expect.Refresh {                    // from the last copy the unit's filter judged, delivered or not
		last, lastSent := e.lastIns, e.minSent
		for _, m := range e.members {
			last, lastSent = max(last, vr.hi[m]), max(lastSent, sent[m].at)
		}
		lo, hiGap = time.Duration(sent[b].at-last), time.Duration(vr.hi[b]-lastSent)
	}
	switch {
	case lo > vr.forgotten:
		v.Uniques++
		vr.steady(u, vr.delivered[b] == 0) // sent more than a window after its original
		if vr.delivered[b] == 0 {
			v.Lost++
			vr.lostSeqs = append(vr.lostSeqs, b)
			v.LostByKind[KindBeyond.String()]++
			vr.example("event %d: beyond-window copy seq %d (partition %d) lost although sent %v after the last delivery",
				ord, b, sent[b].part, lo.Round(time.Millisecond))
		}
	case hiGap < vr.guaranteed:
		v.MustDrop++
		vr.mustDrop[b] = true
		if vr.delivered[b] > 0 {
			v.Leaked++
			v.LeakedByKind[KindBeyond.String()]++
			vr.example("duplicate leaked: seq %d of event %d delivered within %v", b, ord, hiGap.Round(time.Millisecond))
		}
	default:
		v.Ambiguous++
	}
}

// steady counts a unique event of unit first sent once the window had filled, and whether it was
// lost.
func (vr *verifier) steady(unit int32, lost bool) {
	v := &vr.v
	name := scopeGlobal
	if unit >= 0 {
		name = strconv.Itoa(int(unit))
	}
	if v.SteadyByFilter == nil {
		v.SteadyByFilter = map[string]FilterLoss{}
	}
	c := v.SteadyByFilter[name]
	c.Uniques++
	v.SteadyUniques++
	if lost {
		c.Lost++
		v.SteadyLost++
	}
	v.SteadyByFilter[name] = c
}

// checkOrder counts per-key order violations: within one output partition, the records of one
// entity from one input partition must keep increasing lt-seq. An entity's first input partition
// is its home, tracked in a slice; the rare others in a map.
func (vr *verifier) checkOrder() {
	sent := vr.in.sent
	var maxEntity uint32
	for _, r := range sent {
		if r.kind != KindMarker {
			maxEntity = max(maxEntity, r.entity)
		}
	}
	last := make([]int64, int(maxEntity)+1)
	home := make([]int32, int(maxEntity)+1)
	for i := range last {
		last[i], home[i] = -1, -1
	}
	type ekey struct {
		entity uint32
		part   int32
	}
	lastX := map[ekey]int64{}
	seen := make([]bool, len(sent))
	for _, part := range vr.in.obs {
		for _, o := range part {
			if o.Seq < 0 || o.Seq >= int64(len(sent)) || seen[o.Seq] || sent[o.Seq].kind == KindMarker {
				continue
			}
			seen[o.Seq] = true
			r := sent[o.Seq]
			prev := int64(-1)
			if home[r.entity] < 0 {
				home[r.entity] = r.part
			}
			if home[r.entity] == r.part {
				prev = last[r.entity]
				last[r.entity] = max(prev, o.Seq)
			} else {
				k := ekey{r.entity, r.part}
				if p, ok := lastX[k]; ok {
					prev = p
				}
				lastX[k] = max(prev, o.Seq)
			}
			if prev > o.Seq {
				vr.v.OrderViolations++
				vr.example("order violation: seq %d (entity %d, input partition %d) delivered after seq %d", o.Seq, r.entity, r.part, prev)
			}
		}
	}
}

// lossBounds sets the expected loss, its bound and the measured loss rates.
func (vr *verifier) lossBounds() {
	v := &vr.v
	v.ExpectedLoss = float64(v.Uniques) * vr.in.expect.FalsePositiveRate
	if !vr.in.expect.ExpectAll {
		v.LossBound = PoissonUpper(v.ExpectedLoss, LossQuantile)
	}
	if v.Uniques > 0 {
		v.MeasuredLossRate = float64(v.Lost) / float64(v.Uniques)
	}
	if v.SteadyUniques > 0 {
		v.SteadyLossRate = float64(v.SteadyLost) / float64(v.SteadyUniques)
	}
}

// sendTimes sets the creation times of the first and the last planned record.
func (vr *verifier) sendTimes() {
	vr.out.firstSent = -1
	for _, r := range vr.in.sent {
		if r.kind == KindMarker {
			continue
		}
		if vr.out.firstSent < 0 {
			vr.out.firstSent = r.at
		}
		vr.out.lastSent = max(vr.out.lastSent, r.at)
	}
}

// series buckets sends (by creation time) and first deliveries (by read time).
func series(in verifyInput, delivered []uint8, firstAt []int64, mustDrop []bool, width time.Duration) []Point {
	w := int64(width)
	var end int64
	for s, r := range in.sent {
		end = max(end, r.at)
		if firstAt[s] >= 0 {
			end = max(end, firstAt[s])
		}
	}
	nb := int(end/w) + 1
	pts := make([]Point, nb)
	lat := make([][]int64, nb)
	for s, r := range in.sent {
		if r.kind == KindMarker {
			continue
		}
		b := r.at / w
		pts[b].Sent++
		if r.kind != KindOriginal {
			pts[b].Dups++
		}
		if mustDrop[s] {
			pts[b].MustDrop++
		}
		if delivered[s] == 0 {
			pts[b].Dropped++
		} else {
			ob := firstAt[s] / w
			pts[ob].Out++
			lat[ob] = append(lat[ob], firstAt[s]-r.at)
		}
	}
	for i := range pts {
		pts[i].T = float64(int64(i)*w) / 1e9
		if len(lat[i]) > 0 {
			l := summarize(lat[i])
			pts[i].LatP50, pts[i].LatP99 = l.P50, l.P99
		}
	}
	return pts
}
