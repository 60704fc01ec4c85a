package loadtest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Settings is the configuration of a run, as reported.
type Settings struct {
	Count             int     `json:"count"`
	Rate              float64 `json:"rate"`
	Entities          int     `json:"entities"`
	KeySize           int     `json:"key_size"`
	ValueSize         int     `json:"value_size"`
	DupRatio          float64 `json:"dup_ratio"`
	Late              float64 `json:"late"`
	Mix               string  `json:"mix"`
	WithinMaxSeconds  float64 `json:"within_max_s"`
	BeyondMinSeconds  float64 `json:"beyond_min_s"`
	BeyondMaxSeconds  float64 `json:"beyond_max_s"`
	Field             string  `json:"field"`
	Scope             string  `json:"scope"`
	WindowCount       int     `json:"window_count"`
	WindowSeconds     float64 `json:"window_interval_s"`
	FalsePositiveRate float64 `json:"false_positive_rate"`
	MarkHeader        string  `json:"mark_header,omitempty"`
	ExpectAll         bool    `json:"expect_all"`
	Seed              uint64  `json:"seed"`
	Oversize          int     `json:"oversize,omitempty"`
	OversizeBytes     int     `json:"oversize_bytes,omitempty"`
	DeadLetterTopic   string  `json:"dead_letter_topic,omitempty"`
	AuditTopic        string  `json:"audit_topic,omitempty"`

	// Sources is Config.Sources; the worker counts them with DEDUP_METRICS_SOURCE=header:lt-source.
	Sources int `json:"sources,omitempty"`
	// Worker is the worker settings that change what its metrics show or what it drops
	// (DEDUP_METRICS_SOURCE, DEDUP_WINDOW_REFRESH), as the embedded mode set them; empty in
	// external mode.
	Worker map[string]string `json:"worker,omitempty"`
}

// Throughput is the run's speed. Rates are records per second.
type Throughput struct {
	// SendRate is the records sent over the time from the first to the last send.
	SendRate float64 `json:"send_rate"`
	// OutputRate is the records delivered over the time from the first to the last delivery.
	OutputRate float64 `json:"output_rate"`
	// EndToEnd is the records sent over the time from the first send until the last output
	// record (end markers included) was read: the sustained events/s of the whole pipeline.
	EndToEnd        float64 `json:"end_to_end_rate"`
	SendSeconds     float64 `json:"send_s"`
	EndToEndSeconds float64 `json:"end_to_end_s"`
	// DrainRate is the records sent over the time from the return of Config.AfterSend until
	// the last output record was read (0 without AfterSend): the throughput of a pipeline
	// started on a preloaded input topic.
	DrainRate    float64 `json:"drain_rate,omitempty"`
	DrainSeconds float64 `json:"drain_s,omitempty"`
}

// FilterInfo describes the worker's filters; the embedded mode fills it in.
type FilterInfo struct {
	// Filters is the number of filters (partitions under scope partition, 1 under global).
	Filters           int     `json:"filters"`
	Generations       int     `json:"generations"`
	IntervalSeconds   float64 `json:"interval_s"`
	Capacity          uint64  `json:"capacity"`
	FalsePositiveRate float64 `json:"false_positive_rate"`
	// BitsPerKey is the bits of one generation per key of capacity, and TheoryBitsPerKey the
	// information-theoretic minimum 1.44·log2(1/p) for the per-generation target p (the window
	// target split over the generations); TheoryBitsPerKeyWindow uses the window target.
	BitsPerKey             float64 `json:"bits_per_key"`
	TheoryBitsPerKey       float64 `json:"theory_bits_per_key"`
	TheoryBitsPerKeyWindow float64 `json:"theory_bits_per_key_window"`
	// TotalBytes is the memory of one filter; BytesPerKey divides it by Generations × Capacity.
	TotalBytes  uint64  `json:"total_bytes"`
	BytesPerKey float64 `json:"bytes_per_key"`
	// PredictedFPR is the sizing's prediction for a full window; EstimatedFPR the worker's
	// estimate from its fill at the end of the run, the largest of its filters (-1: unknown).
	PredictedFPR float64 `json:"predicted_fpr"`
	EstimatedFPR float64 `json:"estimated_fpr"`
	// EstimateAverage is what Verdict.SteadyLossRate measures, as the worker estimates it: its
	// estimated false-positive rate, read from its /metrics EstimateSamples times at random
	// instants while the steady events were sent (from the time the window had filled to the end
	// of the constant-rate sending), averaged over time per filter, and the filters' averages
	// weighted by the steady events each judged (Verdict.SteadyByFilter).
	// One reading is the rate a new key faces at that instant, which rises as the current
	// generation fills: only the time average is comparable with a loss rate. -1: unknown.
	EstimateAverage float64 `json:"estimate_avg"`
	EstimateSamples int     `json:"estimate_samples"`
	// EstimateByFilter is the time average of each filter's estimate, to set beside its own loss
	// rate (Verdict.SteadyByFilter): filters judge unevenly loaded partitions.
	EstimateByFilter map[string]float64 `json:"estimate_avg_by_filter,omitempty"`
}

