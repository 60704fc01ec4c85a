package kafkaio

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/kdedup/kdedup/internal/tier"
)

// resetObs counts what the producer reports.
type resetObs struct {
	mu        sync.Mutex
	resets    map[string]int
	uncertain atomic.Int64
	errors    atomic.Int64
}

func (o *resetObs) ProducerReset(reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.resets == nil {
		o.resets = map[string]int{}
	}
	o.resets[reason]++
}
func (o *resetObs) UncertainRetry() { o.uncertain.Add(1) }
func (o *resetObs) ProduceError()   { o.errors.Add(1) }

func (o *resetObs) resetCounts() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int{}
	for k, v := range o.resets {
		out[k] = v
	}
	return out
}

// startCluster starts a one-broker cluster with the given topics.
// testCluster is a kfake broker on 127.0.0.1 with a client. (The package's own tests cannot use
// embedkafka, which imports this package.)
type testCluster struct {
	*kfake.Cluster
	client *kafka.Client
}

func startCluster(t *testing.T, topics map[string]int32, opts ...kfake.Opt) *testCluster {
	t.Helper()
	tier.Integration(t)
	opts = append(opts, kfake.Ports(0))
	for name, n := range topics {
		opts = append(opts, kfake.SeedTopics(n, name))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	client := Conn{Brokers: c.ListenAddrs(), ClientID: "test"}.Client(3 * time.Second)
	t.Cleanup(func() {
		CloseIdle(client)
		c.Close()
	})
	return &testCluster{c, client}
}

// newTestProducer returns a started idempotent producer for cl.
func newTestIdempotent(t *testing.T, cl *testCluster, obs ProduceObserver, c kafka.Compression) *Producer {
	t.Helper()
	return newTestProducer(t, cl, ProducerConfig{Idempotent: true, Observer: obs, Compression: compressionOf(t, c)})
}

// compressionOf returns the Compression of kafka-go's codec c.
func compressionOf(t *testing.T, c kafka.Compression) Compression {
	for name, codec := range codecs {
		if codec == c {
			return name
		}
	}
	t.Fatalf("no Compression for codec %v", c)
	return ""
}

// newTestProducer returns a started producer for cl; cfg's Backoff is capped at 200ms.
func newTestProducer(t *testing.T, cl *testCluster, cfg ProducerConfig) *Producer {
	t.Helper()
	cfg.Backoff.Max = 200 * time.Millisecond
	p := NewProducer(cl.client, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return p
}

// testMsgs returns n records whose values are prefix-0, prefix-1, ...
func testMsgs(prefix string, n int) []Record {
	out := make([]Record, n)
	for i := range out {
		out[i] = Record{Key: []byte(fmt.Sprintf("k%d", i%7)), Value: []byte(fmt.Sprintf("%s-%d", prefix, i)),
			Time: time.UnixMilli(1_700_000_000_000 + int64(i))}
	}
	return out
}

// values returns the values of topic/partition's records in log order.
func values(t *testing.T, cl *testCluster, topic string, partition int) []string {
	t.Helper()
	ctx := context.Background()
	offs, err := ListOffsets(ctx, cl.client, topic, []int{partition})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	err = Read(ctx, cl.client, Range{Topic: topic, Partition: partition, End: offs[partition].LastOffset, Failures: 1},
		func(recs []Record) error {
			for _, r := range recs {
				out = append(out, string(r.Value))
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readMessages returns the records of topic/partition from the start up to end.
func readMessages(t *testing.T, cl *testCluster, topic string, partition int, end int64) []Record {
	t.Helper()
	var out []Record
	err := Read(context.Background(), cl.client, Range{Topic: topic, Partition: partition, End: end, Failures: 1},
		func(recs []Record) error {
			for _, r := range recs {
				out = append(out, r.Clone())
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func valuesOf(msgs ...[]Record) []string {
	var out []string
	for _, ms := range msgs {
		for _, m := range ms {
			out = append(out, string(m.Value))
		}
	}
	return out
}

func equalStrings(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d\ngot  %q\nwant %q", what, len(got), len(want), got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: record %d is %q, want %q", what, i, got[i], want[i])
		}
	}
}

// batchInfo is what the log says about one stored record batch.
type batchInfo struct {
	producerID int64
	epoch      int16
	sequence   int32
	records    int
}

// logBatches returns the record batches of topic/partition in log order.
func logBatches(t *testing.T, cl *testCluster, topic string, partition int) []batchInfo {
	t.Helper()
	res, err := cl.client.Fetch(context.Background(), &kafka.FetchRequest{
		Topic: topic, Partition: partition, Offset: 0, MinBytes: 1, MaxBytes: 64 << 20, MaxWait: 100 * time.Millisecond,
	})
	if err == nil && res.Error != nil {
		err = res.Error
	}
	if err != nil {
		t.Fatal(err)
	}
	stream, ok := res.Records.(*protocol.RecordStream)
	if !ok {
		t.Fatalf("fetch records are a %T", res.Records)
	}
	var out []batchInfo
	for _, r := range stream.Records {
		rb, ok := r.(*protocol.RecordBatch)
		if !ok {
			t.Fatalf("batch is a %T", r)
		}
		bi := batchInfo{producerID: rb.ProducerID, epoch: rb.ProducerEpoch, sequence: rb.BaseSequence}
		for {
			if _, err := rb.ReadRecord(); err != nil {
				break
			}
			bi.records++
		}
		out = append(out, bi)
	}
	return out
}

// TestKfakeDropsDuplicateSequence proves the broker side this package relies on, with batches
// from our encoder: the same sealed batch sent twice is stored once (the second answer carries
// the first one's offset), a gap in the sequence is OUT_OF_ORDER_SEQUENCE_NUMBER and stores
// nothing, the next sequence is stored, and the same records under a new producer id are stored
// again (a new id cannot recognise an old append: the residual case of a producer reset).
func TestKfakeDropsDuplicateSequence(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 1})
	p := newTestIdempotent(t, cl, nil, 0)
	client := p.client
	enc := batchEncoder{}
	id := *p.ids.current()
	send := func(raw []byte) (*kafka.ProduceResponse, error) {
		res, err := client.RawProduce(context.Background(), &kafka.RawProduceRequest{
			Topic: "out", Partition: 0, RequiredAcks: kafka.RequireAll,
			RawRecords: protocol.RawRecordSet{Reader: bytes.NewReader(raw)},
		})
		if err == nil && res.Error != nil {
			err = res.Error
		}
		return res, err
	}
	a, b, c := testMsgs("a", 3), testMsgs("b", 4), testMsgs("c", 2)
	rbA, err := enc.encode(nil, [][]Record{a})
	if err != nil {
		t.Fatal(err)
	}
	rbA.seal(id.id, id.epoch, 0)
	for i := range 2 {
		res, err := send(rbA.raw)
		if err != nil || res.BaseOffset != 0 {
			t.Fatalf("send %d of the same batch: base offset %v, error %v; want 0 and nil", i+1, res, err)
		}
	}
	rbB, _ := enc.encode(nil, [][]Record{b})
	rbB.seal(id.id, id.epoch, 5) // expected 3
	if _, err := send(rbB.raw); !errors.Is(err, kafka.OutOfOrderSequenceNumber) {
		t.Fatalf("sequence gap: error %v, want OUT_OF_ORDER_SEQUENCE_NUMBER", err)
	}
	rbB.seal(id.id, id.epoch, 3)
	if res, err := send(rbB.raw); err != nil || res.BaseOffset != 3 {
		t.Fatalf("next sequence: %v, %v; want base offset 3", res, err)
	}
	rbC, _ := enc.encode(nil, [][]Record{c})
	rbC.seal(id.id, id.epoch, 7)
	if _, err := send(rbC.raw); err != nil {
		t.Fatal(err)
	}
	newID, err := p.ids.renew(context.Background(), p.ids.current())
	if err != nil || newID.id == id.id {
		t.Fatalf("renew: %v, %v", newID, err)
	}
	if again := rbC.resealed(newID.id, newID.epoch, 0); again.hdr.FirstSequence != 0 {
		t.Fatalf("resealed header %+v", again.hdr)
	} else if _, err := send(again.raw); err != nil {
		t.Fatal(err)
	}
	equalStrings(t, "log", values(t, cl, "out", 0), valuesOf(a, b, c, c))
	bs := logBatches(t, cl, "out", 0)
	if len(bs) != 4 || bs[0].sequence != 0 || bs[1].sequence != 3 || bs[2].sequence != 7 ||
		bs[3].producerID != newID.id || bs[3].sequence != 0 || bs[0].producerID != id.id {
		t.Errorf("stored batches %+v", bs)
	}
}

// TestBatchEncoding proves that every codec the configuration offers produces batches the
// broker accepts (it checks length, CRC, offsets, codec) and that reading them back gives the
// records unchanged: null and empty keys and values, headers (a null header value too),
// timestamps, and now for a zero timestamp. It also checks the header fields against kafka-go's
// own decoder.
func TestBatchEncoding(t *testing.T) {
	t.Parallel()
	ts := time.UnixMilli(1_700_000_000_123)
	msgs := []Record{
		{Key: []byte("k"), Value: []byte("v"), Headers: []Header{{Key: "h", Value: []byte("x")}, {Key: "n", Value: nil}}, Time: ts},
		{Key: nil, Value: []byte{}, Time: ts.Add(-time.Second)},
		{Key: []byte{}, Value: nil, Time: ts.Add(time.Hour)},
		{Key: []byte("z"), Value: bytes.Repeat([]byte("payload "), 300)},
	}
	for _, c := range []kafka.Compression{0, kafka.Gzip, kafka.Snappy, kafka.Lz4, kafka.Zstd} {
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			t.Parallel()
			enc := batchEncoder{compression: c, now: func() time.Time { return ts.Add(time.Minute) }}
			batch, err := enc.encode(nil, [][]Record{msgs[:1], msgs[1:]})
			if err != nil {
				t.Fatal(err)
			}
			raw := batch.raw
			// Reused memory, dirty and large enough, gives the same bytes.
			dirty := bytes.Repeat([]byte{0xa5}, 2*len(raw))
			if again, err := enc.encode(dirty, [][]Record{msgs}); err != nil || !bytes.Equal(again.raw, raw) || &again.raw[0] != &dirty[0] {
				t.Fatalf("encoding into reused memory: equal=%v, reused=%v, error %v", bytes.Equal(again.raw, raw), &again.raw[0] == &dirty[0], err)
			}
			batch.seal(42, 3, 17)
			var rs protocol.RecordSet
			if _, err := rs.ReadFrom(bufio.NewReader(bytes.NewReader(raw))); err != nil {
				t.Fatal(err)
			}
			rb, ok := rs.Records.(*protocol.RecordStream).Records[0].(*protocol.RecordBatch)
			if !ok || rb.ProducerID != 42 || rb.ProducerEpoch != 3 || rb.BaseSequence != 17 || rb.Attributes.Compression() != c ||
				batch.hdr.NumRecords != int32(len(msgs)) {
				t.Fatalf("decoded batch %+v", rb)
			}
			checkDecode(t, raw[sizePrefix:], batch.hdr, msgs, ts.Add(time.Minute))

			cl := startCluster(t, map[string]int32{"out": 1})
			p := newTestIdempotent(t, cl, nil, c)
			before := time.Now().Truncate(time.Millisecond)
			if err := p.Produce(context.Background(), "out", 0, msgs); err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			got := readMessages(t, cl, "out", 0, int64(len(msgs)))
			for i, m := range msgs {
				if m.Time.IsZero() {
					if got[i].Time.Before(before) || got[i].Time.After(after) {
						t.Errorf("record %d: zero time stored as %v, not between %v and %v", i, got[i].Time, before, after)
					}
					m.Time = got[i].Time
				}
				if d := recordDiff(got[i], m); d != "" {
					t.Errorf("record %d: %s", i, d)
				}
			}
		})
	}
}

// recordDiff reports how a differs from b; "" means equal.
func recordDiff(a, b Record) string {
	switch {
	case (a.Key == nil) != (b.Key == nil) || !bytes.Equal(a.Key, b.Key):
		return fmt.Sprintf("key %q != %q", a.Key, b.Key)
	case (a.Value == nil) != (b.Value == nil) || !bytes.Equal(a.Value, b.Value):
		return fmt.Sprintf("value %q != %q", a.Value, b.Value)
	case a.Time.UnixMilli() != b.Time.UnixMilli():
		return fmt.Sprintf("time %v != %v", a.Time, b.Time)
	case len(a.Headers) != len(b.Headers):
		return fmt.Sprintf("headers %v != %v", a.Headers, b.Headers)
	}
	for i := range a.Headers {
		x, y := a.Headers[i], b.Headers[i]
		if x.Key != y.Key || (x.Value == nil) != (y.Value == nil) || !bytes.Equal(x.Value, y.Value) {
			return fmt.Sprintf("headers %v != %v", a.Headers, b.Headers)
		}
	}
	return ""
}

func TestNextSequence(t *testing.T) {
	for _, tc := range []struct{ seq, n, want int32 }{
		{0, 5, 5},
		{math.MaxInt32 - 5, 5, math.MaxInt32},
		{math.MaxInt32 - 5, 6, 0},
		{math.MaxInt32, 1, 0},
		{math.MaxInt32 - 1, 10, 8},
	} {
		if got := nextSequence(tc.seq, tc.n); got != tc.want {
			t.Errorf("nextSequence(%d, %d) = %d, want %d", tc.seq, tc.n, got, tc.want)
		}
	}
}

// produceFault returns a fault on produce requests to topic.
func produceFault(topic string, err *kerr.Error, count int) kfake.Fault {
	return kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: err, Count: count}
}

// TestSequencerResets proves the reset errors: the broker rejects the second batch's producer
// state once; the batch is re-sent under a new producer id with sequence 0 and the log holds
// both batches once, in order; the reset is counted with its reason.
func TestSequencerResets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    *kerr.Error
		reason string
	}{
		{kerr.OutOfOrderSequenceNumber, ResetOutOfOrderSequence},
		{kerr.UnknownProducerID, ResetUnknownProducerID},
		{kerr.InvalidProducerEpoch, ResetInvalidProducerEpoch},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			t.Parallel()
			cl := startCluster(t, map[string]int32{"out": 1})
			obs := &resetObs{}
			p := newTestIdempotent(t, cl, obs, 0)
			a, b, c := testMsgs("a", 10), testMsgs("b", 20), testMsgs("c", 5)
			ctx := context.Background()
			if err := p.Produce(ctx, "out", 0, a); err != nil {
				t.Fatal(err)
			}
			first := p.ids.current()
			cl.Fault(produceFault("out", tc.err, 1))
			if err := p.Produce(ctx, "out", 0, b); err != nil {
				t.Fatal(err)
			}
			if err := p.Produce(ctx, "out", 0, c); err != nil {
				t.Fatal(err)
			}
			equalStrings(t, "log", values(t, cl, "out", 0), valuesOf(a, b, c))
			bs := logBatches(t, cl, "out", 0)
			second := p.ids.current()
			want := []batchInfo{{first.id, first.epoch, 0, 10}, {second.id, second.epoch, 0, 20}, {second.id, second.epoch, 20, 5}}
			if second == first || fmt.Sprint(bs) != fmt.Sprint(want) {
				t.Errorf("stored batches %+v, want %+v", bs, want)
			}
			if got := obs.resetCounts(); len(got) != 1 || got[tc.reason] != 1 {
				t.Errorf("resets %v, want one %s", got, tc.reason)
			}
		})
	}
}

