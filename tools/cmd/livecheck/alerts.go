package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// trigger says what a required alert reacts to in the degraded phase.
type trigger int

const (
	overfill    trigger = iota // the filter pushed past capacity, from the phase's start
	brokenStore                // the checkpoint directory replaced by a file
	faults                     // produce faults, from the first -fault-at
)

// requiredAlert is an alert the degraded phase must fire, and what it reacts to.
type requiredAlert struct {
	alert string
	on    trigger
}

// mustFire are the alerts the degraded phase must fire. Every other alert of alerts.yml must stay
// silent in it too, except those in mayFire.
var mustFire = []requiredAlert{
	{"KdedupFalsePositiveRateHigh", overfill},
	{"KdedupFilterAtMemoryCap", overfill},
	{"KdedupFilterAtMemoryCapLosing", overfill},
	{"KdedupMemoryBudgetExhausted", overfill},
	{"KdedupCheckpointStale", brokenStore},
	{"KdedupCheckpointFailing", brokenStore},
	{"KdedupCheckpointPartitionStale", brokenStore},
	{"KdedupProducerReset", faults},
	{"KdedupProduceRetriesUncertain", faults},
}

// mayFire are alerts the degraded phase may fire without failing the check, with the reason.
var mayFire = map[string]string{
	"KdedupGenerationOverfilled":     "a generation's first stage overfills only when the cap left it no stage: in each filter one generation in three holds the grown stage, so the fill series of a generation position may drop below 60% within the shortened for:",
	"KdedupFilterGrowing":            "the overfilled filters grow a stage as soon as the phase starts; its for: of 30m shortened to 18s may or may not end within the phase",
	"KdedupProduceErrors":            "the produce faults are failed produce attempts; its [5m] rate stays above 0 for longer than its for: shortened to 3s",
	"KdedupAbsent":                   "between the refused phase's worker and the degraded phase's, no worker is scraped: kdedup_build_info is absent, and its for: shortened to 6s may end before the new worker's first scrape",
	"KdedupRestarting":               "each phase's loadtest is a new process: the degraded phase's is the third restart within the rule's hour (changes(process_start_time_seconds[1h]) > 2)",
	"KdedupPartitionBlocked":         "the refused phase's block ends with its worker, which exits as the degraded phase's loadtest starts: the alert may still be firing at the phase's first evaluations",
	"KdedupEventsLostBudgetBurn":     "the overfilled filter's false positives are lost events: the events-lost SLI rises far above its budget, but its [1h] window also holds the clean phases, so whether it crosses 14.4 times the budget within the phase depends on how fast the rate rises",
	"KdedupEventsLostBudgetBurnSlow": "the same false positives over the [3d] and [6h] windows, which hold the whole run, with a for: shortened to 9s",
	"KdedupSourceDuplicateRateJump":  "the overfilled filter's false positives raise the duplicate ratio of every source; with 12 sources of very different sizes one can cross the thresholds while the whole input's ratio does not",
}

// firstFiring returns, for every alert with a firing ALERTS series in [from, to], the first
// evaluation at which it was firing.
func firstFiring(ctx context.Context, api promAPI, state string, from, to time.Time) (map[string]time.Time, error) {
	res, err := api.queryRange(ctx, fmt.Sprintf(`ALERTS{alertstate=%q}`, state), from, to, scrapeInterval)
	if err != nil {
		return nil, err
	}
	first := map[string]time.Time{}
	for _, s := range res {
		name := s.Labels["alertname"]
		for _, p := range s.Samples {
			if t, ok := first[name]; !ok || p.T.Before(t) {
				first[name] = p.T
			}
		}
	}
	return first, nil
}

// checkAlerts checks the ALERTS series: nothing fires while a silent phase runs, every mustFire
// alert fires while the degraded phase runs, and nothing else does. alerts are the alert names of
// the rule file.
func checkAlerts(ctx context.Context, api promAPI, alerts []string, runs []*phaseRun) []check {
	var checks []check
	for _, a := range mustFire {
		if !slices.Contains(alerts, a.alert) {
			checks = append(checks, check{name: "alert " + a.alert, phase: "degraded", got: "not in alerts.yml", want: "firing"})
		}
	}
	for _, run := range runs {
		switch {
		case run.silent:
			checks = append(checks, checkSilent(ctx, api, len(alerts), run))
			if run.name == "healthy" {
				checks = append(checks, checkDeadLetterAlert(ctx, api, run))
			}
		case run.name == "degraded":
			checks = append(checks, checkDegradedAlerts(ctx, api, run)...)
		case run.name == refusedPhase:
			checks = append(checks, checkRefusedAlerts(ctx, api, run)...)
		}
	}
	return checks
}

