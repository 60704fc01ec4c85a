package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// sources and sourceLimit are every phase's -sources and DEDUP_METRICS_SOURCE_LIMIT: fewer labels
// than sources, so that the by-source panels show other beside the heavy sources.
const sources, sourceLimit = 12, 8

// sourceHold is every phase's DEDUP_METRICS_SOURCE_HOLD, a tenth of the default 10s as the check's
// other times are shortened: a source without a label adds its held records to other in one step
// at the end of each hold, and a 10s step against the check's 15s windows moves their mean by
// tens of percent.
const sourceHold = time.Second

// phase is one embedded loadtest run (`kdedup loadtest`: kfake, the real worker and the verifier
// in one process) at a constant rate.
type phase struct {
	name     string
	duration time.Duration // of the constant-rate sending; beyond-window duplicates follow
	// restartAt is -restart-at: the worker restarts (drain, save, restore) after this fraction of
	// the records; 0 for none.
	restartAt float64
	// env is extra worker environment (-worker-env NAME=VALUE).
	env []string
	// breakStore replaces the checkpoint directory by a regular file once the worker has written
	// its first snapshot there, so that every later checkpoint fails.
	breakStore bool
	// mayLose accepts a verifier that failed only because unique events were lost above its
	// bound: what an overfilled filter does.
	mayLose bool
	// args are further loadtest flags: -join-at, -leave-at, -rebuild-at, -fault-at.
	args []string
	// compare says whether the throughput and duplicate-ratio panels are compared with the
	// verifier (see comparePhase). Not while a second, unscraped worker processes part of the
	// input.
	compare bool
	// silent says that no alert may fire while the phase runs.
	silent bool
}

// phaseRun is what happened in a phase.
type phaseRun struct {
	phase
	count        int
	began, ended time.Time // the loadtest process's start and exit
	report       *verifierReport
	start        time.Time // the verifier's time 0 (report.Started)
	sendEnd      time.Time // end of the constant-rate sending
	restart      time.Time // planned time of the restart, zero without one
	storeBroken  time.Time // when the checkpoint directory was replaced, zero if not
}

// hook returns when the loadtest's first hook whose name starts with prefix was called, and
// whether there was one.
func (r *phaseRun) hook(prefix string) (time.Time, bool) {
	for _, h := range r.report.Hooks {
		if strings.HasPrefix(h.Name, prefix) {
			return r.start.Add(time.Duration(h.StartSeconds * float64(time.Second))), true
		}
	}
	return time.Time{}, false
}

// at returns t as seconds since the phase's start, for messages.
func (r *phaseRun) at(t time.Time) string { return fmt.Sprintf("+%.1fs", t.Sub(r.start).Seconds()) }

// runner runs phases against one worker address, so that every phase is the same Prometheus
// target (job kdedup, instance workerAddr).
type runner struct {
	bin, dir   string // the kdedup binary and the work directory
	workerAddr string
	rate       float64 // records per second
	dups       float64 // -dups: planned duplicate fraction
}

