package consumer_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/embedkafka/kfaketest"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/tier"
	"github.com/kdedup/kdedup/internal/txntest"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// outputCounts is the number of records in each partition of the output topic of the
// OutputReader tests; partition 2 stays empty.
var outputCounts = []int{10, 5, 0, 30}

const markHeader = "kdedup-duplicate"

// outputRecord returns record i of output partition q: every third one carries the mark header
// (after a header of its own, as the Worker writes it) and every seventh has no key.
func outputRecord(q, i int) (m kafkaio.Record, id string, marked, keyed bool) {
	id = fmt.Sprintf("o-%d-%d", q, i)
	m = kafkaio.Record{Value: []byte(fmt.Sprint(i)), Headers: []kafkaio.Header{{Key: "trace", Value: []byte("x")}}}
	keyed = i%7 != 6
	if keyed {
		m.Key = []byte(id)
	}
	marked = i%3 == 2
	if marked {
		m.Headers = append(m.Headers, kafkaio.Header{Key: markHeader, Value: []byte(consumer.MarkValue)})
	}
	return m, id, marked, keyed
}

// newOutputEnv starts a cluster whose output topic holds outputCounts records.
func newOutputEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, len(outputCounts), len(outputCounts), embedkafka.Options{})
	for q, n := range outputCounts {
		var msgs []kafkaio.Record
		for i := range n {
			m, _, _, _ := outputRecord(q, i)
			msgs = append(msgs, m)
		}
		if err := e.cl.Produce(context.Background(), e.out, q, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// TestOutputReaderEnd proves that End returns the high watermarks of exactly the output
// partitions that can hold a partition's records: its own under partitioning same, all of them
// under hash and for the global scope (input partition -1).
func TestOutputReaderEnd(t *testing.T) {
	t.Parallel()
	e := newOutputEnv(t)
	all := map[int32]int64{0: 10, 1: 5, 2: 0, 3: 30}
	for _, tc := range []struct {
		name         string
		partitioning consumer.Partitioning
		input        int32
		want         map[int32]int64
	}{
		{"same", consumer.PartitionSame, 3, map[int32]int64{3: 30}},
		{"same empty partition", consumer.PartitionSame, 2, map[int32]int64{2: 0}},
		{"hash", consumer.PartitionHash, 1, all},
		{"global same", consumer.PartitionSame, -1, all},
		{"global hash", consumer.PartitionHash, -1, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.config()
			cfg.Partitioning = tc.partitioning
			r := consumer.NewOutputReader(cfg, keyFuncFor(t, "key"), testLog)
			defer r.Close()
			got, err := r.End(context.Background(), tc.input)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("End(%d) = %v, want %v", tc.input, got, tc.want)
			}
		})
	}
}

// TestOutputReaderEndErrors proves that End reports a missing topic, a missing partition and
// unreachable brokers as "consumer: ..." errors instead of hanging or returning offsets.
func TestOutputReaderEndErrors(t *testing.T) {
	t.Parallel()
	tier.Integration(t)
	e := newOutputEnv(t)
	down, err := embedkafka.Start(embedkafka.Options{})
	if err != nil {
		t.Fatal(err)
	}
	downAddrs := down.Addrs()
	down.Close()
	for _, tc := range []struct {
		name  string
		edit  func(*consumer.Config)
		input int32
	}{
		{"missing topic", func(c *consumer.Config) { c.OutputTopic = "nope" }, -1},
		{"missing partition", func(c *consumer.Config) {}, 9},
		{"brokers down", func(c *consumer.Config) { c.Brokers = downAddrs; c.ProduceTimeout = time.Second }, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.config()
			tc.edit(&cfg)
			r := consumer.NewOutputReader(cfg, keyFuncFor(t, "key"), testLog)
			defer r.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, err := r.End(ctx, tc.input)
			if err == nil || !strings.HasPrefix(err.Error(), "consumer: ") {
				t.Fatalf("End = %v, %v; want a consumer: error", got, err)
			}
			if ctx.Err() != nil {
				t.Errorf("End took until the context's deadline: %v", err)
			}
			t.Log(err)
		})
	}
}

