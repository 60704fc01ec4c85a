package kafkaio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// limitTopic sets the max.message.bytes of topic on cl.
func limitTopic(t *testing.T, cl *testCluster, topic string, n int) {
	t.Helper()
	if err := AlterTopicConfig(context.Background(), cl.client, topic, map[string]string{"max.message.bytes": strconv.Itoa(n)}); err != nil {
		t.Fatal(err)
	}
}

// sizedMsgs returns n records whose values are prefix-i padded to size bytes.
func sizedMsgs(prefix string, n, size int) []Record {
	msgs := testMsgs(prefix, n)
	for i := range msgs {
		msgs[i].Value = append(msgs[i].Value, bytes.Repeat([]byte{'.'}, max(0, size-len(msgs[i].Value)))...)
	}
	return msgs
}

// checkSequences fails unless the stored batches of topic/partition carry contiguous sequences
// under one producer id, that is no reset happened; it returns the batches.
func checkSequences(t *testing.T, cl *testCluster, topic string, partition int) []batchInfo {
	t.Helper()
	bs := logBatches(t, cl, topic, partition)
	next := int32(0)
	for _, b := range bs {
		if b.sequence != next || b.producerID != bs[0].producerID {
			t.Fatalf("stored batches %+v: sequence gap or new producer id", bs)
		}
		next += int32(b.records)
	}
	return bs
}

func TestMaxMessageBytes(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"small": 1, "default": 1})
	limitTopic(t, cl, "small", 5000)
	ctx := context.Background()
	got, err := MaxMessageBytes(ctx, cl.client, "small", "default")
	if err != nil || len(got) != 2 || got[0] != 5000 || got[1] < 1<<20 {
		t.Fatalf("MaxMessageBytes = %v, %v; want [5000, the 1 MiB default]", got, err)
	}
	if _, err := MaxMessageBytes(ctx, cl.client, "small", "missing"); err == nil || !bytes.Contains([]byte(err.Error()), []byte(`"missing"`)) {
		t.Fatalf("MaxMessageBytes of a missing topic = %v, want an error naming it", err)
	}
}

func TestRefusalReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{kafka.MessageSizeTooLarge, RefusalMessageTooLarge},
		{fmt.Errorf("wrapped: %w", kafka.RecordListTooLarge), RefusalRecordListTooLarge},
		{kafka.InvalidRecord, RefusalInvalidRecord},
		{kafka.InvalidTimestamp, RefusalInvalidTimestamp},
		{kafka.NotEnoughReplicas, ""},
		{kafka.TopicAuthorizationFailed, ""},
		{kafka.InvalidMessage, ""},
		{errors.New("io"), ""},
		{nil, ""},
	} {
		if got := refusalReason(tc.err); got != tc.want {
			t.Errorf("refusalReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	if len(RefusalReasons()) != 4 {
		t.Errorf("RefusalReasons = %v", RefusalReasons())
	}
}

// TestProducerSplitsRefusedBatch proves the split: a topic whose max.message.bytes the producer
// does not know refuses a request of many small records as too large; the batch is split until
// every record is written, in order, under contiguous sequence numbers (no reset: the refused
// batches did not advance them), and the producer learned a bound that is not below the topic's
// limit.
func TestProducerSplitsRefusedBatch(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 1})
	limitTopic(t, cl, "out", 4000)
	obs := &resetObs{}
	p := newTestIdempotent(t, cl, obs, 0)
	requests := cl.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "out", Observe: true, Count: -1})
	a, b := sizedMsgs("a", 40, 300), sizedMsgs("b", 40, 300)
	if err := p.Produce(context.Background(), "out", 0, a); err != nil {
		t.Fatal(err)
	}
	if lim := learned(p, "out"); lim < 4000 || lim > 40*400 {
		t.Errorf("learned limit %d, want at least the topic's 4000 and below the refused batch", lim)
	}
	if err := p.Produce(context.Background(), "out", 0, b); err != nil {
		t.Fatal(err)
	}
	equalStrings(t, "log", values(t, cl, "out", 0), valuesOf(a, b))
	bs := checkSequences(t, cl, "out", 0)
	if len(obs.resetCounts()) != 0 || obs.errors.Load() != 0 {
		t.Errorf("resets %v, produce errors %d; want none", obs.resetCounts(), obs.errors.Load())
	}
	t.Logf("%d requests, %d stored batches", requests.Hits(), len(bs))
}

// learned returns what p knows of topic's limit.
func learned(p *Producer, topic string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.limitLocked(topic).n.Load()
}