// Report is the outcome of a run. Its JSON form (WriteJSON) is the machine-readable report.
type Report struct {
	Version          int       `json:"version"`
	RunID            string    `json:"run_id"`
	Mode             string    `json:"mode"`
	Started          time.Time `json:"started"`
	ElapsedSeconds   float64   `json:"elapsed_s"`
	Brokers          []string  `json:"brokers"`
	InputTopic       string    `json:"input_topic"`
	OutputTopic      string    `json:"output_topic"`
	InputPartitions  int       `json:"input_partitions"`
	OutputPartitions int       `json:"output_partitions"`
	Settings         Settings  `json:"settings"`

	Verdict Verdict        `json:"verdict"`
	Latency LatencySummary `json:"latency"`
	// LatencyParts splits Latency at the broker's acknowledgement of the generator's produce
	// request; nil when no delivered record's produce request was acknowledged.
	LatencyParts *LatencyParts `json:"latency_parts,omitempty"`
	Throughput   Throughput    `json:"throughput"`
	// Series is the time series, in buckets of BucketSeconds.
	BucketSeconds float64 `json:"bucket_s"`
	Series        []Point `json:"series"`

	// Hooks says when each of Config.Hooks (and Config.Do) was called and how long it took.
	Hooks []HookRun `json:"hooks,omitempty"`

	Filter        *FilterInfo        `json:"filter,omitempty"`
	WorkerMetrics map[string]float64 `json:"worker_metrics,omitempty"`

	ProduceErrors int `json:"produce_errors"`
	FetchErrors   int `json:"fetch_errors"`
	// Foreign counts output records of other runs (or without loadtest headers), ignored.
	Foreign int `json:"foreign"`
	// Incomplete says why the run did not finish, or is empty.
	Incomplete string   `json:"incomplete,omitempty"`
	Notes      []string `json:"notes,omitempty"`
	// Failures lists why the run failed; Pass is true when it is empty.
	Failures []string `json:"failures"`
	Pass     bool     `json:"pass"`

	extra []string // failures added with AddFailure
}

// The values of the worker's DEDUP_SCOPE, as reported in Settings.Scope. They are
// dedup.ScopePartition and dedup.ScopeGlobal, which loadtest may not import (it depends on no
// kdedup package but internal/kafkaio); a test asserts that they are equal.
const (
	scopePartition = "partition"
	scopeGlobal    = "global"
)