// TestOutputReaderRewarm proves that Rewarm passes exactly the identities of the records between
// the given offsets and the end, partition by partition in offset order, skipping records without
// identity and, in mark mode only, marked records; and that nothing to read (offset at the end, an
// empty partition, a partition the topic does not have, an offset past the end) adds nothing and
// is no error.
func TestOutputReaderRewarm(t *testing.T) {
	t.Parallel()
	e := newOutputEnv(t)
	for _, tc := range []struct {
		name string
		mode consumer.Mode
		from map[int32]int64
	}{
		{"range", consumer.ModeDrop, map[int32]int64{0: 3, 1: 0, 3: 12}},
		{"mark mode skips marked records", consumer.ModeMark, map[int32]int64{0: 3, 1: 0, 3: 12}},
		{"whole partition", consumer.ModeDrop, map[int32]int64{3: 0}},
		{"last record only", consumer.ModeDrop, map[int32]int64{3: 29}},
		{"nothing new", consumer.ModeDrop, map[int32]int64{0: 10, 1: 5, 3: 30}},
		{"empty partition", consumer.ModeDrop, map[int32]int64{2: 0}},
		{"missing partition", consumer.ModeDrop, map[int32]int64{9: 0, 1: 2}},
		{"offset past the end", consumer.ModeDrop, map[int32]int64{0: 50, 1: 4}},
		{"no partitions", consumer.ModeDrop, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.config()
			cfg.Mode = tc.mode
			r := consumer.NewOutputReader(cfg, keyFuncFor(t, "key"), testLog)
			defer r.Close()
			var want []string
			for _, q := range slices.Sorted(maps.Keys(tc.from)) {
				if int(q) >= len(outputCounts) {
					continue
				}
				for i := int(tc.from[q]); i < outputCounts[q]; i++ {
					_, id, marked, keyed := outputRecord(int(q), i)
					if keyed && !(marked && tc.mode == consumer.ModeMark) {
						want = append(want, id)
					}
				}
			}
			var got []string
			began := time.Now()
			n, err := r.Rewarm(context.Background(), tc.from, func(id []byte, _ time.Time) { got = append(got, string(id)) })
			if err != nil {
				t.Fatal(err)
			}
			if n != len(got) {
				t.Errorf("Rewarm returned %d, add was called %d times", n, len(got))
			}
			if !slices.Equal(got, want) {
				t.Errorf("identities:\n got %v\nwant %v", got, want)
			}
			t.Logf("%d identities in %v", n, time.Since(began).Round(time.Millisecond))
		})
	}
}

// TestOutputReaderRewarmStopsAtEnd proves that records produced while Rewarm runs are not read:
// it stops at the end offset it found when it was called instead of waiting for more.
func TestOutputReaderRewarmStopsAtEnd(t *testing.T) {
	t.Parallel()
	e := newOutputEnv(t)
	r := consumer.NewOutputReader(e.config(), keyFuncFor(t, "key"), testLog)
	defer r.Close()
	var got []string
	n, err := r.Rewarm(context.Background(), map[int32]int64{1: 0}, func(id []byte, _ time.Time) {
		if len(got) == 0 {
			// The end offset (5) is known by now; these land behind it.
			for i := range 5 {
				if err := e.cl.Produce(context.Background(), e.out, 1, kafkaio.Record{Key: []byte(fmt.Sprintf("late-%d", i))}); err != nil {
					t.Error(err)
				}
			}
		}
		got = append(got, string(id))
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"o-1-0", "o-1-1", "o-1-2", "o-1-3", "o-1-4"}
	if n != len(want) || !slices.Equal(got, want) {
		t.Errorf("Rewarm = %d, %v; want %d, %v", n, got, len(want), want)
	}
}

// TestOutputReaderRewarmManyFetches proves that a range larger than one fetch response is read
// completely and exactly, fetch after fetch.
func TestOutputReaderRewarmManyFetches(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1, embedkafka.Options{})
	const n = 3000
	var msgs []kafkaio.Record
	for i := range n {
		msgs = append(msgs, kafkaio.Record{Key: []byte(fmt.Sprintf("id-%05d", i)), Value: make([]byte, 100)})
	}
	if err := e.cl.Produce(context.Background(), e.out, 0, msgs...); err != nil {
		t.Fatal(err)
	}
	cfg := e.config()
	cfg.FetchMaxBytes = 16 << 10 // a produce request of 500 records is about 60 KiB
	r := consumer.NewOutputReader(cfg, keyFuncFor(t, "key"), testLog)
	defer r.Close()
	next := 250
	n2, err := r.Rewarm(context.Background(), map[int32]int64{0: int64(next)}, func(id []byte, _ time.Time) {
		if want := fmt.Sprintf("id-%05d", next); string(id) != want {
			t.Fatalf("got %s, want %s", id, want)
		}
		next++
	})
	if err != nil {
		t.Fatal(err)
	}
	if n2 != n-250 || next != n {
		t.Errorf("Rewarm = %d, stopped before id %d; want %d and %d", n2, next, n-250, n)
	}
}

