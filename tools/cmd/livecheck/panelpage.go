package main

import (
	"context"
	"fmt"
	"html/template"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/kdedup/kdedup/tools"
)

// pagePanels are the dashboard panels the -panels page draws, by id, in order: the ones the
// Monitoring table of docs/operations.md names. The estimated false-positive rate gets a log scale: it spans
// decades between a healthy and an overfilled filter.
var pagePanels = []struct {
	id  uint32
	log bool
}{
	{7, false},  // Records per second
	{8, false},  // Duplicate ratio
	{11, true},  // Estimated false-positive rate vs target
	{12, false}, // Generation fill
	{40, false}, // Filter growth past capacity
	{41, false}, // Filters at the memory cap
	{4, false},  // Assigned partitions
	{21, false}, // Restarts and rebalances
	{34, false}, // Producer resets and uncertain retries
	{23, false}, // Checkpoint age
	{26, false}, // Checkpoint failures and restores
	{28, false}, // Partition handover time
	{35, false}, // Handover snapshot size
	{36, false}, // Rebuild read rate
}

// pageColors are the series colours, in order.
var pageColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// Chart geometry of the page, in pixels.
const (
	plotLeft, plotRight, plotTop, plotBase = 56, 430, 28, 200
	legendTop, legendRow                   = 212, 13
	legendEntries                          = 6 // three rows of two
)

// pageChart is one panel drawn: its title, the phase bands, the axes and the series.
type pageChart struct {
	Title          string
	Bands          []pageBand
	YTicks, XTicks []pageTick
	Lines          []pageLine
	Note           string // instead of lines, when the panel showed nothing
	More           string // the series left out of the legend
}

type pageBand struct {
	X, W  float64
	Label string
	Fill  string
}

type pageTick struct {
	Pos   float64
	Label string
}

// pageLine is a series: its legend entry (at LX, LY) and its path.
type pageLine struct {
	Name, Color string
	LX, LY      float64
	D           string
}

// pageSeries is a series of a target's result, named by its legend format.
type pageSeries struct {
	name string
	pts  []sample
}

// writePanelsPage evaluates the pagePanels targets over [start, end] as the check does and
// writes an HTML page with one SVG chart per panel, the phases of runs shaded.
func writePanelsPage(ctx context.Context, w io.Writer, api promAPI, targets []tools.Target, g grafanaVars, runs []*phaseRun, start, end time.Time) error {
	var charts []pageChart
	for _, pp := range pagePanels {
		var title string
		var ss []pageSeries
		for _, t := range targets {
			if t.PanelID != pp.id {
				continue
			}
			title = t.Panel
			q, err := g.apply(t.Expr)
			var res []series
			if err == nil {
				res, err = api.queryRange(ctx, q, start, end, g.interval)
			}
			if err != nil {
				return fmt.Errorf("panel %q target %s: %w", t.Panel, t.RefID, err)
			}
			for _, s := range res {
				ss = append(ss, pageSeries{legend(t.Legend, s.Labels), s.finite()})
			}
		}
		if title == "" {
			return fmt.Errorf("the dashboard has no panel %d", pp.id)
		}
		charts = append(charts, layoutChart(title, ss, pp.log, runs, start, end))
	}
	return panelsPage.Execute(w, struct {
		Start  string
		Charts []pageChart
	}{start.UTC().Format(time.RFC3339), charts})
}

var legendLabel = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// legend fills in a legendFormat's {{label}} with the series' labels, as Grafana does.
func legend(format string, labels map[string]string) string {
	if format == "" {
		return "value"
	}
	return strings.TrimSpace(legendLabel.ReplaceAllStringFunc(format, func(m string) string {
		return labels[legendLabel.FindStringSubmatch(m)[1]]
	}))
}

