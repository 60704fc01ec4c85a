package kafkaio_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/tier"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// connCounter counts the connections a Transport opens, by address: how many are open now and
// the most that were open at once, and which requests the connections open at that peak carried
// (a failure names them).
type connCounter struct {
	mu   sync.Mutex
	open map[string]map[*countedConn]struct{}
	peak map[string][]*countedConn
}

// count makes tr's dials go through c.
func (c *connCounter) count(tr *kafka.Transport) {
	c.open, c.peak = map[string]map[*countedConn]struct{}{}, map[string][]*countedConn{}
	dial := tr.Dial
	tr.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cc := &countedConn{Conn: conn}
		cc.close = func() { c.mu.Lock(); delete(c.open[addr], cc); c.mu.Unlock() }
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.open[addr] == nil {
			c.open[addr] = map[*countedConn]struct{}{}
		}
		c.open[addr][cc] = struct{}{}
		if len(c.open[addr]) > len(c.peak[addr]) {
			c.peak[addr] = slices.Collect(maps.Keys(c.open[addr]))
		}
		return cc, nil
	}
}

// maxPeak returns the largest number of connections that were open at once to one address, and
// the requests each of those connections carried (by API key: 1 Fetch, 2 ListOffsets, 3 Metadata,
// 18 ApiVersions).
func (c *connCounter) maxPeak() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, addr := 0, ""
	for a, p := range c.peak {
		if len(p) > n {
			n, addr = len(p), a
		}
	}
	return n, carried(addr, c.peak[addr])
}

// peakRoles returns, of the most connections open at once to each address, the most that carried
// requests routed to that broker (Fetch, ListOffsets, Produce, InitProducerID: anything but
// Metadata, FindCoordinator and ApiVersions) and the most that carried only those: kafka-go's
// control connections, which it opens to the bootstrap address for requests routed to no broker,
// in a pool of their own beside the broker's. It also returns what they carried.
func (c *connCounter) peakRoles() (routed, control int, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for addr, p := range c.peak {
		r, k := 0, 0
		for _, cc := range p {
			if slices.ContainsFunc(cc.carried(), func(key int16) bool {
				return key != int16(kmsg.Metadata) && key != int16(kmsg.FindCoordinator) && key != int16(kmsg.ApiVersions)
			}) {
				r++
			} else {
				k++
			}
		}
		routed, control = max(routed, r), max(control, k)
		b.WriteString(carried(addr, p) + ";")
	}
	return routed, control, b.String()
}

// carried lists the requests each of conns to addr carried.
func carried(addr string, conns []*countedConn) string {
	var b strings.Builder
	b.WriteString(addr + ":")
	for _, cc := range conns {
		fmt.Fprintf(&b, " %v", cc.carried())
	}
	return b.String()
}

// countedConn is a connection that connCounter counts; it notes the API key of each request
// written on it.
type countedConn struct {
	net.Conn
	once  sync.Once
	close func()

	mu   sync.Mutex
	keys []int16
}

// Write notes the API key of a request that starts at b (kafka-go writes each request whole).
func (c *countedConn) Write(b []byte) (int, error) {
	if len(b) >= 6 {
		key := int16(binary.BigEndian.Uint16(b[4:6]))
		c.mu.Lock()
		if !slices.Contains(c.keys, key) {
			c.keys = append(c.keys, key)
		}
		c.mu.Unlock()
	}
	return c.Conn.Write(b)
}

// carried returns the API keys of the requests written on c.
func (c *countedConn) carried() []int16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.keys)
}

func (c *countedConn) Close() error {
	c.once.Do(c.close)
	return c.Conn.Close()
}

// poolCluster starts nb kfake brokers with topic "t" of n partitions and returns a client whose
// connections c counts, and a pool over it.
func poolCluster(t *testing.T, nb, n int, c *connCounter) (*kfake.Cluster, *kafka.Client, *kafkaio.FetchPool) {
	tier.Integration(t)
	t.Helper()
	ports := make([]int, nb)
	kc, err := kfake.NewCluster(kfake.Ports(ports...), kfake.NumBrokers(nb), kfake.SeedTopics(int32(n), "t"))
	if err != nil {
		t.Fatal(err)
	}
	client := kafkaio.Conn{Brokers: kc.ListenAddrs()}.Client(10 * time.Second)
	if c != nil {
		c.count(client.Transport.(*kafka.Transport))
	}
	pool := kafkaio.NewFetchPool(client, kafkaio.FetchPoolConfig{MaxWait: 20 * time.Millisecond})
	t.Cleanup(func() {
		pool.Close()
		kafkaio.CloseIdle(client)
		kc.Close()
	})
	return kc, client, pool
}

