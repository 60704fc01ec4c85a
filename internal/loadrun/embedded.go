package loadrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/dedup"
	"github.com/kdedup/kdedup/internal/app"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/scrape"
	"github.com/kdedup/kdedup/loadtest"
	"github.com/kdedup/kdedup/window"
)

type embeddedOptions struct {
	partitions  int
	passthrough bool
	capacity    uint64
	workerEnv   []string
	verbose     bool
	preload     bool
	restartAt   float64
	// joinAt, leaveAt, rebuildAt and faults are the hooks of -join-at, -leave-at, -rebuild-at and
	// -fault-at (embeddedHooks); seed seeds the instants of the estimate readings.
	joinAt, leaveAt, rebuildAt float64
	faults                     []faultSpec
	seed                       uint64
}

// loadtestEmbedded starts an embedded broker (embedkafka) and the real worker (or the pass-through
// pipe), runs the loadtest against them and adds the filter's sizing and the worker's metrics to
// the report. It returns a nil report with the exit status when the run could not happen.
func loadtestEmbedded(ctx context.Context, lt loadtest.Config, o embeddedOptions, stdout, stderr io.Writer) (*loadtest.Report, int) {
	cl, cfg, code := startEmbedded(&lt, o, stderr)
	if cl == nil {
		return nil, code
	}
	defer cl.Close()
	w := newEmbeddedWorker(ctx, cfg, lt, cl.Addrs(), o, stderr)
	defer func() { w.stop() }()
	fmt.Fprintf(stdout, "loadtest: embedded broker %s, %s, topics %s -> %s (%d partitions)\n",
		strings.Join(cl.Addrs(), ","), w.what, lt.InputTopic, lt.OutputTopic, o.partitions)
	if o.preload {
		fmt.Fprintf(stdout, "loadtest: preloading the input topic; %s starts once every record was sent\n", w.what)
		lt.AfterSend = w.start
	} else if err := w.start(ctx); err != nil {
		return failRun(stderr, err)
	}
	if o.passthrough {
		report, err := loadtest.Run(ctx, lt)
		if err != nil {
			return failRun(stderr, err)
		}
		report.Mode = "embedded-passthrough"
		w.finish(report)
		return report, 0
	}
	fmt.Fprintf(stdout, "loadtest: window %d x %v, capacity %v per filter, scope %s\n",
		lt.WindowCount, lt.WindowInterval, cfg.Dedup.WindowCapacity, cfg.Dedup.Scope)
	return runWorkerLoadtest(ctx, lt, o, cl, w, stderr)
}

// failRun reports an error that stopped a run and returns its exit status.
func failRun(stderr io.Writer, err error) (*loadtest.Report, int) {
	fmt.Fprintf(stderr, "kdedup loadtest: %v\n", err)
	return nil, 1
}

// startEmbedded starts the embedded broker with the topics of lt, loads the worker's
// configuration and makes lt expect what the worker does. On failure it returns a nil cluster
// (stopped) with the exit status, having reported the error.
func startEmbedded(lt *loadtest.Config, o embeddedOptions, stderr io.Writer) (*embedkafka.Cluster, app.Config, int) {
	cl, err := embedkafka.Start(embedkafka.Options{Topics: map[string]int32{lt.InputTopic: int32(o.partitions), lt.OutputTopic: int32(o.partitions)}})
	if err != nil {
		_, code := failRun(stderr, err)
		return nil, app.Config{}, code
	}
	lt.Brokers = cl.Addrs()
	cfg, code, err := embeddedConfig(lt, o)
	if err == nil {
		code = 1
		err = prepareOversize(cl, *lt, o.partitions)
	}
	if err != nil {
		cl.Close()
		fmt.Fprintf(stderr, "kdedup loadtest: %v\n", err)
		return nil, app.Config{}, code
	}
	return cl, cfg, 0
}

// largeTopicBytes is the max.message.bytes prepareOversize gives the input and dead-letter topics:
// 16MiB, as an input topic made for large payloads may have, or more for larger records.
func largeTopicBytes(lt loadtest.Config) int {
	return max(16<<20, lt.OversizeBytes+1<<20)
}

