package app

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/kdedup/kdedup/dedup"
	"github.com/kdedup/kdedup/window"
)

// TestCapWatcherLogsTransitions checks that reaching and leaving the memory cap are logged once
// each, with the policy's consequence.
func TestCapWatcherLogsTransitions(t *testing.T) {
	for _, policy := range []string{"drop", "pass"} {
		var buf bytes.Buffer
		w := &capWatcher{log: slog.New(slog.NewTextHandler(&buf, nil)), policy: policy, atCap: map[string]bool{}}
		stat := func(atCap bool) []dedup.FilterStats {
			return []dedup.FilterStats{{Name: "3", Stats: window.Stats{AtCap: atCap}}, {Name: "4"}}
		}
		for _, atCap := range []bool{false, true, true, true, false, false} {
			w.observe(stat(atCap))
		}
		out := buf.String()
		if n := strings.Count(out, "reached the memory budget"); n != 1 || !strings.Contains(out, "DEDUP_OVERLOAD_POLICY="+policy) {
			t.Errorf("%s: %d cap warnings:\n%s", policy, n, out)
		}
		if n := strings.Count(out, "below the memory budget again"); n != 1 || strings.Contains(out, "filter=4") {
			t.Errorf("%s: %d recoveries, or a filter that never hit the cap logged:\n%s", policy, n, out)
		}
	}
}