func withPool(p *kafkaio.FetchPool) func(*kafkaio.PartitionReaderConfig) {
	return func(cfg *kafkaio.PartitionReaderConfig) { cfg.Pool = p }
}

// TestFetchPoolPartitions reads 96 partitions on 3 brokers through one pool: every record in
// order, and at most a few connections per broker for all the readers' fetches, offset lookups
// and metadata.
func TestFetchPoolPartitions(t *testing.T) {
	t.Parallel()
	const parts, per = 96, 40
	var conns connCounter
	kc, c, pool := poolCluster(t, 3, parts, &conns)
	readEveryPartition(t, kc, c, pool, parts, per)
	// Routed to the broker: one for the fetches and two for each of the pool's offset lookup
	// slots (kafka-go sends a slot's first and last offset lookups at once). Routed to no broker,
	// on kafka-go's control connections to the bootstrap broker: the pool's shared Metadata
	// requests, which run in the lookup slots too, and kafka-go's own metadata refresh. kafka-go
	// keeps idle connections open, so a broker's peak is the sum of both pools' peaks: 7 on the
	// bootstrap broker when a refresh and a shared look-up overlapped once.
	routed, control, what := conns.peakRoles()
	if routed > 5 || control > 3 {
		t.Errorf("for 96 partitions at most %d connections to one broker carried its fetches and offset lookups (want at most 5), and %d only metadata (want at most 3): %s", routed, control, what)
	}
	t.Logf("at most %d connections routed to a broker and %d control connections: %s", routed, control, what)
}

// readEveryPartition writes per records to each of the first parts partitions of topic t, and
// reads them back through pool, a reader per partition, all at once.
func readEveryPartition(t *testing.T, kc *kfake.Cluster, c *kafka.Client, pool *kafkaio.FetchPool, parts int, per int64) {
	t.Helper()
	prod := kafkaio.Conn{Brokers: kc.ListenAddrs()}.Client(10 * time.Second)
	defer kafkaio.CloseIdle(prod)
	for p := range parts {
		produce(t, prod, "t", p, 0, int(per), time.Now())
	}
	var wg sync.WaitGroup
	for p := range parts {
		r := newReader(c, p, kafka.FirstOffset, withPool(pool))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-r.Close() }()
			if got := fetchAll(t, r, per, 30*time.Second); !slices.Equal(got, offsets(0, per)) {
				t.Errorf("partition %d: read %v, want 0..%d", p, got, per-1)
			}
		}()
	}
	wg.Wait()
}

// TestFetchPoolFaults reads through broker faults on one partition while another is read too:
// every error is retried and nothing is lost, repeated or reordered.
func TestFetchPoolFaults(t *testing.T) {
	t.Parallel()
	fetchFault := func(err *kerr.Error, count int) kfake.Fault {
		return kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "t", Err: err, Count: count}
	}
	for _, tc := range []struct {
		name  string
		fault kfake.Fault
	}{
		{"NOT_LEADER_FOR_PARTITION", fetchFault(kerr.NotLeaderForPartition, 5)},
		{"OFFSET_OUT_OF_RANGE with nothing deleted", fetchFault(kerr.OffsetOutOfRange, 3)},
		{"UNKNOWN_TOPIC_OR_PARTITION", fetchFault(kerr.UnknownTopicOrPartition, 3)},
		{"FETCH_SESSION_ID_NOT_FOUND", func() kfake.Fault {
			f := fetchFault(kerr.FetchSessionIDNotFound, 3)
			f.TopLevel = true
			return f
		}()},
		{"top-level error", func() kfake.Fault { f := fetchFault(kerr.UnknownServerError, 3); f.TopLevel = true; return f }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			kc, c, pool := poolCluster(t, 1, 3, nil)
			produce(t, c, "t", 1, 0, 600, time.Now())
			produce(t, c, "t", 2, 0, 300, time.Now())
			h := kc.Fault(tc.fault)
			r1, r2 := newReader(c, 1, 0, withPool(pool)), newReader(c, 2, 0, withPool(pool))
			defer func() { <-r1.Close(); <-r2.Close() }()
			if got := fetchAll(t, r1, 600, 20*time.Second); !slices.Equal(got, offsets(0, 600)) {
				t.Errorf("read %d records, want 600 in order", len(got))
			}
			if got := fetchAll(t, r2, 300, 20*time.Second); !slices.Equal(got, offsets(0, 300)) {
				t.Errorf("read %d records, want 300 in order", len(got))
			}
			if h.Hits() == 0 {
				t.Error("the fault never hit")
			}
		})
	}
}

