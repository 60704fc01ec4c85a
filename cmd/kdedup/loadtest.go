package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kdedup/kdedup/consumer/kafkatest"
	"github.com/kdedup/kdedup/loadtest"
	"github.com/kdedup/kdedup/window"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// runLoadtest runs `kdedup loadtest`: it generates a stream with known duplicates, verifies the
// output topic and reports. Without -brokers and KAFKA_BROKERS (or with -embedded) it starts an
// embedded broker and the real worker (the same wiring as the demo and production: loadConfig
// and serve); otherwise it only generates and verifies against the given brokers and topics,
// while the worker runs elsewhere. Exit status: 0 when the run passed, 1 when it failed (leaked
// duplicates, losses above the bound, order violations, an incomplete run or a runtime error),
// 2 on bad flags.
func runLoadtest(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", "", "bootstrap brokers, comma-separated (default $KAFKA_BROKERS; neither: embedded mode)")
	embedded := fs.Bool("embedded", false, "start an embedded broker and worker even if KAFKA_BROKERS is set")
	passthrough := fs.Bool("passthrough", false, "embedded mode: run a plain copy pipeline instead of the worker (the baseline) and expect every record once")
	restartAt := fs.Float64("restart-at", 0, "embedded mode: restart the worker gracefully once this fraction of the records was sent (with -worker-env CHECKPOINT_DIR=... to test restores)")
	preload := fs.Bool("preload", false, "embedded mode: send everything first, then start the worker (or pipe) and measure how fast it drains the input")
	input := fs.String("input", "", "input topic (default $KAFKA_INPUT_TOPIC; embedded: loadtest-in)")
	output := fs.String("output", "", "output topic (default $KAFKA_OUTPUT_TOPIC; embedded: loadtest-out)")
	partitions := fs.Int("partitions", 4, "embedded mode: partitions of the input and output topics")
	count := fs.Int("count", 20000, "records to send, duplicates included")
	rate := fs.Float64("rate", 0, "records per second; 0 sends as fast as possible")
	entities := fs.Int("entities", 1000, "distinct Kafka keys (with -field key every event is its own key)")
	keySize := fs.Int("key-size", 16, "Kafka key size in bytes")
	valueSize := fs.Int("value-size", 100, "value size in bytes")
	dups := fs.Float64("dups", 0.2, "fraction of the records that are duplicates, 0 to 0.95")
	mixFlag := fs.String("mix", loadtest.DefaultMix.String(), "relative weights of the duplicate kinds")
	withinMax := fs.Duration("within-max", 0, "largest delay of within and cross duplicates (default (N-1)*interval/2)")
	beyondMin := fs.Duration("beyond-min", 0, "smallest delay of beyond duplicates (default N*interval + interval/4)")
	beyondMax := fs.Duration("beyond-max", 0, "largest delay of beyond duplicates (default N*interval + 3*interval/4)")
	field := fs.String("field", "header:event-id", "where the event id goes, the worker's DEDUP_KEY: key, value, header:NAME or json:PATH (external default $DEDUP_KEY)")
	scope := fs.String("scope", "partition", "the worker's DEDUP_SCOPE: partition or global (external default $DEDUP_SCOPE)")
	windowCount := fs.Int("window-count", 3, "the worker's DEDUP_WINDOW_COUNT (external default $DEDUP_WINDOW_COUNT)")
	windowInterval := fs.Duration("window-interval", time.Second, "the worker's DEDUP_WINDOW_INTERVAL (external default $DEDUP_WINDOW_INTERVAL)")
	fpr := fs.Float64("fpr", 1e-6, "the worker's DEDUP_FALSE_POSITIVE_RATE (external default $DEDUP_FALSE_POSITIVE_RATE)")
	capacity := fs.Uint64("capacity", 0, "embedded mode: DEDUP_WINDOW_CAPACITY (0: sized from -rate, or -count, per filter)")
	markHeader := fs.String("mark-header", "", "external mode: the worker's DEDUP_MARK_HEADER when it runs with DEDUP_MODE=mark (default from $DEDUP_MODE/$DEDUP_MARK_HEADER)")
	seed := fs.Uint64("seed", 1, "seed of the plan: the same seed gives the same plan")
	runID := fs.String("run-id", "", "tag of this run's records (default: from the seed and the clock)")
	settle := fs.Duration("settle", 5*time.Second, "stop waiting when nothing arrives for this long after the last record was sent")
	timeout := fs.Duration("timeout", 0, "bound the whole run (0: none)")
	jsonOut := fs.String("json", "", "write the machine-readable report to this file")
	htmlOut := fs.String("html", "", "write the HTML report (inline SVG charts, no scripts) to this file")
	quiet := fs.Bool("quiet", false, "no progress lines")
	verbose := fs.Bool("v", false, "embedded mode: show the worker's info-level logs")
	sizing := fs.Bool("sizing", false, "print the filter's memory per key against theory for false-positive rates 1e-2..1e-9 (with -window-count and -capacity, default 1000000) and exit")
	var workerEnv stringList
	fs.Var(&workerEnv, "worker-env", "embedded mode: extra worker environment variable NAME=VALUE (repeatable), e.g. KAFKA_BATCH_SIZE=2000")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kdedup loadtest: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *sizing {
		c := *capacity
		if c == 0 {
			c = 1_000_000
		}
		if err := printSizing(stdout, *windowCount, c); err != nil {
			fmt.Fprintf(stderr, "kdedup loadtest: %v\n", err)
			return 2
		}
		return 0
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "kdedup loadtest: "+format+"\n", a...)
		return 2
	}

	if *brokers == "" {
		*brokers = environ["KAFKA_BROKERS"]
	}
	isEmbedded := *embedded || strings.TrimSpace(*brokers) == ""
	if (*passthrough || *preload || *restartAt != 0) && !isEmbedded {
		return usage("-passthrough, -preload and -restart-at need the embedded mode")
	}
	if *restartAt != 0 && (*passthrough || *preload || !(*restartAt > 0 && *restartAt < 1)) {
		return usage("-restart-at must be between 0 and 1 and cannot be combined with -passthrough or -preload")
	}
	if !isEmbedded {
		// External mode: what the flags leave out comes from the worker's own environment, or
		// else the worker's defaults, so that the verifier expects what the worker does.
		defaults := map[string]string{}
		for _, v := range envVars() {
			if v.HasDefault {
				defaults[v.Name] = v.Default
			}
		}
		fromEnv := func(name, envName string, apply func(string) error) error {
			if set[name] {
				return nil
			}
			v := environ[envName]
			if v == "" {
				v = defaults[envName]
			}
			if v == "" {
				return nil
			}
			if err := apply(v); err != nil {
				return fmt.Errorf("%s=%q: %w", envName, v, err)
			}
			return nil
		}
		errs := []error{
			fromEnv("input", "KAFKA_INPUT_TOPIC", func(v string) error { *input = v; return nil }),
			fromEnv("output", "KAFKA_OUTPUT_TOPIC", func(v string) error { *output = v; return nil }),
			fromEnv("field", "DEDUP_KEY", func(v string) error { *field = v; return nil }),
			fromEnv("scope", "DEDUP_SCOPE", func(v string) error { *scope = v; return nil }),
			fromEnv("window-count", "DEDUP_WINDOW_COUNT", func(v string) (err error) { *windowCount, err = strconv.Atoi(v); return }),
			fromEnv("window-interval", "DEDUP_WINDOW_INTERVAL", func(v string) (err error) { *windowInterval, err = time.ParseDuration(v); return }),
			fromEnv("fpr", "DEDUP_FALSE_POSITIVE_RATE", func(v string) (err error) { *fpr, err = strconv.ParseFloat(v, 64); return }),
		}
		if environ["DEDUP_MODE"] == "mark" && !set["mark-header"] {
			*markHeader = environ["DEDUP_MARK_HEADER"]
			if *markHeader == "" {
				*markHeader = "kdedup-duplicate"
			}
		}
		if err := errors.Join(errs...); err != nil {
			return usage("%v", err)
		}
		if *input == "" || *output == "" {
			return usage("external mode needs -input and -output (or KAFKA_INPUT_TOPIC and KAFKA_OUTPUT_TOPIC)")
		}
	} else {
		if *input == "" {
			*input = "loadtest-in"
		}
		if *output == "" {
			*output = "loadtest-out"
		}
		if *partitions < 1 {
			return usage("-partitions must be at least 1")
		}
	}
	mix, err := loadtest.ParseMix(*mixFlag)
	if err != nil {
		return usage("%v", err)
	}
	fld, err := loadtest.ParseField(*field)
	if err != nil {
		return usage("%v", err)
	}
	if *scope != "partition" && *scope != "global" {
		return usage("-scope %q is not partition or global", *scope)
	}
	tty := false
	if f, ok := stdout.(*os.File); ok {
		if fi, err := f.Stat(); err == nil {
			tty = fi.Mode()&os.ModeCharDevice != 0
		}
	}
	lt := loadtest.Config{
		InputTopic: *input, OutputTopic: *output,
		Count: *count, Rate: *rate, Entities: *entities, KeySize: *keySize, ValueSize: *valueSize,
		DupRatio: *dups, Mix: mix, WithinMax: *withinMax, BeyondMin: *beyondMin, BeyondMax: *beyondMax,
		Field: fld, Global: *scope == "global", WindowCount: *windowCount, WindowInterval: *windowInterval,
		FalsePositiveRate: *fpr, MarkHeader: *markHeader, Seed: *seed, RunID: *runID,
		Settle: *settle, Timeout: *timeout, TTY: tty,
	}
	if !*quiet {
		lt.Progress = stdout
	}

	var report *loadtest.Report
	var code int
	if isEmbedded {
		report, code = loadtestEmbedded(ctx, lt, embeddedOptions{
			partitions: *partitions, passthrough: *passthrough, capacity: *capacity,
			workerEnv: workerEnv, verbose: *verbose, preload: *preload, restartAt: *restartAt,
		}, stdout, stderr)
	} else {
		lt.Brokers = splitBrokers(*brokers)
		kc := KafkaConfig{
			TLSEnabled:    environ["KAFKA_TLS_ENABLED"] == "true",
			TLSCAFile:     environ["KAFKA_TLS_CA_FILE"],
			TLSCertFile:   environ["KAFKA_TLS_CERT_FILE"],
			TLSKeyFile:    environ["KAFKA_TLS_KEY_FILE"],
			SASLMechanism: environ["KAFKA_SASL_MECHANISM"],
			SASLUsername:  environ["KAFKA_SASL_USERNAME"],
			SASLPassword:  environ["KAFKA_SASL_PASSWORD"],
		}
		tc, name, err := kc.tlsConfig()
		if err != nil {
			return usage("%s: %v", name, err)
		}
		lt.TLS, lt.SASL = tc, kc.saslMechanism()
		if err := lt.Validate(); err != nil {
			return usage("%v", err)
		}
		fmt.Fprintf(stdout, "loadtest: %d records against %s, %s -> %s (the worker runs elsewhere)\n",
			lt.Count, strings.Join(lt.Brokers, ","), lt.InputTopic, lt.OutputTopic)
		fmt.Fprintf(stdout, "loadtest: expecting the worker to run with DEDUP_KEY=%s DEDUP_SCOPE=%s DEDUP_WINDOW_COUNT=%d DEDUP_WINDOW_INTERVAL=%v\n",
			lt.Field, *scope, lt.WindowCount, lt.WindowInterval)
		if mix.Beyond > 0 && *dups > 0 {
			bmax := *beyondMax
			if bmax == 0 {
				bmax = time.Duration(lt.WindowCount)*lt.WindowInterval + 3*lt.WindowInterval/4
			}
			if bmax > time.Minute {
				fmt.Fprintf(stdout, "loadtest: beyond-window duplicates are sent up to %v after their originals, so the run lasts that long (leave beyond out of -mix to skip them)\n", bmax)
			}
		}
		report, err = loadtest.Run(ctx, lt)
		if err != nil {
			fmt.Fprintf(stderr, "kdedup loadtest: %v\n", err)
			return 1
		}
	}
	if report == nil {
		return code
	}
	return writeLoadtestReport(report, *jsonOut, *htmlOut, stdout, stderr, code)
}

