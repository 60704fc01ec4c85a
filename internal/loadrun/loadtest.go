package loadrun

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/dedup"
	"github.com/kdedup/kdedup/internal/app"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/loadtest"
	"github.com/kdedup/kdedup/window"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// loadtestFlags are the flags of `kdedup loadtest`.
type loadtestFlags struct {
	brokers, input, output, mix, field, scope, markHeader, runID, jsonOut, htmlOut string
	deadLetterTopic                                                                string
	auditTopic                                                                     string

	embedded, passthrough, preload, quiet, verbose, sizing, refresh bool

	partitions, count, entities, keySize, valueSize, windowCount, sources int
	oversize, oversizeBytes                                               int

	restartAt, rate, dups, late, fpr float64

	joinAt, leaveAt, rebuildAt float64
	faultAt                    stringList
	faults                     []faultSpec // parsed from faultAt by checkHooks

	withinMax, beyondMin, beyondMax, windowInterval, settle, timeout time.Duration

	capacity, seed uint64
	workerEnv      stringList

	set map[string]bool // the flags given on the command line
}

// register defines the flags on fs.
func (f *loadtestFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.brokers, "brokers", "", "bootstrap brokers, comma-separated (default $KAFKA_BROKERS; neither: embedded mode)")
	fs.BoolVar(&f.embedded, "embedded", false, "start an embedded broker and worker even if KAFKA_BROKERS is set")
	fs.BoolVar(&f.passthrough, "passthrough", false, "embedded mode: run a plain copy pipeline instead of the worker (the baseline) and expect every record once")
	fs.Float64Var(&f.restartAt, "restart-at", 0, "embedded mode: restart the worker gracefully once this fraction of the records was sent (with -worker-env CHECKPOINT_DIR=... to test restores)")
	fs.Float64Var(&f.joinAt, "join-at", 0, "embedded mode: a second worker (the same configuration, its own HTTP port) joins the consumer group once this fraction of the records was sent")
	fs.Float64Var(&f.leaveAt, "leave-at", 0, "embedded mode: the second worker of -join-at leaves the group (stops gracefully) once this fraction of the records was sent")
	fs.Float64Var(&f.rebuildAt, "rebuild-at", 0, "embedded mode: restart the worker gracefully with its CHECKPOINT_DIR emptied once this fraction of the records was sent, so that it rebuilds its filters from the output topic")
	fs.Var(&f.faultAt, "fault-at", "embedded mode: FRACTION:ERROR[:COUNT] (repeatable): once this fraction of the records was sent, the broker answers COUNT (default 1) of the worker's produce requests to the output topic with the Kafka error ERROR, e.g. REQUEST_TIMED_OUT (answered after the append), OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID")
	fs.BoolVar(&f.preload, "preload", false, "embedded mode: send everything first, then start the worker (or pipe) and measure how fast it drains the input")
	fs.StringVar(&f.input, "input", "", "input topic (default $KAFKA_INPUT_TOPIC; embedded: loadtest-in)")
	fs.StringVar(&f.output, "output", "", "output topic (default $KAFKA_OUTPUT_TOPIC; embedded: loadtest-out)")
	fs.IntVar(&f.partitions, "partitions", 4, "embedded mode: partitions of the input and output topics")
	fs.IntVar(&f.count, "count", 20000, "records to send, duplicates included")
	fs.Float64Var(&f.rate, "rate", 0, "records per second; 0 sends as fast as possible")
	fs.IntVar(&f.entities, "entities", loadtest.DefaultEntities, "distinct Kafka keys (with -field key every event is its own key)")
	fs.IntVar(&f.keySize, "key-size", loadtest.DefaultKeySize, "Kafka key size in bytes")
	fs.IntVar(&f.valueSize, "value-size", loadtest.DefaultValueSize, "value size in bytes")
	fs.Float64Var(&f.dups, "dups", 0.2, "fraction of the records that are duplicates, 0 to 0.95")
	fs.IntVar(&f.sources, "sources", 0, "stamp every record with one of this many sources in header "+loadtest.SourceHeader+" (src-000 the heaviest); embedded mode sets the worker's DEDUP_METRICS_SOURCE=header:"+loadtest.SourceHeader+", and the report counts records and drops per source")
	fs.IntVar(&f.oversize, "oversize", 0, "oversized records: unique events whose value has -oversize-bytes, the i-th on input partition i; the output refuses them above its max.message.bytes, so the worker blocks their partitions or, with -dead-letter-topic, dead-letters them (embedded mode: the input and dead-letter topics take 16MiB, the output keeps the default 1MiB)")
	fs.IntVar(&f.oversizeBytes, "oversize-bytes", loadtest.DefaultOversizeBytes, "value size of an oversized record (-oversize)")
	fs.StringVar(&f.auditTopic, "audit-topic", "", "the worker's KAFKA_DUPLICATES_TOPIC: the verifier reads it and expects every record in exactly one of the output and the audit topic, every lost event there with its source offset (embedded mode: created with the input's partition count and given to the worker; external default $KAFKA_DUPLICATES_TOPIC)")
	fs.StringVar(&f.deadLetterTopic, "dead-letter-topic", "", "the worker's KAFKA_DEAD_LETTER_TOPIC: the verifier expects every refused record there (embedded mode: created and given to the worker; external default $KAFKA_DEAD_LETTER_TOPIC)")
	fs.Float64Var(&f.late, "late", 0, "fraction of the records that are late: unique events stamped 24h before their creation (counted late under DEDUP_WINDOW_CLOCK=event)")
	fs.StringVar(&f.mix, "mix", loadtest.DefaultMix.String(), "relative weights of the duplicate kinds")
	fs.DurationVar(&f.withinMax, "within-max", 0, "largest delay of within and cross duplicates (default (N-1)*interval/2)")
	fs.DurationVar(&f.beyondMin, "beyond-min", 0, "smallest delay of beyond duplicates (default N*interval + interval/4)")
	fs.DurationVar(&f.beyondMax, "beyond-max", 0, "largest delay of beyond duplicates (default N*interval + 3*interval/4)")
	fs.StringVar(&f.field, "field", "header:event-id", "where the event id goes, the worker's DEDUP_KEY: key, value, header:NAME or json:PATH (external default $DEDUP_KEY)")
	fs.StringVar(&f.scope, "scope", string(dedup.ScopePartition), "the worker's DEDUP_SCOPE: partition or global (external default $DEDUP_SCOPE)")
	fs.IntVar(&f.windowCount, "window-count", 3, "the worker's DEDUP_WINDOW_COUNT (external default $DEDUP_WINDOW_COUNT)")
	fs.DurationVar(&f.windowInterval, "window-interval", time.Second, "the worker's DEDUP_WINDOW_INTERVAL (external default $DEDUP_WINDOW_INTERVAL)")
	fs.BoolVar(&f.refresh, "refresh", false, "the worker's DEDUP_WINDOW_REFRESH: the verifier judges copies beyond the window from the event's last copy (external default $DEDUP_WINDOW_REFRESH)")
	fs.Float64Var(&f.fpr, "fpr", 1e-6, "the worker's DEDUP_FALSE_POSITIVE_RATE (external default $DEDUP_FALSE_POSITIVE_RATE)")
	fs.Uint64Var(&f.capacity, "capacity", 0, "embedded mode: DEDUP_WINDOW_CAPACITY (0: sized from -rate, or -count, per filter)")
	fs.StringVar(&f.markHeader, "mark-header", "", "external mode: the worker's DEDUP_MARK_HEADER when it runs with DEDUP_MODE=mark (default from $DEDUP_MODE/$DEDUP_MARK_HEADER)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the plan: the same seed gives the same plan")
	fs.StringVar(&f.runID, "run-id", "", "tag of this run's records (default: from the seed and the clock)")
	fs.DurationVar(&f.settle, "settle", loadtest.DefaultSettle, "stop waiting when nothing arrives for this long after the last record was sent")
	fs.DurationVar(&f.timeout, "timeout", 0, "bound the whole run (0: none)")
	fs.StringVar(&f.jsonOut, "json", "", "write the machine-readable report to this file")
	fs.StringVar(&f.htmlOut, "html", "", "write the HTML report (inline SVG charts, no scripts) to this file")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress lines")
	fs.BoolVar(&f.verbose, "v", false, "embedded mode: show the worker's info-level logs")
	fs.BoolVar(&f.sizing, "sizing", false, "print the filter's memory per key against theory for false-positive rates 1e-2..1e-9 (with -window-count and -capacity, default 1000000) and exit")
	fs.Var(&f.workerEnv, "worker-env", "embedded mode: extra worker environment variable NAME=VALUE (repeatable), e.g. KAFKA_BATCH_SIZE=2000")
}

