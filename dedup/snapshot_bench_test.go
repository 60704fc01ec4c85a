package dedup

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/window"
)

// BenchmarkSeenDuringSnapshots measures what snapshotting costs record processing: one partition
// handles batches of 1000 records (Processing, Seen for each, Acked) while, in the second case, a
// goroutine snapshots the partition's 52 MiB filter to disk back to back. It reports the median
// and 99th percentile of the batch time; the difference between the two cases is the latency
// snapshots add to a record, since a record waits for its batch.
//
//	go test ./dedup -run '^$' -bench SeenDuringSnapshots -benchtime 3000000x -count 5
func BenchmarkSeenDuringSnapshots(b *testing.B) {
	const batch = 1000
	for _, snapshots := range []bool{false, true} {
		b.Run(fmt.Sprintf("snapshots=%v", snapshots), func(b *testing.B) {
			ctx := context.Background()
			store, err := checkpoint.OpenLocation(ctx, checkpoint.Location{Scheme: checkpoint.SchemeFile, Dir: b.TempDir()}, checkpoint.Options{Keep: 2})
			if err != nil {
				b.Fatal(err)
			}
			s, err := NewSet(ctx, Config{
				Window:      window.Config{Generations: 8, Interval: time.Hour, Capacity: 1_000_000, FalsePositiveRate: 1e-6},
				Persister:   NewCheckpointPersister(store, slog.New(slog.DiscardHandler)),
				SealTimeout: time.Minute,
			})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(ctx)
			if err := s.Assign(ctx, 0); err != nil {
				b.Fatal(err)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var taken atomic.Int64
			if snapshots {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						if err := s.Checkpoint(ctx); err != nil {
							b.Error(err)
							return
						}
						taken.Add(1)
					}
				})
			}
			lat := make([]time.Duration, 0, b.N/batch+1)
			var key [16]byte
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				start := time.Now()
				next := int64(i + batch)
				s.Processing(0, next)
				for j := range batch {
					binary.LittleEndian.PutUint64(key[:], uint64(i+j)%4_000_000)
					s.Seen(0, key[:], time.Time{})
				}
				s.Acked(0, next)
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-batch-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-batch-µs")
			b.ReportMetric(float64(taken.Load()), "snapshots")
		})
	}
}