// TestFetchPoolBlockedPartition proves that a partition whose records are not taken does not
// hold the others: they are read to their end while it waits, through fetches that leave it out.
func TestFetchPoolBlockedPartition(t *testing.T) {
	t.Parallel()
	kc, c, pool := poolCluster(t, 1, 3, nil)
	var incremental atomic.Int64
	kc.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if r := req.(*kmsg.FetchRequest); r.SessionEpoch > 0 {
			incremental.Add(1)
		}
		return nil, nil, false
	})
	produce(t, c, "t", 0, 0, 100, time.Now())
	blocked := newReader(c, 0, 0, withPool(pool))
	defer func() { <-blocked.Close() }()
	if b, err := blocked.Fetch(context.Background(), 10, 0); err != nil || len(b.Records) == 0 {
		t.Fatalf("Fetch = %v, %v", b, err)
	}
	// Partition 0 is never fetched from again: its reader holds one answer, and asks no more.
	produce(t, c, "t", 0, 100, 100, time.Now())
	r := newReader(c, 1, 0, withPool(pool))
	defer func() { <-r.Close() }()
	var got []int64
	for i := range 5 {
		produce(t, c, "t", 1, 100*i, 100, time.Now())
		got = append(got, fetchAll(t, r, int64(100*(i+1)), 20*time.Second)...)
	}
	if !slices.Equal(got, offsets(0, 500)) {
		t.Errorf("read %d records of partition 1, want 500 in order", len(got))
	}
	if incremental.Load() == 0 {
		t.Error("no incremental fetch (session epoch > 0) was sent")
	}
	b, err := blocked.Fetch(context.Background(), 1000, time.Millisecond)
	if err != nil || len(b.Records) == 0 || b.Records[0].Offset != 10 {
		t.Errorf("the blocked partition goes on with %v, %v; want offset 10", b, err)
	}
}

