package metrics

import (
	"container/heap"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// The reserved values of the source label.
const (
	// SourceOther is the source label of every record whose source has no label of its own.
	SourceOther = "other"
	// SourceNone is the source label of the records without a source.
	SourceNone = "none"
)

// MaxSourceLen caps a source label value, in bytes: a longer source is cut (at a rune boundary)
// before it is counted, so sources that differ only after it count as one.
const MaxSourceLen = 64

// DefaultSourceLimit is the default of SourceOptions.Limit.
const DefaultSourceLimit = 50

// DefaultSourceHold is the default of SourceOptions.Hold.
const DefaultSourceHold = 10 * time.Second

// SourceOptions configures NewSources.
type SourceOptions struct {
	// Limit is the most sources that have a label of their own; with "other" and "none" the
	// source label takes at most Limit+2 values. Default DefaultSourceLimit.
	Limit int
	// Hold is how long the records of a source without a label wait, uncounted, for the source to
	// earn one before they are counted under "other" (see Sources). Default DefaultSourceHold.
	Hold time.Duration
	// Now is the clock of Hold. Default time.Now.
	Now func() time.Time
}

// Sources counts records and duplicates per source in kdedup_source_records_total{source} and
// kdedup_source_duplicates_total{source}, with a bounded number of label values. It is safe for
// concurrent use; the record path goes through a SourceTally per goroutine, which takes Sources'
// lock once per batch.
//
// # Which sources get a label
//
// The first Limit sources get a label each as they appear. After that a space-saving sketch of
// 4·Limit candidates (Metwally et al., 2005) follows the other sources: a new source takes the
// place of the candidate with the lowest count and inherits that count as its error, so every
// source with more than 1/(4·Limit) of the records is among the candidates. A candidate whose
// guaranteed count (count minus error) exceeds twice the records of the smallest labelled source
// takes that source's label place: it is promoted, and the smallest one demoted. Counts are since
// the worker started; the factor of two keeps two sources of similar size from trading places.
//
// # What the counters mean
//
// Counters never go down, and every record is counted in exactly one series:
//
//   - A labelled source's series counts exactly the records (and duplicates) of the source since
//     it got its label.
//   - A candidate's records wait, uncounted, until it is promoted (its new series starts with
//     them, so a source that outgrows the smallest label within Hold of its first record is exact
//     from its first record), it is displaced from the sketch, or Hold passes; the latter two
//     count them under "other". At any moment the series sum to the records counted less those
//     waiting, which are at most Hold old (a scrape settles the old ones first).
//   - A demoted source's series is deleted, and its totals are added to "other" at that moment,
//     so that the exported series keep summing to every record counted: "other"'s increase at a
//     demotion includes records that its rate had shown under the demoted label. A demoted
//     source is the smallest labelled one, and it is demoted by one at least twice its size.
//   - "none" counts records without a source; other and none appear on their first record.
//
// Label values are cut to MaxSourceLen bytes; bytes that are not printable UTF-8 become '_'; a
// source spelled "other" or "none" is labelled "_other" or "_none".
type Sources struct {
	records, duplicates *prometheus.CounterVec

	limit int
	hold  time.Duration
	now   func() time.Time

	mu          sync.Mutex
	labels      map[string]*sourceLabel
	minScore    uint64 // a lower bound of the smallest label's score once labels are full
	cands       candHeap
	candIdx     map[string]*candidate
	other, none *series
	lastSettle  time.Time
	onDemote    func(name string) // tests
}

// series is one exported pair of counters and the totals added to them.
type series struct {
	records, duplicates prometheus.Counter
	nrec, ndup          uint64
}

func (s *series) add(rec, dup uint64) {
	if rec > 0 {
		s.records.Add(float64(rec))
		s.nrec += rec
	}
	if dup > 0 {
		s.duplicates.Add(float64(dup))
		s.ndup += dup
	}
}

// sourceLabel is a source with its own label; score is its count for ranking.
type sourceLabel struct {
	series
	score uint64
}

// candidate is a source in the space-saving sketch. Its pending records are not counted yet.
type candidate struct {
	name             string
	count, err       uint64
	pendRec, pendDup uint64
	pendSince        time.Time
	idx              int
}

// NewSources builds the per-source counters and registers them on reg (Sources is the collector).
func NewSources(reg prometheus.Registerer, opts SourceOptions) *Sources {
	if opts.Limit <= 0 {
		opts.Limit = DefaultSourceLimit
	}
	if opts.Hold <= 0 {
		opts.Hold = DefaultSourceHold
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, []string{"source"})
	}
	s := &Sources{
		records: vec("source_records_total",
			"Records consumed, by source (DEDUP_METRICS_SOURCE): at most DEDUP_METRICS_SOURCE_LIMIT sources have their own value, the rest count as other, records without a source as none."),
		duplicates: vec("source_duplicates_total",
			"Records recognised as duplicates, by source, with the labels of kdedup_source_records_total."),
		limit:   opts.Limit,
		hold:    opts.Hold,
		now:     opts.Now,
		labels:  map[string]*sourceLabel{},
		candIdx: map[string]*candidate{},
	}
	reg.MustRegister(s)
	return s
}

