package kafkaio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/rawproduce"
)

// DefaultBatchBytes is ProducerConfig.BatchBytes's default: a broker's default message.max.bytes
// (1 MiB) less room for the request around the batch.
const DefaultBatchBytes = 1<<20 - 64<<10

// ProduceObserver hears about the produce path's failures and delivery risks (metrics.Metrics
// implements it, as part of consumer.Observer). Its methods must be safe for concurrent use.
type ProduceObserver interface {
	// ProduceError counts one failed produce attempt that will be retried (a refusal, see
	// RefusedError, is not retried and not counted).
	ProduceError()
	// ProducerReset counts one batch that the brokers rejected for its producer state and that
	// was re-sent under a new producer id (reason is one of the Reset* constants). Only such a
	// batch can be written twice with idempotent production; see Producer.
	ProducerReset(reason string)
	// UncertainRetry counts one produce retry of a batch whose previous attempt may have been
	// written (a timeout, a lost connection, REQUEST_TIMED_OUT). With idempotent production the
	// broker drops the copy; without it each one can be a duplicate in the topic.
	UncertainRetry()
}

type nopProduceObserver struct{}

func (nopProduceObserver) ProduceError()        {}
func (nopProduceObserver) ProducerReset(string) {}
func (nopProduceObserver) UncertainRetry()      {}

// ProducerConfig configures a Producer. The zero value produces without idempotence, retrying
// every failed request until the caller's context ends.
type ProducerConfig struct {
	// Idempotent makes the producer idempotent (KIP-98): batches carry a producer id and sequence
	// numbers, so that a retried batch the broker already appended is not appended again. The
	// brokers must support it (see Producer.Start). Default: false.
	Idempotent bool
	// Compression of produced batches. Default: none.
	Compression Compression
	// BatchBytes caps the estimated size of one produce request (keys, values, headers and a
	// per-record overhead); a single larger record goes alone. Default: DefaultBatchBytes.
	BatchBytes int
	// Backoff spaces the retries of a failed request. Default: the zero Backoff's defaults.
	Backoff Backoff
	// Attempts is how often one request is tried before the records it carries fail; 0 means
	// until every caller whose records it carries stopped waiting. Default: 0.
	Attempts int
	// Observer, when not nil, hears about failed attempts and delivery risks.
	Observer ProduceObserver
	// Log, when not nil, receives the producer's log lines: failed attempts (sampled per topic),
	// recoveries, producer ids and resets.
	Log *Sampler
	// OnFailing, when not nil, is called after every change of Failing, on the goroutine that
	// changed it.
	OnFailing func()
	// BeforeSend, when not nil, is called before every attempt to send a request, the first and
	// each retry. An error ends the delivery without sending: the callers whose records the
	// request carries get an error wrapping ErrNotSent and it. The worker uses it so that a
	// process resumed after a pause past its session sends nothing more, neither a request that
	// timed out meanwhile nor one it was about to send, once its partitions may have moved. It is
	// called on the sending goroutine and should be cheap when nothing changed. Default: nil.
	BeforeSend func(ctx context.Context) error
	// TransactionalID, when set, makes the producer transactional (and idempotent): records are
	// written in transactions (see txn.go) and Start fences every earlier producer of the same
	// id. Default: "" (no transactions).
	TransactionalID string
	// TransactionTimeout is how long the transaction coordinator lets a transaction of this
	// producer stay open before it aborts it. Default: DefaultTransactionTimeout.
	TransactionTimeout time.Duration
	// Memory bounds the estimated size of the records of the Produce and ProduceParts calls in
	// progress, of this producer and of the others given the same Memory: a call waits until
	// those before it leave room for its records or DefaultProduceMemoryWait passes, and a call
	// larger than the bound goes alone (see "Produce memory"). Default: nil, no bound.
	Memory *ProduceMemory
}

