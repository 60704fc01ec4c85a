package metrics

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// sourceClock is a settable clock for Sources.
type sourceClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *sourceClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *sourceClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestSources(t testing.TB, limit int) (*Sources, *prometheus.Registry, *sourceClock) {
	t.Helper()
	reg := prometheus.NewRegistry()
	clk := &sourceClock{t: fixedNow}
	return NewSources(reg, SourceOptions{Limit: limit, Now: clk.now}), reg, clk
}

// sourceValues gathers reg and returns the records and duplicates of every source label.
func sourceValues(t testing.TB, reg prometheus.Gatherer) (rec, dup map[string]uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	rec, dup = map[string]uint64{}, map[string]uint64{}
	for _, mf := range mfs {
		into := map[string]map[string]uint64{"kdedup_source_records_total": rec, "kdedup_source_duplicates_total": dup}[mf.GetName()]
		if into == nil {
			continue
		}
		for _, m := range mf.GetMetric() {
			into[m.GetLabel()[0].GetValue()] = uint64(m.GetCounter().GetValue())
		}
	}
	return rec, dup
}

func sum(m map[string]uint64) (n uint64) {
	for _, v := range m {
		n += v
	}
	return n
}

// sourceRecord is one record of a test stream.
type sourceRecord struct {
	src string
	dup bool
}

// feed records stream through tally, flushing every batch records.
func feed(tl *SourceTally, stream []sourceRecord, batch int) {
	for i, r := range stream {
		tl.Record([]byte(r.src), r.dup)
		if (i+1)%batch == 0 {
			tl.Flush()
		}
	}
	tl.Flush()
}

// TestSourcesSmallThenHeavy is the case: with a limit of 20, 200 small sources followed
// by three heavy ones give at most 21 label values, the heavy sources' records and duplicates
// are exact, and the series sum to the records counted.
func TestSourcesSmallThenHeavy(t *testing.T) {
	s, reg, clk := newTestSources(t, 20)
	var stream []sourceRecord
	for i := range 200 {
		for j := range 5 {
			stream = append(stream, sourceRecord{src: fmt.Sprintf("small-%03d", i), dup: j == 4})
		}
	}
	want := map[string][2]uint64{"heavy-a": {3000, 300}, "heavy-b": {2000, 1000}, "heavy-c": {1000, 1}}
	rng := rand.New(rand.NewPCG(1, 2))
	left := map[string][2]uint64{}
	for k, v := range want {
		left[k] = v
	}
	for len(left) > 0 { // interleave the heavy ones randomly
		names := make([]string, 0, len(left))
		for k := range left {
			names = append(names, k)
		}
		n := names[rng.IntN(len(names))]
		l := left[n]
		dup := rng.Uint64N(l[0]) < l[1]
		if dup {
			l[1]--
		}
		l[0]--
		left[n] = l
		if l[0] == 0 {
			delete(left, n)
		}
		stream = append(stream, sourceRecord{src: n, dup: dup})
	}
	tl := s.NewTally()
	feed(tl, stream, 100)
	clk.advance(DefaultSourceHold) // the candidates' last records settle under other
	rec, dup := sourceValues(t, reg)
	if len(rec) > 21 || len(dup) > 21 {
		t.Errorf("%d record and %d duplicate label values, want at most 21: %v", len(rec), len(dup), rec)
	}
	for name, w := range want {
		if rec[name] != w[0] || dup[name] != w[1] {
			t.Errorf("%s: %d records, %d duplicates; want exactly %d and %d", name, rec[name], dup[name], w[0], w[1])
		}
	}
	if got := sum(rec); got != uint64(len(stream)) {
		t.Errorf("records sum to %d, want %d: %v", got, len(stream), rec)
	}
	if got, want := sum(dup), uint64(200+300+1000+1); got != want {
		t.Errorf("duplicates sum to %d, want %d", got, want)
	}
	if rec[SourceOther] == 0 {
		t.Errorf("no records under other: %v", rec)
	}
}

