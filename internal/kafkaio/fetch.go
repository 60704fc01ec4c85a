package kafkaio

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fetch requests go through kafka-go's Transport (its connection pools, TLS, SASL, metadata and
// leader routing) but are written and read here: a fetchRequest is a protocol.RawExchanger, so
// the Transport hands it the connection to the partition's leader, and it reads the response
// into one buffer of its own instead of letting kafka-go decode the records one allocation at a
// time. kmsg decodes the response around the records (partitions, error codes, high watermark,
// last stable offset, aborted transactions) in place, and leaves the record batches as a slice of
// that buffer for BatchDecoder and recordSet.

// Isolation says which records of transactional producers a read returns: Kafka's
// isolation.level.
type Isolation string

const (
	// ReadCommitted returns the records of committed transactions and records written outside
	// transactions, up to the partition's last stable offset (the first offset of the oldest
	// transaction still open): nothing after an open transaction is read until it ends. Records
	// of aborted transactions are skipped. The zero Isolation means ReadCommitted.
	ReadCommitted Isolation = "read_committed"
	// ReadUncommitted returns every data record up to the high watermark, those of aborted and
	// still open transactions included.
	ReadUncommitted Isolation = "read_uncommitted"
)

// Isolations returns the valid Isolation values.
func Isolations() []Isolation { return []Isolation{ReadCommitted, ReadUncommitted} }

// Valid reports whether i is ReadCommitted, ReadUncommitted or empty (ReadCommitted).
func (i Isolation) Valid() bool { return i == "" || i == ReadCommitted || i == ReadUncommitted }

// committed reports whether i reads committed data only.
func (i Isolation) committed() bool { return i != ReadUncommitted }

// level returns i as the isolation level of fetch and list-offsets requests.
func (i Isolation) level() kafka.IsolationLevel {
	if i.committed() {
		return kafka.ReadCommitted
	}
	return kafka.ReadUncommitted
}

const (
	// minFetchVersion is the first Fetch version with an isolation level, the last stable offset
	// and aborted transactions in its response (Kafka 0.11).
	minFetchVersion = 4
	// maxFetchVersion is the last non-flexible Fetch version, kafka-go's highest.
	maxFetchVersion = 11
)

// FetchSlack is how much longer than the broker may hold a fetch (its MaxWait) a PartitionReader
// or Read waits for the answer: enough for a new connection (the dial timeout of Conn.Transport,
// TLS and SASL included) as well as for a slow broker. A broker that takes longer loses the fetch and
// its connection, and the same fetch is sent again.
const FetchSlack = 5 * time.Second

// ErrFetchUnsupported is wrapped by the fetch error of a broker that cannot serve Fetch v4
// (Kafka before 0.11): without it there is no isolation level and no aborted transaction list.
var ErrFetchUnsupported = errors.New("kafkaio: the broker does not support Fetch v4 (Kafka 0.11 or later is needed)")

// fetchRequest is one Fetch request of one partition. It is used for one round trip.
type fetchRequest struct {
	clientID  string
	topic     string
	partition int32
	offset    int64
	maxWait   time.Duration
	maxBytes  int32
	isolation Isolation
	bufs      *bufferPool
	version   int16 // negotiated for the connection, set by Required
	// epoch is the partition's leader epoch as the reader knows it (see "Leader epochs"); -1
	// (as Read sends) fetches from whichever leader answers.
	epoch int32
}

// fetchResponse is the answer to a fetchRequest: the partition's part of the response, decoded in
// place in buf, or, for an answer of a FetchPool, in frame: the broker's response, shared by the
// answers of its partitions.
type fetchResponse struct {
	buf   []byte
	frame *sharedFrame
	part  *kmsg.FetchResponseTopicPartition
	// from is the offset that was fetched.
	from int64
}

// free gives r's memory back: its share of the frame, else its buffer to own.
func (r *fetchResponse) free(own *bufferPool) {
	if r.frame != nil {
		r.frame.release()
		r.frame = nil
		return
	}
	own.put(r.buf)
	r.buf = nil
}

