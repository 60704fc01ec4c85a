package kafkaio_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka/kfaketest"
	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/tier"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fetchAll reads from r until Next reaches end and returns the offsets of the records and the
// values of their "i" header, checking that every batch is in offset order and ends at Next.
func fetchAll(t *testing.T, r *kafkaio.PartitionReader, end int64, timeout time.Duration) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var offs []int64
	for next := int64(-1); next < end; {
		b, err := r.Fetch(ctx, 50, time.Millisecond)
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("Fetch: %v after %d records (next %d, end %d)", err, len(offs), next, end)
			}
			continue // a failed fetch, retried by the reader
		}
		for _, m := range b.Records {
			if len(offs) > 0 && m.Offset <= offs[len(offs)-1] || m.Offset >= b.Next {
				t.Fatalf("record at %d after %v, batch ends at %d", m.Offset, offs[max(0, len(offs)-3):], b.Next)
			}
			if i, _ := strconv.Atoi(string(m.Headers[0].Value)); int64(i) != m.Offset {
				t.Fatalf("record at offset %d carries header %q", m.Offset, m.Headers[0].Value)
			}
			offs = append(offs, m.Offset)
		}
		next = b.Next
	}
	return offs
}

func newReader(c *kafka.Client, partition int, offset int64, mutate ...func(*kafkaio.PartitionReaderConfig)) *kafkaio.PartitionReader {
	cfg := kafkaio.PartitionReaderConfig{
		Topic: "t", Partition: partition, Offset: offset, MaxBytes: 4 << 10, MaxWait: 20 * time.Millisecond,
		Backoff: kafkaio.Backoff{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond},
	}
	for _, m := range mutate {
		m(&cfg)
	}
	return kafkaio.NewPartitionReader(c, cfg)
}

// TestPartitionReaderFaults reads 600 records through broker faults: every error is retried and
// nothing is lost, repeated or reordered.
func TestPartitionReaderFaults(t *testing.T) {
	t.Parallel()
	fetchFault := func(err *kerr.Error, count int) kfake.Fault {
		return kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "t", Err: err, Count: count}
	}
	for _, tc := range []struct {
		name  string
		fault kfake.Fault
	}{
		{"NOT_LEADER_FOR_PARTITION", fetchFault(kerr.NotLeaderForPartition, 5)},
		{"REQUEST_TIMED_OUT", fetchFault(kerr.RequestTimedOut, 5)},
		{"OFFSET_OUT_OF_RANGE with nothing deleted", fetchFault(kerr.OffsetOutOfRange, 3)},
		{"UNKNOWN_TOPIC_OR_PARTITION", fetchFault(kerr.UnknownTopicOrPartition, 3)},
		{"top-level error", func() kfake.Fault { f := fetchFault(kerr.UnknownServerError, 3); f.TopLevel = true; return f }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			kc, c := cluster(t)
			produce(t, c, "t", 1, 0, 600, time.Now())
			h := kc.Fault(tc.fault)
			r := newReader(c, 1, 0)
			defer func() { <-r.Close() }()
			if got := fetchAll(t, r, 600, 20*time.Second); !slices.Equal(got, offsets(0, 600)) {
				t.Errorf("read %d records, want 600 in order", len(got))
			}
			if h.Hits() == 0 {
				t.Error("the fault never hit")
			}
		})
	}
}

// TestPartitionReaderCompression reads batches of every codec.
func TestPartitionReaderCompression(t *testing.T) {
	t.Parallel()
	for _, codec := range kafkaio.Compressions()[1:] {
		t.Run(string(codec), func(t *testing.T) {
			t.Parallel()
			_, c := cluster(t)
			p := kafkaio.NewProducer(c, kafkaio.ProducerConfig{Compression: codec, BatchBytes: 2 << 10, Attempts: 1})
			var msgs []kafkaio.Record
			for i := range 500 {
				msgs = append(msgs, kafkaio.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i),
					Headers: []kafkaio.Header{{Key: "i", Value: fmt.Append(nil, i)}}})
			}
			if err := p.Produce(context.Background(), "t", 0, msgs); err != nil {
				t.Fatal(err)
			}
			r := newReader(c, 0, kafka.FirstOffset)
			defer func() { <-r.Close() }()
			if got := fetchAll(t, r, 500, 10*time.Second); !slices.Equal(got, offsets(0, 500)) {
				t.Errorf("read %d records, want 500 in order", len(got))
			}
		})
	}
}