// writeLoadtestReport prints the summary, writes the files and returns the exit status.
func writeLoadtestReport(r *loadtest.Report, jsonOut, htmlOut string, stdout, stderr io.Writer, code int) int {
	fmt.Fprintln(stdout)
	r.WriteSummary(stdout)
	write := func(path string, f func(io.Writer) error) {
		if path == "" {
			return
		}
		file, err := os.Create(path)
		if err == nil {
			err = f(file)
			if cerr := file.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "kdedup loadtest: write %s: %v\n", path, err)
			code = 1
		}
	}
	write(jsonOut, r.WriteJSON)
	write(htmlOut, r.WriteHTML)
	if !r.Pass {
		code = 1
	}
	return code
}

func splitBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

type embeddedOptions struct {
	partitions  int
	passthrough bool
	capacity    uint64
	workerEnv   []string
	verbose     bool
	preload     bool
	restartAt   float64
}

// loadtestEmbedded starts a kafkatest broker and the real worker (or the pass-through pipe),
// runs the loadtest against them and adds the filter's sizing and the worker's metrics to the
// report. It returns a nil report with the exit status when the run could not happen.
func loadtestEmbedded(ctx context.Context, lt loadtest.Config, o embeddedOptions, stdout, stderr io.Writer) (*loadtest.Report, int) {
	fail := func(format string, a ...any) (*loadtest.Report, int) {
		fmt.Fprintf(stderr, "kdedup loadtest: "+format+"\n", a...)
		return nil, 1
	}
	// The worker's configuration, through the same parsing as production.
	units := o.partitions
	scope := "partition"
	if lt.Global {
		units, scope = 1, "global"
	}
	capacity := o.capacity
	if capacity == 0 {
		perUnit := float64(lt.Count) / float64(units)
		if lt.Rate > 0 {
			perUnit = math.Min(perUnit, lt.Rate*lt.WindowInterval.Seconds()/float64(units))
		}
		capacity = uint64(max(1000, math.Ceil(1.2*perUnit)))
	}
	cl, err := kafkatest.Start(kafkatest.Options{Topics: map[string]int32{lt.InputTopic: int32(o.partitions), lt.OutputTopic: int32(o.partitions)}})
	if err != nil {
		return fail("%v", err)
	}
	defer cl.Close()
	lt.Brokers = cl.Addrs()

	env := map[string]string{
		"KAFKA_BROKERS":             strings.Join(cl.Addrs(), ","),
		"KAFKA_INPUT_TOPIC":         lt.InputTopic,
		"KAFKA_OUTPUT_TOPIC":        lt.OutputTopic,
		"KAFKA_GROUP_ID":            "kdedup-loadtest",
		"KAFKA_SESSION_TIMEOUT":     "6s",
		"KAFKA_HEARTBEAT_INTERVAL":  "500ms",
		"DEDUP_KEY":                 lt.Field.String(),
		"DEDUP_SCOPE":               scope,
		"DEDUP_WINDOW_COUNT":        strconv.Itoa(lt.WindowCount),
		"DEDUP_WINDOW_INTERVAL":     lt.WindowInterval.String(),
		"DEDUP_WINDOW_CAPACITY":     strconv.FormatUint(capacity, 10),
		"DEDUP_FALSE_POSITIVE_RATE": strconv.FormatFloat(lt.FalsePositiveRate, 'g', -1, 64),
		"HTTP_ADDR":                 "127.0.0.1:0",
		"SHUTDOWN_TIMEOUT":          "10s",
	}
	for _, kv := range o.workerEnv {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fail("-worker-env %q is not NAME=VALUE", kv)
		}
		env[k] = v
	}
	cfg, err := loadConfig(env)
	if err != nil {
		fmt.Fprintf(stderr, "kdedup loadtest: worker configuration: %v\n", err)
		return nil, 2
	}
	// The verifier expects what the worker was really configured with (-worker-env may override).
	if !o.passthrough {
		d := cfg.Dedup
		if lt.Field, err = loadtest.ParseField(d.Key); err != nil {
			return fail("%v", err)
		}
		lt.Global = d.Scope == "global"
		lt.WindowCount, lt.WindowInterval, lt.FalsePositiveRate = d.WindowCount, d.WindowInterval, d.FalsePositiveRate
		if d.Mode == "mark" {
			lt.MarkHeader = d.MarkHeader
		}
		units = o.partitions
		if lt.Global {
			units = 1
		}
	} else {
		lt.ExpectAll = true
	}
	if err := lt.Validate(); err != nil {
		fmt.Fprintf(stderr, "kdedup loadtest: %v\n", err)
		return nil, 2
	}

	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	var workerCtx context.Context
	stopWorker := context.CancelFunc(func() {})
	defer func() { stopWorker() }()
	exit := make(chan int, 1)
	var base string
	what := "the worker"
	if o.passthrough {
		what = "the pass-through pipe"
	}
	started := false
	outer := ctx
	start := func(ctx context.Context) error {
		started = true
		workerCtx, stopWorker = context.WithCancel(outer)
		if o.passthrough {
			go func() {
				err := loadtest.Pipe(workerCtx, loadtest.PipeConfig{Brokers: cl.Addrs(), InputTopic: lt.InputTopic, OutputTopic: lt.OutputTopic, FromEarliest: true})
				if err != nil {
					fmt.Fprintf(stderr, "kdedup loadtest: pipe: %v\n", err)
					exit <- 1
					return
				}
				exit <- 0
			}()
			return nil
		}
		ln, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return fmt.Errorf("listen: %w", err)
		}
		base = "http://" + ln.Addr().String()
		go func() { exit <- serve(workerCtx, cfg, ln, log) }()
		if code, ok := waitReady(ctx, base+"/readyz", exit, 30*time.Second); !ok {
			if code >= 0 {
				return fmt.Errorf("the worker exited with status %d before it was ready", code)
			}
			return errors.New("the worker was not ready within 30s")
		}
		return nil
	}
	fmt.Fprintf(stdout, "loadtest: embedded broker %s, %s, topics %s -> %s (%d partitions)\n",
		strings.Join(cl.Addrs(), ","), what, lt.InputTopic, lt.OutputTopic, o.partitions)
	if o.preload {
		fmt.Fprintf(stdout, "loadtest: preloading the input topic; %s starts once every record was sent\n", what)
		lt.AfterSend = start
	} else if err := start(ctx); err != nil {
		return fail("%v", err)
	}
	if !o.passthrough {
		fmt.Fprintf(stdout, "loadtest: window %d x %v, capacity %d per filter, scope %s\n",
			lt.WindowCount, lt.WindowInterval, cfg.Dedup.WindowCapacity, cfg.Dedup.Scope)
	}
	var restartNote string
	var restartStop, restartStart time.Duration
	if o.restartAt > 0 {
		lt.At = int(o.restartAt * float64(lt.Count))
		lt.Do = func(ctx context.Context) error {
			t0 := time.Now()
			stopWorker()
			select {
			case code := <-exit:
				if code != 0 {
					return fmt.Errorf("the worker exited with status %d when stopped for the restart", code)
				}
			case <-time.After(30 * time.Second):
				return errors.New("the worker did not stop within 30s for the restart")
			}
			t1 := time.Now()
			if err := start(ctx); err != nil {
				return fmt.Errorf("restart: %w", err)
			}
			restartStop, restartStart = t1.Sub(t0), time.Since(t1)
			restartNote = fmt.Sprintf("the worker was restarted after record %d: stopping it (drain, commit, save) took %v, starting the new one until ready (restore, rewarm, join) %v",
				lt.At, restartStop.Round(time.Millisecond), restartStart.Round(time.Millisecond))
			return nil
		}
	}

	report, err := loadtest.Run(ctx, lt)
	if err != nil {
		return fail("%v", err)
	}
	if o.passthrough {
		report.Mode = "embedded-passthrough"
	} else {
		report.Mode = "embedded"
		metrics := scrapeMetrics(base+"/metrics",
			"kdedup_records_consumed_total", "kdedup_records_produced_total", "kdedup_duplicates_total",
			"kdedup_records_unkeyed_total", "kdedup_filter_false_positive_rate_estimated", "kdedup_filter_capacity_bytes",
			"kdedup_filter_rotations_total", "kdedup_checkpoint_restore_duration_seconds_sum", "kdedup_checkpoint_restore_duration_seconds_count",
			"kdedup_checkpoint_rewarmed_records_total", "kdedup_checkpoint_restores_total")
		report.WorkerMetrics = metrics
		if restartNote != "" {
			if metrics == nil {
				metrics = map[string]float64{}
				report.WorkerMetrics = metrics
			}
			metrics["loadtest_restart_stop_seconds"] = restartStop.Seconds()
			metrics["loadtest_restart_start_seconds"] = restartStart.Seconds()
			if n := metrics["kdedup_checkpoint_restore_duration_seconds_count"]; n > 0 {
				restartNote += fmt.Sprintf("; the new worker restored %.0f filters from checkpoints in %.1fms on average (%.0f records re-warmed)",
					n, 1000*metrics["kdedup_checkpoint_restore_duration_seconds_sum"]/n, metrics["kdedup_checkpoint_rewarmed_records_total"])
			} else {
				restartNote += "; no filter was restored from a checkpoint (is CHECKPOINT_DIR set with -worker-env?)"
			}
			report.Notes = append(report.Notes, restartNote)
		}
		wc := window.Config{
			Generations: cfg.Dedup.WindowCount, Interval: cfg.Dedup.WindowInterval, Capacity: cfg.Dedup.WindowCapacity,
			FalsePositiveRate: cfg.Dedup.FalsePositiveRate, MaxBytes: uint64(cfg.Dedup.MaxMemory),
		}
		if sz, err := window.Size(wc); err == nil {
			n := float64(sz.Generations)
			pGen := -math.Expm1(math.Log1p(-wc.FalsePositiveRate) / n)
			est := -1.0
			if v, ok := metrics["kdedup_filter_false_positive_rate_estimated:max"]; ok {
				est = v
			}
			report.Filter = &loadtest.FilterInfo{
				Filters: units, Generations: sz.Generations, IntervalSeconds: wc.Interval.Seconds(), Capacity: wc.Capacity,
				FalsePositiveRate: wc.FalsePositiveRate, BitsPerKey: sz.BitsPerKey,
				TheoryBitsPerKey: loadtest.TheoryBitsPerKey(pGen), TheoryBitsPerKeyWindow: loadtest.TheoryBitsPerKey(wc.FalsePositiveRate),
				TotalBytes: sz.TotalBytes, BytesPerKey: float64(sz.TotalBytes) / (n * float64(wc.Capacity)),
				PredictedFPR: sz.PredictedFPR, EstimatedFPR: est,
			}
		}
	}
	stopWorker()
	if !started {
		return report, 0
	}
	select {
	case code := <-exit:
		if code != 0 {
			report.AddFailure(fmt.Sprintf("%s exited with status %d", what, code))
		}
	case <-time.After(30 * time.Second):
		report.AddFailure(what + " did not stop within 30s")
	}
	return report, 0
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

