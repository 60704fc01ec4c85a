package loadtest

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// chartSeries is one line of a chart: a step line over buckets [x, x+width).
type chartSeries struct {
	name  string
	color string
	xs    []float64 // bucket starts
	ys    []float64
	dash  bool // dashed, thinner: drawn over a series it may coincide with
}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten (v <= 0 gives 1).
func niceCeil(v float64) float64 {
	if !(v > 0) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

func fmtTick(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 4, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 4, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}

// chart is one SVG chart, laid out: the coordinates the template writes, from which it derives
// the rest (a label's offset from its tick, the middle of an axis).
type chart struct {
	Title, YUnit string
	// W and H are the size; Left, Right, Top and Bottom the plot area's edges.
	W, H, Left, Right, Top, Bottom float64
	// YTicks are at y = Pos, XTicks at x = Pos.
	YTicks, XTicks []chartTick
	Legend         []chartLegend
	// Paths are the series in drawing order: the first series last, on top.
	Paths []chartPath
}

// chartTick is a tick of an axis: where, and its label.
type chartTick struct {
	Pos   float64
	Label string
}

// chartLegend is a series' entry in the legend, starting at X.
type chartLegend struct {
	X           float64
	Color, Name string
}

// chartPath is a series' step line: class, colour and SVG path data.
type chartPath struct {
	Class, Color, D string
}

// svgChart lays out a step-line chart of series over [0, xMax] seconds. Every series with at
// least one point becomes one path of class "series".
func svgChart(title, yUnit string, width, xMax, yFixed float64, ss []chartSeries) chart {
	const W, H = 760.0, 260.0
	const left, right, top, bottom = 64.0, 16.0, 46.0, 40.0
	pw, ph := W-left-right, H-top-bottom
	yMax := 0.0
	for _, s := range ss {
		for _, y := range s.ys {
			if !math.IsNaN(y) {
				yMax = max(yMax, y)
			}
		}
	}
	yMax = niceCeil(yMax * 1.05)
	if yFixed > 0 {
		yMax = yFixed
	}
	if !(xMax > 0) {
		xMax = 1
	}
	px := func(x float64) float64 { return left + pw*min(max(x/xMax, 0), 1) }
	py := func(y float64) float64 { return top + ph*(1-min(max(y/yMax, 0), 1)) }
	c := chart{Title: title, YUnit: yUnit, W: W, H: H, Left: left, Right: left + pw, Top: top, Bottom: top + ph}
	for i := 0; i <= 5; i++ {
		y := yMax * float64(i) / 5
		c.YTicks = append(c.YTicks, chartTick{py(y), fmtTick(y)})
	}
	step := niceCeil(xMax / 8)
	for x := 0.0; x <= xMax*(1+1e-9); x += step {
		c.XTicks = append(c.XTicks, chartTick{px(x), fmtTick(x)})
	}
	lx := left
	for _, s := range ss {
		c.Legend = append(c.Legend, chartLegend{lx, s.color, s.name})
		lx += float64(len(s.name))*6.8 + 36
	}
	for i := len(ss) - 1; i >= 0; i-- {
		if d := stepPath(ss[i], width, px, py); d != "" {
			class := "series"
			if ss[i].dash {
				class = "series dash"
			}
			c.Paths = append(c.Paths, chartPath{class, ss[i].color, d})
		}
	}
	return c
}

// stepPath returns the SVG path data of a series' step line, "" if it has no point: each bucket
// [x, x+width) is a horizontal step, and a NaN lifts the pen.
func stepPath(s chartSeries, width float64, px, py func(float64) float64) string {
	var d strings.Builder
	pen := false
	for j, x := range s.xs {
		y := s.ys[j]
		if math.IsNaN(y) {
			pen = false
			continue
		}
		if !pen {
			fmt.Fprintf(&d, "M%.1f,%.1f", px(x), py(y))
		} else {
			fmt.Fprintf(&d, "L%.1f,%.1f", px(x), py(y))
		}
		fmt.Fprintf(&d, "L%.1f,%.1f", px(x+width), py(y))
		pen = true
	}
	return d.String()
}

// charts returns the report's three charts.
func (r *Report) charts() []chart {
	w := r.BucketSeconds
	if w <= 0 || len(r.Series) == 0 {
		return nil
	}
	n := len(r.Series)
	xs := make([]float64, n)
	sent, out := make([]float64, n), make([]float64, n)
	p50, p99 := make([]float64, n), make([]float64, n)
	dupShare, dropShare, mustShare := make([]float64, n), make([]float64, n), make([]float64, n)
	for i, p := range r.Series {
		xs[i] = p.T
		sent[i] = float64(p.Sent) / w
		out[i] = float64(p.Out) / w
		p50[i], p99[i] = math.NaN(), math.NaN()
		if p.Out > 0 {
			p50[i], p99[i] = p.LatP50, p.LatP99
		}
		dupShare[i], dropShare[i], mustShare[i] = math.NaN(), math.NaN(), math.NaN()
		if p.Sent > 0 {
			dupShare[i] = 100 * float64(p.Dups) / float64(p.Sent)
			dropShare[i] = 100 * float64(p.Dropped) / float64(p.Sent)
			mustShare[i] = 100 * float64(p.MustDrop) / float64(p.Sent)
		}
	}
	xMax := r.Series[n-1].T + w
	return []chart{
		svgChart("Throughput (records/s)", "records/s", w, xMax, 0, []chartSeries{
			{"sent", "#1f77b4", xs, sent, false}, {"delivered", "#2ca02c", xs, out, false},
		}),
		svgChart("End-to-end latency (ms), by time read", "ms", w, xMax, 0, []chartSeries{
			{"p50", "#1f77b4", xs, p50, false}, {"p99", "#d62728", xs, p99, false},
		}),
		svgChart("Duplicate rate (% of records sent), by time sent", "%", w, xMax, 100, []chartSeries{
			{"duplicates sent", "#ff7f0e", xs, dupShare, false}, {"not delivered", "#9467bd", xs, dropShare, true},
			{"must be dropped", "#8c564b", xs, mustShare, false},
		}),
	}
}

const htmlStyle = `
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #222; background: #fafafa; }
h1 { font-size: 22px; margin: 0 0 8px 0; }
h2 { font-size: 17px; margin: 22px 0 8px 0; }
.verdict { display: inline-block; padding: 4px 14px; border-radius: 4px; font-weight: bold; color: #fff; }
.pass { background: #2ca02c; }
.fail { background: #d62728; }
table { border-collapse: collapse; background: #fff; }
td, th { border: 1px solid #ddd; padding: 4px 10px; text-align: left; font-size: 14px; vertical-align: top; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.charts svg { display: block; margin: 10px 0; border: 1px solid #ddd; }
svg .title { font-size: 14px; font-weight: bold; fill: #222; }
svg .ytick { font-size: 11px; fill: #555; text-anchor: end; }
svg .xtick { font-size: 11px; fill: #555; text-anchor: middle; }
svg .xlabel, svg .ylabel { font-size: 11px; fill: #555; text-anchor: middle; }
svg .legendtext { font-size: 12px; fill: #222; }
svg .grid { stroke: #eee; stroke-width: 1; fill: none; }
svg .axis { stroke: #888; stroke-width: 1; fill: none; }
svg .series { stroke-width: 2; fill: none; stroke-linejoin: round; }
svg .dash { stroke-width: 2; stroke-dasharray: 5 4; }
svg .legend { stroke-width: 3; fill: none; }
ul { margin: 4px 0; }
code { font-size: 13px; }
`

// htmlTemplate is the report page. Its line breaks and the tabs that follow them are removed
// before parsing (see compactTemplate): the page is written as one line, and every other space
// in it is meant.
const htmlTemplate = `
<!DOCTYPE html>{{"\n"}}
<html lang="en"><head><meta charset="utf-8"/><title>kdedup loadtest {{.RunID}}</title><style>{{.Style}}</style></head><body>
	<h1>kdedup loadtest <span class="verdict {{.BadgeClass}}">{{.Badge}}</span></h1>
	<p>Run <code>{{.RunID}}</code> ({{.Mode}} mode), started {{.Started}}, {{f1 .ElapsedSeconds}}s.
		{{" "}}{{.InputTopic}} ({{.InputPartitions}} partitions) to {{.OutputTopic}} ({{.OutputPartitions}} partitions).</p>
	{{with .Failures}}<h2>Failures</h2><ul>{{range .}}<li>{{.}}</li>{{end}}</ul>{{end}}
	{{range .Notes}}<p>Note: {{.}}</p>{{end}}
	<h2>Results</h2>{{template "table" .Results}}
	<h2>Over time</h2><div class="charts">{{range .Charts}}{{template "chart" .}}{{end}}</div>
	{{with .FilterRows}}<h2>Filter memory</h2>{{template "table" .}}{{end}}
	<h2>Settings</h2>{{template "table" .SettingsRows}}
	{{with .Verdict.Examples}}<h2>Examples</h2><ul>{{range .}}<li><code>{{.}}</code></li>{{end}}</ul>{{end}}
</body></html>{{"\n"}}

{{define "table"}}
	<table>{{range .}}<tr><th>{{.Name}}</th><td class="num">{{.Value}}</td></tr>{{end}}</table>
{{end}}

{{define "chart"}}
	<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{{f0 .W}}" height="{{f0 .H}}" viewBox="0 0 {{f0 .W}} {{f0 .H}}" role="img" aria-label="{{.Title}}">
	<rect x="0" y="0" width="{{f0 .W}}" height="{{f0 .H}}" fill="#ffffff"/>
	<text x="{{f0 .Left}}" y="18" class="title">{{.Title}}</text>
	{{range .YTicks}}
		<path class="grid" d="M{{f1 $.Left}},{{f1 .Pos}} H{{f1 $.Right}}"/>
		<text x="{{f1 (add $.Left -6)}}" y="{{f1 (add .Pos 4)}}" class="ytick">{{.Label}}</text>
	{{end}}
	{{range .XTicks}}
		<path class="axis" d="M{{f1 .Pos}},{{f1 $.Bottom}} V{{f1 (add $.Bottom 4)}}"/>
		<text x="{{f1 .Pos}}" y="{{f1 (add $.Bottom 16)}}" class="xtick">{{.Label}}s</text>
	{{end}}
	<path class="axis" d="M{{f1 .Left}},{{f1 .Top}} V{{f1 .Bottom}} H{{f1 .Right}}"/>
	<text x="{{f1 (mid .Left .Right)}}" y="{{f1 (add .H -4)}}" class="xlabel">time since start</text>
	<text x="12" y="{{f1 (mid .Top .Bottom)}}" class="ylabel" transform="rotate(-90 12 {{f1 (mid .Top .Bottom)}})">{{.YUnit}}</text>
	{{range .Legend}}
		<path class="legend" stroke="{{.Color}}" d="M{{f1 .X}},34 H{{f1 (add .X 16)}}"/>
		<text x="{{f1 (add .X 20)}}" y="38" class="legendtext">{{.Name}}</text>
	{{end}}
	{{range .Paths}}<path class="{{.Class}}" stroke="{{.Color}}" d="{{.D}}"/>{{end}}
	</svg>
{{end}}
`

// compactTemplate removes every line break of src with the tabs that follow it.
func compactTemplate(src string) string {
	return regexp.MustCompile(`\n\t*`).ReplaceAllString(src, "")
}

// reportPage returns the report's template, parsed at its first use rather than at package init:
// the worker's binary links this package, and a worker never writes a report. html/template
// escapes every value for where it stands. It is safe for concurrent use.
var reportPage = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Funcs(template.FuncMap{
		"f0":  func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) },
		"f1":  func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
		"add": func(a, b float64) float64 { return a + b },
		"mid": func(a, b float64) float64 { return a + (b-a)/2 },
	}).Parse(compactTemplate(htmlTemplate)))
})

