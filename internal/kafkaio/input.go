package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// PartitionReaderConfig configures a PartitionReader.
type PartitionReaderConfig struct {
	// Topic and Partition name the partition. Required.
	Topic     string
	Partition int
	// Offset is the first offset to read, or kafka.FirstOffset or kafka.LastOffset for the
	// partition's start or end (its last stable offset under ReadCommitted).
	Offset int64
	// OffsetEpoch, when not nil and not negative, is the leader epoch of the record before
	// Offset, as a group committed it with the offset (Committed.LeaderEpoch). Before its first
	// fetch the reader then checks with the partition's leader that the log of that epoch still
	// reaches Offset (OffsetForLeaderEpoch), as the Java consumer does after a rebalance: a log
	// truncated below Offset since the commit (an unclean leader election) is handled as a
	// divergence seen mid-stream is (see "Leader epochs"), not as an offset past the log's end.
	// The check is skipped when the leader epoch is still OffsetEpoch (no election since).
	// Default: nil, no check.
	OffsetEpoch *int32
	// Isolation says which records of transactional producers are read. Default: ReadCommitted.
	Isolation Isolation
	// ResetToLatest says where reading restarts when the offset to read is past the end of the
	// partition's log (the log was truncated, or the topic recreated): at its end when true,
	// else at its start. An offset before the start (retention deleted the records) always
	// restarts at the start. Default: false.
	ResetToLatest bool
	// MaxBytes caps one fetch response. Default: 16 MiB.
	MaxBytes int
	// MaxWait is how long the broker holds a fetch while no record is available. The reader
	// waits FetchSlack more for the answer before it gives up on the fetch and its connection.
	// Default: 500ms.
	MaxWait time.Duration
	// Backoff spaces the retries of failed fetches. Default: the zero Backoff's bounds.
	Backoff Backoff
	// Limits bound the memory decoding takes; what goes over them is refused (Batch.Refused).
	// Default: DefaultDecodeLimits for MaxBytes.
	Limits DecodeLimits
	// Log receives the reader's log lines (sampled); nil logs nowhere.
	Log *Sampler
	// OnHeld, when not nil, hears after every fetch response how long reading has been held back
	// by an open transaction: under ReadCommitted, for how long the reader has been at the
	// partition's last stable offset, unchanged, while records exist after it (0 when it is
	// not). It is called on the reader's fetch goroutine and must be cheap.
	OnHeld func(d time.Duration)
	// OnOffsets, when not nil, hears the partition's offsets after every fetch response (a fetch
	// the broker answered without records included) and, while a response waits for Fetch (the
	// partition's records are not being taken: a partition blocked downstream), every IdlePoll
	// from a ListOffsets request. It is called on the reader's fetch goroutine and must be cheap.
	OnOffsets func(o Offsets)
	// OnError, when not nil, hears every failed fetch or offset lookup; the reader retries by
	// itself. It is called on the reader's fetch goroutine and must be cheap.
	OnError func(err error)
	// OnSkipped, when not nil, hears n input records the reader skipped without reading them,
	// for reason (one of SkipReasons). It is called on the reader's fetch goroutine.
	OnSkipped func(reason string, n int64)
	// OnReread, when not nil, hears that reading went back n offsets below its position, for
	// reason (one of RereadReasons): the log was truncated under the reader, or the topic was
	// re-created. The records there are read again (Batch.Rewound). It is called on the reader's
	// fetch goroutine.
	OnReread func(reason string, n int64)
	// IdlePoll is how often the offsets are looked up while a fetched response waits for Fetch.
	// Default: 5s.
	IdlePoll time.Duration
	// Pool, when not nil, sends the reader's fetches with those of the pool's other readers, one
	// request per broker (see FetchPool); the pool's Isolation and MaxWait replace the reader's.
	// Default: nil, a request of its own per fetch.
	Pool *FetchPool
}

// Offsets are where a partition's log starts and ends, as a fetch response or a ListOffsets
// request gave them.
type Offsets struct {
	// From is the offset the fetch asked for; -1 for a ListOffsets request.
	From int64
	// End is the readable end: the last stable offset under ReadCommitted, the high watermark
	// under ReadUncommitted.
	End int64
	// LogStart is the first offset of the partition's log (retention deletes records below it);
	// -1 when the broker did not say (Fetch before v5).
	LogStart int64
}