// TestSourcesInvariants checks, against a reference count, over random streams: the label
// values stay within the limit plus other and none, no counter goes down, every record is counted
// once (exported sum plus pending equals the records, and equals them once Hold passed), and a
// source that kept its label since its first record is exact.
func TestSourcesInvariants(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			checkSourceInvariants(t, seed)
		})
	}
}

func checkSourceInvariants(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	limit := 1 + rng.IntN(10)
	s, reg, clk := newTestSources(t, limit)
	tl := s.NewTally()
	zipf := rand.NewZipf(rand.New(rand.NewPCG(seed, 8)), 1.1, 2, 400)
	exact := map[string][2]uint64{}
	firstLabelled := map[string]bool{} // sources labelled on their first record, and still
	prevRec, prevDup := map[string]uint64{}, map[string]uint64{}
	demoted := map[string]bool{}
	s.onDemote = func(name string) { demoted[name] = true }
	var total uint64
	for round := range 60 {
		// Sources drift: each round shifts the popular ones.
		for range 50 + rng.IntN(200) {
			name := fmt.Sprintf("s%d", (zipf.Uint64()+uint64(round)*3)%500)
			if rng.IntN(50) == 0 {
				name = ""
			}
			dup := rng.IntN(4) == 0
			tl.Record([]byte(name), dup)
			if name == "" {
				name = SourceNone
			}
			e := exact[name]
			e[0]++
			if dup {
				e[1]++
			}
			exact[name] = e
			total++
		}
		before := s.Labels()
		tl.Flush()
		clk.advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
		rec, dup := sourceValues(t, reg)
		if len(rec) > limit+2 || s.Labels() > limit {
			t.Fatalf("round %d: %d label values (%d sources) with limit %d", round, len(rec), s.Labels(), limit)
		}
		for name, v := range prevRec {
			if cur, ok := rec[name]; ok && cur < v || dup[name] < prevDup[name] && ok {
				t.Fatalf("round %d: %s went down: %d -> %d", round, name, v, cur)
			}
		}
		if rec[SourceOther] < prevRec[SourceOther] || rec[SourceNone] < prevRec[SourceNone] {
			t.Fatalf("round %d: other or none went down", round)
		}
		if got := sum(rec); got > total {
			t.Fatalf("round %d: exported %d records of %d", round, got, total)
		}
		if before < limit && round == 0 {
			for name := range rec {
				firstLabelled[name] = true
			}
		}
		for name := range firstLabelled {
			if demoted[name] {
				delete(firstLabelled, name)
			} else if name != SourceOther && name != SourceNone && (rec[name] != exact[name][0] || dup[name] != exact[name][1]) {
				t.Fatalf("round %d: %s kept its label but counts %d/%d, want %d/%d", round, name, rec[name], dup[name], exact[name][0], exact[name][1])
			}
		}
		prevRec, prevDup = rec, dup
	}
	clk.advance(DefaultSourceHold)
	rec, dup := sourceValues(t, reg)
	var dups uint64
	for _, e := range exact {
		dups += e[1]
	}
	if sum(rec) != total || sum(dup) != dups {
		t.Fatalf("after Hold: exported %d records and %d duplicates, want %d and %d", sum(rec), sum(dup), total, dups)
	}
	if rec[SourceNone] != exact[SourceNone][0] {
		t.Errorf("none counts %d, want %d", rec[SourceNone], exact[SourceNone][0])
	}
}

