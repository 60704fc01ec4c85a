package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/kdedup/kdedup/tools"
)

// comparison is a dashboard target whose values the loadtest's verifier knows independently.
type comparison struct {
	panel, refID string
	// verifier returns what the target should show for the records created in (from, to], and
	// false when that is undefined (no record in the window).
	verifier func(r *verifierReport, from, to time.Time) (float64, bool)
	// tol is the allowed difference of the means: in points of a ratio (abs) or relative to the
	// verifier's mean.
	tol float64
	abs bool
	// unit formats the values: "%" for ratios, "/s" for rates.
	unit string
}

// comparisons are the checks of the issue: the duplicate ratio within 1 percentage point (both
// panels titled "Duplicate ratio" match), and records consumed, produced and dropped per second
// within 5%. The worker counts as duplicates exactly the records it does not produce, its false
// positives included, so the verifier's reference is the records never delivered. Unkeyed records
// must read 0: every loadtest record has an event id (the unkeyed end markers come after the
// compared interval). The duplicates of all sources together are the dropped records too: every
// record is counted under exactly one source (see metrics.Sources).
var comparisons = []comparison{
	{"Duplicate ratio", "A", ratioOf(func(p point) int { return p.Dropped }), 0.01, true, "%"},
	{"Records per second", "A", rateOf(func(p point) int { return p.Sent }), 0.05, false, "/s"},
	{"Records per second", "B", rateOf(func(p point) int { return p.Sent - p.Dropped }), 0.05, false, "/s"},
	{"Records per second", "C", rateOf(func(p point) int { return p.Dropped }), 0.05, false, "/s"},
	// The sum of the sources lags by the candidates' hold (sourceHold, 1s): the 4 of 12 sources
	// without a label of their own are counted as other in one step at the end of each hold. With
	// the default hold of 10s those steps moved the mean over a 15s window by up to 20%; at 1s
	// the sum is within 0.4%.
	{"Duplicate rate by source", "B", rateOf(func(p point) int { return p.Dropped }), 0.05, false, "/s"},
	{"Records per second", "E", func(*verifierReport, time.Time, time.Time) (float64, bool) { return 0, true }, 0.5, true, "/s"},
}

// rateOf returns the verifier's records per second that f counts.
func rateOf(f func(point) int) func(*verifierReport, time.Time, time.Time) (float64, bool) {
	return func(r *verifierReport, from, to time.Time) (float64, bool) {
		return r.count(from, to, f) / to.Sub(from).Seconds(), true
	}
}

// ratioOf returns the verifier's share of the records sent that f counts.
func ratioOf(f func(point) int) func(*verifierReport, time.Time, time.Time) (float64, bool) {
	return func(r *verifierReport, from, to time.Time) (float64, bool) {
		sent := r.count(from, to, func(p point) int { return p.Sent })
		return r.count(from, to, f) / sent, sent > 0
	}
}

// compareWindow returns the interval of a phase over which the panels are compared: from one
// $__rate_interval (plus a second of slack) after the start, or after the restart, to the end of
// the constant-rate sending. The steps right after a restart are left out because Prometheus never
// sees what the old worker counted between its last scrape and its exit (up to one scrape
// interval of records): inherent to counters, not a dashboard error.
func compareWindow(run *phaseRun, g grafanaVars) (from, to time.Time) {
	from = run.start
	if !run.restart.IsZero() {
		from = run.restart.Add(time.Second)
	}
	return from.Add(g.rateInterval + time.Second), run.sendEnd
}

// comparePhase evaluates every comparison's targets over the phase's compare window as Grafana
// would (range query, step $__interval, rate windows of $__rate_interval) and, for each step t,
// the verifier's value over the same window (t - $__rate_interval, t]. The means over the steps
// must agree within the tolerance.
func comparePhase(ctx context.Context, api promAPI, targets []tools.Target, g grafanaVars, run *phaseRun) []check {
	from, to := compareWindow(run, g)
	var checks []check
	for _, cmp := range comparisons {
		matched := false
		for _, t := range targets {
			if t.Panel != cmp.panel || t.RefID != cmp.refID {
				continue
			}
			matched = true
			c := compareTarget(ctx, api, g, t, cmp, run, from, to)
			checks = append(checks, c)
		}
		if !matched {
			checks = append(checks, check{name: fmt.Sprintf("panel %q target %s", cmp.panel, cmp.refID), phase: run.name,
				got: "not on the dashboard", want: "a target to compare with the verifier"})
		}
	}
	return checks
}

// compareTarget compares one target with the verifier over [from, to].
func compareTarget(ctx context.Context, api promAPI, g grafanaVars, t tools.Target, cmp comparison, run *phaseRun, from, to time.Time) check {
	c := check{name: fmt.Sprintf("%s vs verifier", t), phase: run.name, want: "the verifier's value"}
	q, err := g.apply(t.Expr)
	var res []series
	if err == nil {
		res, err = api.queryRange(ctx, q, from, to, g.interval)
	}
	if err == nil && len(res) != 1 {
		err = fmt.Errorf("%d series, want 1 (the comparisons are of sums)", len(res))
	}
	if err != nil {
		c.got = err.Error()
		return c
	}
	var panel, ref float64
	n := 0
	for _, s := range res[0].finite() {
		v, ok := cmp.verifier(run.report, s.T.Add(-g.rateInterval), s.T)
		if !ok {
			continue
		}
		panel += s.V
		ref += v
		n++
	}
	if n < 5 {
		c.got = fmt.Sprintf("only %d steps with values between %s and %s", n, run.at(from), run.at(to))
		return c
	}
	panel, ref = panel/float64(n), ref/float64(n)
	diff := math.Abs(panel - ref)
	c.got = formatValue(panel, cmp.unit)
	c.want = formatValue(ref, cmp.unit)
	if cmp.abs {
		c.ok = diff <= cmp.tol
		c.limit = "±" + formatValue(cmp.tol, cmp.unit)
		if cmp.unit == "%" {
			c.limit = fmt.Sprintf("±%.0f pt", 100*cmp.tol)
		}
		c.detail = fmt.Sprintf("off %s", formatValue(diff, cmp.unit))
		if cmp.unit == "%" {
			c.detail = fmt.Sprintf("off %.2f pt", 100*diff)
		}
	} else {
		rel := diff / ref
		c.ok = rel <= cmp.tol
		c.limit = fmt.Sprintf("±%.0f%%", 100*cmp.tol)
		c.detail = fmt.Sprintf("off %.2f%%", 100*rel)
	}
	c.detail += fmt.Sprintf(", mean of %d steps %s..%s", n, run.at(from), run.at(to))
	return c
}

// formatValue formats a ratio as a percentage and a rate in records per second.
func formatValue(v float64, unit string) string {
	if unit == "%" {
		return fmt.Sprintf("%.2f%%", 100*v)
	}
	return fmt.Sprintf("%.1f%s", v, unit)
}
