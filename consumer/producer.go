package consumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/segmentio/kafka-go"
)

// producer writes batches to one topic partition with explicit partition numbers, retrying each
// request until the brokers acknowledge it (acks=all) or the context ends. It is safe for
// concurrent use by the partition goroutines.
type producer struct {
	client      *kafka.Client
	compression kafka.Compression
	batchBytes  int
	backoffMax  time.Duration
	obs         Observer
	log         *sampler

	// failing counts the callers currently retrying a failed request; readiness is false while
	// it is positive. notify, when set, is called after every change of failing.
	failing atomic.Int64
	notify  func()

	// idem, when set, takes over produce: idempotent production (see idempotent).
	idem *idempotent
}

// start prepares the producer before the first produce: with idempotent production it checks
// the brokers and takes a producer id (see idempotent.start).
func (p *producer) start(ctx context.Context) error {
	if p.idem == nil {
		return nil
	}
	return p.idem.start(ctx)
}

func (p *producer) setFailing(delta int64) {
	p.failing.Add(delta)
	if p.notify != nil {
		p.notify()
	}
}

// produce writes msgs, in order, to topic/partition. It splits them into requests of at most
// batchBytes (a single larger record goes alone) and sends one request at a time, so order is
// kept. A failed request is retried under kafkaio.Backoff (capped at backoffMax) until it succeeds
// or ctx is done; on failure the error says so and some leading requests may have been written already
// (the caller must not commit). Retried requests may duplicate records in the output topic, which
// is what at-least-once delivery allows without idempotence; with it (p.idem set) the
// idempotent producer writes msgs instead, and a retried request is not written twice (see
// idempotent for the one exception).
func (p *producer) produce(ctx context.Context, topic string, partition int, msgs []kafka.Message) error {
	if p.idem != nil {
		return p.idem.produce(ctx, topic, partition, msgs)
	}
	for len(msgs) > 0 {
		n, _ := nextRequest(msgs, p.batchBytes)
		if err := p.produceRequest(ctx, topic, partition, msgs[:n]); err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	return nil
}

// nextRequest returns how many leading records of msgs (at least one) go into one request of at
// most batchBytes, and their estimated size.
func nextRequest(msgs []kafka.Message, batchBytes int) (n, size int) {
	for n < len(msgs) {
		s := messageSize(&msgs[n])
		if n > 0 && size+s > batchBytes {
			break
		}
		size += s
		n++
	}
	return n, size
}

func (p *producer) produceRequest(ctx context.Context, topic string, partition int, msgs []kafka.Message) error {
	failing := false
	defer func() {
		if failing {
			p.setFailing(-1)
		}
	}()
	pobs, _ := p.obs.(ProducerObserver)
	retryUncertain := false
	err := kafkaio.Backoff{Max: p.backoffMax}.Retry(ctx, 0, func(attempt int) error {
		if retryUncertain && pobs != nil {
			pobs.UncertainRetry()
		}
		err := p.send(ctx, topic, partition, msgs)
		switch {
		case err == nil:
			if failing {
				p.log.Log(slog.LevelInfo, "produce-recovered:"+topic, "produce recovered",
					"topic", topic, "partition", partition, "attempts", attempt+1)
			}
			return nil
		case ctx.Err() != nil:
			return err
		}
		if !failing {
			failing = true
			p.setFailing(1)
		}
		p.obs.ProduceError()
		retryUncertain = uncertain(err)
		p.log.Log(slog.LevelWarn, "produce-failed:"+topic, "produce failed, retrying; input offsets are not committed until it succeeds",
			"topic", topic, "partition", partition, "records", len(msgs), "attempt", attempt+1, "error", err.Error())
		return err
	})
	if err != nil {
		return fmt.Errorf("consumer: produce to %s/%d: %w", topic, partition, err)
	}
	return nil
}

// send makes one produce request and returns its error or the broker's.
func (p *producer) send(ctx context.Context, topic string, partition int, msgs []kafka.Message) error {
	res, err := p.client.Produce(ctx, &kafka.ProduceRequest{
		Topic:        topic,
		Partition:    partition,
		RequiredAcks: kafka.RequireAll,
		Compression:  p.compression,
		Records:      &messageRecords{msgs: msgs},
	})
	switch {
	case err != nil:
		return err
	case res == nil:
		return errors.New("no produce response")
	}
	return res.Error
}

// messageSize estimates the encoded size of m in a record batch.
func messageSize(m *kafka.Message) int {
	n := len(m.Key) + len(m.Value) + 24
	for i := range m.Headers {
		n += len(m.Headers[i].Key) + len(m.Headers[i].Value) + 4
	}
	return n
}

// backoff returns the delay before retry attempt+1 under the one retry policy, kafkaio.Backoff
// with its default minimum and max as its cap.
func backoff(attempt int, max time.Duration) time.Duration {
	return kafkaio.Backoff{Max: max}.Delay(attempt)
}

// sleepCtx sleeps d and reports whether ctx is still live afterwards (kafkaio.Sleep).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	return kafkaio.Sleep(ctx, d)
}

// messageRecords is a kafka.RecordReader over messages that reuses one Record and its key and
// value readers, so producing a batch allocates nothing per record. The encoder consumes each
// record before asking for the next one.
type messageRecords struct {
	msgs       []kafka.Message
	i          int
	rec        kafka.Record
	key, value bytesReader
}

// ReadRecord returns the next record, or io.EOF after the last one.
func (r *messageRecords) ReadRecord() (*kafka.Record, error) {
	if r.i >= len(r.msgs) {
		return nil, io.EOF
	}
	m := &r.msgs[r.i]
	r.i++
	r.rec = kafka.Record{Time: m.Time, Headers: m.Headers}
	if m.Key != nil {
		r.key.Reset(m.Key)
		r.rec.Key = &r.key
	}
	if m.Value != nil {
		r.value.Reset(m.Value)
		r.rec.Value = &r.value
	}
	return &r.rec, nil
}

// bytesReader is a bytes.Reader with a no-op Close, i.e. a kafka.Bytes.
type bytesReader struct{ bytes.Reader }

// Close does nothing.
func (*bytesReader) Close() error { return nil }

// hashPartitioner places records like the Java client's default partitioner does for keyed
// records: murmur2(key) & 0x7fffffff % n. Records with a null key go to input partition % n,
// which keeps them in input order and spreads them like the input.
type hashPartitioner struct {
	ids []int // 0..n-1, reused for every call
}

func newHashPartitioner(n int) *hashPartitioner {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	return &hashPartitioner{ids: ids}
}

func (h *hashPartitioner) partition(key []byte, input int) int {
	if key == nil {
		return input % len(h.ids)
	}
	return kafka.Murmur2Balancer{Consistent: true}.Balance(kafka.Message{Key: key}, h.ids...)
}
