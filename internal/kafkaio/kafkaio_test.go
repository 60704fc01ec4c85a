package kafkaio_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/tier"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestBackoffDelay(t *testing.T) {
	fixed := func(x float64) func() float64 { return func() float64 { return x } }
	for _, tc := range []struct {
		name    string
		b       kafkaio.Backoff
		attempt int
		want    time.Duration
	}{
		{"defaults, no jitter", kafkaio.Backoff{Rand: fixed(0.5)}, 0, 100 * time.Millisecond},
		{"defaults double", kafkaio.Backoff{Rand: fixed(0.5)}, 3, 800 * time.Millisecond},
		{"defaults cap at 5s", kafkaio.Backoff{Rand: fixed(0.5)}, 9, 5 * time.Second},
		{"low jitter", kafkaio.Backoff{Min: time.Second, Max: time.Minute, Rand: fixed(0)}, 1, 1600 * time.Millisecond},
		{"high jitter", kafkaio.Backoff{Min: time.Second, Max: time.Minute, Rand: fixed(0.75)}, 1, 2200 * time.Millisecond},
		{"jitter never passes Max", kafkaio.Backoff{Min: time.Second, Max: 2 * time.Second, Rand: fixed(0.99)}, 1, 2 * time.Second},
		{"jitter below Max near the cap", kafkaio.Backoff{Min: time.Second, Max: 2 * time.Second, Rand: fixed(0)}, 5, 1600 * time.Millisecond},
		{"negative attempt is the first", kafkaio.Backoff{Min: time.Second, Max: time.Minute, Rand: fixed(0.5)}, -3, time.Second},
		{"huge attempt does not overflow", kafkaio.Backoff{Min: time.Second, Max: time.Hour, Rand: fixed(0.5)}, 1 << 20, time.Hour},
		{"Max below Min", kafkaio.Backoff{Min: time.Second, Max: 10 * time.Millisecond, Rand: fixed(0.5)}, 0, 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.Delay(tc.attempt); got != tc.want {
				t.Errorf("Delay(%d) = %v, want %v", tc.attempt, got, tc.want)
			}
		})
	}
}

// TestBackoffDelaySpread checks that the default randomness spreads delays over [0.8, 1.2) of the
// nominal delay.
func TestBackoffDelaySpread(t *testing.T) {
	b := kafkaio.Backoff{Min: time.Second, Max: time.Hour}
	lo, hi := time.Hour, time.Duration(0)
	for range 1000 {
		d := b.Delay(2)
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 3200*time.Millisecond || hi >= 4800*time.Millisecond || hi-lo < 1200*time.Millisecond {
		t.Errorf("delays of attempt 2 span [%v, %v], want most of [3.2s, 4.8s)", lo, hi)
	}
}

func TestRetry(t *testing.T) {
	errFail := errors.New("fail")
	for _, tc := range []struct {
		name      string
		attempts  int
		failFirst int // op fails this many times
		cancelAt  int // cancel ctx during this call (-1: never)
		wantCalls int
		wantErr   error
		wantWait  time.Duration // fake time spent sleeping
	}{
		{"first try", 3, 0, -1, 1, nil, 0},
		{"after two failures", 0, 2, -1, 3, nil, 300 * time.Millisecond},
		{"attempts run out", 3, 10, -1, 3, errFail, 300 * time.Millisecond},
		{"ctx ends during a call", 0, 10, 1, 2, context.Canceled, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				b := kafkaio.Backoff{Rand: func() float64 { return 0.5 }}
				calls, start := 0, time.Now()
				err := b.Retry(ctx, tc.attempts, func(attempt int) error {
					if attempt != calls {
						t.Errorf("attempt %d on call %d", attempt, calls)
					}
					if calls == tc.cancelAt {
						cancel()
					}
					calls++
					if calls <= tc.failFirst {
						return errFail
					}
					return nil
				})
				if calls != tc.wantCalls {
					t.Errorf("%d calls, want %d", calls, tc.wantCalls)
				}
				if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
					t.Errorf("Retry = %v, want %v", err, tc.wantErr)
				}
				if tc.cancelAt >= 0 && !errors.Is(err, errFail) {
					t.Errorf("Retry = %v, want it to wrap op's error too", err)
				}
				if waited := time.Since(start); waited != tc.wantWait {
					t.Errorf("waited %v, want %v", waited, tc.wantWait)
				}
			})
		})
	}
}

