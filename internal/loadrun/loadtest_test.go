package loadrun

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/tier"
	"github.com/kdedup/kdedup/loadtest"
)

// TestLoadtestEmbedded runs `kdedup loadtest` end to end: embedded broker, the real worker, the
// generator and the verifier, and checks the exit status and the JSON report.
func TestLoadtestEmbedded(t *testing.T) {
	tier.Integration(t)
	checkpointDir := t.TempDir()
	tests := []struct {
		name string
		args []string
		mode string
		// beyond is true when the mix has beyond-window duplicates that must pass again.
		beyond, crossDropped bool
		// late is true when the run sends late records (-late) to a worker under event time:
		// each is delivered, and the worker counts exactly those as late.
		late bool
		// note must be part of a report note.
		note string
		// hooks are the names of the hooks that must have run, in order; metrics are worker
		// metrics that must be above 0.
		hooks, metrics []string
	}{
		{
			name: "header field, partition scope, every duplicate kind",
			args: []string{"-count", "3000", "-rate", "2000", "-window-count", "3", "-window-interval", "500ms",
				"-field", "header:event-id", "-dups", "0.3", "-mix", "immediate=1,within=2,beyond=1,cross=1"},
			mode: "embedded", beyond: true,
		},
		{
			name: "key field, global scope, as fast as possible",
			args: []string{"-count", "3000", "-window-count", "3", "-window-interval", "1s", "-field", "key",
				"-scope", "global", "-dups", "0.3", "-mix", "immediate=1,within=2,cross=1"},
			mode: "embedded", crossDropped: true,
		},
		{
			name: "restart with checkpoints keeps the window",
			args: []string{"-count", "3000", "-rate", "2000", "-window-count", "3", "-window-interval", "1s",
				"-mix", "immediate=1,within=3", "-restart-at", "0.5", "-worker-env", "CHECKPOINT_DIR=" + checkpointDir},
			mode: "embedded", note: "prepared 4 filters",
		},
		{
			// The sequence fault comes first: armed after the timeouts, it could answer the retry of
			// a batch the broker had appended (REQUEST_TIMED_OUT is applied, then answered), and the
			// producer reset that follows writes that batch twice, the documented exception, which
			// this case must not depend on the worker's speed to avoid.
			name: "a second worker joins and leaves, produce faults, a rebuild from the output topic",
			args: []string{"-count", "8000", "-rate", "2000", "-window-count", "3", "-window-interval", "1s",
				"-mix", "immediate=1,within=3", "-worker-env", "CHECKPOINT_DIR=" + t.TempDir(), "-worker-env", "CHECKPOINT_INTERVAL=500ms",
				"-join-at", "0.2", "-leave-at", "0.45", "-fault-at", "0.55:out_of_order_sequence_number", "-fault-at", "0.6:REQUEST_TIMED_OUT:2",
				"-rebuild-at", "0.75"},
			mode: "embedded", note: "answered 2 produce requests to loadtest-out with REQUEST_TIMED_OUT",
			hooks:   []string{"join", "leave", "fault OUT_OF_ORDER_SEQUENCE_NUMBER", "fault REQUEST_TIMED_OUT", "rebuild"},
			metrics: []string{"kdedup_rebuild_records_total"}, // the worker after the rebuild
		},
		{
			// Growth past capacity: 4 filters of capacity 1000 receive about 5000 unique keys each inside one
			// interval. They grow stages instead of losing events: the loss stays within the
			// Poisson allowance of 1e-3, nothing leaks, and the order is kept.
			name: "5x capacity within one interval grows the filters",
			args: []string{"-count", "28000", "-window-count", "3", "-window-interval", "1m", "-capacity", "1000", "-fpr", "1e-3",
				"-dups", "0.3", "-mix", "immediate=1"}, // later duplicates would wait for the 1m interval
			mode: "embedded", metrics: []string{"kdedup_filter_growths_total"},
		},
		{
			name: "event time, late records",
			args: []string{"-count", "3000", "-rate", "2000", "-window-count", "3", "-window-interval", "500ms",
				"-dups", "0.3", "-late", "0.02", "-worker-env", "DEDUP_WINDOW_CLOCK=event"},
			mode: "embedded", beyond: true, late: true,
		},
		{
			name: "json field, pass-through baseline",
			args: []string{"-count", "2000", "-field", "json:meta.id", "-passthrough", "-mix", "immediate=1,within=1"},
			mode: "embedded-passthrough",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			jsonPath, htmlPath := filepath.Join(dir, "report.json"), filepath.Join(dir, "report.html")
			// -settle: a run stops as soon as the output is complete; on a busy machine a worker may
			// pause longer than the default 5s without being wrong.
			args := append([]string{"loadtest", "-quiet", "-timeout", "60s", "-settle", "20s", "-json", jsonPath, "-html", htmlPath}, tt.args...)
			var stdout, stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			code := Loadtest(ctx, args[1:], map[string]string{}, &stdout, &stderr)
			t.Logf("stdout:\n%s", stdout.String())
			if code != 0 {
				t.Fatalf("exit status %d\nstderr:\n%s", code, stderr.String())
			}
			r := readReport(t, jsonPath)
			v := r.Verdict
			if !r.Pass || r.Mode != tt.mode || v.Leaked != 0 || v.Lost > v.LossBound || v.OrderViolations != 0 || v.Markers != v.MarkersSent {
				t.Fatalf("report: pass %v mode %s verdict %+v failures %q", r.Pass, r.Mode, v, r.Failures)
			}
			if tt.mode == "embedded" {
				// What the worker dropped, not MustDrop: with a short window the copies it judges
				// as must-drop depend on the worker's latency (the rest are timing-ambiguous).
				if v.MustDrop == 0 || v.Records-v.Delivered < v.Records/10 {
					t.Errorf("the worker dropped too little: must drop %d, delivered %d of %d", v.MustDrop, v.Delivered, v.Records)
				}
				if r.Filter == nil || r.Filter.BitsPerKey <= r.Filter.TheoryBitsPerKey || r.WorkerMetrics["kdedup_duplicates_total"] == 0 {
					t.Errorf("filter info %+v, worker metrics %v", r.Filter, r.WorkerMetrics)
				}
				// The metrics are the last worker's: after a restart it consumed only the second part.
				restarted := r.WorkerMetrics["loadtest_restart_stop_seconds"] > 0 || slices.ContainsFunc(r.Hooks, func(h loadtest.HookRun) bool { return h.Name == "rebuild" })
				if got := int(r.WorkerMetrics["kdedup_records_consumed_total"]); got != v.Records+v.MarkersSent && !restarted {
					t.Errorf("the worker consumed %d records, want %d", got, v.Records+v.MarkersSent)
				}
			}
			if tt.beyond && v.ByKind["beyond"] == 0 {
				t.Error("no beyond-window duplicates were sent")
			}
			if got := r.WorkerMetrics["kdedup_filter_late_records_total"]; tt.late && (v.Late < 50 || got != float64(v.Late)) {
				t.Errorf("%d late records sent, the worker counted %v", v.Late, got)
			}
			if tt.crossDropped && v.Delivered+v.MustDrop+v.Ambiguous != v.Records {
				t.Errorf("global scope: delivered %d + must drop %d + ambiguous %d != %d records", v.Delivered, v.MustDrop, v.Ambiguous, v.Records)
			}
			if tt.note != "" && !strings.Contains(strings.Join(r.Notes, "\n"), tt.note) {
				t.Errorf("no note mentions %q: %q", tt.note, r.Notes)
			}
			checkHookRuns(t, r, tt.hooks, tt.metrics)
			html, err := os.ReadFile(htmlPath)
			if err != nil || !strings.Contains(string(html), "<svg") || !strings.Contains(string(html), "PASS") {
				t.Errorf("HTML report: %v, %d bytes", err, len(html))
			}
		})
	}
}