// TestSequencerTimeoutAfterAppend proves the point of it all: a batch the broker appended but
// answered REQUEST_TIMED_OUT is retried with the same bytes and stored once.
func TestSequencerTimeoutAfterAppend(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 1})
	obs := &resetObs{}
	p := newTestIdempotent(t, cl, obs, kafka.Zstd)
	a, b := testMsgs("a", 50), testMsgs("b", 50)
	h := cl.Fault(produceFault("out", kerr.RequestTimedOut, 2))
	if err := p.Produce(context.Background(), "out", 0, a); err != nil {
		t.Fatal(err)
	}
	if err := p.Produce(context.Background(), "out", 0, b); err != nil {
		t.Fatal(err)
	}
	if h.Hits() != 2 {
		t.Fatalf("fault hit %d times, want 2", h.Hits())
	}
	equalStrings(t, "log", values(t, cl, "out", 0), valuesOf(a, b))
	if n := obs.uncertain.Load(); n != 2 {
		t.Errorf("uncertain retries %d, want 2", n)
	}
	if len(obs.resetCounts()) != 0 {
		t.Errorf("resets %v, want none", obs.resetCounts())
	}
}

// TestSequencerDuplicateSequenceIsSuccess proves that DUPLICATE_SEQUENCE_NUMBER, the answer some
// brokers give to a re-sent batch they already have, is taken as success: the batch appended by
// a timed-out attempt is not sent again, the next batch follows, and the log holds each once.
func TestSequencerDuplicateSequenceIsSuccess(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 1})
	obs := &resetObs{}
	p := newTestIdempotent(t, cl, obs, 0)
	a, b := testMsgs("a", 6), testMsgs("b", 6)
	h := cl.Fault(produceFault("out", kerr.RequestTimedOut, 1), produceFault("out", kerr.DuplicateSequenceNumber, 1))
	if err := p.Produce(context.Background(), "out", 0, a); err != nil {
		t.Fatal(err)
	}
	if err := p.Produce(context.Background(), "out", 0, b); err != nil {
		t.Fatal(err)
	}
	if h.Hits() != 2 || obs.errors.Load() != 1 {
		t.Fatalf("faults hit %d times, %d produce errors; want 2 and 1 (the duplicate answer is no error)", h.Hits(), obs.errors.Load())
	}
	equalStrings(t, "log", values(t, cl, "out", 0), valuesOf(a, b))
}