// Reasons of PartitionReaderConfig.OnSkipped.
const (
	// SkipRetention: the records at the offset to read were deleted by retention before they
	// were read; reading goes on at the log start.
	SkipRetention = "retention"
	// SkipResetToLatest: the offset to read was past the end of the log (the log was truncated,
	// or the topic recreated) and ResetToLatest moved it to the end, past the records the log
	// holds.
	SkipResetToLatest = "reset_to_latest"
)

// SkipReasons returns every reason PartitionReaderConfig.OnSkipped can be given.
func SkipReasons() []string { return []string{SkipRetention, SkipResetToLatest} }

// Reasons of PartitionReaderConfig.OnReread.
const (
	// RereadTruncated: the log was truncated below the reader's position (an unclean leader
	// election: the new leader's log diverged at an earlier offset, or the offset to read was
	// past the end of the log), and reading goes back to where it now goes on.
	RereadTruncated = "truncated"
	// RereadRecreated: the topic was deleted and created again (its topic ID changed, or its
	// leader epoch went down), and reading starts over in the new log.
	RereadRecreated = "recreated"
)

// RereadReasons returns every reason PartitionReaderConfig.OnReread can be given.
func RereadReasons() []string { return []string{RereadTruncated, RereadRecreated} }

// Batch is what PartitionReader.Fetch hands out: the next records of the partition, in offset
// order, and how far the partition was read.
type Batch struct {
	// Records are the data records of the batch: no control record (transaction marker) in
	// either isolation level, and under ReadCommitted no record of an aborted transaction. Their
	// keys, values and headers point into the reader's fetch buffers: they must not be changed,
	// and are only valid until the next Fetch or Close.
	Records []Record
	// Next is the offset to commit once Records are handled: the offset after the last offset
	// the batch covers. It can be past the last record (aborted records and markers were
	// skipped after it), and a batch can have no records at all and only move Next.
	Next int64
	// End is where the readable part of the partition ended when the batch was fetched: the last
	// stable offset under ReadCommitted, the high watermark under ReadUncommitted. End - Next is
	// the consumer lag.
	End int64
	// Aborted is the number of records of aborted transactions skipped in the batch's range.
	Aborted int
	// Start is when the batch's first record was taken.
	Start time.Time
	// Refused, when not nil, is input the reader refused to decode (see "Bounded decoding"),
	// right after Records: Next is its first offset. It is handed out once; the next Fetch goes
	// on after it.
	Refused *RefusedInput
	// Rewound says that reading went back: an offset reset (the offset to read was past the end
	// of the log, which an unclean leader election truncated or a re-created topic restarted)
	// moved it below the Next of the batches before (for the first batch, below
	// PartitionReaderConfig.Offset, which the records before were read up to), to From. The
	// batch starts there, and its records may have the offsets of records handed out before. A
	// rewound batch is always the first of a Fetch: the reset follows a failed fetch, which ends
	// the batch before it, or comes before the first response.
	Rewound bool
	// From is the offset the batch starts at: the previous batch's Next, or where a reset moved
	// reading to.
	From int64
	// Epoch is the partition leader epoch of the record batch that held the last record handed
	// out so far (this batch's or an earlier one's since the last reset), -1 when none was: the
	// leader epoch a commit of Next carries (KIP-320), with which the partition's next reader
	// can tell whether the log was truncated below Next meanwhile.
	Epoch int32
	// More says that the reader still walks the response the batch came from: the next Fetch
	// hands out its records at once, without waiting for the broker.
	More bool
}