// htmlRow is one row of a table of the report: a name and a formatted value.
type htmlRow struct{ Name, Value string }

// htmlPage is what reportPage's template renders.
type htmlPage struct {
	*Report
	Style                             template.CSS
	Badge, BadgeClass, Started        string
	Results, FilterRows, SettingsRows []htmlRow
	Charts                            []chart
}

// WriteHTML writes a self-contained HTML report: verdict, figures, settings and inline SVG charts
// of throughput, latency and the duplicate rate over time. It uses no scripts and loads nothing.
// The markup is well-formed XML.
func (r *Report) WriteHTML(w io.Writer) error {
	p := htmlPage{
		Report: r, Style: template.CSS(htmlStyle), Badge: "PASS", BadgeClass: "pass",
		Started: r.Started.Format(time.RFC3339), Charts: r.charts(),
		Results: r.resultRows(), FilterRows: r.filterRows(), SettingsRows: r.settingsRows(),
	}
	if !r.Pass {
		p.Badge, p.BadgeClass = "FAIL", "fail"
	}
	return reportPage().Execute(w, p)
}

// resultRows returns the rows of the Results table.
func (r *Report) resultRows() []htmlRow {
	v, l, t := r.Verdict, r.Latency, r.Throughput
	rows := []htmlRow{
		{"records sent", strconv.Itoa(v.Records)},
		{"originals / duplicates", fmt.Sprintf("%d / %d", v.ByKind[KindOriginal.String()], v.Records-v.ByKind[KindOriginal.String()])},
		{"duplicates by kind", orNone(kindList(v.ByKind, dupKinds...))},
		{"records delivered", strconv.Itoa(v.Delivered)},
		{"unique events that must appear", strconv.Itoa(v.Uniques)},
		{"unique events lost", fmt.Sprintf("%d (bound %d, expected %.3g)", v.Lost, v.LossBound, v.ExpectedLoss)},
		{"measured loss rate", fmt.Sprintf("%.3g (configured false-positive rate %g)", v.MeasuredLossRate, r.Settings.FalsePositiveRate)},
	}
	if v.SteadyUniques > 0 && !r.Settings.ExpectAll {
		rows = append(rows, htmlRow{"loss rate once the window had filled", fmt.Sprintf("%.3g (%d of %d)", v.SteadyLossRate, v.SteadyLost, v.SteadyUniques)})
	}
	rows = append(rows,
		htmlRow{"duplicates that must be dropped", strconv.Itoa(v.MustDrop)},
		htmlRow{"duplicates leaked", fmt.Sprintf("%d (%d repeated deliveries)", v.Leaked, v.DoubleDelivered)},
		htmlRow{"copies not judged (timing)", strconv.Itoa(v.Ambiguous)},
		htmlRow{"per-key order violations", strconv.Itoa(v.OrderViolations)},
		htmlRow{"latency p50 / p90 / p99", fmt.Sprintf("%s / %s / %s", fmtMs(l.P50), fmtMs(l.P90), fmtMs(l.P99))},
		htmlRow{"latency p99.9 / max", fmt.Sprintf("%s / %s", fmtMs(l.P999), fmtMs(l.Max))},
		htmlRow{"end-to-end throughput", fmt.Sprintf("%s (%.2fs)", fmtRate(t.EndToEnd), t.EndToEndSeconds)},
		htmlRow{"send rate / delivery rate", fmt.Sprintf("%s / %s", fmtRate(t.SendRate), fmtRate(t.OutputRate))},
	)
	if t.DrainRate > 0 {
		rows = append(rows, htmlRow{"drain of the preloaded input", fmt.Sprintf("%s (%.2fs)", fmtRate(t.DrainRate), t.DrainSeconds)})
	}
	return rows
}