// prepareOversize lets the input topic take the oversized records of lt (-oversize) and creates
// the dead-letter topic (-dead-letter-topic) and the audit topic (-audit-topic) with partitions
// partitions, taking them too. The
// output topic keeps the broker's default limit (1MiB).
func prepareOversize(cl *embedkafka.Cluster, lt loadtest.Config, partitions int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	limit := map[string]string{"max.message.bytes": strconv.Itoa(largeTopicBytes(lt))}
	if lt.DeadLetterTopic != "" {
		if err := cl.CreateTopic(ctx, lt.DeadLetterTopic, partitions); err != nil {
			return err
		}
		if err := cl.SetTopicConfig(ctx, lt.DeadLetterTopic, limit); err != nil {
			return err
		}
	}
	if lt.AuditTopic != "" {
		if err := cl.CreateTopic(ctx, lt.AuditTopic, partitions); err != nil {
			return err
		}
		if err := cl.SetTopicConfig(ctx, lt.AuditTopic, limit); err != nil {
			return err
		}
	}
	if lt.Oversize == 0 {
		return nil
	}
	return cl.SetTopicConfig(ctx, lt.InputTopic, limit)
}

// embeddedConfig returns the worker's configuration for lt and makes lt expect it. On failure the
// exit status is 2 for a bad configuration, 1 otherwise.
func embeddedConfig(lt *loadtest.Config, o embeddedOptions) (app.Config, int, error) {
	env, err := embeddedWorkerEnv(*lt, lt.Brokers, filterCapacity(*lt, o), o.workerEnv)
	if err != nil {
		return app.Config{}, 1, err
	}
	cfg, err := app.Load(env)
	if err != nil {
		return app.Config{}, 2, fmt.Errorf("worker configuration: %w", err)
	}
	if err := expectWorker(lt, cfg, o.passthrough); err != nil {
		return app.Config{}, 1, err
	}
	if o.rebuildAt > 0 && cfg.Checkpoint.URL != "" {
		return app.Config{}, 2, errors.New("-rebuild-at empties CHECKPOINT_DIR; it cannot empty CHECKPOINT_URL")
	}
	if err := lt.Validate(); err != nil {
		return app.Config{}, 2, err
	}
	return cfg, 0, nil
}

// runWorkerLoadtest runs the loadtest against the worker w with the hooks of o (-restart-at,
// -join-at, -leave-at, -rebuild-at, -fault-at) while reading the worker's false-positive
// estimate, and completes the report with what the worker says.
func runWorkerLoadtest(ctx context.Context, lt loadtest.Config, o embeddedOptions, cl *embedkafka.Cluster, w *embeddedWorker, stderr io.Writer) (*loadtest.Report, int) {
	var rs restartStats
	if o.restartAt > 0 {
		lt.At = int(o.restartAt * float64(lt.Count))
		lt.Do = w.restart(lt.At, &rs)
	}
	hooks, hs := embeddedHooks(w, cl, lt, o, stderr)
	lt.Hooks = append(lt.Hooks, hooks...)
	sampler := startEstimateSampler(ctx, w.url, o.partitions, o.seed)
	report, err := loadtest.Run(ctx, lt)
	samples := sampler.halt()
	hs.finish(report)
	if err != nil {
		return failRun(stderr, err)
	}
	addWorkerReport(report, w.url(), w.cfg, filters(lt, o.partitions), rs)
	addEstimateAverage(report, samples)
	w.finish(report)
	if lt.Oversize > 0 {
		checkCommitted(ctx, cl, report, lt, w.cfg.Kafka.GroupID)
	}
	return report, 0
}

// finish stops the pipeline after a run, if it started, and adds a failure to the report if it
// did not stop cleanly.
func (w *embeddedWorker) finish(report *loadtest.Report) {
	if !w.started {
		return
	}
	if code, err := w.halt(); err != nil {
		report.AddFailure(w.what + " did not stop within 30s")
	} else if code != 0 {
		report.AddFailure(fmt.Sprintf("%s exited with status %d", w.what, code))
	}
}

