package kafkaio

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// want is one partition's fetch waiting for its broker's next request.
type want struct {
	tp       topicPartition
	offset   int64
	maxBytes int32
	epoch    int32 // the partition's leader epoch as its reader knows it (-1: unknown)
	bufs     *bufferPool
	since    time.Time       // when it was handed to the pool
	round    uint64          // the last request that carried it (0: none yet); owned by brokerFetcher.mu
	done     chan wantResult // capacity 1: the answer, sent once
}

// wantResult answers a want.
type wantResult struct {
	res *fetchResponse
	err error
}

// seenOffsets are a partition's offsets as its last answer gave them.
type seenOffsets struct {
	hwm, lso, logStart int64
}

// brokerFetcher sends the fetches of one broker's partitions, one request at a time, in a fetch
// session. add and remove are safe for concurrent use; run is its goroutine.
type brokerFetcher struct {
	pool *FetchPool
	id   int32
	wake chan struct{} // capacity 1: a want was added

	mu      sync.Mutex
	pending map[topicPartition]*want     // the next request's wants, one per partition
	queued  map[topicPartition][]*want   // wants of partitions with one pending already (two readers of one partition), in order
	busy    map[topicPartition]time.Time // partitions answered with records whose reader has not wanted more yet, and when

	// Owned by run.
	round   uint64
	session fetchSession
	seen    map[topicPartition]seenOffsets
	names   map[string]string // topic names of responses, copied out of their frames (see topic)
	bufs    bufferPool        // response frames (sharedFrame), keeping two free
	batch   []*want           // the wants of the request in flight
	wait    time.Duration     // how long the broker may hold the request in flight (requestWait)
}

func newBrokerFetcher(p *FetchPool, id int32) *brokerFetcher {
	return &brokerFetcher{
		pool: p, id: id, wake: make(chan struct{}, 1),
		pending: map[topicPartition]*want{}, queued: map[topicPartition][]*want{}, seen: map[topicPartition]seenOffsets{},
		busy:    map[topicPartition]time.Time{},
		session: fetchSession{sent: map[topicPartition]sentPartition{}}, names: map[string]string{},
		// One request is in flight at a time, and its frame comes back once its partitions' readers
		// took their records (while the next responses are read): two free frames serve a
		// steady stream; more would hold a broker-wide response's worth (up to
		// FetchPoolConfig.MaxBytes) each for nothing.
		bufs: bufferPool{keep: 2, acct: p.acct},
	}
}

// add queues w for the next request, or after the partition's want pending (a fetch session
// holds one offset per partition, and two readers of one partition may want two).
func (b *brokerFetcher) add(w *want) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.busy, w.tp)
	if b.pending[w.tp] != nil {
		b.queued[w.tp] = append(b.queued[w.tp], w)
		return
	}
	b.pending[w.tp] = w
	b.wakeUp()
}

// wakeUp tells run that a want is pending.
func (b *brokerFetcher) wakeUp() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// remove withdraws w; false means it was answered already (its answer is in w.done).
func (b *brokerFetcher) remove(w *want) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending[w.tp] == w {
		b.promote(w.tp)
		return true
	}
	q := b.queued[w.tp]
	for i, x := range q {
		if x == w {
			b.queued[w.tp] = append(q[:i:i], q[i+1:]...)
			return true
		}
	}
	return false
}

// promote replaces tp's pending want with the first one queued, if any; b is locked.
func (b *brokerFetcher) promote(tp topicPartition) {
	delete(b.pending, tp)
	q := b.queued[tp]
	if len(q) == 0 {
		delete(b.queued, tp)
		return
	}
	b.pending[tp], b.queued[tp] = q[0], q[1:]
	b.wakeUp()
}

// answer removes w and sends it r, unless it was withdrawn; b is locked.
func (b *brokerFetcher) answer(w *want, r wantResult) {
	if b.pending[w.tp] != w {
		if r.res != nil {
			r.res.free(w.bufs)
		}
		return
	}
	b.promote(w.tp)
	if r.err == nil && r.res != nil && len(r.res.part.RecordBatches) > 0 {
		b.busy[w.tp] = time.Now()
	}
	w.done <- r
}

// busyFetchWait is how long a broker holds a request while a partition of the fetcher is busy:
// answered with records, its reader still taking them. Such a partition wants more soon, and its
// want waits for the request in flight; a request held MaxWait for the idle partitions would make
// it wait that long (the tail of a drain, where some partitions are done and others are not).
const busyFetchWait = 10 * time.Millisecond

