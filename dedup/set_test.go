package dedup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kdedup/kdedup/window"
)

func testWindow() window.Config {
	return window.Config{Generations: 4, Interval: time.Hour, Capacity: 10_000, FalsePositiveRate: 1e-9}
}

func TestScopes(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		scope          Scope
		crossPartition bool // is a duplicate on another partition caught?
	}{
		{ScopePartition, false},
		{ScopeGlobal, true},
		{"", false}, // the default is partition
	}
	for _, tt := range tests {
		t.Run(string(tt.scope), func(t *testing.T) {
			s, err := NewSet(ctx, Config{Scope: tt.scope, Window: testWindow()})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			for _, p := range []int32{0, 1} {
				if err := s.Assign(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			if s.Seen(0, []byte("a")) {
				t.Fatal("first sighting reported seen")
			}
			if !s.Seen(0, []byte("a")) {
				t.Fatal("duplicate on the same partition not caught")
			}
			if got := s.Seen(1, []byte("a")); got != tt.crossPartition {
				t.Fatalf("duplicate on another partition: seen=%v, want %v", got, tt.crossPartition)
			}
		})
	}
}

func TestParseScope(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    Scope
		wantErr string
	}{
		{"partition", ScopePartition, ""},
		{"global", ScopeGlobal, ""},
		{"Global", "", `dedup: unknown scope "Global" (want partition or global)`},
		{"", "", `dedup: unknown scope ""`},
	} {
		got, err := ParseScope(tt.in)
		if tt.wantErr != "" {
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tt.wantErr)) {
				t.Errorf("ParseScope(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseScope(%q) = %v, %v", tt.in, got, err)
		}
	}
}

func TestNewSetRejectsBadWindow(t *testing.T) {
	_, err := NewSet(context.Background(), Config{Window: window.Config{}})
	if !errors.Is(err, window.ErrConfig) {
		t.Fatalf("error = %v, want window.ErrConfig", err)
	}
	if _, err := NewSet(context.Background(), Config{Scope: "galaxy", Window: testWindow()}); err == nil {
		t.Fatal("unknown scope accepted")
	}
}

func TestUnassignedPasses(t *testing.T) {
	ctx := context.Background()
	s, err := NewSet(ctx, Config{Window: testWindow()})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if s.Seen(7, []byte("x")) {
			t.Fatal("record of an unassigned partition was dropped")
		}
	}
	if s.Unassigned() != 2 {
		t.Fatalf("Unassigned = %d, want 2", s.Unassigned())
	}
}

// memPersister keeps snapshots in memory through window's snapshot hooks.
type memPersister struct {
	mu    sync.Mutex
	snaps map[string]snap
	fail  error
}

type snap struct {
	meta window.Meta
	data []byte
}

func (m *memPersister) Restore(_ context.Context, unit string, cfg window.Config) (*window.Filter, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.snaps[unit]
	if !ok {
		return nil, nil
	}
	return window.Restore(cfg, s.meta, bytes.NewReader(s.data))
}

func (m *memPersister) Save(_ context.Context, unit string, f *window.Filter) error {
	if m.fail != nil {
		return m.fail
	}
	var buf bytes.Buffer
	meta, _, err := f.WriteSnapshot(&buf)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.snaps[unit] = snap{meta, buf.Bytes()}
	return nil
}

// TestStateFollowsPartition revokes a partition from one Set and assigns it to another sharing
// the persister, as on a rebalance between replicas: the second Set remembers what the first saw.
func TestStateFollowsPartition(t *testing.T) {
	ctx := context.Background()
	p := &memPersister{snaps: map[string]snap{}}
	a, err := NewSet(ctx, Config{Window: testWindow(), Topic: "orders", Persister: p})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewSet(ctx, Config{Window: testWindow(), Topic: "orders", Persister: p})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Assign(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		a.Seen(3, fmt.Appendf(nil, "id-%d", i))
	}
	if err := a.Revoke(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.snaps["orders.p3"]; !ok {
		t.Fatalf("no snapshot under orders.p3: %v", p.snaps)
	}
	if a.Filter(3) != nil || len(a.Partitions()) != 0 {
		t.Fatal("revoked partition still has state")
	}
	if err := b.Assign(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if !b.Seen(3, fmt.Appendf(nil, "id-%d", i)) {
			t.Fatalf("id-%d forgotten after the partition moved", i)
		}
	}
	if b.Seen(3, []byte("new")) {
		t.Fatal("a new id was reported seen")
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Assign(ctx, 4); err == nil {
		t.Fatal("Assign after Close succeeded")
	}
}

func TestRevokeReportsSaveError(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("disk full")
	s, err := NewSet(ctx, Config{Window: testWindow(), Persister: &memPersister{snaps: map[string]snap{}, fail: boom}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Assign(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke(ctx, 0); !errors.Is(err, boom) {
		t.Fatalf("Revoke error = %v, want %v", err, boom)
	}
	if s.Filter(0) != nil {
		t.Fatal("state kept after a failed save")
	}
}

// TestSeenDuringRebalance runs Seen on every partition while others are assigned and revoked.
func TestSeenDuringRebalance(t *testing.T) {
	ctx := context.Background()
	s, err := NewSet(ctx, Config{Window: testWindow()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if err := s.Assign(ctx, 0); err != nil {
		t.Fatal(err)
	}
	// 4 workers × 2000 ids stay under the 10,000 capacity, so at 1e-9 no fresh id may be seen.
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				id := fmt.Appendf(nil, "%d-%d", w, i)
				if s.Seen(0, id) {
					t.Errorf("fresh id %s reported seen", id)
					return
				}
				s.Seen(int32(1+i%3), id)
			}
		})
	}
	for i := range 50 {
		p := int32(1 + i%3)
		if err := s.Assign(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := s.Revoke(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if got := s.Stats(); len(got) != 1 || got[0].Name != "0" {
		t.Fatalf("Stats = %+v, want partition 0 only", got)
	}
}