// addEstimateAverage sets the report's EstimateAverage from the estimate readings: from the time
// the window had filled (when the steady events begin) to the end of the constant-rate sending
// (count/rate; the beyond-window duplicates that follow it are a trickle), or of all the sending
// without -rate.
func addEstimateAverage(report *loadtest.Report, samples []estimateSample) {
	f := report.Filter
	if f == nil {
		return
	}
	s := report.Settings
	seconds := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	from := report.Started.Add(seconds(float64(s.WindowCount) * s.WindowSeconds))
	to := report.Started.Add(seconds(report.Throughput.SendSeconds))
	if s.Rate > 0 {
		to = report.Started.Add(seconds(float64(s.Count) / s.Rate))
	}
	f.EstimateAverage, f.EstimateSamples, f.EstimateByFilter = estimateAverage(samples, from, to, report.Verdict.SteadyByFilter)
}

// filters returns the number of filters of the worker: one per partition, or one under scope
// global.
func filters(lt loadtest.Config, partitions int) int {
	if lt.Global {
		return 1
	}
	return partitions
}

// filterCapacity returns -capacity, or else the capacity per filter the run needs: the records a
// filter sees (with -rate, in one interval), plus 20%, and at least 1000.
func filterCapacity(lt loadtest.Config, o embeddedOptions) uint64 {
	if o.capacity != 0 {
		return o.capacity
	}
	units := filters(lt, o.partitions)
	perUnit := float64(lt.Count) / float64(units)
	if lt.Rate > 0 {
		perUnit = math.Min(perUnit, lt.Rate*lt.WindowInterval.Seconds()/float64(units))
	}
	return uint64(max(1000, math.Ceil(1.2*perUnit)))
}

// embeddedWorkerEnv returns the environment of the embedded worker: what the loadtest expects,
// then the -worker-env overrides.
func embeddedWorkerEnv(lt loadtest.Config, brokers []string, capacity uint64, overrides []string) (map[string]string, error) {
	scope := dedup.ScopePartition
	if lt.Global {
		scope = dedup.ScopeGlobal
	}
	env := map[string]string{
		"KAFKA_BROKERS":             strings.Join(brokers, ","),
		"KAFKA_INPUT_TOPIC":         lt.InputTopic,
		"KAFKA_OUTPUT_TOPIC":        lt.OutputTopic,
		"KAFKA_GROUP_ID":            "kdedup-loadtest",
		"KAFKA_SESSION_TIMEOUT":     "6s",
		"KAFKA_HEARTBEAT_INTERVAL":  "500ms",
		"DEDUP_KEY":                 lt.Field.String(),
		"DEDUP_SCOPE":               string(scope),
		"DEDUP_WINDOW_COUNT":        strconv.Itoa(lt.WindowCount),
		"DEDUP_WINDOW_INTERVAL":     lt.WindowInterval.String(),
		"DEDUP_WINDOW_CAPACITY":     strconv.FormatUint(capacity, 10),
		"DEDUP_FALSE_POSITIVE_RATE": strconv.FormatFloat(lt.FalsePositiveRate, 'g', -1, 64),
		"HTTP_ADDR":                 "127.0.0.1:0",
		"SHUTDOWN_TIMEOUT":          "10s",
	}
	if lt.Refresh {
		env["DEDUP_WINDOW_REFRESH"] = "true"
	}
	if lt.Sources > 0 {
		env["DEDUP_METRICS_SOURCE"] = "header:" + loadtest.SourceHeader
	}
	if lt.DeadLetterTopic != "" {
		env["KAFKA_DEAD_LETTER_TOPIC"] = lt.DeadLetterTopic
	}
	if lt.AuditTopic != "" {
		env["KAFKA_DUPLICATES_TOPIC"] = lt.AuditTopic
	}
	for _, kv := range overrides {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("-worker-env %q is not NAME=VALUE", kv)
		}
		env[k] = v
	}
	return env, nil
}

