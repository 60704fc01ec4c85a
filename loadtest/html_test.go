package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/tier"
)

// syntheticReport is the report of the synthetic scenario, verified.
func syntheticReport(t *testing.T) *Report {
	t.Helper()
	sent := scenario()
	obs := deliver(sent, []int{0, 1, 3, 4, 5, 6, 7, 8, 9}, 4*time.Millisecond) // seq 3 leaked
	width := 500 * time.Millisecond
	vo := verify(verifyInput{sent: sent, obs: obs, end: int64(4 * time.Second), expect: window3x1s(false), width: width})
	cfg := testConfig()
	cfg.Count = 10
	r := newReport(cfg, 2, 2, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), 4*time.Second, vo, width)
	r.Filter = &FilterInfo{Filters: 2, Generations: 3, IntervalSeconds: 1, Capacity: 1000, FalsePositiveRate: 1e-6,
		BitsPerKey: 43.5, TheoryBitsPerKey: 31, TheoryBitsPerKeyWindow: 28.8, TotalBytes: 22400, BytesPerKey: 7.5,
		PredictedFPR: 9.9e-7, EstimatedFPR: -1, EstimateAverage: -1}
	r.Judge()
	return r
}

// checkHTML parses the report strictly as XML and checks that every <svg> draws at least one
// data series with two or more points, and that nothing is loaded from elsewhere.
func checkHTML(t *testing.T, doc []byte) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	dec.Strict = true
	var svgs, inSVG, seriesInSVG int
	var stack []string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the report is not well-formed: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			stack = append(stack, el.Name.Local)
			switch el.Name.Local {
			case "script", "iframe", "img", "link", "object", "embed":
				t.Errorf("the report contains a <%s> element", el.Name.Local)
			case "svg":
				svgs++
				inSVG++
				seriesInSVG = 0
			case "path":
				if inSVG == 0 {
					t.Error("<path> outside <svg>")
				}
				var class, d string
				for _, a := range el.Attr {
					switch a.Name.Local {
					case "class":
						class = a.Value
					case "d":
						d = a.Value
					}
				}
				if d == "" || !regexp.MustCompile(`^M[-0-9.]+,[-0-9.]+`).MatchString(d) {
					t.Errorf("path with bad data %q", d)
				}
				if strings.HasPrefix(class, "series") && strings.Count(d, "L") >= 1 {
					seriesInSVG++
				}
			}
			for _, a := range el.Attr {
				if a.Name.Local == "src" || a.Name.Local == "href" {
					t.Errorf("<%s %s=%q> refers to another resource", el.Name.Local, a.Name.Local, a.Value)
				}
			}
		case xml.EndElement:
			if el.Name.Local == "svg" {
				inSVG--
				if seriesInSVG == 0 {
					t.Error("an <svg> chart has no data series path")
				}
			}
			stack = stack[:len(stack)-1]
		}
	}
	if svgs != 3 {
		t.Errorf("%d charts, want 3", svgs)
	}
	if len(stack) != 0 {
		t.Errorf("unclosed elements %v", stack)
	}
	if bytes.Contains(doc, []byte("url(")) || bytes.Contains(doc, []byte("@import")) {
		t.Error("the style loads something")
	}
}

func TestHTMLReport(t *testing.T) {
	r := syntheticReport(t)
	if r.Pass || r.Verdict.Leaked != 1 {
		t.Fatalf("the synthetic run should fail with one leak: %+v", r.Verdict)
	}
	var buf bytes.Buffer
	if err := r.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	checkHTML(t, buf.Bytes())
	for _, want := range []string{"FAIL", "1 duplicates leaked", "Throughput", "latency", "Duplicate rate", "Filter memory", "seq 3 (within of event 0"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the report does not mention %q", want)
		}
	}
	// Text from the run (ids, topics, notes, examples) is escaped wherever it stands.
	hostile := `"><script>alert(1)</script><img src=x> & 'quoted'`
	r.RunID, r.InputTopic, r.Notes = hostile, hostile, []string{hostile}
	r.Verdict.Examples = append(r.Verdict.Examples, hostile)
	buf.Reset()
	if err := r.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	checkHTML(t, buf.Bytes())
	if n := strings.Count(buf.String(), "&lt;script&gt;alert(1)&lt;/script&gt;"); n != 5 {
		t.Errorf("the hostile text appears escaped %d times, want 5 (title, run, topic, note, example)", n)
	}
	// A run with a single bucket still draws lines.
	r.Series = r.Series[:1]
	buf.Reset()
	if err := r.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	checkHTML(t, buf.Bytes())
}

