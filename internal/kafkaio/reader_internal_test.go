package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/tier"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// sparseBatch returns a sealed batch over offsets [first, first+lastDelta] that holds records
// only at the given offset deltas: an empty batch (no delta) as the log cleaner keeps for an
// active producer, or a compacted one.
func sparseBatch(first int64, lastDelta int32, deltas ...int64) []byte {
	var recs []byte
	for _, d := range deltas {
		m := Record{Key: fmt.Append(nil, first+d), Value: fmt.Append(nil, "v", first+d)}
		recs = appendRecord(recs, &m, d, 0)
	}
	hdr := kmsg.RecordBatch{FirstOffset: first, PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: lastDelta,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(len(deltas))}
	rb := recordBatch{raw: append(make([]byte, sizePrefix+batchHeaderLen), recs...), hdr: hdr}
	rb.hdr.Length = int32(len(rb.raw) - sizePrefix - batchLengthStart)
	rb.seal(-1, -1, -1)
	return rb.raw[sizePrefix:]
}

// trailingCases are record sets whose last batch yields no record from the fetched offset on.
var trailingCases = []struct {
	name      string
	set       []byte
	from, end int64
	want      []int64
}{
	{"empty trailing batch", slices.Concat(sparseBatch(0, 2, 0, 1, 2), sparseBatch(3, 2)), 0, 6, []int64{0, 1, 2}},
	{"compacted batch below the fetched offset", slices.Concat(sparseBatch(5, 4, 0), sparseBatch(10, 4, 0, 1)), 12, 15, nil},
	{"compacted batches around an empty one", slices.Concat(sparseBatch(0, 4, 1), sparseBatch(5, 0), sparseBatch(6, 3, 0, 2)), 0, 10, []int64{1, 6, 8}},
}

// TestWalkPassesTrailingBatches proves that the walk's position moves past a batch that ends
// without yielding its last offset.
func TestWalkPassesTrailingBatches(t *testing.T) {
	for _, tc := range trailingCases {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := walk(t, DecodeLimits{}, tc.set, tc.from)
			if w.next != tc.end || len(w.values) != len(tc.want) {
				t.Errorf("walk from %d: %d records, next %d; want %d, next %d", tc.from, len(w.values), w.next, len(tc.want), tc.end)
			}
		})
	}
}

// answerFetches makes kc answer every fetch of topic t below end with set from the batch that
// holds the fetched offset on, the partition's log ending at end; a fetch at end is held for its MaxWait and answered empty.
func answerFetches(kc *kfake.Cluster, set []byte, end int64) {
	kc.ControlKey(int16(kmsg.Fetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		req := kr.(*kmsg.FetchRequest)
		res := req.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range req.Topics {
			t := kmsg.NewFetchResponseTopic()
			t.Topic, t.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				p := kmsg.NewFetchResponseTopicPartition()
				p.Partition, p.HighWatermark, p.LastStableOffset, p.LogStartOffset = rp.Partition, end, end, 0
				if rp.FetchOffset < end {
					p.RecordBatches = from(set, rp.FetchOffset)
				} else {
					wait := time.Duration(req.MaxWaitMillis) * time.Millisecond
					kc.SleepControl(func() { time.Sleep(wait) }) // a broker's hold of a fetch with nothing to return
				}
				t.Partitions = append(t.Partitions, p)
			}
			res.Topics = append(res.Topics, t)
		}
		return res, nil, true
	})
}

// from returns set from the batch that holds offset on, as a broker answers a fetch.
func from(set []byte, offset int64) []byte {
	var d BatchDecoder
	for len(set) > 0 {
		hdr, rest, err := d.header(set)
		if err != nil || batchNext(&hdr) > offset {
			break
		}
		set = rest
	}
	return set
}

// trailingCluster starts a kfake broker with topic t whose fetches are answered with set.
func trailingCluster(t *testing.T, set []byte, end int64) *kafka.Client {
	tier.Integration(t)
	t.Helper()
	kc, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	c := Conn{Brokers: kc.ListenAddrs()}.Client(10 * time.Second)
	t.Cleanup(func() { CloseIdle(c); kc.Close() })
	answerFetches(kc, set, end)
	return c
}

