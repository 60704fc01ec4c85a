package dedup

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/checkpoint/snapshot"
	"github.com/kdedup/kdedup/checkpoint/snapshot/snapshottest"
	"github.com/kdedup/kdedup/window"
)

var (
	fullOnce   sync.Once
	fullFilter *window.Filter
	fullCfg    window.Config
)

// fullDefaultFilter returns the default window's filter with every generation at capacity (1M keys
// in each of its 8 generations), built once.
func fullDefaultFilter(b *testing.B) (*window.Filter, window.Config) {
	fullOnce.Do(func() {
		now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
		fullCfg = handoverWindow
		fullCfg.Clock = func() time.Time { return now }
		fullCfg.SingleWriter = true
		f, err := window.New(fullCfg)
		if err != nil {
			b.Fatal(err)
		}
		key := make([]byte, 8)
		for g := range uint64(fullCfg.Generations) {
			if g > 0 {
				now = now.Add(fullCfg.Interval)
				f.AdvanceTo(now)
			}
			for i := range fullCfg.Capacity {
				binary.LittleEndian.PutUint64(key, g<<40|i)
				f.TestAndAdd(key)
			}
		}
		fullFilter = f
	})
	return fullFilter, fullCfg
}

// BenchmarkFullCheckpoint compares, for a full default-window filter (every generation at
// capacity: no sparse chunk to gain on), an incremental checkpoint of a filter the persister has
// not saved before (every generation object and the manifest: the most a save writes) and one of
// a filter it saved before (the current generation and the manifest: every later save) with the
// single-file snapshot every save wrote before (snapshottest.Encode of the whole filter, version 5), and the
// restores of both, on a directory store. The ratio sub-benchmark runs the four in every
// iteration, rotating their order, and reports best times:
//
//	go test ./dedup -run '^$' -bench FullCheckpoint -benchtime 5x -count 6
func BenchmarkFullCheckpoint(b *testing.B) {
	ctx := context.Background()
	f, cfg := fullDefaultFilter(b)
	be, err := checkpoint.NewDirBackend(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	store := checkpoint.NewStore(be, 2)
	log := slog.New(slog.DiscardHandler)
	info := SnapshotInfo{Scope: ScopePartition, Topic: "bench", InputOffsets: map[int32]int64{}}
	noSeal := func(context.Context) error { return nil }
	steady := NewCheckpointPersister(store, log)
	// The single-file save writes data of the filter's size, tagged as the filter's slots are
	// (allOnes): the product no longer reads a filter's words into one file, so only the copy of
	// them is left out of that baseline, which the encoding, checksum and write dominate.
	whole := allOnes(f.Meta())
	fns := map[string]func(){
		"incremental-save-steady": func() { // the current generation and the manifest
			if _, _, err := steady.Save(ctx, "steady", f, info, noSeal); err != nil {
				b.Fatal(err)
			}
		},
		"incremental-save": func() {
			if _, _, err := NewCheckpointPersister(store, log).Save(ctx, "incr", f, info, noSeal); err != nil {
				b.Fatal(err)
			}
		},
		"incremental-restore": func() {
			if r, _, err := NewCheckpointPersister(store, log).Restore(ctx, "incr", cfg); err != nil || r == nil {
				b.Fatalf("restore: %v", err)
			}
		},
		"single-file-save": func() {
			// one object, replaced by every save, as the store's newest snapshot of unit "whole"
			if _, err := be.Create(ctx, "whole.00000000000000000001.snap", func(w io.Writer) error {
				return snapshottest.Encode(w, headerFromMeta(f.Meta(), info), func(dw io.Writer) error {
					_, err := dw.Write(whole)
					return err
				})
			}); err != nil {
				b.Fatal(err)
			}
		},
		"single-file-restore": func() {
			r, _, err := checkpoint.Load(ctx, store, "whole", func(h snapshot.Header, d *snapshot.Decoder) (*window.Filter, error) {
				return window.Restore(cfg, metaFromHeader(h), d)
			})
			if err != nil || r == nil {
				b.Fatalf("restore: %v", err)
			}
		},
	}
	names := []string{"incremental-save", "incremental-save-steady", "single-file-save", "incremental-restore", "single-file-restore"}
	fns["incremental-save"]()
	fns["incremental-save-steady"]()
	fns["single-file-save"]()
	best := bestTimes(b, names, fns)
	b.ReportMetric(float64(best["incremental-save"])/float64(best["single-file-save"]), "save-x-vs-single-file")
	b.ReportMetric(float64(best["incremental-save-steady"])/float64(best["single-file-save"]), "steady-save-x-vs-single-file")
	b.ReportMetric(float64(best["incremental-restore"])/float64(best["single-file-restore"]), "restore-x-vs-single-file")
}
