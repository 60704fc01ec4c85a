package loadtest

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// The synthetic scenario: window 3 × 1s (an identity is seen for at least 2s and at most 3s).
//
//	seq 0  event 0 original  p0 entity 1  t=0
//	seq 1  event 1 original  p1 entity 2  t=10ms
//	seq 2  event 1 immediate p1 entity 2  t=11ms
//	seq 3  event 0 within    p0 entity 1  t=100ms
//	seq 4  event 2 original  p0 entity 3  t=120ms
//	seq 5  event 3 original  p0 entity 4  t=130ms
//	seq 6  event 3 cross     p1 entity 5  t=300ms
//	seq 7  event 4 original  p0 entity 1  t=400ms
//	seq 8  event 5 original  p1 entity 6  t=500ms
//	seq 9  event 2 beyond    p0 entity 3  t=3.5s
//	seq 10 marker p0, seq 11 marker p1   t=3.6s
func scenario() []sentRec {
	ms := func(v int) int64 { return int64(time.Duration(v) * time.Millisecond) }
	return []sentRec{
		{at: ms(0), ord: 0, entity: 1, part: 0, kind: KindOriginal},
		{at: ms(10), ord: 1, entity: 2, part: 1, kind: KindOriginal},
		{at: ms(11), ord: 1, entity: 2, part: 1, kind: KindImmediate},
		{at: ms(100), ord: 0, entity: 1, part: 0, kind: KindWithin},
		{at: ms(120), ord: 2, entity: 3, part: 0, kind: KindOriginal},
		{at: ms(130), ord: 3, entity: 4, part: 0, kind: KindOriginal},
		{at: ms(300), ord: 3, entity: 5, part: 1, kind: KindCross},
		{at: ms(400), ord: 4, entity: 1, part: 0, kind: KindOriginal},
		{at: ms(500), ord: 5, entity: 6, part: 1, kind: KindOriginal},
		{at: ms(3500), ord: 2, entity: 3, part: 0, kind: KindBeyond},
		{at: ms(3600), part: 0, kind: KindMarker},
		{at: ms(3600), part: 1, kind: KindMarker},
	}
}

// deliver returns the output of a pipeline that delivered seqs (in this order within each
// partition, output partition = input partition), each read lat after it was sent. Markers are
// always delivered last.
func deliver(sent []sentRec, seqs []int, lat time.Duration) [][]Obs {
	out := make([][]Obs, 2)
	for _, s := range seqs {
		p := sent[s].part
		out[p] = append(out[p], Obs{Seq: int64(s), At: sent[s].at + int64(lat)})
	}
	for s, r := range sent {
		if r.kind == KindMarker {
			out[r.part] = append(out[r.part], Obs{Seq: int64(s), At: r.at + int64(lat)})
		}
	}
	return out
}

func window3x1s(global bool) Expect {
	return Expect{WindowCount: 3, WindowInterval: time.Second, Global: global, FalsePositiveRate: 1e-6}
}