// TestRetryPermanent proves that a Permanent error ends Retry at once, unwrapped, and that
// errors.Is sees through the mark.
func TestRetryPermanent(t *testing.T) {
	errFail := errors.New("fail")
	if !errors.Is(kafkaio.Permanent(errFail), errFail) || kafkaio.Permanent(nil) != nil {
		t.Fatal("Permanent hides its error")
	}
	calls := 0
	err := kafkaio.Backoff{}.Retry(context.Background(), 0, func(attempt int) error {
		calls++
		if attempt == 0 {
			return errors.New("transient")
		}
		return kafkaio.Permanent(fmt.Errorf("wrapped: %w", errFail))
	})
	if calls != 2 || err == nil || err.Error() != "wrapped: fail" || !errors.Is(err, errFail) {
		t.Errorf("Retry = %v after %d calls, want the permanent error after 2", err, calls)
	}
}

func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		if !kafkaio.Sleep(ctx, time.Minute) || time.Since(start) != time.Minute {
			t.Fatal("Sleep on a live context did not sleep its full duration")
		}
		time.AfterFunc(time.Second, cancel)
		start = time.Now()
		if kafkaio.Sleep(ctx, time.Hour) || time.Since(start) != time.Second {
			t.Fatalf("Sleep returned after %v, want false after 1s, when ctx ended", time.Since(start))
		}
	})
}

// cluster starts a kfake broker on 127.0.0.1 with topic "t" of 3 partitions and returns it with a
// client.
func cluster(t *testing.T) (*kfake.Cluster, *kafka.Client) {
	t.Helper()
	tier.Integration(t)
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(3, "t"))
	if err != nil {
		t.Fatal(err)
	}
	client := kafkaio.Conn{Brokers: c.ListenAddrs()}.Client(10 * time.Second)
	t.Cleanup(func() {
		kafkaio.CloseIdle(client)
		c.Close()
	})
	return c, client
}

// produce writes n records to topic/partition with keys "k<i>", values "v<i>" and a header; every
// fifth record has a null key and every seventh an empty value.
func produce(t *testing.T, c *kafka.Client, topic string, partition, from, n int, at time.Time) {
	t.Helper()
	var msgs []kafkaio.Record
	for i := from; i < from+n; i++ {
		m := kafkaio.Record{Time: at, Value: fmt.Appendf(nil, "v%d", i), Headers: []kafkaio.Header{{Key: "i", Value: fmt.Append(nil, i)}}}
		if i%5 != 4 {
			m.Key = fmt.Appendf(nil, "k%d", i)
		}
		if i%7 == 6 {
			m.Value = []byte{}
		}
		msgs = append(msgs, m)
	}
	if err := kafkaio.NewProducer(c, kafkaio.ProducerConfig{Attempts: 1}).Produce(context.Background(), topic, partition, msgs); err != nil {
		t.Fatal(err)
	}
}

// collect is a Read callback that checks and keeps copies of records.
type collect struct {
	t    *testing.T
	offs []int64
	at   time.Time
}

func (c *collect) fn(recs []kafkaio.Record) error {
	for _, r := range recs {
		i := int(r.Offset)
		wantKey := fmt.Sprintf("k%d", i)
		if i%5 == 4 {
			if r.Key != nil {
				c.t.Errorf("offset %d: key %q, want null", i, r.Key)
			}
		} else if string(r.Key) != wantKey {
			c.t.Errorf("offset %d: key %q, want %q", i, r.Key, wantKey)
		}
		wantValue := fmt.Sprintf("v%d", i)
		if i%7 == 6 {
			wantValue = ""
		}
		if r.Value == nil || string(r.Value) != wantValue {
			c.t.Errorf("offset %d: value %q (nil %v), want %q", i, r.Value, r.Value == nil, wantValue)
		}
		if len(r.Headers) != 1 || string(r.Headers[0].Value) != fmt.Sprint(i) {
			c.t.Errorf("offset %d: headers %v", i, r.Headers)
		}
		if !c.at.IsZero() && !r.Time.Equal(c.at.Truncate(time.Millisecond)) {
			c.t.Errorf("offset %d: time %v, want %v", i, r.Time, c.at)
		}
		c.offs = append(c.offs, r.Offset)
	}
	return nil
}

func offsets(from, to int64) []int64 {
	var out []int64
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}

