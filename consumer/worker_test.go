package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/identity"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/embedkafka/kfaketest"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var baseTime = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// record builds an input record whose identity id sits where spec looks for it.
func record(spec string, p, i int, id string) kafkaio.Record {
	m := kafkaio.Record{
		Key:     []byte(fmt.Sprintf("k-%d-%d", p, i)),
		Value:   []byte(fmt.Sprintf("p%d-r%d", p, i)),
		Headers: []kafkaio.Header{{Key: "trace", Value: []byte(fmt.Sprint(i))}},
		Time:    baseTime.Add(time.Duration(p*100000+i) * time.Millisecond),
	}
	switch spec {
	case "key":
		m.Key = []byte(id)
	case "value":
		m.Value = []byte(id)
	case "header:dedup-id":
		m.Headers = append(m.Headers, kafkaio.Header{Key: "dedup-id", Value: []byte(id)})
	case "json:order.id":
		m.Value = []byte(fmt.Sprintf(`{"seq":%d,"order":{"id":%q}}`, i, id))
	default:
		panic(spec)
	}
	return m
}

// stream returns n records for partition p where every fourth one repeats an identity used
// earlier in the partition (25% duplicates), and the records a deduplicator keeps.
func stream(spec string, p, n int, rng *rand.Rand) (in, want []kafkaio.Record) {
	var ids []string
	for i := range n {
		var id string
		if i%4 == 3 {
			id = ids[rng.IntN(len(ids))]
		} else {
			id = fmt.Sprintf("id-%d-%d", p, i)
			ids = append(ids, id)
		}
		m := record(spec, p, i, id)
		in = append(in, m)
		if i%4 != 3 {
			want = append(want, m)
		}
	}
	return in, want
}

// TestKeyModes proves, for each kind of identity, that exactly the first occurrence of every
// identity reaches the output partition with the input's number, in input order, with key, value,
// headers and timestamp unchanged, and that everything is committed.
func TestKeyModes(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"key", "value", "header:dedup-id", "json:order.id"} {
		t.Run(spec, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 4, 4, embedkafka.Options{})
			rng := rand.New(rand.NewPCG(1, 2))
			want := map[int][]kafkaio.Record{}
			for p := range 4 {
				in, w := stream(spec, p, 400, rng)
				e.produce(p, in)
				want[p] = w
			}
			d := newMapDeduper(false, nil)
			r := e.start(e.config(), d, keyFuncFor(t, spec))
			e.waitAllCommitted(20 * time.Second)
			if err := r.stop(t, 10*time.Second); err != nil {
				t.Fatalf("Run: %v", err)
			}
			got := e.readOut(e.out)
			for p := range 4 {
				compareSeq(t, fmt.Sprintf("partition %d", p), got[p], want[p])
			}
			if c, dup := r.obs.consumed.Load(), r.obs.duplicates.Load(); c != 1600 || dup != 400 {
				t.Errorf("observer: consumed %d duplicates %d, want 1600 and 400", c, dup)
			}
			if pr := r.obs.produced.Load(); pr != 1200 {
				t.Errorf("observer: produced %d, want 1200", pr)
			}
			if r.obs.latencies.Load() != 1200 {
				t.Errorf("observer: %d latencies, want 1200", r.obs.latencies.Load())
			}
			d.check(t)
			assigns, revokes, _ := d.counts()
			for p := range int32(4) {
				if assigns[p] != 1 || revokes[p] != 1 {
					t.Errorf("partition %d: %d assigns, %d revokes, want 1 and 1", p, assigns[p], revokes[p])
				}
			}
		})
	}
}

