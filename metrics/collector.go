package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// dynamicCollector exports, at scrape time, the metrics whose set of series
// changes with partition assignment: consumer lag, transaction holds and the filter statistics.
// Building constant metrics on each scrape means a revoked partition's series
// simply stop being exported. It is safe for concurrent use.
type dynamicCollector struct {
	m         *Metrics
	targetFPR float64

	lag          *prometheus.Desc
	held         *prometheus.Desc
	target       *prometheus.Desc
	estimated    *prometheus.Desc
	fill         *prometheus.Desc
	keys         *prometheus.Desc
	load         *prometheus.Desc // kdedup_filter_generation_keys: the observed load per generation
	capacity     *prometheus.Desc
	resident     *prometheus.Desc
	window       *prometheus.Desc
	rotations    *prometheus.Desc
	stages       *prometheus.Desc
	growths      *prometheus.Desc
	refreshes    *prometheus.Desc
	atCap        *prometheus.Desc
	streamTime   *prometheus.Desc
	streamLag    *prometheus.Desc
	late         *prometheus.Desc
	forgotten    *prometheus.Desc
	generationLb []string // "0".."63", to avoid formatting on every scrape
	progress     progressDescs
}

func newDynamicCollector(m *Metrics, targetFPR float64, latePolicy string) *dynamicCollector {
	name := func(n string) string { return prometheus.BuildFQName(Namespace, "", n) }
	filter := []string{"filter"}
	gen := []string{"filter", "generation"}
	d := &dynamicCollector{
		m:         m,
		targetFPR: targetFPR,
		lag: prometheus.NewDesc(name("consumer_lag_records"),
			"Records between this worker's position and the end of an assigned input partition: its last stable offset under KAFKA_ISOLATION_LEVEL=read_committed (records of open transactions are not counted), its high watermark under read_uncommitted.", []string{"partition"}, nil),
		held: prometheus.NewDesc(name("input_transaction_held_seconds"),
			"How long this worker has been held at the last stable offset of an assigned input partition by a transaction left open (under KAFKA_ISOLATION_LEVEL=read_committed nothing after it is read until it commits or aborts); 0 when it is not held.", []string{"partition"}, nil),
		target: prometheus.NewDesc(name("filter_false_positive_rate_target"),
			"Configured false-positive rate over the whole window: the acceptable fraction of unique records wrongly dropped.", nil, nil),
		estimated: prometheus.NewDesc(name("filter_false_positive_rate_estimated"),
			"False-positive rate a new record's identity faces now, estimated from the fill of the filter's live generations: the chance that a unique record arriving at this instant is wrongly dropped as a duplicate. It rises as the current generation fills; the share of unique records lost over a period is its average over that period.", filter, nil),
		fill: prometheus.NewDesc(name("filter_generation_fill_ratio"),
			"Fraction of a generation's bits that are set (generation 0 is the newest).", gen, nil),
		keys: prometheus.NewDesc(name("filter_estimated_keys"),
			"Estimated distinct keys inserted into a generation (generation 0 is the newest).", gen, nil),
		load: prometheus.NewDesc(name("filter_generation_keys"),
			"Distinct identities a generation took, counted as they arrived (generation 0 is the newest, still filling; 1 is the one before): the observed load that DEDUP_WINDOW_CAPACITY=auto sizes each new generation from.", gen, nil),
		capacity: prometheus.NewDesc(name("filter_capacity_bytes"),
			"Memory occupied by the filter's bit arrays, the stages grown past DEDUP_WINDOW_CAPACITY included.", filter, nil),
		resident: prometheus.NewDesc(name("filter_resident_bytes"),
			"Part of kdedup_filter_capacity_bytes the filter has written, and so holds resident: a new filter's first stage becomes resident page by page as identities reach it (all of it after its first rotation or a restore of a single-file snapshot); grown stages are resident whole.", filter, nil),
		window: prometheus.NewDesc(name("filter_window_seconds"),
			"Span of time the filter currently covers.", filter, nil),
		rotations: prometheus.NewDesc(name("filter_rotations_total"),
			"Generation rotations of the filter since it was created or restored.", filter, nil),
		stages: prometheus.NewDesc(name("filter_stages"),
			"Stages the filter's live generations grew past DEDUP_WINDOW_CAPACITY (0 while every generation is within it). Each stage doubles the generation's room at a tighter rate, so the false-positive rate stays at target.", filter, nil),
		growths: prometheus.NewDesc(name("filter_growths_total"),
			"Stages the filter added since it was created or restored: generations that took more identities than DEDUP_WINDOW_CAPACITY.", filter, nil),
		refreshes: prometheus.NewDesc(name("filter_refreshes_total"),
			"Duplicates that re-armed their identity in the filter's current generation (DEDUP_WINDOW_REFRESH=true; under DEDUP_WINDOW_CLOCK=event, the generation of their timestamp), at most one per identity and generation, since the filter was created or restored. Re-armed identities count against DEDUP_WINDOW_CAPACITY.", filter, nil),
		atCap: prometheus.NewDesc(name("filter_at_memory_cap"),
			"1 when a live generation needed a further stage and the worker's memory budget (DEDUP_MEMORY_LIMIT) refused it: DEDUP_OVERLOAD_POLICY applies (drop: the false-positive rate rises, events may be lost; pass: duplicates may pass). 0 otherwise.", filter, nil),
		streamTime: prometheus.NewDesc(name("filter_stream_time_seconds"),
			"Stream time of a filter whose window follows record timestamps (DEDUP_WINDOW_CLOCK=event): the highest record timestamp it has seen, capped at the wall clock plus DEDUP_EVENT_TIME_MAX_AHEAD, in seconds since the Unix epoch.", filter, nil),
		streamLag: prometheus.NewDesc(name("filter_stream_lag_seconds"),
			"Wall clock minus the stream time of an event-time filter: how far behind the data's time the filter is (large during a replay or catch-up, negative for records stamped ahead of the worker's clock).", filter, nil),
		late: prometheus.NewDesc(name("filter_late_records_total"),
			"Records of an event-time filter stamped before its oldest live generation, which cannot be judged, by what DEDUP_LATE_RECORDS did with them (policy): passed as new (pass: beyond the window, as its duplicates are) or dropped (drop: lost events). Counted since the filter was created or restored.", filter, prometheus.Labels{"policy": latePolicy}),
		forgotten: prometheus.NewDesc(name("filter_forgotten_total"),
			"New identities a filter stopped by DEDUP_MEMORY_LIMIT did not remember under DEDUP_OVERLOAD_POLICY=pass: their duplicates within the window pass. Counted since the filter was created or restored.", filter, nil),
	}
	d.progress = newProgressDescs()
	d.generationLb = make([]string, 64)
	for i := range d.generationLb {
		d.generationLb[i] = strconv.Itoa(i)
	}
	return d
}

