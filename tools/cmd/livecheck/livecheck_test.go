package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/tools"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

const repo = "../../.."

func promParser() parser.Parser { return parser.NewParser(parser.Options{}) }

func readRepo(t *testing.T, parts ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{repo}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTestRulesOfAlertsYML derives the live rule file from the real alerts.yml and checks that
// Prometheus accepts it, with every for: shortened and the stale threshold scaled.
func TestTestRulesOfAlertsYML(t *testing.T) {
	out, alerts, changes, err := testRules(readRepo(t, "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	rgs, errs := rulefmt.Parse(out, false, model.LegacyValidation, promParser(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		t.Fatalf("generated rules do not parse: %v", errs)
	}
	for _, g := range rgs.Groups {
		if g.Interval != 0 {
			t.Errorf("group %s keeps interval %v; want the global 1s", g.Name, g.Interval)
		}
		for _, r := range g.Rules {
			if time.Duration(r.For) > 18*time.Second {
				t.Errorf("%s: for %v was not shortened", r.Alert, r.For)
			}
			if r.Alert == "KdedupCheckpointStale" && !strings.Contains(r.Expr, "> 9\n") {
				t.Errorf("KdedupCheckpointStale: threshold not scaled: %q", r.Expr)
			}
		}
	}
	for _, a := range mustFire {
		if !slices.Contains(alerts, a.alert) {
			t.Errorf("mustFire names %s, which alerts.yml does not define", a.alert)
		}
	}
	if len(changes) < len(alerts)/2 {
		t.Errorf("only %d changes for %d alerts", len(changes), len(alerts))
	}
}

func TestTestRules(t *testing.T) {
	tests := []struct {
		name, src, want, wantErr string
	}{
		{"for shortened", "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    for: 15m\n", "for: 9s", ""},
		{"at least one scrape", "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    for: 30s\n", "for: 1s", ""},
		{"group interval dropped", "groups:\n- name: g\n  interval: 1m\n  rules:\n  - record: r\n    expr: up\n", "name: g\n  rules", ""},
		{"unknown field", "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up\n    keep_firing_for: 5m\n", "", "keep_firing_for"},
		{"threshold edit missing", "groups:\n- name: g\n  rules:\n  - alert: KdedupCheckpointStale\n    expr: up > 600\n", "", "thresholdEdits"},
		{"alert of threshold edit missing", "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up\n", "", "no alert KdedupCheckpointStale"},
	}
	stale := "  - alert: KdedupCheckpointStale\n    expr: time() - x > 900\n" +
		"  - alert: KdedupCheckpointPartitionStale\n    expr: time() - max(max_over_time(x[10m])) > 900\n"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.src
			if !strings.Contains(src, "KdedupCheckpointStale") && !strings.HasPrefix(tt.name, "alert of") {
				src += stale
			}
			out, _, _, err := testRules([]byte(src))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("output lacks %q:\n%s", tt.want, out)
			}
		})
	}
}

