package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kdedup/kdedup/tools"
)

// grafanaVars are the values the check gives Grafana's variables, as Grafana computes them for a
// Prometheus data source whose scrape interval setting is 1s (the live Prometheus's):
//
//   - $__interval is 1s: Grafana takes max(the data source's scrape interval, range / max data
//     points); a one-minute range over a panel's ~1000 points gives 60ms, so the 1s floor. It is
//     also the query step.
//   - $__rate_interval is 4s: max($__interval + scrape interval, 4 x scrape interval), which
//     keeps at least four scrapes in every rate() window.
//   - $__range is the evaluated time range (end - start) in whole seconds.
//   - $job and $instance take the one value their label_values() query returns in this run,
//     regex-escaped the way Grafana escapes the value of a multi-value variable for =~.
type grafanaVars struct {
	values                      map[string]string // variable name -> value, already escaped
	interval, rateInterval, rng time.Duration
}

// newGrafanaVars returns the interval variables for a range of rng; template variables are added
// with set.
func newGrafanaVars(rng time.Duration) grafanaVars {
	return grafanaVars{
		values:       map[string]string{},
		interval:     scrapeInterval,
		rateInterval: max(scrapeInterval+scrapeInterval, 4*scrapeInterval),
		rng:          rng.Round(time.Second),
	}
}

// set gives the template variable name the value v.
func (g grafanaVars) set(name, v string) { g.values[name] = regexEscape(v) }

// apply substitutes every variable of expr. It fails if a $ is left: a variable the check does not
// know, which Grafana would send to Prometheus as it is.
func (g grafanaVars) apply(expr string) (string, error) {
	secs := func(d time.Duration) string { return fmt.Sprintf("%ds", int(d.Seconds())) }
	pairs := []string{
		"${__rate_interval}", secs(g.rateInterval), "$__rate_interval", secs(g.rateInterval),
		"${__interval}", secs(g.interval), "$__interval", secs(g.interval),
		"${__range}", secs(g.rng), "$__range", secs(g.rng),
	}
	names := make([]string, 0, len(g.values))
	for n := range g.values {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return len(b) - len(a) }) // $instance before $in...
	for _, n := range names {
		pairs = append(pairs, "${"+n+"}", g.values[n], "$"+n, g.values[n])
	}
	out := strings.NewReplacer(pairs...).Replace(expr)
	if i := strings.Index(out, "$"); i >= 0 {
		return out, fmt.Errorf("unknown variable at %q", out[i:])
	}
	return out, nil
}

// regexEscape escapes v as Grafana's Prometheus data source escapes the value of a multi-value
// variable: a backslash before every regex metacharacter, itself escaped for the PromQL string
// ("127.0.0.1" becomes 127\\.0\\.0\\.1 in the query text).
func regexEscape(v string) string {
	var b strings.Builder
	for _, r := range v {
		switch {
		case r == '\\':
			b.WriteString(`\\\\`)
		case strings.ContainsRune(`$^*{}[]'+?.()|`, r):
			b.WriteString(`\\`)
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// resolveVariables evaluates the dashboard's label_values() variables in order, each with the
// values of the ones before it, and sets them in g. Each must return exactly the value want gives
// for it (this run has one job and one worker).
func resolveVariables(ctx context.Context, api promAPI, vars []tools.Variable, want map[string]string, g grafanaVars, start, end time.Time) []check {
	var checks []check
	for _, v := range vars {
		c := check{name: "variable $" + v.Name, want: want[v.Name]}
		sel, err := g.apply(v.Selector)
		var got []string
		if err == nil {
			got, err = api.labelValues(ctx, v.Label, sel, start, end)
		}
		switch {
		case err != nil:
			c.got = err.Error()
		case len(got) != 1 || got[0] != c.want:
			c.got = fmt.Sprintf("label_values(%s, %s) = %q", sel, v.Label, got)
		default:
			c.got, c.ok = got[0], true
			g.set(v.Name, got[0])
		}
		checks = append(checks, c)
	}
	for name := range want {
		if _, ok := g.values[name]; !ok && !slices.ContainsFunc(vars, func(v tools.Variable) bool { return v.Name == name }) {
			checks = append(checks, check{name: "variable $" + name, want: want[name], got: "not defined by the dashboard"})
		}
	}
	return checks
}

// emptyAllowed lists the targets that are legitimately empty in this run (key: panel title and
// refId), with the reason. A listed target that returns data fails, so the list cannot go stale.
var emptyAllowed = map[string]string{
	"Records per second/D":    `marked duplicates: kdedup_duplicates_total has mode="mark" series only under DEDUP_MODE=mark; the run uses drop`,
	"Lag by stage/A":          `the routed scope: kdedup_route_* exist only under DEDUP_SCOPE=routed; the run uses the partition scope`,
	"Lag by stage/B":          `the routed scope: kdedup_route_* exist only under DEDUP_SCOPE=routed; the run uses the partition scope`,
	"Records routed/A":        `the routed scope: kdedup_route_* exist only under DEDUP_SCOPE=routed; the run uses the partition scope`,
	"Route produce latency/A": `the routed scope: kdedup_route_* exist only under DEDUP_SCOPE=routed; the run uses the partition scope`,
	"Route produce latency/B": `the routed scope: kdedup_route_* exist only under DEDUP_SCOPE=routed; the run uses the partition scope`,
}

// checkPanels evaluates every dashboard target over [start, end] with a range query (step
// $__interval), as Grafana does. A target passes when some series has a number (not NaN) at some
// step, or when it is on emptyAllowed and returns none.
func checkPanels(ctx context.Context, api promAPI, targets []tools.Target, g grafanaVars, start, end time.Time) []check {
	var checks []check
	for _, t := range targets {
		c := check{name: t.String(), want: "data"}
		reason, allowed := emptyAllowed[t.Panel+"/"+t.RefID]
		if allowed {
			c.want, c.detail = "empty (allow-listed)", reason
		}
		points, nseries, err := evalTarget(ctx, api, g, t.Expr, start, end)
		switch {
		case err != nil:
			c.got = err.Error()
		case points == 0:
			c.got, c.ok = "no data", allowed
		default:
			c.got = fmt.Sprintf("%d series, %d points", nseries, points)
			c.ok = !allowed
			if allowed {
				c.got += ": remove it from emptyAllowed in tools/cmd/livecheck/panels.go"
			}
		}
		checks = append(checks, c)
	}
	return checks
}

// evalTarget evaluates one target's expression and counts its series and finite points.
func evalTarget(ctx context.Context, api promAPI, g grafanaVars, expr string, start, end time.Time) (points, nseries int, err error) {
	q, err := g.apply(expr)
	if err != nil {
		return 0, 0, err
	}
	res, err := api.queryRange(ctx, q, start, end, g.interval)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", q, err)
	}
	for _, s := range res {
		if n := len(s.finite()); n > 0 {
			points += n
			nseries++
		}
	}
	return points, nseries, nil
}
