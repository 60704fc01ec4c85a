package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Transactions (KIP-98). A Producer with ProducerConfig.TransactionalID writes every record
// inside a transaction: Begin opens one, Produce adds each output partition to it on first use
// (AddPartitionsToTxn) and marks its batches transactional, SendOffsets commits consumer group
// offsets inside it (AddOffsetsToTxn, TxnOffsetCommit), and Commit or Abort ends it (EndTxn).
// Consumers under read_committed see its records and its offsets together, or neither.
//
// Fencing. Start takes the producer id with InitProducerId under the transactional id. The
// transaction coordinator then bumps the id's epoch and aborts the transaction the previous
// holder of the id left open, so from that moment the previous holder can neither write nor
// commit: its produce requests, AddPartitionsToTxn, TxnOffsetCommit and EndTxn are refused with
// PRODUCER_FENCED or INVALID_PRODUCER_EPOCH. A Producer that hears one of those is fenced for
// good: every later call returns an error wrapping ErrFenced.
//
// Retries. Requests to the transaction and group coordinators are retried under the retry policy
// (ProducerConfig.Backoff, starting at 10ms, because CONCURRENT_TRANSACTIONS after an EndTxn
// clears within milliseconds) while the answer is one retrying can fix: CONCURRENT_TRANSACTIONS,
// NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, a timeout or a lost
// connection. kafka-go looks the coordinator up before every such request, so a coordinator
// that moved is found again on the next attempt.

// ErrFenced is wrapped by the errors of a transactional Producer whose transactional id was taken
// over: another producer called InitProducerId with it, so this one must never write or commit
// again. It is permanent.
var ErrFenced = errors.New("kafkaio: producer fenced: another producer took over its transactional id")

// ErrTxnAbortable is wrapped by the error of a transactional produce whose producer state the
// broker rejected (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID): the transaction cannot
// commit and must be aborted (Abort takes a new epoch, after which the Producer can go on).
var ErrTxnAbortable = errors.New("kafkaio: the transaction failed and must be aborted")

// ErrNoTransaction is returned by a transactional Producer's Produce, SendOffsets and Commit
// when no transaction is open (see Begin).
var ErrNoTransaction = errors.New("kafkaio: no transaction is open")

// DefaultTransactionTimeout is ProducerConfig.TransactionTimeout's default: how long the
// coordinator lets a transaction stay open before it aborts it.
const DefaultTransactionTimeout = time.Minute

// txnState is the transaction state of a transactional Producer. Its methods are safe for
// concurrent use.
type txnState struct {
	id      string
	timeout time.Duration
	fenced  atomic.Pointer[error] // the error that fenced the producer; nil until then

	mu            sync.Mutex
	open          bool
	parts         map[topicPartition]bool // added to the open transaction
	groups        map[string]bool         // whose offsets the open transaction carries
	commitVersion int16                   // the TxnOffsetCommit version the group coordinator last took; 0 to negotiate
}

// Fenced returns the error that fenced p (wrapping ErrFenced), or nil.
func (p *Producer) Fenced() error {
	if p.txn == nil {
		return nil
	}
	if e := p.txn.fenced.Load(); e != nil {
		return *e
	}
	return nil
}

// Begin opens a transaction. It sends nothing: the coordinator hears of it with the first
// partition or offsets added. It fails when p is not transactional, is fenced, or a transaction
// is already open.
func (p *Producer) Begin() error {
	if p.txn == nil {
		return errors.New("kafkaio: Begin: the producer is not transactional")
	}
	if err := p.Fenced(); err != nil {
		return err
	}
	t := p.txn
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open {
		return errors.New("kafkaio: Begin: a transaction is already open")
	}
	t.open, t.parts, t.groups = true, map[topicPartition]bool{}, map[string]bool{}
	return nil
}

// reset forgets the open transaction: the producer has a new epoch, which aborted it.
func (t *txnState) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.open, t.parts, t.groups = false, nil, nil
}

// addPartition adds tp to the open transaction under identity id, once per transaction.
func (p *Producer) addPartition(ctx context.Context, tp topicPartition, id *producerID) error {
	t := p.txn
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.open {
		return Permanent(ErrNoTransaction)
	}
	if t.parts[tp] {
		return nil
	}
	err := p.coordinate(ctx, "add partition to transaction", func() error {
		res, err := p.client.AddPartitionsToTxn(ctx, &kafka.AddPartitionsToTxnRequest{
			TransactionalID: t.id, ProducerID: int(id.id), ProducerEpoch: int(id.epoch),
			Topics: map[string][]kafka.AddPartitionToTxn{tp.topic: {{Partition: tp.partition}}},
		})
		if err != nil {
			return err
		}
		for _, r := range res.Topics[tp.topic] {
			if r.Partition == tp.partition && r.Error != nil {
				return r.Error
			}
		}
		return nil
	})
	if err == nil {
		t.parts[tp] = true
	}
	return err
}