// TestUnkeyedPolicy proves that records without an extractable identity (null key in key mode,
// broken or incomplete JSON in json mode) never crash the worker: with policy pass they are
// produced unchanged in their place, with policy drop they are not produced; both count them.
func TestUnkeyedPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec   string
		policy consumer.UnkeyedPolicy
	}{
		{"key", consumer.UnkeyedPass},
		{"key", consumer.UnkeyedDrop},
		{"json:order.id", consumer.UnkeyedPass},
		{"json:order.id", consumer.UnkeyedDrop},
	} {
		t.Run(fmt.Sprintf("%s/%s", tc.spec, tc.policy), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1, 1, embedkafka.Options{})
			var in, want []kafkaio.Record
			bad := []kafkaio.Record{
				{Key: nil, Value: []byte(`not json at all {`)},
				{Key: nil, Value: []byte(`{"order":{"other":1}}`)},
				{Key: nil, Value: nil, Headers: []kafkaio.Header{{Key: "h", Value: nil}}},
				{Key: nil, Value: []byte(`{"order":null}`)},
			}
			for i := range 40 {
				if i%10 == 5 {
					m := bad[(i/10)%len(bad)]
					m.Time = baseTime.Add(time.Duration(i) * time.Millisecond)
					in = append(in, m)
					if tc.policy == consumer.UnkeyedPass {
						want = append(want, m)
					}
					continue
				}
				m := record(tc.spec, 0, i, fmt.Sprintf("id-%d", i%20)) // second half repeats the first
				in = append(in, m)
				if i < 20 {
					want = append(want, m)
				}
			}
			e.produce(0, in)
			cfg := e.config()
			cfg.Unkeyed = tc.policy
			d := &batchDeduper{mapDeduper: newMapDeduper(false, nil)}
			r := e.start(cfg, d, keyFuncFor(t, tc.spec))
			e.waitAllCommitted(20 * time.Second)
			if err := r.stop(t, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			compareSeq(t, "output", e.readOut(e.out)[0], want)
			if n := r.obs.unkeyed.Load(); n != 4 {
				t.Errorf("unkeyed counted %d, want 4", n)
			}
			d.check(t, 36, 4)
		})
	}
}

// batchDeduper is a mapDeduper and a consumer.BatchJudge that counts how the Worker judges: every
// keyed record through JudgeBatch, none through Seen, and no verdict for a record without one.
type batchDeduper struct {
	*mapDeduper
	mu                   sync.Mutex
	batched, seen, unset int
}

func (d *batchDeduper) JudgeBatch(p int32, ids [][]byte, ts func(int) time.Time, put func(int, consumer.Verdict)) {
	for i, id := range ids {
		if id == nil {
			d.mu.Lock()
			d.unset++
			d.mu.Unlock()
			continue
		}
		v := consumer.VerdictNew
		if d.mapDeduper.Seen(p, id, ts(i)) {
			v = consumer.VerdictDuplicate
		}
		d.mu.Lock()
		d.batched++
		d.mu.Unlock()
		put(i, v)
	}
}

func (d *batchDeduper) Seen(p int32, id []byte, ts time.Time) bool {
	d.mu.Lock()
	d.seen++
	d.mu.Unlock()
	return d.mapDeduper.Seen(p, id, ts)
}

// check fails the test unless keyed records were judged through JudgeBatch and unkeyed ones
// were passed to it as nil identities.
func (d *batchDeduper) check(t *testing.T, keyed, unkeyed int) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.batched != keyed || d.seen != 0 || d.unset != unkeyed {
		t.Errorf("judged %d in batches and %d by Seen, %d nil identities; want %d, 0, %d", d.batched, d.seen, d.unset, keyed, unkeyed)
	}
}

// TestMarkMode proves that mark mode produces every record, in order, and that exactly the
// duplicates carry the mark header (after their own headers).
func TestMarkMode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 2, embedkafka.Options{})
	rng := rand.New(rand.NewPCG(3, 4))
	want := map[int][]kafkaio.Record{}
	for p := range 2 {
		in, _ := stream("key", p, 200, rng)
		e.produce(p, in)
		for i, m := range in {
			if i%4 == 3 {
				m.Headers = append(slices.Clone(m.Headers), kafkaio.Header{Key: "x-dup", Value: []byte("1")})
			}
			want[p] = append(want[p], m)
		}
	}
	cfg := e.config()
	cfg.Mode = consumer.ModeMark
	cfg.MarkHeader = "x-dup"
	r := e.start(cfg, newMapDeduper(false, nil), keyFuncFor(t, "key"))
	e.waitAllCommitted(20 * time.Second)
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	got := e.readOut(e.out)
	for p := range 2 {
		compareSeq(t, fmt.Sprintf("partition %d", p), got[p], want[p])
	}
	if n := r.obs.duplicates.Load(); n != 100 {
		t.Errorf("duplicates counted %d, want 100", n)
	}
}