// TestReadPassesTrailingBatches proves, on hand-built fetch responses, that Read (the re-warm's
// read) reaches its end past a trailing batch that yields no record instead of failing with
// ErrStalled, and that a PartitionReader's batches move Next to the end, so that the partition's
// lag drops to zero.
func TestReadPassesTrailingBatches(t *testing.T) {
	t.Parallel()
	for _, tc := range trailingCases {
		t.Run(tc.name, func(t *testing.T) {
			c := trailingCluster(t, tc.set, tc.end)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var got []int64
			err := Read(ctx, c, Range{Topic: "t", Start: tc.from, End: tc.end, MaxWait: 10 * time.Millisecond, Stalls: 3},
				func(recs []Record) error {
					for _, r := range recs {
						got = append(got, r.Offset)
					}
					return nil
				})
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("Read = %v, records %v; want nil, %v", err, got, tc.want)
			}
			r := NewPartitionReader(c, PartitionReaderConfig{Topic: "t", Offset: tc.from, MaxWait: 10 * time.Millisecond})
			defer func() { <-r.Close() }()
			got = got[:0]
			for next := tc.from; next < tc.end; {
				b, err := r.Fetch(ctx, 100, 0)
				if err != nil {
					t.Fatalf("Fetch: %v; Next stuck at %d, end %d", err, next, tc.end)
				}
				for _, m := range b.Records {
					got = append(got, m.Offset)
				}
				next = b.Next
				if lag := b.End - b.Next; next >= tc.end && lag != 0 {
					t.Errorf("lag %d at the end", lag)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("PartitionReader read %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPartitionReaderRefusesCorruptBatch proves, on a hand-built fetch response, that a batch
// whose checksum stays wrong when fetched again is handed out as refused input (which the worker
// blocks at, or dead-letters) after the good batches before it, instead of failing every fetch
// of the partition, and that reading goes on after it once it was handed out.
func TestPartitionReaderRefusesCorruptBatch(t *testing.T) {
	t.Parallel()
	bad := sparseBatch(3, 2, 0, 1, 2)
	bad[len(bad)-1] ^= 0xff
	c := trailingCluster(t, slices.Concat(sparseBatch(0, 2, 0, 1, 2), bad, sparseBatch(6, 1, 0, 1)), 8)
	r := NewPartitionReader(c, PartitionReaderConfig{Topic: "t", MaxWait: 10 * time.Millisecond,
		Backoff: Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}})
	defer func() { <-r.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []int64
	var refused []RefusedInput
	for next := int64(0); next < 8; {
		b, err := r.Fetch(ctx, 100, 0)
		if ctx.Err() != nil {
			t.Fatalf("Fetch: %v; Next stuck at %d, records %v", err, next, got)
		}
		if err != nil {
			continue // the fetches that found the corrupt batch before it is refused
		}
		for _, m := range b.Records {
			got = append(got, m.Offset)
		}
		if b.Refused != nil {
			refused = append(refused, *b.Refused)
			if b.Next != b.Refused.Offset {
				t.Errorf("batch with a refusal at %d ends at %d", b.Refused.Offset, b.Next)
			}
		}
		next = b.Next
	}
	if !slices.Equal(got, []int64{0, 1, 2, 6, 7}) {
		t.Errorf("read %v, want 0 1 2 6 7", got)
	}
	if len(refused) != 1 || refused[0].Offset != 3 || refused[0].LastOffset != 5 || refused[0].Reason != RefusalInputCorrupt ||
		!errors.Is(refused[0].Err, ErrCorruptBatch) {
		t.Errorf("refused %+v, want offsets 3..5, %s, wrapping ErrCorruptBatch", refused, RefusalInputCorrupt)
	}
}

// TestReadRefusesCorruptBatch proves, on a hand-built fetch response, that Read passes on the
// good batches before a batch whose checksum stays wrong, then stops with an error wrapping
// ErrCorruptBatch after corruptAttempts fetches of it, even when told to retry failed fetches
// until ctx ends, instead of fetching it again forever or skipping it.
func TestReadRefusesCorruptBatch(t *testing.T) {
	t.Parallel()
	bad := sparseBatch(3, 2, 0, 1, 2)
	bad[len(bad)-1] ^= 0xff
	c := trailingCluster(t, slices.Concat(sparseBatch(0, 2, 0, 1, 2), bad, sparseBatch(6, 1, 0, 1)), 8)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []int64
	retries := 0
	err := Read(ctx, c, Range{Topic: "t", End: 8, MaxWait: 10 * time.Millisecond,
		Backoff: Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}, Failures: 0,
		OnRetry: func(int, error) { retries++ }},
		func(recs []Record) error {
			for _, r := range recs {
				got = append(got, r.Offset)
			}
			return nil
		})
	if ctx.Err() != nil || !errors.Is(err, ErrCorruptBatch) {
		t.Fatalf("Read = %v (ctx %v), want an error wrapping ErrCorruptBatch before ctx ends", err, ctx.Err())
	}
	if !slices.Equal(got, []int64{0, 1, 2}) || retries != corruptAttempts-1 {
		t.Errorf("read %v with %d retries, want 0 1 2 with %d", got, retries, corruptAttempts-1)
	}
}

// TestPartitionReaderStaleMetadata proves that metadata from a broker that lags behind (a lower
// leader epoch than the reader knows, for the same topic ID) does not pass for a re-created
// topic: the reader waits for an answer that has caught up, and reads on without going back.
func TestPartitionReaderStaleMetadata(t *testing.T) {
	tier.Integration(t)
	t.Parallel()
	kc, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	c := Conn{Brokers: kc.ListenAddrs()}.Client(10 * time.Second)
	t.Cleanup(func() { CloseIdle(c); kc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := NewProducer(c, ProducerConfig{Attempts: 1})
	produceN := func(from int) {
		var msgs []Record
		for i := from; i < from+10; i++ {
			msgs = append(msgs, Record{Value: fmt.Append(nil, i)})
		}
		if err := p.Produce(ctx, "t", 0, msgs); err != nil {
			t.Fatal(err)
		}
	}
	produceN(0)
	lead, err := leaderOf(ctx, c, "kdedup", "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := kc.MoveTopicPartition("t", 0, kc.LeaderFor("t", 0)); err != nil { // the reader starts at epoch 1
		t.Fatal(err)
	}
	var stale, rereads atomic.Int32
	r := NewPartitionReader(c, PartitionReaderConfig{Topic: "t", MaxWait: 10 * time.Millisecond,
		Backoff:  Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond},
		OnError:  func(err error) { stale.Add(int32(bool2int(errors.Is(err, errStaleMetadata)))) },
		OnReread: func(string, int64) { rereads.Add(1) }})
	defer func() { <-r.Close() }()
	var got []int64
	for next := int64(0); next < 10; {
		b, err := r.Fetch(ctx, 100, 0)
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		if err == nil {
			for _, m := range b.Records {
				got = append(got, m.Offset)
			}
			next = b.Next
		}
	}
	answered := 0
	kc.ControlKey(int16(kmsg.Metadata), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		req := kr.(*kmsg.MetadataRequest)
		if req.Version < 10 || answered >= 3 { // kafka-go's own requests, and the answers that caught up
			return nil, nil, false
		}
		answered++
		res := req.ResponseKind().(*kmsg.MetadataResponse)
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic, mt.TopicID = kmsg.StringPtr("t"), lead.topicID
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition, mp.Leader, mp.LeaderEpoch = 0, kc.LeaderFor("t", 0), lead.epoch // epoch 0: lower than the reader's
		mt.Partitions = append(mt.Partitions, mp)
		res.Topics = append(res.Topics, mt)
		return res, nil, true
	})
	if err := kc.MoveTopicPartition("t", 0, kc.LeaderFor("t", 0)); err != nil { // epoch 2 fences the reader's fetches
		t.Fatal(err)
	}
	produceN(10)
	for next := int64(10); next < 20; {
		b, err := r.Fetch(ctx, 100, 0)
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		if err == nil {
			if b.Rewound {
				t.Fatalf("rewound batch from %d", b.From)
			}
			for _, m := range b.Records {
				got = append(got, m.Offset)
			}
			next = b.Next
		}
	}
	if len(got) != 20 || got[19] != 19 || rereads.Load() != 0 {
		t.Errorf("read %v, %d rereads; want 0-19 once each, none", got, rereads.Load())
	}
	if stale.Load() == 0 {
		t.Errorf("the lagging metadata was not noticed")
	}
}

func bool2int(b bool) int {
	if b {
		return 1
	}
	return 0
}