// scrapeMetrics fetches a Prometheus text exposition and returns, for each of the given metric
// names present, "name" → the sum over its label sets and "name:max" → the largest value. It
// returns nil if the scrape fails.
func scrapeMetrics(url string, names ...string) map[string]float64 {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, n := range names {
			if !strings.HasPrefix(line, n+"{") && !strings.HasPrefix(line, n+" ") {
				continue
			}
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				continue
			}
			out[n] += v
			if m, ok := out[n+":max"]; !ok || v > m {
				out[n+":max"] = v
			}
		}
	}
	return out
}

// printSizing prints, for a range of false-positive rates, the filter layout window.Size derives
// against the information-theoretic minimum of 1.44·log2(1/p) bits per key, and the heap that
// allocating one such filter really takes.
func printSizing(w io.Writer, generations int, capacity uint64) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "window FPR\tper-generation FPR\tk\tbits/key/gen\ttheory 1.44*log2(1/p_gen)\toverhead\tbytes/key in window\tmeasured heap bytes/key\tfilter MiB\tpredicted FPR (full)\t\n")
	for _, p := range []float64{1e-2, 1e-3, 1e-4, 1e-6, 1e-9} {
		wc := window.Config{Generations: generations, Interval: time.Minute, Capacity: capacity, FalsePositiveRate: p}
		sz, err := window.Size(wc)
		if err != nil {
			return err
		}
		pGen := -math.Expm1(math.Log1p(-p) / float64(generations))
		theory := loadtest.TheoryBitsPerKey(pGen)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f, err := window.New(wc)
		if err != nil {
			return err
		}
		runtime.ReadMemStats(&after)
		heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
		f.Close()
		runtime.KeepAlive(f)
		keys := float64(generations) * float64(capacity)
		fmt.Fprintf(tw, "%g\t%.3g\t%d\t%.2f\t%.2f\t%+.0f%%\t%.2f\t%.2f\t%.1f\t%.3g\t\n",
			p, pGen, sz.K, sz.BitsPerKey, theory, 100*(sz.BitsPerKey/theory-1), float64(sz.TotalBytes)/keys, heap/keys,
			float64(sz.TotalBytes)/(1<<20), sz.PredictedFPR)
	}
	fmt.Fprintf(tw, "\n")
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d generations of %d keys; bits/key/gen counts a generation's sectors with their tag bits; bytes/key in window = filter bytes / (generations x capacity), including the per-group claim words (there is no spare generation).\n", generations, capacity)
	return nil
}
