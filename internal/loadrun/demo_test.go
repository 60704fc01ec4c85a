package loadrun

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/tier"
)

// TestDemo runs the demo subcommand on a small stream and checks its report.
func TestDemo(t *testing.T) {
	t.Parallel()
	tier.Integration(t)
	var stdout, stderr bytes.Buffer
	began := time.Now()
	code := Demo(context.Background(), []string{"-records", "4000"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("demo exit status %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	t.Logf("demo took %v:\n%s", time.Since(began).Round(time.Millisecond), &stdout)
	for _, want := range []string{"records in:      4000", "records out:", "dropped:", "duplicate rate:", "/metrics", "kdedup_records_consumed_total 4000"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}
