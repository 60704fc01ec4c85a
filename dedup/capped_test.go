package dedup

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/window"
)

// TestSaveAtCapRestores saves, as incremental checkpoints, a filter at its memory cap under
// either overload policy while a writer keeps adding new keys to it, and restores the newest:
// the restore is warm (no snapshot rejected: under OverloadDrop the capped stage counts the keys
// it takes, and the counts are read after the words), and the restored filter knows every key
// added before the save began.
func TestSaveAtCapRestores(t *testing.T) {
	for _, policy := range []window.OverloadPolicy{window.OverloadDrop, window.OverloadPass} {
		t.Run(policy.String(), func(t *testing.T) {
			ctx := context.Background()
			store, _ := dirStore(t)
			p := NewCheckpointPersister(store, slog.New(slog.DiscardHandler))
			var reasons []string
			p.OnRejected(func(r string) { reasons = append(reasons, r) })
			cfg, _ := trustFilter(t, 0)
			s, err := window.Size(cfg)
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxBytes, cfg.Overload = s.TotalBytes, policy // no room for a stage: stage 0 takes the rest
			f, err := window.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			const before = 4_000
			for i := range before {
				f.TestAndAdd([]byte("key-" + strconv.Itoa(i)))
			}
			if !f.Stats().AtCap {
				t.Fatal("setup: the filter is not at its cap")
			}
			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Go(func() {
				for i := 0; !stop.Load(); i++ {
					f.TestAndAdd([]byte("more-" + strconv.Itoa(i)))
				}
			})
			const unit = "orders.p0"
			info := SnapshotInfo{Scope: ScopePartition, Topic: "orders", Partition: 0, InputOffsets: map[int32]int64{0: before}}
			for range 3 {
				if _, _, err := p.Save(ctx, unit, f, info, func(context.Context) error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
			stop.Store(true)
			wg.Wait()
			r, res, err := p.Restore(ctx, unit, cfg)
			if err != nil || r == nil || res.Outcome != checkpoint.OutcomeWarm || len(reasons) != 0 {
				t.Fatalf("Restore: filter %v, outcome %q, rejections %v, %v; want the newest snapshot", r != nil, res.Outcome, reasons, err)
			}
			for i := range before {
				if k := []byte("key-" + strconv.Itoa(i)); f.Test(k) && !r.Test(k) {
					t.Fatalf("key %d lost", i)
				}
			}
		})
	}
}
