package loadtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// PipeConfig configures Pipe.
type PipeConfig struct {
	// Conn is the cluster: brokers (required), TLS and SASL.
	kafkaio.Conn
	InputTopic  string
	OutputTopic string
	// FromEarliest starts at the beginning of the input partitions instead of their end.
	FromEarliest bool
	// Keep, when not nil, is asked about every record; false drops it. It is called
	// concurrently for different partitions, in offset order within a partition.
	Keep func(partition int, key, value []byte, headers []kafkaio.Header) bool
}

// Pipe copies every record appended to partition p of the input topic after Pipe started (or
// every record, with FromEarliest) to partition p of the output topic, in order, until ctx ends; then it returns nil. It is the
// pass-through baseline of the loadtest: one fetch and one produce request (acks=all) at a time
// per partition, no consumer group, no offset commits, no deduplication. The topics must have the
// same number of partitions. It returns an error when the topics cannot be looked up or a produce
// request fails 10 times in a row.
func Pipe(ctx context.Context, cfg PipeConfig) error {
	client := newClient(cfg.Conn)
	defer kafkaio.CloseIdle(client)
	counts, err := kafkaio.PartitionCounts(ctx, client, cfg.InputTopic, cfg.OutputTopic)
	if err != nil {
		return err
	}
	in, out := counts[0], counts[1]
	if in != out {
		return fmt.Errorf("loadtest: pipe needs as many output partitions (%d) as input partitions (%d)", out, in)
	}
	first, end, err := kafkaio.TopicOffsets(ctx, client, cfg.InputTopic, in)
	if err != nil {
		return err
	}
	starts := end
	if cfg.FromEarliest {
		starts = first
	}
	producer := newProducer(client, nil)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for p := range in {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := pipePartition(ctx, client, producer, cfg, p, starts[p]); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// pipePartition copies partition p from offset on until ctx ends (then it returns nil), producing
// what each fetch returned before the next fetch.
func pipePartition(ctx context.Context, client *kafkaio.Client, producer *kafkaio.Producer, cfg PipeConfig, p int, offset int64) error {
	var batch []kafkaio.Record
	err := kafkaio.Read(ctx, client, kafkaio.Range{
		Topic: cfg.InputTopic, Partition: p, Start: offset, End: -1, Backoff: kafkaio.Backoff{Max: time.Second},
	}, func(fetched []kafkaio.Record) error {
		batch = batch[:0]
		for _, r := range fetched {
			if cfg.Keep != nil && !cfg.Keep(p, r.Key, r.Value, r.Headers) {
				continue
			}
			// The records stay valid until this function returns, and Produce is done with them then.
			batch = append(batch, kafkaio.Record{Key: r.Key, Value: r.Value, Headers: r.Headers, Time: r.Time})
		}
		err := producer.Produce(ctx, cfg.OutputTopic, p, batch)
		clear(batch)
		return err
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}
