package tools

import (
	"bytes"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// prometheusGenerated are series that Prometheus itself creates for every
// target or rule; they never appear in the binary's /metrics.
var prometheusGenerated = map[string]bool{
	"up": true, "scrape_duration_seconds": true, "scrape_samples_scraped": true,
	"scrape_samples_post_metric_relabeling": true, "scrape_series_added": true,
	"ALERTS": true, "ALERTS_FOR_STATE": true,
}

// grafanaMacro matches Grafana's interval macros, which are not PromQL.
var grafanaMacro = regexp.MustCompile(`\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}`)

// substituteGrafana turns a dashboard expression into plain PromQL. Template
// variables inside label matcher strings ("$job") are valid PromQL as they are.
func substituteGrafana(expr string) string {
	return grafanaMacro.ReplaceAllString(expr, "5m")
}

func promqlParser() parser.Parser { return parser.NewParser(parser.Options{}) }

// metricNames returns every metric name an expression selects.
func metricNames(expr parser.Expr) []string {
	var names []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
		}
		if name != "" {
			names = append(names, name)
		}
		return nil
	})
	return names
}

func loadRules(t *testing.T, path string) *rulefmt.RuleGroups {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	rgs, errs := rulefmt.ParseFile(path, false, model.LegacyValidation, promqlParser(), logger)
	for _, err := range errs {
		t.Errorf("%s: %v", path, err)
	}
	if rgs == nil {
		t.Fatalf("%s: no rule groups", path)
	}
	return rgs
}

// knownMetricNames is what PromQL may reference: the binary's series
// (deploy/metric-names.txt), the recording rules and Prometheus' own series.
func knownMetricNames(t *testing.T, rgs *rulefmt.RuleGroups) map[string]bool {
	t.Helper()
	known := readNameList(t, deployPath("metric-names.txt"))
	for n := range prometheusGenerated {
		known[n] = true
	}
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				known[r.Record] = true
			}
		}
	}
	return known
}

type namedExpr struct{ where, expr string }

func allExpressions(t *testing.T) ([]namedExpr, *rulefmt.RuleGroups) {
	t.Helper()
	rgs := loadRules(t, deployPath("prometheus", "alerts.yml"))
	var out []namedExpr
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			out = append(out, namedExpr{"alerts.yml " + name, r.Expr})
		}
	}
	for _, q := range dashboardQueries(t, loadDashboard(t)) {
		out = append(out, namedExpr{"kdedup.json " + q.where, substituteGrafana(q.expr)})
	}
	return out, rgs
}

func TestPromQLParsesAndUsesExposedMetrics(t *testing.T) {
	exprs, rgs := allExpressions(t)
	known := knownMetricNames(t, rgs)
	p := promqlParser()
	used := map[string]bool{}
	for _, e := range exprs {
		expr, err := p.ParseExpr(e.expr)
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", e.where, e.expr, err)
			continue
		}
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: %q selects no metric", e.where, e.expr)
		}
		for _, n := range names {
			used[n] = true
			if !known[n] {
				t.Errorf("%s: metric %s is not exposed by kdedup (deploy/metric-names.txt) nor a recording rule", e.where, n)
			}
		}
	}
	if len(exprs) < 30 {
		t.Errorf("only %d expressions checked", len(exprs))
	}
	// Every kdedup metric should be visible somewhere: on the dashboard or in an alert.
	var unused []string
	for n := range readNameList(t, deployPath("metric-names.txt")) {
		if !strings.HasPrefix(n, "kdedup_") || used[n] {
			continue
		}
		if base, ok := strings.CutSuffix(n, "_sum"); ok && (used[base+"_bucket"] || used[base+"_count"]) {
			continue
		}
		if base, ok := strings.CutSuffix(n, "_count"); ok && (used[base+"_bucket"] || used[base+"_sum"]) {
			continue
		}
		if base, ok := strings.CutSuffix(n, "_bucket"); ok && (used[base+"_sum"] || used[base+"_count"]) {
			continue
		}
		unused = append(unused, n)
	}
	slices.Sort(unused)
	for _, n := range unused {
		if n == "kdedup_build_info" { // used by the template variables' label_values()
			continue
		}
		t.Errorf("metric %s is neither on the dashboard nor in an alert", n)
	}
}

func TestPromQLCheckCatchesMistakes(t *testing.T) {
	known := map[string]bool{"kdedup_records_consumed_total": true}
	tests := []struct {
		name, expr string
		parses     bool
		unknown    []string
	}{
		{"good", `rate(kdedup_records_consumed_total[5m])`, true, nil},
		{"typo in name", `rate(kdedup_record_consumed_total[5m])`, true, []string{"kdedup_record_consumed_total"}},
		{"__name__ matcher", `{__name__="kdedup_nope"}`, true, []string{"kdedup_nope"}},
		{"syntax error", `sum(rate(kdedup_records_consumed_total[5m])`, false, nil},
		{"grafana macro substituted", substituteGrafana(`rate(kdedup_records_consumed_total{job=~"$job"}[$__rate_interval])`), true, nil},
	}
	p := promqlParser()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expr, err := p.ParseExpr(tt.expr)
			if (err == nil) != tt.parses {
				t.Fatalf("parse error = %v, want parses=%v", err, tt.parses)
			}
			if err != nil {
				return
			}
			var unknown []string
			for _, n := range metricNames(expr) {
				if !known[n] {
					unknown = append(unknown, n)
				}
			}
			if !slices.Equal(unknown, tt.unknown) {
				t.Errorf("unknown = %v, want %v", unknown, tt.unknown)
			}
		})
	}
}

func TestAlertRulesHaveAnnotations(t *testing.T) {
	rgs := loadRules(t, deployPath("prometheus", "alerts.yml"))
	alerts := 0
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			for _, a := range []string{"summary", "description", "runbook", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s has no %s annotation", r.Alert, a)
				}
			}
			// An operator reading the alert must learn when it really fires.
			if d := r.Annotations["description"]; !strings.Contains(d, "Fires") && !strings.Contains(d, "fires") {
				t.Errorf("alert %s: the description does not say when it fires", r.Alert)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, s)
			}
		}
	}
	if alerts == 0 {
		t.Fatal("no alerts found")
	}
}

// TestAlertUnitTestsCoverEveryAlert checks that alerts_test.yml has a firing
// and a non-firing case for every alert (promtool runs them in CI).
func TestAlertUnitTestsCoverEveryAlert(t *testing.T) {
	rgs := loadRules(t, deployPath("prometheus", "alerts.yml"))
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	unmarshalYAML(t, readFile(t, deployPath("prometheus", "alerts_test.yml")), &tests)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !fires[r.Alert] {
				t.Errorf("alerts_test.yml has no firing case for %s", r.Alert)
			}
			if !quiet[r.Alert] {
				t.Errorf("alerts_test.yml has no non-firing case for %s", r.Alert)
			}
		}
	}
}

// TestChartRulesMatchPrometheusRules keeps the chart's copy of the rules
// (the chart cannot read files outside its directory) identical to the source.
func TestChartRulesMatchPrometheusRules(t *testing.T) {
	src := readFile(t, deployPath("prometheus", "alerts.yml"))
	cp := readFile(t, deployPath("helm", "kdedup", "files", "alerts.yml"))
	if !bytes.Equal(src, cp) {
		t.Error("deploy/helm/kdedup/files/alerts.yml differs from deploy/prometheus/alerts.yml; run: cp deploy/prometheus/alerts.yml deploy/helm/kdedup/files/alerts.yml")
	}
}