// PartitionReader reads one partition from an offset on, for the worker's input: the input fetch
// path. A goroutine of its own fetches (kafka-go's Transport, fetchRequest) while the records of
// the previous response are handed out and processed, one fetch in flight; Fetch decodes record
// batches in place (BatchDecoder) and walks them as recordSet does: control records never reach
// a batch, and under ReadCommitted neither do aborted transactions. A response's buffer is reused
// once every batch that holds its records was handed back (by the next Fetch), so a reader in
// steady use allocates nothing per record.
//
// Failed fetches are retried under the backoff (a fetch answered NOT_LEADER_FOR_PARTITION waits
// for kafka-go's Transport to learn the new leader), and errors are handed to Fetch between
// attempts. An offset out of range is reset as ResetToLatest says. Fetch must not be called
// concurrently; Close may be called concurrently with Fetch.
type PartitionReader struct {
	cfg      PartitionReaderConfig
	client   *kafka.Client
	clientID string
	bufs     bufferPool
	cancel   context.CancelFunc
	stopped  chan struct{} // closed when the fetch goroutine ended
	done     chan struct{} // closed when, after it, Fetch's memory was freed (Close)
	closing  sync.Once
	ready    chan *fetched // unbuffered: the fetcher waits with the next response

	// Fetch's side, under fetchMu (held by Fetch, and by Close once the fetch goroutine ended).
	fetchMu    sync.Mutex
	closed     bool // Close freed Fetch's memory: Fetch fails with ErrReaderClosed
	dec        BatchDecoder
	set        recordSet
	cur        *fetched   // the response being walked, nil when none
	retired    []*fetched // walked responses whose records the last batch may hold
	pos        int64      // the offset after everything walked; -1 before the first response
	hdrs       headerSlab
	slabs      *slabPool // where hdrs' headers and batch.Records come from between batches
	held       bool      // hdrs and batch.Records were taken from slabs
	staleRecs  int       // the last batch's records when release kept its slab (see clearStale)
	staleHdrs  int       // the last batch's headers when release kept its slab
	pending    int64     // bytes of the records taken by take and not yet counted
	inHand     handCount // bytes of the records handed out, counted in slabs.inHand
	batch      Batch
	pendingErr error
	linger     *time.Timer

	// The fetch goroutine's side.
	corruptAt int64 // the offset of the last fetch that found a corrupt batch
	corruptN  int   // how many fetches in a row found it there
	epochs    epochState
}

// fetched is what the fetch goroutine hands to Fetch: a response, or an error.
type fetched struct {
	res     *fetchResponse
	err     error
	end     int64         // the readable end: LSO or HWM
	hwm     int64         // the high watermark
	refused *RefusedInput // a corrupt batch at the fetched offset, refused (see corruptBatch)
}

// NewPartitionReader returns a reader of cfg's partition that fetches through client (a Client
// made by Conn.Client: its Transport, not its Timeout, is used). It starts fetching in the
// background at once; errors show in Fetch.
func NewPartitionReader(client *kafka.Client, cfg PartitionReaderConfig) *PartitionReader {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 16 << 20
	}
	if cfg.Pool != nil {
		cfg.Isolation, cfg.MaxWait = cfg.Pool.cfg.Isolation, cfg.Pool.cfg.MaxWait
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 500 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = NewSampler(nil, 0)
	}
	if cfg.Isolation == "" {
		cfg.Isolation = ReadCommitted
	}
	if cfg.IdlePoll <= 0 {
		cfg.IdlePoll = 5 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &PartitionReader{
		cfg: cfg, client: client, cancel: cancel, pos: -1,
		stopped: make(chan struct{}), done: make(chan struct{}), ready: make(chan *fetched),
	}
	r.slabs = newSlabPool(0)
	if cfg.Pool != nil {
		r.bufs.acct = cfg.Pool.acct
		r.slabs = cfg.Pool.slabs
	}
	r.dec.retain = true
	r.dec.limits = cfg.Limits.withDefaults(cfg.MaxBytes)
	r.epochs = newEpochState()
	if cfg.Offset >= 0 && cfg.OffsetEpoch != nil && *cfg.OffsetEpoch >= 0 {
		r.epochs.fetched = *cfg.OffsetEpoch // what the records before Offset were read under
	}
	r.batch.Epoch = -1
	r.clientID = clientIDOf(client)
	go r.run(ctx)
	return r
}

// ErrReaderClosed is returned by the Fetch of a closed PartitionReader.
var ErrReaderClosed = errors.New("kafkaio: partition reader closed")