// filterRows returns the rows of the Filter memory table, nil without FilterInfo.
func (r *Report) filterRows() []htmlRow {
	f := r.Filter
	if f == nil {
		return nil
	}
	est := "unknown"
	if f.EstimatedFPR >= 0 {
		est = fmt.Sprintf("%.3g", f.EstimatedFPR)
	}
	rows := []htmlRow{
		{"filters x generations", fmt.Sprintf("%d x %d of %gs", f.Filters, f.Generations, f.IntervalSeconds)},
		{"capacity per generation", strconv.FormatUint(f.Capacity, 10)},
		{"bits per key per generation", fmt.Sprintf("%.2f (theory 1.44*log2(1/p) = %.2f for the per-generation target, %.2f for the window target)",
			f.BitsPerKey, f.TheoryBitsPerKey, f.TheoryBitsPerKeyWindow)},
		{"memory per filter", fmt.Sprintf("%s (%.2f bytes per key of the window)", fmtBytes(f.TotalBytes), f.BytesPerKey)},
		{"false-positive rate: target / predicted full / estimated at the end", fmt.Sprintf("%g / %.3g / %s", f.FalsePositiveRate, f.PredictedFPR, est)},
	}
	if v := r.Verdict; f.EstimateAverage >= 0 && v.SteadyUniques > 0 {
		rows = append(rows, htmlRow{"estimate averaged over the steady part / measured loss rate",
			fmt.Sprintf("%.3g (%d readings) / %.3g%s", f.EstimateAverage, f.EstimateSamples, v.SteadyLossRate, ratio(f.EstimateAverage, v.SteadyLossRate))})
	}
	return rows
}