// sharedFrame is one broker response of a FetchPool, which the answers of its partitions are
// decoded in, in place (no partition is copied out of it). It goes back to its pool when the last
// of them and the broker's fetcher released it. release is safe for concurrent use.
type sharedFrame struct {
	buf  []byte
	pool *bufferPool
	refs atomic.Int32
}

// newSharedFrame returns a frame of buf, of pool, held once (by the broker's fetcher).
func newSharedFrame(buf []byte, pool *bufferPool) *sharedFrame {
	f := &sharedFrame{buf: buf, pool: pool}
	f.refs.Store(1)
	return f
}

// hold adds a holder of f.
func (f *sharedFrame) hold() { f.refs.Add(1) }

// release drops a holder of f; the last one gives the buffer back to the pool.
func (f *sharedFrame) release() {
	if f.refs.Add(-1) == 0 {
		f.pool.put(f.buf)
		f.buf = nil
	}
}

// unshare copies r's records out of its frame into a buffer of own and releases the frame, so
// that an answer that waits long does not hold a whole broker response; r owns a buffer then.
func (r *fetchResponse) unshare(own *bufferPool) {
	if r.frame == nil {
		return
	}
	buf := own.get(len(r.part.RecordBatches))
	copy(buf, r.part.RecordBatches)
	r.part.RecordBatches, r.buf = buf, buf
	r.frame.release()
	r.frame = nil
}

// ApiKey implements protocol.Message.
func (*fetchRequest) ApiKey() protocol.ApiKey { return protocol.Fetch }

// ApiKey implements protocol.Message.
func (*fetchResponse) ApiKey() protocol.ApiKey { return protocol.Fetch }

// Broker implements protocol.BrokerMessage: the request goes to the partition's leader.
func (f *fetchRequest) Broker(c protocol.Cluster) (protocol.Broker, error) {
	t, ok := c.Topics[f.topic]
	if !ok {
		return protocol.Broker{}, fmt.Errorf("kafkaio: topic %q not in metadata: %w", f.topic, kafka.UnknownTopicOrPartition)
	}
	p, ok := t.Partitions[f.partition]
	if !ok {
		return protocol.Broker{}, fmt.Errorf("kafkaio: partition %s/%d not in metadata: %w", f.topic, f.partition, kafka.UnknownTopicOrPartition)
	}
	b, ok := c.Brokers[p.Leader]
	if !ok {
		return protocol.Broker{}, fmt.Errorf("kafkaio: no leader known for %s/%d: %w", f.topic, f.partition, kafka.LeaderNotAvailable)
	}
	return b, nil
}

// Required implements protocol.RawExchanger: every fetch is exchanged raw.
func (f *fetchRequest) Required(versions map[protocol.ApiKey]int16) bool {
	f.version = min(versions[protocol.Fetch], maxFetchVersion)
	return true
}

// correlationIDs numbers the raw exchanges; a connection carries one request at a time, so any
// number that the response echoes will do.
var correlationIDs atomic.Int32

// RawExchange implements protocol.RawExchanger: it writes the request on the connection and
// reads the response into a buffer of f.bufs.
func (f *fetchRequest) RawExchange(rw io.ReadWriter) (protocol.Message, error) {
	if f.version < minFetchVersion {
		return nil, ErrFetchUnsupported
	}
	req := kmsg.NewFetchRequest()
	req.Version = f.version
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(f.maxWait.Milliseconds())
	req.MinBytes = 1
	// The partition's limit binds: kfake leaves out a partition's aborted transactions when the
	// request's limit ends the response (a real broker lists them either way).
	req.MaxBytes = math.MaxInt32
	if f.isolation.committed() {
		req.IsolationLevel = 1
	}
	req.SessionEpoch = -1 // a full fetch outside any fetch session
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = f.topic
	rp := kmsg.NewFetchRequestTopicPartition()
	setPartitionFields(&rp, f.partition, f.offset, f.maxBytes, f.epoch)
	rt.Partitions = []kmsg.FetchRequestTopicPartition{rp}
	req.Topics = []kmsg.FetchRequestTopic{rt}
	id := correlationIDs.Add(1)
	if _, err := rw.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID(f.clientID)).AppendRequest(nil, &req, id)); err != nil {
		return nil, err
	}
	return f.readResponse(rw, id)
}