// Close stops fetching and returns a channel that is closed once the fetch goroutine ended and
// the reader's buffers were given back (a FetchPool's input memory counts them until then); a
// fetch in flight is abandoned at once. Records of the last batch must not be used any more, and
// Fetch fails with ErrReaderClosed.
func (r *PartitionReader) Close() <-chan struct{} {
	r.closing.Do(func() {
		r.inHand.drop(r.slabs, true)
		r.cancel()
		go func() {
			<-r.stopped
			r.fetchMu.Lock()
			defer r.fetchMu.Unlock()
			r.closed = true
			r.release(false)
			if r.cur != nil {
				r.cur.res.free(&r.bufs)
				r.cur = nil
			}
			close(r.done)
		}()
	})
	return r.done
}

// run is the fetch goroutine: it fetches from cfg.Offset on and hands every response with
// records or skipped offsets to Fetch, until ctx ends.
func (r *PartitionReader) run(ctx context.Context) {
	defer close(r.stopped)
	offset, attempt := r.cfg.Offset, 0
	var held heldClock
	for ctx.Err() == nil {
		f, next, err := r.fetch(ctx, &offset)
		if err != nil {
			if ctx.Err() == nil && r.cfg.OnError != nil {
				r.cfg.OnError(err)
			}
			if ctx.Err() != nil || !r.hand(ctx, &fetched{err: err}) {
				return
			}
			Sleep(ctx, r.cfg.Backoff.Delay(attempt))
			attempt++
			continue
		}
		attempt = 0
		if r.cfg.OnOffsets != nil {
			r.cfg.OnOffsets(Offsets{From: offset, End: f.end, LogStart: f.res.part.LogStartOffset})
		}
		if r.cfg.OnHeld != nil {
			r.cfg.OnHeld(held.observe(r.cfg.Isolation.committed() && next >= f.end && f.hwm > f.end, f.end))
		}
		if next == offset { // nothing to walk: the broker waited MaxWait
			f.res.free(&r.bufs)
			continue
		}
		if !r.hand(ctx, f) {
			return
		}
		offset = next
	}
}

// hand passes f to Fetch; false means ctx ended first. While it waits, it looks the offsets up
// every IdlePoll for OnOffsets, so that a partition whose records are not taken still shows its
// end moving, and after unshareAfter it copies an answer of a FetchPool out of the broker's
// response it shares with other partitions, so that a partition whose consumer is slow or
// blocked holds its own records, not the others' too.
func (r *PartitionReader) hand(ctx context.Context, f *fetched) bool {
	var tick, unshare <-chan time.Time
	if r.cfg.OnOffsets != nil {
		t := time.NewTicker(r.cfg.IdlePoll)
		defer t.Stop()
		tick = t.C
	}
	if f.res != nil && f.res.frame != nil {
		t := time.NewTimer(unshareAfter)
		defer t.Stop()
		unshare = t.C
	}
	for {
		select {
		case r.ready <- f:
			return true
		case <-unshare:
			f.res.unshare(&r.bufs)
		case <-tick:
			r.pollOffsets(ctx)
		case <-ctx.Done():
			if f.res != nil {
				f.res.free(&r.bufs)
			}
			return false
		}
	}
}

// unshareAfter is how long an answer of a FetchPool waits for Fetch in a broker's response
// shared with other partitions before it is copied out (see hand): longer than a partition in
// step with the others waits. A variable for the tests.
var unshareAfter = time.Second

// pollOffsets looks the partition's offsets up and hands them to OnOffsets, or the error to
// OnError.
func (r *PartitionReader) pollOffsets(ctx context.Context) {
	o, err := r.offsets(ctx)
	switch {
	case err == nil:
		r.cfg.OnOffsets(Offsets{From: -1, End: o.LastOffset, LogStart: o.FirstOffset})
	case ctx.Err() == nil && r.cfg.OnError != nil:
		r.cfg.OnError(err)
	}
}

// skipped tells OnSkipped about n records skipped for reason.
func (r *PartitionReader) skipped(reason string, n int64) {
	if r.cfg.OnSkipped != nil && n > 0 {
		r.cfg.OnSkipped(reason, n)
	}
}