// Describe implements prometheus.Collector.
func (d *dynamicCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, desc := range []*prometheus.Desc{d.lag, d.held, d.target, d.estimated, d.fill, d.keys, d.load, d.capacity, d.resident, d.window, d.rotations,
		d.stages, d.growths, d.refreshes, d.atCap, d.streamTime, d.streamLag, d.late, d.forgotten,
		d.progress.lagSeconds, d.progress.lead, d.progress.lastProgress} {
		ch <- desc
	}
}

// Collect implements prometheus.Collector.
func (d *dynamicCollector) Collect(ch chan<- prometheus.Metric) {
	now := d.m.now().UnixNano()
	d.m.eachPartition(func(pp *partition) {
		if pp.lagSet.Load() {
			ch <- prometheus.MustNewConstMetric(d.lag, prometheus.GaugeValue, float64(pp.lag.Load()), pp.label)
			held := 0.0
			if since := pp.heldSince.Load(); since != 0 {
				held = max(float64(now-since)/1e9, 0)
			}
			ch <- prometheus.MustNewConstMetric(d.held, prometheus.GaugeValue, held, pp.label)
		}
		d.progress.collect(ch, pp)
	})

	stats := d.m.filterStats()
	target := d.targetFPR
	if target <= 0 && len(stats) > 0 {
		target = stats[0].ConfiguredFPR
	}
	if target > 0 {
		ch <- prometheus.MustNewConstMetric(d.target, prometheus.GaugeValue, target)
	}
	for _, s := range stats {
		ch <- prometheus.MustNewConstMetric(d.estimated, prometheus.GaugeValue, s.EstimatedFPR, s.Filter)
		ch <- prometheus.MustNewConstMetric(d.capacity, prometheus.GaugeValue, float64(s.CapacityBytes), s.Filter)
		ch <- prometheus.MustNewConstMetric(d.resident, prometheus.GaugeValue, float64(s.ResidentBytes), s.Filter)
		ch <- prometheus.MustNewConstMetric(d.window, prometheus.GaugeValue, s.WindowSeconds, s.Filter)
		ch <- prometheus.MustNewConstMetric(d.rotations, prometheus.CounterValue, float64(s.Rotations), s.Filter)
		ch <- prometheus.MustNewConstMetric(d.stages, prometheus.GaugeValue, float64(s.Stages), s.Filter)
		ch <- prometheus.MustNewConstMetric(d.growths, prometheus.CounterValue, float64(s.Growths), s.Filter)
		ch <- prometheus.MustNewConstMetric(d.refreshes, prometheus.CounterValue, float64(s.Refreshes), s.Filter)
		ch <- prometheus.MustNewConstMetric(d.forgotten, prometheus.CounterValue, float64(s.Forgotten), s.Filter)
		atCap := 0.0
		if s.AtCap {
			atCap = 1
		}
		ch <- prometheus.MustNewConstMetric(d.atCap, prometheus.GaugeValue, atCap, s.Filter)
		d.collectEventTime(ch, s)
		for i, g := range s.Generations {
			lb := d.generation(i)
			ch <- prometheus.MustNewConstMetric(d.fill, prometheus.GaugeValue, g.Fill, s.Filter, lb)
			ch <- prometheus.MustNewConstMetric(d.keys, prometheus.GaugeValue, g.EstimatedKeys, s.Filter, lb)
			ch <- prometheus.MustNewConstMetric(d.load, prometheus.GaugeValue, float64(g.Keys), s.Filter, lb)
		}
	}
}

func (d *dynamicCollector) generation(i int) string {
	if i < len(d.generationLb) {
		return d.generationLb[i]
	}
	return strconv.Itoa(i)
}

// collectEventTime exports the stream time, its lag behind the wall clock and the late records of
// an event-time filter.
func (d *dynamicCollector) collectEventTime(ch chan<- prometheus.Metric, s FilterStat) {
	if !s.EventTime {
		return
	}
	ch <- prometheus.MustNewConstMetric(d.late, prometheus.CounterValue, float64(s.LateRecords), s.Filter)
	if s.StreamTime.IsZero() {
		return
	}
	ch <- prometheus.MustNewConstMetric(d.streamTime, prometheus.GaugeValue, unixSeconds(s.StreamTime), s.Filter)
	ch <- prometheus.MustNewConstMetric(d.streamLag, prometheus.GaugeValue, d.m.now().Sub(s.StreamTime).Seconds(), s.Filter)
}
