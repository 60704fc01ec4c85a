package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/kdedup/kdedup/tools"
)

// targetFPR is the loadtests' DEDUP_FALSE_POSITIVE_RATE (-fpr).
const targetFPR = 1e-6

// bound is a condition on the largest value a target shows in a phase, or, with an op that starts
// with "min ", on the smallest.
type bound struct {
	op string // ">=", ">", "<" or "<=", optionally after "min "
	v  float64
}

// onMin reports whether the bound is on the smallest value, and its comparison.
func (b bound) onMin() (bool, string) {
	op, ok := strings.CutPrefix(b.op, "min ")
	return ok, op
}

func (b bound) holds(x float64) bool {
	_, op := b.onMin()
	switch op {
	case ">=":
		return x >= b.v
	case ">":
		return x > b.v
	case "<=":
		return x <= b.v
	default:
		return x < b.v
	}
}

func (b bound) String() string {
	if m, op := b.onMin(); m {
		return fmt.Sprintf("min %s %g", op, b.v)
	}
	return fmt.Sprintf("max %s %g", b.op, b.v)
}

// event is a value a panel target must show because the run made it happen: the panels prove
// they show restarts, failures and an overfilled filter, not only that they return something.
type event struct {
	panel, refID string
	phase        string            // "healthy", "handover", "degraded" or "" for the whole run
	labels       map[string]string // only series with these labels; nil for all
	want         bound
	why          string
}

// none is the bound of a count that must stay 0; some of one that must rise. A value of
// increase() over a window that saw the counter go up once is 1 or more (Prometheus extrapolates
// it to the window's ends), never 0.5.
var (
	none = bound{op: "<", v: 0.5}
	some = bound{op: ">=", v: 0.5}
)