// setPartitionFields fills in what a fetch asks of one partition: where to read from, how much,
// and the leader epoch the reader knows (Fetch v9 on; older versions leave it out; -1 when
// unknown). Both the single-partition fetch and the per-broker fetch (brokerFetch) build their
// partitions with it.
func setPartitionFields(rp *kmsg.FetchRequestTopicPartition, partition int32, offset int64, maxBytes, epoch int32) {
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, maxBytes
	rp.CurrentLeaderEpoch = epoch
}

// readResponse reads the response to request id from r into a buffer of f.bufs and decodes it.
func (f *fetchRequest) readResponse(r io.Reader, id int32) (*fetchResponse, error) {
	buf, err := readFrame(r, id, f.maxBytes, f.bufs)
	if err != nil {
		return nil, err
	}
	kr := kmsg.FetchResponse{Version: f.version}
	if err := kr.UnsafeReadFrom(buf[4:]); err != nil {
		f.bufs.put(buf)
		return nil, fmt.Errorf("kafkaio: decoding fetch response: %w", err)
	}
	res := &fetchResponse{buf: buf, from: f.offset}
	if kr.ErrorCode != 0 {
		return res, nil // fetchPartition reports it
	}
	for i := range kr.Topics {
		t := &kr.Topics[i]
		for j := range t.Partitions {
			if t.Topic == f.topic && t.Partitions[j].Partition == f.partition {
				res.part = &t.Partitions[j]
			}
		}
	}
	if res.part == nil {
		res.part = &kmsg.FetchResponseTopicPartition{ErrorCode: int16(kafka.UnknownTopicOrPartition)}
	}
	return res, nil
}

// ErrResponseTooLarge is wrapped by the error of a fetch whose response announces more bytes than
// maxResponseBytes allows: nothing is allocated for it, and its connection is closed.
var ErrResponseTooLarge = errors.New("kafkaio: fetch response too large")

// maxBatchWireBytes is the largest record batch a fetch reads past its size limit. A broker always
// sends the first batch of a partition whole, however much larger than the fetch's limit it is
// (KIP-74), up to the topic's max.message.bytes; a producer cannot send a batch above the broker's
// socket.request.max.bytes, 100 MiB by default.
const maxBatchWireBytes = 128 << 20

// maxResponseBytes returns the largest fetch response read for a fetch of at most maxBytes
// bytes: maxBytes, one batch past it (maxBatchWireBytes), and the response's own fields
// (aborted transactions). The 4-byte size prefix a broker sends is checked against it before
// anything is allocated, so a broker (or anything between it and the worker) cannot make the
// reader allocate up to 2 GiB. The fetch size therefore need not be above the input topic's
// max.message.bytes.
func maxResponseBytes(maxBytes int32) int64 {
	return int64(maxBytes) + maxBatchWireBytes + 1<<20
}

// wholeResponseBytes returns the size up to which a response's buffer is allocated at once, for
// a fetch of at most maxBytes: twice it plus 1 MiB. A larger response (one batch far past the
// limit) is read into a buffer that grows as its bytes arrive, so a size prefix that lies costs
// only what the peer really sends.
func wholeResponseBytes(maxBytes int32) int {
	return int(min(2*int64(maxBytes)+1<<20, maxResponseBytes(maxBytes)))
}

// fetchPartition sends f through c's Transport, within ctx, and returns the partition's part of
// the response. A partition error is returned as a kafka.Error (errors.Is works with
// kafka.OffsetOutOfRange and the others), together with the response, whose buffer the caller
// gives back to f.bufs either way.
func fetchPartition(ctx context.Context, c *kafka.Client, f *fetchRequest) (*fetchResponse, error) {
	m, err := transportOf(c).RoundTrip(ctx, c.Addr, f)
	if err != nil {
		return nil, err
	}
	res := m.(*fetchResponse)
	if res.part == nil {
		return res, fmt.Errorf("kafkaio: fetch: %w", kafka.Error(topLevelError(res.buf, f.version)))
	}
	if code := res.part.ErrorCode; code != 0 {
		return res, kafka.Error(code)
	}
	return res, nil
}