// loadtestUsage reports a usage error and returns the exit status 2.
func loadtestUsage(stderr io.Writer, format string, a ...any) int {
	fmt.Fprintf(stderr, "kdedup loadtest: "+format+"\n", a...)
	return 2
}

// Loadtest runs `kdedup loadtest`: it generates a stream with known duplicates, verifies the
// output topic and reports. Without -brokers and KAFKA_BROKERS (or with -embedded) it starts an
// embedded broker and the real worker (the same wiring as the demo and production: app.Load
// and app.Serve); otherwise it only generates and verifies against the given brokers and topics,
// while the worker runs elsewhere. Exit status: 0 when the run passed, 1 when it failed (leaked
// duplicates, losses above the bound, order violations, an incomplete run or a runtime error),
// 2 on bad flags.
func Loadtest(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) int {
	f, code, ok := parseLoadtestFlags(args, stderr)
	if !ok {
		return code
	}
	if f.sizing {
		return f.printSizing(stdout, stderr)
	}
	if f.brokers == "" {
		f.brokers = environ["KAFKA_BROKERS"]
	}
	isEmbedded := f.embedded || strings.TrimSpace(f.brokers) == ""
	if err := f.resolve(environ, isEmbedded); err != nil {
		return loadtestUsage(stderr, "%v", err)
	}
	lt, err := f.config(stdout)
	if err != nil {
		return loadtestUsage(stderr, "%v", err)
	}
	var report *loadtest.Report
	if isEmbedded {
		report, code = loadtestEmbedded(ctx, lt, embeddedOptions{
			partitions: f.partitions, passthrough: f.passthrough, capacity: f.capacity,
			workerEnv: f.workerEnv, verbose: f.verbose, preload: f.preload, restartAt: f.restartAt,
			joinAt: f.joinAt, leaveAt: f.leaveAt, rebuildAt: f.rebuildAt, faults: f.faults, seed: f.seed,
		}, stdout, stderr)
	} else {
		report, code = loadtestExternal(ctx, lt, f, environ, stdout, stderr)
	}
	if report == nil {
		return code
	}
	return writeLoadtestReport(report, f.jsonOut, f.htmlOut, stdout, stderr, code)
}