// fetch fetches from *offset (resolving kafka.FirstOffset and kafka.LastOffset, and resetting an
// offset out of range, both of which change *offset) and returns the response and the offset
// after its complete batches. On failure the response's buffer is given back.
func (r *PartitionReader) fetch(ctx context.Context, offset *int64) (*fetched, int64, error) {
	if *offset < 0 {
		o, err := r.listOffset(ctx, *offset)
		if err != nil {
			return nil, 0, err
		}
		*offset = o
	}
	if err := r.validate(ctx, offset); err != nil {
		return nil, 0, r.errorf(*offset, err)
	}
	res, err := r.send(ctx, &fetchRequest{
		clientID: r.clientID, topic: r.cfg.Topic, partition: int32(r.cfg.Partition), offset: *offset,
		maxWait: r.cfg.MaxWait, maxBytes: int32(r.cfg.MaxBytes), isolation: r.cfg.Isolation, bufs: &r.bufs,
		epoch: r.epochs.lead.epoch,
	})
	r.epochs.observe(err)
	if err == nil {
		next, n, serr := scanBatches(res.part.RecordBatches, *offset)
		refused, ok := r.corruptBatch(res, *offset, next, n, serr)
		if serr == nil || ok {
			f := &fetched{res: res, end: res.part.HighWatermark, hwm: res.part.HighWatermark, refused: refused}
			if r.cfg.Isolation.committed() {
				f.end = res.part.LastStableOffset
			}
			if refused != nil {
				next = refused.LastOffset + 1
			}
			r.epochs.walked(res.part.RecordBatches)
			return f, next, nil
		}
		err = serr
	}
	if res != nil {
		res.free(&r.bufs)
	}
	if errors.Is(err, kafka.OffsetOutOfRange) {
		if o, rerr := r.resetOffset(ctx, *offset); rerr == nil {
			*offset = o
		}
	}
	return nil, 0, r.errorf(*offset, err)
}

// send sends f through the pool, else as a request of its own that waits MaxWait plus
// FetchSlack at most.
func (r *PartitionReader) send(ctx context.Context, f *fetchRequest) (*fetchResponse, error) {
	if r.cfg.Pool != nil {
		return r.cfg.Pool.fetch(ctx, f)
	}
	fctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait+FetchSlack)
	defer cancel()
	return fetchPartition(fctx, r.client, f)
}

// corruptAttempts is how many fetches in a row must answer a batch with a wrong checksum at the
// same offset before the reader refuses it: a batch damaged on the way reads right when fetched
// again, one damaged in the broker's log does not.
const corruptAttempts = 3

// corruptBatch reports whether a response whose scan failed with err after n bytes of good
// batches, which end at next, is walked anyway: its good batches when they reach past offset
// (the corrupt one is fetched again next), else, once corruptAttempts fetches in a row found a
// corrupt batch at offset, the refusal of that batch, returned. The response is then cut to the
// good batches. It is called on the fetch goroutine.
func (r *PartitionReader) corruptBatch(res *fetchResponse, offset, next int64, n int, err error) (*RefusedInput, bool) {
	if !errors.Is(err, ErrCorruptBatch) {
		return nil, false
	}
	set := res.part.RecordBatches
	res.part.RecordBatches = set[:n]
	if next > offset {
		return nil, true
	}
	set = set[n:]
	if r.corruptAt != offset {
		r.corruptAt, r.corruptN = offset, 0
	}
	if r.corruptN++; r.corruptN < corruptAttempts {
		return nil, false
	}
	r.corruptN = 0
	return r.corruptRefusal(set, offset, res.part.HighWatermark, err), true
}