// SendOffsets commits offsets (next offset to consume, per partition of topic, and the leader
// epoch of the record before it, -1 for none, which a reader that starts there checks: KIP-320)
// of consumer group group inside the open transaction: they take effect when it commits, and
// never if it aborts. The group coordinator does not check the group's generation (the
// producer's epoch fences).
func (p *Producer) SendOffsets(ctx context.Context, group, topic string, offsets map[int]Committed) error {
	if p.txn == nil {
		return errors.New("kafkaio: SendOffsets: the producer is not transactional")
	}
	t := p.txn
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.open {
		return ErrNoTransaction
	}
	id := p.ids.current()
	if !t.groups[group] {
		err := p.coordinate(ctx, "add offsets to transaction", func() error {
			res, err := p.client.AddOffsetsToTxn(ctx, &kafka.AddOffsetsToTxnRequest{
				TransactionalID: t.id, ProducerID: int(id.id), ProducerEpoch: int(id.epoch), GroupID: group,
			})
			if err == nil {
				err = res.Error
			}
			return err
		})
		if err != nil {
			return err
		}
		t.groups[group] = true
	}
	return p.coordinate(ctx, "commit offsets in transaction", func() error {
		return p.txnOffsetCommit(ctx, id, group, topic, offsets)
	})
}

// txnOffsetCommit makes one TxnOffsetCommit request, exchanged raw with the group coordinator:
// kafka-go's TxnOffsetCommit sends leader epoch 0 for every partition (from v2 on), which a
// reader that starts at the offset would take for the record's epoch. The version the coordinator
// took is kept for the next request (it holds txn.mu) and asked again after a failure.
func (p *Producer) txnOffsetCommit(ctx context.Context, id *producerID, group, topic string, offsets map[int]Committed) error {
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = p.txn.id, group, id.id, id.epoch
	req.Generation, req.MemberID = -1, ""
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = topic
	for part, c := range offsets {
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = int32(part), c.Offset, c.LeaderEpoch
		rp.Metadata = kmsg.StringPtr(epochMetadata)
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = []kmsg.TxnOffsetCommitRequestTopic{rt}
	x := &groupExchange{group: group, rawExchange: rawExchange{clientID: clientIDOf(p.client), req: req,
		min: 0, max: maxTxnOffsetCommitVersion, version: p.txn.commitVersion}}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout(p.client))
	defer cancel()
	res, err := roundTrip(ctx, p.client, x)
	if errors.Is(err, errUnsupportedVersion) {
		return Permanent(err)
	}
	if err != nil {
		p.txn.commitVersion = 0
		return err
	}
	p.txn.commitVersion = x.version
	for _, t := range res.(*kmsg.TxnOffsetCommitResponse).Topics {
		for _, rp := range t.Partitions {
			if rp.ErrorCode != 0 {
				return kafka.Error(rp.ErrorCode)
			}
		}
	}
	return nil
}

// maxTxnOffsetCommitVersion is the last TxnOffsetCommit version kdedup sends (v2 added the
// leader epoch; v4 verifies transactions the next-generation way).
const maxTxnOffsetCommitVersion = 3

// Commit commits the open transaction: every record produced in it (each Produce call must have
// returned nil) and the offsets sent with it become visible together. On an error the outcome is
// unknown unless it wraps ErrFenced (then the transaction was aborted): the caller should Abort,
// and read back what became of it.
func (p *Producer) Commit(ctx context.Context) error { return p.end(ctx, true) }

// Abort aborts the open transaction (if any) and takes a new producer epoch, so that nothing of
// the aborted transaction still in flight can be appended afterwards and the Producer can begin
// the next one. It returns an error wrapping ErrFenced when the producer was fenced, or ctx's
// error when ctx ended first (then p is unusable until Abort succeeds).
func (p *Producer) Abort(ctx context.Context) error {
	if p.txn == nil {
		return errors.New("kafkaio: Abort: the producer is not transactional")
	}
	if err := p.Fenced(); err != nil {
		return err
	}
	if err := p.end(ctx, false); err != nil && (errors.Is(err, ErrFenced) || ctx.Err() != nil) {
		return err
	}
	return p.bump(ctx) // a new epoch: batches of the aborted transaction still in flight are refused
}

// bump takes the next epoch of the current producer id (InitProducerId with the id and epoch),
// retried under the retry policy until ctx ends; PRODUCER_FENCED fences p.
func (p *Producer) bump(ctx context.Context) error {
	cur := p.ids.current()
	var id *producerID
	err := p.coordinate(ctx, "bump the producer epoch", func() error {
		var err error
		id, err = p.ids.request(ctx, cur)
		return err
	})
	if err != nil {
		return err
	}
	p.ids.cur.Store(id)
	p.txn.reset()
	p.cfg.Log.Log(slog.LevelInfo, "producer-id:"+p.txn.id, "transactional producer: new epoch after an abort",
		"transactional_id", p.txn.id, "producer_id", id.id, "epoch", id.epoch)
	return nil
}

