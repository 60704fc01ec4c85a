package dedup

import (
	"bytes"
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
	// The single-file save writes the filter's words as a version 5 snapshot holds them, laid
	// out once beforehand from the generations the product exports (the product no longer reads
	// a filter into one file): only the copy of the words is left out of that baseline, which the
	// encoding, checksum and write dominate.
	wholeMeta, whole := singleFileData(b, f)
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
				return snapshottest.Encode(w, headerFromMeta(wholeMeta, info), func(dw io.Writer) error {
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

// singleFileData returns the Meta of f and its words in the layout of a version 5 single-file
// snapshot (documented on snapshot.Decoder), little-endian, assembled from what
// Filter.SnapshotGenerations exports: each live generation's canonical words (per group, sector
// 0's words, then each other sector's; untagged) go to its slot, tagged with the slot's use, and
// its grown stages' words follow the slots' words in the order of Meta.Stages.
func singleFileData(tb testing.TB, f *window.Filter) (window.Meta, []byte) {
	tb.Helper()
	var m window.Meta
	var words []uint64
	err := f.SnapshotGenerations(func(x *window.Export) error {
		m = x.Meta()
		sw := m.SectorBits / 64
		perSector := m.Slots * sw
		words = make([]uint64, m.Words)
		stages := map[uint64][]uint64{}
		for s, e := range m.SlotEpochs {
			if e < 0 {
				continue
			}
			var canon []uint64
			if err := x.Generation(uint64(e), func(w []uint64) error { canon = append(canon, w...); return nil }); err != nil {
				return err
			}
			tag := m.SlotUses[s] << 63
			for g := range int(m.Groups) {
				base := g * m.Sectors * perSector
				for i := range m.Sectors {
					for w := range sw {
						pos := base + i*perSector + s*sw + w
						if i == 0 {
							pos = base + w*m.Slots + s
						}
						words[pos] = canon[(g*m.Sectors+i)*sw+w] | tag
					}
				}
			}
			stages[uint64(e)] = canon[int(m.Groups)*m.Sectors*sw:]
		}
		for _, st := range m.Stages {
			words = append(words, stages[st.Epoch][:st.Words]...)
			stages[st.Epoch] = stages[st.Epoch][st.Words:]
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	var buf bytes.Buffer
	if err := snapshottest.WriteWords(&buf, words); err != nil {
		tb.Fatal(err)
	}
	return m, buf.Bytes()
}
