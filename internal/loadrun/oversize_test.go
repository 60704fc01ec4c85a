package loadrun

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/tier"
)

// TestLoadtestOversize runs the refused-records run of docs/operations.md, scaled down: an input topic that takes 16MiB, an
// output topic at the default 1MiB, and oversized records on partitions 0 and 1 of 3. Without a
// dead-letter topic their partitions deliver everything before them and block there, committed
// exactly at them, while partition 2 completes; with one, everything else is delivered, the two
// are in the dead-letter topic with the worker's headers, and the input is committed to its end.
func TestLoadtestOversize(t *testing.T) {
	tier.Integration(t)
	for _, tt := range []struct {
		name       string
		args       []string
		blocked    int
		deadLetter int
		note       string
	}{
		{name: "fail-stop", args: []string{"-settle", "10s"}, blocked: 2, note: "input committed to its end on 1 of 3 partitions; partition 0 at"},
		{name: "dead-letter topic", args: []string{"-settle", "20s", "-dead-letter-topic", "loadtest-dlq"}, deadLetter: 2,
			note: "input committed to its end on 3 of 3 partitions"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			jsonPath := filepath.Join(t.TempDir(), "report.json")
			// -settle bounds the wait for the end markers that blocked partitions never deliver, so
			// it is what the fail-stop case takes longer; on a busy machine (or under -race) a worker
			// may pause for seconds without being wrong, and a run that settles before the worker
			// got past the oversized records would take their partitions for blocked.
			args := append([]string{"-quiet", "-timeout", "60s", "-json", jsonPath, "-partitions", "3",
				"-count", "3000", "-dups", "0.2", "-mix", "immediate=1,within=1", "-oversize", "2", "-oversize-bytes", "1572864"}, tt.args...)
			var stdout, stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			if code := Loadtest(ctx, args, map[string]string{}, &stdout, &stderr); code != 0 {
				t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
			}
			r := readReport(t, jsonPath)
			v := r.Verdict
			if !r.Pass || v.Leaked != 0 || v.Lost != 0 || v.Oversize != 2 || len(v.Blocked) != tt.blocked || v.DeadLetters != tt.deadLetter ||
				v.Markers != v.MarkersSent-tt.blocked {
				t.Fatalf("report: pass %v verdict %+v failures %q\nstdout:\n%s", r.Pass, v, r.Failures, stdout.String())
			}
			for _, b := range v.Blocked {
				if b.Partition > 1 || b.Held == 0 {
					t.Errorf("block %+v: want partition 0 or 1, with records behind it", b)
				}
			}
			m := r.WorkerMetrics
			if m["kdedup_partition_blocked"] != float64(tt.blocked) || m["kdedup_dead_letters_total"] != float64(tt.deadLetter) {
				t.Errorf("worker metrics: kdedup_partition_blocked %v, kdedup_dead_letters_total %v", m["kdedup_partition_blocked"], m["kdedup_dead_letters_total"])
			}
			if !strings.Contains(strings.Join(r.Notes, "\n"), tt.note) {
				t.Errorf("no note mentions %q: %q", tt.note, r.Notes)
			}
			if tt.blocked > 0 && !strings.Contains(stderr.String(), `"msg":"partition blocked`) {
				t.Errorf("no log line reports the block:\n%s", stderr.String())
			}
		})
	}
}