func newReport(cfg Config, inParts, outParts int, start time.Time, elapsed time.Duration, vo verifyOutput, width time.Duration) *Report {
	scope := scopePartition
	if cfg.Global {
		scope = scopeGlobal
	}
	r := &Report{
		Version: 1, RunID: cfg.RunID, Mode: "external", Started: start, ElapsedSeconds: elapsed.Seconds(),
		Brokers: cfg.Brokers, InputTopic: cfg.InputTopic, OutputTopic: cfg.OutputTopic,
		InputPartitions: inParts, OutputPartitions: outParts,
		Settings: Settings{
			Count: cfg.Count, Rate: cfg.Rate, Entities: cfg.Entities, KeySize: cfg.KeySize, ValueSize: cfg.ValueSize,
			DupRatio: cfg.DupRatio, Late: cfg.Late, Mix: cfg.Mix.String(),
			WithinMaxSeconds: cfg.WithinMax.Seconds(), BeyondMinSeconds: cfg.BeyondMin.Seconds(), BeyondMaxSeconds: cfg.BeyondMax.Seconds(),
			Field: cfg.Field.String(), Scope: scope, WindowCount: cfg.WindowCount, WindowSeconds: cfg.WindowInterval.Seconds(),
			FalsePositiveRate: cfg.FalsePositiveRate, MarkHeader: cfg.MarkHeader, ExpectAll: cfg.ExpectAll, Seed: cfg.Seed,
			Oversize: cfg.Oversize, OversizeBytes: cfg.OversizeBytes, DeadLetterTopic: cfg.DeadLetterTopic,
			AuditTopic: cfg.AuditTopic,
			Sources:    cfg.Sources,
		},
		Verdict:       vo.verdict,
		Latency:       summarize(vo.latencies),
		BucketSeconds: width.Seconds(),
		Series:        vo.series,
	}
	t := &r.Throughput
	n := float64(vo.verdict.Records)
	if d := time.Duration(vo.lastSent - vo.firstSent); d > 0 {
		t.SendSeconds = d.Seconds()
		t.SendRate = n / d.Seconds()
	}
	if d := time.Duration(vo.lastOut - vo.firstOut); d > 0 && vo.firstOut >= 0 {
		t.OutputRate = float64(vo.verdict.Delivered) / d.Seconds()
	}
	if d := time.Duration(vo.lastSeen - vo.firstSent); d > 0 && vo.firstSent >= 0 {
		t.EndToEndSeconds = d.Seconds()
		t.EndToEnd = n / d.Seconds()
	}
	return r
}

// Judge sets Failures and Pass from the verdict: a run fails when a duplicate leaked (or a
// record was delivered twice), when more unique events were lost than the loss bound, on any
// order violation, when it is incomplete, when oversized records went astray (see
// oversizeFailures), and for every failure added with AddFailure.
func (r *Report) Judge() {
	v := r.Verdict
	var f []string
	if r.Incomplete != "" {
		f = append(f, "incomplete: "+r.Incomplete)
	}
	if v.Leaked > 0 {
		f = append(f, fmt.Sprintf("%d duplicates leaked (%d of them repeated deliveries)", v.Leaked, v.DoubleDelivered))
	}
	if v.Lost > v.LossBound {
		f = append(f, fmt.Sprintf("%d unique events lost, more than the bound %d (expected %.3g at false-positive rate %g, %.1f%% quantile)",
			v.Lost, v.LossBound, v.ExpectedLoss, r.Settings.FalsePositiveRate, 100*LossQuantile))
	}
	if v.OrderViolations > 0 {
		f = append(f, fmt.Sprintf("%d per-key order violations", v.OrderViolations))
	}
	if v.Records == 0 {
		f = append(f, "no records were sent")
	}
	f = append(f, r.oversizeFailures()...)
	f = append(f, r.auditFailures()...)
	f = append(f, r.extra...)
	r.Failures = f
	if r.Failures == nil {
		r.Failures = []string{}
	}
	r.Pass = len(r.Failures) == 0
}

// AddFailure records a failure found outside the verifier (for example a worker that exited
// with an error) and judges the report again, so Pass becomes false.
func (r *Report) AddFailure(msg string) {
	r.extra = append(r.extra, msg)
	r.Judge()
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// fmtRate formats a rate in records per second.
func fmtRate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM/s", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk/s", v/1e3)
	default:
		return fmt.Sprintf("%.0f/s", v)
	}
}

func fmtMs(ms float64) string {
	switch {
	case ms >= 1000:
		return fmt.Sprintf("%.2fs", ms/1000)
	case ms >= 10:
		return fmt.Sprintf("%.0fms", ms)
	default:
		return fmt.Sprintf("%.2fms", ms)
	}
}