// TestDuplicatesTopic proves that with a duplicates topic the duplicates are dropped from the
// output and written, in order, to the side topic (partition input % its partition count).
func TestDuplicatesTopic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 2, embedkafka.Options{Topics: map[string]int32{"dups": 1}})
	rng := rand.New(rand.NewPCG(5, 6))
	want := map[int][]kafkaio.Record{}
	var wantDups []kafkaio.Record
	for p := range 2 {
		in, w := stream("key", p, 100, rng)
		e.produce(p, in)
		want[p] = w
		for i, m := range in {
			if i%4 == 3 {
				wantDups = append(wantDups, m)
			}
		}
	}
	cfg := e.config()
	cfg.DuplicatesTopic = "dups"
	r := e.start(cfg, newMapDeduper(false, nil), keyFuncFor(t, "key"))
	e.waitAllCommitted(20 * time.Second)
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	got := e.readOut(e.out)
	for p := range 2 {
		compareSeq(t, fmt.Sprintf("partition %d", p), got[p], want[p])
	}
	dups := e.readOut("dups")[0]
	// Both input partitions write to the single side partition; order holds per input partition.
	for p := range 2 {
		var gotP, wantP []kafkaio.Record
		for _, m := range dups {
			if string(m.Value[:2]) == fmt.Sprintf("p%d", p) {
				if reason, _ := header(m, consumer.AuditHeaderReason); reason != consumer.DropDuplicate {
					t.Errorf("duplicate %s has reason %q", m.Value, reason)
				}
				m.Headers = m.Headers[:len(m.Headers)-4] // the audit headers (TestAuditTopic)
				gotP = append(gotP, m)
			}
		}
		for _, m := range wantDups {
			if string(m.Value[:2]) == fmt.Sprintf("p%d", p) {
				wantP = append(wantP, m)
			}
		}
		compareSeq(t, fmt.Sprintf("duplicates of partition %d", p), gotP, wantP)
	}
}

// TestScope proves the consumer side of DEDUP_SCOPE: the same identity on two partitions is a
// duplicate only for a global Deduper; a per-partition one lets both through.
func TestScope(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		global bool
		want   int
	}{{"partition", false, 2}, {"global", true, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 2, 2, embedkafka.Options{})
			for p := range 2 {
				e.produce(p, []kafkaio.Record{record("key", p, 0, "shared-id"), record("key", p, 1, fmt.Sprintf("own-%d", p))})
			}
			r := e.start(e.config(), newMapDeduper(tc.global, nil), keyFuncFor(t, "key"))
			e.waitAllCommitted(20 * time.Second)
			if err := r.stop(t, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			shared := 0
			for _, msgs := range e.readOut(e.out) {
				for _, m := range msgs {
					if string(m.Key) == "shared-id" {
						shared++
					}
				}
			}
			if shared != tc.want {
				t.Errorf("shared identity produced %d times, want %d", shared, tc.want)
			}
		})
	}
}