// TestOutputReaderRewarmRetention proves that when the records after the checkpoint's offset were
// deleted by retention, Rewarm warns and reads what is left from the earliest available offset.
func TestOutputReaderRewarmRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 0, embedkafka.Options{})
	ctx := context.Background()
	res, err := e.cl.Client().CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: e.out, NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "retention.ms", ConfigValue: "3600000"}},
	}}})
	if err == nil {
		err = res.Errors[e.out]
	}
	if err != nil {
		t.Fatal(err)
	}
	old, recent := time.Now().Add(-2*time.Hour), time.Now()
	produce := func(from, to int, at time.Time) {
		var msgs []kafkaio.Record
		for i := from; i < to; i++ {
			msgs = append(msgs, kafkaio.Record{Key: []byte(fmt.Sprintf("id-%d", i)), Time: at})
		}
		if err := e.cl.Produce(ctx, e.out, 0, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, 100, old)
	produce(100, 150, recent)
	kfaketest.ApplyRetention(e.cl.Fake())
	logs := &captureHandler{}
	r := consumer.NewOutputReader(e.config(), keyFuncFor(t, "key"), slog.New(logs))
	defer r.Close()
	var skipped atomic.Int64
	r.OnSkipped(func(n int64) { skipped.Add(n) })
	var got []string
	n, err := r.Rewarm(ctx, map[int32]int64{0: 20}, func(id []byte, ts time.Time) {
		if !ts.Equal(recent.Truncate(time.Millisecond)) {
			t.Errorf("%s: timestamp %v, want the record's %v", id, ts, recent)
		}
		got = append(got, string(id))
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 50 || len(got) != 50 || got[0] != "id-100" || got[49] != "id-149" {
		t.Errorf("Rewarm = %d, %d identities (%v...); want 50 from id-100 to id-149", n, len(got), got[:min(3, len(got))])
	}
	if logs.count("deleted by retention") != 1 {
		t.Errorf("%d retention warnings, want 1", logs.count("deleted by retention"))
	}
	if skipped.Load() != 80 {
		t.Errorf("%d records reported skipped, want the 80 from 20 to 100", skipped.Load())
	}
}

// TestOutputReaderRewarmTruncated proves that an output partition that ends below the offset a
// checkpoint recorded (its log truncated, or the topic re-created) is reported: logged and
// counted by OnTruncated with the offsets gone, while the other partitions are re-warmed.
func TestOutputReaderRewarmTruncated(t *testing.T) {
	t.Parallel()
	e := newOutputEnv(t)
	logs := &captureHandler{}
	r := consumer.NewOutputReader(e.config(), keyFuncFor(t, "key"), slog.New(logs))
	defer r.Close()
	var truncated, skipped atomic.Int64
	r.OnTruncated(func(n int64) { truncated.Add(n) })
	r.OnSkipped(func(n int64) { skipped.Add(n) })
	n, err := r.Rewarm(context.Background(), map[int32]int64{0: int64(outputCounts[0]) + 7, 1: 4}, func([]byte, time.Time) {})
	if err != nil {
		t.Fatal(err)
	}
	if n != outputCounts[1]-4 {
		t.Errorf("Rewarm = %d, want the %d records of partition 1", n, outputCounts[1]-4)
	}
	if truncated.Load() != 7 || skipped.Load() != 0 || logs.count("truncated") != 1 {
		t.Errorf("truncated %d, skipped %d, %d log lines; want 7, 0, 1", truncated.Load(), skipped.Load(), logs.count("truncated"))
	}
}

// TestOutputReaderRewarmCancelled proves that Rewarm gives up with an error when its context ends.
func TestOutputReaderRewarmCancelled(t *testing.T) {
	t.Parallel()
	e := newOutputEnv(t)
	r := consumer.NewOutputReader(e.config(), keyFuncFor(t, "key"), testLog)
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n, err := r.Rewarm(ctx, map[int32]int64{3: 0}, func([]byte, time.Time) {}); err == nil || n != 0 {
		t.Errorf("Rewarm with a cancelled context = %d, %v; want 0 and an error", n, err)
	}
}

// TestOutputReaderRead proves that Read stops at the upper bounds it is given (or at the end of a
// partition, whichever comes first) and otherwise reads as Rewarm does.
func TestOutputReaderRead(t *testing.T) {
	t.Parallel()
	e := newOutputEnv(t)
	r := consumer.NewOutputReader(e.config(), keyFuncFor(t, "key"), testLog)
	defer r.Close()
	from := map[int32]int64{0: 3, 1: 0, 3: 12}
	to := map[int32]int64{0: 6, 1: 50, 3: 12} // 1: past the end; 3: empty range
	var want []string
	for q, end := range map[int]int{0: 6, 1: 5} {
		for i := int(from[int32(q)]); i < end; i++ {
			if _, id, _, keyed := outputRecord(q, i); keyed {
				want = append(want, id)
			}
		}
	}
	var got []string
	n, err := r.Read(context.Background(), from, to, func(id []byte, _ time.Time) { got = append(got, string(id)) })
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if n != len(got) || !slices.Equal(got, want) {
		t.Errorf("Read = %d, %v; want %v", n, got, want)
	}
}

// TestOutputReaderOffsetsAt proves that OffsetsAt finds the first output record at or after a
// time in each output partition that can hold a partition's records, and the end offset where
// none is.
func TestOutputReaderOffsetsAt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 2, embedkafka.Options{})
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for q := range 2 {
		var msgs []kafkaio.Record
		for i := range 20 { // one record a minute; partition 1 starts 10 minutes later
			msgs = append(msgs, kafkaio.Record{Key: []byte(fmt.Sprint(i)), Time: base.Add(time.Duration(10*q+i) * time.Minute)})
		}
		if err := e.cl.Produce(context.Background(), e.out, q, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name         string
		partitioning consumer.Partitioning
		input        int32
		at           time.Duration
		want         map[int32]int64
	}{
		{"same", consumer.PartitionSame, 0, 5 * time.Minute, map[int32]int64{0: 5}},
		{"before the first record", consumer.PartitionSame, 1, 90 * time.Second, map[int32]int64{1: 0}},
		{"hash", consumer.PartitionHash, 0, 15 * time.Minute, map[int32]int64{0: 15, 1: 5}},
		{"global", consumer.PartitionSame, -1, 25 * time.Minute, map[int32]int64{0: 20, 1: 15}},
		{"after the newest", consumer.PartitionSame, 1, time.Hour, map[int32]int64{1: 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.config()
			cfg.Partitioning = tc.partitioning
			r := consumer.NewOutputReader(cfg, keyFuncFor(t, "key"), testLog)
			defer r.Close()
			got, err := r.OffsetsAt(context.Background(), tc.input, base.Add(tc.at))
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("OffsetsAt(%d, base+%v) = %v, want %v", tc.input, tc.at, got, tc.want)
			}
		})
	}
}

