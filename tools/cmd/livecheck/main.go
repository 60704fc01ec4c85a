// Command livecheck proves kdedup's Grafana dashboard and Prometheus alerts on live data.
//
// It starts Prometheus (Debian's prometheus package; scrape and rule evaluation every second, a
// free port, its own data directory) with a test copy of deploy/prometheus/alerts.yml whose for:
// durations and time thresholds are 100 times shorter, and runs four embedded loadtests
// (`kdedup loadtest`: kfake, the real worker and the verifier in one process) one after the
// other on the same worker address, so that all are the same Prometheus target. Their window is
// 3 generations of 1.25s, not a multiple of the scrape interval, so that the scrapes see the
// current generation at every stage of its filling:
//
//   - healthy: mixed duplicates (immediate, within, beyond and cross-partition), checkpoints
//     every second, and a worker restart after 20% of the records (drain, save, restore), under
//     event time (DEDUP_WINDOW_CLOCK=event) with 1% of the records late (-late: unique events
//     stamped 24h before their creation; see eventTimePhase), and one oversized record that the
//     output refuses and that goes to a dead-letter topic (see refusedPhase);
//   - handover: a second worker (same process and broker, not scraped) joins the group after
//     25% of the records and leaves after 50%, so that the scraped worker releases its
//     partitions, gets half back as retained filters, then takes the other half back from the
//     second worker's snapshots; after 75% the worker restarts with its checkpoint store emptied
//     and rebuilds its filters from the output topic;
//   - refused: one oversized record without a dead-letter topic, so that input partition 0
//     blocks at it halfway through (-refused, 8s by default);
//   - degraded: the filter pushed past capacity and its memory cap (-overfill, by default
//     DEDUP_WINDOW_CAPACITY=250 and DEDUP_MEMORY_LIMIT=30KiB for about 700 new keys per partition
//     and interval: the budget less its input share (a quarter) holds the four filters' first stages (3880 bytes each) and one grown
//     stage each (1600 bytes), so each filter grows one stage, then stops), the checkpoint directory replaced by a
//     regular file once the first checkpoint was written, so every later save fails, and produce
//     faults injected into the broker (three REQUEST_TIMED_OUT after the append, then
//     OUT_OF_ORDER_SEQUENCE_NUMBER and UNKNOWN_PRODUCER_ID, which reset the idempotent producer).
//
// Then it evaluates every target of every dashboard panel, and the label_values() variables,
// through Prometheus's HTTP API with Grafana's variables substituted (see grafanaVars), and checks
// that every target returns data (or is on emptyAllowed, with the reason); that the duplicate
// ratio panels agree with the verifier within 1 percentage point and the records-per-second
// panels within 5% in the healthy and degraded phases (see comparePhase); that panels show what
// each phase made happen (events); that the late-records panel's total over the healthy phase
// matches the late records the loadtest sent, that the stream lag stays small there, and that
// both event-time panels are empty in the other phases (checkEventTime); that the estimated false-positive rate of the overfilled
// filters, averaged over the scrapes, is within 1.3x of the measured loss (estimateVsLoss); that
// no alert fires in the healthy and handover phases; that KdedupPartitionBlocked, and no other
// alert, fires in the refused phase; and that the false-positive, overfill, checkpoint and
// producer alerts fire in the degraded phase, and no other (but mayFire).
//
// It prints a summary table and exits 0 when every check passed, 1 when one failed (each failure
// is named on stderr) and 2 on bad flags. Every process it starts is stopped on return, on
// SIGINT/SIGTERM, and (on Linux) if it is killed.
//
// Usage, from tools/ (CI runs it as `bash deploy/ci-checks.sh live_check`):
//
//	go run ./cmd/livecheck [-repo ..] [-kdedup BIN] [-rate 3000] [-overfill NAME=VALUE] [-keep] [-panels FILE]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kdedup/kdedup/tools"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// options are the command's flags.
type options struct {
	repo, kdedup, prometheus string
	rate, dups               float64
	healthy, handover        time.Duration
	degraded, refused        time.Duration
	overfill                 stringList
	keep                     bool
	panels                   string // -panels: the page of docs/operations.md's panels
}