// requestWait returns how long the next request may be held by the broker: busyFetchWait while
// a partition answered with records less than MaxWait ago has not wanted more yet, else MaxWait.
// A partition busy for longer (its consumer is slow or blocked) no longer shortens it, so an idle
// broker is not polled every busyFetchWait for a partition that does not move. b is locked.
func (b *brokerFetcher) requestWait(now time.Time) time.Duration {
	wait := b.pool.cfg.MaxWait
	for tp, since := range b.busy {
		if now.Sub(since) >= b.pool.cfg.MaxWait {
			delete(b.busy, tp)
			continue
		}
		wait = min(wait, busyFetchWait)
	}
	return wait
}

// run sends requests while partitions wait, until ctx ends; then it fails what waits.
func (b *brokerFetcher) run(ctx context.Context) {
	for b.collect(ctx) {
		res, err := b.roundTrip(ctx)
		var frame *sharedFrame
		if res != nil {
			frame = newSharedFrame(res.buf, &b.bufs)
		}
		switch {
		case err != nil:
			b.session.reset()
			b.fail(err)
		case b.session.expired(res.resp.ErrorCode):
			b.session.reset() // the next request opens a new session
		case res.resp.ErrorCode != 0:
			b.session.reset()
			b.fail(fmt.Errorf("kafkaio: fetch from broker %d: %w", b.id, kafka.Error(res.resp.ErrorCode)))
		default:
			b.session.advance(res)
			b.dispatch(res, frame)
		}
		if frame != nil {
			frame.release() // the frame stays while the answers of its partitions hold it
		}
	}
	b.mu.Lock()
	for len(b.pending) > 0 { // answering promotes the queued
		for _, w := range b.pending {
			b.answer(w, wantResult{err: ErrPoolClosed})
		}
	}
	b.mu.Unlock()
}

// collect waits until partitions wait for an answer and marks them as carried by the next
// request (b.batch); false means ctx ended.
func (b *brokerFetcher) collect(ctx context.Context) bool {
	for {
		b.mu.Lock()
		if len(b.pending) > 0 {
			b.round++
			b.wait = b.requestWait(time.Now())
			b.batch = b.batch[:0]
			for _, w := range b.pending {
				w.round = b.round
				b.batch = append(b.batch, w)
			}
			b.mu.Unlock()
			return ctx.Err() == nil
		}
		b.mu.Unlock()
		select {
		case <-b.wake:
		case <-ctx.Done():
			return false
		}
	}
}

// fail answers every want of the request in flight with err.
func (b *brokerFetcher) fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.batch {
		b.pool.leaders.forget(w.tp)
		b.answer(w, wantResult{err: err})
	}
}

// dispatch hands the partitions of res to their wants: those with records or an error, and
// those that waited MaxWait (answered without records). A want whose partition the broker has
// not answered since it was added, after MaxWait, makes the next request a full one.
func (b *brokerFetcher) dispatch(res *brokerFetchResponse, frame *sharedFrame) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range res.resp.Topics {
		t := &res.resp.Topics[i]
		topic := b.topic(t.Topic)
		for j := range t.Partitions {
			b.partitionAnswer(topicPartition{topic, int(t.Partitions[j].Partition)}, &t.Partitions[j], frame, now)
		}
	}
	for _, w := range b.batch {
		if b.pending[w.tp] != w || w.round != b.round || now.Sub(w.since) < b.pool.cfg.MaxWait {
			continue
		}
		seen, ok := b.seen[w.tp]
		if !ok {
			b.session.reset()
			continue
		}
		part := &kmsg.FetchResponseTopicPartition{Partition: int32(w.tp.partition), HighWatermark: seen.hwm,
			LastStableOffset: seen.lso, LogStartOffset: seen.logStart}
		b.answer(w, wantResult{res: &fetchResponse{part: part, from: w.offset}})
	}
}

// topic returns name, a topic name decoded in place in a response frame, as a string of its own:
// the frame is reused, and a map key (seen) that pointed into it would change under the map.
func (b *brokerFetcher) topic(name string) string {
	if s, ok := b.names[name]; ok {
		return s
	}
	s := strings.Clone(name)
	b.names[s] = s
	return s
}

// partitionAnswer records the offsets of one partition's part of a response and hands it to the
// partition's want when it has records or an error, or the want waited MaxWait. b is locked.
func (b *brokerFetcher) partitionAnswer(tp topicPartition, part *kmsg.FetchResponseTopicPartition, frame *sharedFrame, now time.Time) {
	if part.ErrorCode == 0 {
		b.seen[tp] = seenOffsets{hwm: part.HighWatermark, lso: part.LastStableOffset, logStart: part.LogStartOffset}
	}
	w := b.pending[tp]
	if w == nil || w.round != b.round {
		return // withdrawn, or added after the request was sent: the session held another offset
	}
	if part.ErrorCode == 0 && len(part.RecordBatches) == 0 && now.Sub(w.since) < b.pool.cfg.MaxWait {
		return
	}
	res := sharePartition(w, part, frame)
	var err error
	if part.ErrorCode != 0 {
		if part.ErrorCode != int16(kafka.OffsetOutOfRange) {
			b.pool.leaders.forget(tp)
		}
		err = kafka.Error(part.ErrorCode)
	}
	b.answer(w, wantResult{res: res, err: err})
}