// TestSequencerResidualDuplicate pins down the one case idempotence cannot cover: a batch is
// appended but its answer lost (REQUEST_TIMED_OUT), then the retry is rejected for its producer
// state (the broker lost it). The batch is re-sent under a new producer id, which cannot be
// recognised as the earlier append, so it is stored twice; the reset is counted.
func TestSequencerResidualDuplicate(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 1})
	obs := &resetObs{}
	p := newTestIdempotent(t, cl, obs, 0)
	a := testMsgs("a", 8)
	cl.Fault(produceFault("out", kerr.RequestTimedOut, 1), produceFault("out", kerr.UnknownProducerID, 1))
	if err := p.Produce(context.Background(), "out", 0, a); err != nil {
		t.Fatal(err)
	}
	equalStrings(t, "log", values(t, cl, "out", 0), valuesOf(a, a))
	if got := obs.resetCounts(); got[ResetUnknownProducerID] != 1 {
		t.Errorf("resets %v, want one %s", got, ResetUnknownProducerID)
	}
}

// TestSequencerMergesConcurrentSubmissions proves the per-partition serialization that
// PartitionHash needs: 8 callers submit to one partition at once; every record is stored once,
// each caller's records in its order, sequences are contiguous, and queued submissions are
// merged into fewer requests than there were submissions.
func TestSequencerMergesConcurrentSubmissions(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 1})
	p := newTestIdempotent(t, cl, nil, kafka.Snappy)
	requests := cl.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "out", Observe: true, Count: -1})
	const callers, rounds, per = 8, 25, 10
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				if err := p.Produce(context.Background(), "out", 0, testMsgs(fmt.Sprintf("g%d-r%03d", g, r), per)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got := values(t, cl, "out", 0)
	if len(got) != callers*rounds*per {
		t.Fatalf("%d records stored, want %d", len(got), callers*rounds*per)
	}
	last := map[string]string{}
	for _, v := range got {
		var g, r, i int
		fmt.Sscanf(v, "g%d-r%d-%d", &g, &r, &i)
		k := fmt.Sprint(g)
		if cur := fmt.Sprintf("%03d-%03d", r, i); cur <= last[k] {
			t.Fatalf("caller %d: %s after %s", g, cur, last[k])
		} else {
			last[k] = cur
		}
	}
	next := int32(0)
	for _, b := range logBatches(t, cl, "out", 0) {
		if b.sequence != next {
			t.Fatalf("batch at sequence %d, want %d", b.sequence, next)
		}
		next += int32(b.records)
	}
	if n := requests.Hits(); n >= callers*rounds {
		t.Errorf("%d produce requests for %d submissions: nothing merged", n, callers*rounds)
	} else {
		t.Logf("%d produce requests for %d submissions", n, callers*rounds)
	}
}