// TestRead reads ranges of a partition of 2000 records over TCP, in small fetches, with broker
// errors injected into fetches.
func TestRead(t *testing.T) {
	t.Parallel()
	kc, c := cluster(t)
	at := time.Now().Add(-time.Minute)
	for from := 0; from < 2000; from += 500 {
		produce(t, c, "t", 1, from, 500, at)
	}
	fetchFault := func(err *kerr.Error, count int) kfake.Fault {
		return kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "t", Err: err, Count: count}
	}
	for _, tc := range []struct {
		name        string
		start, end  int64
		fault       *kfake.Fault
		failures    int
		wantErr     error
		wantOffs    []int64
		wantRetries int
	}{
		{"whole partition", 0, 2000, nil, 0, nil, offsets(0, 2000), 0},
		{"middle", 333, 1501, nil, 0, nil, offsets(333, 1501), 0},
		{"one record", 1999, 2000, nil, 0, nil, offsets(1999, 2000), 0},
		{"empty range", 700, 700, nil, 0, nil, nil, 0},
		{"transient errors are retried", 10, 900, ptr(fetchFault(kerr.NotLeaderForPartition, 2)), 3, nil, offsets(10, 900), 2},
		{"out of range with nothing deleted is retried", 10, 20, ptr(fetchFault(kerr.OffsetOutOfRange, 1)), 3, nil, offsets(10, 20), 1},
		{"lasting errors give up", 10, 900, ptr(fetchFault(kerr.NotLeaderForPartition, -1)), 3, kafka.NotLeaderForPartition, nil, 2},
		{"end past the log stalls", 1990, 2005, nil, 0, kafkaio.ErrStalled, offsets(1990, 2000), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fault != nil {
				h := kc.Fault(*tc.fault)
				defer h.Remove()
			}
			got := &collect{t: t, at: at}
			retries := 0
			err := kafkaio.Read(context.Background(), c, kafkaio.Range{
				Topic: "t", Partition: 1, Start: tc.start, End: tc.end, MaxBytes: 8 << 10, MaxWait: 10 * time.Millisecond,
				Backoff: kafkaio.Backoff{Min: time.Millisecond, Max: time.Millisecond}, Failures: tc.failures, Stalls: 2,
				OnRetry: func(int, error) { retries++ },
			}, got.fn)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Read = %v, want %v", err, tc.wantErr)
			}
			if !slices.Equal(got.offs, tc.wantOffs) {
				t.Errorf("read %d records %v…, want %d", len(got.offs), got.offs[:min(5, len(got.offs))], len(tc.wantOffs))
			}
			if retries != tc.wantRetries {
				t.Errorf("%d retries, want %d", retries, tc.wantRetries)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// retentionTopic creates topic, one partition whose records are deleted an hour after their
// timestamp (when the test calls kfake's ApplyRetention).
func retentionTopic(t *testing.T, c *kafka.Client, topic string) {
	t.Helper()
	res, err := c.CreateTopics(context.Background(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: topic, NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "retention.ms", ConfigValue: "3600000"}},
	}}})
	if err == nil {
		err = res.Errors[topic]
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestReadRetention proves that records deleted by retention before and while they are read are
// reported to OnSkip and the rest is read from the earliest offset left.
func TestReadRetention(t *testing.T) {
	t.Parallel()
	kc, c := cluster(t)
	ctx := context.Background()
	retentionTopic(t, c, "r")
	produce(t, c, "r", 0, 0, 100, time.Now().Add(-2*time.Hour))
	produce(t, c, "r", 0, 100, 50, time.Now())
	kc.ApplyRetention()
	got := &collect{t: t}
	var skips [][2]int64
	err := kafkaio.Read(ctx, c, kafkaio.Range{Topic: "r", Start: 20, End: 150, Failures: 1,
		OnSkip: func(from, to int64) { skips = append(skips, [2]int64{from, to}) }}, got.fn)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.offs, offsets(100, 150)) || !slices.Equal(skips, [][2]int64{{20, 100}}) {
		t.Errorf("read %v… (%d), skips %v; want 100..149 and one skip [20, 100)", got.offs[:min(3, len(got.offs))], len(got.offs), skips)
	}
}