// sharePartition returns part as the answer of w: its record batches where they are, in frame,
// which the answer holds until its reader frees it. Copying each partition out would double the
// input memory and, at the budget, turn every answer into a fresh allocation.
func sharePartition(w *want, part *kmsg.FetchResponseTopicPartition, frame *sharedFrame) *fetchResponse {
	frame.hold()
	own := *part
	return &fetchResponse{frame: frame, part: &own, from: w.offset}
}

// roundTrip sends the request of b.batch to the broker and returns its response, within MaxWait
// plus FetchSlack.
func (b *brokerFetcher) roundTrip(ctx context.Context) (*brokerFetchResponse, error) {
	p := b.pool
	req := b.session.build(b.batch, p.cfg, b.wait, p.requestMaxBytes())
	rctx, cancel := context.WithTimeout(ctx, b.wait+FetchSlack)
	defer cancel()
	rt := p.client.Transport
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	m, err := rt.RoundTrip(rctx, p.client.Addr, &brokerFetch{
		broker: b.id, req: req, clientID: p.clientID, maxBytes: int32(p.cfg.MaxBytes), bufs: &b.bufs,
	})
	if err != nil {
		return nil, fmt.Errorf("kafkaio: fetch from broker %d: %w", b.id, err)
	}
	return m.(*brokerFetchResponse), nil
}

// sentPartition is what a fetch session holds for one partition.
type sentPartition struct {
	offset   int64
	maxBytes int32
	epoch    int32
}

// fetchSession is the client side of one broker's fetch session (KIP-227). id 0 means none:
// the next request is a full fetch that asks for a new session.
type fetchSession struct {
	id, epoch int32
	sent      map[topicPartition]sentPartition
	full      bool // the request in flight is a full fetch
}

// reset drops the session: the next request is a full fetch.
func (s *fetchSession) reset() {
	s.id, s.epoch = 0, 0
	clear(s.sent)
}

// expired reports whether code says the broker no longer knows the session (evicted, or an
// epoch out of step).
func (*fetchSession) expired(code int16) bool {
	return code == int16(kafka.FetchSessionIDNotFound) || code == int16(kafka.InvalidFetchSessionEpoch)
}

// build returns the request for wants, of at most maxBytes, held by the broker at most wait: every partition in a full fetch; else the partitions whose
// fetch offset or size changed, and the partitions of the session no want names any more,
// forgotten.
func (s *fetchSession) build(wants []*want, cfg FetchPoolConfig, wait time.Duration, maxBytes int32) *kmsg.FetchRequest {
	req := kmsg.NewFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = int32(wait.Milliseconds())
	req.MinBytes = 1
	req.MaxBytes = maxBytes
	if cfg.Isolation.committed() {
		req.IsolationLevel = 1
	}
	req.SessionID, req.SessionEpoch, s.full = s.id, s.epoch, s.id == 0
	if s.full {
		clear(s.sent)
	}
	named := make(map[topicPartition]bool, len(wants))
	topics := map[string]int{}
	for _, w := range wants {
		named[w.tp] = true
		sp := sentPartition{w.offset, w.maxBytes, w.epoch}
		if old, ok := s.sent[w.tp]; ok && old == sp {
			continue
		}
		s.sent[w.tp] = sp
		rp := kmsg.NewFetchRequestTopicPartition()
		setPartitionFields(&rp, int32(w.tp.partition), w.offset, w.maxBytes, w.epoch)
		req.Topics = appendPartition(req.Topics, topics, w.tp.topic, rp)
	}
	s.forget(&req, named)
	return &req
}

// forget moves the partitions of the session that named does not hold to req's forgotten topics.
func (s *fetchSession) forget(req *kmsg.FetchRequest, named map[topicPartition]bool) {
	idx := map[string]int{}
	for tp := range s.sent {
		if named[tp] {
			continue
		}
		delete(s.sent, tp)
		i, ok := idx[tp.topic]
		if !ok {
			i = len(req.ForgottenTopics)
			idx[tp.topic] = i
			ft := kmsg.NewFetchRequestForgottenTopic()
			ft.Topic = tp.topic
			req.ForgottenTopics = append(req.ForgottenTopics, ft)
		}
		req.ForgottenTopics[i].Partitions = append(req.ForgottenTopics[i].Partitions, int32(tp.partition))
	}
}