func TestVerify(t *testing.T) {
	lat := 5 * time.Millisecond
	correctPartition := []int{0, 1, 4, 5, 6, 7, 8, 9} // originals, the cross copy, the beyond copy
	correctGlobal := []int{0, 1, 4, 5, 7, 8, 9}
	tests := []struct {
		name   string
		expect Expect
		obs    func(sent []sentRec) [][]Obs
		want   Verdict // only the judged counters are compared
		pass   bool
		match  string // an example must contain this
	}{
		{
			name: "correct partition scope", expect: window3x1s(false),
			obs:  func(s []sentRec) [][]Obs { return deliver(s, correctPartition, lat) },
			want: Verdict{Uniques: 8, MustDrop: 2},
			pass: true,
		},
		{
			name: "correct global scope", expect: window3x1s(true),
			obs:  func(s []sentRec) [][]Obs { return deliver(s, correctGlobal, lat) },
			want: Verdict{Uniques: 7, MustDrop: 3},
			pass: true,
		},
		{
			name: "one leaked within duplicate", expect: window3x1s(false),
			obs:   func(s []sentRec) [][]Obs { return deliver(s, []int{0, 1, 3, 4, 5, 6, 7, 8, 9}, lat) },
			want:  Verdict{Uniques: 8, MustDrop: 2, Leaked: 1},
			match: "seq 3 (within of event 0",
		},
		{
			name: "one leaked immediate duplicate", expect: window3x1s(false),
			obs:   func(s []sentRec) [][]Obs { return deliver(s, []int{0, 1, 2, 4, 5, 6, 7, 8, 9}, lat) },
			want:  Verdict{Uniques: 8, MustDrop: 2, Leaked: 1},
			match: "seq 2 (immediate",
		},
		{
			name: "cross copy leaked under global scope", expect: window3x1s(true),
			obs:   func(s []sentRec) [][]Obs { return deliver(s, correctPartition, lat) },
			want:  Verdict{Uniques: 7, MustDrop: 3, Leaked: 1},
			match: "seq 6 (cross",
		},
		{
			name: "one record delivered twice", expect: window3x1s(false),
			obs:   func(s []sentRec) [][]Obs { return deliver(s, []int{0, 1, 4, 4, 5, 6, 7, 8, 9}, lat) },
			want:  Verdict{Uniques: 8, MustDrop: 2, Leaked: 1, DoubleDelivered: 1},
			match: "delivered 2 times",
		},
		{
			name: "one lost original", expect: window3x1s(false),
			obs:   func(s []sentRec) [][]Obs { return deliver(s, []int{0, 4, 5, 6, 7, 8, 9}, lat) },
			want:  Verdict{Uniques: 8, MustDrop: 1, Lost: 1},
			match: "event 1 (original seq 1",
		},
		{
			name: "original lost but its duplicate delivered: the event is not lost", expect: window3x1s(false),
			obs:  func(s []sentRec) [][]Obs { return deliver(s, []int{1, 3, 4, 5, 6, 7, 8, 9}, lat) },
			want: Verdict{Uniques: 8, MustDrop: 2},
			pass: true,
		},
		{
			name: "cross copy lost under partition scope", expect: window3x1s(false),
			obs:   func(s []sentRec) [][]Obs { return deliver(s, []int{0, 1, 4, 5, 7, 8, 9}, lat) },
			want:  Verdict{Uniques: 8, MustDrop: 2, Lost: 1},
			match: "event 3 (cross seq 6",
		},
		{
			name: "beyond-window copy lost", expect: window3x1s(false),
			obs:   func(s []sentRec) [][]Obs { return deliver(s, []int{0, 1, 4, 5, 6, 7, 8}, lat) },
			want:  Verdict{Uniques: 8, MustDrop: 2, Lost: 1},
			match: "beyond-window copy seq 9",
		},
		{
			name: "order swap", expect: window3x1s(false),
			obs:   func(s []sentRec) [][]Obs { return deliver(s, []int{7, 1, 4, 5, 6, 0, 8, 9}, lat) },
			want:  Verdict{Uniques: 8, MustDrop: 2, OrderViolations: 1},
			match: "seq 0 (entity 1, input partition 0) delivered after seq 7",
		},
		{
			name: "a lagging worker makes a late duplicate ambiguous, not leaked", expect: window3x1s(false),
			obs: func(s []sentRec) [][]Obs {
				out := deliver(s, []int{0, 1, 3, 4, 5, 6, 7, 8, 9}, lat)
				out[0][1].At = s[3].at + int64(2500*time.Millisecond) // seq 3 read 2.5s after it was sent
				return out
			},
			want: Verdict{Uniques: 8, MustDrop: 1, Ambiguous: 1},
			pass: true,
		},
		{
			name: "expect all: every record once", expect: Expect{ExpectAll: true, WindowCount: 3, WindowInterval: time.Second},
			obs:  func(s []sentRec) [][]Obs { return deliver(s, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, lat) },
			want: Verdict{Uniques: 10},
			pass: true,
		},
		{
			name: "expect all: a dropped duplicate is a loss", expect: Expect{ExpectAll: true, WindowCount: 3, WindowInterval: time.Second},
			obs:   func(s []sentRec) [][]Obs { return deliver(s, []int{0, 1, 2, 4, 5, 6, 7, 8, 9}, lat) },
			want:  Verdict{Uniques: 10, Lost: 1},
			match: "seq 3 (within of event 0) never delivered",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sent := scenario()
			obs := tt.obs(sent)
			vo := verify(verifyInput{sent: sent, obs: obs, end: int64(4 * time.Second), expect: tt.expect, width: 500 * time.Millisecond})
			v := vo.verdict
			got := Verdict{Uniques: v.Uniques, MustDrop: v.MustDrop, Ambiguous: v.Ambiguous, Leaked: v.Leaked,
				DoubleDelivered: v.DoubleDelivered, Lost: v.Lost, OrderViolations: v.OrderViolations}
			if !equalCounters(got, tt.want) {
				t.Errorf("verdict counters = %+v, want %+v\nexamples: %q", got, tt.want, v.Examples)
			}
			if v.Records != 10 || v.MarkersSent != 2 || v.Markers != 2 {
				t.Errorf("records %d, markers %d/%d; want 10, 2/2", v.Records, v.Markers, v.MarkersSent)
			}
			r := &Report{Verdict: v, Settings: Settings{FalsePositiveRate: tt.expect.FalsePositiveRate}}
			r.Judge()
			if r.Pass != tt.pass {
				t.Errorf("Pass = %v, want %v (failures %q)", r.Pass, tt.pass, r.Failures)
			}
			if tt.match != "" && !slices.ContainsFunc(v.Examples, func(e string) bool { return strings.Contains(e, tt.match) }) {
				t.Errorf("no example contains %q: %q", tt.match, v.Examples)
			}
			if tt.pass && len(v.Examples) != 0 {
				t.Errorf("a passing run has examples: %q", v.Examples)
			}
		})
	}
}