// Describe implements prometheus.Collector.
func (s *Sources) Describe(ch chan<- *prometheus.Desc) {
	s.records.Describe(ch)
	s.duplicates.Describe(ch)
}

// Collect implements prometheus.Collector. It first counts the candidates' records that waited
// for Hold under "other".
func (s *Sources) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	s.settle(s.now(), true)
	s.mu.Unlock()
	s.records.Collect(ch)
	s.duplicates.Collect(ch)
}

// Labels returns the number of sources that have a label of their own (other and none excluded).
func (s *Sources) Labels() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.labels)
}

func (s *Sources) newSeries(label string) *series {
	return &series{records: s.records.WithLabelValues(label), duplicates: s.duplicates.WithLabelValues(label)}
}

// count adds the records and duplicates of one source; s.mu is held.
func (s *Sources) count(name string, rec, dup uint64, now time.Time) {
	if l := s.labels[name]; l != nil {
		l.add(rec, dup)
		l.score += rec
		return
	}
	if len(s.labels) < s.limit {
		s.label(name, rec, dup, rec)
		return
	}
	c := s.candIdx[name]
	if c == nil {
		c = s.admit(name)
	}
	c.count += rec
	c.pendRec += rec
	c.pendDup += dup
	if c.pendSince.IsZero() {
		c.pendSince = now
	}
	heap.Fix(&s.cands, c.idx)
	if c.count-c.err > 2*s.minScore {
		s.maybePromote(c)
	}
}

// label gives name a label whose series starts at rec and dup, with ranking score score.
func (s *Sources) label(name string, rec, dup, score uint64) {
	l := &sourceLabel{series: *s.newSeries(name), score: score}
	l.add(rec, dup)
	s.labels[name] = l
}

// admit adds name to the sketch: a new candidate while there is room, else in place of the one
// with the lowest count, whose pending records are counted under other.
func (s *Sources) admit(name string) *candidate {
	if len(s.cands) < 4*s.limit {
		c := &candidate{name: name}
		heap.Push(&s.cands, c)
		s.candIdx[name] = c
		return c
	}
	c := s.cands[0]
	s.toOther(c)
	delete(s.candIdx, c.name)
	*c = candidate{name: name, count: c.count, err: c.count, idx: c.idx}
	s.candIdx[name] = c
	return c
}

// toOther counts c's pending records under other.
func (s *Sources) toOther(c *candidate) {
	if c.pendRec == 0 && c.pendDup == 0 {
		return
	}
	if s.other == nil {
		s.other = s.newSeries(SourceOther)
	}
	s.other.add(c.pendRec, c.pendDup)
	c.pendRec, c.pendDup, c.pendSince = 0, 0, time.Time{}
}

// maybePromote gives c the label of the smallest labelled source if c's guaranteed count exceeds
// twice that source's score; otherwise it refreshes minScore.
func (s *Sources) maybePromote(c *candidate) {
	var minName string
	var min *sourceLabel
	for name, l := range s.labels {
		if min == nil || l.score < min.score {
			minName, min = name, l
		}
	}
	s.minScore = min.score
	if c.count-c.err <= 2*min.score {
		return
	}
	// Demote: the series goes, its totals to other.
	s.records.DeleteLabelValues(minName)
	s.duplicates.DeleteLabelValues(minName)
	delete(s.labels, minName)
	if s.onDemote != nil {
		s.onDemote(minName)
	}
	if s.other == nil {
		s.other = s.newSeries(SourceOther)
	}
	s.other.add(min.nrec, min.ndup)
	// Promote.
	heap.Remove(&s.cands, c.idx)
	delete(s.candIdx, c.name)
	s.label(c.name, c.pendRec, c.pendDup, c.count-c.err)
	s.minScore = 0 // recomputed on the next candidate that passes it
}