// defaultOverfill is the worker environment that overfills the filter in the degraded phase:
// about 700 new keys per partition and interval against a capacity of 250. The filter grows past
// its capacity on its own, keeping its rate at target, so the memory cap stops it: stage 0 of
// the 3 generations takes 3504 bytes at 1e-6, the first grown stage 1600 and the second 3136, so
// 8KiB lets one stage grow and then the filter is at the cap, and its rate rises. The input
// buffers take a quarter of DEDUP_MEMORY_LIMIT, so 30KiB leaves the filters 22.5KiB.
var defaultOverfill = stringList{"DEDUP_WINDOW_CAPACITY=250", "DEDUP_MEMORY_LIMIT=30KiB"}

// handoverArgs are the loadtest flags of the handover phase: a second worker joins the group and
// leaves it again, then the worker restarts with an empty checkpoint store.
var handoverArgs = []string{"-join-at", "0.25", "-leave-at", "0.5", "-rebuild-at", "0.75"}

// faultArgs are the loadtest flags that inject produce faults in the degraded phase: three
// REQUEST_TIMED_OUT answers after the append (uncertain retries), then the two errors that reset
// the idempotent producer. They are apart, so that no reset meets a batch that timed out (which
// would write it twice, as the reset's alert warns).
var faultArgs = []string{"-fault-at", "0.25:REQUEST_TIMED_OUT:3", "-fault-at", "0.4:OUT_OF_ORDER_SEQUENCE_NUMBER", "-fault-at", "0.5:UNKNOWN_PRODUCER_ID"}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run parses the flags, runs the live check and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("livecheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.repo, "repo", "..", "root of the kdedup repository (deploy/, cmd/kdedup)")
	fs.StringVar(&o.kdedup, "kdedup", "", "kdedup binary (default: go build ./cmd/kdedup in -repo)")
	fs.StringVar(&o.prometheus, "prometheus", "prometheus", "Prometheus server binary")
	fs.Float64Var(&o.rate, "rate", 3000, "records per second of both loadtests")
	fs.Float64Var(&o.dups, "dups", 0.25, "planned duplicate fraction of the loadtests")
	fs.DurationVar(&o.healthy, "healthy", 20*time.Second, "constant-rate sending of the healthy phase")
	fs.DurationVar(&o.handover, "handover", 20*time.Second, "constant-rate sending of the handover phase")
	fs.DurationVar(&o.degraded, "degraded", 20*time.Second, "constant-rate sending of the degraded phase")
	fs.DurationVar(&o.refused, "refused", 8*time.Second, "constant-rate sending of the refused phase")
	fs.Var(&o.overfill, "overfill", "worker NAME=VALUE (repeatable) that pushes the filter past capacity in the degraded phase (default "+strings.Join(defaultOverfill, " ")+")")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory (logs, reports, Prometheus data)")
	fs.StringVar(&o.panels, "panels", "", "write an HTML page of the dashboard panels docs/operations.md shows, as Prometheus evaluated them in this run, to this file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(o.overfill) == 0 {
		o.overfill = defaultOverfill
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	began := time.Now()
	checks, err := liveCheck(ctx, o, stderr)
	if len(checks) > 0 {
		writeSummary(stdout, checks)
	}
	fmt.Fprintf(stdout, "took %v\n", time.Since(began).Round(time.Second))
	failed := 0
	for _, c := range checks {
		if !c.ok {
			failed++
			fmt.Fprintf(stderr, "livecheck: FAIL: %s\n", c.failure())
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "livecheck: FAIL: %v\n", err)
		return 1
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "livecheck: %d of %d checks failed\n", failed, len(checks))
		return 1
	}
	fmt.Fprintf(stdout, "livecheck: PASS (%d checks)\n", len(checks))
	return 0
}

// inputs are what the check reads from the repository.
type inputs struct {
	targets []tools.Target
	vars    []tools.Variable
	rules   []byte // the test rule file
	alerts  []string
}