func equalCounters(a, b Verdict) bool {
	return a.Uniques == b.Uniques && a.MustDrop == b.MustDrop && a.Ambiguous == b.Ambiguous && a.Leaked == b.Leaked &&
		a.DoubleDelivered == b.DoubleDelivered && a.Lost == b.Lost && a.OrderViolations == b.OrderViolations
}

func TestVerifyMarkMode(t *testing.T) {
	sent := scenario()
	// Mark mode delivers everything; the duplicates carry the mark.
	out := deliver(sent, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, time.Millisecond)
	for p := range out {
		for i, o := range out[p] {
			if k := sent[o.Seq].kind; k == KindImmediate || k == KindWithin {
				out[p][i].Marked = true
			}
		}
	}
	v := verify(verifyInput{sent: sent, obs: out, end: int64(4 * time.Second), expect: window3x1s(false)}).verdict
	if v.Leaked != 0 || v.Lost != 0 || v.Marked != 2 || v.Delivered != 8 || v.OrderViolations != 0 {
		t.Errorf("mark mode: leaked %d lost %d marked %d delivered %d order %d; want 0 0 2 8 0 (%q)",
			v.Leaked, v.Lost, v.Marked, v.Delivered, v.OrderViolations, v.Examples)
	}
}

func TestVerifyUnknownAndLatency(t *testing.T) {
	sent := scenario()
	out := deliver(sent, []int{0, 1, 4, 5, 6, 7, 8, 9}, 7*time.Millisecond)
	out[1] = append(out[1], Obs{Seq: 999, At: 1})
	vo := verify(verifyInput{sent: sent, obs: out, end: int64(4 * time.Second), expect: window3x1s(false), width: time.Second})
	if vo.verdict.Unknown != 1 {
		t.Errorf("unknown = %d, want 1", vo.verdict.Unknown)
	}
	if len(vo.latencies) != 8 {
		t.Fatalf("%d latencies, want 8", len(vo.latencies))
	}
	for _, l := range vo.latencies {
		if l != int64(7*time.Millisecond) {
			t.Errorf("latency %v, want 7ms", time.Duration(l))
		}
	}
	// Series: 4 one-second buckets; 9 records sent in the first, 1 (the beyond copy) in the fourth.
	if len(vo.series) != 4 || vo.series[0].Sent != 9 || vo.series[0].Dups != 3 || vo.series[0].Dropped != 2 || vo.series[3].Sent != 1 || vo.series[3].Out != 1 {
		t.Errorf("series = %+v", vo.series)
	}
}

func TestPoissonUpper(t *testing.T) {
	tests := []struct {
		lambda, q float64
		want      int
	}{
		{0, 0.999, 0},
		{0.0005, 0.999, 0}, // P(X=0) = e^-0.0005 > 0.999
		{0.003, 0.999, 1},
		{1, 0.999, 5},   // P(X<=4) = 0.99634, P(X<=5) = 0.99941
		{10, 0.999, 21}, // P(X<=20) = 0.99841, P(X<=21) = 0.99921
		{1000, 0.999, 1099},
	}
	for _, tt := range tests {
		if got := PoissonUpper(tt.lambda, tt.q); got != tt.want {
			t.Errorf("PoissonUpper(%v, %v) = %d, want %d", tt.lambda, tt.q, got, tt.want)
		}
	}
}