// corruptRefusal returns the refusal of the corrupt batch that set starts with at offset (a
// batch whose checksum or header is wrong in the broker's log): the batch's offsets as its
// header gives them when they contain offset and lie below the high watermark hwm, else offset
// alone. It is handed out like input refused for its records: the partition blocks at it, or it
// goes to the dead-letter topic; nothing after it is committed before that.
func (r *PartitionReader) corruptRefusal(set []byte, offset, hwm int64, err error) *RefusedInput {
	last := offset
	var d BatchDecoder
	if hdr, _, herr := d.header(set); herr == nil || errors.Is(herr, ErrCorruptBatch) {
		if l := batchNext(&hdr) - 1; hdr.FirstOffset <= offset && l >= offset && l < hwm {
			last = l
		}
	}
	r.cfg.Log.Log(slog.LevelError, "corrupt-batch", "a record batch in the input partition's log is still corrupt when fetched again; refusing it",
		"topic", r.cfg.Topic, "partition", r.cfg.Partition, "offset", offset, "last_offset", last, "error", err.Error())
	return &RefusedInput{Offset: offset, LastOffset: last, Reason: RefusalInputCorrupt, Err: r.errorf(offset, err)}
}

func (r *PartitionReader) errorf(offset int64, err error) error {
	return fmt.Errorf("kafkaio: fetching %s/%d at offset %d: %w", r.cfg.Topic, r.cfg.Partition, offset, err)
}

// listOffset returns the partition's start (which is kafka.FirstOffset) or end (any other
// which), the end being the last stable offset under ReadCommitted.
func (r *PartitionReader) listOffset(ctx context.Context, which int64) (int64, error) {
	o, err := r.offsets(ctx)
	if err != nil {
		return 0, err
	}
	if which == kafka.FirstOffset {
		return o.FirstOffset, nil
	}
	return o.LastOffset, nil
}

func (r *PartitionReader) offsets(ctx context.Context) (kafka.PartitionOffsets, error) {
	var offs map[int]kafka.PartitionOffsets
	err := r.lookup(ctx, func() (err error) {
		lctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait+FetchSlack)
		defer cancel()
		offs, err = listOffsets(lctx, r.client, r.cfg.Topic, []int{r.cfg.Partition}, r.cfg.Isolation)
		return err
	})
	if err != nil {
		return kafka.PartitionOffsets{}, r.errorf(-1, err)
	}
	o := offs[r.cfg.Partition]
	if o.Error != nil {
		return o, r.errorf(-1, o.Error)
	}
	return o, nil
}

// lookup runs fn, an offset or leader lookup, in a lookup slot of the pool, if any.
func (r *PartitionReader) lookup(ctx context.Context, fn func() error) error {
	if r.cfg.Pool != nil {
		return r.cfg.Pool.Lookup(ctx, fn)
	}
	return fn()
}

// resetOffset returns where to read after offset was answered OFFSET_OUT_OF_RANGE: the start of
// the log when the records at offset were deleted, the start or the end (ResetToLatest) when
// offset is past the end; offset itself when it is in range again.
func (r *PartitionReader) resetOffset(ctx context.Context, offset int64) (int64, error) {
	o, err := r.offsets(ctx)
	if err != nil {
		return offset, err
	}
	switch {
	case offset < o.FirstOffset:
		r.cfg.Log.Log(slog.LevelWarn, "fetch-reset", "input records were deleted by retention before they were read; reading on at the earliest offset",
			"topic", r.cfg.Topic, "partition", r.cfg.Partition, "offset", offset, "earliest", o.FirstOffset, "skipped", o.FirstOffset-offset)
		r.skipped(SkipRetention, o.FirstOffset-offset)
		return o.FirstOffset, nil
	case offset <= o.LastOffset:
		return offset, nil
	}
	to, where := r.policyOffset(o)
	r.cfg.Log.Log(slog.LevelError, "fetch-reset", "offset is past the end of the input partition (log truncated or topic recreated); reading on at the "+where+" offset",
		"topic", r.cfg.Topic, "partition", r.cfg.Partition, "offset", offset, "end", o.LastOffset, "to", to)
	r.reread(RereadTruncated, offset-to)
	return to, nil
}

// policyOffset returns where reading goes on in a log of offsets o that lost the reader's
// offset: its start, or its end when ResetToLatest is set, and which of the two. A reset to the
// end passes the records the log holds: they are counted as skipped.
func (r *PartitionReader) policyOffset(o kafka.PartitionOffsets) (int64, string) {
	if r.cfg.ResetToLatest {
		r.skipped(SkipResetToLatest, o.LastOffset-o.FirstOffset)
		return o.LastOffset, "latest"
	}
	return o.FirstOffset, "earliest"
}

