package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/kdedup/kdedup/tools"
)

// targetFPR is the loadtests' DEDUP_FALSE_POSITIVE_RATE (-fpr).
const targetFPR = 1e-6

// bound is a condition on the largest value a target shows in a phase.
type bound struct {
	op string // ">=", ">" or "<"
	v  float64
}

func (b bound) holds(x float64) bool {
	switch b.op {
	case ">=":
		return x >= b.v
	case ">":
		return x > b.v
	default:
		return x < b.v
	}
}

func (b bound) String() string { return fmt.Sprintf("max %s %g", b.op, b.v) }

// event is a value a panel target must show because the run made it happen: the panels prove
// they show restarts, failures and an overfilled filter, not only that they return something.
type event struct {
	panel, refID string
	phase        string            // "healthy", "degraded" or "" for the whole run
	labels       map[string]string // only series with these labels; nil for all
	want         bound
	why          string
}

// events are the expectations of this run. A rebalance is not among them: the only ones in this
// single-worker run happen when a worker starts, before its first scrape, so the restarted
// counter already reads what the old one did (1) and increase() cannot see them; they show when
// another member of the group joins or leaves.
var events = []event{
	{"Restarts and rebalances", "A", "", nil, bound{">=", 1}, "the degraded phase's loadtest process replaced the healthy one's"},
	{"Checkpoint failures and restores", "A", "healthy", nil, bound{"<", 0.5}, "every checkpoint succeeds"},
	{"Checkpoint failures and restores", "A", "degraded", nil, bound{">=", 1}, "the store is unwritable"},
	{"Checkpoint failures and restores", "B", "healthy", map[string]string{"outcome": "warm"}, bound{">=", 1}, "the restarted worker restores its checkpoints"},
	{"Checkpoint failures and restores", "B", "degraded", map[string]string{"outcome": "cold"}, bound{">=", 1}, "the degraded phase's worker starts with an empty store"},
	{"Checkpoint duration", "C", "healthy", nil, bound{">", 0}, "the restarted worker restores its checkpoints"},
	{"Checkpoint age", "A", "healthy", nil, bound{"<", 9}, "a checkpoint every second (the live KdedupCheckpointStale threshold is 9s)"},
	{"Checkpoint age", "A", "degraded", nil, bound{">", 9}, "the store is unwritable"},
	{"Estimated false-positive rate vs target", "A", "healthy", nil, bound{"<", 2 * targetFPR}, "the filter is within capacity"},
	{"Estimated false-positive rate vs target", "A", "degraded", nil, bound{">", 2 * targetFPR}, "the filter is overfilled"},
}

// checkEvents evaluates every event's targets over its phase (the loadtest process's lifetime,
// which ends before the next phase starts) and checks the largest value they show.
func checkEvents(ctx context.Context, api promAPI, targets []tools.Target, g grafanaVars, runs map[string]*phaseRun, all [2]time.Time) []check {
	var checks []check
	for _, e := range events {
		from, to := all[0], all[1]
		if run := runs[e.phase]; run != nil {
			from, to = run.began, run.ended
		}
		matched := false
		for _, t := range targets {
			if t.Panel != e.panel || t.RefID != e.refID {
				continue
			}
			matched = true
			c := check{name: t.String() + labelSuffix(e.labels), phase: orAll(e.phase), want: e.want.String(), detail: e.why}
			peak, err := targetMax(ctx, api, g, t.Expr, e.labels, from, to)
			switch {
			case err != nil:
				c.got = err.Error()
			case math.IsInf(peak, -1):
				c.got = "no data"
			default:
				c.got, c.ok = fmt.Sprintf("max %.3g", peak), e.want.holds(peak)
			}
			checks = append(checks, c)
		}
		if !matched {
			checks = append(checks, check{name: fmt.Sprintf("panel %q target %s", e.panel, e.refID), phase: orAll(e.phase),
				got: "not on the dashboard", want: e.want.String()})
		}
	}
	return checks
}

// targetMax returns the largest finite value of the target's series that carry labels, or -Inf
// when there is none.
func targetMax(ctx context.Context, api promAPI, g grafanaVars, expr string, labels map[string]string, from, to time.Time) (float64, error) {
	q, err := g.apply(expr)
	if err != nil {
		return 0, err
	}
	res, err := api.queryRange(ctx, q, from, to, g.interval)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", q, err)
	}
	peak := math.Inf(-1)
	for _, s := range res {
		if !hasLabels(s.Labels, labels) {
			continue
		}
		for _, p := range s.finite() {
			peak = max(peak, p.V)
		}
	}
	return peak, nil
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func labelSuffix(labels map[string]string) string {
	s := ""
	for _, k := range sortedKeys(labels) {
		s += fmt.Sprintf(" {%s=%q}", k, labels[k])
	}
	return s
}

func orAll(phase string) string {
	if phase == "" {
		return "all"
	}
	return phase
}

// estimateVsLoss reports, for the overfilled filter of run, the mean of the dashboard's estimated
// false-positive rate (over every filter and step once the window had filled) against the
// verifier's measured loss rate of the same events. It is a measurement, not a check: calibrating
// the estimate (issue 15: within 1.3x of the measured loss) is separate work.
func estimateVsLoss(ctx context.Context, api promAPI, targets []tools.Target, g grafanaVars, run *phaseRun) check {
	const panel, ref = "Estimated false-positive rate vs target", "A"
	c := check{name: fmt.Sprintf("panel %q target %s vs measured loss", panel, ref), phase: run.name, ok: true, info: true}
	i := slices.IndexFunc(targets, func(t tools.Target) bool { return t.Panel == panel && t.RefID == ref })
	if i < 0 {
		c.got, c.ok = "not on the dashboard", false
		return c
	}
	window := time.Duration(windowCount) * time.Second // the loadtests' window: 3 x 1s
	q, err := g.apply(targets[i].Expr)
	var res []series
	if err == nil {
		res, err = api.queryRange(ctx, q, run.start.Add(window+g.rateInterval), run.sendEnd, g.interval)
	}
	if err != nil {
		c.got, c.ok = err.Error(), false
		return c
	}
	var sum float64
	n := 0
	for _, s := range res {
		for _, p := range s.finite() {
			sum += p.V
			n++
		}
	}
	loss := run.report.Verdict.SteadyLossRate
	if n == 0 || loss == 0 {
		c.got, c.want = fmt.Sprintf("%d points", n), fmt.Sprintf("measured loss %.3g", loss)
		return c
	}
	est := sum / float64(n)
	c.got, c.want = fmt.Sprintf("mean %.3g", est), fmt.Sprintf("loss %.3g", loss)
	c.detail = fmt.Sprintf("estimate/loss = %.2f over %d unique events (issue 15 asks for 1.3x; calibration is separate)", est/loss, run.report.Verdict.SteadyUniques)
	return c
}