// TestGracefulShutdown proves that cancelling Run drains, commits every processed offset (even
// with a commit interval far longer than the test), calls Revoke for every partition and returns
// nil quickly; and that a new worker in the same group re-delivers nothing: after restart, only
// records produced later are consumed.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3, 3, embedkafka.Options{})
	rng := rand.New(rand.NewPCG(7, 8))
	want := map[int][]kafkaio.Record{}
	for p := range 3 {
		in, w := stream("key", p, 300, rng)
		e.produce(p, in)
		want[p] = w
	}
	st := newStore()
	d1 := newMapDeduper(false, st)
	cfg := e.config()
	cfg.CommitInterval = time.Hour // only the shutdown commits
	r1 := e.start(cfg, d1, keyFuncFor(t, "key"))
	eventually(t, 20*time.Second, "all records produced", func() bool {
		n := 0
		for _, msgs := range e.readOut(e.out) {
			n += len(msgs)
		}
		return n == 3*225
	})
	began := time.Now()
	if err := r1.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("shutdown took %v", time.Since(began))
	com, err := e.cl.Committed(context.Background(), e.group, e.in)
	if err != nil {
		t.Fatal(err)
	}
	for p := range 3 {
		if com[p] != 300 {
			t.Errorf("partition %d: committed %d after shutdown, want 300", p, com[p])
		}
	}
	d1.check(t)
	if _, revokes, _ := d1.counts(); len(revokes) != 3 {
		t.Errorf("revokes after shutdown: %v, want one per partition", revokes)
	}
	budget := cfg.RebalanceTimeout - cfg.HeartbeatInterval
	if n, longest := r1.obs.released.Load(), time.Duration(r1.obs.releaseMax.Load()); n != 3 || longest <= 0 || longest > budget {
		t.Errorf("%d releases reported, the longest %v; want 3 within the release budget (< %v)", n, longest, budget)
	}
	if r1.w.Ready() {
		t.Error("worker still ready after Run returned")
	}

	// A second worker resumes from the commits: the sentinel is the first thing it consumes.
	d2 := newMapDeduper(false, st)
	r2 := e.start(e.config(), d2, keyFuncFor(t, "key"))
	eventually(t, 20*time.Second, "second worker ready", r2.w.Ready)
	for p := range 3 {
		s := record("key", p, 1000, "sentinel")
		e.produce(p, []kafkaio.Record{s})
		want[p] = append(want[p], s)
	}
	e.waitAllCommitted(20 * time.Second)
	if err := r2.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := r2.obs.consumed.Load(); n != 3 {
		t.Errorf("second worker consumed %d records, want only the 3 sentinels", n)
	}
	got := e.readOut(e.out)
	for p := range 3 {
		compareSeq(t, fmt.Sprintf("partition %d", p), got[p], want[p])
	}
}

// TestTwoWorkersSplitPartitions proves scale-out: a second worker joining the group takes some
// partitions, the state follows them through Revoke/Assign, and the output is exactly the
// deduplicated input although records were produced before, during and after the rebalance.
func TestTwoWorkersSplitPartitions(t *testing.T) {
	t.Parallel()
	for _, delivery := range []consumer.Delivery{consumer.DeliveryAtLeastOnce, consumer.DeliveryExactlyOnce} {
		t.Run(string(delivery), func(t *testing.T) {
			t.Parallel()
			twoWorkers(t, delivery)
		})
	}
}

// twoWorkers is TestTwoWorkersSplitPartitions under delivery: under exactly-once each partition
// that moves is fenced by its new owner after its old owner committed its last transaction.
func twoWorkers(t *testing.T, delivery consumer.Delivery) {
	e := newEnv(t, 4, 4, embedkafka.Options{})
	cfg := e.config()
	if delivery == consumer.DeliveryExactlyOnce {
		cfg = e.eosConfig()
	}
	rng := rand.New(rand.NewPCG(9, 10))
	ins := map[int][]kafkaio.Record{}
	want := map[int][]kafkaio.Record{}
	for p := range 4 {
		ins[p], want[p] = stream("key", p, 900, rng)
	}
	feed := func(from, to int) {
		for p := range 4 {
			e.produce(p, ins[p][from:to])
		}
	}
	st := newStore()
	dA, dB := newMapDeduper(false, st), newMapDeduper(false, st)
	feed(0, 300)
	a := e.start(cfg, dA, keyFuncFor(t, "key"))
	eventually(t, 20*time.Second, "worker A ready", a.w.Ready)
	feed(300, 500)
	b := e.start(cfg, dB, keyFuncFor(t, "key"))
	feed(500, 700)
	eventually(t, 30*time.Second, "both workers ready with partitions", func() bool {
		return a.w.Ready() && b.w.Ready() && a.obs.assigned.Load() > 0 && b.obs.assigned.Load() > 0
	})
	if na, nb := a.obs.assigned.Load(), b.obs.assigned.Load(); na+nb != 4 {
		t.Errorf("assigned %d + %d partitions, want 4 in total", na, nb)
	}
	feed(700, 900)
	e.waitAllCommitted(30 * time.Second)
	if err := a.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if b.obs.consumed.Load() == 0 {
		t.Error("second worker consumed nothing")
	}
	got := e.readOut(e.out)
	for p := range 4 {
		compareSeq(t, fmt.Sprintf("partition %d", p), got[p], want[p])
	}
	dA.check(t)
	dB.check(t)
}