// TestFetchPoolLeaderMoves reads two partitions while their leadership moves between brokers:
// each is routed to its new leader, and nothing is lost or repeated.
func TestFetchPoolLeaderMoves(t *testing.T) {
	t.Parallel()
	kc, c, pool := poolCluster(t, 3, 3, nil)
	readers := map[int32]*kafkaio.PartitionReader{}
	got := map[int32][]int64{}
	for _, p := range []int32{1, 2} {
		produce(t, c, "t", int(p), 0, 300, time.Now())
		readers[p] = newReader(c, int(p), 0, withPool(pool))
		defer func() { <-readers[p].Close() }()
		got[p] = fetchAll(t, readers[p], 100, 10*time.Second)
	}
	prod := kafkaio.NewProducer(c, kafkaio.ProducerConfig{Backoff: kafkaio.Backoff{Min: 50 * time.Millisecond, Max: 200 * time.Millisecond}})
	for i := range 3 {
		for _, p := range []int32{1, 2} {
			if err := kc.MoveTopicPartition("t", p, (kc.LeaderFor("t", p)+1+p)%3); err != nil {
				t.Fatal(err)
			}
			var msgs []kafkaio.Record
			for j := 300 + 100*i; j < 400+100*i; j++ {
				msgs = append(msgs, kafkaio.Record{Value: fmt.Appendf(nil, "v%d", j), Headers: []kafkaio.Header{{Key: "i", Value: fmt.Append(nil, j)}}})
			}
			if err := prod.Produce(context.Background(), "t", int(p), msgs); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, p := range []int32{1, 2} {
		got[p] = append(got[p], fetchAll(t, readers[p], 600, 30*time.Second)...)
		if !slices.Equal(got[p], offsets(0, 600)) {
			t.Errorf("partition %d: read %d records, want the 600 in order", p, len(got[p]))
		}
	}
}

// TestFetchPoolCloses proves that closing a reader and then the pool returns at once while
// fetches wait on an idle partition.
func TestFetchPoolCloses(t *testing.T) {
	t.Parallel()
	_, c, _ := poolCluster(t, 1, 3, nil)
	pool := kafkaio.NewFetchPool(c, kafkaio.FetchPoolConfig{MaxWait: 10 * time.Second})
	r := newReader(c, 0, 0, withPool(pool))
	r2 := newReader(c, 1, 0, withPool(pool))
	time.Sleep(100 * time.Millisecond) // the fetch is with the broker
	began := time.Now()
	<-r.Close()
	pool.Close()
	<-r2.Close()
	if d := time.Since(began); d > time.Second {
		t.Errorf("closing took %v with a fetch of MaxWait 10s in flight", d)
	}
}

// TestProducerConnectionsByBroker writes to 96 partitions on 3 brokers at once, one caller per
// partition, through one Producer: the batches are sent by broker, over a few connections to
// each, and every record is written in order.
func TestProducerConnectionsByBroker(t *testing.T) {
	t.Parallel()
	const parts, per = 96, 30
	var conns connCounter
	kc, _, _ := poolCluster(t, 3, parts, nil)
	c := kafkaio.Conn{Brokers: kc.ListenAddrs()}.Client(10 * time.Second)
	conns.count(c.Transport.(*kafka.Transport))
	defer kafkaio.CloseIdle(c)
	prod := kafkaio.NewProducer(c, kafkaio.ProducerConfig{Idempotent: true})
	if err := prod.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				m := kafkaio.Record{Value: fmt.Appendf(nil, "v%d", i), Headers: []kafkaio.Header{{Key: "i", Value: fmt.Append(nil, i)}}}
				if err := prod.Produce(context.Background(), "t", p, []kafkaio.Record{m}); err != nil {
					t.Errorf("partition %d: %v", p, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// Routed to a broker: its three produce requests in flight and the producer id's. Beside them,
	// on the bootstrap broker's address, kafka-go's control connections: the leader cache's
	// Metadata, the producer id's FindCoordinator and kafka-go's own refresh, which idle
	// connections outlive (see TestFetchPoolPartitions).
	routed, control, what := conns.peakRoles()
	if routed > 4 || control > 3 {
		t.Errorf("for 96 partitions at most %d connections to one broker carried its produce requests (want at most 4), and %d only metadata (want at most 3): %s", routed, control, what)
	}
	t.Logf("at most %d connections routed to a broker and %d control connections: %s", routed, control, what)
	pool := kafkaio.NewFetchPool(c, kafkaio.FetchPoolConfig{MaxWait: 20 * time.Millisecond})
	defer pool.Close()
	for _, p := range []int{0, 47, 95} {
		r := newReader(c, p, 0, withPool(pool))
		if got := fetchAll(t, r, per, 20*time.Second); !slices.Equal(got, offsets(0, per)) {
			t.Errorf("partition %d: read %v, want 0..%d in order", p, got, per-1)
		}
		<-r.Close()
	}
}

// TestFetchPoolSamePartitionTwice reads one partition with two readers of one pool at once (as
// re-warms of several input partitions read the same output partition): a fetch session holds one
// offset per partition, so their fetches take turns, and both read every record.
func TestFetchPoolSamePartitionTwice(t *testing.T) {
	t.Parallel()
	_, c, pool := poolCluster(t, 1, 3, nil)
	produce(t, c, "t", 0, 0, 300, time.Now())
	var wg sync.WaitGroup
	for _, from := range []int64{0, 100} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := newReader(c, 0, from, withPool(pool))
			defer func() { <-r.Close() }()
			if got := fetchAll(t, r, 300, 20*time.Second); !slices.Equal(got, offsets(from, 300)) {
				t.Errorf("reader from %d: read %d records, want %d in order", from, len(got), 300-from)
			}
		}()
	}
	col := &collect{t: t}
	err := kafkaio.Read(context.Background(), c, kafkaio.Range{Topic: "t", Partition: 0, Start: 50, End: 300, Pool: pool}, col.fn)
	if err != nil || !slices.Equal(col.offs, offsets(50, 300)) {
		t.Errorf("Read through the pool: %v, %d records, want 250", err, len(col.offs))
	}
	wg.Wait()
}

// TestFetchPoolBatchPastLimits reads a batch of 2 MiB through a pool whose requests take 64 KiB
// and whose input memory is bounded at 256 KiB, beside a partition of small batches: the broker
// sends the large batch whole (KIP-74), and it is read, though more than twice the request's
// size plus 1 MiB; both partitions are read in full.
func TestFetchPoolBatchPastLimits(t *testing.T) {
	t.Parallel()
	tier.Integration(t)
	kc, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(2, "t"), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "8388608"}))
	if err != nil {
		t.Fatal(err)
	}
	client := kafkaio.Conn{Brokers: kc.ListenAddrs()}.Client(10 * time.Second)
	pool := kafkaio.NewFetchPool(client, kafkaio.FetchPoolConfig{MaxWait: 20 * time.Millisecond, MaxBytes: 64 << 10, MaxBufferedBytes: 256 << 10})
	t.Cleanup(func() {
		pool.Close()
		kafkaio.CloseIdle(client)
		kc.Close()
	})
	big := make([]kafkaio.Record, 64)
	for i := range big {
		big[i] = kafkaio.Record{Value: bytes.Repeat([]byte{byte(i)}, 32<<10), Headers: []kafkaio.Header{{Key: "i", Value: fmt.Append(nil, i)}}}
	}
	if err := kafkaio.NewProducer(client, kafkaio.ProducerConfig{Attempts: 1, BatchBytes: 8 << 20}).Produce(context.Background(), "t", 0, big); err != nil {
		t.Fatal(err)
	}
	produce(t, client, "t", 1, 0, 300, time.Now())
	var wg sync.WaitGroup
	for p, n := range []int64{int64(len(big)), 300} {
		r := newReader(client, p, kafka.FirstOffset, withPool(pool), func(c *kafkaio.PartitionReaderConfig) { c.MaxBytes = 16 << 10 })
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-r.Close() }()
			if got := fetchAll(t, r, n, 30*time.Second); !slices.Equal(got, offsets(0, n)) {
				t.Errorf("partition %d: read %d records, want 0..%d", p, len(got), n-1)
			}
		}()
	}
	wg.Wait()
}