// TestPartitionReaderLeaderMoves reads while the partition's leadership moves between brokers.
func TestPartitionReaderLeaderMoves(t *testing.T) {
	t.Parallel()
	tier.Integration(t)
	kc, err := kfake.NewCluster(kfake.Ports(0, 0, 0), kfake.NumBrokers(3), kfake.SeedTopics(3, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	c := kafkaio.Conn{Brokers: kc.ListenAddrs()}.Client(5 * time.Second)
	defer kafkaio.CloseIdle(c)
	produce(t, c, "t", 2, 0, 300, time.Now())
	r := newReader(c, 2, 0)
	defer func() { <-r.Close() }()
	got := fetchAll(t, r, 100, 10*time.Second)
	p := kafkaio.NewProducer(c, kafkaio.ProducerConfig{Backoff: kafkaio.Backoff{Min: 50 * time.Millisecond, Max: 200 * time.Millisecond}})
	for i := range 3 {
		leader := kc.LeaderFor("t", 2)
		if err := kc.MoveTopicPartition("t", 2, (leader+1)%3); err != nil {
			t.Fatal(err)
		}
		var msgs []kafkaio.Record
		for j := 300 + 100*i; j < 400+100*i; j++ {
			msgs = append(msgs, kafkaio.Record{Value: fmt.Appendf(nil, "v%d", j), Headers: []kafkaio.Header{{Key: "i", Value: fmt.Append(nil, j)}}})
		}
		if err := p.Produce(context.Background(), "t", 2, msgs); err != nil {
			t.Fatal(err)
		}
	}
	got = append(got, fetchAll(t, r, 600, 30*time.Second)...)
	if want := offsets(0, 600); len(got) < 600 || !slices.Equal(got[len(got)-600:], want) {
		t.Errorf("read %d records, want the 600 in order", len(got))
	}
}

// TestPartitionReaderOffsetReset proves where reading goes on when the offset is out of range:
// at the earliest offset when retention deleted the records, and at the start or the end
// (ResetToLatest) when the offset is past the end of the log.
func TestPartitionReaderOffsetReset(t *testing.T) {
	t.Parallel()
	kc, c := cluster(t)
	retentionTopic(t, c, "r")
	for i := range 100 {
		at := time.Now()
		if i < 40 {
			at = at.Add(-2 * time.Hour)
		}
		produce(t, c, "r", 0, i, 1, at) // one batch each: retention deletes whole batches
	}
	kc.ApplyRetention()
	for _, tc := range []struct {
		name   string
		offset int64
		latest bool
		want   []int64
		skips  map[string]int64
	}{
		{"deleted by retention", 10, false, offsets(40, 100), map[string]int64{kafkaio.SkipRetention: 30}},
		{"deleted by retention, latest", 10, true, offsets(40, 100), map[string]int64{kafkaio.SkipRetention: 30}},
		{"past the end", 500, false, offsets(40, 100), map[string]int64{}},
		{"past the end, latest", 500, true, nil, map[string]int64{kafkaio.SkipResetToLatest: 60}},
		{"first offset", kafka.FirstOffset, false, offsets(40, 100), map[string]int64{}},
		{"last offset", kafka.LastOffset, false, nil, map[string]int64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			skips := map[string]int64{}
			r := newReader(c, 0, tc.offset, func(cfg *kafkaio.PartitionReaderConfig) {
				cfg.Topic, cfg.ResetToLatest = "r", tc.latest
				cfg.OnSkipped = func(reason string, n int64) { mu.Lock(); skips[reason] += n; mu.Unlock() }
			})
			defer func() {
				<-r.Close()
				if !maps.Equal(skips, tc.skips) {
					t.Errorf("skipped %v, want %v", skips, tc.skips)
				}
			}()
			if tc.want == nil { // nothing to read: failed fetches (the first one is out of range) at most
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				for {
					b, err := r.Fetch(ctx, 10, 0)
					if errors.Is(err, context.DeadlineExceeded) {
						return
					}
					if err == nil {
						t.Fatalf("Fetch = %+v; want nothing until ctx ends", b)
					}
				}
			}
			if got := fetchAll(t, r, 100, 10*time.Second); !slices.Equal(got, tc.want) {
				t.Errorf("read %v…, want %d records from %d", got[:min(3, len(got))], len(tc.want), tc.want[0])
			}
		})
	}
}

// TestPartitionReaderOffsetsWhileNotTaken proves that a reader whose records are not taken (the
// partition is blocked downstream) goes on reporting the partition's end and log start every
// IdlePoll, so its lag shows the backlog growing; and that failed fetches reach OnError.
func TestPartitionReaderOffsetsWhileNotTaken(t *testing.T) {
	t.Parallel()
	_, c := cluster(t)
	produce(t, c, "t", 0, 0, 10, time.Now())
	var end, start atomic.Int64
	end.Store(-1)
	r := newReader(c, 0, 0, func(cfg *kafkaio.PartitionReaderConfig) {
		cfg.IdlePoll = 50 * time.Millisecond
		cfg.OnOffsets = func(o kafkaio.Offsets) { end.Store(o.End); start.Store(o.LogStart) }
	})
	defer func() { <-r.Close() }()
	b, err := r.Fetch(context.Background(), 5, 0) // takes 5, then leaves the rest untaken
	if err != nil || len(b.Records) != 5 {
		t.Fatalf("Fetch = %v, %v", b, err)
	}
	// The end 100 comes from the next fetch, which then waits to be taken; 150 only from the polls.
	for _, step := range []struct{ from, n int }{{10, 90}, {100, 50}} {
		produce(t, c, "t", 0, step.from, step.n, time.Now())
		want := int64(step.from + step.n)
		deadline := time.Now().Add(20 * time.Second)
		for end.Load() != want {
			if time.Now().After(deadline) {
				t.Fatalf("end %d reported while the records are not taken, want %d", end.Load(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if start.Load() != 0 {
		t.Errorf("log start %d, want 0", start.Load())
	}
}

// TestPartitionReaderCloses proves that Close returns at once while a fetch waits on an idle
// partition far longer than that, and that Fetch then reports ctx's end, not a record.
func TestPartitionReaderCloses(t *testing.T) {
	t.Parallel()
	kc, c := cluster(t)
	fetching := make(chan struct{})
	kc.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		close(fetching) // once: kfake drops a control function after its first call
		return nil, nil, false
	})
	r := newReader(c, 0, 0, func(cfg *kafkaio.PartitionReaderConfig) { cfg.MaxWait = 10 * time.Second })
	<-fetching // the fetch is with the broker
	began := time.Now()
	<-r.Close()
	if d := time.Since(began); d > time.Second {
		t.Errorf("Close took %v with a fetch of MaxWait 10s in flight", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if b, err := r.Fetch(ctx, 10, 0); err == nil {
		t.Errorf("Fetch after Close = %+v", b)
	}
}

// TestPartitionReaderSlowBroker proves that a broker slower to answer than MaxWait does not stall
// the reader: the answer is awaited for FetchSlack more.
func TestPartitionReaderSlowBroker(t *testing.T) {
	t.Parallel()
	kc, c := cluster(t)
	produce(t, c, "t", 0, 0, 200, time.Now())
	kc.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		kc.SleepControl(func() { time.Sleep(100 * time.Millisecond) })
		return nil, nil, false
	})
	r := newReader(c, 0, 0)
	defer func() { <-r.Close() }()
	if got := fetchAll(t, r, 200, 20*time.Second); !slices.Equal(got, offsets(0, 200)) {
		t.Errorf("read %d records, want 200", len(got))
	}
}

// TestPartitionReaderBatchOverMaxBytes reads batches larger than MaxBytes: the broker answers
// with the whole first batch (KIP-74), so a record batch larger than the limit is read, not
// stalled on.
func TestPartitionReaderBatchOverMaxBytes(t *testing.T) {
	t.Parallel()
	_, c := cluster(t)
	p := kafkaio.NewProducer(c, kafkaio.ProducerConfig{BatchBytes: 64 << 10, Attempts: 1})
	var msgs []kafkaio.Record
	for i := range 100 {
		msgs = append(msgs, kafkaio.Record{Value: make([]byte, 500), Headers: []kafkaio.Header{{Key: "i", Value: fmt.Append(nil, i)}}})
	}
	if err := p.Produce(context.Background(), "t", 0, msgs); err != nil {
		t.Fatal(err)
	}
	r := newReader(c, 0, 0, func(cfg *kafkaio.PartitionReaderConfig) { cfg.MaxBytes = 1 << 10 })
	defer func() { <-r.Close() }()
	if got := fetchAll(t, r, 100, 10*time.Second); !slices.Equal(got, offsets(0, 100)) {
		t.Errorf("read %d records, want 100 in order", len(got))
	}
}

// TestReadBoundsDecodedMemory proves that Read hands its callback no more decompressed records
// at once than the decode limit allows (plus the batch that reaches it): eight zstd batches of one
// 6 MiB zero value each, a few hundred bytes on the wire, fit one fetch response, and the limit
// for Read's default fetch size is 32 MiB.
func TestReadBoundsDecodedMemory(t *testing.T) {
	t.Parallel()
	_, c := cluster(t)
	p := kafkaio.NewProducer(c, kafkaio.ProducerConfig{Compression: kafkaio.CompressionZstd, BatchBytes: 1 << 20, Attempts: 1})
	zeros := make([]byte, 6<<20)
	for i := range 8 {
		if err := p.Produce(context.Background(), "t", 0, []kafkaio.Record{{Key: fmt.Append(nil, i), Value: zeros}}); err != nil {
			t.Fatal(err)
		}
	}
	limit := kafkaio.DefaultDecodeMaxBytes(8 << 20)
	var offsets []int64
	err := kafkaio.Read(context.Background(), c, kafkaio.Range{Topic: "t", Partition: 0, End: 8}, func(recs []kafkaio.Record) error {
		held := 0
		for _, r := range recs {
			held += len(r.Value)
			offsets = append(offsets, r.Offset)
		}
		if held > limit+len(zeros) {
			t.Errorf("one callback got %d MiB of values, more than the %d MiB limit and one record", held>>20, limit>>20)
		}
		return nil
	})
	if err != nil || !slices.Equal(offsets, []int64{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("Read: %v, offsets %v", err, offsets)
	}
}

// TestPartitionReaderRewound proves that a reader whose partition was truncated under it (the
// topic deleted and created again with fewer records) hands out the reset to the start as a
// rewound batch from the lower offset, so that the offset is committed backward, and reads the
// new records.
func TestPartitionReaderRewound(t *testing.T) {
	t.Parallel()
	_, c := cluster(t)
	retentionTopic(t, c, "re")
	produce(t, c, "re", 0, 0, 20, time.Now())
	r := newReader(c, 0, 0, func(cfg *kafkaio.PartitionReaderConfig) { cfg.Topic = "re" })
	defer func() { <-r.Close() }()
	if got := fetchAll(t, r, 20, 10*time.Second); !slices.Equal(got, offsets(0, 20)) {
		t.Fatalf("read %v, want 0..19", got)
	}
	res, err := c.DeleteTopics(context.Background(), &kafka.DeleteTopicsRequest{Topics: []string{"re"}})
	if err == nil {
		err = res.Errors["re"]
	}
	if err != nil {
		t.Fatal(err)
	}
	retentionTopic(t, c, "re")
	produce(t, c, "re", 0, 0, 5, time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		b, err := r.Fetch(ctx, 50, 0)
		if ctx.Err() != nil {
			t.Fatalf("no rewound batch: %v", err)
		}
		if err != nil {
			continue // the fetches that found the topic gone or the offset out of range
		}
		if !b.Rewound || b.From != 0 || b.Next != 5 || len(b.Records) != 5 {
			t.Fatalf("batch after the re-creation: rewound %v from %d next %d, %d records; want rewound from 0 to 5, 5 records",
				b.Rewound, b.From, b.Next, len(b.Records))
		}
		return
	}
}

// rereads collects what a reader's OnReread hears.
type rereads struct {
	mu sync.Mutex
	n  map[string]int64
}

func (r *rereads) add(reason string, n int64) { r.mu.Lock(); r.n[reason] += n; r.mu.Unlock() }

func (r *rereads) get() map[string]int64 { r.mu.Lock(); defer r.mu.Unlock(); return maps.Clone(r.n) }

// fetchRewound fetches from r until a batch comes that is rewound, and returns it.
func fetchRewound(t *testing.T, r *kafkaio.PartitionReader) *kafkaio.Batch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		b, err := r.Fetch(ctx, 100, 0)
		switch {
		case ctx.Err() != nil:
			t.Fatalf("no rewound batch: %v", err)
		case err == nil && len(b.Records) > 0 && !b.Rewound:
			t.Fatalf("batch from %d (next %d) not rewound", b.Records[0].Offset, b.Next)
		case err == nil && b.Rewound:
			return b
		}
	}
}

// TestPartitionReaderDiverged proves that a reader fetches with the leader epoch: after a leader
// change the old epoch is fenced, the reader asks the new leader where the log of the epoch it
// read ends (OffsetForLeaderEpoch, answered here as after an unclean election that truncated
// the log to 12), and goes back there, counting the offsets it reads again.
func TestPartitionReaderDiverged(t *testing.T) {
	t.Parallel()
	kc, c := cluster(t)
	produce(t, c, "t", 0, 0, 20, time.Now())
	rr := &rereads{n: map[string]int64{}}
	r := newReader(c, 0, 0, func(cfg *kafkaio.PartitionReaderConfig) { cfg.OnReread = rr.add })
	defer func() { <-r.Close() }()
	fetchAll(t, r, 20, 10*time.Second)
	var asked atomic.Int32
	kc.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		asked.Store(kr.(*kmsg.OffsetForLeaderEpochRequest).Topics[0].Partitions[0].CurrentLeaderEpoch)
		return kfaketest.EpochEnd(12)(kr), nil, true
	})
	if err := kc.MoveTopicPartition("t", 0, kc.LeaderFor("t", 0)); err != nil { // a new leader epoch
		t.Fatal(err)
	}
	b := fetchRewound(t, r)
	if b.From != 12 || len(b.Records) == 0 || b.Records[0].Offset != 12 {
		t.Errorf("rewound batch from %d, %d records; want from 12", b.From, len(b.Records))
	}
	if got := rr.get(); !maps.Equal(got, map[string]int64{kafkaio.RereadTruncated: 8}) {
		t.Errorf("rereads %v, want 8 truncated", got)
	}
	if asked.Load() != 1 {
		t.Errorf("OffsetForLeaderEpoch with current epoch %d, want 1", asked.Load())
	}
}

// TestPartitionReaderStartEpoch proves the check of a committed offset before the first fetch: a
// reader that starts at offset 20, committed with leader epoch 0, asks the leader where the log
// of epoch 0 ends when the leader epoch moved on since (OffsetForLeaderEpoch, answered here as a
// new leader whose log an unclean election truncated to 12 does), goes back there and counts the
// offsets it reads again, with the first batch rewound. A log that still reaches 20, or a leader
// epoch that did not move, starts at 20; the latter without asking.
func TestPartitionReaderStartEpoch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		move    bool  // a leader election after the commit
		end     int64 // where the leader says the log of epoch 0 ends
		from    int64 // where reading starts
		rereads map[string]int64
	}{
		{"truncated", true, 12, 12, map[string]int64{kafkaio.RereadTruncated: 8}},
		{"intact", true, 23, 20, map[string]int64{}},
		{"same epoch", false, 12, 20, map[string]int64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			kc, c := cluster(t)
			produce(t, c, "t", 0, 0, 25, time.Now())
			asked := make(chan int32, 10)
			kc.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
				kc.KeepControl()
				asked <- kr.(*kmsg.OffsetForLeaderEpochRequest).Topics[0].Partitions[0].LeaderEpoch
				return kfaketest.EpochEnd(tc.end)(kr), nil, true
			})
			if tc.move {
				if err := kc.MoveTopicPartition("t", 0, kc.LeaderFor("t", 0)); err != nil {
					t.Fatal(err)
				}
			}
			rr := &rereads{n: map[string]int64{}}
			epoch := int32(0)
			r := newReader(c, 0, 20, func(cfg *kafkaio.PartitionReaderConfig) { cfg.OffsetEpoch, cfg.OnReread = &epoch, rr.add })
			defer func() { <-r.Close() }()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var b *kafkaio.Batch
			for b == nil || len(b.Records) == 0 {
				var err error
				if b, err = r.Fetch(ctx, 100, 0); ctx.Err() != nil {
					t.Fatalf("no records: %v", err)
				}
			}
			if b.Rewound != (tc.from < 20) || b.Records[0].Offset != tc.from {
				t.Errorf("first batch from %d (rewound %v); want from %d, rewound %v", b.Records[0].Offset, b.Rewound, tc.from, tc.from < 20)
			}
			if got := rr.get(); !maps.Equal(got, tc.rereads) {
				t.Errorf("rereads %v, want %v", got, tc.rereads)
			}
			select {
			case e := <-asked:
				if !tc.move || e != 0 {
					t.Errorf("OffsetForLeaderEpoch for epoch %d (election: %v); want epoch 0, asked only after an election", e, tc.move)
				}
			default:
				if tc.move {
					t.Error("no OffsetForLeaderEpoch before the first fetch after an election")
				}
			}
		})
	}
}

