package kafkaio

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// BenchmarkProducer measures the produce path alone: Producer.Produce of batches of 100 or 1000
// records of 100 bytes, idempotent (the worker's default) or not, from parallel callers onto the 4
// partitions of a topic on an in-process kfake broker over TCP, acks=all. It reports records/s.
// It uses only the API that the produce path has had since the one produce path, so that a baseline worktree
// can run the same file: compare interleaved runs, e.g.
//
//	go test -run '^$' -bench Producer -benchtime 2000x -count 6 ./internal/kafkaio/
func BenchmarkProducer(b *testing.B) {
	for _, batch := range []int{100, 1000} {
		for _, idem := range []bool{false, true} {
			b.Run(fmt.Sprintf("batch=%d/idempotent=%v", batch, idem), func(b *testing.B) {
				benchProduce(b, batch, idem)
			})
		}
	}
}

// benchProduce runs b.N produce calls of batch records each.
func benchProduce(b *testing.B, batch int, idempotent bool) {
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(4, "bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	client := Conn{Brokers: c.ListenAddrs(), ClientID: "bench"}.Client(10 * time.Second)
	defer CloseIdle(client)
	p := NewProducer(client, ProducerConfig{Idempotent: idempotent})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		b.Fatal(err)
	}
	msgs := make([]Record, batch)
	for i := range msgs {
		msgs[i] = Record{Key: fmt.Appendf(nil, "key-%08d", i), Value: make([]byte, 100), Time: time.UnixMilli(1_700_000_000_000)}
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(2) // 2 x GOMAXPROCS callers: several partitions in flight at once
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		part := int(next.Add(1)) % 4
		for pb.Next() {
			if err := p.Produce(ctx, "bench", part, msgs); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
}