// checkSilent checks that no alert fired while run ran, from silentFrom on, but the lingering
// ones (checked on their own).
func checkSilent(ctx context.Context, api promAPI, nAlerts int, run *phaseRun) check {
	c := check{name: fmt.Sprintf("alerts silent (all %d of alerts.yml but %s)", nAlerts, strings.Join(sortedKeys(lingering), ", ")),
		phase: run.name, want: "none firing"}
	from, err := silentFrom(ctx, api, run)
	var fired, pending map[string]time.Time
	if err == nil {
		fired, err = firstFiring(ctx, api, "firing", from, run.ended)
	}
	if err == nil {
		pending, err = firstFiring(ctx, api, "pending", from, run.ended)
	}
	for name := range lingering {
		delete(fired, name)
		delete(pending, name)
	}
	switch {
	case err != nil:
		c.got = err.Error()
	case len(fired) > 0:
		c.got = "firing: " + strings.Join(sortedKeys(fired), ", ")
	default:
		c.got, c.ok = "none firing", true
		c.detail = fmt.Sprintf("%s..%s", run.at(from), run.at(run.ended))
		if len(pending) > 0 {
			c.detail += "; pending for a while: " + strings.Join(sortedKeys(pending), ", ")
		}
	}
	return c
}

// silentFrom returns where the healthy phase's silence is checked from: two rule evaluations
// after the worker's first successful scrape. Before it, up is 0 (or absent, as Prometheus applies
// new targets only every 5s) because the loadtest's worker does not exist yet: KdedupWorkerDown
// and KdedupAbsent may be pending or even firing, about the check's own start-up. An alert that
// fired then has resolved (and its ALERTS series ended) by this time.
func silentFrom(ctx context.Context, api promAPI, run *phaseRun) (time.Time, error) {
	res, err := api.queryRange(ctx, `up{job="kdedup"} == 1`, run.began, run.ended, scrapeInterval)
	if err != nil {
		return time.Time{}, fmt.Errorf("up: %w", err)
	}
	if len(res) == 0 || len(res[0].Samples) == 0 {
		return time.Time{}, fmt.Errorf("the worker was never scraped successfully between %s and %s", run.at(run.began), run.at(run.ended))
	}
	return res[0].Samples[0].T.Add(2 * scrapeInterval), nil
}

// checkDegradedAlerts checks that the mustFire alerts fired during the degraded phase, and
// reports how long after their trigger, and that no other alert fired.
func checkDegradedAlerts(ctx context.Context, api promAPI, run *phaseRun) []check {
	fired, err := firstFiring(ctx, api, "firing", run.began, run.ended.Add(2*scrapeInterval))
	if err != nil {
		return []check{{name: "alerts", phase: run.name, got: "ALERTS: " + err.Error()}}
	}
	var checks []check
	for _, a := range mustFire {
		c := check{name: "alert " + a.alert, phase: run.name, want: "firing"}
		since, what := run.start, "after the start (overfilled filter)"
		switch a.on {
		case brokenStore:
			since, what = run.storeBroken, "after the store was made unwritable"
		case faults:
			since, _ = run.hook("fault")
			what = "after the first produce fault"
		}
		if t, ok := fired[a.alert]; ok {
			c.got, c.ok = "firing", true
			c.detail = fmt.Sprintf("%.1fs %s", t.Sub(since).Seconds(), what)
		} else {
			c.got = "never fired"
			c.detail = fmt.Sprintf("phase ended %.1fs %s", run.ended.Sub(since).Seconds(), what)
		}
		checks = append(checks, c)
	}
	c := check{name: "no other alert fires", phase: run.name, want: "only the alerts above", got: "none", ok: true}
	var other []string
	for name := range fired {
		if slices.ContainsFunc(mustFire, func(m requiredAlert) bool { return m.alert == name }) {
			continue
		}
		if reason, ok := mayFire[name]; ok {
			c.detail += name + " (allowed: " + reason + ") "
			continue
		}
		if _, ok := lingering[name]; ok {
			continue
		}
		other = append(other, name)
	}
	if len(other) > 0 {
		slices.Sort(other)
		c.got, c.ok = "firing: "+strings.Join(other, ", "), false
	}
	return append(checks, c)
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