// TestSequencerGiveUp proves that a caller whose context ends while its batch keeps failing gets
// an error promptly, that the sequencer lets go of its records, and that the partition carries
// on afterwards: nothing is lost, duplicated or reordered. The abandoned batch is written whole or
// not at all: an attempt already on the wire when the caller gave up can still reach the broker
// after the fault is gone (a loaded machine, the race run), and then it is in the log, before the
// next batch. When it was not written, the next batch meets a sequence gap and resets.
func TestSequencerGiveUp(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 1})
	obs := &resetObs{}
	p := newTestIdempotent(t, cl, obs, 0)
	a, b, c := testMsgs("a", 5), testMsgs("b", 5), testMsgs("c", 5)
	if err := p.Produce(context.Background(), "out", 0, a); err != nil {
		t.Fatal(err)
	}
	h := cl.Fault(produceFault("out", kerr.NotEnoughReplicas, -1))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := p.Produce(ctx, "out", 0, b)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, kafka.NotEnoughReplicas) {
		t.Fatalf("produce = %v, want the deadline and the last error", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("gave up after %v", d)
	}
	for i := range b {
		b[i].Value = []byte("overwritten") // the caller owns its records again
	}
	h.Remove()
	eventually(t, func() bool { return !p.Failing() })
	if err := p.Produce(context.Background(), "out", 0, c); err != nil {
		t.Fatal(err)
	}
	got := values(t, cl, "out", 0)
	if len(got) == len(a)+len(b)+len(c) { // the last attempt landed after the fault was removed
		equalStrings(t, "log", got, valuesOf(a, testMsgs("b", 5), c))
		return
	}
	equalStrings(t, "log", got, valuesOf(a, c))
	if got := obs.resetCounts(); got[ResetOutOfOrderSequence] != 1 {
		t.Errorf("resets %v, want one %s", got, ResetOutOfOrderSequence)
	}
}

