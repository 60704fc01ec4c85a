package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/tier"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestBufferPoolKeeps checks that a pool keeps at most its limit of free buffers, the largest
// given back, and that a broker's frame pool keeps two: a broker has one request in flight, and
// the frame of the one before may still be held by its partitions' readers.
func TestBufferPoolKeeps(t *testing.T) {
	sizes := []int{4 << 10, 64 << 10, 16 << 10, 1 << 20, 256 << 10, 8 << 10}
	for _, tc := range []struct {
		name string
		pool *bufferPool
		want []int // capacities kept, sorted
	}{
		{"default", &bufferPool{}, []int{16 << 10, 64 << 10, 256 << 10, 1 << 20}},
		{"keep 1", &bufferPool{keep: 1}, []int{1 << 20}},
		{"broker frames", &newBrokerFetcher(&FetchPool{}, 1).bufs, []int{256 << 10, 1 << 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, n := range sizes {
				tc.pool.put(make([]byte, n))
			}
			var got []int
			for _, b := range tc.pool.free {
				got = append(got, cap(b))
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("kept %v, want %v", got, tc.want)
			}
			if b := tc.pool.get(300 << 10); cap(b) != 1<<20 || len(b) != 300<<10 {
				t.Fatalf("get(300KiB) = len %d cap %d, want the 1MiB buffer", len(b), cap(b))
			}
		})
	}
}

// TestInputAccount checks that the buffers of a pool's readers and brokers are counted, all of
// them and those in use; that a request asks for what the buffers in use leave of half the limit,
// at most a quarter of it and at least minRequestBytes; and that over the limit given-back
// buffers are dropped but one, which the next response is read into instead of a fresh
// allocation.
func TestInputAccount(t *testing.T) {
	p := &FetchPool{cfg: FetchPoolConfig{MaxBytes: 16 << 20}, acct: &inputAccount{limit: 8 << 20}}
	reader, frames := &bufferPool{acct: p.acct}, &newBrokerFetcher(p, 1).bufs
	check := func(what string, total, inUse int64, req int32) {
		t.Helper()
		if got, use, r := p.BufferedBytes(), p.acct.inUse.Load(), p.requestMaxBytes(); got != total || use != inUse || r != req {
			t.Fatalf("%s: %d bytes, %d in use, requests of %d; want %d, %d, %d", what, got, use, r, total, inUse, req)
		}
	}
	check("nothing held", 0, 0, 2<<20) // a quarter of the limit
	frame := frames.get(3 << 20)
	a, b := reader.get(2<<20), reader.get(2<<20)
	check("a frame and two answers", 7<<20, 7<<20, minRequestBytes) // past half the limit
	c := reader.get(2 << 20)                                        // past the limit: reads go on, at the least request size
	check("past the limit", 9<<20, 9<<20, minRequestBytes)
	reader.put(a) // over the limit, the only free buffer: kept
	check("a buffer given back over the limit", 9<<20, 7<<20, minRequestBytes)
	reader.put(b) // over the limit, with one free already: dropped
	check("a second buffer given back over the limit", 7<<20, 5<<20, minRequestBytes)
	if len(reader.free) != 1 {
		t.Fatalf("%d free buffers kept over the limit, want 1", len(reader.free))
	}
	frames.put(frame)                                                // under it: kept, counted, not in use
	check("buffers given back under the limit", 7<<20, 2<<20, 2<<20) // what is left of half the limit
	if len(reader.free) != 1 || len(frames.free) != 1 {
		t.Fatalf("%d+%d free buffers kept, want 1+1", len(reader.free), len(frames.free))
	}
	if got := reader.get(1 << 20); cap(got) != 2<<20 {
		t.Fatalf("get(1MiB) = cap %d, want the free 2MiB buffer", cap(got))
	}
	check("a free buffer reused", 7<<20, 4<<20, minRequestBytes)
	reader.put(c)
	var none *inputAccount // a pool without an account counts nothing and limits nothing
	none.alloc(1)
	none.use(1)
	if none.over() || none.requestBytes(5) != 5 {
		t.Fatal("a nil account limits")
	}
}

// TestPoolAnswersShareFrames reads two partitions through one pool: their answers are decoded
// in the broker's response frames, not copied into buffers of their readers, and closing the
// readers gives everything they hold back, so that the pool's input memory in use returns to 0.
func TestPoolAnswersShareFrames(t *testing.T) {
	tier.Integration(t)
	c := frameCluster(t, 2)
	for p := range 2 {
		produceNumbered(t, c, p, 0, 100)
	}
	pool := NewFetchPool(c, FetchPoolConfig{MaxWait: 20 * time.Millisecond, MaxBufferedBytes: 8 << 20})
	defer pool.Close()
	var readers []*PartitionReader
	for p := range 2 {
		r := NewPartitionReader(c, PartitionReaderConfig{Topic: "t", Partition: p, Offset: 0, Pool: pool})
		readers = append(readers, r)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		b, err := r.Fetch(ctx, 10, 0)
		cancel()
		if err != nil || len(b.Records) == 0 {
			t.Fatalf("partition %d: Fetch = %v, %v", p, b, err)
		}
		if r.cur == nil || r.cur.res.frame == nil || r.bufs.acct != nil && len(r.bufs.free) > 0 {
			t.Fatalf("partition %d: the answer is not decoded in a shared frame", p)
		}
	}
	if pool.acct.inUse.Load() == 0 {
		t.Fatal("no input memory in use while the readers hold answers")
	}
	for _, r := range readers {
		<-r.Close()
		if _, err := r.Fetch(context.Background(), 10, 0); !errors.Is(err, ErrReaderClosed) {
			t.Fatalf("Fetch after Close = %v, want ErrReaderClosed", err)
		}
	}
	pool.Close() // no request in flight holds a frame any more
	if n := pool.acct.inUse.Load(); n != 0 {
		t.Fatalf("%d bytes of input memory in use after the readers and the pool closed, want 0", n)
	}
}