// TestPartitionReaderTopicRecreated holds a fetch with SleepControl while the topic is deleted
// and created again with 30 new records: the reader, whose leader epoch the new topic does not
// know, learns from the metadata that the topic ID changed, reports it and starts over at the
// new log's start, instead of reading on at its old offset in the new log.
func TestPartitionReaderTopicRecreated(t *testing.T) {
	t.Parallel()
	kc, c := cluster(t)
	retentionTopic(t, c, "re")
	produce(t, c, "re", 0, 0, 20, time.Now())
	if err := kc.MoveTopicPartition("re", 0, kc.LeaderFor("re", 0)); err != nil { // epoch 1: above the new topic's
		t.Fatal(err)
	}
	rr := &rereads{n: map[string]int64{}}
	r := newReader(c, 0, 0, func(cfg *kafkaio.PartitionReaderConfig) { cfg.Topic, cfg.OnReread = "re", rr.add })
	defer func() { <-r.Close() }()
	fetchAll(t, r, 20, 10*time.Second)
	// The control is not handled (false), so it stays and sees every later fetch: only the first
	// re-creates the topic, and the test waits for that to end before the cluster closes.
	recreate := func() {
		res, err := c.DeleteTopics(context.Background(), &kafka.DeleteTopicsRequest{Topics: []string{"re"}})
		if err == nil {
			err = res.Errors["re"]
		}
		if err != nil {
			t.Error(err)
			return
		}
		retentionTopic(t, c, "re")
		produce(t, c, "re", 0, 0, 30, time.Now())
	}
	var once sync.Once
	var started atomic.Bool
	recreated := make(chan struct{})
	defer func() {
		if started.Load() {
			<-recreated
		}
	}()
	kc.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		once.Do(func() {
			started.Store(true)
			kc.SleepControl(func() { defer close(recreated); recreate() })
		})
		return nil, nil, false
	})
	b := fetchRewound(t, r)
	if b.From != 0 || len(b.Records) == 0 || b.Records[0].Offset != 0 {
		t.Errorf("rewound batch from %d, %d records; want from 0", b.From, len(b.Records))
	}
	if got := rr.get(); !maps.Equal(got, map[string]int64{kafkaio.RereadRecreated: 20}) {
		t.Errorf("rereads %v, want 20 recreated", got)
	}
}