func TestJSONAndSummary(t *testing.T) {
	r := syntheticReport(t)
	r.Verdict.Late, r.Settings.Late = 3, 0.01
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	v := back["verdict"].(map[string]any)
	if back["pass"] != false || v["leaked"] != 1.0 || v["lost"] != 0.0 || v["order_violations"] != 0.0 || v["late"] != 3.0 || len(back["series"].([]any)) == 0 {
		t.Errorf("JSON report: pass %v, verdict %v", back["pass"], v)
	}
	buf.Reset()
	if err := r.WriteSummary(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"result", "FAIL", "1 duplicates leaked", "3 late originals: stamped 24h0m0s before", "latency", "p99"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, buf.String())
		}
	}
}

// chromium returns the path of a Chromium binary, or "".
func chromium() string {
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestHTMLScreenshot renders the report in headless Chromium and checks that the screenshot is
// not blank and shows the charts' colours. It is skipped without Chromium unless
// LOADTEST_RENDER=1 (set by ci-render.sh) demands it.
func TestHTMLScreenshot(t *testing.T) {
	tier.Process(t)
	bin := chromium()
	if bin == "" {
		if os.Getenv("LOADTEST_RENDER") == "1" {
			t.Fatal("LOADTEST_RENDER=1 but Chromium is not installed")
		}
		t.Skip("Chromium is not installed (loadtest/ci-render.sh installs it)")
	}
	// The window is tall enough for every chart, so that a machine whose fonts set the text a few
	// pixels taller does not push the first chart below the fold (as a CI machine did at 900).
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	shot := filepath.Join(dir, "out.png")
	var buf bytes.Buffer
	r := syntheticReport(t)
	if err := r.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--screenshot="+shot, "--window-size=1200,1800",
		"file://"+page)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	b := img.Bounds()
	if b.Dx() != 1200 || b.Dy() != 1800 {
		t.Fatalf("screenshot is %dx%d, want 1200x1800", b.Dx(), b.Dy())
	}
	colors := map[uint32]bool{}
	var ink, blue, red int // not background; the first series' blue; the FAIL badge's red
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			r, g, bl = r>>8, g>>8, bl>>8
			colors[r<<16|g<<8|bl] = true
			if r < 235 || g < 235 || bl < 235 {
				ink++
			}
			near := func(cr, cg, cb uint32) bool {
				d := func(a, b uint32) uint32 { return max(a, b) - min(a, b) }
				return d(r, cr) < 24 && d(g, cg) < 24 && d(bl, cb) < 24
			}
			if near(0x1f, 0x77, 0xb4) {
				blue++
			}
			if near(0xd6, 0x27, 0x28) {
				red++
			}
		}
	}
	total := b.Dx() * b.Dy()
	t.Logf("screenshot: %d colours, %.1f%% ink, %d blue and %d red pixels", len(colors), 100*float64(ink)/float64(total), blue, red)
	if len(colors) < 16 || ink < total/50 {
		t.Errorf("the screenshot looks blank: %d colours, %d of %d pixels not background", len(colors), ink, total)
	}
	if blue < 200 || red < 200 {
		t.Errorf("the charts or the verdict did not render: %d blue, %d red pixels", blue, red)
	}
}