// parseLoadtestFlags parses args. ok is false when the command is done: -h (code 0) or bad
// flags (code 2, reported on stderr).
func parseLoadtestFlags(args []string, stderr io.Writer) (f *loadtestFlags, code int, ok bool) {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f = &loadtestFlags{set: map[string]bool{}}
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0, false
		}
		return nil, 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kdedup loadtest: unexpected argument %q\n", fs.Arg(0))
		return nil, 2, false
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	return f, 0, true
}

// printSizing runs -sizing and returns the exit status.
func (f *loadtestFlags) printSizing(stdout, stderr io.Writer) int {
	c := f.capacity
	if c == 0 {
		c = 1_000_000
	}
	if err := printSizing(stdout, f.windowCount, c); err != nil {
		fmt.Fprintf(stderr, "kdedup loadtest: %v\n", err)
		return 2
	}
	return 0
}

// resolve checks the flags that depend on the mode and fills in the topics: in the embedded mode
// their defaults, in the external mode what the worker's environment says (fromWorkerEnv).
func (f *loadtestFlags) resolve(environ map[string]string, isEmbedded bool) error {
	if (f.passthrough || f.preload || f.restartAt != 0) && !isEmbedded {
		return errors.New("-passthrough, -preload and -restart-at need the embedded mode")
	}
	if f.restartAt != 0 && (f.passthrough || f.preload || !(f.restartAt > 0 && f.restartAt < 1)) {
		return errors.New("-restart-at must be between 0 and 1 and cannot be combined with -passthrough or -preload")
	}
	if f.passthrough && f.oversize > 0 {
		return errors.New("-oversize needs the worker: the pass-through pipe has no dead-letter topic and does not block")
	}
	if err := f.checkHooks(isEmbedded); err != nil {
		return err
	}
	if !isEmbedded {
		if err := f.fromWorkerEnv(environ); err != nil {
			return err
		}
		if f.input == "" || f.output == "" {
			return errors.New("external mode needs -input and -output (or KAFKA_INPUT_TOPIC and KAFKA_OUTPUT_TOPIC)")
		}
		return nil
	}
	if f.input == "" {
		f.input = "loadtest-in"
	}
	if f.output == "" {
		f.output = "loadtest-out"
	}
	if f.partitions < 1 {
		return errors.New("-partitions must be at least 1")
	}
	return nil
}

