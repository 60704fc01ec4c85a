package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// progressOf returns the last Progress the worker reported for partition p, and whether there is
// one.
func (o *countingObserver) progressOf(p int32) (consumer.Progress, bool) {
	v, ok := o.progress.Load(p)
	if !ok {
		return consumer.Progress{}, false
	}
	return v.(consumer.Progress), true
}

// nowStream returns n records of partition p from offset from on with unique keys, stamped now.
func nowStream(p, from, n int) []kafkaio.Record {
	msgs := make([]kafkaio.Record, n)
	for i := range msgs {
		msgs[i] = record("key", p, from+i, fmt.Sprintf("id-%d-%d", p, from+i))
		msgs[i].Time = time.Now()
	}
	return msgs
}

// endOffset returns the end offset of input partition p.
func (e *env) endOffset(p int) int64 {
	e.t.Helper()
	ends, err := e.cl.EndOffsets(context.Background(), e.in)
	if err != nil {
		e.t.Fatal(err)
	}
	return ends[p]
}

// TestBlockedPartitionShowsItsStall proves that a partition blocked at a refused record is not
// invisible: within a minute of new records arriving behind the block, under the default
// progress interval, the worker's own lag for it grows with the backlog, its lag in seconds is
// measured, and its last-progress time stays where the block stopped it, while the other
// partition is at its end with a lag of 0.
func TestBlockedPartitionShowsItsStall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 2, embedkafka.Options{})
	e.limit(e.out, outLimit)
	in0 := bigStream(0, 50, 40)
	for i := range in0 {
		in0[i].Time = time.Now()
	}
	e.produce(0, in0)
	e.produce(1, nowStream(1, 0, 30))
	r := e.start(e.config(), newMapDeduper(false, nil), keyFuncFor(t, "key"))

	var stopped consumer.Progress
	eventually(t, 60*time.Second, "partition 0 blocked at 40 and reporting a lag of 10", func() bool {
		pr, ok := r.obs.progressOf(0)
		stopped = pr
		return blockedAt(r.w, map[int32]int64{0: 40}) && ok && pr.Lag == 10
	})
	// The first backlog reaches the worker with its next fetch, which then waits to be taken; the
	// second only through the offsets it looks up meanwhile.
	for _, n := range []int{500, 100} {
		end := int(e.endOffset(0))
		e.produce(0, nowStream(0, end, n))
		eventually(t, 60*time.Second, fmt.Sprintf("partition 0's lag growing to the backlog of %d", end+n-40), func() bool {
			pr, _ := r.obs.progressOf(0)
			return pr.Lag == int64(end+n-40)
		})
	}
	pr, _ := r.obs.progressOf(0)
	if !pr.LastProgress.Equal(stopped.LastProgress) {
		t.Errorf("last progress moved from %v to %v while blocked", stopped.LastProgress, pr.LastProgress)
	}
	if !pr.LagTimeKnown || pr.LagTime <= 0 {
		t.Errorf("lag time %v (known %v) while blocked behind records stamped at the start", pr.LagTime, pr.LagTimeKnown)
	}
	if pr.Lead != 40 {
		t.Errorf("lead over the log start %d, want 40", pr.Lead)
	}
	if !r.w.Ready() {
		t.Error("a blocked partition made the worker not ready")
	}
	eventually(t, 30*time.Second, "partition 1 at its end", func() bool {
		pr, ok := r.obs.progressOf(1)
		return ok && pr.Lag == 0 && pr.LagTimeKnown && pr.LagTime == 0
	})
}

// TestFailingFetchesMakeNotReady proves that the fetch errors of a partition are counted, that
// the worker reports not ready once they have lasted longer than Config.FetchFailingMax, and
// ready again once the partition fetches again.
func TestFailingFetchesMakeNotReady(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 2, embedkafka.Options{})
	e.produce(0, nowStream(0, 0, 10))
	e.produce(1, nowStream(1, 0, 10))
	cfg := e.config()
	cfg.FetchFailingMax = time.Second
	r := e.start(cfg, newMapDeduper(false, nil), keyFuncFor(t, "key"))
	e.waitAllCommitted(30 * time.Second)
	eventually(t, 30*time.Second, "ready", r.w.Ready)

	fault := e.cl.Fake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: e.in, Partitions: []int32{1},
		Err: kerr.KafkaStorageError, Count: -1})
	eventually(t, 30*time.Second, "not ready, fetch errors counted", func() bool {
		return !r.w.Ready() && !r.obs.ready.Load() && r.obs.fetchErrors.Load() > 0
	})
	fault.Remove()
	eventually(t, 30*time.Second, "ready again", func() bool { return r.w.Ready() && r.obs.ready.Load() })
}
