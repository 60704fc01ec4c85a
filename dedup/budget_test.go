package dedup

import (
	"context"
	"testing"

	"github.com/kdedup/kdedup/window"
)

// TestSetReleasesBudget checks that the filters of a Set draw on one window.Budget and that every
// way the Set drops a filter returns its memory: Discard, a parked filter the next generation does
// not bring back, and Close (which drops the parked ones). A revoked filter that is parked keeps
// its memory: it may come back.
func TestSetReleasesBudget(t *testing.T) {
	ctx := context.Background()
	b, err := window.NewBudget(64 << 20)
	if err != nil {
		t.Fatal(err)
	}
	w := testWindow()
	w.Budget = b
	sz, err := window.Size(w)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSet(ctx, Config{Window: w})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []int32{0, 1, 2} {
		if err := s.Assign(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	want := func(filters uint64, when string) {
		t.Helper()
		if got := b.Used(); got != filters*sz.TotalBytes {
			t.Fatalf("%s: budget used %d, want %d filters of %d", when, got, filters, sz.TotalBytes)
		}
	}
	want(3, "three assigned")
	if err := s.Discard(ctx, 0); err != nil {
		t.Fatal(err)
	}
	want(2, "after Discard")
	if err := s.Revoke(ctx, 1); err != nil {
		t.Fatal(err)
	}
	want(2, "after Revoke (parked)")
	s.Generation(1, []int32{2}, nil)
	want(1, "after a generation without the parked partition")
	if err := s.Revoke(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	want(0, "after Close")
}

// TestGlobalSetReleasesBudget checks that Close returns the global filter's memory.
func TestGlobalSetReleasesBudget(t *testing.T) {
	ctx := context.Background()
	b, _ := window.NewBudget(64 << 20)
	w := testWindow()
	w.Budget = b
	s, err := NewSet(ctx, Config{Scope: ScopeGlobal, Window: w})
	if err != nil {
		t.Fatal(err)
	}
	if b.Used() == 0 {
		t.Fatal("the global filter took nothing from the budget")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if b.Used() != 0 {
		t.Fatalf("budget used %d after Close, want 0", b.Used())
	}
}
