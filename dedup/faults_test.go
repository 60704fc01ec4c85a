package dedup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/checkpoint/errorfs"
	"github.com/kdedup/kdedup/metrics"
)

// faultySet is a Set whose checkpoints go through an errorfs.FS, reporting to real metrics and
// logging JSON lines into a buffer.
type faultySet struct {
	*Set
	reg *prometheus.Registry
	log *bytes.Buffer
}

func newFaultySet(t *testing.T, store *checkpoint.Store) faultySet {
	t.Helper()
	reg := prometheus.NewRegistry()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	s, err := NewSet(context.Background(), Config{
		Window: testWindow(), Topic: "orders", Persister: NewCheckpointPersister(store, log),
		Observer: metrics.New(reg, metrics.Options{Checkpointing: true, SkipRuntimeCollectors: true}), Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return faultySet{s, reg, &buf}
}

// faultyStore is a Store keeping keep snapshots per unit in a fresh directory, over an
// errorfs.FS.
func faultyStore(t *testing.T, keep int) (*checkpoint.Store, *errorfs.FS) {
	t.Helper()
	efs := errorfs.New(nil)
	b, err := checkpoint.NewDirBackendFS(efs, filepath.Join(t.TempDir(), "snaps"))
	if err != nil {
		t.Fatal(err)
	}
	return checkpoint.NewStore(b, keep), efs
}

// assignedSet is a faultySet over store with partition 0 assigned.
func assignedSet(t *testing.T, store *checkpoint.Store) faultySet {
	t.Helper()
	s := newFaultySet(t, store)
	if err := s.Assign(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	return s
}

// metric returns the sum of a counter's series whose labels have the given name, value pairs (0
// if there is none).
func (f faultySet) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	fams, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
	metrics:
		for _, m := range fam.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() != labels[i+1] {
						continue metrics
					}
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// see passes ids to partition 0 and reports how many were already seen.
func see(s *Set, prefix string, n int) int {
	seen := 0
	for i := range n {
		if s.Seen(0, fmt.Appendf(nil, "%s-%d", prefix, i), time.Time{}) {
			seen++
		}
	}
	return seen
}

// TestCheckpointFaultsKeepServing fails each file system operation under a periodic checkpoint.
// The worker must not notice beyond the error: Checkpoint returns it, the failure metric and the
// log say so, and the filter keeps serving. The previous good snapshot must survive: a Set that
// assigns the partition afterwards restores it (or the new one, where the failure came after it
// became visible).
func TestCheckpointFaultsKeepServing(t *testing.T) {
	const n = 200
	tests := []struct {
		name    string
		op      errorfs.Op
		err     error
		failed  bool   // Checkpoint fails, counted in kdedup_checkpoint_failures_total
		logMsg  string // what the log says, with the error
		visible bool   // the new snapshot is what a restore finds
	}{
		{"create temp, no space", errorfs.OpCreate, syscall.ENOSPC, true, "checkpoint failed", false},
		{"write, no space", errorfs.OpWrite, syscall.ENOSPC, true, "checkpoint failed", false},
		{"fsync", errorfs.OpSync, syscall.EIO, true, "checkpoint failed", false},
		{"rename", errorfs.OpRename, syscall.EIO, true, "checkpoint failed", false},
		{"directory fsync after the rename", errorfs.OpSyncDir, syscall.EIO, true, "checkpoint failed", true},
		// Saved and durable; the next save prunes again.
		{"remove while pruning", errorfs.OpRemove, syscall.EACCES, false, "old snapshots could not be pruned", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			store, efs := faultyStore(t, 1)
			a := assignedSet(t, store)
			see(a.Set, "old", n)
			if err := a.Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
			see(a.Set, "new", n)

			efs.Fail(tt.op, tt.err)
			err := a.Checkpoint(ctx)
			efs.Clear()
			if efs.Injected(tt.op) == 0 {
				t.Fatalf("the checkpoint never reached the %s operation", tt.op)
			}
			if tt.failed != (err != nil) || tt.failed && !errors.Is(err, tt.err) {
				t.Fatalf("Checkpoint = %v, want a failure (%v) wrapping %v", err, tt.failed, tt.err)
			}
			wantFailures := 0.0
			if tt.failed {
				wantFailures = 1
			}
			if got := a.metric(t, "kdedup_checkpoint_failures_total"); got != wantFailures {
				t.Errorf("kdedup_checkpoint_failures_total = %v, want %v", got, wantFailures)
			}
			if log := a.log.String(); !strings.Contains(log, `"msg":"`+tt.logMsg+`"`) || !strings.Contains(log, tt.err.Error()) {
				t.Errorf("the log does not say %q with %q:\n%s", tt.logMsg, tt.err, log)
			}
			if got := see(a.Set, "old", n) + see(a.Set, "new", n); got != 2*n {
				t.Fatalf("after the failure the filter remembers %d of %d ids", got, 2*n)
			}
			if a.Seen(0, []byte("fresh"), time.Time{}) || !a.Seen(0, []byte("fresh"), time.Time{}) {
				t.Fatal("after the failure the filter no longer filters")
			}

			b := assignedSet(t, store)
			if got := b.metric(t, "kdedup_checkpoint_restores_total", "outcome", string(checkpoint.OutcomeWarm)); got != 1 {
				t.Fatalf("restores with outcome warm = %v, want 1", got)
			}
			if got := see(b.Set, "old", n); got != n {
				t.Fatalf("the restored filter remembers %d of the %d ids of the previous snapshot", got, n)
			}
			want := 0
			if tt.visible {
				want = n
			}
			if got := see(b.Set, "new", n); got != want {
				t.Fatalf("the restored filter remembers %d of the %d ids of the failed snapshot, want %d", got, n, want)
			}
		})
	}
}

// TestRestoreIOErrorIsNotCold fails the reads of a restore: Assign must fail (the worker retries)
// rather than start cold and forget the snapshot, and succeed with the snapshot once reads work.
func TestRestoreIOErrorIsNotCold(t *testing.T) {
	ctx := context.Background()
	store, efs := faultyStore(t, 2)
	a := assignedSet(t, store)
	see(a.Set, "old", 100)
	if err := a.Revoke(ctx, 0); err != nil {
		t.Fatal(err)
	}

	b := newFaultySet(t, store)
	efs.Fail(errorfs.OpRead, syscall.EIO)
	if err := b.Assign(ctx, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Assign with failing reads = %v, want the EIO", err)
	}
	if b.Filter(0) != nil || b.metric(t, "kdedup_checkpoint_restores_total") != 0 {
		t.Fatal("a failed restore left state behind or was counted as a restore")
	}
	efs.Clear()
	if err := b.Assign(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if got := see(b.Set, "old", 100); got != 100 {
		t.Fatalf("the restored filter remembers %d of 100 ids", got)
	}
}