// Producer writes records to topic partitions with explicit partition numbers: the one produce
// path of kdedup, used by the worker, the loadtest and the embedded broker's tooling. It encodes
// record batches itself (see batch.go: format v2, kmsg) and sends them with kafka-go's RawProduce
// and acks=all, so it needs brokers of Kafka 0.11 or later.
//
// Each output partition has a sequencer that keeps exactly one batch in flight and merges what
// callers queued meanwhile into one request of at most BatchBytes (see sequencer). A failed
// request is re-sent as the same bytes under the retry policy (ProducerConfig.Backoff), so with
// idempotence the broker recognises a batch it already appended and answers with the original
// offsets (or DUPLICATE_SEQUENCE_NUMBER, taken as success) instead of appending a copy. A request
// the brokers refuse for what it carries (too large for the topic, an invalid record) is not
// retried but split, down to the record they refuse on its own (see "Refused records" in
// refuse.go).
//
// Producer resets (idempotence only). OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID and
// INVALID_PRODUCER_EPOCH on a partition's in-flight batch mean that the broker no longer holds the
// producer state that batch continues. The batch is then re-sealed under a new producer id (one
// InitProducerId shared by all partitions that reset together) with sequence 0 and re-sent;
// nothing is dropped and order is kept, because it is the only batch in flight and the next one
// waits for its ack. Other partitions keep their current id until their own in-flight batch is
// acknowledged and switch to the new one with their next batch, so their retries are still
// recognised.
//
// The residual duplicate: a reset batch that the broker had already appended under the old id
// whose acknowledgement was lost (a timeout, then the retry was rejected as above) is appended a
// second time, because nothing ties the new id to the old append. That is at most one batch
// (BatchBytes) per partition per reset, counted in ProduceObserver.ProducerReset. A batch that is
// given up on (every caller whose records it carries stopped waiting, or Attempts ran out) is
// assumed written: the sequence continues after it, and if it was not, the next batch gets
// OUT_OF_ORDER_SEQUENCE_NUMBER and resets. Its callers got an error and must not treat its
// records as written: the worker does not commit their input offsets.
//
// Its methods are safe for concurrent use.
type Producer struct {
	client *kafka.Client
	cfg    ProducerConfig
	ids    *producerIDs   // nil without idempotence
	txn    *txnState      // nil without transactions
	router *produceRouter // sends the batches by broker (see brokerproduce.go); nil with transactions

	// failing counts the requests currently being retried.
	failing atomic.Int64

	mu     sync.Mutex
	seqs   map[topicPartition]*sequencer
	limits map[string]*topicLimit // per topic
}

// topicPartition names a partition.
type topicPartition struct {
	topic     string
	partition int
}

// NewProducer returns a Producer that sends through client (whose Timeout bounds one request). It
// does not connect; see Start.
func NewProducer(client *kafka.Client, cfg ProducerConfig) *Producer {
	if cfg.BatchBytes <= 0 {
		cfg.BatchBytes = DefaultBatchBytes
	}
	if cfg.Log == nil {
		cfg.Log = NewSampler(nil, 0)
	}
	if cfg.Observer == nil {
		cfg.Observer = nopProduceObserver{}
	}
	if cfg.TransactionTimeout <= 0 {
		cfg.TransactionTimeout = DefaultTransactionTimeout
	}
	p := &Producer{client: client, cfg: cfg, seqs: make(map[topicPartition]*sequencer), limits: make(map[string]*topicLimit)}
	if cfg.TransactionalID != "" {
		cfg.Idempotent = true
		p.cfg.Idempotent = true
		p.txn = &txnState{id: cfg.TransactionalID, timeout: cfg.TransactionTimeout}
	}
	if cfg.Idempotent {
		p.ids = &producerIDs{p: p, renewing: make(chan struct{}, 1)}
	}
	if p.txn == nil {
		p.router = newProduceRouter(client)
	}
	return p
}

