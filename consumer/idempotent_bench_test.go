package consumer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
)

// BenchmarkProducePath compares idempotent production (the default) with production without
// producer id (Config.DisableIdempotence: the same kafkaio.Producer, batches without producer id
// and sequence), so it measures what idempotence costs, on BenchmarkEndToEnd's pipeline with a
// Deduper that finds nothing, so every record is produced: consume, produce with acks=all, commit
// after every batch, 4 input partitions on an in-process kfake broker over TCP. Sub-benchmarks cover batch sizes 100 and 1000 and both partitionings
// (hash: 4 input partitions feed 4 output partitions, every output partition from all of them).
// Both paths run in the same process, one after the other for each setting; compare them with
// interleaved runs, e.g.
//
//	go test -run '^$' -bench ProducePath -benchtime 200000x -count 6 ./consumer/ | benchstat -col /path -
func BenchmarkProducePath(b *testing.B) {
	for _, batch := range []int{100, 1000} {
		for _, part := range []consumer.Partitioning{consumer.PartitionSame, consumer.PartitionHash} {
			for _, path := range []struct {
				name    string
				disable bool
			}{{"produce", true}, {"idempotent", false}} {
				b.Run(fmt.Sprintf("batch=%d/part=%s/path=%s", batch, part, path.name), func(b *testing.B) {
					benchPipeline(b, producePathRunner(batch, part, path.disable))
				})
			}
		}
	}
}

// producePathRunner runs a worker that produces every record, with the given batch size,
// partitioning and produce path.
func producePathRunner(batch int, part consumer.Partitioning, disableIdempotence bool) pipeline {
	return func(ctx context.Context, cl testbroker.Broker) error {
		cfg := benchConfig(cl.Addrs(), cl.Name("in"), cl.Name("out"), cl.Name("g"), batch)
		cfg.Partitioning, cfg.DisableIdempotence = part, disableIdempotence
		w, err := consumer.New(cfg, nopDeduper{}, kafkaKey, nil, testLog)
		if err != nil {
			return err
		}
		return w.Run(ctx)
	}
}