// run runs p to the end and checks the loadtest's own verdict. It returns an error, with the tail
// of the loadtest's log, when the loadtest could not run, failed for another reason than the
// ones p allows, or did not finish within its duration plus 2 minutes.
func (r runner) run(ctx context.Context, p phase) (*phaseRun, error) {
	ck := filepath.Join(r.dir, "checkpoints-"+p.name)
	jsonPath := filepath.Join(r.dir, "loadtest-"+p.name+".json")
	run := &phaseRun{phase: p, count: int(r.rate * p.duration.Seconds())}
	args := []string{"loadtest", "-count", strconv.Itoa(run.count), "-rate", strconv.FormatFloat(r.rate, 'f', -1, 64),
		"-dups", strconv.FormatFloat(r.dups, 'f', -1, 64), "-fpr", strconv.FormatFloat(targetFPR, 'g', -1, 64),
		"-window-count", strconv.Itoa(windowCount), "-window-interval", windowInterval.String(), "-settle", "3s", "-timeout", "2m", "-quiet", "-json", jsonPath,
		"-worker-env", "HTTP_ADDR=" + r.workerAddr, "-worker-env", "CHECKPOINT_DIR=" + ck,
		"-worker-env", "CHECKPOINT_INTERVAL=1s",
		"-sources", strconv.Itoa(sources), "-worker-env", "DEDUP_METRICS_SOURCE_LIMIT=" + strconv.Itoa(sourceLimit),
		"-worker-env", "DEDUP_METRICS_SOURCE_HOLD=" + sourceHold.String()}
	if p.restartAt > 0 {
		args = append(args, "-restart-at", strconv.FormatFloat(p.restartAt, 'f', -1, 64))
	}
	for _, e := range p.env {
		args = append(args, "-worker-env", e)
	}
	args = append(args, p.args...)
	runCtx, cancel := context.WithTimeout(ctx, p.duration+2*time.Minute)
	defer cancel()
	run.began = time.Now()
	c, err := startChild(runCtx, "loadtest "+p.name, filepath.Join(r.dir, "loadtest-"+p.name+".log"), r.bin, args...)
	if err != nil {
		return nil, err
	}
	defer c.stop(10 * time.Second)
	broken := make(chan time.Time, 1)
	if p.breakStore {
		go func() { broken <- breakStore(runCtx, ck, c.done) }()
	}
	<-c.done
	run.ended = time.Now()
	if p.breakStore {
		run.storeBroken = <-broken
	}
	if ctx.Err() != nil {
		return run, fmt.Errorf("phase %s: interrupted", p.name)
	}
	if runCtx.Err() != nil {
		return run, fmt.Errorf("phase %s: the loadtest did not finish within %v\n%s", p.name, p.duration+2*time.Minute, c.logTail(25))
	}
	if err := run.judge(c.exitCode(), jsonPath); err != nil {
		return run, fmt.Errorf("phase %s: %w\n%s", p.name, err, c.logTail(25))
	}
	return run, nil
}

// windowCount and windowInterval are the loadtests' DEDUP_WINDOW_COUNT and DEDUP_WINDOW_INTERVAL.
// The interval is not a multiple of the scrape interval, so that the scrapes see the current
// generation at every stage of its filling, not always at the same one: the estimated
// false-positive rate rises as it fills, and its mean over the scrapes is compared with a loss
// rate (estimateVsLoss).
const (
	windowCount    = 3
	windowInterval = 1250 * time.Millisecond
)

// lossFailure matches the verifier's failure for losses above its bound.
var lossFailure = regexp.MustCompile(`^\d+ unique events lost, more than the bound`)

// judge reads the verifier's report and checks the loadtest's outcome against the phase.
func (run *phaseRun) judge(code int, jsonPath string) error {
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		return fmt.Errorf("the loadtest exited with status %d and wrote no report: %w", code, err)
	}
	rep := &verifierReport{}
	if err := json.Unmarshal(b, rep); err != nil {
		return fmt.Errorf("loadtest report: %w", err)
	}
	if rep.Version != 1 || rep.BucketSeconds <= 0 || len(rep.Series) == 0 {
		return fmt.Errorf("loadtest report: version %d, bucket %gs, %d points: not a version 1 report with a time series", rep.Version, rep.BucketSeconds, len(rep.Series))
	}
	run.report = rep
	run.start = rep.Started
	run.sendEnd = rep.Started.Add(run.duration)
	if run.restartAt > 0 { // at a constant rate, record i is sent about i/rate after the start
		run.restart = rep.Started.Add(time.Duration(run.restartAt * float64(run.duration)))
	}
	var unexpected []string
	for _, f := range rep.Failures {
		if !(run.mayLose && lossFailure.MatchString(f)) {
			unexpected = append(unexpected, f)
		}
	}
	switch {
	case len(unexpected) > 0:
		return fmt.Errorf("the loadtest's verifier failed: %v", unexpected)
	case code != 0 && (rep.Pass || !run.mayLose):
		return fmt.Errorf("the loadtest exited with status %d", code)
	case run.breakStore && run.storeBroken.IsZero():
		return errors.New("the worker wrote no checkpoint, so the store was never made unwritable")
	}
	return nil
}