// Start checks that the brokers can take what the producer writes and, with idempotence, takes
// the first producer id. Unreachable brokers and coordinator errors are logged and retried under
// the retry policy until ctx ends (then it returns ctx's error); brokers that cannot serve the
// producer are an ErrProduceUnsupported or ErrIdempotenceUnsupported at once. Calling Start is
// optional: without it, the first batch of an idempotent producer takes a producer id, and
// unsupported brokers fail every request.
func (p *Producer) Start(ctx context.Context) error {
	err := p.cfg.Backoff.Retry(ctx, 0, func(int) error {
		err := p.start(ctx)
		switch {
		case errors.Is(err, ErrIdempotenceUnsupported), errors.Is(err, ErrProduceUnsupported):
			return Permanent(err)
		case err != nil && ctx.Err() == nil:
			p.cfg.Log.Log(slog.LevelWarn, "producer-start", "producer: cannot check the brokers or get a producer id; retrying",
				"error", err.Error())
		}
		return err
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil && p.txn != nil {
		p.txn.reset()
	}
	return err
}

// start checks the brokers' API versions and, with idempotence, takes a producer id.
func (p *Producer) start(ctx context.Context) error {
	av, err := p.client.ApiVersions(ctx, &kafka.ApiVersionsRequest{})
	if err == nil && av.Error != nil {
		err = av.Error
	}
	if err != nil {
		return fmt.Errorf("kafkaio: api versions: %w", err)
	}
	const apiProduce, apiInitProducerID = 0, 22
	produceMax, initOK := -1, false
	for _, k := range av.ApiKeys {
		switch k.ApiKey {
		case apiProduce:
			produceMax = k.MaxVersion
		case apiInitProducerID:
			initOK = true
		}
	}
	switch {
	case produceMax < 3 && p.ids != nil:
		return fmt.Errorf("%w: %w", ErrIdempotenceUnsupported, ErrProduceUnsupported)
	case produceMax < 3:
		return ErrProduceUnsupported
	case p.ids == nil:
		return nil
	case !initOK:
		return fmt.Errorf("%w: the brokers lack InitProducerId; Kafka 0.11 or later is needed", ErrIdempotenceUnsupported)
	}
	return p.ids.init(ctx)
}

// Failing reports whether a request is currently being retried: the brokers refuse or do not
// answer produce requests.
func (p *Producer) Failing() bool { return p.failing.Load() > 0 }

func (p *Producer) setFailing(delta int64) {
	p.failing.Add(delta)
	if p.cfg.OnFailing != nil {
		p.cfg.OnFailing()
	}
}

// sequencer returns the sequencer of topic/partition, creating it on first use.
func (p *Producer) sequencer(topic string, partition int) *sequencer {
	tp := topicPartition{topic, partition}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.seqs[tp]
	if s == nil {
		s = &sequencer{p: p, tp: tp, lim: p.limitLocked(topic), enc: batchEncoder{compression: p.cfg.Compression.codec()}}
		p.seqs[tp] = s
	}
	return s
}

// Produce writes msgs, in order, to topic/partition and returns nil once every record was
// acknowledged by all in-sync replicas. Only Key, Value, Headers and Time of the messages are
// used; a zero Time means now. Records are split into requests of at most BatchBytes, sent one
// at a time, and merged with records other callers queued for the same partition meanwhile.
//
// It returns an error once ctx ended, or once a request carrying msgs failed Attempts times
// (wrapping the last attempt's error). Some leading records may have been written then: the
// caller must not treat any of msgs as written. A record the brokers refuse for what it is
// (too large for the topic, invalid) is not retried: it fails the call with a *RefusedError
// that says which record it is; the records before it were written, the ones after it were not
// (see "Refused records" in refuse.go). It keeps no reference to msgs after it returned.
func (p *Producer) Produce(ctx context.Context, topic string, partition int, msgs []Record) error {
	if len(msgs) == 0 {
		return nil
	}
	s := p.sequencer(topic, partition)
	held, err := p.cfg.Memory.acquire(ctx, recordsSize(msgs))
	if err != nil {
		return fmt.Errorf("kafkaio: produce to %s/%d: gave up: %w", topic, partition, err)
	}
	defer p.cfg.Memory.release(held)
	return s.wait(s.submit(ctx, msgs, true))
}

// ProduceParts writes parts[q] to partition q of topic for every q, all partitions at once, and
// returns like Produce once all of them are done: with the first error that is not a
// *RefusedError, else with the RefusedErrors of all partitions that refused a record, joined
// (see Refusals). Order is kept per partition.
func (p *Producer) ProduceParts(ctx context.Context, topic string, parts [][]Record) error {
	type pending struct {
		s   *sequencer
		sub *submission
	}
	last := -1
	var size int64
	for q, msgs := range parts {
		if len(msgs) > 0 {
			last = q
			size += recordsSize(msgs)
		}
	}
	held, err := p.cfg.Memory.acquire(ctx, size)
	if err != nil {
		return fmt.Errorf("kafkaio: produce to %s: gave up: %w", topic, err)
	}
	defer p.cfg.Memory.release(held)
	var subs []pending
	for q, msgs := range parts {
		if len(msgs) > 0 {
			// The caller's goroutine may send the last partition's records itself (see
			// sequencer.submit) after the others were handed to send loops.
			s := p.sequencer(topic, q)
			subs = append(subs, pending{s, s.submit(ctx, msgs, q == last)})
		}
	}
	slices.Reverse(subs) // the inline one first: the others proceed meanwhile
	var first error
	var refused []error
	for _, x := range subs {
		var re *RefusedError
		switch err := x.s.wait(x.sub); {
		case err == nil:
		case errors.As(err, &re):
			refused = append(refused, err)
		case first == nil:
			first = err
		}
	}
	if first == nil && len(refused) > 0 {
		first = errors.Join(refused...)
	}
	return first
}

// send makes one attempt to produce the sealed batch b to tp: by broker (produceRouter) without
// transactions, alone in a request of its own with them (a request carries one transactional
// id, and each input partition has a transactional producer of its own).
// DUPLICATE_SEQUENCE_NUMBER counts as success: the broker already has the batch.
func (p *Producer) send(ctx context.Context, tp topicPartition, b *recordBatch) error {
	if p.router != nil {
		err := p.router.send(ctx, tp, b.raw)
		if errors.Is(err, kafka.DuplicateSequenceNumber) {
			return nil
		}
		return err
	}
	var txnID string
	if p.txn != nil {
		txnID = p.txn.id
	}
	res, err := p.client.RawProduce(ctx, &kafka.RawProduceRequest{
		TransactionalID: txnID,
		Topic:           tp.topic,
		Partition:       tp.partition,
		RequiredAcks:    kafka.RequireAll,
		RawRecords:      protocol.RawRecordSet{Reader: bytes.NewReader(b.raw)},
	})
	if err == nil && res != nil && res.Error != nil {
		err = res.Error
	}
	if err == nil && res == nil {
		err = errors.New("no produce response")
	}
	if errors.Is(err, kafka.DuplicateSequenceNumber) {
		return nil
	}
	return err
}

// ErrNotSent is wrapped by the error of a request that ProducerConfig.BeforeSend refused. Its
// records were not written by this attempt; an earlier attempt of the same request that failed
// may have written them.
var ErrNotSent = errors.New("kafkaio: the request was not sent")

// nextRequest returns how many leading records of msgs (at least one) go into one request of at
// most batchBytes, and their estimated size.
func nextRequest(msgs []Record, batchBytes int) (n, size int) {
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

// messageSize estimates the encoded size of m in a record batch.
func messageSize(m *Record) int {
	n := len(m.Key) + len(m.Value) + 24
	for i := range m.Headers {
		n += len(m.Headers[i].Key) + len(m.Headers[i].Value) + 4
	}
	return n
}

// uncertain reports whether a failed produce attempt may have been written anyway: the broker
// timed out waiting for replicas after appending, or the answer never arrived.
func uncertain(err error) bool {
	var ke kafka.Error
	if errors.As(err, &ke) {
		return ke == kafka.RequestTimedOut || ke == kafka.NotEnoughReplicasAfterAppend
	}
	var routing *rawproduce.Error // no leader known: nothing was sent
	return !errors.As(err, &routing) && !errors.Is(err, context.Canceled)
}

// idempotenceHint returns a log hint for produce errors that mean the brokers refuse idempotent
// production, or "".
func idempotenceHint(err error) string {
	if errors.Is(err, kafka.ClusterAuthorizationFailed) || errors.Is(err, kafka.UnsupportedForMessageFormat) {
		return "the brokers refuse idempotent production (IDEMPOTENT_WRITE permission, message format v2); disable idempotence if they cannot support it"
	}
	return ""
}