// TestProducerBoundsBatchesByTopicLimit proves SetMaxMessageBytes: with the topic's limit known,
// no request is refused, and every stored batch is within the limit.
func TestProducerBoundsBatchesByTopicLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []kafka.Compression{0, kafka.Snappy} {
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			t.Parallel()
			cl := startCluster(t, map[string]int32{"out": 1})
			limitTopic(t, cl, "out", 4000)
			p := newTestIdempotent(t, cl, nil, c)
			lim, err := MaxMessageBytes(context.Background(), cl.client, "out")
			if err != nil {
				t.Fatal(err)
			}
			p.SetMaxMessageBytes("out", lim[0])
			requests := cl.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "out", Observe: true, Count: -1})
			a := sizedMsgs("a", 100, 150)
			if err := p.Produce(context.Background(), "out", 0, a); err != nil {
				t.Fatal(err)
			}
			equalStrings(t, "log", values(t, cl, "out", 0), valuesOf(a))
			bs := checkSequences(t, cl, "out", 0)
			if int(requests.Hits()) != len(bs) || len(bs) < 4 {
				t.Errorf("%d requests for %d stored batches; want one each, and at least 4", requests.Hits(), len(bs))
			}
		})
	}
}

// TestProducerRefusesRecord proves the isolation of a record refused on its own: the records
// before it are written, the caller learns which one it is, the records after it are not sent,
// and the partition goes on with the next call under the same sequence (kfake checks it: a
// skipped sequence would be OUT_OF_ORDER_SEQUENCE_NUMBER and a reset). With and without the
// topic's limit known, with and without idempotence.
func TestProducerRefusesRecord(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		known, idempotent bool
	}{
		{"limit unknown", false, true},
		{"limit known", true, true},
		{"without idempotence", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cl := startCluster(t, map[string]int32{"out": 1})
			limitTopic(t, cl, "out", 4000)
			obs := &resetObs{}
			p := newTestProducer(t, cl, ProducerConfig{Idempotent: tc.idempotent, Observer: obs})
			if tc.known {
				p.SetMaxMessageBytes("out", 4000)
			}
			a, big, b, c := sizedMsgs("a", 7, 100), sizedMsgs("big", 1, 5000), sizedMsgs("b", 5, 100), sizedMsgs("c", 3, 100)
			msgs := append(append(append([]Record{}, a...), big...), b...)
			err := p.Produce(context.Background(), "out", 0, msgs)
			var re *RefusedError
			if !errors.As(err, &re) || re.Index != len(a) || re.Reason != RefusalMessageTooLarge || re.Topic != "out" ||
				!errors.Is(err, kafka.MessageSizeTooLarge) {
				t.Fatalf("Produce = %v, want record %d refused as too large", err, len(a))
			}
			if err := p.Produce(context.Background(), "out", 0, c); err != nil {
				t.Fatal(err)
			}
			equalStrings(t, "log", values(t, cl, "out", 0), valuesOf(a, c))
			if tc.idempotent {
				checkSequences(t, cl, "out", 0)
			}
			if len(obs.resetCounts()) != 0 || obs.errors.Load() != 0 || p.Failing() {
				t.Errorf("resets %v, produce errors %d, failing %v; want none", obs.resetCounts(), obs.errors.Load(), p.Failing())
			}
		})
	}
}

// refuseValues makes cl answer INVALID_RECORD to every produce request whose batch holds a
// record whose value starts with prefix, as a broker that validates records does, and returns
// a counter of the refused requests.
func refuseValues(cl *testCluster, prefix string) *atomic.Int64 {
	var refused atomic.Int64
	cl.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		cl.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		res := req.ResponseKind().(*kmsg.ProduceResponse)
		bad := false
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				var d wholeDecoder
				_, recs, _, err := d.Decode(rp.Records)
				for _, r := range recs {
					bad = bad || err == nil && bytes.HasPrefix(r.value, []byte(prefix))
				}
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.InvalidRecord.Code
				st.Partitions = append(st.Partitions, sp)
			}
			res.Topics = append(res.Topics, st)
		}
		if !bad {
			return nil, nil, false
		}
		refused.Add(1)
		return res, nil, true
	})
	return &refused
}

// TestProducerIsolatesInvalidRecord proves the bisection for a refusal that is not about size: a
// broker refuses every batch that holds the record "bad-0" as INVALID_RECORD; the batch of 12
// is halved until that record is refused on its own, the 5 records before it are written and the
// 6 after it are not sent.
func TestProducerIsolatesInvalidRecord(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 1})
	p := newTestIdempotent(t, cl, &resetObs{}, 0)
	refused := refuseValues(cl, "bad")
	msgs := append(append(testMsgs("a", 5), testMsgs("bad", 1)...), testMsgs("b", 6)...)
	err := p.Produce(context.Background(), "out", 0, msgs)
	var re *RefusedError
	if !errors.As(err, &re) || re.Index != 5 || re.Reason != RefusalInvalidRecord {
		t.Fatalf("Produce = %v, want record 5 refused as invalid", err)
	}
	if n := refused.Load(); n < 2 || n > 5 {
		t.Errorf("%d refused requests, want a bisection (2 to 5)", n)
	}
	equalStrings(t, "log", values(t, cl, "out", 0), valuesOf(msgs[:5]))
	checkSequences(t, cl, "out", 0)
}