// kindList formats counts by kind in the canonical kind order, leaving out zeros.
func kindList(m map[string]int, kinds ...Kind) string {
	var parts []string
	for _, k := range kinds {
		if n := m[k.String()]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	return strings.Join(parts, ", ")
}

// reasonList lists the counts of m by reason, in name order.
func reasonList(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

// writeSourceRows writes the summary rows of Config.Sources and of the worker's settings, when
// there are any.
func (r *Report) writeSourceRows(row func(name, format string, a ...any)) {
	if s := r.Settings; s.Sources > 0 {
		row("sources", "%d in header %s; heaviest: %s", s.Sources, SourceHeader, r.Verdict.topSources(5))
	}
	if len(r.Settings.Worker) > 0 {
		row("worker", "%s", workerSettings(r.Settings.Worker))
	}
}

// topSources describes the n sources with the most records: records and dropped ones.
func (v Verdict) topSources(n int) string {
	names := slices.Collect(maps.Keys(v.BySource))
	slices.SortFunc(names, func(a, b string) int {
		if d := v.BySource[b].Records - v.BySource[a].Records; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, name := range names[:min(n, len(names))] {
		c := v.BySource[name]
		parts = append(parts, fmt.Sprintf("%s %d records, %d dropped", name, c.Records, c.Dropped))
	}
	return orNone(strings.Join(parts, "; "))
}

// workerSettings formats Settings.Worker as NAME=VALUE pairs in name order.
func workerSettings(env map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		parts = append(parts, k+"="+env[k])
	}
	return strings.Join(parts, " ")
}

var dupKinds = []Kind{KindImmediate, KindWithin, KindBeyond, KindCross}
var allKinds = []Kind{KindOriginal, KindImmediate, KindWithin, KindBeyond, KindCross}

// WriteSummary writes the human summary table.
func (r *Report) WriteSummary(w io.Writer) error {
	v, s := r.Verdict, r.Settings
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name, format string, a ...any) { fmt.Fprintf(tw, "%s\t%s\n", name, fmt.Sprintf(format, a...)) }
	rate := "as fast as possible"
	if s.Rate > 0 {
		rate = "at " + fmtRate(s.Rate)
	}
	row("run", "%s (%s), %d -> %d partitions, %s -> %s", r.RunID, r.Mode, r.InputPartitions, r.OutputPartitions, r.InputTopic, r.OutputTopic)
	if s.ExpectAll {
		row("expects", "every record exactly once (no deduplication)")
	} else {
		row("dedup", "field %s, scope %s, window %d x %v, false-positive rate %g", s.Field, s.Scope, s.WindowCount,
			time.Duration(s.WindowSeconds*float64(time.Second)), s.FalsePositiveRate)
	}
	row("load", "%d records %s, %d entities, key %dB, value %dB, duplicates %.0f%% (%s)", s.Count, rate, s.Entities,
		s.KeySize, s.ValueSize, 100*s.DupRatio, s.Mix)
	dups := v.Records - v.ByKind[KindOriginal.String()]
	row("sent", "%d records: %d originals, %d duplicates (%s)", v.Records, v.ByKind[KindOriginal.String()], dups, orNone(kindList(v.ByKind, dupKinds...)))
	if v.Late > 0 || s.Late > 0 {
		row("", "%d late originals: stamped %v before their creation (unique, each must appear once)", v.Late, LateAge)
	}
	row("delivered", "%d records (%d appearances, %d marked, %d end markers of %d, %d foreign ignored)",
		v.Delivered, v.Appearances, v.Marked, v.Markers, v.MarkersSent, r.Foreign)
	row("unique events", "%d must appear: %d lost (bound %d: expected %.3g, %.1f%% quantile), measured loss rate %.3g",
		v.Uniques, v.Lost, v.LossBound, v.ExpectedLoss, 100*LossQuantile, v.MeasuredLossRate)
	if v.SteadyUniques > 0 && !s.ExpectAll {
		row("", "once the window had filled (after %.3gs): %d of %d lost, loss rate %.3g", float64(s.WindowCount)*s.WindowSeconds,
			v.SteadyLost, v.SteadyUniques, v.SteadyLossRate)
	}
	if v.Lost > 0 {
		row("", "lost by kind: %s", kindList(v.LostByKind, allKinds...))
	}
	row("duplicates", "%d must be dropped: %d leaked (%d repeated deliveries); %d copies not judged (timing ambiguous)",
		v.MustDrop, v.Leaked, v.DoubleDelivered, v.Ambiguous)
	if v.Leaked > 0 {
		row("", "leaked by kind: %s", kindList(v.LeakedByKind, allKinds...))
	}
	if a := v.Audit; a != nil {
		row("audit", "%d records in %s (%s), %d repeats: %d in neither topic, %d in both, %d of %d lost events there, %d without their source",
			a.Records, s.AuditTopic, orNone(reasonList(a.ByReason)), a.Repeats, a.Unaccounted, a.InBoth, a.LostAudited, v.Lost, a.BadSource)
	}
	row("order", "%d per-key order violations", v.OrderViolations)
	r.writeOversize(row)
	r.writeSourceRows(row)
	r.writeSpeedRows(row)
	r.writeFilterRows(row)
	for _, h := range r.Hooks {
		state := fmt.Sprintf("took %.2fs", h.Seconds)
		if h.Error != "" {
			state = "failed: " + h.Error
		}
		row("hook", "%s at record %d (+%.2fs): %s", h.Name, h.At, h.StartSeconds, state)
	}
	if r.ProduceErrors+r.FetchErrors > 0 {
		row("errors", "%d produce and %d fetch requests failed (retried)", r.ProduceErrors, r.FetchErrors)
	}
	for _, n := range r.Notes {
		row("note", "%s", n)
	}
	if r.Pass {
		row("result", "PASS")
	} else {
		row("result", "FAIL")
		for _, f := range r.Failures {
			row("", "- %s", f)
		}
	}
	for i, e := range v.Examples {
		if i == 0 {
			row("examples", "%s", e)
		} else {
			row("", "%s", e)
		}
	}
	return tw.Flush()
}

// writeSpeedRows writes the summary's latency, latency split and throughput rows.
func (r *Report) writeSpeedRows(row func(name, format string, a ...any)) {
	v, s := r.Verdict, r.Settings
	l := r.Latency
	row("latency", "p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (%d records, creation -> read from output)",
		fmtMs(l.P50), fmtMs(l.P90), fmtMs(l.P99), fmtMs(l.P999), fmtMs(l.Max), l.Count)
	if lp := r.LatencyParts; lp != nil {
		row("latency split", "creation -> the broker's ack of the generator p50 %s p99 %s; ack -> read from output p50 %s p99 %s",
			fmtMs(lp.Input.P50), fmtMs(lp.Input.P99), fmtMs(lp.Rest.P50), fmtMs(lp.Rest.P99))
	}
	t := r.Throughput
	row("throughput", "%s end to end (%d records in %.2fs), sent at %s, delivered at %s",
		fmtRate(t.EndToEnd), v.Records, t.EndToEndSeconds, fmtRate(t.SendRate), fmtRate(t.OutputRate))
	if t.DrainRate > 0 {
		row("", "drain of the preloaded input: %s (%.2fs from the start of the pipeline to the last output record)", fmtRate(t.DrainRate), t.DrainSeconds)
	}
	if v.ByKind[KindBeyond.String()] > 0 {
		row("", "(these times include waiting up to %.2fs for the beyond-window duplicates; measure speed without them)", s.BeyondMaxSeconds)
	}
}

// writeFilterRows writes the summary's rows of the worker's filter, when the report has them.
func (r *Report) writeFilterRows(row func(name, format string, a ...any)) {
	v := r.Verdict
	if f := r.Filter; f != nil {
		row("filter", "%d x %d generations x %d keys at %g: %.1f bits/key/generation (theory %.1f), %s per filter, %.2f bytes per key in the window",
			f.Filters, f.Generations, f.Capacity, f.FalsePositiveRate, f.BitsPerKey, f.TheoryBitsPerKey, fmtBytes(f.TotalBytes), f.BytesPerKey)
		if f.EstimatedFPR >= 0 {
			row("", "predicted FPR when full %.3g, worker's estimate at the end %.3g (largest filter)", f.PredictedFPR, f.EstimatedFPR)
		}
		if f.EstimateAverage >= 0 && v.SteadyUniques > 0 {
			row("", "worker's estimate averaged while the steady events were sent %.3g (%d readings), their measured loss rate %.3g%s",
				f.EstimateAverage, f.EstimateSamples, v.SteadyLossRate, ratio(f.EstimateAverage, v.SteadyLossRate))
		}
	}
}

// ratio formats est/measured for the summary, or nothing when nothing was measured.
func ratio(est, measured float64) string {
	if measured <= 0 {
		return ""
	}
	return fmt.Sprintf(": estimate/measured %.2f", est/measured)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func fmtBytes(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

// TheoryBitsPerKey returns 1.44·log2(1/p), the bits per key an optimal Bloom filter needs for a
// false-positive rate p (exactly log2(e)·log2(1/p)).
func TheoryBitsPerKey(p float64) float64 {
	return math.Log2E * math.Log2(1/p)
}
