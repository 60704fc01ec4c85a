package kafkaio_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/txntest"
	"github.com/segmentio/kafka-go"
)

// scribe writes the log of partition 0 of "t" for the transaction tests (see txntest): each value
// is its own produce request, so the records of producers that send in turn interleave.
type scribe struct{ w *txntest.Writer }

func newScribe(t *testing.T, addrs []string) *scribe {
	return &scribe{txntest.New(t, addrs, "t")}
}

func (s *scribe) begin(who string)            { s.w.Begin(who) }
func (s *scribe) end(who string, commit bool) { s.w.End(who, commit) }

// send writes values (key: the value up to "@") as who, in its transaction unless who is "".
func (s *scribe) send(who string, values ...string) {
	for _, v := range values {
		s.w.Send(who, txntest.Record{Key: []byte(strings.SplitN(v, "@", 2)[0]), Value: []byte(v)})
	}
}

// txn writes values in one transaction of who and commits or aborts it.
func (s *scribe) txn(who string, commit bool, values ...string) {
	s.begin(who)
	s.send(who, values...)
	s.end(who, commit)
}

// seq returns prefix0..prefix(n-1).
func seq(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// txnScenarios are the logs of the transaction tests and what each isolation level reads of
// them.
var txnScenarios = []struct {
	name                 string
	write                func(s *scribe)
	committed, all       []string
	abortedUnderCommited int
}{
	{"committed", func(s *scribe) {
		s.txn("a", true, "a1", "a2", "a3")
		s.send("", "p1")
		s.txn("a", true, "a4")
	}, []string{"a1", "a2", "a3", "p1", "a4"}, []string{"a1", "a2", "a3", "p1", "a4"}, 0},
	{"aborted and never retried", func(s *scribe) {
		s.send("", "p1")
		s.txn("a", false, "x1", "x2", "x3")
		s.send("", "p2")
	}, []string{"p1", "p2"}, []string{"p1", "x1", "x2", "x3", "p2"}, 3},
	{"aborted and retried with a changed value", func(s *scribe) {
		s.txn("a", false, "e1@1", "e2@1")
		s.txn("a", true, "e1@2", "e2@2")
	}, []string{"e1@2", "e2@2"}, []string{"e1@1", "e2@1", "e1@2", "e2@2"}, 2},
	{"two producers interleaved, one aborts, the other commits", func(s *scribe) {
		s.begin("a")
		s.begin("b")
		s.send("a", "a1")
		s.send("b", "b1")
		s.send("a", "a2")
		s.send("b", "b2")
		s.end("a", false)
		s.send("b", "b3")
		s.end("b", true)
		s.send("", "p1")
	}, []string{"b1", "b2", "b3", "p1"}, []string{"a1", "b1", "a2", "b2", "b3", "p1"}, 2},
	{"the log ends with an aborted transaction", func(s *scribe) {
		s.send("", "p1")
		s.txn("a", false, "x1", "x2")
	}, []string{"p1"}, []string{"p1", "x1", "x2"}, 2},
	{"an aborted transaction spans several fetches", func(s *scribe) {
		s.send("", "p1")
		s.txn("a", false, seq("x", 60)...)
		s.send("", "p2")
	}, []string{"p1", "p2"}, append(append([]string{"p1"}, seq("x", 60)...), "p2"), 60},
}

// TestTransactions reads the scenarios' logs with a PartitionReader and with Read in both
// isolation levels, in fetches of at most 1 KiB (the long transaction spans many), and checks
// that exactly the right records are read, that no transaction marker is, and that the offsets
// handed out reach the end of the log (a partition whose tail is an aborted transaction or a
// marker has no lag).
func TestTransactions(t *testing.T) {
	t.Parallel()
	for _, sc := range txnScenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			kc, c := cluster(t)
			sc.write(newScribe(t, kc.ListenAddrs()))
			end := endOffset(t, c, "t", 0)
			for _, iso := range kafkaio.Isolations() {
				want, wantAborted := sc.all, 0
				if iso == kafkaio.ReadCommitted {
					want, wantAborted = sc.committed, sc.abortedUnderCommited
				}
				got, aborted, next, lag := readPartition(t, c, iso, end)
				if !slices.Equal(got, want) || aborted != wantAborted || next != end || lag != 0 {
					t.Errorf("%s: PartitionReader read %q, %d aborted, up to %d with lag %d; want %q, %d aborted, up to %d with lag 0",
						iso, got, aborted, next, lag, want, wantAborted, end)
				}
				if got := readRange(t, c, iso, end); !slices.Equal(got, want) {
					t.Errorf("%s: Read read %q, want %q", iso, got, want)
				}
			}
		})
	}
}