// heldClock measures how long reading has been held back by an open transaction.
type heldClock struct {
	since time.Time // zero while not held
	lso   int64
}

// observe records one fetch response: held says whether the reader is at the last stable offset
// lso with records after it. It returns how long that has lasted with this lso.
func (h *heldClock) observe(held bool, lso int64) time.Duration {
	if !held {
		h.since = time.Time{}
		return 0
	}
	now := time.Now()
	if h.since.IsZero() || h.lso != lso {
		h.since, h.lso = now, lso
	}
	return now.Sub(h.since)
}

// Fetch returns the next batch: up to max records (at least one, fewer once they hold as much
// decoded memory as the limits allow), the records before input it refused (Batch.Refused), or,
// when only records that are not data were fetched, a batch without records whose Next moved. It waits for the first
// response as long as ctx allows, then linger at most for more records. The batch and its records
// are only valid until the next Fetch or Close; calling Fetch hands the previous batch back. An
// error means that nothing came before ctx ended, or that the reader reports a failed fetch; the
// reader keeps retrying by itself, so the next Fetch waits for its retry.
func (r *PartitionReader) Fetch(ctx context.Context, max int, linger time.Duration) (*Batch, error) {
	r.fetchMu.Lock()
	defer r.fetchMu.Unlock()
	if r.closed {
		return nil, r.errorf(r.pos, ErrReaderClosed)
	}
	r.release(r.cur != nil && r.pendingErr == nil)
	defer r.clearStale()
	if err := r.pendingErr; err != nil {
		r.pendingErr = nil
		return nil, err
	}
	b := &r.batch
	b.Records, b.Aborted, b.Refused, b.Rewound, b.From = b.Records[:0], 0, nil, false, r.pos
	start, lingering := r.pos, false
	for len(b.Records) < max && b.Refused == nil && !r.full(b) {
		if r.cur != nil {
			r.take(b, max)
			continue
		}
		if len(b.Records) > 0 || r.pos != start {
			if linger <= 0 {
				break
			}
			if !lingering {
				r.startLinger(linger)
				lingering = true
			}
		}
		f, err := r.wait(ctx, lingering)
		if err != nil {
			if len(b.Records) == 0 && r.pos == start {
				return nil, err
			}
			r.pendingErr = err
			break
		}
		if f == nil { // linger is over
			break
		}
		r.begin(b, f)
		if b.Start.IsZero() || len(b.Records) == 0 {
			b.Start = time.Now()
		}
	}
	if lingering {
		r.linger.Stop()
	}
	b.Next, b.More = r.pos, r.cur != nil
	return b, nil
}

// wait waits for the next response: nil when linger is over first (lingering), an error when
// the fetch goroutine hands one over or ctx ends.
func (r *PartitionReader) wait(ctx context.Context, lingering bool) (*fetched, error) {
	var timeout <-chan time.Time
	if lingering {
		timeout = r.linger.C
	}
	select {
	case f := <-r.ready:
		if f.err != nil {
			return nil, f.err
		}
		return f, nil
	case <-timeout:
		return nil, nil
	case <-r.stopped:
		return nil, r.errorf(r.pos, ErrReaderClosed)
	case <-ctx.Done():
		return nil, r.errorf(r.pos, ctx.Err())
	}
}

// startLinger starts the linger timer.
func (r *PartitionReader) startLinger(d time.Duration) {
	if r.linger == nil {
		r.linger = time.NewTimer(d)
		return
	}
	r.linger.Reset(d)
}

// begin starts walking f into b: from where the last response ended, or where the first
// response or an offset reset starts (b.Rewound when that is below the position, or, for the
// first response, below Config.Offset: the records before it were read by someone before).
func (r *PartitionReader) begin(b *Batch, f *fetched) {
	r.cur = f
	r.set.reset(&r.dec, f.res, r.cfg.Isolation.committed())
	r.set.refused = f.refused
	if from := f.res.from; from != r.pos {
		b.Rewound = b.Rewound || from < r.pos || (r.pos < 0 && from < r.cfg.Offset)
		r.pos, b.From = from, from
		b.Epoch = -1 // the records read before are not before the new position
	}
	b.End = f.end
}