// expectWorker makes the verifier expect what the worker was really configured with
// (-worker-env may override the flags); the pass-through pipe must deliver every record once.
func expectWorker(lt *loadtest.Config, cfg app.Config, passthrough bool) error {
	if passthrough {
		lt.ExpectAll = true
		return nil
	}
	d := cfg.Dedup
	fld, err := loadtest.ParseField(d.Key)
	if err != nil {
		return err
	}
	lt.Field = fld
	lt.Global = dedup.Scope(d.Scope) == dedup.ScopeGlobal
	lt.Refresh = d.WindowRefresh
	lt.WindowCount, lt.WindowInterval, lt.FalsePositiveRate = d.WindowCount, d.WindowInterval, d.FalsePositiveRate
	lt.DeadLetterTopic = cfg.Kafka.DeadLetterTopic
	lt.AuditTopic = cfg.Kafka.DuplicatesTopic
	if lt.AuditTopic == "" {
		lt.AuditTopic = cfg.Dedup.DeprecatedDuplicatesTopic
	}
	if consumer.Mode(d.Mode) == consumer.ModeMark {
		lt.MarkHeader = d.MarkHeader
	}
	return nil
}

// embeddedWorker is the pipeline under test in the embedded mode: the real worker (app.Serve, with
// its HTTP server) or the pass-through pipe. It can be stopped and started again.
type embeddedWorker struct {
	outer   context.Context // a (re)started pipeline runs under it
	cfg     app.Config
	pipe    *loadtest.PipeConfig // the pass-through pipe; nil: the worker
	log     *slog.Logger
	stderr  io.Writer
	what    string             // "the worker" or "the pass-through pipe"
	exit    chan int           // the exit status of the running pipeline
	stop    context.CancelFunc // stops the running pipeline
	base    atomic.Pointer[string]
	started bool
}

// url returns the worker's HTTP base URL, "" before it started. Safe for concurrent use.
func (w *embeddedWorker) url() string {
	if b := w.base.Load(); b != nil {
		return *b
	}
	return ""
}

