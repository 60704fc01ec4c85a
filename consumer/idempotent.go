package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/rawproduce"
)

// ErrIdempotenceUnsupported is returned by Run when idempotent production is enabled (the
// default; see Config.DisableIdempotence) and the brokers cannot serve it: they do not offer the
// InitProducerId API or the v2 record format (Kafka before 0.11), or they refuse this client a
// producer id (CLUSTER_AUTHORIZATION_FAILED: the principal lacks IDEMPOTENT_WRITE on the cluster
// and WRITE on every topic).
var ErrIdempotenceUnsupported = errors.New("consumer: the brokers do not support idempotent production for this client")

// Reasons of a producer reset, reported to a ProducerObserver. The set is closed.
const (
	// ResetOutOfOrderSequence: the broker answered OUT_OF_ORDER_SEQUENCE_NUMBER to the oldest
	// unacknowledged batch of a partition, so its producer state no longer matches the producer's.
	ResetOutOfOrderSequence = "out_of_order_sequence"
	// ResetUnknownProducerID: the broker answered UNKNOWN_PRODUCER_ID: it lost the producer state.
	ResetUnknownProducerID = "unknown_producer_id"
	// ResetInvalidProducerEpoch: the broker answered INVALID_PRODUCER_EPOCH: the producer id was
	// taken over with a newer epoch.
	ResetInvalidProducerEpoch = "invalid_producer_epoch"
)

// ResetReasons returns every reason ProducerObserver.ProducerReset can be given.
func ResetReasons() []string {
	return []string{ResetOutOfOrderSequence, ResetUnknownProducerID, ResetInvalidProducerEpoch}
}

// ProducerObserver is an optional interface of an Observer (metrics.Metrics implements it) for the
// produce path's delivery risks. Its methods must be safe for concurrent use.
type ProducerObserver interface {
	// ProducerReset counts one batch that the brokers rejected for its producer state and that
	// was re-sent under a new producer id (reason is one of the Reset* constants). Only such a
	// batch can be written twice with idempotent production; see idempotent.
	ProducerReset(reason string)
	// UncertainRetry counts one produce retry of a batch whose previous attempt may have been
	// written (a timeout, a lost connection, REQUEST_TIMED_OUT). With idempotent production the
	// broker drops the copy; without it each one can be a duplicate in the output.
	UncertainRetry()
}

// producerID is a producer identity handed out by InitProducerId. Identities are compared by
// pointer: each InitProducerId answer is a new *producerID.
type producerID struct {
	id    int64
	epoch int16
}

// topicPartition names an output partition.
type topicPartition struct {
	topic     string
	partition int
}

// idempotent is the idempotent producer (KIP-98) built from kafka-go's Client: one producer id and
// epoch per worker, a sequence number per output partition, v2 record batches stamped with both
// and sent with RawProduce. A retry re-sends the same bytes, so a broker that already appended
// them answers with the original offsets (or DUPLICATE_SEQUENCE_NUMBER, taken as success) instead
// of appending a copy.
//
// Each output partition has a sequencer that owns its sequence numbers and keeps exactly one
// batch in flight (see sequencer for why not five). Callers of produce for the same partition,
// several input partitions with PartitionHash, queue behind each other, and the sequencer merges
// what is queued into one batch of at most BatchBytes.
//
// Producer resets. OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID and INVALID_PRODUCER_EPOCH
// on a partition's in-flight batch mean that the broker no longer holds the producer state that
// batch continues. The batch is then re-sealed under a new producer id (one InitProducerId shared
// by all partitions that reset together) with sequence 0 and re-sent; nothing is dropped and
// order is kept, because it is the only batch in flight and the next one waits for its ack.
// Other partitions keep their current id until their own in-flight batch is acknowledged and
// switch to the new one with their next batch, so their retries are still recognised.
//
// The residual duplicate: a reset batch that the broker had already appended under the old id
// whose acknowledgement was lost (a timeout, then the retry was rejected as above) is appended a
// second time, because nothing ties the new id to the old append. That is at most one batch
// (BatchBytes) per output partition per reset, counted in ProducerObserver.ProducerReset. A
// batch that is given up on (every caller whose records it carries stopped waiting, i.e. the
// partition's drain timed out) is assumed written: the sequence continues after it, and if it
// was not, the next batch gets OUT_OF_ORDER_SEQUENCE_NUMBER and resets. Its input offsets are
// not committed, so it is re-consumed: the crash re-delivery case.
//
// Its methods are safe for concurrent use.
type idempotent struct {
	base *producer        // client, compression, batch bytes, backoff, observer, log, readiness
	pobs ProducerObserver // nil when the Observer does not implement it

	cur      atomic.Pointer[producerID] // the newest identity; nil before start
	renewing chan struct{}              // capacity 1: held while an identity is requested

	mu   sync.Mutex
	seqs map[topicPartition]*sequencer
}

func newIdempotent(base *producer) *idempotent {
	p := &idempotent{base: base, renewing: make(chan struct{}, 1), seqs: make(map[topicPartition]*sequencer)}
	p.pobs, _ = base.obs.(ProducerObserver)
	return p
}

// start checks that the brokers support idempotent production and takes the first producer id.
// Unreachable brokers and coordinator errors are logged and retried with backoff until ctx ends;
// a broker that cannot serve idempotent production is an ErrIdempotenceUnsupported at once.
func (p *idempotent) start(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		err := p.init(ctx)
		if err == nil || errors.Is(err, ErrIdempotenceUnsupported) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p.base.log.Log(slog.LevelWarn, "init-producer-id", "idempotent producer: cannot get a producer id; retrying",
			"error", err.Error())
		if !sleepCtx(ctx, backoff(attempt, p.base.backoffMax)) {
			return ctx.Err()
		}
	}
}

