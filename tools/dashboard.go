package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

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

// DecodeDashboard strictly decodes a dashboard JSON document: unknown or
// mistyped fields anywhere (dashboard, panels, panel options, Prometheus
// targets, variables) are errors, and so is a panel that decodes empty.
//
// The strict decoder is used for checking only. In SDK v0.0.18
// PanelOrRowPanel.UnmarshalJSONStrict tests the (empty but non-nil) success
// error of the nested panel decoder with err != nil and returns early, so on
// success every panel comes back empty. The content is therefore decoded a
// second time with the regular decoder, and the panel count is compared with
// the raw document so that a silently dropped panel cannot go unnoticed.
func DecodeDashboard(raw []byte) (dashboard.Dashboard, error) {
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

// Panels returns every non-row panel of d, including panels nested in rows,
// in document order.
func Panels(d dashboard.Dashboard) []dashboard.Panel {
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

// Target is one Prometheus query of a dashboard panel.
type Target struct {
	// PanelID and Panel are the panel's id and title.
	PanelID uint32
	Panel   string
	// RefID is the target's refId ("A", "B", ...), Legend its legendFormat.
	RefID  string
	Legend string
	// Expr is the PromQL as written in the dashboard, with Grafana's
	// variables ($job, $__rate_interval, ...) not substituted.
	Expr string
}

// String names the target the way the checks report it: panel "Title" target A.
func (t Target) String() string { return fmt.Sprintf("panel %q target %s", t.Panel, t.RefID) }

// Targets returns the Prometheus query of every target of every panel of d.
// It fails on a target that is not a Prometheus query.
func Targets(d dashboard.Dashboard) ([]Target, error) {
	var out []Target
	var errs []error
	for _, p := range Panels(d) {
		for i, tg := range p.Targets {
			q, ok := tg.(*prometheus.Dataquery)
			if !ok {
				errs = append(errs, fmt.Errorf("panel %q target %d is %T, want a Prometheus query", deref(p.Title), i, tg))
				continue
			}
			out = append(out, Target{
				PanelID: deref(p.Id), Panel: deref(p.Title), RefID: deref(q.RefId),
				Legend: deref(q.LegendFormat), Expr: q.Expr,
			})
		}
	}
	return out, errors.Join(errs...)
}

// deref returns *p, or the zero value for nil.
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// Variable is a query template variable of the form label_values(selector, label).
type Variable struct {
	// Name is the variable's name, without the $.
	Name string
	// Selector and Label are the arguments of label_values: the variable takes
	// the values of Label on the series Selector selects. The selector may
	// contain other variables ($job).
	Selector, Label string
}

// Variables returns the query variables of d. It fails on a query variable
// that is not label_values(selector, label); other variable types (such as
// the datasource) are skipped.
func Variables(d dashboard.Dashboard) ([]Variable, error) {
	var out []Variable
	var errs []error
	for _, v := range d.Templating.List {
		if v.Type != "query" || v.Query == nil {
			continue
		}
		var q string
		switch {
		case v.Query.String != nil:
			q = *v.Query.String
		case v.Query.Map != nil:
			q, _ = v.Query.Map["query"].(string)
		}
		sel, label, ok := parseLabelValues(q)
		if !ok {
			errs = append(errs, fmt.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q))
			continue
		}
		out = append(out, Variable{Name: v.Name, Selector: sel, Label: label})
	}
	return out, errors.Join(errs...)
}

// parseLabelValues splits a Grafana label_values(selector, label) query.
func parseLabelValues(q string) (selector, label string, ok bool) {
	q = strings.TrimSpace(q)
	if !strings.HasPrefix(q, "label_values(") || !strings.HasSuffix(q, ")") {
		return "", "", false
	}
	inner := strings.TrimSuffix(strings.TrimPrefix(q, "label_values("), ")")
	i := strings.LastIndex(inner, ",")
	if i < 0 {
		return "", "", false
	}
	selector, label = strings.TrimSpace(inner[:i]), strings.TrimSpace(inner[i+1:])
	if selector == "" || label == "" {
		return "", "", false
	}
	return selector, label, true
}