// TestSourcesLateHeavyGetsItsLabel checks that a source that arrives after the labels are taken
// by sources with long histories still gets one once it outgrows the smallest twice over.
func TestSourcesLateHeavyGetsItsLabel(t *testing.T) {
	s, reg, clk := newTestSources(t, 3)
	tl := s.NewTally()
	var stream []sourceRecord
	for i := range 300 {
		stream = append(stream, sourceRecord{src: fmt.Sprintf("old-%d", i%3)})
	}
	for i := range 1000 {
		stream = append(stream, sourceRecord{src: fmt.Sprintf("tail-%d", i)}) // never repeats
	}
	feed(tl, stream, 50)
	clk.advance(time.Minute) // the late one's first records settle under other
	late := make([]sourceRecord, 250)
	for i := range late {
		late[i] = sourceRecord{src: "late", dup: true}
	}
	feed(tl, late, 10)
	rec, _ := sourceValues(t, reg)
	if rec["late"] == 0 || rec["late"] > 250 {
		t.Fatalf("late source not labelled: %v", rec)
	}
	if len(rec) > 5 {
		t.Errorf("%d label values, want at most 5: %v", len(rec), rec)
	}
}

func TestSanitizeSource(t *testing.T) {
	long := strings.Repeat("x", 100)
	tests := []struct{ in, want string }{
		{"lib-a", "lib-a"},
		{"with space", "with space"},
		{"tab\there", "tab_here"},
		{"bad\xffutf8", "bad_utf8"},
		{"héllo", "héllo"},
		{long, long[:MaxSourceLen]},
		{strings.Repeat("é", 40), strings.Repeat("é", 32)},
		{strings.Repeat("a", 63) + "é", strings.Repeat("a", 63)},
		{"other", "_other"},
		{"none", "_none"},
	}
	for _, tt := range tests {
		var buf []byte
		if got := string(sanitizeSource([]byte(tt.in), &buf)); got != tt.want {
			t.Errorf("sanitizeSource(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSourceTallyDoesNotAllocate(t *testing.T) {
	s, _, _ := newTestSources(t, 5)
	tl := s.NewTally()
	srcs := [][]byte{[]byte("a"), []byte("b"), []byte("c"), nil}
	feed(tl, []sourceRecord{{src: "a"}, {src: "b"}, {src: "c"}}, 10)
	if n := testing.AllocsPerRun(100, func() {
		for _, src := range srcs {
			tl.Record(src, true)
		}
		tl.Flush()
	}); n != 0 {
		t.Errorf("Record and Flush of known sources allocate %v times", n)
	}
}

func TestSourcesConcurrent(t *testing.T) {
	s, reg, clk := newTestSources(t, 4)
	var wg sync.WaitGroup
	const per = 5000
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tl := s.NewTally()
			for i := range per {
				tl.Record([]byte(fmt.Sprint((i*7+g)%30)), i%3 == 0)
				if i%100 == 99 {
					tl.Flush()
				}
			}
			tl.Flush()
		}()
	}
	wg.Add(1)
	go func() { // scrapes meanwhile
		defer wg.Done()
		for range 20 {
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
			}
		}
	}()
	wg.Wait()
	clk.advance(DefaultSourceHold)
	if rec, _ := sourceValues(t, reg); sum(rec) != 4*per {
		t.Errorf("records sum to %d, want %d", sum(rec), 4*per)
	}
}

func TestSourcesLint(t *testing.T) {
	s, reg, _ := newTestSources(t, 5)
	feed(s.NewTally(), []sourceRecord{{src: "a", dup: true}, {src: ""}}, 10)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// BenchmarkSourceTally is the per-record cost with DEDUP_METRICS_SOURCE set, flushing every
// 1000 records as the worker does per batch.
func BenchmarkSourceTally(b *testing.B) {
	s, _, _ := newTestSources(b, DefaultSourceLimit)
	srcs := make([][]byte, 200)
	for i := range srcs {
		srcs[i] = []byte(fmt.Sprintf("source-%d", i))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		tl := s.NewTally()
		i := 0
		for pb.Next() {
			tl.Record(srcs[i%len(srcs)], i&3 == 0)
			i++
			if i%1000 == 0 {
				tl.Flush()
			}
		}
		tl.Flush()
	})
}