// TestSequencerLeaderHandsOff proves that callers queued behind a leader (a caller sending its
// own records on its goroutine) are served when the leader gives up: the partition passes to a
// send loop, and the queued records are written once the broker recovers.
func TestSequencerLeaderHandsOff(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 1})
	p := newTestIdempotent(t, cl, &resetObs{}, 0)
	a, b, c := testMsgs("a", 5), testMsgs("b", 5), testMsgs("c", 5)
	if err := p.Produce(context.Background(), "out", 0, a); err != nil {
		t.Fatal(err)
	}
	h := cl.Fault(produceFault("out", kerr.NotEnoughReplicas, -1))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	leader, queued := make(chan error, 1), make(chan error, 1)
	go func() { leader <- p.Produce(ctx, "out", 0, b) }()
	eventually(t, func() bool { return h.Hits() > 0 }) // the leader is retrying
	go func() { queued <- p.Produce(context.Background(), "out", 0, c) }()
	if err := <-leader; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("leader: %v, want the deadline", err)
	}
	h.Remove()
	select {
	case err := <-queued:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the queued caller was never served")
	}
	equalStrings(t, "log", values(t, cl, "out", 0), valuesOf(a, c))
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
	}
}

// TestProducerWithoutIdempotence proves the same path without producer id: batches carry producer
// id -1 and no sequence, a compressed batch round-trips, and a timeout after the append is
// retried and, as nothing recognises the copy, written twice and counted as an uncertain retry.
func TestProducerWithoutIdempotence(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 1})
	obs := &resetObs{}
	p := newTestProducer(t, cl, ProducerConfig{Compression: CompressionGzip, Observer: obs})
	a, b := testMsgs("a", 7), testMsgs("b", 3)
	if err := p.Produce(context.Background(), "out", 0, a); err != nil {
		t.Fatal(err)
	}
	cl.Fault(produceFault("out", kerr.RequestTimedOut, 1))
	if err := p.Produce(context.Background(), "out", 0, b); err != nil {
		t.Fatal(err)
	}
	equalStrings(t, "log", values(t, cl, "out", 0), valuesOf(a, b, b))
	for _, bi := range logBatches(t, cl, "out", 0) {
		if bi.producerID != -1 || bi.sequence != -1 {
			t.Errorf("stored batch %+v, want no producer", bi)
		}
	}
	if obs.uncertain.Load() != 1 || obs.errors.Load() != 1 {
		t.Errorf("%d uncertain retries, %d errors; want 1 and 1", obs.uncertain.Load(), obs.errors.Load())
	}
}

