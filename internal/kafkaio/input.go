package kafkaio

import (
	"context"
	"time"

	"github.com/segmentio/kafka-go"
)

// PartitionReaderConfig configures a PartitionReader.
type PartitionReaderConfig struct {
	// Topic and Partition name the partition. Required.
	Topic     string
	Partition int
	// Offset is the first offset to read (or kafka.FirstOffset, kafka.LastOffset).
	Offset int64
	// MaxBytes caps one fetch response. Default: 16 MiB.
	MaxBytes int
	// MaxWait is how long the broker holds a fetch while no record is available. The reader
	// waits readerSlack (one second) more for the answer before it gives up on the fetch and its
	// connection. Default: 500ms.
	MaxWait time.Duration
	// QueueCapacity is the number of prefetched records buffered. Default: 2000.
	QueueCapacity int
	// Backoff spaces the retries of failed fetches: kafka-go's Reader backs off from its Min to
	// its Max, without jitter. Default: the zero Backoff's bounds.
	Backoff Backoff
	// Log receives kafka-go's log lines (sampled); nil logs nowhere.
	Log *Sampler
}

// PartitionReader reads one partition from an offset on, prefetching, for the worker's input: the
// input fetch path. It is kafka-go's Reader today, configured here; the transactional-input work
// (read_committed filtering, decoding in place with BatchDecoder) replaces it with a fetch loop on
// kafka-go's protocol/fetch behind the same methods. Fetch must not be called concurrently;
// Close may be called concurrently with Fetch.
type PartitionReader struct {
	r     *kafka.Reader
	batch Batch
}

// readerSlack is how much longer than MaxWait a PartitionReader waits for the answer to a fetch.
const readerSlack = time.Second

// NewPartitionReader returns a reader of cfg's partition over conn's connections. It connects in
// the background; errors show in Fetch. It fails only when the offset cannot be set.
//
// The kafka-go Reader gets MaxWait+readerSlack as its MaxWait: it sets the read deadline of a
// fetch to MaxWait after sending it and asks the broker to hold the fetch for MaxWait less an
// allowance for the round trip (a quarter of MaxWait below one second, else one second). Given
// MaxWait itself, an answer slower than MaxWait (or, for an idle fetch, a quarter of it after the
// broker stopped waiting) ended in an i/o timeout, a new connection and the same fetch again, and
// a broker that always answered that slowly stalled the partition for good.
func NewPartitionReader(conn Conn, cfg PartitionReaderConfig) (*PartitionReader, error) {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 16 << 20
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 500 * time.Millisecond
	}
	if cfg.QueueCapacity <= 0 {
		cfg.QueueCapacity = 2000
	}
	if cfg.Log == nil {
		cfg.Log = NewSampler(nil, 0)
	}
	backoffMin, backoffMax := cfg.Backoff.bounds()
	info, errs := cfg.Log.KafkaLoggers("kafka-reader")
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:        conn.Brokers,
		Topic:          cfg.Topic,
		Partition:      cfg.Partition,
		Dialer:         conn.Dialer(),
		QueueCapacity:  cfg.QueueCapacity,
		MinBytes:       1,
		MaxBytes:       cfg.MaxBytes,
		MaxWait:        cfg.MaxWait + readerSlack,
		ReadBackoffMin: backoffMin,
		ReadBackoffMax: backoffMax,
		MaxAttempts:    3,
		Logger:         info,
		ErrorLogger:    errs,
	})
	if err := r.SetOffset(cfg.Offset); err != nil {
		go r.Close()
		return nil, err
	}
	return &PartitionReader{r: r}, nil
}

// Batch is what PartitionReader.Fetch hands out: the next records of the partition, in offset
// order, and how far the partition was read.
type Batch struct {
	// Records are the data records of the batch. Their keys, values and headers must not be
	// changed, and are only valid until the next Fetch or Close.
	Records []kafka.Message
	// Next is the offset to commit once Records are handled: the offset after the last offset
	// the batch covers. It can be past the last record (records that are not data were skipped
	// after it), and a batch can have no records at all and only move Next.
	Next int64
	// End is where the readable part of the partition ended when the batch was fetched; End -
	// Next is the consumer lag.
	End int64
	// Aborted is the number of records of aborted transactions skipped in the batch's range.
	Aborted int
	// Start is when the batch's first record was taken.
	Start time.Time
}

// Fetch returns the next batch: up to max records (at least one) or, with no record, a move of
// Next. It waits for the first record as long as ctx allows, then linger at most for more. The
// batch and its records are only valid until the next Fetch or Close. An error means that
// nothing came before ctx ended, or that the reader reports a failure; the reader keeps retrying
// by itself (under its backoff, handing an error over only between its attempts), so the next
// Fetch waits for its retry.
func (r *PartitionReader) Fetch(ctx context.Context, max int, linger time.Duration) (*Batch, error) {
	b := &r.batch
	clear(b.Records)
	b.Records = b.Records[:0]
	m, err := r.r.FetchMessage(ctx)
	if err != nil {
		return nil, err
	}
	b.Start = time.Now()
	b.Records = append(b.Records, m)
	if max > 1 {
		bctx, cancel := context.WithDeadline(ctx, b.Start.Add(linger))
		for len(b.Records) < max {
			m, err := r.r.FetchMessage(bctx)
			if err != nil {
				break
			}
			b.Records = append(b.Records, m)
		}
		cancel()
	}
	last := &b.Records[len(b.Records)-1]
	b.Next, b.End = last.Offset+1, last.HighWaterMark
	return b, nil
}

// Close stops fetching in the background (closing an idle reader takes up to MaxWait) and returns
// a channel that is closed once it stopped. Prefetched records are dropped.
func (r *PartitionReader) Close() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		_ = r.r.Close()
		close(done)
	}()
	return done
}
