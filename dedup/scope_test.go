package dedup

import (
	"context"
	"testing"

	"github.com/kdedup/kdedup/checkpoint/snapshot"
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
		{ScopeRouted, false, true},
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
		if got := s.windowFor(nil).SingleWriter; got != tt.single { // the configuration its filters are built with
			t.Errorf("%s scope: SingleWriter = %v, want %v", tt.scope, got, tt.single)
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSnapshotScope checks that every scope records one of the snapshot format's scopes: the
// routed scope's filters are per partition (of the route topic), so its snapshots say so and the
// format needs no new value.
func TestSnapshotScope(t *testing.T) {
	for scope, want := range map[Scope]string{
		ScopePartition: snapshot.ScopePartition,
		ScopeGlobal:    snapshot.ScopeGlobal,
		ScopeRouted:    snapshot.ScopePartition,
	} {
		if got := scope.kind().snapshot; got != want {
			t.Errorf("%s: snapshot scope = %q, want %q", scope, got, want)
		}
	}
}