// readInputs decodes the dashboard strictly and derives the test rule file from alerts.yml.
func readInputs(repo string) (inputs, error) {
	var in inputs
	raw, err := os.ReadFile(filepath.Join(repo, "deploy", "grafana", "kdedup.json"))
	if err != nil {
		return in, err
	}
	d, err := tools.DecodeDashboard(raw)
	if err != nil {
		return in, fmt.Errorf("deploy/grafana/kdedup.json: %w", err)
	}
	if in.targets, err = tools.Targets(d); err != nil {
		return in, fmt.Errorf("deploy/grafana/kdedup.json: %w", err)
	}
	if in.vars, err = tools.Variables(d); err != nil {
		return in, fmt.Errorf("deploy/grafana/kdedup.json: %w", err)
	}
	src, err := os.ReadFile(filepath.Join(repo, "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		return in, err
	}
	in.rules, in.alerts, _, err = testRules(src)
	return in, err
}

// liveCheck runs the whole check in a temporary work directory and returns its checks. An error
// means the check could not run to the end.
func liveCheck(ctx context.Context, o options, log io.Writer) ([]check, error) {
	in, err := readInputs(o.repo)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kdedup-livecheck-")
	if err != nil {
		return nil, err
	}
	if o.keep {
		fmt.Fprintf(log, "livecheck: work directory %s (kept)\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	rulesFile := filepath.Join(dir, "alerts-live.yml")
	if err := os.WriteFile(rulesFile, in.rules, 0o644); err != nil {
		return nil, err
	}
	bin, err := kdedupBinary(ctx, o, dir)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	worker := fmt.Sprintf("127.0.0.1:%d", port)
	prom, err := startPrometheus(ctx, o.prometheus, dir, rulesFile, worker)
	if err != nil {
		return nil, err
	}
	defer prom.stop(5 * time.Second)
	if err := prom.waitScraping(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "livecheck: prometheus %s at %s scraping the worker at %s every %v\n", prom.version(ctx), prom.api.base, worker, scrapeInterval)
	r := runner{bin: bin, dir: dir, workerAddr: worker, rate: o.rate, dups: o.dups}
	runs, err := runPhases(ctx, r, o, log)
	if err != nil {
		return nil, err
	}
	if prom.exited() {
		return nil, fmt.Errorf("prometheus exited during the run: %v\n%s", prom.err, prom.logTail(20))
	}
	checks := evaluate(ctx, prom.api, in, worker, runs)
	if o.panels != "" {
		if err := writePanels(ctx, o.panels, prom.api, in.targets, runs, worker); err != nil {
			return checks, fmt.Errorf("-panels: %w", err)
		}
		fmt.Fprintf(log, "livecheck: wrote the panels page %s\n", o.panels)
	}
	return checks, nil
}

// writePanels writes the -panels page of runs to path.
func writePanels(ctx context.Context, path string, api promAPI, targets []tools.Target, runs []*phaseRun, worker string) error {
	start, end := runs[0].began, runs[len(runs)-1].ended
	g := newGrafanaVars(end.Sub(start))
	g.set("job", "kdedup")
	g.set("instance", worker)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writePanelsPage(ctx, f, api, targets, g, runs, start, end); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runPhases runs the healthy, handover, refused and degraded phases, in this order.
func runPhases(ctx context.Context, r runner, o options, log io.Writer) ([]*phaseRun, error) {
	phases := []phase{
		{name: "healthy", duration: o.healthy, restartAt: 0.2, compare: true, silent: true, env: eventTimeEnv,
			args: append(slices.Clone(eventTimeArgs), deadLetterArgs...)},
		// The handover phase's worker is eager (the second worker offers both protocols, so the
		// group agrees on eager): the panels it checks show a revoked partition given back to the
		// same worker as a "retained" restore, which the cooperative default never makes (a kept
		// partition is not released at all); the broker tests cover the cooperative protocol.
		{name: "handover", duration: o.handover, args: handoverArgs, silent: true, env: []string{"KAFKA_GROUP_PROTOCOL=eager"}},
		{name: refusedPhase, duration: o.refused, args: refusedArgs},
		{name: "degraded", duration: o.degraded, env: o.overfill, breakStore: true, mayLose: true, args: faultArgs, compare: true},
	}
	runs := make([]*phaseRun, len(phases))
	for i, p := range phases {
		fmt.Fprintf(log, "livecheck: phase %s: %.0f records/s for %v, %.0f%% duplicates, worker env %v, loadtest %v\n",
			p.name, r.rate, p.duration, 100*r.dups, p.env, p.args)
		var err error
		if runs[i], err = r.run(ctx, p); err != nil {
			return nil, err
		}
		rep := runs[i].report
		fmt.Fprintf(log, "livecheck: phase %s done in %v: %d records sent, %d delivered, %d lost, %d leaked\n", p.name,
			runs[i].ended.Sub(runs[i].began).Round(100*time.Millisecond), rep.Verdict.Records, rep.Verdict.Delivered, rep.Verdict.Lost, rep.Verdict.Leaked)
	}
	// Let the last scrapes and rule evaluations of the last phase land.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(3 * scrapeInterval):
	}
	return runs, nil
}

// evaluate runs the checks on what Prometheus recorded during runs.
func evaluate(ctx context.Context, api promAPI, in inputs, worker string, runs []*phaseRun) []check {
	start, end := runs[0].began.Add(-2*time.Second), runs[len(runs)-1].ended.Add(2*time.Second)
	g := newGrafanaVars(end.Sub(start))
	checks := resolveVariables(ctx, api, in.vars, map[string]string{"job": "kdedup", "instance": worker}, g, start, end)
	checks = append(checks, checkPanels(ctx, api, in.targets, g, start, end)...)
	byName := map[string]*phaseRun{}
	for _, run := range runs {
		byName[run.name] = run
		if run.compare {
			checks = append(checks, comparePhase(ctx, api, in.targets, g, run)...)
		}
	}
	checks = append(checks, checkEvents(ctx, api, in.targets, g, byName, [2]time.Time{start, end})...)
	checks = append(checks, estimateVsLoss(ctx, api, in.targets, g, byName["degraded"]))
	var others []*phaseRun
	for _, run := range runs {
		if run.name != eventTimePhase {
			others = append(others, run)
		}
	}
	checks = append(checks, checkEventTime(ctx, api, in.targets, g, byName[eventTimePhase], others)...)
	return append(checks, checkAlerts(ctx, api, in.alerts, runs)...)
}

// kdedupBinary returns -kdedup, or builds cmd/kdedup of -repo into dir.
func kdedupBinary(ctx context.Context, o options, dir string) (string, error) {
	if o.kdedup != "" {
		return o.kdedup, nil
	}
	bin := filepath.Join(dir, "kdedup")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/kdedup")
	cmd.Dir = o.repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/kdedup: %w\n%s", err, out)
	}
	return bin, nil
}

// check is one line of the summary: what was checked (and in which phase), what the live data
// gave, what it should be, and whether that passed.
type check struct {
	name, phase   string
	got, want     string
	limit, detail string
	ok            bool
	info          bool // a measurement reported, not checked
}

// failure describes a failed check in one line.
func (c check) failure() string {
	s := c.name
	if c.phase != "" {
		s += " (" + c.phase + " phase)"
	}
	s += ": got " + c.got + ", want " + c.want
	if c.limit != "" {
		s += " " + c.limit
	}
	if c.detail != "" {
		s += " (" + c.detail + ")"
	}
	return s
}

// writeSummary prints the checks as a table. Panel targets that simply returned data are
// counted on one line; everything else gets its own.
func writeSummary(w io.Writer, checks []check) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tPHASE\tGOT\tWANT\tLIMIT\tRESULT\tDETAIL")
	withData := 0
	for _, c := range checks {
		if c.ok && c.want == "data" {
			withData++
			continue
		}
		result := "ok"
		if c.info {
			result = "info"
		}
		if !c.ok {
			result = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.name, orDash(c.phase), c.got, c.want, orDash(c.limit), result, c.detail)
	}
	fmt.Fprintf(tw, "%d dashboard targets returned data\tall\t\t\t\tok\t\n", withData)
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