// TestReadUnbounded proves that a Read without End delivers records as they are produced and ends
// with ctx's error; and that the callback's error ends Read unchanged.
func TestReadUnbounded(t *testing.T) {
	t.Parallel()
	_, c := cluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	produce(t, c, "t", 2, 0, 10, time.Now())
	got := &collect{t: t}
	err := kafkaio.Read(ctx, c, kafkaio.Range{Topic: "t", Partition: 2, End: -1, MaxWait: 10 * time.Millisecond}, func(recs []kafkaio.Record) error {
		if err := got.fn(recs); err != nil {
			return err
		}
		switch len(got.offs) {
		case 10:
			produce(t, c, "t", 2, 10, 5, time.Now())
		case 15:
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || !slices.Equal(got.offs, offsets(0, 15)) {
		t.Errorf("Read = %v after %d records, want context.Canceled after 15", err, len(got.offs))
	}

	stop := errors.New("stop")
	err = kafkaio.Read(context.Background(), c, kafkaio.Range{Topic: "t", Partition: 2, End: -1},
		func([]kafkaio.Record) error { return stop })
	if err != stop {
		t.Errorf("Read = %v, want the callback's error unchanged", err)
	}
}

// TestMetadata checks PartitionCounts, ListOffsets and TopicOffsets, including a missing topic
// and partition.
func TestMetadata(t *testing.T) {
	t.Parallel()
	_, c := cluster(t)
	ctx := context.Background()
	produce(t, c, "t", 0, 0, 7, time.Now())
	if n, err := kafkaio.PartitionCounts(ctx, c, "t", "t"); err != nil || !slices.Equal(n, []int{3, 3}) {
		t.Errorf("PartitionCounts = %v, %v; want [3 3]", n, err)
	}
	if _, err := kafkaio.PartitionCount(ctx, c, "missing"); !errors.Is(err, kafka.UnknownTopicOrPartition) {
		t.Errorf("PartitionCount(missing) = %v, want UnknownTopicOrPartition", err)
	}
	offs, err := kafkaio.ListOffsets(ctx, c, "t", []int{0, 1, 9})
	if err != nil {
		t.Fatal(err)
	}
	if o := offs[0]; o.Error != nil || o.FirstOffset != 0 || o.LastOffset != 7 {
		t.Errorf("offsets of t/0 = %+v, want 0..7", o)
	}
	if o := offs[9]; !errors.Is(o.Error, kafka.UnknownTopicOrPartition) {
		t.Errorf("offsets of t/9 = %+v, want UnknownTopicOrPartition", o)
	}
	first, end, err := kafkaio.TopicOffsets(ctx, c, "t", 3)
	if err != nil || !slices.Equal(first, []int64{0, 0, 0}) || !slices.Equal(end, []int64{7, 0, 0}) {
		t.Errorf("TopicOffsets = %v, %v, %v; want [0 0 0] [7 0 0]", first, end, err)
	}
	if _, _, err := kafkaio.TopicOffsets(ctx, c, "t", 4); !errors.Is(err, kafka.UnknownTopicOrPartition) {
		t.Errorf("TopicOffsets of a partition too many = %v, want UnknownTopicOrPartition", err)
	}
}

// TestOffsetsAfter finds offsets by record timestamp: the first record at or after a time, -1
// past the newest record, and an error for a partition the topic does not have.
func TestOffsetsAfter(t *testing.T) {
	t.Parallel()
	_, c := cluster(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for i := range 5 { // offsets 10i..10i+9 at base + i minutes
		produce(t, c, "t", 2, 10*i, 10, base.Add(time.Duration(i)*time.Minute))
	}
	for _, tc := range []struct {
		at   time.Time
		want int64
	}{
		{base.Add(-time.Hour), 0},
		{base, 0},
		{base.Add(time.Millisecond), 10},
		{base.Add(2 * time.Minute), 20},
		{base.Add(150 * time.Second), 30},
		{base.Add(4 * time.Minute), 40},
		{base.Add(5 * time.Minute), -1},
	} {
		got, err := kafkaio.OffsetsAfter(ctx, c, "t", []int{0, 2}, tc.at)
		if err != nil {
			t.Fatal(err)
		}
		if got[2] != tc.want || got[0] != -1 {
			t.Errorf("OffsetsAfter(%v) = %v, want partition 2 at %d and the empty partition 0 at -1", tc.at.Sub(base), got, tc.want)
		}
	}
	if _, err := kafkaio.OffsetsAfter(ctx, c, "t", []int{7}, base); !errors.Is(err, kafka.UnknownTopicOrPartition) {
		t.Errorf("OffsetsAfter of a missing partition = %v, want UnknownTopicOrPartition", err)
	}
}