// fromWorkerEnv fills in, in the external mode, what the flags leave out from the worker's own
// environment, or else the worker's defaults, so that the verifier expects what the worker does.
// It returns every variable that does not parse.
func (f *loadtestFlags) fromWorkerEnv(environ map[string]string) error {
	defaults := map[string]string{}
	for _, v := range app.EnvVars() {
		if v.HasDefault {
			defaults[v.Name] = v.Default
		}
	}
	fromEnv := func(name, envName string, apply func(string) error) error {
		if f.set[name] {
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
		fromEnv("input", "KAFKA_INPUT_TOPIC", func(v string) error { f.input = v; return nil }),
		fromEnv("output", "KAFKA_OUTPUT_TOPIC", func(v string) error { f.output = v; return nil }),
		fromEnv("dead-letter-topic", "KAFKA_DEAD_LETTER_TOPIC", func(v string) error { f.deadLetterTopic = v; return nil }),
		fromEnv("audit-topic", "KAFKA_DUPLICATES_TOPIC", func(v string) error { f.auditTopic = v; return nil }),
		fromEnv("field", "DEDUP_KEY", func(v string) error { f.field = v; return nil }),
		fromEnv("scope", "DEDUP_SCOPE", func(v string) error { f.scope = v; return nil }),
		fromEnv("window-count", "DEDUP_WINDOW_COUNT", func(v string) (err error) { f.windowCount, err = strconv.Atoi(v); return }),
		fromEnv("window-interval", "DEDUP_WINDOW_INTERVAL", func(v string) (err error) { f.windowInterval, err = time.ParseDuration(v); return }),
		fromEnv("refresh", "DEDUP_WINDOW_REFRESH", func(v string) (err error) { f.refresh, err = strconv.ParseBool(v); return }),
		fromEnv("fpr", "DEDUP_FALSE_POSITIVE_RATE", func(v string) (err error) { f.fpr, err = strconv.ParseFloat(v, 64); return }),
	}
	if consumer.Mode(environ["DEDUP_MODE"]) == consumer.ModeMark && !f.set["mark-header"] {
		f.markHeader = environ["DEDUP_MARK_HEADER"]
		if f.markHeader == "" {
			f.markHeader = consumer.DefaultMarkHeader
		}
	}
	return errors.Join(errs...)
}

// config returns the loadtest's configuration; progress lines go to stdout unless -quiet.
func (f *loadtestFlags) config(stdout io.Writer) (loadtest.Config, error) {
	mix, err := loadtest.ParseMix(f.mix)
	if err != nil {
		return loadtest.Config{}, err
	}
	fld, err := loadtest.ParseField(f.field)
	if err != nil {
		return loadtest.Config{}, err
	}
	if _, err := dedup.ParseScope(f.scope); err != nil {
		return loadtest.Config{}, fmt.Errorf("-scope: %w", err)
	}
	tty := false
	if file, ok := stdout.(*os.File); ok {
		if fi, err := file.Stat(); err == nil {
			tty = fi.Mode()&os.ModeCharDevice != 0
		}
	}
	lt := loadtest.Config{
		InputTopic: f.input, OutputTopic: f.output,
		Count: f.count, Rate: f.rate, Entities: f.entities, KeySize: f.keySize, ValueSize: f.valueSize,
		DupRatio: f.dups, Late: f.late, Sources: f.sources, Oversize: f.oversize, OversizeBytes: f.oversizeBytes, DeadLetterTopic: f.deadLetterTopic, AuditTopic: f.auditTopic, Mix: mix, WithinMax: f.withinMax, BeyondMin: f.beyondMin, BeyondMax: f.beyondMax,
		Field: fld, Global: dedup.Scope(f.scope) == dedup.ScopeGlobal, WindowCount: f.windowCount, WindowInterval: f.windowInterval,
		Refresh: f.refresh, FalsePositiveRate: f.fpr, MarkHeader: f.markHeader, Seed: f.seed, RunID: f.runID,
		Settle: f.settle, Timeout: f.timeout, TTY: tty,
	}
	if !f.quiet {
		lt.Progress = stdout
	}
	return lt, nil
}

// loadtestExternal runs the loadtest against the brokers of lt, with TLS and SASL from the
// worker's KAFKA_* variables, while the worker runs elsewhere. It returns a nil report with the
// exit status when the run could not happen.
func loadtestExternal(ctx context.Context, lt loadtest.Config, f *loadtestFlags, environ map[string]string, stdout, stderr io.Writer) (*loadtest.Report, int) {
	lt.Brokers = splitBrokers(f.brokers)
	environ, problems := app.ResolveFiles(environ)
	if len(problems) > 0 {
		return nil, loadtestUsage(stderr, "%s", strings.Join(problems, "\n"))
	}
	kc := app.KafkaConfig{
		TLSEnabled:    environ["KAFKA_TLS_ENABLED"] == "true",
		TLSCAFile:     environ["KAFKA_TLS_CA_FILE"],
		TLSCertFile:   environ["KAFKA_TLS_CERT_FILE"],
		TLSKeyFile:    environ["KAFKA_TLS_KEY_FILE"],
		TLSServerName: environ["KAFKA_TLS_SERVER_NAME"],
		SASLMechanism: environ["KAFKA_SASL_MECHANISM"],
		SASLUsername:  environ["KAFKA_SASL_USERNAME"],
		SASLPassword:  environ["KAFKA_SASL_PASSWORD"],
	}
	tc, name, err := kc.TLSConfig()
	if err != nil {
		return nil, loadtestUsage(stderr, "%s: %v", name, err)
	}
	lt.TLS = tc
	if kc.SASLMechanism != "" {
		sc, err := kc.SASLConfig(app.AWSConfig{
			Region: environ["AWS_REGION"], AccessKeyID: environ["AWS_ACCESS_KEY_ID"],
			SecretAccessKey: environ["AWS_SECRET_ACCESS_KEY"], SessionToken: environ["AWS_SESSION_TOKEN"],
		})
		if err != nil {
			return nil, loadtestUsage(stderr, "KAFKA_SASL_MECHANISM: %v", err)
		}
		mech, err := kafkaio.NewSASL(kafkaio.SASLConfig(sc))
		if err != nil {
			return nil, loadtestUsage(stderr, "KAFKA_SASL_MECHANISM: %v", err)
		}
		lt.SASL = mech
	}
	if err := lt.Validate(); err != nil {
		return nil, loadtestUsage(stderr, "%v", err)
	}
	fmt.Fprintf(stdout, "loadtest: %d records against %s, %s -> %s (the worker runs elsewhere)\n",
		lt.Count, strings.Join(lt.Brokers, ","), lt.InputTopic, lt.OutputTopic)
	fmt.Fprintf(stdout, "loadtest: expecting the worker to run with DEDUP_KEY=%s DEDUP_SCOPE=%s DEDUP_WINDOW_COUNT=%d DEDUP_WINDOW_INTERVAL=%v\n",
		lt.Field, f.scope, lt.WindowCount, lt.WindowInterval)
	if lt.Mix.Beyond > 0 && f.dups > 0 {
		bmax := f.beyondMax
		if bmax == 0 {
			bmax = time.Duration(lt.WindowCount)*lt.WindowInterval + 3*lt.WindowInterval/4
		}
		if bmax > time.Minute {
			fmt.Fprintf(stdout, "loadtest: beyond-window duplicates are sent up to %v after their originals, so the run lasts that long (leave beyond out of -mix to skip them)\n", bmax)
		}
	}
	report, err := loadtest.Run(ctx, lt)
	if err != nil {
		fmt.Fprintf(stderr, "kdedup loadtest: %v\n", err)
		return nil, 1
	}
	return report, 0
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
	fmt.Fprintf(w, "%d generations of %d keys; bits/key/gen counts a generation's sectors with their tag bits; bytes/key in window = filter bytes / (generations x capacity), including the per-group claim words (there is no spare generation).\n\n", generations, capacity)
	return printGrowth(w, generations, capacity)
}

// growthLoads are the loads, in multiples of the capacity, that -sizing prices growth at.
var growthLoads = []float64{1, 2, 5, 10}

// printGrowth prints what growth past the capacity costs: the bits per key of one generation
// that receives 1x, 2x, 5x and 10x its capacity (window.GrowthCost), with its grown stages.
func printGrowth(w io.Writer, generations int, capacity uint64) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "window FPR\t")
	for _, l := range growthLoads {
		fmt.Fprintf(tw, "bits/key at %gx (stages)\t", l)
	}
	fmt.Fprintf(tw, "\n")
	for _, p := range []float64{1e-2, 1e-3, 1e-4, 1e-6, 1e-9} {
		wc := window.Config{Generations: generations, Interval: time.Minute, Capacity: capacity, FalsePositiveRate: p}
		fmt.Fprintf(tw, "%g\t", p)
		for _, l := range growthLoads {
			b, stages, err := window.GrowthCost(wc, l)
			if err != nil {
				return err
			}
			fmt.Fprintf(tw, "%.1f (%d)\t", float64(8*b)/(l*float64(capacity)), stages)
		}
		fmt.Fprintf(tw, "\n")
	}
	fmt.Fprintf(tw, "\n")
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "Growth: bits per key of one generation that receives that many times its capacity of %d keys in its interval: stage 0 (full at about 0.98x) plus the stages the load needs, each twice the last at half its rate; the window's rate stays at target. DEDUP_MEMORY_LIMIT, shared by the worker's filters, caps the total.\n", capacity)
	return nil
}