// appendPartition adds rp to topic's entry of topics (idx: topic name → index), creating it.
func appendPartition(topics []kmsg.FetchRequestTopic, idx map[string]int, topic string, rp kmsg.FetchRequestTopicPartition) []kmsg.FetchRequestTopic {
	i, ok := idx[topic]
	if !ok {
		i = len(topics)
		idx[topic] = i
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		topics = append(topics, rt)
	}
	topics[i].Partitions = append(topics[i].Partitions, rp)
	return topics
}

// advance moves the session on after a response: a full fetch opens the session the broker
// created (none when its cache is full, or the broker predates sessions), an incremental one
// steps the epoch.
func (s *fetchSession) advance(res *brokerFetchResponse) {
	switch {
	case res.version < 7 || res.resp.SessionID == 0:
		s.reset()
	case s.full:
		s.id, s.epoch = res.resp.SessionID, 1
	case s.epoch == math.MaxInt32:
		s.epoch = 1
	default:
		s.epoch++
	}
}

// brokerFetch is one Fetch request to one broker, exchanged raw like fetchRequest: the response
// is read into a buffer of bufs and decoded in place.
type brokerFetch struct {
	broker   int32
	req      *kmsg.FetchRequest
	clientID string
	maxBytes int32
	bufs     *bufferPool
	version  int16
}

// brokerFetchResponse is the decoded answer to a brokerFetch; its slices point into buf.
type brokerFetchResponse struct {
	buf     []byte
	resp    kmsg.FetchResponse
	version int16
}

// ApiKey implements protocol.Message.
func (*brokerFetch) ApiKey() protocol.ApiKey { return protocol.Fetch }

// ApiKey implements protocol.Message.
func (*brokerFetchResponse) ApiKey() protocol.ApiKey { return protocol.Fetch }

// Broker implements protocol.BrokerMessage: the request goes to broker f.broker.
func (f *brokerFetch) Broker(c protocol.Cluster) (protocol.Broker, error) {
	b, ok := c.Brokers[f.broker]
	if !ok {
		return protocol.Broker{}, fmt.Errorf("kafkaio: broker %d not in metadata: %w", f.broker, kafka.BrokerNotAvailable)
	}
	return b, nil
}

// Required implements protocol.RawExchanger: every fetch is exchanged raw.
func (f *brokerFetch) Required(versions map[protocol.ApiKey]int16) bool {
	f.version = min(versions[protocol.Fetch], maxFetchVersion)
	return true
}

// RawExchange implements protocol.RawExchanger: it writes the request and reads the response.
func (f *brokerFetch) RawExchange(rw io.ReadWriter) (protocol.Message, error) {
	if f.version < minFetchVersion {
		return nil, ErrFetchUnsupported
	}
	f.req.Version = f.version
	id := correlationIDs.Add(1)
	if _, err := rw.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID(f.clientID)).AppendRequest(nil, f.req, id)); err != nil {
		return nil, err
	}
	buf, err := readFrame(rw, id, f.maxBytes, f.bufs)
	if err != nil {
		return nil, err
	}
	res := &brokerFetchResponse{buf: buf, version: f.version}
	res.resp.Version = f.version
	if err := res.resp.UnsafeReadFrom(buf[4:]); err != nil {
		f.bufs.put(buf)
		return nil, fmt.Errorf("kafkaio: decoding fetch response: %w", err)
	}
	return res, nil
}

// readFrame reads the response to request id, of a fetch of at most maxBytes, from r into a
// buffer of bufs: the correlation id and the body.
func readFrame(r io.Reader, id, maxBytes int32, bufs *bufferPool) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 4 {
		return nil, fmt.Errorf("kafkaio: fetch response of %d bytes", n)
	}
	if limit := maxResponseBytes(maxBytes); int64(n) > limit {
		return nil, fmt.Errorf("%w: %d bytes, more than the %d a fetch of at most %d bytes may take", ErrResponseTooLarge, n, limit, maxBytes)
	}
	buf, err := readBody(r, int(n), wholeResponseBytes(maxBytes), bufs)
	if err != nil {
		return nil, err
	}
	if got := int32(binary.BigEndian.Uint32(buf)); got != id {
		bufs.put(buf)
		return nil, fmt.Errorf("kafkaio: fetch response with correlation id %d, want %d", got, id)
	}
	return buf, nil
}

// readBody reads n bytes from r into a buffer of bufs: allocated at once when n is at most whole,
// else grown (doubling from whole) as the bytes arrive. On failure the buffer goes back to bufs.
func readBody(r io.Reader, n, whole int, bufs *bufferPool) ([]byte, error) {
	buf := bufs.get(min(n, whole))
	got := 0
	for {
		m, err := io.ReadFull(r, buf[got:])
		got += m
		if err != nil {
			bufs.put(buf)
			return nil, err
		}
		if got == n {
			return buf, nil
		}
		grown := bufs.alloc(min(2*len(buf), n))
		copy(grown, buf)
		bufs.put(buf)
		buf = grown
	}
}