// TestBrokerRestart proves that a broker going away mid-run loses nothing: the worker is held
// in the middle of a batch, the broker stops, the batch's produce fails and is retried, the
// worker stops being ready, and when the broker is back on the same address (state reloaded from
// disk) it resumes; every record reaches the output in order. Redelivery after the outage may
// repeat records in the output (at-least-once), so the order check is on first appearances.
func TestBrokerRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 2, embedkafka.Options{DataDir: t.TempDir()})
	rng := rand.New(rand.NewPCG(11, 12))
	ins := map[int][]kafkaio.Record{}
	want := map[int][]kafkaio.Record{}
	for p := range 2 {
		ins[p], want[p] = stream("key", p, 4000, rng)
		e.produce(p, ins[p][:3000])
	}
	cfg := e.config()
	cfg.BatchSize = 50
	d := &gatedDeduper{mapDeduper: newMapDeduper(false, nil), after: 1000,
		reached: make(chan struct{}), release: make(chan struct{})}
	r := e.start(cfg, d, keyFuncFor(t, "key"))
	select {
	case <-d.reached:
	case <-time.After(20 * time.Second):
		t.Fatal("worker never got to the gate")
	}
	e.cl.Fake().Stop()
	close(d.release)
	eventually(t, 20*time.Second, "worker not ready while the broker is down", func() bool { return !r.w.Ready() })
	eventually(t, 20*time.Second, "a failed produce", func() bool { return r.obs.produceErrors.Load() > 0 })
	if err := e.cl.Fake().Resume(); err != nil {
		t.Fatal(err)
	}
	for p := range 2 {
		e.produce(p, ins[p][3000:])
	}
	e.waitAllCommitted(40 * time.Second)
	eventually(t, 20*time.Second, "worker ready again", r.w.Ready)
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	got := e.readOut(e.out)
	for p := range 2 {
		var firsts []kafkaio.Record
		seen := map[string]bool{}
		for _, m := range got[p] {
			if !seen[string(m.Value)] {
				seen[string(m.Value)] = true
				firsts = append(firsts, m)
			}
		}
		compareSeq(t, fmt.Sprintf("partition %d (first appearances)", p), firsts, want[p])
		t.Logf("partition %d: %d output records, %d distinct", p, len(got[p]), len(firsts))
	}
	t.Logf("produce errors %d, commit errors %d, generations %d",
		r.obs.produceErrors.Load(), r.obs.commitErrors.Load(), r.obs.rebalances.Load())
}

// gatedDeduper holds the after+1st call of Seen until release is closed, after closing reached.
type gatedDeduper struct {
	*mapDeduper
	after   int64
	calls   atomic.Int64
	reached chan struct{}
	release chan struct{}
}

func (g *gatedDeduper) Seen(p int32, id []byte, ts time.Time) bool {
	if g.calls.Add(1) == g.after+1 {
		close(g.reached)
		<-g.release
	}
	return g.mapDeduper.Seen(p, id, ts)
}

