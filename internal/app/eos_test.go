package app

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/tier"
	"github.com/prometheus/client_golang/prometheus"
)

// lateDeduper wraps the worker's Deduper and calls late once, right after the first Assign of
// partition 0 returned: the new owner's restore or rebuild has read the output by then.
type lateDeduper struct {
	consumer.Deduper
	once sync.Once
	late func()
}

func (d *lateDeduper) Assign(ctx context.Context, p int32) error {
	err := d.Deduper.Assign(ctx, p)
	if err == nil && p == 0 {
		d.once.Do(d.late)
	}
	return err
}

// runInProcess runs a worker configured by environ in this process, with its Deduper wrapped by
// wrap, until the group committed every input offset, then stops it gracefully.
func runInProcess(t *testing.T, cl *embedkafka.Cluster, environ map[string]string, wrap func(consumer.Deduper) consumer.Deduper) {
	t.Helper()
	cfg, err := Load(environ)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	kf, err := newKeyFunc(cfg.Dedup.Key, nil)
	if err != nil {
		t.Fatal(err)
	}
	ccfg, err := cfg.consumerConfig()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obs := newObserver(prometheus.NewRegistry(), cfg)
	dd, closeDedup, err := newDeduper(ctx, cfg, ccfg, kf, log, obs)
	if err != nil {
		t.Fatal(err)
	}
	w, err := consumer.New(ccfg, wrap(dd), kf, observer{obs}, log)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	poll(t, 60*time.Second, "every input offset committed", func() (bool, error) {
		ends, err := cl.EndOffsets(ctx, "in")
		if err != nil {
			return false, nil
		}
		com, err := cl.Committed(ctx, cfg.Kafka.GroupID, "in")
		return err == nil && maps.Equal(ends, com), nil
	}, func() string { return "" })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := closeDedup(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// lateRecords returns n input records with identities prefix0..prefix(n-1), stamped now.
func lateRecords(prefix string, n int) []kafkaio.Record {
	msgs := make([]kafkaio.Record, n)
	now := time.Now()
	for i := range msgs {
		msgs[i] = kafkaio.Record{Key: fmt.Appendf(nil, "%s%d", prefix, i), Value: []byte("v"), Time: now}
	}
	return msgs
}

// TestLateAppendAfterRewarm is the previous owner's late write: output records of input the new
// owner consumes again become visible right after the new owner read the output, through its
// restore (a checkpoint, then the re-warm) and through its rebuild (no checkpoint). A first worker
// handles 200 records and stops; the previous owner of partition 0 then has the output of the next
// 200 in flight (written, not committed, input offsets not committed) and appends them again right
// after the new owner's Assign. Under exactly-once delivery the new owner's fence aborted the
// open transaction and refuses the late append, so the output holds every identity once. Under
// at-least-once delivery (the previous owner's idempotent producer) the late records are
// visible, the new owner writes them again, and they leak: the scenario's baseline.
func TestLateAppendAfterRewarm(t *testing.T) {
	t.Parallel()
	tier.Integration(t)
	for _, tc := range []struct {
		name, delivery string
		checkpoints    bool
	}{
		{"restore exactly-once", "exactly-once", true},
		{"rebuild exactly-once", "exactly-once", false},
		{"restore at-least-once", "at-least-once", true},
		{"rebuild at-least-once", "at-least-once", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cl, err := embedkafka.Start(embedkafka.Options{Topics: map[string]int32{"in": 1, "out": 1}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cl.Close)
			environ := restartEnviron(testbroker.FromFake(cl), "", "partition")
			environ["KAFKA_DELIVERY"] = tc.delivery
			if tc.checkpoints {
				environ["CHECKPOINT_DIR"] = t.TempDir()
			}
			ctx := context.Background()
			first, late := lateRecords("a", 200), lateRecords("b", 200)
			if err := cl.Produce(ctx, "in", 0, first...); err != nil {
				t.Fatal(err)
			}
			runInProcess(t, cl, environ, func(d consumer.Deduper) consumer.Deduper { return d })

			if err := cl.Produce(ctx, "in", 0, late...); err != nil {
				t.Fatal(err)
			}
			prev := previousOwner(t, cl, tc.delivery)
			if err := prev.Produce(ctx, "out", 0, late); err != nil { // in flight when the owner changed
				t.Fatal(err)
			}
			var lateErr error
			runInProcess(t, cl, environ, func(d consumer.Deduper) consumer.Deduper {
				return &lateDeduper{Deduper: d, late: func() {
					lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					if lateErr = prev.Produce(lctx, "out", 0, late); lateErr == nil && tc.delivery == "exactly-once" {
						lateErr = prev.Commit(lctx)
					}
				}}
			})
			leaked, lost := countOutput(t, cl, append(first, late...))
			t.Logf("%s: %d leaked, %d lost; the previous owner's late append: %v", tc.name, leaked, lost, lateErr)
			if lost != 0 {
				t.Errorf("%d records lost", lost)
			}
			switch {
			case tc.delivery == "exactly-once" && leaked != 0:
				t.Errorf("%d duplicates leaked under exactly-once delivery", leaked)
			case tc.delivery == "exactly-once" && lateErr == nil:
				t.Error("the previous owner appended and committed after the new owner's fence")
			case tc.delivery == "at-least-once" && leaked == 0:
				t.Error("nothing leaked under at-least-once delivery: the scenario does not exercise the late append")
			}
		})
	}
}

// previousOwner returns the producer the previous owner of input partition 0 wrote with: the
// partition's transactional producer, in an open transaction, under exactly-once delivery, else an
// idempotent one.
func previousOwner(t *testing.T, cl *embedkafka.Cluster, delivery string) *kafkaio.Producer {
	t.Helper()
	client := kafkaio.Conn{Brokers: cl.Addrs()}.Client(3 * time.Second)
	t.Cleanup(func() { kafkaio.CloseIdle(client) })
	pcfg := kafkaio.ProducerConfig{Idempotent: true, Backoff: kafkaio.Backoff{Max: 100 * time.Millisecond}}
	if delivery == "exactly-once" {
		pcfg.TransactionalID = consumer.TransactionalID("kdedup", "in", 0)
	}
	p := kafkaio.NewProducer(client, pcfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if pcfg.TransactionalID != "" {
		if err := p.Begin(); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// countOutput reads the output read_committed and returns how many records of want are in it more
// than once (leaked) and not at all (lost).
func countOutput(t *testing.T, cl *embedkafka.Cluster, want []kafkaio.Record) (leaked, lost int) {
	t.Helper()
	got, err := testbroker.FromFake(cl).ReadAll(context.Background(), "out")
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, m := range got[0] {
		n[string(m.Key)]++
	}
	for _, m := range want {
		switch c := n[string(m.Key)]; {
		case c == 0:
			lost++
		case c > 1:
			leaked += c - 1
		}
	}
	return leaked, lost
}
