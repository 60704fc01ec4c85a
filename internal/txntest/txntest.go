// Package txntest writes transactional input for tests: records of named transactional
// producers (franz-go's kgo; kafka-go has no transactions) and of a producer outside
// transactions, to a kfake or any other broker. Only tests import it, so kgo is a test-only
// dependency: it is not linked into the kdedup binary.
package txntest

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Record is one record to write.
type Record struct {
	Partition  int32
	Key, Value []byte
}

// Writer writes records to one topic as producers named by the caller: each name but "" is a
// transactional producer (transactional id "txn-" + topic + "-" + name), "" writes outside transactions
// (idempotently). A failure marks the test failed and ends the calling goroutine (the test's own,
// or another one: deferred calls run). A Writer is safe for concurrent use by different
// producers; one producer's calls must not overlap.
type Writer struct {
	tb    testing.TB
	addrs []string
	topic string

	clients chan map[string]*kgo.Client // capacity 1: the lock and what it guards
}

// New returns a Writer of topic on the brokers at addrs. Its clients are closed at the end of
// the test.
func New(tb testing.TB, addrs []string, topic string) *Writer {
	w := &Writer{tb: tb, addrs: addrs, topic: topic, clients: make(chan map[string]*kgo.Client, 1)}
	w.clients <- map[string]*kgo.Client{}
	return w
}

// client returns producer who's client, creating it on first use.
func (w *Writer) client(who string) *kgo.Client {
	w.tb.Helper()
	m := <-w.clients
	defer func() { w.clients <- m }()
	if c, ok := m[who]; ok {
		return c
	}
	opts := []kgo.Opt{kgo.SeedBrokers(w.addrs...), kgo.DefaultProduceTopic(w.topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner())}
	if who != "" {
		// The topic in the id keeps writers of different topics on one broker (a shared real
		// Kafka) from fencing each other; a long transaction timeout keeps the broker from aborting
		// a transaction a test holds open on a loaded machine (kgo's default is 40s).
		opts = append(opts, kgo.TransactionalID("txn-"+w.topic+"-"+who), kgo.TransactionTimeout(5*time.Minute))
	}
	c, err := kgo.NewClient(opts...)
	if err != nil {
		w.fail(err)
	}
	w.tb.Cleanup(c.Close)
	m[who] = c
	return c
}

// Begin starts a transaction of who.
func (w *Writer) Begin(who string) {
	w.tb.Helper()
	if err := w.client(who).BeginTransaction(); err != nil {
		w.fail(err)
	}
}

// End commits or aborts who's transaction.
func (w *Writer) End(who string, commit bool) {
	w.tb.Helper()
	if err := w.client(who).EndTransaction(context.Background(), kgo.TransactionEndTry(commit)); err != nil {
		w.fail(err)
	}
}

// Send writes recs as who (in its open transaction, unless who is ""), one produce request
// each, in order: records of producers that send in turn interleave in the log.
func (w *Writer) Send(who string, recs ...Record) {
	w.tb.Helper()
	c := w.client(who)
	for _, r := range recs {
		if err := c.ProduceSync(context.Background(), w.record(r)).FirstErr(); err != nil {
			w.fail(err)
		}
	}
}

// SendAll writes recs as who, batched, and waits until all are written. Order is kept within
// each partition.
func (w *Writer) SendAll(who string, recs ...Record) {
	w.tb.Helper()
	krs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		krs[i] = w.record(r)
	}
	if err := w.client(who).ProduceSync(context.Background(), krs...).FirstErr(); err != nil {
		w.fail(err)
	}
}

// Txn writes recs batched in one transaction of who and commits or aborts it.
func (w *Writer) Txn(who string, commit bool, recs ...Record) {
	w.tb.Helper()
	w.Begin(who)
	w.SendAll(who, recs...)
	w.End(who, commit)
}

// fail marks the test failed and ends the calling goroutine.
func (w *Writer) fail(err error) {
	w.tb.Helper()
	w.tb.Errorf("txntest: %v", err)
	runtime.Goexit()
}

func (w *Writer) record(r Record) *kgo.Record {
	return &kgo.Record{Topic: w.topic, Partition: r.Partition, Key: r.Key, Value: r.Value}
}
