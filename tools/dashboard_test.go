package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

func init() {
	// Panel options and data queries decode strictly only for registered plugins.
	plugins.RegisterDefaultPlugins()
}

// cogError normalises an error from the foundation SDK. Its strict decoders and
// Validate return a cog.BuildErrors slice, and on success that slice is empty
// but still wrapped in a non-nil error interface. cogError returns nil for nil
// and for an empty BuildErrors, and the error otherwise.
func cogError(err error) error {
	if err == nil {
		return nil
	}
	var be cog.BuildErrors
	if errors.As(err, &be) && len(be) == 0 {
		return nil
	}
	return err
}

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

// decodeDashboard strictly decodes a dashboard JSON document: unknown or
// mistyped fields anywhere (dashboard, panels, panel options, Prometheus
// targets, variables) are errors.
//
// The strict decoder is used for checking only. In SDK v0.0.18
// PanelOrRowPanel.UnmarshalJSONStrict tests the (empty but non-nil) success
// error of the nested panel decoder with err != nil and returns early, so on
// success every panel comes back empty. The content is therefore decoded a
// second time with the regular decoder, and the panel count is compared with
// the raw document so that a silently dropped panel cannot go unnoticed.
func decodeDashboard(raw []byte) (dashboard.Dashboard, error) {
	var strict dashboard.Dashboard
	if err := cogError(strict.UnmarshalJSONStrict(raw)); err != nil {
		return strict, fmt.Errorf("strict decode: %w", err)
	}
	var d dashboard.Dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return d, fmt.Errorf("decode: %w", err)
	}
	if err := cogError(d.Validate()); err != nil {
		return d, fmt.Errorf("validate: %w", err)
	}
	var shape struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(raw, &shape); err != nil {
		return d, err
	}
	if len(d.Panels) != len(shape.Panels) {
		return d, fmt.Errorf("decoded %d panels, document has %d", len(d.Panels), len(shape.Panels))
	}
	for i, p := range d.Panels {
		if p.Panel == nil && p.RowPanel == nil {
			return d, fmt.Errorf("panels[%d] decoded empty", i)
		}
	}
	return d, nil
}

func loadDashboard(t *testing.T) dashboard.Dashboard {
	t.Helper()
	d, err := decodeDashboard(readFile(t, deployPath("grafana", "kdedup.json")))
	if err != nil {
		t.Fatalf("deploy/grafana/kdedup.json: %v", err)
	}
	return d
}

// dashboardPanels returns every non-row panel, including panels nested in rows.
func dashboardPanels(d dashboard.Dashboard) []dashboard.Panel {
	var out []dashboard.Panel
	for _, p := range d.Panels {
		if p.Panel != nil {
			out = append(out, *p.Panel)
		}
		if p.RowPanel != nil {
			out = append(out, p.RowPanel.Panels...)
		}
	}
	return out
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
	for _, p := range dashboardPanels(d) {
		for i, tg := range p.Targets {
			q, ok := tg.(*prometheus.Dataquery)
			if !ok {
				t.Errorf("panel %q target %d is %T, want a Prometheus query", deref(p.Title), i, tg)
				continue
			}
			out = append(out, dashboardQuery{fmt.Sprintf("panel %q target %s", deref(p.Title), deref(q.RefId)), q.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" || v.Query == nil {
			continue
		}
		var q string
		switch {
		case v.Query.String != nil:
			q = *v.Query.String
		case v.Query.Map != nil:
			s, _ := v.Query.Map["query"].(string)
			q = s
		}
		sel, ok := labelValuesSelector(q)
		if !ok {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q)
			continue
		}
		out = append(out, dashboardQuery{"variable " + v.Name, sel})
	}
	return out
}

// labelValuesSelector extracts the selector of a Grafana label_values(selector,
// label) variable query.
func labelValuesSelector(q string) (string, bool) {
	q = strings.TrimSpace(q)
	if !strings.HasPrefix(q, "label_values(") || !strings.HasSuffix(q, ")") {
		return "", false
	}
	inner := strings.TrimSuffix(strings.TrimPrefix(q, "label_values("), ")")
	i := strings.LastIndex(inner, ",")
	if i < 0 {
		return "", false
	}
	return strings.TrimSpace(inner[:i]), true
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func TestDashboardDecodesStrictly(t *testing.T) {
	d := loadDashboard(t)
	if deref(d.Uid) != "kdedup" {
		t.Errorf("uid = %q, want kdedup (links and provisioning rely on it)", deref(d.Uid))
	}
	if len(dashboardPanels(d)) < 10 {
		t.Errorf("only %d panels decoded", len(dashboardPanels(d)))
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
			if _, err := decodeDashboard(b); err == nil {
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
	for _, p := range dashboardPanels(d) {
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
	for _, p := range dashboardPanels(d) {
		if strings.Contains(strings.ToLower(deref(p.Title)), "false-positive") &&
			!strings.Contains(deref(p.Description), "real events being wrongly dropped") {
			t.Errorf("panel %q must explain that the FPR is the rate of real events being wrongly dropped", deref(p.Title))
		}
	}
}