// events are the expectations of this run. The handover phase's worker is the only one scraped;
// its second worker is not, so the panels show what the first one did.
//
// A counter of a restarted worker is invisible to increase() when it is back at the value the
// old worker had reached before Prometheus scraped it lower: the degraded phase's worker starts
// cold, as the handover phase's rebuilt worker did, so its cold restores may not show, and the
// rebuild at the end of the handover phase is proven by the records it read (the rebuilds at the
// start of each phase read an empty output topic), not by its cold restores.
var events = []event{
	{"Re-armed identities (refresh)", "A", "healthy", nil, some, "the healthy phase runs with DEDUP_WINDOW_REFRESH=true: within duplicates re-arm their identity"},
	{"Re-armed identities (refresh)", "A", "degraded", nil, none, "the other phases run without refresh"},
	{"Duplicate rate by source", "A", "healthy", map[string]string{"source": "src-000"}, bound{op: ">", v: 1}, "the heaviest of the -sources keeps a series of its own"},
	{"Duplicates by source", "A", "", map[string]string{"source": "other"}, some, "12 sources with DEDUP_METRICS_SOURCE_LIMIT=8: the smallest count as other"},
	{"Restarts and rebalances", "A", "", nil, bound{op: ">=", v: 1}, "the handover and degraded phases' loadtest processes replaced the one before"},
	{"Restarts and rebalances", "B", "handover", nil, some, "a second worker joins the group and leaves it"},
	{"Assigned partitions", "A", "handover", nil, bound{op: "min <=", v: 2}, "the second worker takes half of the 4 partitions"},
	{"Assigned partitions", "A", "handover", nil, bound{op: ">=", v: 4}, "the worker has all 4 partitions before the second one joins and after it left"},
	{"Checkpoint failures and restores", "A", "healthy", nil, none, "every checkpoint succeeds"},
	{"Checkpoint failures and restores", "A", "handover", nil, none, "every checkpoint succeeds"},
	{"Checkpoint failures and restores", "A", "degraded", nil, bound{op: ">=", v: 1}, "the store is unwritable"},
	{"Checkpoint failures and restores", "B", "healthy", map[string]string{"outcome": "warm"}, some, "the restarted worker restores its checkpoints"},
	{"Checkpoint failures and restores", "B", "handover", map[string]string{"outcome": "retained"}, some, "the partitions the worker keeps come straight back after each rebalance"},
	{"Checkpoint failures and restores", "B", "handover", map[string]string{"outcome": "warm"}, some, "the partitions come back from the second worker's final snapshots"},
	{"Checkpoint failures and restores", "B", "handover", map[string]string{"outcome": "cold"}, some, "the phase's worker starts with an empty store (the healthy phase's last worker restored warm only)"},
	{"Checkpoint duration", "C", "healthy", nil, bound{op: ">", v: 0}, "the restarted worker restores its checkpoints"},
	{"Checkpoint age", "A", "healthy", nil, bound{op: "<", v: 9}, "a checkpoint every second (the live KdedupCheckpointStale threshold is 9s)"},
	{"Checkpoint age", "A", "handover", nil, bound{op: "<", v: 9}, "a checkpoint every second, also around the rebalances"},
	{"Checkpoint age", "A", "degraded", nil, bound{op: ">", v: 9}, "the store is unwritable"},
	{"Checkpoint age", "B", "degraded", nil, bound{op: ">", v: 9}, "no partition can save: each one's age grows from its last success"},
	// The SLIs of the shipped recording rules (kdedup.slo): 0 on the clean phases, above 0 when a
	// policy drops records or duplicates can pass. The events-lost SLI of a clean run is the
	// filter's expected false positives (the estimate times the unique rate), below twice the
	// target; its dead_letter cause keeps the healthy phase's dead letter for the 5m of its
	// rate, so the clean check is on the other causes.
	{"SLO: duplicates leaked", "A", "healthy", nil, bound{op: "<=", v: 0}, "every record has a key and nothing is forgotten, reset or re-warmed short"},
	{"SLO: duplicates leaked", "A", "handover", nil, bound{op: "<=", v: 0}, "the rebuild reads the whole window, the handovers re-warm everything"},
	{"SLO: duplicates leaked", "A", "degraded", nil, bound{op: ">", v: 0}, "the producer resets may have written their batches twice"},
	{"SLO: duplicates leaked", "D", "degraded", map[string]string{"cause": "producer_reset"}, bound{op: ">", v: 0}, "the leaks are the producer resets"},
	{"SLO: events lost", "D", "healthy", map[string]string{"cause": "false_positive"}, bound{op: "<", v: 2 * targetFPR}, "the filter within its capacity: false positives below twice the target"},
	{"SLO: events lost", "D", "handover", map[string]string{"cause": "false_positive"}, bound{op: "<", v: 2 * targetFPR}, "the filter within its capacity: false positives below twice the target"},
	{"SLO: events lost", "D", "handover", map[string]string{"cause": "input_skipped"}, bound{op: "<=", v: 0}, "no input record is skipped"},
	{"SLO: events lost", "D", "healthy", map[string]string{"cause": "dead_letter"}, bound{op: ">", v: 0}, "the oversized record goes to the dead-letter topic: a loss for the output"},
	{"SLO: events lost", "A", "degraded", nil, bound{op: ">", v: 2 * targetFPR}, "the overfilled filter at its memory cap drops unique events as false positives (DEDUP_OVERLOAD_POLICY=drop)"},
	{"Estimated false-positive rate vs target", "A", "healthy", nil, bound{op: "<", v: 2 * targetFPR}, "the filter is within capacity"},
	{"Estimated false-positive rate vs target", "A", "degraded", nil, bound{op: ">", v: 2 * targetFPR}, "the filter is overfilled"},
	{"Filter growth past capacity", "A", "healthy", nil, none, "the filters are within capacity"},
	{"Filter growth past capacity", "B", "degraded", nil, some, "the overfilled filters grow a stage"},
	{"Filters at the memory cap", "A", "healthy", nil, none, "the filters are within capacity"},
	{"Filters at the memory cap", "A", "degraded", nil, bound{op: ">=", v: 1}, "DEDUP_MEMORY_LIMIT=30KiB (22.5KiB for the filters) stops the overfilled filters after one stage each"},
	{"Producer resets and uncertain retries", "A", "degraded", map[string]string{"reason": "out_of_order_sequence"}, some, "the broker answers a produce request OUT_OF_ORDER_SEQUENCE_NUMBER"},
	{"Producer resets and uncertain retries", "A", "degraded", map[string]string{"reason": "unknown_producer_id"}, some, "the broker answers a produce request UNKNOWN_PRODUCER_ID"},
	{"Producer resets and uncertain retries", "A", "healthy", nil, none, "no produce fault"},
	{"Producer resets and uncertain retries", "A", "handover", nil, none, "no produce fault"},
	{"Producer resets and uncertain retries", "B", "degraded", nil, bound{op: ">=", v: 2}, "the broker answers 3 produce requests REQUEST_TIMED_OUT after appending them"},
	{"Producer resets and uncertain retries", "B", "healthy", nil, none, "no produce fault"},
	{"Partition handover time", "A", "handover", nil, bound{op: ">", v: 0}, "the worker releases its partitions at each rebalance"},
	{"Partition handover time", "B", "handover", nil, bound{op: ">", v: 0}, "the worker releases its partitions at each rebalance"},
	{"Partition handover time", "C", "handover", nil, bound{op: ">", v: 0}, "the worker prepares the partitions it gets"},
	{"Partition handover time", "D", "handover", nil, bound{op: ">", v: 0}, "the worker prepares the partitions it gets"},
	{"Checkpoint size", "B", "healthy", nil, bound{op: ">", v: 0}, "checkpoints every second write the current generations and a manifest"},
	{"Handover snapshot size", "A", "handover", nil, bound{op: ">", v: 0}, "checkpoints every second"},
	{"Handover snapshot size", "B", "handover", nil, bound{op: ">", v: 0}, "the worker saves the final snapshots of the partitions it releases"},
	{"Rebuilds from the output topic", "B", "", nil, none, "no rebuild fails"},
	{"Rebuild read rate", "A", "handover", nil, bound{op: ">", v: 0}, "the worker restarted with an empty store reads the output topic back"},
	{"Rebuild read rate", "B", "", nil, none, "CHECKPOINT_REBUILD_MAX_RECORDS (10M) is far above the window's records"},
	{"Rebuild time", "A", "handover", nil, bound{op: ">", v: 0}, "the worker restarted with an empty store rebuilds its filters"},
	{"Rebuild time", "B", "handover", nil, bound{op: ">", v: 0}, "the worker restarted with an empty store rebuilds its filters"},
	{refusedPanel, "A", refusedPhase, map[string]string{"partition": "0", "reason": "message_too_large"}, bound{op: ">=", v: 1},
		"the output refuses the oversized record of input partition 0 and no dead-letter topic is set"},
	{refusedPanel, "B", eventTimePhase, map[string]string{"reason": "message_too_large"}, some,
		"the healthy phase's oversized record goes to the dead-letter topic"},
	{refusedPanel, "B", refusedPhase, nil, none, "without a dead-letter topic nothing is dead-lettered"},
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
			lo, hi, err := targetRange(ctx, api, g, t.Expr, e.labels, from, to)
			v, agg := hi, "max"
			if m, _ := e.want.onMin(); m {
				v, agg = lo, "min"
			}
			switch {
			case err != nil:
				c.got = err.Error()
			case math.IsInf(hi, -1):
				c.got = "no data"
			default:
				c.got, c.ok = fmt.Sprintf("%s %.3g", agg, v), e.want.holds(v)
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

// targetRange returns the smallest and the largest finite value of the target's series that
// carry labels, or +Inf and -Inf when there is none.
func targetRange(ctx context.Context, api promAPI, g grafanaVars, expr string, labels map[string]string, from, to time.Time) (lo, hi float64, err error) {
	q, err := g.apply(expr)
	if err != nil {
		return 0, 0, err
	}
	res, err := api.queryRange(ctx, q, from, to, g.interval)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", q, err)
	}
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range res {
		if !hasLabels(s.Labels, labels) {
			continue
		}
		for _, p := range s.finite() {
			lo, hi = min(lo, p.V), max(hi, p.V)
		}
	}
	return lo, hi, nil
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

// estimateTolerance is how far the dashboard's estimated false-positive rate, averaged over
// time, may be from the measured loss rate, as a factor either way.
const estimateTolerance = 1.3

// estimateVsLoss checks, for the overfilled filters of run, the dashboard's estimated
// false-positive rate against the verifier's measured loss rate of the unique events sent once
// the window had filled. Each filter's estimate is averaged over the scrapes of that time (one
// scrape is the rate at that instant, which rises as the current generation fills; the scrapes
// fall at every stage of the generation because its interval is not a multiple of the scrape
// interval), and the filters' averages are weighted by the events each judged.
func estimateVsLoss(ctx context.Context, api promAPI, targets []tools.Target, g grafanaVars, run *phaseRun) check {
	const panel, ref = "Estimated false-positive rate vs target", "A"
	c := check{name: fmt.Sprintf("panel %q target %s vs measured loss", panel, ref), phase: run.name,
		want: "the loss rate", limit: fmt.Sprintf("x/%.1f..x%.1f", estimateTolerance, estimateTolerance)}
	i := slices.IndexFunc(targets, func(t tools.Target) bool { return t.Panel == panel && t.RefID == ref })
	if i < 0 {
		c.got = "not on the dashboard"
		return c
	}
	window := time.Duration(windowCount) * windowInterval
	q, err := g.apply(targets[i].Expr)
	var res []series
	if err == nil {
		res, err = api.queryRange(ctx, q, run.start.Add(window), run.sendEnd, g.interval)
	}
	if err != nil {
		c.got = err.Error()
		return c
	}
	v := run.report.Verdict
	est, scrapes := weightedMean(res, v.SteadyByFilter)
	if scrapes == 0 || v.SteadyLost == 0 {
		c.got = fmt.Sprintf("%d scrapes, %d of %d events lost: nothing to compare", scrapes, v.SteadyLost, v.SteadyUniques)
		return c
	}
	r := est / v.SteadyLossRate
	c.got, c.want = fmt.Sprintf("%.3g", est), fmt.Sprintf("%.3g", v.SteadyLossRate)
	c.ok = r <= estimateTolerance && r >= 1/estimateTolerance
	c.detail = fmt.Sprintf("estimate/loss %.2f: %d filter scrapes, %d of %d events lost", r, scrapes, v.SteadyLost, v.SteadyUniques)
	if f := run.report.Filter; f != nil && f.EstimateAverage > 0 {
		c.detail += fmt.Sprintf("; read at random instants by the loadtest %.3g", f.EstimateAverage)
	}
	return c
}

// weightedMean averages each filter's series over its points and weights the filters' averages
// by the events each judged. It returns the mean and the number of points.
func weightedMean(res []series, events map[string]filterLoss) (mean float64, points int) {
	var sum, weight float64
	for _, s := range res {
		pts := s.finite()
		w := float64(events[s.Labels["filter"]].Uniques)
		if len(pts) == 0 || w == 0 {
			continue
		}
		var m float64
		for _, p := range pts {
			m += p.V
		}
		sum += w * m / float64(len(pts))
		weight += w
		points += len(pts)
	}
	if weight == 0 {
		return 0, 0
	}
	return sum / weight, points
}