// breakStore waits for the first snapshot in dir, then moves dir aside and puts a regular file in
// its place: every later save fails with "not a directory". (The check runs as root in CI, where
// a read-only mode would not stop writes.) It returns when it did so, or the zero time if ctx
// ended or the loadtest exited first.
func breakStore(ctx context.Context, dir string, exited <-chan struct{}) time.Time {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return time.Time{}
		case <-exited:
			return time.Time{}
		case <-tick.C:
		}
		if snaps, _ := filepath.Glob(filepath.Join(dir, "*.snap")); len(snaps) == 0 {
			continue
		}
		if err := os.Rename(dir, dir+".aside"); err != nil {
			return time.Time{}
		}
		if err := os.WriteFile(dir, []byte("not a directory: the live check broke this store\n"), 0o644); err != nil {
			return time.Time{}
		}
		return time.Now()
	}
}

// verifierReport is the part of the loadtest's JSON report (-json, version 1) the check reads.
type verifierReport struct {
	Version        int       `json:"version"`
	Started        time.Time `json:"started"`
	ElapsedSeconds float64   `json:"elapsed_s"`
	BucketSeconds  float64   `json:"bucket_s"`
	Series         []point   `json:"series"`
	Verdict        struct {
		Records   int `json:"records"`
		Delivered int `json:"delivered"`
		// Late is the number of late records sent (-late): unique events stamped 24h before
		// their creation.
		Late   int `json:"late"`
		Lost   int `json:"lost"`
		Leaked int `json:"leaked"`
		// SteadyLossRate is the share of unique events first sent once the window had filled
		// that were lost: the filter's measured false-positive rate.
		SteadyLossRate float64 `json:"steady_loss_rate"`
		SteadyUniques  int     `json:"steady_uniques"`
		SteadyLost     int     `json:"steady_lost"`
		// SteadyByFilter splits them by the filter that judged them (the filter label).
		SteadyByFilter map[string]filterLoss `json:"steady_by_filter"`
	} `json:"verdict"`
	// Filter is the worker's filter: EstimateAverage is its estimated false-positive rate read
	// at random instants over the steady part and averaged as the loss is (-1: unknown).
	Filter *struct {
		EstimateAverage float64 `json:"estimate_avg"`
	} `json:"filter"`
	// Hooks are the loadtest's actions (-restart-at, -join-at, -leave-at, -rebuild-at, -fault-at):
	// when each was called, in seconds since Started, and how long it took.
	Hooks      []hookRun `json:"hooks"`
	Notes      []string  `json:"notes"`
	Incomplete string    `json:"incomplete"`
	Failures   []string  `json:"failures"`
	Pass       bool      `json:"pass"`
}

// hookRun is one of the loadtest's actions: its name, and when it was called, in seconds since
// the verifier's start.
type hookRun struct {
	Name         string  `json:"name"`
	StartSeconds float64 `json:"start_s"`
}

// filterLoss counts the unique events a filter judged and how many it lost.
type filterLoss struct {
	Uniques int `json:"uniques"`
	Lost    int `json:"lost"`
}

// point is one bucket of the verifier's time series: the records created in
// [T, T+bucket) seconds after the start, and how many of them were never delivered.
type point struct {
	T       float64 `json:"t"`
	Sent    int     `json:"sent"`
	Dropped int     `json:"dropped"`
}

// count returns how many of the records created in (from, to] f counts, taking buckets that the
// interval covers in part pro rata (records are spread evenly over a bucket at a constant rate).
func (r *verifierReport) count(from, to time.Time, f func(point) int) float64 {
	w := r.BucketSeconds
	lo, hi := from.Sub(r.Started).Seconds(), to.Sub(r.Started).Seconds()
	var n float64
	for _, p := range r.Series {
		overlap := min(hi, p.T+w) - max(lo, p.T)
		if overlap > 0 {
			n += float64(f(p)) * overlap / w
		}
	}
	return n
}
