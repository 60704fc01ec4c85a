package consumer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/txntest"
	"github.com/segmentio/kafka-go"
)

// txnFate is what becomes of one transaction of txnScenario.
type txnFate int

const (
	committed     txnFate = iota
	aborted               // aborted, never retried
	abortRetried          // aborted, then retried in a committed transaction with "attempt":2
	txnPartitions = 6
)

// txnScenario is the transactional-input workload: txns transactions of perTxn records each, spread over the
// input partitions (so every transaction writes a marker to each of them), 10% aborted, 20%
// aborted and retried with the same event ids and "attempt":2 in a committed transaction, and
// resends exact re-sends of committed records written outside transactions after them.
// Three transactional producers write concurrently, so open transactions interleave.
type txnScenario struct {
	txns, perTxn, resends int
	fates                 []txnFate
}

func newTxnScenario(rng *rand.Rand, txns, perTxn, resends int) *txnScenario {
	s := &txnScenario{txns: txns, perTxn: perTxn, resends: resends, fates: make([]txnFate, txns)}
	for i := range s.fates {
		switch x := rng.Float64(); {
		case x < 0.1:
			s.fates[i] = aborted
		case x < 0.3:
			s.fates[i] = abortRetried
		}
	}
	return s
}

// records returns transaction n's records at attempt.
func (s *txnScenario) records(n, attempt int) []txntest.Record {
	recs := make([]txntest.Record, s.perTxn)
	for i := range recs {
		id := fmt.Sprintf("e%04d-%04d", n, i)
		recs[i] = txntest.Record{Partition: int32(i % txnPartitions), Key: []byte(id),
			Value: fmt.Appendf(nil, `{"id":%q,"attempt":%d}`, id, attempt)}
	}
	return recs
}

// write writes the scenario to topic in at addrs.
func (s *txnScenario) write(t *testing.T, addrs []string, in string, rng *rand.Rand) {
	w := txntest.New(t, addrs, in)
	var wg sync.WaitGroup
	for g, who := range []string{"a", "b", "c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := g; n < s.txns; n += 3 {
				w.Txn(who, s.fates[n] == committed, s.records(n, 1)...)
				if s.fates[n] == abortRetried {
					w.Txn(who, true, s.records(n, 2)...)
				}
			}
		}()
	}
	wg.Wait()
	var resends []txntest.Record
	for len(resends) < s.resends {
		n := rng.IntN(s.txns)
		if s.fates[n] == aborted {
			continue
		}
		attempt := 1
		if s.fates[n] == abortRetried {
			attempt = 2
		}
		resends = append(resends, s.records(n, attempt)[rng.IntN(s.perTxn)])
	}
	w.SendAll("", resends...)
}

// txnOutcome counts what the output holds against the scenario.
type txnOutcome struct {
	outputAborted   int // records of aborted attempts in the output
	lostRetries     int // ids of retried transactions without their attempt-2 record in the output
	lost            int // committed ids missing from the output
	leaked          int // output records beyond the first of an id
	markers         int // output records that are not the scenario's (transaction markers)
	committedEvents int
}

// check reads the output topic and compares it with the scenario.
func (s *txnScenario) check(t *testing.T, e *env) txnOutcome {
	t.Helper()
	seen := map[string]int{}    // id → copies in the output
	attempt := map[string]int{} // id → attempt of its first copy
	var o txnOutcome
	for _, msgs := range e.readOut(e.out) {
		for _, m := range msgs {
			var n, i, a int
			if _, err := fmt.Sscanf(string(m.Value), `{"id":"e%04d-%04d","attempt":%d}`, &n, &i, &a); err != nil {
				o.markers++
				continue
			}
			id := string(m.Key)
			if seen[id]++; seen[id] == 1 {
				attempt[id] = a
			} else {
				o.leaked++
			}
			if s.fates[n] == aborted || s.fates[n] == abortRetried && a == 1 {
				o.outputAborted++
			}
		}
	}
	for n, fate := range s.fates {
		if fate == aborted {
			continue
		}
		for i := range s.perTxn {
			id := fmt.Sprintf("e%04d-%04d", n, i)
			o.committedEvents++
			switch {
			case seen[id] == 0:
				o.lost++
			case fate == abortRetried && attempt[id] != 2:
				o.lostRetries++
			}
		}
	}
	return o
}

