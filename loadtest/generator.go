package loadtest

import (
	"container/heap"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// Header names of the loadtest's own headers.
const (
	HeaderRun  = "lt-run"  // the run id
	HeaderSeq  = "lt-seq"  // the send sequence number, decimal
	HeaderSent = "lt-sent" // creation time, Unix nanoseconds, decimal
	HeaderEnd  = "lt-end"  // "1" on the end marker of a partition
	// SourceHeader holds a record's source with Config.Sources.
	SourceHeader = "lt-source"
)

// SourceOf returns the source of event ord among n sources for seed (see Config.Sources): the
// square of a uniform draw picks the index, so that low indices are the heavy ones.
func SourceOf(ord uint32, n int, seed uint64) string {
	z := uint64(ord) + seed*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	x := float64(z>>11) / (1 << 53)
	return fmt.Sprintf("src-%03d", int(float64(n)*x*x))
}

// LateAge is how much older than its creation time the Kafka timestamp of a late record
// (Config.Late) is: far older than any window of a loadtest, so that a worker under
// DEDUP_WINDOW_CLOCK=event finds it before its oldest live generation.
const LateAge = 24 * time.Hour

// sentRec is the send log entry of one record.
type sentRec struct {
	at     int64 // creation time, nanoseconds since the run's start
	ord    uint32
	entity uint32
	part   int32
	kind   Kind
	late   bool // Kafka timestamp LateAge before the creation time (Config.Late)
	// oversize: the value has Config.OversizeBytes (Config.Oversize)
	oversize bool
}

// pendingDup is a planned duplicate waiting for its due time.
type pendingDup struct {
	due int64 // nanoseconds since start
	tie uint64
	ord uint32
	dup plannedDup
}

type dupHeap []pendingDup

func (h dupHeap) Len() int { return len(h) }
func (h dupHeap) Less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return h[i].tie < h[j].tie
}
func (h dupHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dupHeap) Push(x any)   { *h = append(*h, x.(pendingDup)) }
func (h *dupHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// generator creates the records of the plan at the configured rate and produces them, in
// creation order per partition, with one request in flight per partition.
type generator struct {
	cfg        Config
	producer   *kafkaio.Producer
	partitions int
	start      time.Time
	plan       *planner
	ids        idMaker
	runID      []byte

	log []sentRec // indexed by seq; written only by the generator goroutine
	// ackedAt is, by seq, when the broker acknowledged the record's produce request
	// (nanoseconds since the run's start, 0 before): written by the produce goroutines.
	ackedAt []atomic.Int64
	created atomic.Int64
	acked   atomic.Int64
	errors  atomic.Int64
	done    atomic.Bool
	hooks   *hookRunner
	lastAt  int64 // creation time of the last planned record (not a marker)

	filler     []byte
	jsonPrefix []byte // {"a":{"b":"
	jsonSuffix []byte // "}}
	bufs       [][]kafkaio.Record
	bufBytes   []int
	oldest     time.Time // creation time of the oldest buffered record
	chans      []chan []kafkaio.Record
}

func newGenerator(cfg Config, client *kafkaio.Client, partitions int, start time.Time) *generator {
	g := &generator{
		cfg:        cfg,
		partitions: partitions,
		start:      start,
		plan:       newPlanner(cfg, partitions),
		hooks:      newHookRunner(cfg, start),
		ids:        newIDMaker(cfg.RunID),
		runID:      []byte(cfg.RunID),
		log:        make([]sentRec, 0, cfg.Count+partitions),
		ackedAt:    make([]atomic.Int64, cfg.Count+partitions),
		bufs:       make([][]kafkaio.Record, partitions),
		bufBytes:   make([]int, partitions),
		chans:      make([]chan []kafkaio.Record, partitions),
	}
	g.producer = newProducer(client, generatorErrors{g})
	g.filler = []byte(strings.Repeat("x", cfg.ValueSize))
	if cfg.Field.Kind == FieldJSON {
		var b strings.Builder
		for _, name := range cfg.Field.Path {
			q, _ := json.Marshal(name)
			b.WriteString("{")
			b.Write(q)
			b.WriteString(":")
		}
		b.WriteString(`"`)
		g.jsonPrefix = []byte(b.String())
		g.jsonSuffix = []byte(`"` + strings.Repeat("}", len(cfg.Field.Path)))
	}
	return g
}

// buildRecord builds the record of send log entry s with sequence number seq.
func (g *generator) buildRecord(seq int, s sentRec) kafkaio.Record {
	t := g.start.Add(time.Duration(s.at))
	r := kafkaio.Record{Time: t}
	if s.late {
		r.Time = t.Add(-LateAge)
	}
	r.Headers = make([]kafkaio.Header, 3, 5)
	r.Headers[0] = kafkaio.Header{Key: HeaderRun, Value: g.runID}
	r.Headers[1] = kafkaio.Header{Key: HeaderSeq, Value: strconv.AppendInt(nil, int64(seq), 10)}
	r.Headers[2] = kafkaio.Header{Key: HeaderSent, Value: strconv.AppendInt(nil, t.UnixNano(), 10)}
	if s.kind == KindMarker {
		// No key, no value, no id header: the worker cannot extract an identity and passes it.
		r.Headers = append(r.Headers, kafkaio.Header{Key: HeaderEnd, Value: []byte("1")})
		return r
	}
	if g.cfg.Sources > 0 {
		r.Headers = append(r.Headers, kafkaio.Header{Key: SourceHeader, Value: []byte(SourceOf(s.ord, g.cfg.Sources, g.cfg.Seed))})
	}
	f := g.cfg.Field
	if f.Kind == FieldKey {
		r.Key = g.ids.key(make([]byte, 0, max(16, g.cfg.KeySize)), s.ord, g.cfg.KeySize)
	} else {
		r.Key = entityKey(make([]byte, 0, max(12, g.cfg.KeySize)), s.entity, g.cfg.KeySize)
	}
	switch f.Kind {
	case FieldKey:
		r.Value = g.filler
	case FieldHeader:
		r.Value = g.filler
		r.Headers = append(r.Headers, kafkaio.Header{Key: f.Name, Value: g.ids.id(make([]byte, 0, 16), s.ord)})
	case FieldValue:
		v := g.ids.id(make([]byte, 0, max(16, g.cfg.ValueSize)), s.ord)
		for len(v) < g.cfg.ValueSize {
			v = append(v, '.')
		}
		r.Value = v
	case FieldJSON:
		const padOpen, padClose = `,"lt_pad":"`, `"}`
		base := len(g.jsonPrefix) + 16 + len(g.jsonSuffix) - 1 + len(padOpen) + len(padClose)
		v := make([]byte, 0, max(base, g.cfg.ValueSize))
		v = append(v, g.jsonPrefix...)
		v = g.ids.id(v, s.ord)
		v = append(v, g.jsonSuffix[:len(g.jsonSuffix)-1]...) // leave the outermost object open
		v = append(v, padOpen...)
		for i := base; i < g.cfg.ValueSize; i++ {
			v = append(v, 'x')
		}
		v = append(v, padClose...)
		r.Value = v
	}
	if s.oversize {
		r.Value = oversized(r.Value, g.cfg)
	}
	return r
}

// run creates and produces every record of the plan, then one end marker per partition, and
// waits until all were acknowledged. It returns the first produce error or ctx's error.
func (g *generator) run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for p := range g.partitions {
		ch := make(chan []kafkaio.Record, 8)
		g.chans[p] = ch
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.produce(ctx, p, ch); err != nil {
				cancel(err)
				for range ch { // never let the generator block on a full channel
				}
			}
		}()
	}
	err := g.generate(ctx)
	for _, ch := range g.chans {
		close(ch)
	}
	wg.Wait()
	g.done.Store(true)
	if err == nil {
		err = context.Cause(ctx)
	}
	return err
}