// TestFetchPoolBusyPartitionNotHeld proves that a partition whose reader is still taking an
// answer's records is not held back, once it wants more, by a request the broker holds for the
// pool's idle partitions: while it is busy, requests are held briefly, not MaxWait (a minute
// here), so its next records come at once (the tail of a drain, some partitions done).
func TestFetchPoolBusyPartitionNotHeld(t *testing.T) {
	t.Parallel()
	kc, c, _ := poolCluster(t, 1, 2, nil)
	pool := kafkaio.NewFetchPool(c, kafkaio.FetchPoolConfig{MaxWait: time.Minute})
	defer pool.Close()
	signal := func(c chan struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	busyAsked := make(chan struct{}, 1) // a request for partition 0
	idleOnly := make(chan struct{}, 1)  // a request without partition 0, which the session forgets: it is busy
	kc.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		r := req.(*kmsg.FetchRequest)
		switch {
		case len(r.Topics) > 0 && slices.ContainsFunc(r.Topics[0].Partitions, func(p kmsg.FetchRequestTopicPartition) bool { return p.Partition == 0 }):
			signal(busyAsked)
		case len(r.ForgottenTopics) > 0 && slices.Contains(r.ForgottenTopics[0].Partitions, 0):
			signal(idleOnly)
		}
		return nil, nil, false
	})
	wait := func(c chan struct{}, what string) {
		select {
		case <-c:
		case <-time.After(20 * time.Second):
			t.Fatalf("no request %s was sent", what)
		}
	}
	produce(t, c, "t", 0, 0, 100, time.Now())
	big := func(cfg *kafkaio.PartitionReaderConfig) { cfg.MaxBytes = 1 << 20 }
	busy := newReader(c, 0, 0, withPool(pool), big)
	defer func() { <-busy.Close() }()
	wait(busyAsked, "for partition 0")
	idle := newReader(c, 1, 0, withPool(pool), big)
	defer func() { <-idle.Close() }()
	wait(idleOnly, "for the idle partition alone") // partition 0 was answered, and its reader holds the answer
	got := fetchAll(t, busy, 100, 20*time.Second)
	produce(t, c, "t", 0, 100, 100, time.Now())
	got = append(got, fetchAll(t, busy, 200, 20*time.Second)...)
	if !slices.Equal(got, offsets(0, 200)) {
		t.Errorf("read %d records of partition 0, want 200 in order", len(got))
	}
}

// TestFetchPoolSharesLeaderLookups starts 96 readers of one topic on one pool at once: they learn
// their leader epochs from a few shared Metadata requests, not one each (each of which makes the
// broker describe the whole topic), and every record is read.
func TestFetchPoolSharesLeaderLookups(t *testing.T) {
	t.Parallel()
	const parts, per = 96, 5
	kc, c, pool := poolCluster(t, 1, parts, nil)
	var lookups atomic.Int64
	kc.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if m := req.(*kmsg.MetadataRequest); len(m.Topics) == 1 && m.Topics[0].Topic != nil && *m.Topics[0].Topic == "t" {
			lookups.Add(1)
		}
		return nil, nil, false
	})
	readEveryPartition(t, kc, c, pool, parts, per)
	// The pool's leader cache asks once too; the readers' look-ups share the rest.
	if n := lookups.Load(); n > parts/4 {
		t.Errorf("%d Metadata requests for the topic by %d readers starting at once, want at most %d", n, parts, parts/4)
	}
	t.Logf("%d Metadata requests for the topic", lookups.Load())
}
