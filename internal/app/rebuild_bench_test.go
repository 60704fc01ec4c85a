package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/dedup"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// BenchmarkRebuild rebuilds one partition's 55 MB filter (the default window: 8 generations of
// 15m, 1M identities per interval at 1e-6) from 300 000 output records spread over the last 90
// minutes, on the embedded broker, beside the plain read of the same records through the same
// OutputReader (identities extracted, nothing added). It reports records per second and the
// ratio; the rebuild's cost per partition is its record count divided by that rate.
//
//	go test ./internal/app -run '^$' -bench Rebuild -benchtime 3x -count 3
func BenchmarkRebuild(b *testing.B) {
	const records = 300_000
	ctx := context.Background()
	cl, err := embedkafka.Start(embedkafka.Options{Topics: map[string]int32{"in": 1, "out": 1}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	now := time.Now()
	step := 90 * time.Minute / records
	for i := 0; i < records; i += 5000 {
		msgs := make([]kafkaio.Record, 5000)
		for j := range msgs {
			n := i + j
			msgs[j] = kafkaio.Record{Key: fmt.Appendf(nil, "event-%09d", n), Value: make([]byte, 100),
				Time: now.Add(-90*time.Minute + time.Duration(n)*step)}
		}
		if err := cl.Produce(ctx, "out", 0, msgs...); err != nil {
			b.Fatal(err)
		}
	}
	kf, err := newKeyFunc("key", nil)
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	app, err := Load(withEnv(map[string]string{"KAFKA_BROKERS": strings.Join(cl.Addrs(), ","), "KAFKA_INPUT_TOPIC": "in", "KAFKA_OUTPUT_TOPIC": "out"}))
	if err != nil {
		b.Fatal(err)
	}
	out := consumer.NewOutputReader(app.consumerFields(), kf, log)
	defer out.Close()
	cfg := dedup.Config{Window: windowConfig(DedupConfig{WindowCount: 8, WindowInterval: 15 * time.Minute, WindowCapacity: 1_000_000,
		FalsePositiveRate: 1e-6}, nil), Output: out, RebuildMaxRecords: 10_000_000, Logger: log}
	rebuild := func() int {
		s, err := dedup.NewSet(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close(ctx)
		if err := s.Assign(ctx, 0); err != nil {
			b.Fatal(err)
		}
		if !s.Seen(0, fmt.Appendf(nil, "event-%09d", records-1), time.Now()) {
			b.Fatal("the newest record is not in the rebuilt filter")
		}
		return records
	}
	read := func() int {
		n, err := out.Read(ctx, map[int32]int64{0: 0}, map[int32]int64{0: records}, func([]byte, time.Time) {})
		if err != nil || n != records {
			b.Fatalf("Read = %d, %v", n, err)
		}
		return n
	}
	for _, c := range []struct {
		name string
		fn   func() int
	}{{"rebuild", rebuild}, {"baseline-read", read}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			start, n := time.Now(), 0
			for b.Loop() {
				n += c.fn()
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "records/s")
		})
	}
	b.Run("ratio", func(b *testing.B) {
		best := map[string]time.Duration{}
		fns := map[string]func() int{"rebuild": rebuild, "read": read}
		names := []string{"rebuild", "read"}
		i := 0
		for b.Loop() {
			for j := range names {
				n := names[(i+j)%2]
				start := time.Now()
				fns[n]()
				if d := time.Since(start); best[n] == 0 || d < best[n] {
					best[n] = d
				}
			}
			i++
		}
		b.ReportMetric(float64(records)/best["rebuild"].Seconds(), "rebuild-records/s")
		b.ReportMetric(float64(records)/best["read"].Seconds(), "read-records/s")
		b.ReportMetric(float64(best["rebuild"])/float64(best["read"]), "rebuild-x-vs-read")
	})
}