// TestProducerAttempts proves ProducerConfig.Attempts: a request that keeps failing fails the
// caller after that many attempts with the last error, the producer is no longer failing, and
// the partition goes on once the broker recovers.
func TestProducerAttempts(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 1})
	obs := &resetObs{}
	p := newTestProducer(t, cl, ProducerConfig{Attempts: 3, Observer: obs})
	h := cl.Fault(produceFault("out", kerr.NotEnoughReplicas, -1))
	err := p.Produce(context.Background(), "out", 0, testMsgs("a", 4))
	if !errors.Is(err, kafka.NotEnoughReplicas) || obs.errors.Load() != 3 || h.Hits() != 3 {
		t.Fatalf("Produce = %v after %d attempts (%d errors), want NOT_ENOUGH_REPLICAS after 3", err, h.Hits(), obs.errors.Load())
	}
	if p.Failing() {
		t.Error("still failing after giving up")
	}
	h.Remove()
	b := testMsgs("b", 4)
	if err := p.Produce(context.Background(), "out", 0, b); err != nil {
		t.Fatal(err)
	}
	equalStrings(t, "log", values(t, cl, "out", 0), valuesOf(b))
}

// TestProducerBeforeSend proves ProducerConfig.BeforeSend: once the hook refuses (a worker that
// lost its partitions while it was paused), neither a request that failed nor a new one is sent;
// their callers get ErrNotSent with the hook's error, nothing of them is in the log, and the
// partition goes on once the hook allows again.
func TestProducerBeforeSend(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 1})
	lost := errors.New("partitions moved (test)")
	var calls atomic.Int32
	var allow atomic.Bool
	p := newTestProducer(t, cl, ProducerConfig{Idempotent: true, BeforeSend: func(context.Context) error {
		if calls.Add(1) == 1 || allow.Load() { // the first attempt goes out, and fails
			return nil
		}
		return lost
	}})
	h := cl.Fault(produceFault("out", kerr.NotEnoughReplicas, 1))
	err := p.Produce(context.Background(), "out", 0, testMsgs("a", 4))
	if !errors.Is(err, ErrNotSent) || !errors.Is(err, lost) || h.Hits() != 1 {
		t.Fatalf("Produce = %v after %d attempts, want ErrNotSent and the hook's error after 1", err, h.Hits())
	}
	if err := p.Produce(context.Background(), "out", 0, testMsgs("c", 4)); !errors.Is(err, ErrNotSent) {
		t.Fatalf("a new request while refused: %v, want ErrNotSent", err)
	}
	allow.Store(true)
	b := testMsgs("b", 4)
	if err := p.Produce(context.Background(), "out", 0, b); err != nil {
		t.Fatal(err)
	}
	equalStrings(t, "log", values(t, cl, "out", 0), valuesOf(b))
}