// layoutChart lays out one chart: x is seconds since start, y linear from 0 (or log10).
func layoutChart(title string, ss []pageSeries, logScale bool, runs []*phaseRun, start, end time.Time) pageChart {
	c := pageChart{Title: title}
	xMax := end.Sub(start).Seconds()
	px := func(t time.Time) float64 { return plotLeft + (plotRight-plotLeft)*t.Sub(start).Seconds()/xMax }
	for i, r := range runs {
		c.Bands = append(c.Bands, pageBand{X: px(r.began), W: px(r.ended) - px(r.began), Label: r.name, Fill: []string{"#eef6ee", "#eef0f8", "#f8eeee"}[i%3]})
	}
	for s := 0.0; s <= xMax; s += 20 {
		c.XTicks = append(c.XTicks, pageTick{plotLeft + (plotRight-plotLeft)*s/xMax, strconv.Itoa(int(s)) + "s"})
	}
	lo, hi, py := yScale(ss, logScale)
	for _, v := range yTickValues(lo, hi, logScale) {
		c.YTicks = append(c.YTicks, pageTick{py(v), fmtValue(v)})
	}
	drawn := 0
	for _, s := range ss {
		if len(s.pts) == 0 {
			continue
		}
		n := len(c.Lines)
		drawn++
		l := pageLine{Color: pageColors[n%len(pageColors)], LX: 8 + float64(n%2)*212, LY: legendTop + float64(n/2)*legendRow}
		if n < legendEntries {
			l.Name = clip(s.name, 34)
		}
		var d strings.Builder
		for j, p := range s.pts {
			cmd := "L"
			if j == 0 || p.T.Sub(s.pts[j-1].T) > 2*scrapeInterval { // a gap: no data
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%.1f,%.1f ", cmd, px(p.T), py(p.V))
		}
		l.D = d.String()
		c.Lines = append(c.Lines, l)
	}
	switch {
	case drawn == 0:
		c.Note = "no data in this run"
	case drawn > legendEntries:
		c.More = fmt.Sprintf("and %d more series", drawn-legendEntries)
	}
	return c
}

// yScale returns the y range of the series and the mapping of a value to a pixel row: from 0 (a
// linear scale) or from the smallest positive value's decade (log), to the largest value.
func yScale(ss []pageSeries, logScale bool) (lo, hi float64, py func(float64) float64) {
	lo, hi = math.Inf(1), 0.0
	for _, s := range ss {
		for _, p := range s.pts {
			hi = max(hi, p.V)
			if p.V > 0 {
				lo = min(lo, p.V)
			}
		}
	}
	if !logScale {
		hi = niceCeil(hi)
		return 0, hi, func(v float64) float64 { return plotBase - (plotBase-plotTop)*v/hi }
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1e-9, 1
	}
	lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	span := math.Log10(hi) - math.Log10(lo)
	return lo, hi, func(v float64) float64 {
		v = max(v, lo)
		return plotBase - (plotBase-plotTop)*(math.Log10(v)-math.Log10(lo))/span
	}
}

// yTickValues returns the y ticks: 0 and four steps to hi, or every other decade.
func yTickValues(lo, hi float64, logScale bool) []float64 {
	var out []float64
	if !logScale {
		for i := range 5 {
			out = append(out, hi*float64(i)/4)
		}
		return out
	}
	step := max(1, int(math.Round(math.Log10(hi/lo)))/5)
	for e := math.Log10(lo); e <= math.Log10(hi)+1e-9; e += float64(step) {
		out = append(out, math.Pow(10, e))
	}
	return out
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (v <= 0 gives 1).
func niceCeil(v float64) float64 {
	if !(v > 0) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// fmtValue formats a tick value.
func fmtValue(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a < 0.01:
		return strconv.FormatFloat(v, 'e', 0, 64)
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case a >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// clip cuts s to n runes, marking the cut.
func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// panelsPage is the -panels page: the charts in a grid, three to a row.
var panelsPage = template.Must(template.New("panels").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>kdedup dashboard panels, live check</title>
<style>
body { font: 12px "DejaVu Sans", sans-serif; margin: 8px; background: #fff; color: #222; }
h1 { font-size: 15px; margin: 2px 0 6px; }
.grid { display: grid; grid-template-columns: repeat(3, 440px); gap: 6px; }
svg { border: 1px solid #ddd; }
text { font-size: 10px; fill: #444; }
.title { font-size: 12px; font-weight: bold; fill: #222; }
</style></head><body>
<h1>kdedup dashboard panels evaluated by Prometheus during the live check ({{.Start}}): healthy, handover, degraded phases</h1>
<div class="grid">
{{range .Charts}}<svg width="440" height="262" viewBox="0 0 440 262" xmlns="http://www.w3.org/2000/svg">
<text class="title" x="6" y="14">{{.Title}}</text>
{{range .Bands}}<rect x="{{.X}}" y="28" width="{{.W}}" height="172" fill="{{.Fill}}"/><text x="{{.X}}" y="26" dx="2">{{.Label}}</text>
{{end}}{{range .YTicks}}<line x1="56" x2="430" y1="{{.Pos}}" y2="{{.Pos}}" stroke="#e4e4e4"/><text x="52" y="{{.Pos}}" dy="3" text-anchor="end">{{.Label}}</text>
{{end}}{{range .XTicks}}<text x="{{.Pos}}" y="210" text-anchor="middle">{{.Label}}</text>
{{end}}<line x1="56" x2="430" y1="200" y2="200" stroke="#888"/>
{{range .Lines}}<path d="{{.D}}" fill="none" stroke="{{.Color}}" stroke-width="1.3"/>
{{end}}{{range .Lines}}{{if .Name}}<rect x="{{.LX}}" y="{{.LY}}" width="10" height="3" fill="{{.Color}}" transform="translate(0,10)"/><text x="{{.LX}}" y="{{.LY}}" dx="13" dy="14">{{.Name}}</text>
{{end}}{{end}}{{with .More}}<text x="430" y="22" text-anchor="end">{{.}}</text>{{end}}{{with .Note}}<text x="240" y="110" text-anchor="middle">{{.}}</text>{{end}}
</svg>
{{end}}</div></body></html>
`))
