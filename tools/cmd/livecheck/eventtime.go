package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/kdedup/kdedup/tools"
)

// eventTimePhase is the phase whose worker runs under DEDUP_WINDOW_CLOCK=event and whose
// loadtest sends late records, so that the event-time panels have data to prove. It is the
// healthy phase: its loadtest stamps every other record at its creation, so stream time follows
// the wall clock within the processing latency and the phase's comparisons, restart and restore
// checks hold as under processing time (a graceful restart restores each filter at its
// snapshot's generation, and its records move it on). The handover phase would not do: the
// unscraped second worker counts the late records of the partitions it holds.
const eventTimePhase = "healthy"

// lateShare is the event-time phase's -late: the share of its records, unique events, that the
// loadtest stamps 24h before their creation, far older than the window of 3 x 1.25s.
const lateShare = 0.01

// eventTimeEnv and eventTimeArgs are the worker environment and the loadtest flags of the
// event-time phase. DEDUP_LATE_RECORDS keeps its default, pass: the verifier expects every late
// record once.
var (
	// The healthy phase also runs with DEDUP_WINDOW_REFRESH=true (the re-armed identities
	// panel), which the loadtest's verifier then expects: its restart is graceful, so the final
	// snapshot keeps every re-arm.
	eventTimeEnv  = []string{"DEDUP_WINDOW_CLOCK=event", "DEDUP_WINDOW_REFRESH=true"}
	eventTimeArgs = []string{"-late", strconv.FormatFloat(lateShare, 'f', -1, 64)}
)

// The event-time panels and their targets.
const (
	latePanel = "Event time: late records"
	lagPanel  = "Event time: stream lag"
)

// lateSlackScrapes is how far the late-records panel's total over the event-time phase may be
// from the late records the loadtest sent, in scrape intervals' worth of late records (the
// records sent per second times lateShare: 30 at 3000 records/s). The panel is a rate, and its
// total misses what no scrape saw rise, up to one interval at each of two places:
//   - the restart: Prometheus never sees what the old worker counted after its last scrape;
//   - the start: the loadtest starts sending as soon as the worker is ready, so the counters'
//     first samples already count the late records of up to one interval, and rate() extrapolates
//     back towards zero by at most half an interval.
//
// The half interval more covers rate()'s extrapolation at the other ends of its windows. A run
// missed 35 of 600 (11 at the restart, 22 in the first samples).
const lateSlackScrapes = 2.5

// maxStreamLag bounds the stream lag panel's values, both ways, while the event-time phase sends
// at its constant rate: the loadtest stamps its records at their creation, so the lag is the
// processing latency and the time since a partition's last record (milliseconds), except right
// after the restart, when each restored filter resumes at the start of its snapshot's generation
// (up to one interval, 1.25s, behind) until its first record.
const maxStreamLag = 2.5

// checkEventTime proves the event-time panels on the event-time phase (run) and checks that they
// are empty in the others (see eventTimeAbsent).
func checkEventTime(ctx context.Context, api promAPI, targets []tools.Target, g grafanaVars, run *phaseRun, others []*phaseRun) []check {
	if run == nil {
		return []check{{name: "the event-time phase", want: eventTimePhase, got: "no such phase"}}
	}
	checks := []check{lateVsSent(ctx, api, targets, g, run)}
	checks = append(checks, streamLagSmall(ctx, api, targets, g, run)...)
	return append(checks, eventTimeAbsent(ctx, api, targets, g, others)...)
}

