package dedup

import (
	"context"
	"encoding/binary"
	"log/slog"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/window"
)

// BenchmarkSignedCheckpoint measures what CHECKPOINT_SIGNING_KEY costs a checkpoint: a full save
// (a fresh persister, so every generation object is written, hashed with SHA-256 when signing,
// and the manifest signed) and a restore (HMAC check, and SHA-256 of every object as it is read)
// of one filter of 1M keys per interval holding 1M keys, without a key (the baseline) and with
// one, in the same run. Saves and restores are one partition's and sequential, as in the worker.
//
//	go test ./dedup -run '^$' -bench SignedCheckpoint -count 6 | benchstat -col /key -
func BenchmarkSignedCheckpoint(b *testing.B) {
	ctx := context.Background()
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	cfg := window.Config{Generations: 4, Interval: time.Hour, Capacity: 1_000_000, FalsePositiveRate: 1e-6,
		Clock: func() time.Time { return now }, WallClock: func() time.Time { return now }}
	f, err := window.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var key [8]byte
	for i := range uint64(1_000_000) {
		binary.LittleEndian.PutUint64(key[:], i)
		f.TestAndAdd(key[:])
	}
	info := SnapshotInfo{Scope: ScopePartition, Topic: "orders", Partition: 0, InputOffsets: map[int32]int64{0: 1}}
	for _, k := range []struct {
		name string
		key  []byte
	}{{"none", nil}, {"set", signKey}} {
		store, err := checkpoint.OpenLocation(ctx, checkpoint.Location{Scheme: checkpoint.SchemeFile, Dir: b.TempDir()}, checkpoint.Options{Keep: 2})
		if err != nil {
			b.Fatal(err)
		}
		persister := func() *CheckpointPersister {
			p := NewCheckpointPersister(store, slog.New(slog.DiscardHandler))
			if k.key != nil {
				p.WithSigningKey(k.key)
			}
			return p
		}
		save := func(b *testing.B) {
			if _, _, err := persister().Save(ctx, signUnit, f, info, func(context.Context) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
		b.Run("op=save/key="+k.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				save(b)
			}
		})
		b.Run("op=restore/key="+k.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r, res, err := persister().Restore(ctx, signUnit, cfg)
				if err != nil || r == nil || res.Outcome != checkpoint.OutcomeWarm {
					b.Fatalf("restore: %v, outcome %q", err, res.Outcome)
				}
			}
		})
	}
}