// endOffset returns the high watermark of topic/partition.
func endOffset(t *testing.T, c *kafka.Client, topic string, partition int) int64 {
	t.Helper()
	offs, err := kafkaio.ListOffsets(context.Background(), c, topic, []int{partition})
	if err != nil || offs[partition].Error != nil {
		t.Fatal(err, offs[partition].Error)
	}
	return offs[partition].LastOffset
}

// readPartition reads partition 0 of "t" with a PartitionReader in batches of at most 7 records
// until Next reaches end, and returns the values read, the aborted records skipped, the last Next
// and the last lag (End - Next).
func readPartition(t *testing.T, c *kafka.Client, iso kafkaio.Isolation, end int64) (vals []string, aborted int, next, lag int64) {
	t.Helper()
	r := kafkaio.NewPartitionReader(c, kafkaio.PartitionReaderConfig{
		Topic: "t", Offset: kafka.FirstOffset, Isolation: iso, MaxBytes: 1 << 10, MaxWait: 20 * time.Millisecond,
	})
	defer func() { <-r.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for next < end {
		b, err := r.Fetch(ctx, 7, time.Millisecond)
		if err != nil {
			t.Fatalf("%s: Fetch after %q (next %d, end %d): %v", iso, vals, next, end, err)
		}
		if len(b.Records) == 0 && b.Next <= next {
			t.Fatalf("%s: Fetch returned no record and no progress (next %d)", iso, b.Next)
		}
		for _, m := range b.Records {
			vals = append(vals, string(m.Value))
		}
		next, aborted, lag = b.Next, aborted+b.Aborted, b.End-b.Next
	}
	return vals, aborted, next, lag
}

// readRange reads partition 0 of "t" up to end with Read and returns the values read.
func readRange(t *testing.T, c *kafka.Client, iso kafkaio.Isolation, end int64) []string {
	t.Helper()
	var vals []string
	err := kafkaio.Read(context.Background(), c, kafkaio.Range{
		Topic: "t", End: end, Isolation: iso, MaxBytes: 1 << 10, MaxWait: 20 * time.Millisecond, Failures: 1,
	}, func(recs []kafkaio.Record) error {
		for _, r := range recs {
			vals = append(vals, string(r.Value))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: Read: %v", iso, err)
	}
	return vals
}

// TestOpenTransactionHolds proves that under read_committed nothing after an open transaction is
// read until it ends, and that OnHeld reports for how long; under read_uncommitted everything is
// read at once.
func TestOpenTransactionHolds(t *testing.T) {
	t.Parallel()
	kc, c := cluster(t)
	s := newScribe(t, kc.ListenAddrs())
	s.send("", "p1")
	s.begin("a")
	s.send("a", "o1")
	s.send("", "p2", "p3")

	var held atomic.Int64
	r := kafkaio.NewPartitionReader(c, kafkaio.PartitionReaderConfig{
		Topic: "t", Offset: kafka.FirstOffset, MaxWait: 20 * time.Millisecond,
		OnHeld: func(d time.Duration) { held.Store(int64(d)) },
	})
	defer func() { <-r.Close() }()
	b, err := r.Fetch(context.Background(), 100, 50*time.Millisecond)
	if err != nil || len(b.Records) != 1 || string(b.Records[0].Value) != "p1" || b.Next != 1 || b.End != 1 {
		t.Fatalf("first Fetch: %v, %+v; want p1 alone, up to the last stable offset 1", err, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	if b, err := r.Fetch(ctx, 100, 0); err == nil {
		t.Fatalf("read %d records past an open transaction", len(b.Records))
	}
	cancel()
	if d := time.Duration(held.Load()); d < 100*time.Millisecond {
		t.Errorf("OnHeld reported %v after 300ms behind the open transaction", d)
	}
	s.end("a", true)
	var got []string
	for len(got) < 3 {
		b, err := r.Fetch(context.Background(), 100, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range b.Records {
			got = append(got, string(m.Value))
		}
	}
	if !slices.Equal(got, []string{"o1", "p2", "p3"}) {
		t.Errorf("after the commit: read %q", got)
	}
	if d := time.Duration(held.Load()); d != 0 {
		t.Errorf("OnHeld still reports %v after the transaction ended", d)
	}
	got, _, _, _ = readPartition(t, c, kafkaio.ReadUncommitted, endOffset(t, c, "t", 0))
	if !slices.Equal(got, []string{"p1", "o1", "p2", "p3"}) {
		t.Errorf("read_uncommitted: read %q", got)
	}
}
