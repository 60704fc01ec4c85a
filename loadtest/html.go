package loadtest

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
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

// svgChart renders a step-line chart of series over [0, xMax] seconds as an inline SVG element.
// Every series with at least one point becomes one <path class="series">.
func svgChart(title, yUnit string, width, xMax, yFixed float64, ss []chartSeries) string {
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
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`,
		W, H, W, H, html.EscapeString(title))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%.0f" height="%.0f" fill="#ffffff"/>`, W, H)
	fmt.Fprintf(&b, `<text x="%.0f" y="18" class="title">%s</text>`, left, html.EscapeString(title))
	// Grid and y ticks.
	for i := 0; i <= 5; i++ {
		y := yMax * float64(i) / 5
		fmt.Fprintf(&b, `<path class="grid" d="M%.1f,%.1f H%.1f"/>`, left, py(y), left+pw)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" class="ytick">%s</text>`, left-6, py(y)+4, fmtTick(y))
	}
	// X ticks.
	step := niceCeil(xMax / 8)
	for x := 0.0; x <= xMax*(1+1e-9); x += step {
		fmt.Fprintf(&b, `<path class="axis" d="M%.1f,%.1f V%.1f"/>`, px(x), top+ph, top+ph+4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" class="xtick">%ss</text>`, px(x), top+ph+16, fmtTick(x))
	}
	fmt.Fprintf(&b, `<path class="axis" d="M%.1f,%.1f V%.1f H%.1f"/>`, left, top, top+ph, left+pw)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" class="xlabel">time since start</text>`, left+pw/2, H-4)
	fmt.Fprintf(&b, `<text x="12" y="%.1f" class="ylabel" transform="rotate(-90 12 %.1f)">%s</text>`, top+ph/2, top+ph/2, html.EscapeString(yUnit))
	// Series, the first on top; the legend on a line below the title.
	lx := left
	for _, s := range ss {
		fmt.Fprintf(&b, `<path class="legend" stroke="%s" d="M%.1f,34 H%.1f"/><text x="%.1f" y="38" class="legendtext">%s</text>`,
			s.color, lx, lx+16, lx+20, html.EscapeString(s.name))
		lx += float64(len(s.name))*6.8 + 36
	}
	for i := len(ss) - 1; i >= 0; i-- {
		s := ss[i]
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
		if d.Len() > 0 {
			class := "series"
			if s.dash {
				class = "series dash"
			}
			fmt.Fprintf(&b, `<path class="%s" stroke="%s" d="%s"/>`, class, s.color, d.String())
		}
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// charts returns the report's three charts.
func (r *Report) charts() []string {
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
	return []string{
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

// WriteHTML writes a self-contained HTML report: verdict, figures, settings and inline SVG charts
// of throughput, latency and the duplicate rate over time. It uses no scripts and loads nothing.
// The markup is well-formed XML.
func (r *Report) WriteHTML(w io.Writer) error {
	var b strings.Builder
	esc := html.EscapeString
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/>")
	fmt.Fprintf(&b, "<title>kdedup loadtest %s</title><style>%s</style></head><body>", esc(r.RunID), htmlStyle)
	verdict, class := "PASS", "pass"
	if !r.Pass {
		verdict, class = "FAIL", "fail"
	}
	fmt.Fprintf(&b, `<h1>kdedup loadtest <span class="verdict %s">%s</span></h1>`, class, verdict)
	fmt.Fprintf(&b, "<p>Run <code>%s</code> (%s mode), started %s, %.1fs. %s (%d partitions) to %s (%d partitions).</p>",
		esc(r.RunID), esc(r.Mode), esc(r.Started.Format(time.RFC3339)), r.ElapsedSeconds,
		esc(r.InputTopic), r.InputPartitions, esc(r.OutputTopic), r.OutputPartitions)
	if len(r.Failures) > 0 {
		b.WriteString("<h2>Failures</h2><ul>")
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "<li>%s</li>", esc(f))
		}
		b.WriteString("</ul>")
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "<p>Note: %s</p>", esc(n))
	}

	v, l, t := r.Verdict, r.Latency, r.Throughput
	b.WriteString("<h2>Results</h2><table>")
	row := func(name, value string) {
		fmt.Fprintf(&b, `<tr><th>%s</th><td class="num">%s</td></tr>`, esc(name), esc(value))
	}
	row("records sent", strconv.Itoa(v.Records))
	row("originals / duplicates", fmt.Sprintf("%d / %d", v.ByKind[KindOriginal.String()], v.Records-v.ByKind[KindOriginal.String()]))
	row("duplicates by kind", orNone(kindList(v.ByKind, dupKinds...)))
	row("records delivered", strconv.Itoa(v.Delivered))
	row("unique events that must appear", strconv.Itoa(v.Uniques))
	row("unique events lost", fmt.Sprintf("%d (bound %d, expected %.3g)", v.Lost, v.LossBound, v.ExpectedLoss))
	row("measured loss rate", fmt.Sprintf("%.3g (configured false-positive rate %g)", v.MeasuredLossRate, r.Settings.FalsePositiveRate))
	if v.SteadyUniques > 0 && !r.Settings.ExpectAll {
		row("loss rate once the window had filled", fmt.Sprintf("%.3g (%d of %d)", v.SteadyLossRate, v.SteadyLost, v.SteadyUniques))
	}
	row("duplicates that must be dropped", strconv.Itoa(v.MustDrop))
	row("duplicates leaked", fmt.Sprintf("%d (%d repeated deliveries)", v.Leaked, v.DoubleDelivered))
	row("copies not judged (timing)", strconv.Itoa(v.Ambiguous))
	row("per-key order violations", strconv.Itoa(v.OrderViolations))
	row("latency p50 / p90 / p99", fmt.Sprintf("%s / %s / %s", fmtMs(l.P50), fmtMs(l.P90), fmtMs(l.P99)))
	row("latency p99.9 / max", fmt.Sprintf("%s / %s", fmtMs(l.P999), fmtMs(l.Max)))
	row("end-to-end throughput", fmt.Sprintf("%s (%.2fs)", fmtRate(t.EndToEnd), t.EndToEndSeconds))
	row("send rate / delivery rate", fmt.Sprintf("%s / %s", fmtRate(t.SendRate), fmtRate(t.OutputRate)))
	if t.DrainRate > 0 {
		row("drain of the preloaded input", fmt.Sprintf("%s (%.2fs)", fmtRate(t.DrainRate), t.DrainSeconds))
	}
	b.WriteString("</table>")

	b.WriteString(`<h2>Over time</h2><div class="charts">`)
	for _, c := range r.charts() {
		b.WriteString(c)
	}
	b.WriteString("</div>")

	if f := r.Filter; f != nil {
		b.WriteString("<h2>Filter memory</h2><table>")
		row("filters x generations", fmt.Sprintf("%d x %d of %gs", f.Filters, f.Generations, f.IntervalSeconds))
		row("capacity per generation", strconv.FormatUint(f.Capacity, 10))
		row("bits per key per generation", fmt.Sprintf("%.2f (theory 1.44*log2(1/p) = %.2f for the per-generation target, %.2f for the window target)",
			f.BitsPerKey, f.TheoryBitsPerKey, f.TheoryBitsPerKeyWindow))
		row("memory per filter", fmt.Sprintf("%s (%.2f bytes per key of the window)", fmtBytes(f.TotalBytes), f.BytesPerKey))
		est := "unknown"
		if f.EstimatedFPR >= 0 {
			est = fmt.Sprintf("%.3g", f.EstimatedFPR)
		}
		row("false-positive rate: target / predicted full / estimated", fmt.Sprintf("%g / %.3g / %s", f.FalsePositiveRate, f.PredictedFPR, est))
		b.WriteString("</table>")
	}

	s := r.Settings
	b.WriteString("<h2>Settings</h2><table>")
	rate := "as fast as possible"
	if s.Rate > 0 {
		rate = fmtRate(s.Rate)
	}
	row("count / rate", fmt.Sprintf("%d / %s", s.Count, rate))
	row("entities, key size, value size", fmt.Sprintf("%d, %dB, %dB", s.Entities, s.KeySize, s.ValueSize))
	row("duplicate ratio and mix", fmt.Sprintf("%.0f%%: %s", 100*s.DupRatio, s.Mix))
	row("delays", fmt.Sprintf("within/cross <= %gs, beyond %gs..%gs", s.WithinMaxSeconds, s.BeyondMinSeconds, s.BeyondMaxSeconds))
	row("field / scope", s.Field+" / "+s.Scope)
	row("window", fmt.Sprintf("%d x %gs", s.WindowCount, s.WindowSeconds))
	row("seed", strconv.FormatUint(s.Seed, 10))
	b.WriteString("</table>")
	if len(v.Examples) > 0 {
		b.WriteString("<h2>Examples</h2><ul>")
		for _, e := range v.Examples {
			fmt.Fprintf(&b, "<li><code>%s</code></li>", esc(e))
		}
		b.WriteString("</ul>")
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