// TestProducerStartUnsupported proves that Start names brokers that cannot take what the
// producer writes, at once: record format v2 for both modes, InitProducerId for idempotence.
func TestProducerStartUnsupported(t *testing.T) {
	t.Parallel()
	oldProduce := kversion.Stable()
	oldProduce.SetMaxKeyVersion(int16(kmsg.Produce), 2)
	noInit := kversion.Stable()
	noInit.SetMaxKeyVersion(int16(kmsg.InitProducerID), -1)
	for _, tc := range []struct {
		name       string
		versions   *kversion.Versions
		idempotent bool
		want       []error
	}{
		{"Produce v2", oldProduce, false, []error{ErrProduceUnsupported}},
		{"Produce v2, idempotent", oldProduce, true, []error{ErrProduceUnsupported, ErrIdempotenceUnsupported}},
		{"no InitProducerId, idempotent", noInit, true, []error{ErrIdempotenceUnsupported}},
		{"no InitProducerId", noInit, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cl := startCluster(t, map[string]int32{"out": 1}, kfake.MaxVersions(tc.versions))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := NewProducer(cl.client, ProducerConfig{Idempotent: tc.idempotent}).Start(ctx)
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Errorf("Start = %v, want %v", err, want)
				}
			}
			if tc.want == nil && err != nil {
				t.Errorf("Start = %v", err)
			}
		})
	}
}