// end ends the open transaction with EndTxn, if the coordinator heard of it.
func (p *Producer) end(ctx context.Context, commit bool) error {
	if p.txn == nil {
		return errors.New("kafkaio: the producer is not transactional")
	}
	t := p.txn
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.open {
		if commit {
			return ErrNoTransaction
		}
		return nil
	}
	if len(t.parts) == 0 && len(t.groups) == 0 {
		t.open = false
		return nil
	}
	id := p.ids.current()
	err := p.coordinate(ctx, "end transaction", func() error {
		res, err := p.client.EndTxn(ctx, &kafka.EndTxnRequest{
			TransactionalID: t.id, ProducerID: int(id.id), ProducerEpoch: int(id.epoch), Committed: commit,
		})
		if err == nil {
			err = res.Error
		}
		return err
	})
	if err == nil || !commit {
		t.open = false
	}
	return err
}

// coordinate runs op, a request to a coordinator, under the retry policy until it succeeds,
// fails for good (fenced, or an error no retry can fix) or ctx ends, and returns its last error
// prefixed with what.
func (p *Producer) coordinate(ctx context.Context, what string, op func() error) error {
	if err := p.Fenced(); err != nil {
		return Permanent(err)
	}
	b := p.cfg.Backoff
	b.Min = 10 * time.Millisecond
	err := b.Retry(ctx, 0, func(attempt int) error {
		err := p.txnError(op())
		if err != nil && ctx.Err() == nil && attempt > 0 {
			p.cfg.Log.Log(slog.LevelWarn, "txn:"+what, "transactional producer: "+what+" failed; retrying",
				"transactional_id", p.txn.id, "attempt", attempt+1, "error", err.Error())
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("kafkaio: %s (transactional id %q): %w", what, p.txn.id, err)
	}
	return nil
}

// txnError classifies err, a coordinator's or a broker's answer in a transaction: fencing errors
// fence p and are permanent, errors no retry can fix are permanent, others are retried.
func (p *Producer) txnError(err error) error {
	var ke kafka.Error
	if err == nil || !errors.As(err, &ke) {
		return err
	}
	switch ke {
	case kafka.ProducerFenced, kafka.InvalidProducerEpoch, kafka.TransactionCoordinatorFenced, kafka.InvalidProducerIDMapping:
		return Permanent(p.fence(err))
	case kafka.TransactionalIDAuthorizationFailed, kafka.GroupAuthorizationFailed, kafka.TopicAuthorizationFailed,
		kafka.ClusterAuthorizationFailed, kafka.InvalidTransactionState, kafka.InvalidTransactionTimeout,
		kafka.UnsupportedVersion, kafka.UnsupportedForMessageFormat:
		return Permanent(err)
	}
	return err
}

// fence marks p fenced by cause (the first cause wins) and returns the error that says so.
func (p *Producer) fence(cause error) error {
	err := fmt.Errorf("%w: transactional id %q: %w", ErrFenced, p.txn.id, cause)
	if p.txn.fenced.CompareAndSwap(nil, &err) {
		p.cfg.Log.Log(slog.LevelError, "txn-fenced:"+p.txn.id,
			"transactional producer fenced: another producer took over its transactional id; it writes nothing more",
			"transactional_id", p.txn.id, "error", cause.Error())
	}
	return *p.txn.fenced.Load()
}

// txnProduceError classifies the error of a transactional produce attempt: fencing errors fence
// p, producer state errors make the transaction abortable; both are permanent. Others are
// returned as they are.
func (p *Producer) txnProduceError(err error) error {
	switch {
	case errors.Is(err, kafka.ProducerFenced), errors.Is(err, kafka.InvalidProducerEpoch),
		errors.Is(err, kafka.TransactionCoordinatorFenced):
		return Permanent(p.fence(err))
	case errors.Is(err, kafka.OutOfOrderSequenceNumber), errors.Is(err, kafka.UnknownProducerId),
		errors.Is(err, kafka.InvalidProducerIDMapping), errors.Is(err, kafka.InvalidTransactionState):
		return Permanent(fmt.Errorf("%w: %w", ErrTxnAbortable, err))
	}
	return err
}

// CommittedOffsets returns the offsets group committed for partitions of topic, with the leader
// epochs committed with them (Offset and LeaderEpoch -1 for a partition without one), from one
// OffsetFetch request to the group coordinator. Read after the transactional producer of a
// partition was started (Producer.Start), they include what the previous owner committed in a
// transaction: its open transaction was aborted by then.
func CommittedOffsets(ctx context.Context, c *kafka.Client, group, topic string, partitions []int) (map[int]Committed, error) {
	x := &groupExchange{group: group, rawExchange: rawExchange{clientID: clientIDOf(c),
		req: offsetFetchRequest(group, topic, partitions), min: minOffsetFetchVersion, max: maxOffsetFetchVersion}}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout(c))
	defer cancel()
	res, err := roundTrip(ctx, c, x)
	out := make(map[int]Committed, len(partitions))
	for _, p := range partitions {
		out[p] = Committed{Offset: -1, LeaderEpoch: -1}
	}
	if err == nil {
		err = committedIn(res.(*kmsg.OffsetFetchResponse), group, topic, out)
	}
	if errors.Is(err, kafka.GroupIdNotFound) { // a group that never committed
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kafkaio: committed offsets of group %q: %w", group, err)
	}
	return out, nil
}
