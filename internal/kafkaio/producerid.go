package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/segmentio/kafka-go"
)

// ErrIdempotenceUnsupported is returned by Producer.Start when the producer is idempotent and the
// brokers cannot serve it: they do not offer the InitProducerId API or the v2 record format (Kafka
// before 0.11), or they refuse this client a producer id (CLUSTER_AUTHORIZATION_FAILED: the
// principal lacks IDEMPOTENT_WRITE on the cluster and WRITE on every topic).
var ErrIdempotenceUnsupported = errors.New("kafkaio: the brokers do not support idempotent production for this client")

// ErrProduceUnsupported is returned by Producer.Start when the brokers do not take record batches
// of format v2 (Produce v3, Kafka 0.11 and later), the only format the Producer writes.
var ErrProduceUnsupported = errors.New("kafkaio: the brokers lack Produce v3 (record format v2); Kafka 0.11 or later is needed")

// Reasons of a producer reset, reported to ProduceObserver.ProducerReset. The set is closed.
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

// ResetReasons returns every reason ProduceObserver.ProducerReset can be given.
func ResetReasons() []string {
	return []string{ResetOutOfOrderSequence, ResetUnknownProducerID, ResetInvalidProducerEpoch}
}

// producerID is a producer identity handed out by InitProducerId. Identities are compared by
// pointer: each InitProducerId answer is a new *producerID.
type producerID struct {
	id    int64
	epoch int16
}

// noProducer seals the batches of a producer without idempotence.
var noProducer = &producerID{id: -1, epoch: -1}

// producerIDs holds the identity of an idempotent Producer: one producer id and epoch for all its
// partitions, renewed after a reset. Its methods are safe for concurrent use.
type producerIDs struct {
	p        *Producer
	cur      atomic.Pointer[producerID] // the newest identity; nil before the first
	renewing chan struct{}              // capacity 1: held while an identity is requested
}

// init takes the first producer id.
func (ids *producerIDs) init(ctx context.Context) error {
	id, err := ids.request(ctx, nil)
	if err != nil {
		return err
	}
	ids.cur.Store(id)
	if t := ids.p.txn; t != nil {
		ids.p.cfg.Log.Log(slog.LevelInfo, "producer-id:"+t.id, "transactional producer ready; earlier producers of its id are fenced",
			"transactional_id", t.id, "producer_id", id.id, "epoch", id.epoch)
		return nil
	}
	ids.p.cfg.Log.Log(slog.LevelInfo, "producer-id", "idempotent producer ready", "producer_id", id.id, "epoch", id.epoch)
	return nil
}

// request asks the brokers for a new producer identity. Refusals no retry can fix wrap
// ErrIdempotenceUnsupported. (kafka-go first looks up the transaction
// coordinator of the empty transactional id; if that lookup is refused, the request goes to any
// broker, which is all a producer without transactional id needs.)
//
// With prev (transactions only), the request asks to bump prev's epoch (KIP-360, InitProducerId
// v3 and later): the coordinator refuses with PRODUCER_FENCED when prev is no longer the id's
// current epoch, so a producer that another one fenced cannot take its transactional id back.
func (ids *producerIDs) request(ctx context.Context, prev *producerID) (*producerID, error) {
	req := &kafka.InitProducerIDRequest{
		TransactionTimeoutMs: 60000, // ignored without a transactional id
		ProducerID:           -1,
		ProducerEpoch:        -1,
	}
	if t := ids.p.txn; t != nil {
		req.TransactionalID, req.TransactionTimeoutMs = t.id, int(t.timeout.Milliseconds())
		if prev != nil {
			req.ProducerID, req.ProducerEpoch = int(prev.id), int(prev.epoch)
		}
	}
	res, err := ids.p.client.InitProducerID(ctx, req)
	if err == nil && res.Error != nil {
		err = res.Error
	}
	var ke kafka.Error
	switch {
	case errors.As(err, &ke) && (ke == kafka.ClusterAuthorizationFailed || ke == kafka.TransactionalIDAuthorizationFailed ||
		ke == kafka.UnsupportedVersion):
		return nil, fmt.Errorf("%w: InitProducerId refused: %w", ErrIdempotenceUnsupported, err)
	case err != nil:
		return nil, fmt.Errorf("kafkaio: init producer id: %w", err)
	case res.Producer == nil || res.Producer.ProducerID < 0:
		return nil, errors.New("kafkaio: init producer id: no producer id in the answer")
	}
	return &producerID{id: int64(res.Producer.ProducerID), epoch: int16(res.Producer.ProducerEpoch)}, nil
}

// current returns the newest producer identity, or nil before the first.
func (ids *producerIDs) current() *producerID { return ids.cur.Load() }

// renew returns an identity newer than stale: the current one if another partition already
// renewed it, otherwise a new one from InitProducerId, retried under the retry policy until ctx
// ends (then it returns ctx's error). One renewal runs at a time, so partitions that reset
// together share the new id.
func (ids *producerIDs) renew(ctx context.Context, stale *producerID) (*producerID, error) {
	select {
	case ids.renewing <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-ids.renewing }()
	if cur := ids.cur.Load(); cur != nil && cur != stale {
		return cur, nil
	}
	log := ids.p.cfg.Log
	var id *producerID
	err := ids.p.cfg.Backoff.Retry(ctx, 0, func(int) error {
		var err error
		if id, err = ids.request(ctx, nil); err != nil && ctx.Err() == nil {
			log.Log(slog.LevelWarn, "init-producer-id", "idempotent producer: cannot get a new producer id; retrying",
				"error", err.Error())
		}
		return err // a refusal too: the partition cannot go on without an id
	})
	if err != nil {
		return nil, ctx.Err()
	}
	ids.cur.Store(id)
	log.Log(slog.LevelInfo, "producer-id", "idempotent producer: new producer id", "producer_id", id.id, "epoch", id.epoch)
	return id, nil
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