// run writes the scenario to b (topics of its own) while a worker reading with iso (and an exact
// Deduper) consumes it, until every input offset is committed, and returns what the output holds
// and the aborted records the worker counted.
func (s *txnScenario) run(t *testing.T, b testbroker.Broker, rng *rand.Rand, iso kafkaio.Isolation) (txnOutcome, int64) {
	t.Helper()
	e := newEnvOn(t, b, txnPartitions, txnPartitions)
	cfg := e.config()
	cfg.BatchSize, cfg.Isolation = 1000, string(iso)
	r := e.start(cfg, newMapDeduper(false, nil), keyFuncFor(t, "key"))
	s.write(t, e.cl.Addrs(), e.in, rng)
	e.waitAllCommitted(60 * time.Second)
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	o := s.check(t, e)
	t.Logf("%+v", o)
	return o, r.obs.aborted.Load()
}

// TestTransactionalInput runs the transactional-input scenario (300 transactions of 200 records, 10% aborted,
// 20% aborted and retried, 6,000 re-sends) through a worker reading committed data while the
// producers write: no aborted record, no marker and no lost retry may reach the output, every
// committed event exactly once (the Deduper here is exact: no false positives), and the committed
// offsets reach the end of every partition although each ends with a marker. On real Kafka the
// transaction coordinator and the aborted-transaction index are the broker's own.
func TestTransactionalInput(t *testing.T) {
	t.Parallel()
	testbroker.Each(t, testbroker.Options{}, testTransactionalInput)
}

func testTransactionalInput(t *testing.T, b testbroker.Broker) {
	rng := rand.New(rand.NewPCG(25, 1))
	s := newTxnScenario(rng, 300, 200, 6000)
	o, counted := s.run(t, b, rng, kafkaio.ReadCommitted)
	abortedRecords := 0
	for _, f := range s.fates {
		if f != committed {
			abortedRecords += s.perTxn
		}
	}
	if o.outputAborted != 0 || o.markers != 0 || o.lostRetries != 0 || o.lost != 0 || o.leaked != 0 {
		t.Errorf("aborted records in the output %d, markers %d, lost retries %d, lost %d, leaked %d; want all 0",
			o.outputAborted, o.markers, o.lostRetries, o.lost, o.leaked)
	}
	if counted != int64(abortedRecords) {
		t.Errorf("%d aborted records counted, want %d", counted, abortedRecords)
	}
}

// TestReadUncommittedInput runs a smaller scenario under read_uncommitted: aborted records pass
// (the retry of an aborted record is then a duplicate of it, and dropped), markers never do.
func TestReadUncommittedInput(t *testing.T) {
	t.Parallel()
	testbroker.Each(t, testbroker.Options{}, testReadUncommittedInput)
}

func testReadUncommittedInput(t *testing.T, b testbroker.Broker) {
	rng := rand.New(rand.NewPCG(25, 2))
	s := newTxnScenario(rng, 30, 60, 300)
	o, counted := s.run(t, b, rng, kafkaio.ReadUncommitted)
	retried, abortedOnly := 0, 0
	for _, f := range s.fates {
		switch f {
		case abortRetried:
			retried += s.perTxn
		case aborted:
			abortedOnly += s.perTxn
		}
	}
	if o.markers != 0 || o.lost != 0 || o.leaked != 0 || o.outputAborted != retried+abortedOnly || o.lostRetries != retried {
		t.Errorf("markers %d, lost %d, leaked %d, aborted records in the output %d, lost retries %d; want 0, 0, 0, %d, %d",
			o.markers, o.lost, o.leaked, o.outputAborted, o.lostRetries, retried+abortedOnly, retried)
	}
	if counted != 0 {
		t.Errorf("%d aborted records counted under read_uncommitted", counted)
	}
}

