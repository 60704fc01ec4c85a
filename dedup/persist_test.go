package dedup

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint/snapshot"
	"github.com/kdedup/kdedup/window"
)

// TestOldLayoutSnapshotRefused puts a format v2 and a format v4 snapshot (filter layouts of an
// older kdedup: checkpoint's golden files) in the store as the only snapshot of their unit.
// Restoring one must not fail: the snapshot is rejected as incompatible with a warning that says
// why, and the unit starts cold.
func TestOldLayoutSnapshotRefused(t *testing.T) {
	for _, version := range []uint16{snapshot.VersionV2, snapshot.VersionV4} {
		ctx := context.Background()
		store, dir := dirStore(t)
		var logs bytes.Buffer
		p := NewCheckpointPersister(store, slog.New(slog.NewTextHandler(&logs, nil)))
		old, err := os.ReadFile(filepath.Join("..", "checkpoint", "snapshot", "testdata", fmt.Sprintf("golden-v%d.snap", version)))
		if err != nil {
			t.Fatal(err)
		}
		h, err := snapshot.NewDecoderSize(bytes.NewReader(old), int64(len(old))).Header()
		if err != nil || h.Version != version {
			t.Fatalf("golden v%d header: version %d, %v", version, h.Version, err)
		}
		const unit = "orders.p3"
		if err := os.WriteFile(filepath.Join(dir, unit+".00000000000000000001.snap"), old, 0o644); err != nil {
			t.Fatal(err)
		}
		if infos, err := store.List(ctx, unit); err != nil || len(infos) != 1 {
			t.Fatalf("the store lists %d snapshots of %s (%v), want the v%d one", len(infos), unit, err, version)
		}
		// The configuration the snapshot was taken with: only its layout is refused.
		cfg := window.Config{Generations: h.Generations, Interval: h.Interval, Capacity: h.Capacity,
			FalsePositiveRate: h.FalsePositiveRate, Seed: h.Seed, Clock: func() time.Time { return h.Created }}
		f, r, err := p.Restore(ctx, unit, cfg)
		if err != nil || f != nil || r.Outcome != "cold" {
			t.Fatalf("Restore of a v%d snapshot: filter %v, outcome %q, error %v; want a cold start", version, f != nil, r.Outcome, err)
		}
		for _, want := range []string{"snapshot rejected", "snapshot incompatible with the current configuration",
			fmt.Sprintf("format version %d", version), "filter layout is from an older kdedup", "starts from the output topic instead"} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("v%d: log lacks %q:\n%s", version, want, logs.String())
			}
		}
	}
}

// TestGrownFilterSurvivesSnapshot saves a filter whose generations grew past capacity through
// the checkpoint store (the path of restarts, re-warm and the partition handover) and restores
// it: every key is still seen, and the stages came back.
func TestGrownFilterSurvivesSnapshot(t *testing.T) {
	for _, auto := range []bool{false, true} {
		t.Run(fmt.Sprintf("auto=%v", auto), func(t *testing.T) { testGrownFilterSurvivesSnapshot(t, auto) })
	}
}

// testGrownFilterSurvivesSnapshot is TestGrownFilterSurvivesSnapshot with a fixed capacity or
// auto sizing, whose generations differ in size: the first took 6000 keys, the second is sized
// from it and took 60000 more, so it grew beyond its stage 1.
func testGrownFilterSurvivesSnapshot(t *testing.T, auto bool) {
	ctx := context.Background()
	p, _ := dirPersister(t)
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	cfg := window.Config{Generations: 2, Interval: time.Minute, Capacity: 1_000, FalsePositiveRate: 1e-3,
		Clock: func() time.Time { return now }}
	if auto {
		cfg.Capacity, cfg.Auto = 0, true
	}
	f, err := window.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := 6_000 // 6x capacity: three stages
	for i := range n {
		f.TestAndAdd([]byte("key-" + strconv.Itoa(i)))
	}
	if auto {
		now = now.Add(time.Minute)
		f.AdvanceTo(now)
		for i := range 10 * n {
			f.TestAndAdd([]byte("key-" + strconv.Itoa(n+i)))
		}
		n += 10 * n
	}
	info := SnapshotInfo{Scope: ScopePartition, Topic: "orders", Partition: 0, InputOffsets: map[int32]int64{0: int64(n)}}
	if _, _, err := p.Save(ctx, "orders.p0", f, info, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	r, res, err := p.Restore(ctx, "orders.p0", cfg)
	if err != nil || r == nil {
		t.Fatalf("Restore: %v (outcome %q)", err, res.Outcome)
	}
	if a, b := f.Stats(), r.Stats(); a.Stages < map[bool]int{false: 3, true: 1}[auto] || a.Stages != b.Stages || a.TotalBytes != b.TotalBytes {
		t.Fatalf("stages %d, restored %d; bytes %d, restored %d", a.Stages, b.Stages, a.TotalBytes, b.TotalBytes)
	}
	for i := range n {
		if !r.Test([]byte("key-" + strconv.Itoa(i))) {
			t.Fatalf("key %d not seen after restore", i)
		}
	}
}