// take appends records of the response being walked to b until b has limit records, the walk
// stops at refused input (b.Refused) or the response is walked; then it is retired.
func (r *PartitionReader) take(b *Batch, limit int) {
	f := r.cur
	if !r.held {
		s := r.slabs.take()
		b.Records, r.hdrs.hdrs, r.held = s.recs, s.hdrs, true
	}
	for len(b.Records) < limit && !r.full(b) {
		rec, ok := r.set.nextRecord(&r.hdrs)
		if !ok {
			if r.set.refused == nil {
				r.retired = append(r.retired, f)
				r.cur = nil
				r.set.drop()
			}
			break
		}
		b.Records = append(b.Records, Record{
			Topic: r.cfg.Topic, Partition: r.cfg.Partition, Offset: rec.offset,
			Key: rec.rec.key, Value: rec.rec.value, Headers: rec.rec.headers, Time: time.UnixMilli(rec.time),
		})
		r.pending += recordSize + headerSize*int64(len(rec.rec.headers))
		b.Epoch = r.set.hdr.PartitionLeaderEpoch
	}
	r.inHand.add(r.slabs, r.pending)
	r.pending = 0
	r.pos = max(r.pos, r.set.next)
	b.Aborted += r.set.skipped
	r.set.skipped = 0
	if b.Refused = r.set.takeRefused(); b.Refused != nil {
		r.pos = max(r.pos, b.Refused.Offset) // the batch commits up to the refused input, not past it
	}
}

// full reports whether b holds as much decoded memory as one Fetch may hand out (see "Bounded
// decoding"): its records' headers, or the decompressed batches they point into, reached the
// decode limits; or, once it has MinBatchInHand records, the pool's readers hold more decoded
// records than its bound (see "Record memory between batches").
func (r *PartitionReader) full(b *Batch) bool {
	n := len(b.Records)
	return n > 0 && (r.hdrs.len() >= r.dec.limits.MaxHeaders || r.dec.holding() >= r.dec.limits.MaxBatchBytes ||
		n >= MinBatchInHand && r.slabs.over(r.pending))
}

// release hands the memory of the last batch back: the buffers of the responses walked since and
// of the batches decompressed before the current one, and the record and header slices, to the
// slab pool (see "Record memory between batches"). With keep (a response is still being walked,
// so the next batch is decoded at once) the slices stay with the reader instead: given to the
// pool, they would be cleared whole only to be taken back and written over, and clearing them
// costs more than decoding into them. The next batch's records overwrite the last one's, and
// clearStale clears what they did not, so that no record the reader holds keeps a buffer given
// back reachable.
func (r *PartitionReader) release(keep bool) {
	for i, f := range r.retired {
		f.res.free(&r.bufs)
		r.retired[i] = nil
	}
	r.retired = r.retired[:0]
	r.dec.recycle()
	r.inHand.drop(r.slabs, false)
	if !r.held {
		return
	}
	if keep {
		r.staleRecs, r.staleHdrs = len(r.batch.Records), len(r.hdrs.hdrs)
		r.batch.Records, r.hdrs.hdrs = r.batch.Records[:0], r.hdrs.hdrs[:0]
		return
	}
	r.slabs.put(slab{recs: r.batch.Records, hdrs: r.hdrs.hdrs})
	r.batch.Records, r.hdrs.hdrs, r.held = nil, nil, false
}

// clearStale clears the records and headers of the slab release kept that the batch now in hand
// did not overwrite. A slice that grew past them was moved, and the old one is garbage.
func (r *PartitionReader) clearStale() {
	if n := len(r.batch.Records); r.staleRecs > n && r.staleRecs <= cap(r.batch.Records) {
		clear(r.batch.Records[n:r.staleRecs])
	}
	if n := len(r.hdrs.hdrs); r.staleHdrs > n && r.staleHdrs <= cap(r.hdrs.hdrs) {
		clear(r.hdrs.hdrs[n:r.staleHdrs])
	}
	r.staleRecs, r.staleHdrs = 0, 0
}