// readReport reads the loadtest's JSON report at path.
func readReport(t *testing.T, path string) loadtest.Report {
	t.Helper()
	var r loadtest.Report
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// checkHookRuns checks that the report names the hooks, in order and without errors, and that the
// worker metrics are above 0.
func checkHookRuns(t *testing.T, r loadtest.Report, hooks, metrics []string) {
	t.Helper()
	var names []string
	for _, h := range r.Hooks {
		names = append(names, h.Name)
		if h.Error != "" {
			t.Errorf("hook %s failed: %s", h.Name, h.Error)
		}
	}
	if len(hooks) > 0 && !slices.Equal(names, hooks) {
		t.Errorf("hooks %q ran, want %q", names, hooks)
	}
	for _, m := range metrics {
		if r.WorkerMetrics[m] <= 0 {
			t.Errorf("worker metric %s = %v, want > 0", m, r.WorkerMetrics[m])
		}
	}
}

// TestLoadtestExternalFailure runs the external mode against a broker without a worker: nothing
// reaches the output, so every event is lost and the exit status is 1.
func TestLoadtestExternalFailure(t *testing.T) {
	tier.Integration(t)
	cl, err := embedkafka.Start(embedkafka.Options{Topics: map[string]int32{"in": 2, "out": 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var stdout, stderr bytes.Buffer
	env := map[string]string{
		"KAFKA_BROKERS": strings.Join(cl.Addrs(), ","), "KAFKA_INPUT_TOPIC": "in", "KAFKA_OUTPUT_TOPIC": "out",
		"DEDUP_KEY": "header:id", "DEDUP_WINDOW_COUNT": "2", "DEDUP_WINDOW_INTERVAL": "1s",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := Loadtest(ctx, []string{"-quiet", "-count", "200", "-settle", "500ms", "-mix", "within=1"}, env, &stdout, &stderr)
	if code != 1 || !strings.Contains(stdout.String(), "160 must appear: 160 lost") || !strings.Contains(stdout.String(), "field header:id") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
}

func TestLoadtestFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-mix", "later=1"}, nil, "unknown duplicate kind"},
		{[]string{"-field", "body"}, nil, "want key, value"},
		{[]string{"-scope", "cluster"}, nil, "want partition, global or routed"},
		{[]string{"-brokers", "127.0.0.1:1", "-passthrough"}, nil, "embedded"},
		{[]string{"-passthrough", "-oversize", "1"}, nil, "-oversize needs the worker"},
		{[]string{"-brokers", "127.0.0.1:1"}, nil, "needs -input and -output"},
		{[]string{"-count", "0"}, nil, "count"},
		{[]string{"-worker-env", "NOVALUE"}, nil, "NAME=VALUE"},
		{[]string{"-join-at", "0.5", "-leave-at", "0.3"}, nil, "-leave-at needs a smaller -join-at"},
		{[]string{"-leave-at", "0.3"}, nil, "-leave-at needs a smaller -join-at"},
		{[]string{"-rebuild-at", "1.5"}, nil, "between 0 and 1"},
		{[]string{"-fault-at", "0.5:NO_SUCH_ERROR"}, nil, "not a Kafka error name"},
		{[]string{"-fault-at", "2:REQUEST_TIMED_OUT"}, nil, "fraction must be between 0 and 1"},
		{[]string{"-fault-at", "0.5:REQUEST_TIMED_OUT:0"}, nil, "count must be a positive integer"},
		{[]string{"-fault-at", "0.5"}, nil, "not FRACTION:ERROR[:COUNT]"},
		{[]string{"-passthrough", "-join-at", "0.5"}, nil, "embedded mode with the worker"},
		{[]string{"-brokers", "127.0.0.1:1", "-input", "a", "-output", "b", "-fault-at", "0.5:REQUEST_TIMED_OUT"}, nil, "embedded mode with the worker"},
		{[]string{"-rebuild-at", "0.5", "-worker-env", "CHECKPOINT_URL=file:///nonexistent"}, nil, "cannot empty CHECKPOINT_URL"},
		{nil, map[string]string{"KAFKA_BROKERS": "127.0.0.1:1", "KAFKA_INPUT_TOPIC": "a", "KAFKA_OUTPUT_TOPIC": "b", "DEDUP_WINDOW_COUNT": "x"}, "DEDUP_WINDOW_COUNT"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := Loadtest(context.Background(), tt.args, tt.env, &stdout, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want an error mentioning %q", tt.args, code, stderr.String(), tt.want)
		}
	}
}

// TestEstimateAverage checks the time average of the estimate readings per filter and the
// weighting of the filters by their steady unique events.
func TestEstimateAverage(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	samples := []estimateSample{
		{at(50), "0", 100}, // before the steady part
		{at(1000), "0", 1e-3}, {at(1100), "0", 3e-3},
		{at(1050), "1", 1e-2},
		{at(1200), "2", 5},   // a filter without steady events
		{at(3000), "1", 100}, // after the sending
	}
	weights := map[string]loadtest.FilterLoss{"0": {Uniques: 300}, "1": {Uniques: 100}, "3": {Uniques: 50}}
	got, n, by := estimateAverage(samples, at(1000), at(2000), weights)
	want := (300*2e-3 + 100*1e-2) / 400
	if n != 3 || math.Abs(got-want) > 1e-12 {
		t.Errorf("estimateAverage = %g over %d readings, want %g over 3", got, n, want)
	}
	if len(by) != 2 || math.Abs(by["0"]-2e-3) > 1e-12 || by["1"] != 1e-2 {
		t.Errorf("by filter %v, want 0: 2e-3, 1: 1e-2", by)
	}
	if got, n, by := estimateAverage(nil, at(0), at(1), weights); got != -1 || n != 0 || by != nil {
		t.Errorf("no readings: %g, %d, %v; want -1, 0, nil", got, n, by)
	}
}

func TestParseFault(t *testing.T) {
	f, err := parseFault("0.25:request_timed_out:3")
	if err != nil || f.at != 0.25 || f.err.Code != 7 || f.count != 3 {
		t.Errorf("parseFault = %+v, %v", f, err)
	}
	f, err = parseFault("0.5:UNKNOWN_PRODUCER_ID")
	if err != nil || f.err.Message != "UNKNOWN_PRODUCER_ID" || f.count != 1 {
		t.Errorf("parseFault = %+v, %v", f, err)
	}
}
