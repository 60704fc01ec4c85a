package dedup

import (
	"context"
	"testing"
)

// TestScopeSetsWriterMode checks the filter mode each scope uses: single-writer per partition
// (one goroutine handles a partition), shared for the global filter, whatever the caller's
// window configuration says.
func TestScopeSetsWriterMode(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		scope  Scope
		asked  bool
		single bool
	}{
		{ScopePartition, false, true},
		{ScopeGlobal, true, false},
	} {
		cfg := Config{Scope: tt.scope, Window: testWindow()}
		cfg.Window.SingleWriter = tt.asked
		s, err := NewSet(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Assign(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if got := s.Filter(0).Config().SingleWriter; got != tt.single {
			t.Errorf("%s scope: SingleWriter = %v, want %v", tt.scope, got, tt.single)
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