// generate is the scheduling loop: due duplicates first, then the next original, paced at the
// configured rate.
func (g *generator) generate(ctx context.Context) error {
	var pending dupHeap
	var tie uint64
	rate := g.cfg.Rate
	for n := 0; ; n++ {
		if n&255 == 0 && ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if !g.oldest.IsZero() && time.Since(g.oldest) >= g.cfg.Linger {
			if err := g.flushAll(ctx); err != nil {
				return err
			}
		}
		now := time.Since(g.start)
		seq := len(g.log)
		if rate > 0 {
			if allowed := time.Duration(float64(seq) / rate * 1e9); now < allowed {
				if err := g.wait(ctx, min(allowed-now, g.cfg.Linger)); err != nil {
					return err
				}
				continue
			}
		}
		var s sentRec
		switch {
		case len(pending) > 0 && pending[0].due <= int64(now):
			d := heap.Pop(&pending).(pendingDup)
			s = sentRec{ord: d.ord, entity: d.dup.entity, part: d.dup.part, kind: d.dup.kind}
		default:
			o, ok := g.plan.nextOriginal()
			if !ok {
				if len(pending) == 0 {
					return g.finish(ctx)
				}
				if err := g.flushAll(ctx); err != nil {
					return err
				}
				if err := g.wait(ctx, min(time.Duration(pending[0].due)-now, 50*time.Millisecond)); err != nil {
					return err
				}
				continue
			}
			s = sentRec{ord: o.ord, entity: o.entity, part: o.part, kind: KindOriginal, late: o.late, oversize: o.oversize}
			for _, d := range o.dups {
				heap.Push(&pending, pendingDup{due: int64(now + d.delay), tie: tie, ord: o.ord, dup: d})
				tie++
			}
		}
		s.at = int64(now)
		g.lastAt = s.at
		if err := g.emit(ctx, s); err != nil {
			return err
		}
	}
}