// TestPoolAnswerUnshared reads a partition whose answers all wait in its reader longer than
// unshareAfter (1ms here): each is copied out of the broker's frame into the reader's own buffer,
// and every record still reads back right, in order.
func TestPoolAnswerUnshared(t *testing.T) {
	tier.Integration(t)
	old := unshareAfter
	unshareAfter = time.Millisecond
	defer func() { unshareAfter = old }()
	c := frameCluster(t, 1)
	const n = 300
	for from := 0; from < n; from += 30 { // ten batches
		produceNumbered(t, c, 0, from, 30)
	}
	pool := NewFetchPool(c, FetchPoolConfig{MaxWait: 20 * time.Millisecond})
	defer pool.Close()
	r := NewPartitionReader(c, PartitionReaderConfig{Topic: "t", Partition: 0, Offset: 0, Pool: pool, MaxBytes: 1 << 10})
	defer func() { <-r.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	next, unshared := 0, 0
	for next < n {
		time.Sleep(20 * time.Millisecond) // lets the next answer wait in the reader past unshareAfter
		b, err := r.Fetch(ctx, n, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range append(slices.Clip(r.retired), r.cur) {
			if f != nil && f.res.frame == nil && len(f.res.part.RecordBatches) > 0 {
				unshared++
			}
		}
		for _, m := range b.Records {
			if want := fmt.Sprint(next); m.Offset != int64(next) || string(m.Key) != want || string(m.Value) != "v"+want {
				t.Fatalf("record %d/%s/%s, want %d/%s/v%s", m.Offset, m.Key, m.Value, next, want, want)
			}
			next++
		}
	}
	if unshared == 0 {
		t.Error("no answer was copied out of its frame")
	}
}

// TestReaderForgetsGivenBackFrame checks that a reader whose records were handed back keeps no
// pointer into the response it walked: the walk's batches, header and last record are dropped
// with it, so a broker frame the pool dropped at the input memory's limit is garbage at once and
// not kept in the heap by every idle partition that last read from it.
func TestReaderForgetsGivenBackFrame(t *testing.T) {
	tier.Integration(t)
	c := frameCluster(t, 1)
	msgs := produceNumbered(t, c, 0, 0, 50)
	pool := NewFetchPool(c, FetchPoolConfig{MaxWait: 20 * time.Millisecond})
	defer pool.Close()
	r := NewPartitionReader(c, PartitionReaderConfig{Topic: "t", Partition: 0, Offset: 0, Pool: pool})
	defer func() { <-r.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for got := 0; got < len(msgs); {
		b, err := r.Fetch(ctx, len(msgs), 0)
		if err != nil {
			t.Fatal(err)
		}
		got += len(b.Records)
	}
	if r.set.rest == nil && r.set.hdr.Records == nil && r.set.recs.b == nil && r.set.rec.key == nil {
		t.Fatal("the walk holds no fetched data while its batch is in hand")
	}
	short, stop := context.WithTimeout(ctx, time.Millisecond) // hands the batch back, then finds nothing
	defer stop()
	if _, err := r.Fetch(short, len(msgs), 0); err == nil {
		t.Fatal("a fetch past the end returned records")
	}
	if r.cur != nil || r.set.rest != nil || r.set.hdr.Records != nil || r.set.recs.b != nil || r.set.rec.key != nil || r.set.rec.value != nil {
		t.Errorf("after the batch was handed back the walk still points into the response (cur %v, rest %d, batch %d, record %q)",
			r.cur != nil, len(r.set.rest), len(r.set.hdr.Records), r.set.rec.key)
	}
	if r.set.next != int64(len(msgs)) {
		t.Errorf("walk position %d after dropping the response, want %d", r.set.next, len(msgs))
	}
}

// frameCluster starts a kfake broker with topic "t" of partitions partitions and returns a client
// of it; both are closed when the test ends.
func frameCluster(t *testing.T, partitions int) *kafka.Client {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(partitions), "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	c := Conn{Brokers: kc.ListenAddrs()}.Client(10 * time.Second)
	t.Cleanup(func() { CloseIdle(c) })
	return c
}

// produceNumbered produces n records to partition p of "t" in one batch, record i of them with
// key from+i and value "v" and from+i, and returns them.
func produceNumbered(t *testing.T, c *kafka.Client, p, from, n int) []Record {
	t.Helper()
	msgs := make([]Record, n)
	for i := range msgs {
		msgs[i] = Record{Key: fmt.Append(nil, from+i), Value: fmt.Append(nil, "v", from+i)}
	}
	if err := NewProducer(c, ProducerConfig{Attempts: 1}).Produce(context.Background(), "t", p, msgs); err != nil {
		t.Fatal(err)
	}
	return msgs
}
