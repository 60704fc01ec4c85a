package loadtest

import (
	"testing"
	"time"

	"github.com/kdedup/kdedup/dedup"
)

// TestScopeNamesAreDedups proves that the scope names of the report are the worker's: loadtest
// keeps its own copy only because it may not import dedup.
func TestScopeNamesAreDedups(t *testing.T) {
	for _, c := range []struct {
		global bool
		want   dedup.Scope
	}{{false, dedup.ScopePartition}, {true, dedup.ScopeGlobal}} {
		cfg := testConfig()
		cfg.Global = c.global
		r := newReport(cfg, 1, 1, time.Time{}, 0, verifyOutput{}, 0)
		if r.Settings.Scope != string(c.want) {
			t.Errorf("Global=%v: the report says scope %q, dedup calls it %q", c.global, r.Settings.Scope, c.want)
		}
	}
}