// settle counts under other the pending records of candidates that waited for Hold. Unless force,
// it looks at most four times per Hold.
func (s *Sources) settle(now time.Time, force bool) {
	if !force && now.Sub(s.lastSettle) < s.hold/4 {
		return
	}
	s.lastSettle = now
	for _, c := range s.cands {
		if c.pendRec > 0 && now.Sub(c.pendSince) >= s.hold {
			s.toOther(c)
		}
	}
}

// flush adds a tally; s.mu is not held.
func (s *Sources) flush(t *SourceTally) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.none > 0 {
		if s.none == nil {
			s.none = s.newSeries(SourceNone)
		}
		s.none.add(t.none, t.noneDup)
	}
	for _, i := range t.touched {
		r := &t.rows[i]
		s.count(r.name, r.rec, r.dup, now)
	}
	s.settle(now, false)
}

// candHeap is a min-heap of candidates by count.
type candHeap []*candidate

func (h candHeap) Len() int           { return len(h) }
func (h candHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h candHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *candHeap) Push(x any) {
	c := x.(*candidate)
	c.idx = len(*h)
	*h = append(*h, c)
}
func (h *candHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return c
}

// maxTallyRows bounds the distinct sources a SourceTally remembers between batches.
const maxTallyRows = 1024

// SourceTally gathers the per-source counts of one goroutine's batch and adds them to its Sources
// at Flush. It is not safe for concurrent use: keep one per partition goroutine. Record allocates
// only for a source the tally has not seen in its last 1024 distinct sources.
type SourceTally struct {
	s       *Sources
	idx     map[string]int
	rows    []tallyRow
	touched []int
	none    uint64
	noneDup uint64
	buf     []byte
}

type tallyRow struct {
	name     string
	rec, dup uint64
}

// NewTally returns an empty tally that flushes into s.
func (s *Sources) NewTally() *SourceTally {
	return &SourceTally{s: s, idx: map[string]int{}}
}

// Record counts one record of source src (nil or empty: no source), a duplicate if dup.
func (t *SourceTally) Record(src []byte, dup bool) {
	d := uint64(0)
	if dup {
		d = 1
	}
	if len(src) == 0 {
		t.none++
		t.noneDup += d
		return
	}
	src = sanitizeSource(src, &t.buf)
	i, ok := t.idx[string(src)]
	if !ok {
		i = len(t.rows)
		t.rows = append(t.rows, tallyRow{name: string(src)})
		t.idx[t.rows[i].name] = i
	}
	r := &t.rows[i]
	if r.rec == 0 {
		t.touched = append(t.touched, i)
	}
	r.rec++
	r.dup += d
}

// Flush adds what was recorded since the last Flush to the Sources and clears the tally.
func (t *SourceTally) Flush() {
	if t.none == 0 && len(t.touched) == 0 {
		return
	}
	t.s.flush(t)
	for _, i := range t.touched {
		t.rows[i].rec, t.rows[i].dup = 0, 0
	}
	t.touched = t.touched[:0]
	t.none, t.noneDup = 0, 0
	if len(t.rows) > maxTallyRows {
		clear(t.idx)
		t.rows = t.rows[:0]
	}
}

// sanitizeSource returns src as a label value: cut to MaxSourceLen bytes at a rune boundary,
// bytes that are not printable UTF-8 replaced by '_', and the reserved values prefixed with '_'.
// It returns src itself when it is already fine, else a slice of *buf.
func sanitizeSource(src []byte, buf *[]byte) []byte {
	clean := len(src) <= MaxSourceLen
	for i := 0; clean && i < len(src); i++ {
		clean = src[i] >= 0x20 && src[i] < 0x7f
	}
	if !clean {
		b := (*buf)[:0]
		for len(src) > 0 {
			r, n := utf8.DecodeRune(src)
			add := src[:n]
			if r == utf8.RuneError || r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
				add = []byte{'_'}
			}
			if len(b)+len(add) > MaxSourceLen {
				break
			}
			b = append(b, add...)
			src = src[n:]
		}
		*buf, src = b, b
	}
	if string(src) == SourceOther || string(src) == SourceNone {
		b := append(append(make([]byte, 0, len(src)+1), '_'), src...)
		*buf = b
		return b
	}
	return src
}