// TestMissingTopic proves that a missing output topic keeps the worker waiting (not ready,
// nothing consumed) and that it proceeds without loss once the topic exists.
func TestMissingTopic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 0, embedkafka.Options{})
	rng := rand.New(rand.NewPCG(13, 14))
	want := map[int][]kafkaio.Record{}
	for p := range 2 {
		in, w := stream("key", p, 100, rng)
		e.produce(p, in)
		want[p] = w
	}
	logs := &captureHandler{}
	r := e.startLogged(e.config(), newMapDeduper(false, nil), keyFuncFor(t, "key"), slog.New(logs))
	eventually(t, 10*time.Second, "a log line about the missing topic", func() bool {
		return logs.count("waiting for Kafka topics") > 0
	})
	if r.w.Ready() || r.obs.consumed.Load() != 0 {
		t.Fatalf("worker ready=%v consumed=%d without an output topic", r.w.Ready(), r.obs.consumed.Load())
	}
	if err := e.cl.CreateTopic(context.Background(), e.out, 2); err != nil {
		t.Fatal(err)
	}
	e.waitAllCommitted(20 * time.Second)
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	got := e.readOut(e.out)
	for p := range 2 {
		compareSeq(t, fmt.Sprintf("partition %d", p), got[p], want[p])
	}
}

// TestPartitionMismatch proves that partitioning "same" refuses an output topic with another
// partition count, with ErrPartitionMismatch, before consuming anything.
func TestPartitionMismatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4, 3, embedkafka.Options{})
	e.produce(0, []kafkaio.Record{record("key", 0, 0, "a")})
	r := e.start(e.config(), newMapDeduper(false, nil), keyFuncFor(t, "key"))
	select {
	case err := <-r.done:
		r.done <- err
		if !errors.Is(err, consumer.ErrPartitionMismatch) {
			t.Fatalf("Run = %v, want ErrPartitionMismatch", err)
		}
		t.Logf("error: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not fail")
	}
	if r.obs.consumed.Load() != 0 {
		t.Error("records consumed despite the mismatch")
	}
}

// TestHashPartitioning proves that partitioning "hash" writes each keyed record to the partition
// Java's default partitioner would pick (the expected partitions come from Kafka's published
// murmur2 test vectors), null-key records to input partition % n, and keeps per-key order.
func TestHashPartitioning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 3, embedkafka.Options{})
	// murmur2 values from Kafka's UtilsTest; partition = (h & 0x7fffffff) % 3.
	vectors := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	wantPart := map[string]int{}
	var keys []string
	for k, h := range vectors {
		wantPart[k] = int(uint32(h)&0x7fffffff) % 3
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var sent []kafkaio.Record
	for p := range 2 {
		var in []kafkaio.Record
		for i := range 3 { // each key several times in a row per partition, distinct values
			for _, k := range keys {
				in = append(in, kafkaio.Record{Key: []byte(k), Value: []byte(fmt.Sprintf("%s/%d/%d", k, p, i))})
			}
		}
		in = append(in, kafkaio.Record{Key: nil, Value: []byte(fmt.Sprintf("nullkey/%d", p))})
		e.produce(p, in)
		sent = append(sent, in...)
	}
	cfg := e.config()
	cfg.Partitioning = consumer.PartitionHash
	// Identity is the value: nothing is a duplicate, every record must arrive.
	r := e.start(cfg, newMapDeduper(false, nil), keyFuncFor(t, "value"))
	e.waitAllCommitted(20 * time.Second)
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	got := e.readOut(e.out)
	total := 0
	for q, msgs := range got {
		total += len(msgs)
		last := map[string]string{}
		for _, m := range msgs {
			if m.Key == nil {
				var p int
				fmt.Sscanf(string(m.Value), "nullkey/%d", &p)
				if q != p%3 {
					t.Errorf("null-key record from partition %d in output partition %d, want %d", p, q, p%3)
				}
				continue
			}
			if want := wantPart[string(m.Key)]; q != want {
				t.Errorf("key %q in partition %d, want %d", m.Key, q, want)
			}
			// per key and input partition, the sequence number must increase
			var k string
			var p, i int
			fmt.Sscanf(string(m.Value[len(m.Key):]), "/%d/%d", &p, &i)
			k = fmt.Sprintf("%s/%d", m.Key, p)
			if prev, ok := last[k]; ok && prev >= string(m.Value) {
				t.Errorf("key %s out of order: %s after %s", k, m.Value, prev)
			}
			last[k] = string(m.Value)
		}
	}
	if total != len(sent) {
		t.Errorf("got %d records, want %d", total, len(sent))
	}
}

