package dedup

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
)

// BenchmarkCheckpointScale is the incremental-checkpoint scale run without the broker: one replica's Set with the
// default window and 96 partitions, 2,500 keys each (what 240k distinct events spread over them
// leave), saved to a directory store. Each iteration loads the keys, runs one checkpoint round
// (the first after the load), then another with no new records (an idle interval), then, after
// one more record on every partition, Close (the final saves a SIGTERM makes, none of them
// skipped as unchanged). It reports the store's size after the load, the bytes each
// round wrote (the files it created) and Close's time:
//
//	go test ./dedup -run '^$' -bench CheckpointScale -benchtime 1x -count 3
//
// It uses only the Set's API, so the same file runs against an older kdedup as a baseline.
func BenchmarkCheckpointScale(b *testing.B) {
	ctx := context.Background()
	const parts, keys = 96, 2500
	log := slog.New(slog.DiscardHandler)
	var storeB, firstB, idleB, closeD, restoreD float64
	for b.Loop() {
		dir := b.TempDir()
		store, err := checkpoint.OpenLocation(ctx, checkpoint.Location{Scheme: checkpoint.SchemeFile, Dir: dir}, checkpoint.Options{Keep: 3})
		if err != nil {
			b.Fatal(err)
		}
		s, err := NewSet(ctx, Config{Window: handoverWindow, Topic: "orders",
			Persister: NewCheckpointPersister(store, log), Logger: log})
		if err != nil {
			b.Fatal(err)
		}
		for p := range int32(parts) {
			if err := s.Assign(ctx, p); err != nil {
				b.Fatal(err)
			}
			s.Processing(p, keys)
			for i := range keys {
				s.Seen(p, fmt.Appendf(nil, "event-%d-%d", p, i), time.Time{})
			}
			s.Acked(p, keys)
		}
		seen := listFiles(b, dir)
		round := func() float64 {
			if err := s.Checkpoint(ctx); err != nil {
				b.Fatal(err)
			}
			return float64(newBytes(b, dir, seen))
		}
		firstB += round()
		storeB += float64(dirBytes(b, dir))
		idleB += round()
		for p := range int32(parts) { // a record on every partition since the last round
			s.Processing(p, keys+1)
			s.Seen(p, fmt.Appendf(nil, "late-%d", p), time.Time{})
			s.Acked(p, keys+1)
		}
		start := time.Now()
		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
		closeD += time.Since(start).Seconds()
		restoreD += restoreAll(b, store, parts, log).Seconds()
	}
	n := float64(b.N)
	b.ReportMetric(storeB/n/(1<<20), "store-MiB")
	b.ReportMetric(firstB/n/(1<<20), "round-after-load-MiB")
	b.ReportMetric(idleB/n/(1<<20), "idle-round-MiB")
	b.ReportMetric(closeD/n*1e3, "close-ms")
	b.ReportMetric(restoreD/n*1e3, "restore-ms")
}

// restoreAll opens a new Set on store and assigns it parts partitions at once, as a worker that
// joins the group does, and returns how long it took until every partition was restored.
func restoreAll(b *testing.B, store *checkpoint.Store, parts int32, log *slog.Logger) time.Duration {
	ctx := context.Background()
	s, err := NewSet(ctx, Config{Window: handoverWindow, Topic: "orders",
		Persister: NewCheckpointPersister(store, log), Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	errs := make(chan error, parts)
	for p := range parts {
		go func() { errs <- s.Assign(ctx, p) }()
	}
	for range parts {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	took := time.Since(start)
	for p := range parts {
		if !s.Seen(p, fmt.Appendf(nil, "event-%d-%d", p, 7), time.Time{}) {
			b.Fatalf("partition %d: a key of the load is not in the restored filter", p)
		}
	}
	if err := s.Close(ctx); err != nil {
		b.Fatal(err)
	}
	return took
}

// listFiles returns the names of the files in dir.
func listFiles(b *testing.B, dir string) map[string]bool {
	b.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name()] = true
	}
	return names
}

// newBytes returns the size of the files in dir that are not in seen, and adds them to it.
func newBytes(t testing.TB, dir string, seen map[string]bool) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && !seen[e.Name()] && !strings.HasPrefix(e.Name(), ".") {
			n += fi.Size()
			seen[e.Name()] = true
		}
	}
	return n
}

// dirBytes returns the size of the files in dir, temporary (hidden) files left out.
func dirBytes(t testing.TB, dir string) int64 {
	t.Helper()
	return newBytes(t, dir, map[string]bool{})
}
