package kafkaio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/produce"
	"github.com/segmentio/kafka-go/protocol/rawproduce"
)

// Produce requests by broker. Each partition's sequencer keeps one batch in flight and seals it
// with its own producer id and sequence numbers (sequencer.go); the batches that partitions led by
// the same broker have ready at the same time go to that broker together, as one Produce request
// with a partition each, as the Java producer and franz-go send them. A broker has at most
// produceInFlight requests in flight, so the producer holds that many connections to it, however
// many partitions it leads. A partition is never in two requests in flight at once, not even
// after its caller stopped waiting for the first: a later batch cannot overtake an earlier one
// on another connection.

// produceInFlight is how many produce requests one broker has in flight at once.
const produceInFlight = 3

// defaultProduceTimeout bounds a produce request of a Client without a Timeout.
const defaultProduceTimeout = 10 * time.Second

// produceRouter sends the non-transactional batches of a Producer by broker. It is safe for
// concurrent use.
type produceRouter struct {
	client  *kafka.Client
	leaders leaderCache

	mu      sync.Mutex
	brokers map[int32]*brokerProducer
}

// produceWant is one partition's sealed batch waiting for its broker's next request.
type produceWant struct {
	tp   topicPartition
	raw  []byte
	ctx  context.Context // the caller's: the request is abandoned once all its callers' ended
	done chan error      // capacity 1: the partition's result, sent once
}

// brokerProducer gathers the batches of one broker's partitions into requests. Its methods are
// safe for concurrent use.
type brokerProducer struct {
	r  *produceRouter
	id int32

	mu       sync.Mutex
	pending  []*produceWant
	busy     map[topicPartition]bool // partitions in a request in flight
	inFlight int
}

func newProduceRouter(client *kafka.Client) *produceRouter {
	return &produceRouter{
		client: client, brokers: map[int32]*brokerProducer{},
		leaders: leaderCache{client: client, timeout: requestTimeout(client)},
	}
}

// requestTimeout returns how long one produce request of client may take: its Timeout, else
// defaultProduceTimeout.
func requestTimeout(client *kafka.Client) time.Duration {
	if client != nil && client.Timeout > 0 {
		return client.Timeout
	}
	return defaultProduceTimeout
}

// send makes one attempt to write the sealed batch raw to tp with acks=all, in a request with the
// batches of other partitions led by the same broker, and returns the partition's result: nil,
// a kafka.Error (with the broker's message), a *rawproduce.Error when no leader is known
// (nothing was sent), or the request's failure. It returns ctx's error once ctx ends first.
func (r *produceRouter) send(ctx context.Context, tp topicPartition, raw []byte) error {
	id, err := r.leaders.leader(ctx, tp)
	if err != nil {
		return rawproduce.NewError(err)
	}
	b := r.broker(id)
	w := &produceWant{tp: tp, raw: raw, ctx: ctx, done: make(chan error, 1)}
	b.add(w)
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
		b.withdraw(w)
		return ctx.Err()
	}
}

// broker returns the producer of broker id, creating it when needed.
func (r *produceRouter) broker(id int32) *brokerProducer {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.brokers[id]
	if b == nil {
		b = &brokerProducer{r: r, id: id, busy: map[topicPartition]bool{}}
		r.brokers[id] = b
	}
	return b
}

// add queues w and sends what can be sent.
func (b *brokerProducer) add(w *produceWant) {
	b.mu.Lock()
	b.pending = append(b.pending, w)
	b.mu.Unlock()
	b.kick()
}

// withdraw drops w if it still waits; once sent, its request runs to its end and its partition
// stays busy until then.
func (b *brokerProducer) withdraw(w *produceWant) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, x := range b.pending {
		if x == w {
			b.pending = append(b.pending[:i], b.pending[i+1:]...)
			return
		}
	}
}

// kick starts requests while fewer than produceInFlight are in flight and batches of partitions
// not in flight wait.
func (b *brokerProducer) kick() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.inFlight < produceInFlight {
		ws := b.take()
		if len(ws) == 0 {
			return
		}
		b.inFlight++
		go b.roundTrip(ws)
	}
}

// take removes and returns the waiting batches whose partitions are not in flight, marking them
// busy. b.mu is held.
func (b *brokerProducer) take() []*produceWant {
	var ws []*produceWant
	keep := b.pending[:0]
	for _, w := range b.pending {
		if b.busy[w.tp] {
			keep = append(keep, w)
			continue
		}
		b.busy[w.tp] = true
		ws = append(ws, w)
	}
	clear(b.pending[len(keep):])
	b.pending = keep
	return ws
}