// TestShutdownWithBrokerDown proves that a shutdown while the brokers are unreachable still
// returns within the shutdown timeout, and that a partition whose processed records could not be
// produced is released with Discard (no snapshot claiming unproduced records), not Revoke.
func TestShutdownWithBrokerDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1, embedkafka.Options{})
	in, _ := stream("key", 0, 500, rand.New(rand.NewPCG(15, 16)))
	e.produce(0, in)
	md := newMapDeduper(false, nil)
	d := &gatedDeduper{mapDeduper: md, after: 100, reached: make(chan struct{}), release: make(chan struct{})}
	cfg := e.config()
	cfg.BatchSize = 50
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.RebalanceTimeout = 10 * time.Second // the shutdown timeout is the binding limit
	r := e.start(cfg, d, keyFuncFor(t, "key"))
	select {
	case <-d.reached:
	case <-time.After(20 * time.Second):
		t.Fatal("worker never got to the gate")
	}
	e.cl.Fake().Stop()
	close(d.release)
	eventually(t, 10*time.Second, "a failed produce", func() bool { return r.obs.produceErrors.Load() > 0 })
	began := time.Now()
	if err := r.stop(t, cfg.ShutdownTimeout+3*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("shutdown took %v", time.Since(began))
	md.check(t)
	_, revokes, discards := md.counts()
	if discards[0] != 1 || revokes[0] != 0 {
		t.Errorf("partition 0: %d discards, %d revokes; want 1 discard and no revoke", discards[0], revokes[0])
	}
}

// TestSlowBroker proves that a broker slower to answer a fetch than FetchMaxWait does not stall
// the worker. kafka-go's Reader gives up on a fetch that got no answer within its MaxWait (an
// i/o timeout, then a new connection and the same fetch again), so a Reader given MaxWait =
// FetchMaxWait never got past a broker that slow.
func TestSlowBroker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1, embedkafka.Options{})
	in, want := stream("key", 0, 300, rand.New(rand.NewPCG(21, 22)))
	e.produce(0, in)
	stop := kfaketest.Delay(e.cl.Fake(), kmsg.Fetch, 300*time.Millisecond)
	cfg := e.config()
	cfg.FetchMaxWait = 100 * time.Millisecond
	r := e.start(cfg, newMapDeduper(false, nil), keyFuncFor(t, "key"))
	e.waitAllCommitted(20 * time.Second)
	stop()
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	compareSeq(t, "output", e.readOut(e.out)[0], want)
}

// flakyDeduper fails the first fails Assign calls, then holds the next one until release is
// closed, after closing held.
type flakyDeduper struct {
	*mapDeduper
	fails         atomic.Int64
	calls         atomic.Int64
	held, release chan struct{}
}

func (f *flakyDeduper) Assign(ctx context.Context, p int32) error {
	f.calls.Add(1)
	n := f.fails.Add(-1)
	if n >= 0 {
		return errors.New("restore failed")
	}
	if n == -1 { // the first call after the failures
		close(f.held)
		select {
		case <-f.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return f.mapDeduper.Assign(ctx, p)
}

// TestAssignRetried proves that a failing Assign is retried, that the worker is not ready and
// consumes nothing from the partition until it succeeds, and that nothing is lost.
func TestAssignRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1, embedkafka.Options{})
	in, want := stream("key", 0, 100, rand.New(rand.NewPCG(17, 18)))
	e.produce(0, in)
	d := &flakyDeduper{mapDeduper: newMapDeduper(false, nil), held: make(chan struct{}), release: make(chan struct{})}
	d.fails.Store(3)
	logs := &captureHandler{}
	r := e.startLogged(e.config(), d, keyFuncFor(t, "key"), slog.New(logs))
	select {
	case <-d.held:
	case <-time.After(20 * time.Second):
		t.Fatalf("Assign was not called again after failing: %d calls", d.calls.Load())
	}
	// Assign failed three times and the fourth call is held: nothing may be consumed yet.
	if ready, consumed := r.w.Ready(), r.obs.consumed.Load(); ready || consumed != 0 {
		t.Errorf("ready=%v consumed=%d while Assign has not succeeded", ready, consumed)
	}
	if n := logs.count("could not be prepared"); n != 3 {
		t.Errorf("%d Assign failures logged, want 3", n)
	}
	close(d.release)
	e.waitAllCommitted(20 * time.Second)
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	compareSeq(t, "output", e.readOut(e.out)[0], want)
	if n := d.calls.Load(); n != 4 {
		t.Errorf("Assign called %d times, want 4 (3 failures and the success)", n)
	}
}