// settingsRows returns the rows of the Settings table.
func (r *Report) settingsRows() []htmlRow {
	s := r.Settings
	rate := "as fast as possible"
	if s.Rate > 0 {
		rate = fmtRate(s.Rate)
	}
	rows := []htmlRow{
		{"count / rate", fmt.Sprintf("%d / %s", s.Count, rate)},
		{"entities, key size, value size", fmt.Sprintf("%d, %dB, %dB", s.Entities, s.KeySize, s.ValueSize)},
		{"duplicate ratio and mix", fmt.Sprintf("%.0f%%: %s", 100*s.DupRatio, s.Mix)},
		{"delays", fmt.Sprintf("within/cross <= %gs, beyond %gs..%gs", s.WithinMaxSeconds, s.BeyondMinSeconds, s.BeyondMaxSeconds)},
		{"field / scope", s.Field + " / " + s.Scope},
		{"window", fmt.Sprintf("%d x %gs", s.WindowCount, s.WindowSeconds)},
		{"seed", strconv.FormatUint(s.Seed, 10)},
	}
	if s.Sources > 0 {
		rows = append(rows, htmlRow{"sources", fmt.Sprintf("%d in header %s: %s", s.Sources, SourceHeader, r.Verdict.topSources(5))})
	}
	if len(s.Worker) > 0 {
		rows = append(rows, htmlRow{"worker", workerSettings(s.Worker)})
	}
	return rows
}