// TestProducerRefusalSparesOtherCallers proves that a refusal fails only the caller whose record
// it is: two callers' records queued behind a retried batch share one request, which is refused
// for the big record of one of them; the other caller's records are all written.
func TestProducerRefusalSparesOtherCallers(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 1})
	limitTopic(t, cl, "out", 8000)
	p := newTestIdempotent(t, cl, &resetObs{}, 0)
	lead, big, small := sizedMsgs("lead", 3, 100), sizedMsgs("mixed", 6, 100), sizedMsgs("small", 6, 100)
	big[4] = sizedMsgs("big", 1, 9000)[0]
	var shared atomic.Bool // a request held records of both callers
	cl.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		for _, rt := range kr.(*kmsg.ProduceRequest).Topics {
			for _, rp := range rt.Partitions {
				shared.CompareAndSwap(false, bytes.Contains(rp.Records, []byte("mixed-0")) && bytes.Contains(rp.Records, []byte("small-0")))
			}
		}
		return nil, nil, false
	})
	h := cl.Fault(produceFault("out", kerr.NotEnoughReplicas, 1))
	done := make(chan error, 3)
	go func() { done <- p.Produce(context.Background(), "out", 0, lead) }()
	eventually(t, func() bool { return h.Hits() > 0 }) // the leader's batch waits for its retry
	errs := make(chan error, 2)
	go func() { errs <- p.Produce(context.Background(), "out", 0, big) }()
	go func() { done <- p.Produce(context.Background(), "out", 0, small) }()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	var re *RefusedError
	if err := <-errs; !errors.As(err, &re) || re.Index != 4 {
		t.Fatalf("Produce of the big record's caller = %v, want record 4 refused", err)
	}
	got := values(t, cl, "out", 0)
	if len(got) != len(lead)+4+len(small) {
		t.Fatalf("log %q: want lead, mixed-0..3 and small", got)
	}
	checkSequences(t, cl, "out", 0)
	if !shared.Load() {
		t.Error("the two callers' records never shared a request")
	}
}

// TestProducePartsRefusals proves that ProduceParts reports the refusals of every partition.
func TestProducePartsRefusals(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 3})
	limitTopic(t, cl, "out", 4000)
	p := newTestIdempotent(t, cl, nil, 0)
	parts := [][]Record{sizedMsgs("p0", 3, 100), sizedMsgs("p1", 3, 100), sizedMsgs("p2", 3, 100)}
	parts[0][1] = sizedMsgs("big0", 1, 5000)[0]
	parts[2][2] = sizedMsgs("big2", 1, 5000)[0]
	err := p.ProduceParts(context.Background(), "out", parts)
	rs := Refusals(err)
	if len(rs) != 2 || rs[0].Partition+rs[1].Partition != 2 || rs[0].Index+rs[1].Index != 3 {
		t.Fatalf("ProduceParts = %v, want refusals of p0[1] and p2[2]", err)
	}
	equalStrings(t, "p0", values(t, cl, "out", 0), valuesOf(parts[0][:1]))
	equalStrings(t, "p1", values(t, cl, "out", 1), valuesOf(parts[1]))
	equalStrings(t, "p2", values(t, cl, "out", 2), valuesOf(parts[2][:2]))
	if Refusals(nil) != nil || Refusals(errors.New("x")) != nil {
		t.Error("Refusals of no refusal")
	}
}

// TestProducerLimitLowered proves that a limit lowered after it was read costs a split, not a
// failure: the producer believes 1 MiB, the topic takes 3000 bytes.
func TestProducerLimitLowered(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, map[string]int32{"out": 1})
	p := newTestIdempotent(t, cl, nil, 0)
	p.SetMaxMessageBytes("out", 1<<20)
	limitTopic(t, cl, "out", 3000)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := sizedMsgs("a", 50, 200)
	if err := p.Produce(ctx, "out", 0, a); err != nil {
		t.Fatal(err)
	}
	equalStrings(t, "log", values(t, cl, "out", 0), valuesOf(a))
	checkSequences(t, cl, "out", 0)
	if lim := learned(p, "out"); lim >= 1<<20 || lim < 3000 {
		t.Errorf("learned limit %d, want below 1 MiB and at least the topic's 3000", lim)
	}
}