func TestGrafanaVarsApply(t *testing.T) {
	g := newGrafanaVars(52400 * time.Millisecond)
	g.set("job", "kdedup")
	g.set("instance", "127.0.0.1:9100")
	tests := []struct{ in, want, wantErr string }{
		{`rate(x{job=~"$job"}[$__rate_interval])`, `rate(x{job=~"kdedup"}[4s])`, ""},
		{`increase(x[${__interval}])`, `increase(x[1s])`, ""},
		{`rate(x[$__range])`, `rate(x[52s])`, ""},
		{`x{instance=~"$instance"}`, `x{instance=~"127\\.0\\.0\\.1:9100"}`, ""},
		{`x{instance=~"${instance}"}`, `x{instance=~"127\\.0\\.0\\.1:9100"}`, ""},
		{`x{pod=~"$pod"}`, "", "unknown variable"},
	}
	for _, tt := range tests {
		got, err := g.apply(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("apply(%q) err = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("apply(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// TestRegexEscape checks that an escaped value, as a PromQL regex matcher, matches the value and
// nothing that only resembles it.
func TestRegexEscape(t *testing.T) {
	for _, v := range []string{"127.0.0.1:9100", "kdedup", `a\b(c)|d+e*$`, "w-0.kdedup.svc:8080"} {
		ms, err := promParser().ParseMetricSelector(`up{instance=~"` + regexEscape(v) + `"}`)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		i := slices.IndexFunc(ms, func(m *labels.Matcher) bool { return m.Name == "instance" })
		if i < 0 {
			t.Fatalf("%q: no instance matcher in %v", v, ms)
		}
		m := ms[i]
		if !m.Matches(v) {
			t.Errorf("escaped %q does not match itself (matcher %v)", v, m)
		}
		if other := strings.ReplaceAll(v, ".", "x"); other != v && m.Matches(other) {
			t.Errorf("escaped %q also matches %q", v, other)
		}
	}
}

// TestDashboardTargetsAreKnown checks, without a live run, that every dashboard expression
// parses once the variables are substituted, and that every target the live check names exists.
func TestDashboardTargetsAreKnown(t *testing.T) {
	d, err := tools.DecodeDashboard(readRepo(t, "deploy", "grafana", "kdedup.json"))
	if err != nil {
		t.Fatal(err)
	}
	targets, err := tools.Targets(d)
	if err != nil {
		t.Fatal(err)
	}
	g := newGrafanaVars(time.Minute)
	g.set("job", "kdedup")
	g.set("instance", "127.0.0.1:1")
	have := map[string]bool{}
	for _, tg := range targets {
		have[tg.Panel+"/"+tg.RefID] = true
		q, err := g.apply(tg.Expr)
		if err == nil {
			_, err = promParser().ParseExpr(q)
		}
		if err != nil {
			t.Errorf("%s: %v", tg, err)
		}
	}
	var named []string
	for k := range emptyAllowed {
		named = append(named, k)
	}
	for _, c := range comparisons {
		named = append(named, c.panel+"/"+c.refID)
	}
	for _, e := range events {
		named = append(named, e.panel+"/"+e.refID)
	}
	named = append(named, latePanel+"/A", lagPanel+"/A", lagPanel+"/B")
	for _, k := range named {
		if !have[k] {
			t.Errorf("the live check names target %s, which the dashboard does not have", k)
		}
	}
}

func TestVerifierCount(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := &verifierReport{Started: t0, BucketSeconds: 0.5, Series: []point{
		{T: 0, Sent: 100, Dropped: 10}, {T: 0.5, Sent: 200, Dropped: 20}, {T: 1, Sent: 300, Dropped: 30},
	}}
	sent := func(p point) int { return p.Sent }
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	tests := []struct {
		from, to, want float64
	}{
		{0, 1.5, 600},
		{0.5, 1, 200},
		{0.25, 0.75, 50 + 100},
		{-4, 0.25, 50},
		{1.5, 5, 0},
	}
	for _, tt := range tests {
		if got := r.count(at(tt.from), at(tt.to), sent); got != tt.want {
			t.Errorf("count(%g, %g) = %g, want %g", tt.from, tt.to, got, tt.want)
		}
	}
	if got, ok := ratioOf(func(p point) int { return p.Dropped })(r, at(0), at(1.5)); !ok || got != 0.1 {
		t.Errorf("ratio = %g, %v; want 0.1", got, ok)
	}
	if _, ok := ratioOf(sent)(r, at(2), at(3)); ok {
		t.Error("ratio of an empty window is defined")
	}
}

func TestPanelTotal(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	res := []series{
		{Labels: map[string]string{"filter": "0"}, Samples: []sample{{at(0), 1.5}, {at(1), 2.5}, {at(2), math.NaN()}}},
		{Labels: map[string]string{"filter": "1"}, Samples: []sample{{at(0), 4}}},
	}
	if total, n := panelTotal(res, time.Second); total != 8 || n != 3 {
		t.Errorf("panelTotal at 1s steps = %g over %d values, want 8 over 3", total, n)
	}
	if total, _ := panelTotal(res, 2*time.Second); total != 16 {
		t.Errorf("panelTotal at 2s steps = %g, want 16", total)
	}
}

func TestLossFailure(t *testing.T) {
	// The verifier's wording (loadtest/report.go, Judge).
	if !lossFailure.MatchString("767 unique events lost, more than the bound 1 (expected 0.0197 at false-positive rate 1e-06, 99.9% quantile)") {
		t.Error("the verifier's loss failure is not recognised")
	}
	for _, f := range []string{"12 duplicates leaked (0 of them repeated deliveries)", "incomplete: interrupted", "the worker exited with status 1"} {
		if lossFailure.MatchString(f) {
			t.Errorf("%q taken for a loss failure", f)
		}
	}
}

func TestCompareWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	g := newGrafanaVars(time.Minute)
	run := &phaseRun{start: t0, sendEnd: t0.Add(20 * time.Second)}
	if from, to := compareWindow(run, g); from != t0.Add(5*time.Second) || to != run.sendEnd {
		t.Errorf("without restart: %v..%v", from.Sub(t0), to.Sub(t0))
	}
	run.restart = t0.Add(4 * time.Second)
	if from, _ := compareWindow(run, g); from != t0.Add(10*time.Second) {
		t.Errorf("with a restart at 4s: from %v, want 10s", from.Sub(t0))
	}
}

func TestBound(t *testing.T) {
	tests := []struct {
		b    bound
		x    float64
		want bool
		str  string
	}{
		{some, 1, true, "max >= 0.5"},
		{some, 0, false, "max >= 0.5"},
		{none, 0, true, "max < 0.5"},
		{bound{op: "min <=", v: 2}, 2, true, "min <= 2"},
		{bound{op: "min <=", v: 2}, 3, false, "min <= 2"},
		{bound{op: ">", v: 0}, 0, false, "max > 0"},
	}
	for _, tt := range tests {
		if got := tt.b.holds(tt.x); got != tt.want || tt.b.String() != tt.str {
			t.Errorf("%s holds(%g) = %v, want %v (%s)", tt.b, tt.x, got, tt.want, tt.str)
		}
	}
}

// TestWeightedMean checks that each filter's series is averaged over its points and the filters
// are weighted by the events they judged; a filter without events does not count.
func TestWeightedMean(t *testing.T) {
	pts := func(vs ...float64) []sample {
		var out []sample
		for i, v := range vs {
			out = append(out, sample{T: time.Unix(int64(i), 0), V: v})
		}
		return out
	}
	res := []series{
		{Labels: map[string]string{"filter": "0"}, Samples: pts(1, 3)},
		{Labels: map[string]string{"filter": "1"}, Samples: pts(10)},
		{Labels: map[string]string{"filter": "2"}, Samples: pts(100)},
	}
	events := map[string]filterLoss{"0": {Uniques: 300}, "1": {Uniques: 100}}
	mean, points := weightedMean(res, events)
	if want := (300*2.0 + 100*10.0) / 400; mean != want || points != 3 {
		t.Errorf("weightedMean = %g over %d points, want %g over 3", mean, points, want)
	}
	if mean, points := weightedMean(res, nil); mean != 0 || points != 0 {
		t.Errorf("no events: %g over %d points", mean, points)
	}
}

func TestPhaseRunHook(t *testing.T) {
	t0 := time.Unix(1000, 0)
	run := &phaseRun{start: t0, report: &verifierReport{Hooks: []hookRun{{"join", 2}, {"fault REQUEST_TIMED_OUT", 5.5}, {"fault UNKNOWN_PRODUCER_ID", 7}}}}
	if at, ok := run.hook("fault"); !ok || !at.Equal(t0.Add(5500*time.Millisecond)) {
		t.Errorf("hook(fault) = %v, %v", at, ok)
	}
	if _, ok := run.hook("leave"); ok {
		t.Error("hook(leave) found")
	}
}

// TestPanelsPage draws the page from a stub of Prometheus's query_range API: one chart per
// listed panel, a line per series with its legend filled in, the phases shaded, and a note on a
// panel without data.
func TestPanelsPage(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("query")
		if strings.Contains(q, "kdedup_rebuild_records_total") { // the last panel: no data
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[]}}`)
			return
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"filter":"3","reason":"x"},"values":[[%d,"0.5"],[%d,"1e-7"],[%d,"2"]]}]}}`,
			t0.Unix()+1, t0.Unix()+2, t0.Unix()+40)
	}))
	defer srv.Close()
	var targets []tools.Target
	for _, p := range pagePanels {
		targets = append(targets, tools.Target{PanelID: p.id, Panel: fmt.Sprintf("panel %d", p.id), RefID: "A",
			Legend: "f {{filter}} {{ reason }}", Expr: fmt.Sprintf("metric_%d", p.id)})
	}
	targets[len(targets)-1].Expr = "rate(kdedup_rebuild_records_total[$__rate_interval])"
	runs := []*phaseRun{{phase: phase{name: "healthy"}, began: t0, ended: t0.Add(20 * time.Second)},
		{phase: phase{name: "degraded"}, began: t0.Add(21 * time.Second), ended: t0.Add(45 * time.Second)}}
	var buf strings.Builder
	g := newGrafanaVars(45 * time.Second)
	if err := writePanelsPage(context.Background(), &buf, newPromAPI(srv.URL), targets, g, runs, t0, t0.Add(45*time.Second)); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, want := range []string{"panel 7", "panel 11", "f 3 x", "healthy", "degraded", "no data in this run", "<path d=\"M"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(page, "<svg "); n != len(pagePanels) {
		t.Errorf("%d charts, want %d", n, len(pagePanels))
	}
	if err := writePanelsPage(context.Background(), &buf, newPromAPI(srv.URL), targets[:1], g, runs, t0, t0.Add(time.Minute)); err == nil {
		t.Error("a listed panel the dashboard lacks is not an error")
	}
}

// TestPagePanelsExist checks that the panels the page draws are on the dashboard.
func TestPagePanelsExist(t *testing.T) {
	d, err := tools.DecodeDashboard(readRepo(t, "deploy", "grafana", "kdedup.json"))
	if err != nil {
		t.Fatal(err)
	}
	targets, err := tools.Targets(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pagePanels {
		if !slices.ContainsFunc(targets, func(tg tools.Target) bool { return tg.PanelID == p.id }) {
			t.Errorf("the page draws panel %d, which the dashboard lacks", p.id)
		}
	}
}
