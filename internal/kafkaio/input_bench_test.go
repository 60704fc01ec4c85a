//go:build unix

package kafkaio_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/segmentio/kafka-go"
)

// BenchmarkInputPath measures the worker's input fetch path alone: b.N records (keys of 12 bytes,
// 100-byte values, no headers, as BenchmarkEndToEnd in consumer), preloaded into 4 partitions of an
// in-process kfake broker over TCP, read by one reader per partition in batches of 1000 (linger
// 5ms), each record's key and value looked at. Sub-benchmarks:
//
//   - path=reader: the input path before the fetch loop of our own, kafka-go's Reader (readerBaseline below, as
//     PartitionReader was configured then: QueueCapacity 2000, MaxBytes 16 MiB).
//   - path=fetchloop: PartitionReader, read_committed.
//   - path=pool: PartitionReader through one FetchPool for the 4 readers (one fetch per broker),
//     as the worker reads.
//   - path=worker: as pool, with the worker's defaults: partitions of at most 4 MiB, requests of
//     16 MiB, and the input memory bounded at 32 MiB (DEDUP_MEMORY_LIMIT's share), which is what
//     makes the pool's buffers reused or not.
//
// It reports events/s and cpu-ns/event (the process's CPU time per record: readers and broker,
// both in this process) besides allocs/op, which is per record. Run it on 1M records, the
// baseline beside it in the same process:
//
//	go test -run '^$' -bench InputPath -benchtime 1000000x -count 6 ./internal/kafkaio/ | benchstat -col /path -
func BenchmarkInputPath(b *testing.B) {
	for _, path := range []string{"reader", "fetchloop", "pool", "worker"} {
		b.Run("path="+path, func(b *testing.B) { benchInput(b, path) })
	}
}

const benchInputPartitions = 4

func benchInput(b *testing.B, path string) {
	cl, err := embedkafka.Start(embedkafka.Options{Topics: map[string]int32{"in": benchInputPartitions}})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	per := (b.N + benchInputPartitions - 1) / benchInputPartitions
	value := make([]byte, 100)
	for p := range benchInputPartitions {
		for from := 0; from < per; from += 10000 {
			msgs := make([]kafkaio.Record, 0, 10000)
			for i := from; i < min(per, from+10000); i++ {
				msgs = append(msgs, kafkaio.Record{Key: fmt.Appendf(nil, "key-%d-%05d", p, i%100000), Value: value, Time: time.Now()})
			}
			if err := cl.Produce(context.Background(), "in", p, msgs...); err != nil {
				b.Fatal(err)
			}
		}
	}
	client := kafkaio.Conn{Brokers: cl.Addrs()}.Client(10 * time.Second)
	defer kafkaio.CloseIdle(client)
	var pool *kafkaio.FetchPool
	switch path {
	case "pool":
		pool = kafkaio.NewFetchPool(client, kafkaio.FetchPoolConfig{})
		defer pool.Close()
	case "worker":
		pool = kafkaio.NewFetchPool(client, kafkaio.FetchPoolConfig{MaxBytes: 16 << 20, MaxBufferedBytes: 32 << 20})
		defer pool.Close()
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for p := range benchInputPartitions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := drain(path, client, pool, cl.Addrs(), p, int64(per)); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), processCPU()-cpu0
	b.StopTimer()
	total := float64(per * benchInputPartitions)
	b.ReportMetric(total/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(cpu)/total, "cpu-ns/event")
}

// drain reads partition p from 0 to end through path and looks at every key and value.
// pool, when not nil, carries the fetches.
func drain(path string, client *kafka.Client, pool *kafkaio.FetchPool, brokers []string, p int, end int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// fetch returns the bytes of the keys and values of the next records, and the offset after them.
	var fetch func() (int, int64, error)
	switch path {
	case "reader":
		r := newReaderBaseline(brokers, p)
		defer r.r.Close()
		fetch = func() (int, int64, error) {
			msgs, err := r.fetch(ctx, 1000, 5*time.Millisecond)
			if err != nil {
				return 0, 0, err
			}
			n := 0
			for i := range msgs {
				n += len(msgs[i].Key) + len(msgs[i].Value)
			}
			return n, msgs[len(msgs)-1].Offset + 1, nil
		}
	default:
		cfg := kafkaio.PartitionReaderConfig{Topic: "in", Partition: p, Offset: kafka.FirstOffset, Pool: pool}
		if path == "worker" {
			cfg.MaxBytes = 4 << 20
		}
		r := kafkaio.NewPartitionReader(client, cfg)
		defer func() { <-r.Close() }()
		fetch = func() (int, int64, error) {
			b, err := r.Fetch(ctx, 1000, 5*time.Millisecond)
			if err != nil {
				return 0, 0, err
			}
			n := 0
			for i := range b.Records {
				n += len(b.Records[i].Key) + len(b.Records[i].Value)
			}
			return n, b.Next, nil
		}
	}
	sum := 0
	for next := int64(0); next < end; {
		n, after, err := fetch()
		if err != nil {
			return err
		}
		sum, next = sum+n, after
	}
	if sum == 0 {
		return fmt.Errorf("partition %d: nothing read", p)
	}
	return nil
}

// readerBaseline is the input path before the fetch loop of our own: kafka-go's Reader as PartitionReader
// configured it, and its Fetch.
type readerBaseline struct {
	r     *kafka.Reader
	batch []kafka.Message
}

func newReaderBaseline(brokers []string, p int) *readerBaseline {
	return &readerBaseline{r: kafka.NewReader(kafka.ReaderConfig{
		Brokers: brokers, Topic: "in", Partition: p, Dialer: kafkaio.Conn{Brokers: brokers}.Dialer(),
		QueueCapacity: 2000, MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 500*time.Millisecond + time.Second,
		ReadBackoffMin: 100 * time.Millisecond, ReadBackoffMax: 5 * time.Second, MaxAttempts: 3,
	})}
}

func (r *readerBaseline) fetch(ctx context.Context, max int, linger time.Duration) ([]kafka.Message, error) {
	r.batch = r.batch[:0]
	m, err := r.r.FetchMessage(ctx)
	if err != nil {
		return nil, err
	}
	r.batch = append(r.batch, m)
	bctx, cancel := context.WithDeadline(ctx, time.Now().Add(linger))
	defer cancel()
	for len(r.batch) < max {
		m, err := r.r.FetchMessage(bctx)
		if err != nil {
			break
		}
		r.batch = append(r.batch, m)
	}
	return r.batch, nil
}

// processCPU returns the CPU time (user + system) the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