// init checks the brokers' API versions and takes a producer id.
func (p *idempotent) init(ctx context.Context) error {
	av, err := p.base.client.ApiVersions(ctx, &kafka.ApiVersionsRequest{})
	if err == nil && av.Error != nil {
		err = av.Error
	}
	if err != nil {
		return fmt.Errorf("consumer: api versions: %w", err)
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
	if !initOK || produceMax < 3 {
		return fmt.Errorf("%w: the brokers lack InitProducerId or Produce v3 (record format v2); Kafka 0.11 or later is needed",
			ErrIdempotenceUnsupported)
	}
	id, err := p.initProducerID(ctx)
	if err != nil {
		return err
	}
	p.cur.Store(id)
	p.base.log.Log(slog.LevelInfo, "producer-id", "idempotent producer ready", "producer_id", id.id, "epoch", id.epoch)
	return nil
}

// initProducerID asks the brokers for a new producer identity. Refusals no retry can fix are
// wrapped in ErrIdempotenceUnsupported. (kafka-go first looks up the transaction coordinator of
// the empty transactional id; if that lookup is refused, the request goes to any broker, which
// is all a producer without transactional id needs.)
func (p *idempotent) initProducerID(ctx context.Context) (*producerID, error) {
	res, err := p.base.client.InitProducerID(ctx, &kafka.InitProducerIDRequest{
		TransactionTimeoutMs: 60000, // ignored without a transactional id
		ProducerID:           -1,
		ProducerEpoch:        -1,
	})
	if err == nil && res.Error != nil {
		err = res.Error
	}
	var ke kafka.Error
	switch {
	case errors.As(err, &ke) && (ke == kafka.ClusterAuthorizationFailed || ke == kafka.TransactionalIDAuthorizationFailed ||
		ke == kafka.UnsupportedVersion):
		return nil, fmt.Errorf("%w: InitProducerId refused: %w", ErrIdempotenceUnsupported, err)
	case err != nil:
		return nil, fmt.Errorf("consumer: init producer id: %w", err)
	case res.Producer == nil || res.Producer.ProducerID < 0:
		return nil, errors.New("consumer: init producer id: no producer id in the answer")
	}
	return &producerID{id: int64(res.Producer.ProducerID), epoch: int16(res.Producer.ProducerEpoch)}, nil
}

// current returns the newest producer identity, or nil before start.
func (p *idempotent) current() *producerID { return p.cur.Load() }

// renew returns an identity newer than stale: the current one if another partition already
// renewed it, otherwise a new one from InitProducerId, retried with backoff until ctx ends. One
// renewal runs at a time, so partitions that reset together share the new id.
func (p *idempotent) renew(ctx context.Context, stale *producerID) (*producerID, error) {
	select {
	case p.renewing <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-p.renewing }()
	if cur := p.cur.Load(); cur != nil && cur != stale {
		return cur, nil
	}
	for attempt := 0; ; attempt++ {
		id, err := p.initProducerID(ctx)
		if err == nil {
			p.cur.Store(id)
			p.base.log.Log(slog.LevelInfo, "producer-id", "idempotent producer: new producer id",
				"producer_id", id.id, "epoch", id.epoch)
			return id, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		p.base.log.Log(slog.LevelWarn, "init-producer-id", "idempotent producer: cannot get a new producer id; retrying",
			"error", err.Error())
		if !sleepCtx(ctx, backoff(attempt, p.base.backoffMax)) {
			return nil, ctx.Err()
		}
	}
}

// sequencer returns the sequencer of topic/partition, creating it on first use.
func (p *idempotent) sequencer(topic string, partition int) *sequencer {
	tp := topicPartition{topic, partition}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.seqs[tp]
	if s == nil {
		s = &sequencer{p: p, tp: tp, enc: batchEncoder{compression: p.base.compression}}
		p.seqs[tp] = s
	}
	return s
}

// produce writes msgs, in order, to topic/partition and returns once every record was
// acknowledged, or with an error once ctx ended (some leading records may have been written
// then; the caller must not commit). It keeps no reference to msgs after it returned.
func (p *idempotent) produce(ctx context.Context, topic string, partition int, msgs []kafka.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	s := p.sequencer(topic, partition)
	return s.wait(s.submit(ctx, msgs, true))
}

// produceParts writes parts[q] to topic partition q for every q, all partitions at once, and
// returns like produce once all of them are done. Order is kept per partition.
func (p *idempotent) produceParts(ctx context.Context, topic string, parts [][]kafka.Message) error {
	type pending struct {
		s   *sequencer
		sub *submission
	}
	last := -1
	for q, msgs := range parts {
		if len(msgs) > 0 {
			last = q
		}
	}
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
	for _, x := range subs {
		if err := x.s.wait(x.sub); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// resetReason returns the reset reason for a produce error that calls for a new producer id,
// or "".
func resetReason(err error) string {
	switch {
	case errors.Is(err, kafka.OutOfOrderSequenceNumber):
		return ResetOutOfOrderSequence
	case errors.Is(err, kafka.UnknownProducerId):
		return ResetUnknownProducerID
	case errors.Is(err, kafka.InvalidProducerEpoch):
		return ResetInvalidProducerEpoch
	}
	return ""
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
