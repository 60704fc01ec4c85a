package loadtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
)

// PipeConfig configures Pipe.
type PipeConfig struct {
	Brokers     []string
	TLS         *tls.Config
	SASL        sasl.Mechanism
	InputTopic  string
	OutputTopic string
	// FromEarliest starts at the beginning of the input partitions instead of their end.
	FromEarliest bool
	// Keep, when not nil, is asked about every record; false drops it. It is called
	// concurrently for different partitions, in offset order within a partition.
	Keep func(partition int, key, value []byte, headers []kafka.Header) bool
}

// Pipe copies every record appended to partition p of the input topic after Pipe started (or
// every record, with FromEarliest) to partition p of the output topic, in order, until ctx ends; then it returns nil. It is the
// pass-through baseline of the loadtest: one fetch and one produce request (acks=all) at a time
// per partition, no consumer group, no offset commits, no deduplication. The topics must have the
// same number of partitions. It returns an error when the topics cannot be looked up or a produce
// request fails 10 times in a row.
func Pipe(ctx context.Context, cfg PipeConfig) error {
	client := newClient(Config{Brokers: cfg.Brokers, TLS: cfg.TLS, SASL: cfg.SASL})
	defer client.Transport.(*kafka.Transport).CloseIdleConnections()
	in, err := partitionCount(ctx, client, cfg.InputTopic)
	if err != nil {
		return err
	}
	out, err := partitionCount(ctx, client, cfg.OutputTopic)
	if err != nil {
		return err
	}
	if in != out {
		return fmt.Errorf("loadtest: pipe needs as many output partitions (%d) as input partitions (%d)", out, in)
	}
	starts, err := listOffsets(ctx, client, cfg.InputTopic, in, cfg.FromEarliest)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for p := range in {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := pipePartition(ctx, client, cfg, p, starts[p]); err != nil {
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

func pipePartition(ctx context.Context, client *kafka.Client, cfg PipeConfig, p int, offset int64) error {
	var recs []kafka.Record
	var batch []rawRec
	for ctx.Err() == nil {
		res, err := client.Fetch(ctx, &kafka.FetchRequest{
			Topic: cfg.InputTopic, Partition: p, Offset: offset,
			MinBytes: 1, MaxBytes: 8 << 20, MaxWait: 100 * time.Millisecond,
		})
		if err == nil && res.Error != nil {
			err = res.Error
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		batch = batch[:0]
		for {
			r, err := res.Records.ReadRecord()
			if err != nil {
				break
			}
			k, kerr := readAll(r.Key)
			v, verr := readAll(r.Value)
			if r.Offset < offset || kerr != nil || verr != nil {
				continue
			}
			offset = r.Offset + 1
			if cfg.Keep != nil && !cfg.Keep(p, k, v, r.Headers) {
				continue
			}
			batch = append(batch, rawRec{key: k, value: v, headers: r.Headers, time: r.Time})
		}
		// Produce in requests of at most 1000 records and about 512KiB (brokers cap requests).
		for len(batch) > 0 {
			n, size := 0, 0
			for n < len(batch) && n < 1000 && (n == 0 || size < 512<<10) {
				size += len(batch[n].key) + len(batch[n].value) + 64
				for _, h := range batch[n].headers {
					size += len(h.Key) + len(h.Value)
				}
				n++
			}
			if err := pipeProduce(ctx, client, cfg.OutputTopic, p, batch[:n], &recs); err != nil {
				return err
			}
			batch = batch[n:]
		}
	}
	return nil
}

// pipeProduce produces batch to topic/partition, retrying up to 10 times. It returns nil when
// ctx ends.
func pipeProduce(ctx context.Context, client *kafka.Client, topic string, p int, batch []rawRec, recs *[]kafka.Record) error {
	err := produceBatch(ctx, client, topic, p, batch, recs, nil)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func readAll(b kafka.Bytes) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	defer b.Close()
	out := make([]byte, b.Len())
	_, err := io.ReadFull(b, out)
	return out, err
}
