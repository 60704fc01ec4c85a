package loadtest

import (
	"fmt"
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
	// OrderViolations counts output records whose lt-seq is lower than that of an earlier output
	// record of the same Kafka key from the same input partition.
	OrderViolations int `json:"order_violations"`

	// Examples describes up to 20 failures, for debugging.
	Examples []string `json:"examples,omitempty"`
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

// verify judges a run. It is a pure function of its input.
func verify(in verifyInput) verifyOutput {
	n := len(in.sent)
	v := Verdict{ByKind: map[string]int{}, LeakedByKind: map[string]int{}, LostByKind: map[string]int{}}
	example := func(format string, a ...any) {
		if len(v.Examples) < maxExamples {
			v.Examples = append(v.Examples, fmt.Sprintf(format, a...))
		}
	}

	// Deliveries: first delivery time (unmarked), first evidence of processing (any appearance).
	delivered := make([]uint8, n)
	firstAt := make([]int64, n)
	anyAt := make([]int64, n)
	for i := range firstAt {
		firstAt[i], anyAt[i] = -1, -1
	}
	out := verifyOutput{firstOut: -1, lastOut: -1}
	for _, part := range in.obs {
		for _, o := range part {
			if o.Seq < 0 || o.Seq >= int64(n) {
				v.Unknown++
				continue
			}
			s := o.Seq
			if anyAt[s] < 0 || o.At < anyAt[s] {
				anyAt[s] = o.At
			}
			out.lastSeen = max(out.lastSeen, o.At)
			if in.sent[s].kind == KindMarker {
				continue
			}
			if o.Marked {
				v.Marked++
				continue
			}
			v.Appearances++
			if delivered[s] < 255 {
				delivered[s]++
			}
			if firstAt[s] < 0 || o.At < firstAt[s] {
				firstAt[s] = o.At
			}
		}
	}

	// hi[s] bounds when the worker processed record s: its own delivery, else the first evidence
	// of a later record of the same input partition (processed after it), else the end.
	mustDrop := make([]bool, n) // copies judged must-drop, for the time series
	hi := make([]int64, n)
	nextAt := map[int32]int64{}
	for s := n - 1; s >= 0; s-- {
		p := in.sent[s].part
		if anyAt[s] >= 0 {
			hi[s] = anyAt[s]
			if na, ok := nextAt[p]; !ok || anyAt[s] < na {
				nextAt[p] = anyAt[s]
			}
			continue
		}
		if na, ok := nextAt[p]; ok {
			hi[s] = na
		} else {
			hi[s] = in.end
		}
	}

	// Group records by event, in sequence order.
	var maxOrd uint32
	for s, r := range in.sent {
		if r.kind == KindMarker {
			v.MarkersSent++
			if anyAt[s] >= 0 {
				v.Markers++
			}
			continue
		}
		v.Records++
		v.ByKind[r.kind.String()]++
		maxOrd = max(maxOrd, r.ord)
		if d := delivered[s]; d > 1 {
			v.DoubleDelivered += int(d) - 1
			v.Leaked += int(d) - 1
			v.LeakedByKind[r.kind.String()] += int(d) - 1
			example("seq %d (%s of event %d) delivered %d times", s, r.kind, r.ord, d)
		}
		if delivered[s] > 0 {
			v.Delivered++
			out.latencies = append(out.latencies, firstAt[s]-r.at)
			if out.firstOut < 0 || firstAt[s] < out.firstOut {
				out.firstOut = firstAt[s]
			}
			out.lastOut = max(out.lastOut, firstAt[s])
		}
	}

	guaranteed := time.Duration(in.expect.WindowCount-1) * in.expect.WindowInterval
	forgotten := time.Duration(in.expect.WindowCount) * in.expect.WindowInterval

	if in.expect.ExpectAll {
		for s, r := range in.sent {
			if r.kind == KindMarker {
				continue
			}
			v.Uniques++
			if delivered[s] == 0 {
				v.Lost++
				v.LostByKind[r.kind.String()]++
				example("seq %d (%s of event %d) never delivered", s, r.kind, r.ord)
			}
		}
	} else if v.Records > 0 {
		// Event index: the sequence numbers of every event, in order (counting sort by ordinal).
		start := make([]int, int(maxOrd)+2)
		for _, r := range in.sent {
			if r.kind != KindMarker {
				start[r.ord+1]++
			}
		}
		for i := 1; i < len(start); i++ {
			start[i] += start[i-1]
		}
		fill := append([]int(nil), start...)
		seqs := make([]int, v.Records)
		for s, r := range in.sent {
			if r.kind != KindMarker {
				seqs[fill[r.ord]] = s
				fill[r.ord]++
			}
		}
		unit := func(s int) int32 {
			if in.expect.Global {
				return -1
			}
			return in.sent[s].part
		}
		type epoch struct {
			unit      int32
			members   []int
			minSent   int64
			lastIns   int64 // newest delivery of a member, -1 if none
			delivered bool
		}
		var epochs []epoch
		var beyonds []int
		for ord := 0; ord+1 < len(start); ord++ {
			members := seqs[start[ord]:start[ord+1]]
			if len(members) == 0 {
				continue
			}
			epochs, beyonds = epochs[:0], beyonds[:0]
			for _, s := range members {
				if in.sent[s].kind == KindBeyond {
					beyonds = append(beyonds, s)
					continue
				}
				u := unit(s)
				i := 0
				for i < len(epochs) && epochs[i].unit != u {
					i++
				}
				if i == len(epochs) {
					epochs = append(epochs, epoch{unit: u, minSent: in.sent[s].at, lastIns: -1})
				}
				epochs[i].members = append(epochs[i].members, s)
				epochs[i].minSent = min(epochs[i].minSent, in.sent[s].at)
			}
			for i := range epochs {
				e := &epochs[i]
				v.Uniques++
				steady := e.minSent >= int64(forgotten)
				if steady {
					v.SteadyUniques++
				}
				ins := -1 // the delivered member delivered first: it inserted the identity
				for _, s := range e.members {
					if delivered[s] > 0 {
						if ins < 0 || firstAt[s] < firstAt[ins] {
							ins = s
						}
						e.lastIns = max(e.lastIns, firstAt[s])
					}
				}
				if ins < 0 {
					first := e.members[0]
					v.Lost++
					if steady {
						v.SteadyLost++
					}
					v.LostByKind[in.sent[first].kind.String()]++
					example("event %d (%s seq %d, partition %d) lost: none of its %d copies in its unit was delivered",
						ord, in.sent[first].kind, first, in.sent[first].part, len(e.members))
					continue
				}
				e.delivered = true
				for _, s := range e.members {
					if s == ins {
						continue
					}
					// Upper bound of the gap between the two processing times.
					gap := time.Duration(max(hi[s], hi[ins]) - min(in.sent[s].at, in.sent[ins].at))
					switch {
					case gap < guaranteed:
						v.MustDrop++
						mustDrop[s] = true
						if delivered[s] > 0 {
							v.Leaked++
							v.LeakedByKind[in.sent[s].kind.String()]++
							example("duplicate leaked: seq %d (%s of event %d, partition %d) delivered although seq %d was delivered at most %v apart",
								s, in.sent[s].kind, ord, in.sent[s].part, ins, gap.Round(time.Millisecond))
						}
					default:
						v.Ambiguous++
					}
				}
			}
			for _, b := range beyonds {
				u := unit(b)
				var e *epoch
				for i := range epochs {
					if epochs[i].unit == u {
						e = &epochs[i]
					}
				}
				if e == nil || !e.delivered {
					// Nothing was inserted (or its copies were lost): the beyond copy's fate is
					// tied to the same false positive. Not judged.
					if e == nil {
						v.Uniques++
						if delivered[b] == 0 {
							v.Lost++
							v.LostByKind[KindBeyond.String()]++
							example("event %d (beyond seq %d) lost", ord, b)
						}
					} else {
						v.Ambiguous++
					}
					continue
				}
				lo := time.Duration(in.sent[b].at - e.lastIns) // lower bound of the gap
				hiGap := time.Duration(hi[b] - e.minSent)      // upper bound of the gap
				switch {
				case lo > forgotten:
					v.Uniques++
					v.SteadyUniques++ // sent more than a window after its original
					if delivered[b] == 0 {
						v.Lost++
						v.SteadyLost++
						v.LostByKind[KindBeyond.String()]++
						example("event %d: beyond-window copy seq %d (partition %d) lost although sent %v after the last delivery",
							ord, b, in.sent[b].part, lo.Round(time.Millisecond))
					}
				case hiGap < guaranteed:
					v.MustDrop++
					mustDrop[b] = true
					if delivered[b] > 0 {
						v.Leaked++
						v.LeakedByKind[KindBeyond.String()]++
						example("duplicate leaked: seq %d of event %d delivered within %v", b, ord, hiGap.Round(time.Millisecond))
					}
				default:
					v.Ambiguous++
				}
			}
		}
	}

	// Per-key order: within one output partition, the records of one entity from one input
	// partition must keep increasing lt-seq.
	var maxEntity uint32
	for _, r := range in.sent {
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
	seen := make([]bool, n)
	for _, part := range in.obs {
		for _, o := range part {
			if o.Seq < 0 || o.Seq >= int64(n) || seen[o.Seq] || in.sent[o.Seq].kind == KindMarker {
				continue
			}
			seen[o.Seq] = true
			r := in.sent[o.Seq]
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
				v.OrderViolations++
				example("order violation: seq %d (entity %d, input partition %d) delivered after seq %d", o.Seq, r.entity, r.part, prev)
			}
		}
	}

	v.ExpectedLoss = float64(v.Uniques) * in.expect.FalsePositiveRate
	if !in.expect.ExpectAll {
		v.LossBound = PoissonUpper(v.ExpectedLoss, LossQuantile)
	}
	if v.Uniques > 0 {
		v.MeasuredLossRate = float64(v.Lost) / float64(v.Uniques)
	}
	if v.SteadyUniques > 0 {
		v.SteadyLossRate = float64(v.SteadyLost) / float64(v.SteadyUniques)
	}

	// Send times and the time series.
	out.firstSent = -1
	for _, r := range in.sent {
		if r.kind == KindMarker {
			continue
		}
		if out.firstSent < 0 {
			out.firstSent = r.at
		}
		out.lastSent = max(out.lastSent, r.at)
	}
	if in.width > 0 {
		out.series = series(in, delivered, firstAt, mustDrop, in.width)
	}
	out.verdict = v
	return out
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
