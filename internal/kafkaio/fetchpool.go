package kafkaio

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// A FetchPool sends one Fetch request per broker at a time, carrying every partition of its
// readers that the broker leads, instead of one request (and one connection) per partition.
// Each broker's requests belong to a fetch session (KIP-227): after the first full fetch, a
// request names only the partitions whose fetch offset changed and the partitions to forget, and
// the broker answers only the partitions with something new.
//
// Readers (PartitionReaderConfig.Pool) hand the pool one fetch each at a time, and only once the
// records of their previous answer were taken: a partition whose reader's buffer is full (its
// consumer is slow or blocked) has no fetch waiting, so it is left out of the next request
// (forgotten from the session) and never holds the other partitions back.

// FetchPoolConfig configures a FetchPool.
type FetchPoolConfig struct {
	// Isolation says which records of transactional producers are read. Every reader of the pool
	// reads with it. Default: ReadCommitted.
	Isolation Isolation
	// MaxWait is how long a broker holds a fetch while none of its partitions has records, and
	// how long a partition waits for an answer before it is answered without records (its
	// offsets as last seen). Default: 500ms.
	MaxWait time.Duration
	// MaxBytes caps one broker's fetch response (each partition is capped by its reader's
	// MaxBytes too). Default: 64 MiB.
	MaxBytes int
	// MaxBufferedBytes bounds the input memory of the pool, its brokers' and its readers'
	// buffers together (see "Input memory"). Default: 0, not bounded.
	MaxBufferedBytes int64
	// MaxRecordBytes bounds the decoded records the pool's readers hand out and hold at once,
	// all of them together: their Record values and headers (see "Record memory between
	// batches"). A Fetch ends its batch early, after at least MinBatchInHand records, while the
	// readers hold more. Default: DefaultMaxRecordBytes.
	MaxRecordBytes int64
}

// FetchPool routes the fetches of many PartitionReaders to the leaders of their partitions, one
// request in flight per broker (see the file comment). It is safe for concurrent use. Close it
// once its readers are closed.
type FetchPool struct {
	client   *kafka.Client
	cfg      FetchPoolConfig
	clientID string
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	leaders leaderCache
	acct    *inputAccount // the input memory of the brokers and readers
	slabs   *slabPool     // the readers' record and header slices between batches

	mu       sync.Mutex
	brokers  map[int32]*brokerFetcher
	metaNext map[string]*metaCall // by topic: the leader look-up the next readers to ask share

	lookups chan struct{} // the slots of the readers' offset lookups
}

// lookupSlots is how many offset lookups (ListOffsets) of a pool's readers run at once: each
// takes a connection to the partition's leader while it runs, so 2 keeps the connections per
// broker few when every reader looks its offsets up at once (at the start, or while blocked).
const lookupSlots = 2

// ErrPoolClosed is returned by the fetches of a closed FetchPool.
var ErrPoolClosed = errors.New("kafkaio: fetch pool closed")

// NewFetchPool returns a pool that fetches through client (a Client made by Conn.Client: its
// Transport is used, one pooled connection per broker for fetches).
func NewFetchPool(client *kafka.Client, cfg FetchPoolConfig) *FetchPool {
	if cfg.Isolation == "" {
		cfg.Isolation = ReadCommitted
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 500 * time.Millisecond
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 64 << 20
	}
	if cfg.MaxRecordBytes <= 0 {
		cfg.MaxRecordBytes = DefaultMaxRecordBytes
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &FetchPool{
		client: client, cfg: cfg, clientID: clientIDOf(client), ctx: ctx, cancel: cancel,
		leaders: leaderCache{client: client, timeout: cfg.MaxWait + FetchSlack}, brokers: map[int32]*brokerFetcher{},
		lookups: make(chan struct{}, lookupSlots), acct: &inputAccount{limit: cfg.MaxBufferedBytes},
		slabs: newSlabPool(cfg.MaxRecordBytes),
	}
	// The leaders come from the readers' shared leader-epoch look-ups: one Metadata request per
	// topic, in a lookup slot, instead of a second request beside them outside the slots.
	p.leaders.shared = p.sharedMetadata
	return p
}

// Close stops every broker's fetching; fetches waiting fail with ErrPoolClosed. It waits for the
// pool's goroutines to end.
func (p *FetchPool) Close() {
	p.cancel()
	p.wg.Wait()
}

// fetch sends f's partition fetch with the next request to the partition's leader and returns
// the partition's answer, as fetchPartition does: a partition error is a kafka.Error, returned
// with the response, whose buffer the caller gives back to f.bufs either way. It waits until
// ctx ends; the pool bounds each broker request by MaxWait plus FetchSlack.
func (p *FetchPool) fetch(ctx context.Context, f *fetchRequest) (*fetchResponse, error) {
	tp := topicPartition{f.topic, int(f.partition)}
	id, err := p.leaders.leader(ctx, tp)
	if err != nil {
		return nil, err
	}
	b := p.broker(id)
	if b == nil {
		return nil, ErrPoolClosed
	}
	w := &want{tp: tp, offset: f.offset, maxBytes: f.maxBytes, epoch: f.epoch, bufs: f.bufs, since: time.Now(), done: make(chan wantResult, 1)}
	b.add(w)
	select {
	case r := <-w.done:
		return r.res, r.err
	case <-ctx.Done():
		if !b.remove(w) { // answered meanwhile
			if r := <-w.done; r.res != nil {
				r.res.free(f.bufs)
			}
		}
		return nil, ctx.Err()
	}
}

// Lookup runs fn, a request of the pool's readers besides their fetches (an offset or metadata
// lookup), in one of the pool's lookup slots once one is free, and returns its error; ctx's error
// if ctx ends first. Readers that look up at once (at an assignment) then share a few
// connections instead of opening one each. It is safe for concurrent use.
func (p *FetchPool) Lookup(ctx context.Context, fn func() error) error {
	select {
	case p.lookups <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-p.lookups }()
	return fn()
}

// broker returns the fetcher of broker id, starting it when needed; nil once the pool is closed.
func (p *FetchPool) broker(id int32) *brokerFetcher {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		return nil
	}
	b := p.brokers[id]
	if b == nil {
		b = newBrokerFetcher(p, id)
		p.brokers[id] = b
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			b.run(p.ctx)
		}()
	}
	return b
}
