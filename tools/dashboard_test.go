package tools

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

func TestCogError(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		wantNil bool
	}{
		{"nil", nil, true},
		{"empty BuildErrors (SDK success)", cog.BuildErrors(nil), true},
		{"empty non-nil BuildErrors", cog.BuildErrors{}, true},
		{"one BuildError", cog.BuildErrors{{Path: "panels[0]", Message: "bad"}}, false},
		{"other error", errors.New("boom"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cogError(tt.err); (got == nil) != tt.wantNil {
				t.Errorf("cogError(%v) = %v, want nil=%v", tt.err, got, tt.wantNil)
			}
		})
	}
}

func loadDashboard(t *testing.T) dashboard.Dashboard {
	t.Helper()
	d, err := DecodeDashboard(readFile(t, deployPath("grafana", "kdedup.json")))
	if err != nil {
		t.Fatalf("deploy/grafana/kdedup.json: %v", err)
	}
	return d
}

// dashboardQuery is one PromQL expression of the dashboard and where it is.
type dashboardQuery struct {
	where, expr string
}

// dashboardQueries returns the PromQL of every panel target, and the metric
// selectors of label_values() template variable queries.
func dashboardQueries(t *testing.T, d dashboard.Dashboard) []dashboardQuery {
	t.Helper()
	var out []dashboardQuery
	targets, err := Targets(d)
	if err != nil {
		t.Error(err)
	}
	for _, tg := range targets {
		out = append(out, dashboardQuery{tg.String(), tg.Expr})
	}
	vars, err := Variables(d)
	if err != nil {
		t.Error(err)
	}
	for _, v := range vars {
		out = append(out, dashboardQuery{"variable " + v.Name, v.Selector})
	}
	return out
}

func TestDashboardDecodesStrictly(t *testing.T) {
	d := loadDashboard(t)
	if deref(d.Uid) != "kdedup" {
		t.Errorf("uid = %q, want kdedup (links and provisioning rely on it)", deref(d.Uid))
	}
	if len(Panels(d)) < 10 {
		t.Errorf("only %d panels decoded", len(Panels(d)))
	}
}

func TestDashboardStrictDecodeRejectsUnknownFields(t *testing.T) {
	raw := readFile(t, deployPath("grafana", "kdedup.json"))
	var generic map[string]any
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func(m map[string]any)
	}{
		{"top-level typo", func(m map[string]any) { m["pannels"] = []any{} }},
		{"panel typo", func(m map[string]any) {
			m["panels"].([]any)[1].(map[string]any)["titel"] = "x"
		}},
		{"target typo", func(m map[string]any) {
			p := m["panels"].([]any)[1].(map[string]any)
			p["targets"].([]any)[0].(map[string]any)["exprr"] = "up"
		}},
		{"timeseries option typo", func(m map[string]any) {
			for _, p := range m["panels"].([]any) {
				if p.(map[string]any)["type"] == "timeseries" {
					p.(map[string]any)["options"].(map[string]any)["legendd"] = map[string]any{}
					return
				}
			}
		}},
		{"missing templating", func(m map[string]any) { delete(m, "templating") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			tt.mutate(m)
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := DecodeDashboard(b); err == nil {
				t.Error("mutated dashboard decoded without error")
			}
		})
	}
}

func TestDashboardTemplateVariables(t *testing.T) {
	d := loadDashboard(t)
	var names []string
	for _, v := range d.Templating.List {
		names = append(names, v.Name)
	}
	if want := []string{"datasource", "job", "instance"}; !slices.Equal(names, want) {
		t.Errorf("template variables = %v, want %v", names, want)
	}
	for _, p := range Panels(d) {
		if p.Datasource == nil || deref(p.Datasource.Uid) != "${datasource}" || deref(p.Datasource.Type) != "prometheus" {
			t.Errorf("panel %q does not use the ${datasource} variable", deref(p.Title))
		}
		for _, tg := range p.Targets {
			q, ok := tg.(*prometheus.Dataquery)
			if !ok {
				continue
			}
			if strings.HasPrefix(q.Expr, "kdedup:") {
				continue // recording rules aggregate by job only
			}
			if !strings.Contains(q.Expr, `job=~"$job"`) || !strings.Contains(q.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q: %q does not filter on $job and $instance", deref(p.Title), q.Expr)
			}
		}
	}
}

func TestDashboardLayout(t *testing.T) {
	d := loadDashboard(t)
	ids := map[uint32]bool{}
	for _, p := range d.Panels {
		var id uint32
		var gp *dashboard.GridPos
		switch {
		case p.Panel != nil:
			id, gp = deref(p.Panel.Id), p.Panel.GridPos
		case p.RowPanel != nil:
			id, gp = p.RowPanel.Id, p.RowPanel.GridPos
		}
		if ids[id] {
			t.Errorf("panel id %d used twice", id)
		}
		ids[id] = true
		if gp == nil || gp.X+gp.W > 24 || gp.W == 0 || gp.H == 0 {
			t.Errorf("panel %d: bad gridPos %+v", id, gp)
		}
	}
}

func TestDashboardHasRequiredPanels(t *testing.T) {
	d := loadDashboard(t)
	var all strings.Builder
	for _, q := range dashboardQueries(t, d) {
		all.WriteString(q.expr + "\n")
	}
	for _, want := range []string{
		"rate(kdedup_duplicates_total", "sum by (partition) (rate(kdedup_duplicates_total",
		"kdedup_records_produced_total", "kdedup_filter_false_positive_rate_estimated",
		"kdedup_filter_false_positive_rate_target", "kdedup_filter_generation_fill_ratio",
		"kdedup_filter_window_seconds", "kdedup_consumer_lag_records",
		"histogram_quantile(0.99, sum by (le) (rate(kdedup_end_to_end_latency_seconds_bucket",
		"histogram_quantile(0.99, sum by (le) (rate(kdedup_processing_latency_seconds_bucket",
		"time() - (kdedup_checkpoint_last_success_timestamp_seconds", "kdedup_checkpoint_duration_seconds_bucket",
		"kdedup_checkpoint_failures_total", "changes(process_start_time_seconds", "kdedup_rebalances_total",
	} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("no dashboard query contains %q", want)
		}
	}
	for _, p := range Panels(d) {
		if strings.Contains(strings.ToLower(deref(p.Title)), "false-positive") &&
			!strings.Contains(deref(p.Description), "real events being wrongly dropped") {
			t.Errorf("panel %q must explain that the FPR is the rate of real events being wrongly dropped", deref(p.Title))
		}
	}
}

func TestParseLabelValues(t *testing.T) {
	tests := []struct {
		q, sel, label string
		ok            bool
	}{
		{`label_values(kdedup_build_info, job)`, "kdedup_build_info", "job", true},
		{` label_values(kdedup_build_info{job=~"$job"}, instance) `, `kdedup_build_info{job=~"$job"}`, "instance", true},
		{`label_values(job)`, "", "", false},
		{`query_result(up)`, "", "", false},
		{`label_values(up, )`, "", "", false},
	}
	for _, tt := range tests {
		sel, label, ok := parseLabelValues(tt.q)
		if sel != tt.sel || label != tt.label || ok != tt.ok {
			t.Errorf("parseLabelValues(%q) = %q, %q, %v; want %q, %q, %v", tt.q, sel, label, ok, tt.sel, tt.label, tt.ok)
		}
	}
}