// TestRestartInAbortedTransaction stops the worker while it is held at an open transaction,
// aborts that transaction, and restarts the worker twice from inside it: once gracefully from the
// offset it committed (the transaction's first offset) and once as after a crash that had
// committed half-way through the aborted records (skipped, as a read_committed reader commits
// past them). The transaction's ids are then retried in a committed transaction. The filter is
// restored from the state saved at each revoke, so an aborted record that had reached it would
// turn its retry into a "duplicate": the output must hold the plain records and the retries,
// once each, and no aborted record or marker.
func TestRestartInAbortedTransaction(t *testing.T) {
	t.Parallel()
	testbroker.Each(t, testbroker.Options{}, testRestartInAbortedTransaction)
}

func testRestartInAbortedTransaction(t *testing.T, b testbroker.Broker) {
	e := newEnvOn(t, b, 1, 1)
	w := txntest.New(t, e.cl.Addrs(), e.in)
	rec := func(id string, attempt int) txntest.Record {
		return txntest.Record{Key: []byte(id), Value: fmt.Appendf(nil, "%s@%d", id, attempt)}
	}
	w.Send("", rec("p1", 1))
	w.Begin("a")
	for i := range 30 {
		w.Send("a", rec(fmt.Sprintf("x%02d", i), 1)) // offsets 1-30, one batch each
	}
	w.Send("", rec("p2", 1))
	st := newStore()
	cfg := e.config()
	cfg.FetchMaxBytes = 1024 // a few batches per fetch: the aborted transaction spans fetches
	r := e.start(cfg, newMapDeduper(false, st), keyFuncFor(t, "key"))
	eventually(t, 30*time.Second, "p1 committed and the partition held", func() bool {
		com, err := e.cl.Committed(context.Background(), e.group, e.in)
		return err == nil && com[0] == 1 && r.obs.held.Load() > 0
	})
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	w.End("a", false)
	retries := make([]txntest.Record, 30)
	for i := range retries {
		retries[i] = rec(fmt.Sprintf("x%02d", i), 2)
	}
	w.Txn("b", true, retries...)
	w.Send("", rec("p3", 1))
	for _, from := range []int64{-1, 16} { // -1: the committed offset
		if from >= 0 {
			commitOffset(t, e, 0, from)
		}
		r := e.start(cfg, newMapDeduper(false, st), keyFuncFor(t, "key"))
		e.waitAllCommitted(20 * time.Second)
		if err := r.stop(t, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if got, want := r.obs.aborted.Load(), 30-max(from-1, 0); got != want {
			t.Errorf("restart at %d: %d aborted records counted, want %d", from, got, want)
		}
	}
	var got []string
	for _, m := range e.readOut(e.out)[0] {
		got = append(got, string(m.Value))
	}
	want := []string{"p1@1", "p2@1"}
	for i := range 30 {
		want = append(want, fmt.Sprintf("x%02d@2", i))
	}
	want = append(want, "p3@1")
	if !slices.Equal(got, want) {
		t.Errorf("output %q,\nwant %q", got, want)
	}
}

// commitOffset commits offset for partition p of e's input in e's group, outside any generation
// (the group must be empty), as a worker that crashed after committing it would have left it.
func commitOffset(t *testing.T, e *env, p int, offset int64) {
	t.Helper()
	res, err := e.cl.Client().OffsetCommit(context.Background(), &kafka.OffsetCommitRequest{
		GroupID: e.group, GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{e.in: {{Partition: p, Offset: offset}}},
	})
	if err == nil {
		err = res.Topics[e.in][0].Error
	}
	if err != nil {
		t.Fatalf("committing offset %d: %v", offset, err)
	}
}