// finish emits the end markers and flushes everything.
func (g *generator) finish(ctx context.Context) error {
	for p := range g.partitions {
		if err := g.emit(ctx, sentRec{at: int64(time.Since(g.start)), part: int32(p), kind: KindMarker}); err != nil {
			return err
		}
	}
	return g.flushAll(ctx)
}

// emit appends s to the send log and its record to its partition's buffer.
func (g *generator) emit(ctx context.Context, s sentRec) error {
	seq := len(g.log)
	g.log = append(g.log, s)
	g.created.Add(1)
	g.hooks.created(ctx, len(g.log))
	p := s.part
	if len(g.bufs[p]) == 0 && g.oldest.IsZero() {
		g.oldest = time.Now()
	}
	r := g.buildRecord(seq, s)
	g.bufs[p] = append(g.bufs[p], r)
	g.bufBytes[p] += len(r.Key) + len(r.Value) + 96
	// The producer splits requests; this bounds the memory a partition's queue holds.
	if len(g.bufs[p]) >= g.cfg.ProduceBatch || g.bufBytes[p] >= 512<<10 {
		return g.flush(ctx, int(p))
	}
	return nil
}

func (g *generator) flush(ctx context.Context, p int) error {
	if len(g.bufs[p]) == 0 {
		return nil
	}
	select {
	case g.chans[p] <- g.bufs[p]:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	// Grown by append: a buffer of ProduceBatch records made for every flush allocated about
	// 50 KiB per flush, most of the run's garbage when many partitions each flush a record or
	// two every Linger.
	g.bufs[p] = nil
	g.bufBytes[p] = 0
	return nil
}

func (g *generator) flushAll(ctx context.Context) error {
	for p := range g.bufs {
		if err := g.flush(ctx, p); err != nil {
			return err
		}
	}
	g.oldest = time.Time{}
	return nil
}

func (g *generator) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// produce sends the batches of partition p in order, one at a time (see newProducer).
func (g *generator) produce(ctx context.Context, p int, ch <-chan []kafkaio.Record) error {
	for batch := range ch {
		if err := g.producer.Produce(ctx, g.cfg.InputTopic, p, batch); err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("loadtest: %w", err)
		}
		g.acked.Add(int64(len(batch)))
		g.noteAcked(batch)
	}
	return nil
}

// noteAcked notes, for each record of batch, that the broker acknowledged it now.
func (g *generator) noteAcked(batch []kafkaio.Record) {
	now := int64(time.Since(g.start))
	for _, r := range batch {
		for _, h := range r.Headers {
			if h.Key == HeaderSeq {
				if seq := parseSeq(h.Value); seq >= 0 && seq < int64(len(g.ackedAt)) {
					g.ackedAt[seq].Store(now)
				}
				break
			}
		}
	}
}

// newProducer returns the loadtest's producer: acks=all, without idempotence (the verifier
// counts what a retry duplicates), a failed request tried up to 10 times, 50ms to 2s apart. obs,
// if not nil, hears about failed attempts.
func newProducer(client *kafkaio.Client, obs kafkaio.ProduceObserver) *kafkaio.Producer {
	return kafkaio.NewProducer(client, kafkaio.ProducerConfig{
		Backoff:  kafkaio.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second},
		Attempts: 10,
		Observer: obs,
	})
}

// generatorErrors counts the generator's failed produce attempts.
type generatorErrors struct{ g *generator }

func (e generatorErrors) ProduceError()      { e.g.errors.Add(1) }
func (generatorErrors) ProducerReset(string) {}
func (generatorErrors) UncertainRetry()      {}