// transportOf returns c's Transport, kafka-go's default one when c has none.
func transportOf(c *kafka.Client) kafka.RoundTripper {
	if c.Transport == nil {
		return kafka.DefaultTransport
	}
	return c.Transport
}

// topLevelError returns the top-level error code of a fetch response of version v (v7+; the
// code follows the correlation id and the throttle time).
func topLevelError(buf []byte, v int16) int16 {
	if v < 7 || len(buf) < 10 {
		return int16(kafka.Unknown)
	}
	return int16(binary.BigEndian.Uint16(buf[8:]))
}

// bufferPool recycles the buffers fetch responses are read into. It keeps at most keep free
// buffers (maxFreeBuffers when keep is 0), the largest given back, and one when the input memory
// is at its limit: dropping that one would only make the next response a fresh allocation (its
// pages cleared and faulted in) while the dropped one waits for the garbage collector. It is safe for concurrent use:
// responses are read on kafka-go's connection goroutines and given back by their reader.
type bufferPool struct {
	mu   sync.Mutex
	free [][]byte
	keep int
	acct *inputAccount // nil: not counted
}

const maxFreeBuffers = 4

// get returns a buffer of length n: the smallest free one that is large enough, else a new one.
func (p *bufferPool) get(n int) []byte {
	p.mu.Lock()
	best := -1
	for i, b := range p.free {
		if cap(b) >= n && (best < 0 || cap(b) < cap(p.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		b := p.free[best]
		p.free = slices.Delete(p.free, best, best+1)
		p.mu.Unlock()
		p.acct.use(cap(b))
		return b[:n]
	}
	p.mu.Unlock()
	return p.alloc(n)
}

// alloc returns a new buffer of length n, counted in p's account.
func (p *bufferPool) alloc(n int) []byte {
	b := make([]byte, n, bufferCap(n))
	p.acct.alloc(cap(b))
	return b
}

// bufferCap returns the capacity a buffer of n bytes is made with: n rounded up to a power of
// two up to 1 MiB, to a multiple of 1 MiB above, so that a freed buffer serves the next response
// of about its size, which is rarely exactly as large.
func bufferCap(n int) int {
	if n > 1<<20 {
		return (n + 1<<20 - 1) &^ (1<<20 - 1)
	}
	c := 4 << 10
	for c < n {
		c <<= 1
	}
	return c
}

// put gives b back. b must not be used afterwards.
func (p *bufferPool) put(b []byte) {
	if b == nil {
		return
	}
	p.acct.use(-cap(b))
	p.mu.Lock()
	defer p.mu.Unlock()
	keep := p.keep
	if keep <= 0 {
		keep = maxFreeBuffers
	}
	if p.acct.over() { // memory is short: one free buffer is kept, the largest
		keep = 1
		for len(p.free) > keep {
			p.acct.alloc(-cap(p.dropSmallest()))
		}
	}
	if len(p.free) < keep {
		p.free = append(p.free, b[:0])
		return
	}
	// Keep the larger buffers: the next response may be as large as the largest so far.
	smallest := p.smallest()
	if cap(b) > cap(p.free[smallest]) {
		b, p.free[smallest] = p.free[smallest], b[:0]
	}
	p.acct.alloc(-cap(b))
}

// smallest returns the index of the smallest free buffer; p is locked and has one.
func (p *bufferPool) smallest() int {
	s := 0
	for i, f := range p.free {
		if cap(f) < cap(p.free[s]) {
			s = i
		}
	}
	return s
}

// dropSmallest removes the smallest free buffer and returns it; p is locked and has one.
func (p *bufferPool) dropSmallest() []byte {
	i := p.smallest()
	b := p.free[i]
	p.free = slices.Delete(p.free, i, i+1)
	return b
}