// roundTrip sends ws as one request, hands each partition its result, and starts what waits.
func (b *brokerProducer) roundTrip(ws []*produceWant) {
	errs := b.exchange(ws)
	b.mu.Lock()
	b.inFlight--
	for i, w := range ws {
		delete(b.busy, w.tp)
		if errs[i] != nil && leaderGone(errs[i]) {
			b.r.leaders.forget(w.tp)
		}
		w.done <- errs[i]
	}
	b.mu.Unlock()
	b.kick()
}

// exchange sends the request of ws and returns each partition's result, in ws's order.
func (b *brokerProducer) exchange(ws []*produceWant) []error {
	timeout := requestTimeout(b.r.client)
	ctx, cancel := callersContext(ws, timeout)
	defer cancel()
	req := &rawproduce.Request{Acks: int16(kafka.RequireAll), Timeout: int32(timeout.Milliseconds())}
	for _, w := range ws {
		i := slices.IndexFunc(req.Topics, func(t rawproduce.RequestTopic) bool { return t.Topic == w.tp.topic })
		if i < 0 {
			i = len(req.Topics)
			req.Topics = append(req.Topics, rawproduce.RequestTopic{Topic: w.tp.topic})
		}
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rawproduce.RequestPartition{
			Partition: int32(w.tp.partition), RecordSet: protocol.RawRecordSet{Reader: bytes.NewReader(w.raw)},
		})
	}
	errs := make([]error, len(ws))
	rt := b.r.client.Transport
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	m, err := rt.RoundTrip(ctx, b.r.client.Addr, req)
	if err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("kafkaio: produce to broker %d: %w", b.id, err)
		}
		return errs
	}
	return partitionResults(ws, m.(*produce.Response), errs)
}

// callersContext returns the context of a request carrying ws: it ends after timeout, at the
// latest deadline of ws's callers if they all have one, or once the contexts of all of ws's
// callers ended, as a request of one partition would be abandoned (not sent, or not waited for)
// once its caller's context ended. The deadline matters: kafka-go's connections write and read
// under the context's deadline, and a request still queued for its connection once it passed is
// not written.
func callersContext(ws []*produceWant, timeout time.Duration) (context.Context, context.CancelFunc) {
	if len(ws) == 1 {
		return context.WithTimeout(ws[0].ctx, timeout)
	}
	ctx, cancel := context.WithDeadline(context.Background(), callersDeadline(ws, time.Now().Add(timeout)))
	left := int64(len(ws))
	var mu sync.Mutex
	stops := make([]func() bool, len(ws))
	for i, w := range ws {
		stops[i] = context.AfterFunc(w.ctx, func() {
			mu.Lock()
			defer mu.Unlock()
			if left--; left == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// callersDeadline returns the latest deadline of ws's callers, or limit if one has none or it is
// later.
func callersDeadline(ws []*produceWant, limit time.Time) time.Time {
	var latest time.Time
	for _, w := range ws {
		d, ok := w.ctx.Deadline()
		if !ok {
			return limit
		}
		if d.After(latest) {
			latest = d
		}
	}
	if latest.After(limit) {
		return limit
	}
	return latest
}

// errNoPartitionResult is the result of a partition that a produce response left out.
var errNoPartitionResult = errors.New("kafkaio: the produce response has no result for the partition")

// partitionResults fills errs with the result of each of ws's partitions in res.
func partitionResults(ws []*produceWant, res *produce.Response, errs []error) []error {
	for i, w := range ws {
		errs[i] = errNoPartitionResult
		for _, t := range res.Topics {
			if t.Topic != w.tp.topic {
				continue
			}
			for _, p := range t.Partitions {
				if int(p.Partition) == w.tp.partition {
					errs[i] = partitionError(p.ErrorCode, p.ErrorMessage)
				}
			}
		}
	}
	return errs
}

// partitionError returns a partition's produce error code as a kafka.Error, with the broker's
// message when it gave one; nil for 0.
func partitionError(code int16, message string) error {
	switch {
	case code == 0:
		return nil
	case message == "":
		return kafka.Error(code)
	}
	return fmt.Errorf("%w: %s", kafka.Error(code), message)
}

// leaderGone reports whether err says the partition's leader is not the broker asked, or that
// the request did not get through: the leader is looked up again before the next attempt.
func leaderGone(err error) bool {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return true
	}
	return ke == kafka.NotLeaderForPartition || ke == kafka.LeaderNotAvailable || ke == kafka.UnknownTopicOrPartition
}