func newEmbeddedWorker(ctx context.Context, cfg app.Config, lt loadtest.Config, brokers []string, o embeddedOptions, stderr io.Writer) *embeddedWorker {
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	w := &embeddedWorker{
		outer: ctx, cfg: cfg, stderr: stderr, what: "the worker", exit: make(chan int, 1), stop: func() {},
		log: slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
	if o.passthrough {
		w.what = "the pass-through pipe"
		w.pipe = &loadtest.PipeConfig{Conn: kafkaio.Conn{Brokers: brokers}, InputTopic: lt.InputTopic, OutputTopic: lt.OutputTopic, FromEarliest: true}
	}
	return w
}

// start starts the pipeline; it waits until the worker is ready, within 30s and while ctx lasts.
func (w *embeddedWorker) start(ctx context.Context) error {
	w.started = true
	var pctx context.Context
	pctx, w.stop = context.WithCancel(w.outer)
	if w.pipe != nil {
		go func() {
			if err := loadtest.Pipe(pctx, *w.pipe); err != nil {
				fmt.Fprintf(w.stderr, "kdedup loadtest: pipe: %v\n", err)
				w.exit <- 1
				return
			}
			w.exit <- 0
		}()
		return nil
	}
	ln, err := net.Listen("tcp", w.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	base := "http://" + ln.Addr().String()
	w.base.Store(&base)
	go func() { w.exit <- app.Serve(pctx, w.cfg, ln, w.log) }()
	if code, ok := waitReady(ctx, base+"/readyz", w.exit, 30*time.Second); !ok {
		if code >= 0 {
			return fmt.Errorf("the worker exited with status %d before it was ready", code)
		}
		return errors.New("the worker was not ready within 30s")
	}
	return nil
}

// errNotStopped is returned by halt when the pipeline did not exit within 30s.
var errNotStopped = errors.New("did not stop within 30s")

// halt stops the pipeline and returns its exit status, or errNotStopped.
func (w *embeddedWorker) halt() (int, error) {
	w.stop()
	select {
	case code := <-w.exit:
		return code, nil
	case <-time.After(30 * time.Second):
		return -1, errNotStopped
	}
}

// restartStats is what restarting the worker took, for the report.
type restartStats struct {
	note        string // empty: no restart
	stop, start time.Duration
}

// restart returns the loadtest's Do hook that restarts the worker gracefully after record at,
// and accounts for it in rs.
func (w *embeddedWorker) restart(at int, rs *restartStats) func(context.Context) error {
	return func(ctx context.Context) error {
		stop, start, err := w.cycle(ctx, nil)
		if err != nil {
			return err
		}
		rs.stop, rs.start = stop, start
		rs.note = fmt.Sprintf("the worker was restarted after record %d: stopping it (drain, commit, save) took %v, starting the new one until ready (restore, rewarm, join) %v",
			at, rs.stop.Round(time.Millisecond), rs.start.Round(time.Millisecond))
		return nil
	}
}

// cycle stops the worker gracefully, calls between (if not nil) while it is down, and starts it
// again. It returns how long stopping took and how long starting took until the new worker was
// ready.
func (w *embeddedWorker) cycle(ctx context.Context, between func() error) (stop, start time.Duration, err error) {
	t0 := time.Now()
	code, err := w.halt()
	switch {
	case err != nil:
		return 0, 0, fmt.Errorf("%s did not stop within 30s for the restart", w.what)
	case code != 0:
		return 0, 0, fmt.Errorf("%s exited with status %d when stopped for the restart", w.what, code)
	}
	stop = time.Since(t0)
	if between != nil {
		if err := between(); err != nil {
			return stop, 0, err
		}
	}
	t1 := time.Now()
	if err := w.start(ctx); err != nil {
		return stop, 0, fmt.Errorf("restart: %w", err)
	}
	return stop, time.Since(t1), nil
}

// workerMetrics are the worker's metrics the embedded mode reports.
var workerMetrics = []string{
	"kdedup_records_consumed_total", "kdedup_records_produced_total", "kdedup_duplicates_total",
	"kdedup_records_unkeyed_total", "kdedup_filter_false_positive_rate_estimated", "kdedup_filter_capacity_bytes",
	"kdedup_filter_rotations_total", "kdedup_checkpoint_restore_duration_seconds_sum", "kdedup_checkpoint_restore_duration_seconds_count",
	"kdedup_checkpoint_rewarmed_records_total", "kdedup_checkpoint_restores_total",
	"kdedup_checkpoint_written_bytes_total", "kdedup_checkpoint_size_bytes",
	"kdedup_rebalances_total", "kdedup_partition_release_duration_seconds_count", "kdedup_rebuild_records_total",
	"kdedup_producer_resets_total", "kdedup_produce_uncertain_retries_total", "kdedup_filter_late_records_total",
	"kdedup_filter_stages", "kdedup_filter_growths_total", "kdedup_filter_at_memory_cap",
	"kdedup_dead_letters_total", "kdedup_partition_blocked", "kdedup_filter_generation_keys",
}

// addWorkerReport adds what the worker at base says to the report: its metrics, the restart
// (with what the new worker restored) and the sizing of its units filters.
func addWorkerReport(report *loadtest.Report, base string, cfg app.Config, units int, rs restartStats) {
	report.Mode = "embedded"
	metrics := scrape.Totals(base+"/metrics", workerMetrics...)
	report.WorkerMetrics = metrics
	if rs.note != "" {
		if metrics == nil {
			metrics = map[string]float64{}
			report.WorkerMetrics = metrics
		}
		metrics["loadtest_restart_stop_seconds"] = rs.stop.Seconds()
		metrics["loadtest_restart_start_seconds"] = rs.start.Seconds()
		note := rs.note
		if n := metrics["kdedup_checkpoint_restore_duration_seconds_count"]; n > 0 {
			note += fmt.Sprintf("; the new worker prepared %.0f filters in %.1fms on average (%.0f records re-warmed after a snapshot, %.0f read by rebuilds from the output topic)",
				n, 1000*metrics["kdedup_checkpoint_restore_duration_seconds_sum"]/n, metrics["kdedup_checkpoint_rewarmed_records_total"],
				metrics["kdedup_rebuild_records_total"])
		} else {
			note += "; the new worker prepared no filter (neither restored nor rebuilt)"
		}
		report.Notes = append(report.Notes, note)
	}
	report.Filter = filterInfo(cfg.Dedup, units, metrics)
	report.Settings.Worker = workerSettings(cfg.Dedup)
}

// workerSettings returns the worker settings the report shows beside the loadtest's own: those
// that change what the worker drops or what its metrics show, when set.
func workerSettings(d app.DedupConfig) map[string]string {
	env := map[string]string{}
	if d.WindowRefresh {
		env["DEDUP_WINDOW_REFRESH"] = "true"
	}
	if d.MetricsSource != "" {
		env["DEDUP_METRICS_SOURCE"] = d.MetricsSource
		env["DEDUP_METRICS_SOURCE_LIMIT"] = strconv.Itoa(d.MetricsSourceLimit)
	}
	if len(env) == 0 {
		return nil
	}
	return env
}

// filterInfo returns the sizing of the worker's filters against theory, with the worker's own
// false-positive estimate from metrics (-1: unknown); nil if the window cannot be sized.
func filterInfo(d app.DedupConfig, units int, metrics map[string]float64) *loadtest.FilterInfo {
	wc := window.Config{
		Generations: d.WindowCount, Interval: d.WindowInterval, Capacity: uint64(d.WindowCapacity), Auto: d.WindowCapacity == 0,
		FalsePositiveRate: d.FalsePositiveRate,
	}
	sz, err := window.Size(wc)
	if err != nil {
		return nil
	}
	n := float64(sz.Generations)
	pGen := -math.Expm1(math.Log1p(-wc.FalsePositiveRate) / n)
	est := -1.0
	if v, ok := metrics["kdedup_filter_false_positive_rate_estimated:max"]; ok {
		est = v
	}
	info := &loadtest.FilterInfo{
		Filters: units, Generations: sz.Generations, IntervalSeconds: wc.Interval.Seconds(), Capacity: wc.Capacity,
		FalsePositiveRate: wc.FalsePositiveRate, BitsPerKey: sz.BitsPerKey,
		TheoryBitsPerKey: loadtest.TheoryBitsPerKey(pGen), TheoryBitsPerKeyWindow: loadtest.TheoryBitsPerKey(wc.FalsePositiveRate),
		TotalBytes: sz.TotalBytes, BytesPerKey: float64(sz.TotalBytes) / (n * float64(wc.Capacity)),
		PredictedFPR: sz.PredictedFPR, EstimatedFPR: est, EstimateAverage: -1,
	}
	if wc.Auto {
		autoFilterInfo(info, metrics)
	}
	return info
}

// autoFilterInfo replaces the sizing of auto-sized filters, which the Config does not give, by
// what the worker reports at the end of the run: the bytes its filters hold and the keys their
// live generations took (BytesPerKey is then per key held; BitsPerKey, per key of one
// generation's capacity, is 0: the generations differ).
func autoFilterInfo(info *loadtest.FilterInfo, metrics map[string]float64) {
	bytes, keys := metrics["kdedup_filter_capacity_bytes"], metrics["kdedup_filter_generation_keys"]
	info.TotalBytes = uint64(bytes) / uint64(max(info.Filters, 1))
	info.BytesPerKey, info.BitsPerKey = 0, 0
	if keys > 0 {
		info.BytesPerKey = bytes / keys
	}
}

// waitReady polls url until it answers 200. It returns ok=false with the worker's exit status
// (or -1) when the worker exited, ctx ended or within passed.
func waitReady(ctx context.Context, url string, exit chan int, within time.Duration) (int, bool) {
	deadline := time.Now().Add(within)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return 0, true
			}
		}
		select {
		case code := <-exit:
			exit <- code
			return code, false
		case <-ctx.Done():
			return -1, false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return -1, false
}