// TestOutputReaderTransactions proves that the output topic is read with Config.Isolation: under
// read_committed End stops at the last stable offset and Rewarm and Read pass neither markers nor
// records of aborted or open transactions; under read_uncommitted they pass every data record,
// and never a marker.
func TestOutputReaderTransactions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1, embedkafka.Options{})
	w := txntest.New(t, e.cl.Addrs(), e.out)
	rec := func(id string) txntest.Record { return txntest.Record{Key: []byte(id), Value: []byte(id)} }
	w.Send("", rec("p1"))
	w.Txn("a", true, rec("c1"), rec("c2"))
	w.Txn("a", false, rec("x1"))
	w.Send("", rec("p2"))
	w.Begin("b")
	w.Send("b", rec("y1")) // left open: the last stable offset is its offset, 7
	w.Send("", rec("p3"))
	for _, tc := range []struct {
		iso  kafkaio.Isolation
		end  int64
		want []string
	}{
		{kafkaio.ReadCommitted, 7, []string{"p1", "c1", "c2", "p2"}},
		{kafkaio.ReadUncommitted, 9, []string{"p1", "c1", "c2", "x1", "p2", "y1", "p3"}},
	} {
		t.Run(string(tc.iso), func(t *testing.T) {
			cfg := e.config()
			cfg.Isolation = string(tc.iso)
			r := consumer.NewOutputReader(cfg, keyFuncFor(t, "key"), testLog)
			defer r.Close()
			end, err := r.End(context.Background(), 0)
			if err != nil || end[0] != tc.end {
				t.Fatalf("End = %v, %v; want %d", end, err, tc.end)
			}
			var got []string
			add := func(id []byte, _ time.Time) { got = append(got, string(id)) }
			if _, err := r.Rewarm(context.Background(), map[int32]int64{0: 0}, add); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Rewarm added %q, want %q", got, tc.want)
			}
			got = nil
			if _, err := r.Read(context.Background(), map[int32]int64{0: 0}, map[int32]int64{0: 100}, add); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Read added %q, want %q", got, tc.want)
			}
		})
	}
	w.End("b", false)
}