// TestPartitionReaderStartEpochUnknown proves on each broker the check of a committed offset
// whose leader epoch the partition's leader never had (5, where its log is at epoch 0, as when the
// topic was re-created under the commit): the leader answers no end (OffsetForLeaderEpoch), and
// KAFKA_START_OFFSET decides, counted: earliest reads the log again from its start (20 offsets
// re-read, the first batch rewound); latest reads on at its end, the 25 records it holds counted
// as skipped.
func TestPartitionReaderStartEpochUnknown(t *testing.T) {
	testbroker.Each(t, testbroker.Options{Topics: map[string]int32{"t": 1, "u": 1}}, func(t *testing.T, b testbroker.Broker) {
		for _, tc := range []struct {
			topic   string
			latest  bool
			from    int64
			rereads map[string]int64
			skips   map[string]int64
		}{
			{"t", false, 0, map[string]int64{kafkaio.RereadTruncated: 20}, map[string]int64{}},
			{"u", true, 25, map[string]int64{}, map[string]int64{kafkaio.SkipResetToLatest: 25}},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var msgs []kafkaio.Record
			for i := range 25 {
				msgs = append(msgs, kafkaio.Record{Value: fmt.Appendf(nil, "v%d", i)})
			}
			if err := b.Produce(ctx, b.Name(tc.topic), 0, msgs...); err != nil {
				t.Fatal(err)
			}
			rr, sk := &rereads{n: map[string]int64{}}, &rereads{n: map[string]int64{}}
			epoch := int32(5)
			r := newReader(b.Client(), 0, 20, func(cfg *kafkaio.PartitionReaderConfig) {
				cfg.Topic, cfg.OffsetEpoch, cfg.ResetToLatest, cfg.OnReread, cfg.OnSkipped = b.Name(tc.topic), &epoch, tc.latest, rr.add, sk.add
			})
			defer func() { <-r.Close() }()
			if !tc.latest {
				if b := fetchRewound(t, r); b.From != 0 || b.Records[0].Offset != 0 {
					t.Errorf("%s: rewound batch from %d; want from 0", tc.topic, b.From)
				}
			} else {
				for len(sk.get()) == 0 { // the reader moved to the end: a record after it is read
					if !kafkaio.Sleep(ctx, 5*time.Millisecond) {
						t.Fatalf("%s: no reset to the end", tc.topic)
					}
				}
				if err := b.Produce(ctx, b.Name(tc.topic), 0, kafkaio.Record{Value: []byte("after")}); err != nil {
					t.Fatal(err)
				}
				var got *kafkaio.Batch
				for got == nil || len(got.Records) == 0 {
					var err error
					if got, err = r.Fetch(ctx, 100, 0); ctx.Err() != nil {
						t.Fatalf("%s: no records: %v", tc.topic, err)
					}
				}
				if got.Records[0].Offset != tc.from {
					t.Errorf("%s: first record at %d, want %d", tc.topic, got.Records[0].Offset, tc.from)
				}
			}
			if got := rr.get(); !maps.Equal(got, tc.rereads) {
				t.Errorf("%s: rereads %v, want %v", tc.topic, got, tc.rereads)
			}
			if got := sk.get(); !maps.Equal(got, tc.skips) {
				t.Errorf("%s: skipped %v, want %v", tc.topic, got, tc.skips)
			}
		}
	})
}