// lateVsSent compares the total of the late-records panel over the event-time phase (its
// per-second rates summed over the steps, times the step) with the number of late records the
// loadtest sent: within lateSlackScrapes scrape intervals' worth of them.
func lateVsSent(ctx context.Context, api promAPI, targets []tools.Target, g grafanaVars, run *phaseRun) check {
	sent := run.report.Verdict.Late
	slack := lateSlackScrapes * float64(sent) / run.duration.Seconds() * scrapeInterval.Seconds()
	c := check{name: fmt.Sprintf("panel %q target A total vs late records sent", latePanel), phase: run.name,
		want: strconv.Itoa(sent), limit: fmt.Sprintf("±%.0f", slack)}
	t, ok := findTarget(targets, latePanel, "A")
	if !ok {
		c.got = "not on the dashboard"
		return c
	}
	q, err := g.apply(t.Expr)
	var res []series
	if err == nil {
		res, err = api.queryRange(ctx, q, run.began, run.ended, g.interval)
	}
	if err != nil {
		c.got = err.Error()
		return c
	}
	total, steps := panelTotal(res, g.interval)
	c.got = fmt.Sprintf("%.1f", total)
	if sent == 0 {
		c.detail = "the loadtest sent no late record"
		return c
	}
	c.ok = math.Abs(total-float64(sent)) <= slack
	c.detail = fmt.Sprintf("off %.1f (%.1f%%), %d filter steps of %v; %g scrape intervals of late records: the restart and the counters' first samples",
		total-float64(sent), 100*(total-float64(sent))/float64(sent), steps, g.interval, lateSlackScrapes)
	return c
}

// panelTotal integrates a rate panel: the sum over every series and step of its value times the
// step. It returns the total and the number of values.
func panelTotal(res []series, step time.Duration) (total float64, n int) {
	for _, s := range res {
		for _, p := range s.finite() {
			total += p.V * step.Seconds()
			n++
		}
	}
	return total, n
}

// streamLagSmall checks that both targets of the stream lag panel stay within ±maxStreamLag
// seconds while the event-time phase sends at its constant rate.
func streamLagSmall(ctx context.Context, api promAPI, targets []tools.Target, g grafanaVars, run *phaseRun) []check {
	var checks []check
	for _, ref := range []string{"A", "B"} {
		c := check{name: fmt.Sprintf("panel %q target %s while sending", lagPanel, ref), phase: run.name,
			want:   fmt.Sprintf("|lag| < %gs", maxStreamLag),
			detail: fmt.Sprintf("%s..%s: records are stamped at their creation", run.at(run.start), run.at(run.sendEnd))}
		t, ok := findTarget(targets, lagPanel, ref)
		if !ok {
			c.got = "not on the dashboard"
			checks = append(checks, c)
			continue
		}
		lo, hi, err := targetRange(ctx, api, g, t.Expr, nil, run.start, run.sendEnd)
		switch {
		case err != nil:
			c.got = err.Error()
		case math.IsInf(hi, -1):
			c.got = "no data"
		default:
			c.got = fmt.Sprintf("min %.3gs, max %.3gs", lo, hi)
			c.ok = lo > -maxStreamLag && hi < maxStreamLag
		}
		checks = append(checks, c)
	}
	return checks
}

// eventTimeAbsent checks that the event-time panels are empty in the phases that run under
// processing time (the kdedup_filter_stream_* and late-record series exist only under
// DEDUP_WINDOW_CLOCK=event), from one $__rate_interval plus a second after each phase's start:
// until then a rate() window can still hold the previous phase's last samples.
func eventTimeAbsent(ctx context.Context, api promAPI, targets []tools.Target, g grafanaVars, runs []*phaseRun) []check {
	var checks []check
	for _, run := range runs {
		from := run.began.Add(g.rateInterval + time.Second)
		for _, t := range targets {
			if t.Panel != latePanel && t.Panel != lagPanel {
				continue
			}
			c := check{name: t.String(), phase: run.name, want: "no data",
				detail: "processing time: the event-time series do not exist"}
			points, nseries, err := evalTarget(ctx, api, g, t.Expr, from, run.ended)
			switch {
			case err != nil:
				c.got = err.Error()
			case points > 0:
				c.got = fmt.Sprintf("%d series, %d points", nseries, points)
			default:
				c.got, c.ok = "no data", true
			}
			checks = append(checks, c)
		}
	}
	return checks
}

// findTarget returns the target refID of the panel titled panel.
func findTarget(targets []tools.Target, panel, refID string) (tools.Target, bool) {
	for _, t := range targets {
		if t.Panel == panel && t.RefID == refID {
			return t, true
		}
	}
	return tools.Target{}, false
}