func TestVerifySteadyLoss(t *testing.T) {
	sent := scenario()
	// The beyond copy (seq 9, sent at 3.5s, after the 3s window) is the only unique sent once the
	// window had filled; lose it. It is judged by partition 0's filter, or the global one.
	for _, tt := range []struct {
		global bool
		filter string
	}{{false, "0"}, {true, "global"}} {
		v := verify(verifyInput{sent: sent, obs: deliver(sent, []int{0, 1, 4, 5, 6, 7, 8}, time.Millisecond),
			end: int64(4 * time.Second), expect: window3x1s(tt.global)}).verdict
		if v.SteadyUniques != 1 || v.SteadyLost != 1 || v.SteadyLossRate != 1 || v.Lost != 1 {
			t.Errorf("global=%v: steady %d/%d (%v), lost %d; want 1/1 (1), 1", tt.global, v.SteadyLost, v.SteadyUniques, v.SteadyLossRate, v.Lost)
		}
		if want := map[string]FilterLoss{tt.filter: {Uniques: 1, Lost: 1}}; !maps.Equal(v.SteadyByFilter, want) {
			t.Errorf("global=%v: steady by filter %v, want %v", tt.global, v.SteadyByFilter, want)
		}
	}
}

// TestVerifyRefresh checks Expect.Refresh: a beyond-window copy sent 3.2s after the original but
// 1.7s after a copy within the window must pass without refresh and must be dropped with it (the
// within copy re-armed the identity).
func TestVerifyRefresh(t *testing.T) {
	ms := func(v int) int64 { return int64(time.Duration(v) * time.Millisecond) }
	sent := []sentRec{
		{at: ms(0), ord: 0, entity: 1, part: 0, kind: KindOriginal},
		{at: ms(1500), ord: 0, entity: 1, part: 0, kind: KindWithin},
		{at: ms(3200), ord: 0, entity: 1, part: 0, kind: KindBeyond},
		{at: ms(3300), part: 0, kind: KindMarker},
		{at: ms(3300), part: 1, kind: KindMarker},
	}
	for _, refresh := range []bool{false, true} {
		expect := window3x1s(false)
		expect.Refresh = refresh
		// A worker with refresh: the original only.
		v := verify(verifyInput{sent: sent, obs: deliver(sent, []int{0}, 10*time.Millisecond), end: ms(3400), expect: expect}).verdict
		if refresh && (v.Lost != 0 || v.MustDrop != 1) || !refresh && v.Lost != 1 {
			t.Errorf("refresh=%v, beyond copy dropped: lost %d, must drop %d", refresh, v.Lost, v.MustDrop)
		}
		// A worker without refresh: the original and the beyond copy.
		v = verify(verifyInput{sent: sent, obs: deliver(sent, []int{0, 2}, 10*time.Millisecond), end: ms(3400), expect: expect}).verdict
		if refresh && v.Leaked != 1 || !refresh && (v.Leaked != 0 || v.Lost != 0) {
			t.Errorf("refresh=%v, beyond copy delivered: leaked %d, lost %d", refresh, v.Leaked, v.Lost)
		}
	}
}

// TestLatencyParts splits each record's first unmarked delivery at its produce request's
// acknowledgement; records never acknowledged, markers, marked and later copies are left out.
func TestLatencyParts(t *testing.T) {
	ms := int64(time.Millisecond)
	sent := []sentRec{{at: 0}, {at: 10 * ms}, {at: 20 * ms}, {at: 30 * ms, kind: KindMarker}}
	acked := []int64{5 * ms, 40 * ms, 0, 35 * ms}
	obs := [][]Obs{
		{{Seq: 0, At: 100 * ms}, {Seq: 1, At: 70 * ms, Marked: true}, {Seq: 2, At: 90 * ms}},
		{{Seq: 1, At: 60 * ms}, {Seq: 0, At: 200 * ms}, {Seq: 3, At: 50 * ms}, {Seq: 9, At: 1}},
	}
	lp := latencyParts(sent, acked, obs)
	if lp == nil || lp.Input.Count != 2 || lp.Rest.Count != 2 {
		t.Fatalf("latencyParts = %+v, want 2 records split", lp)
	}
	// seq 0: input 5ms, rest 95ms; seq 1: input 30ms, rest 20ms.
	if lp.Input.Max != 30 || lp.Rest.Max != 95 || lp.Input.Mean != 17.5 || lp.Rest.Mean != 57.5 {
		t.Errorf("latencyParts = %+v, want input 5 and 30 ms, rest 95 and 20 ms", lp)
	}
	if lp := latencyParts(sent, make([]int64, 4), obs); lp != nil {
		t.Errorf("latencyParts without acknowledgements = %+v, want nil", lp)
	}
}
