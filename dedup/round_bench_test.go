package dedup

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
)

// BenchmarkCheckpointRound measures one steady-state checkpoint round of one replica's Set with
// 96 partitions on a directory store: every partition took one new record since the last round,
// so every save writes its current generation and a manifest, and prunes (the store already
// holds Keep checkpoints of every partition). B/op and allocs/op are per round:
//
//	go test ./dedup -run '^$' -bench CheckpointRound -benchmem -count 6
//
// It uses only the Set's API, so the same file runs against an older kdedup as a baseline.
func BenchmarkCheckpointRound(b *testing.B) {
	ctx := context.Background()
	const parts, keys = 96, 2500
	log := slog.New(slog.DiscardHandler)
	store, err := checkpoint.OpenLocation(ctx, checkpoint.Location{Scheme: checkpoint.SchemeFile, Dir: b.TempDir()}, checkpoint.Options{Keep: 3})
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewSet(ctx, Config{Window: handoverWindow, Topic: "orders", Persister: NewCheckpointPersister(store, log), Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx)
	offset := int64(0)
	record := func(n int) {
		for p := range int32(parts) {
			s.Processing(p, offset+int64(n))
			for i := range n {
				s.Seen(p, fmt.Appendf(nil, "event-%d-%d", p, offset+int64(i)), time.Time{})
			}
			s.Acked(p, offset+int64(n))
		}
		offset += int64(n)
	}
	for p := range int32(parts) {
		if err := s.Assign(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	record(keys)
	for range 4 { // the store holds Keep checkpoints of every partition
		if err := s.Checkpoint(ctx); err != nil {
			b.Fatal(err)
		}
		record(1)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		record(1)
		b.StartTimer()
		if err := s.Checkpoint(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