// TestMoreWorkersThanPartitions proves that a member without partitions is ready, idles without
// ending its generation (no rebalance storm), and that the member with the partition processes
// everything.
func TestMoreWorkersThanPartitions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1, embedkafka.Options{})
	a := e.start(e.config(), newMapDeduper(false, nil), keyFuncFor(t, "key"))
	eventually(t, 20*time.Second, "worker A ready", a.w.Ready)
	b := e.start(e.config(), newMapDeduper(false, nil), keyFuncFor(t, "key"))
	eventually(t, 20*time.Second, "both ready, one partition in total", func() bool {
		return a.w.Ready() && b.w.Ready() && a.obs.assigned.Load()+b.obs.assigned.Load() == 1 &&
			a.obs.rebalances.Load() >= 2 // A saw the rebalance caused by B
	})
	in, want := stream("key", 0, 2000, rand.New(rand.NewPCG(19, 20)))
	for i := 0; i < len(in); i += 100 {
		e.produce(0, in[i:i+100])
	}
	e.waitAllCommitted(20 * time.Second)
	// How many rebalances a loaded machine adds (a heartbeat too late, a member rejoining) is
	// not fixed, but the group settles. A member that ended its generation because it had no
	// partition would rejoin at once and make the group rebalance every few hundred
	// milliseconds, for good.
	settled(t, 20*time.Second, 2*time.Second, a, b)
	t.Logf("rebalances: A %d, B %d", a.obs.rebalances.Load(), b.obs.rebalances.Load())
	if err := a.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	compareSeq(t, "output", e.readOut(e.out)[0], want)
}

// settled waits until the workers are all ready and none of them saw a rebalance for quiet; it
// fails the test if that takes longer than timeout.
func settled(t *testing.T, timeout, quiet time.Duration, rs ...*running) {
	t.Helper()
	last, since := int64(-1), time.Now()
	eventually(t, timeout, fmt.Sprintf("no rebalance for %v", quiet), func() bool {
		n, ready := int64(0), true
		for _, r := range rs {
			n += r.obs.rebalances.Load()
			ready = ready && r.w.Ready()
		}
		if n != last || !ready {
			last, since = n, time.Now()
			return false
		}
		return time.Since(since) >= quiet
	})
}

// TestNilIdentityJudged proves that a KeyFunc's nil identity reported as found is judged as the
// empty identity, as Judge judged it before batches: the first such record passes and the later
// ones are duplicates, whatever the verdicts of the partition's earlier batches were.
func TestNilIdentityJudged(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1, embedkafka.Options{})
	var in, want []kafkaio.Record
	for i := range 30 {
		m := record("key", 0, i, fmt.Sprintf("id-%d", i))
		if i%10 == 9 {
			m.Key = nil // the KeyFunc below calls this one's identity nil, found
		}
		in = append(in, m)
		if i%10 != 9 || i == 9 {
			want = append(want, m)
		}
	}
	e.produce(0, in)
	key := func(_ context.Context, k, _ []byte, _ identity.Headers) ([]byte, identity.Reason, error) {
		return k, identity.Found, nil
	}
	r := e.start(e.config(), &batchDeduper{mapDeduper: newMapDeduper(false, nil)}, key)
	e.waitAllCommitted(20 * time.Second)
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	compareSeq(t, "output", e.readOut(e.out)[0], want)
}