// emptyFetch answers a fetch of output partition q of topic with no records and a high watermark
// of 0, as a new leader whose high watermark has not caught up after a failover does; nil for
// other fetches.
func emptyFetch(topic string, q int32) func(kmsg.Request) kmsg.Response {
	return func(kr kmsg.Request) kmsg.Response {
		req := kr.(*kmsg.FetchRequest)
		if len(req.Topics) != 1 || req.Topics[0].Topic != topic || len(req.Topics[0].Partitions) != 1 ||
			req.Topics[0].Partitions[0].Partition != q {
			return nil
		}
		res := req.ResponseKind().(*kmsg.FetchResponse)
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = topic
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.Partition, rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = q, 0, 0, 0
		rt.Partitions = []kmsg.FetchResponseTopicPartition{rp}
		res.Topics = []kmsg.FetchResponseTopic{rt}
		return res
	}
}

// TestOutputReaderRewarmFailsClosed: a re-warm must read its whole range or fail, never take a
// broker's odd answer for the end of the partition. Five empty fetch answers below the end it read
// (a new leader whose high watermark lags) and one UNKNOWN_TOPIC_OR_PARTITION from ListOffsets (a
// leader that moved) are asked again, and every identity is re-warmed.
func TestOutputReaderRewarmFailsClosed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault func(e *env) func() int
	}{
		{"five empty fetch answers", func(e *env) func() int {
			return kfaketest.Answer(e.cl.Fake(), kmsg.Fetch, 5, emptyFetch(e.out, 3))
		}},
		{"one UNKNOWN_TOPIC_OR_PARTITION", func(e *env) func() int {
			h := e.cl.Fake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: e.out, Partitions: []int32{3},
				Err: kerr.UnknownTopicOrPartition, Count: 1})
			return h.Hits
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newOutputEnv(t)
			cfg := e.config()
			cfg.RetryBackoffMax = 50 * time.Millisecond
			r := consumer.NewOutputReader(cfg, keyFuncFor(t, "key"), testLog)
			defer r.Close()
			var want []string
			for i := range outputCounts[3] {
				if _, id, _, keyed := outputRecord(3, i); keyed {
					want = append(want, id)
				}
			}
			hits := tc.fault(e)
			var got []string
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			n, err := r.Rewarm(ctx, map[int32]int64{3: 0}, func(id []byte, _ time.Time) { got = append(got, string(id)) })
			if err != nil {
				t.Fatal(err)
			}
			if hits() == 0 {
				t.Fatal("the fault never hit")
			}
			if n != len(want) || !slices.Equal(got, want) {
				t.Errorf("re-warmed %d identities, want all %d:\n got %v\nwant %v", n, len(want), got, want)
			}
		})
	}
}

// TestOutputReaderEndRetriesLeaderMoving: End asks again when a partition's leader is moving
// (NOT_LEADER_FOR_PARTITION from ListOffsets, as a real broker answers right after a topic was
// created), instead of failing the global scope's rebuild at startup; another error fails at once.
func TestOutputReaderEndRetriesLeaderMoving(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		err     *kerr.Error
		wantErr bool
	}{
		{"NOT_LEADER_FOR_PARTITION", kerr.NotLeaderForPartition, false},
		{"TOPIC_AUTHORIZATION_FAILED", kerr.TopicAuthorizationFailed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newOutputEnv(t)
			cfg := e.config()
			cfg.RetryBackoffMax = 50 * time.Millisecond
			r := consumer.NewOutputReader(cfg, keyFuncFor(t, "key"), testLog)
			defer r.Close()
			h := e.cl.Fake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.ListOffsets}, Topic: e.out, Partitions: []int32{3},
				Err: tc.err, Count: 1})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			end, err := r.End(ctx, -1)
			if h.Hits() == 0 {
				t.Fatal("the fault never hit")
			}
			if tc.wantErr {
				if err == nil {
					t.Fatalf("End = %v, want the broker's error", end)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if end[3] != int64(outputCounts[3]) {
				t.Errorf("end of partition 3 = %d, want %d", end[3], outputCounts[3])
			}
		})
	}
}
