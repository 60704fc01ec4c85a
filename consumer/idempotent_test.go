package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// producerObserver is a countingObserver that also counts what the idempotent producer reports.
type producerObserver struct {
	countingObserver
	resets, uncertain atomic.Int64
}

func (o *producerObserver) ProducerReset(string) { o.resets.Add(1) }
func (o *producerObserver) UncertainRetry()      { o.uncertain.Add(1) }

// startObserved starts a worker that reports to obs; it is stopped at the end of the test.
func (e *env) startObserved(cfg consumer.Config, d consumer.Deduper, obs consumer.Observer) (*consumer.Worker, context.CancelFunc, chan error) {
	e.t.Helper()
	w, err := consumer.New(cfg, d, keyFuncFor(e.t, "key"), obs, testLog)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			e.t.Error("worker did not stop")
		}
	})
	return w, cancel, done
}

// everyNth returns a kfake Fault.When that selects every nth request for which match holds,
// counting requests in arrival order. kfake may ask more than once about one request (per topic
// and per partition); it gets the same answer. It runs on the cluster goroutine only.
func everyNth(n int, match func(kmsg.Request) bool) func(kmsg.Request) bool {
	count := 0
	var last kmsg.Request
	answer := false
	return func(r kmsg.Request) bool {
		if r == last {
			return answer
		}
		last, answer = r, false
		if match(r) {
			count++
			answer = count%n == 0
		}
		return answer
	}
}

// producesTo returns a matcher of produce requests to any of topics.
func producesTo(topics ...string) func(kmsg.Request) bool {
	return func(r kmsg.Request) bool {
		pr, ok := r.(*kmsg.ProduceRequest)
		if !ok {
			return false
		}
		for _, t := range pr.Topics {
			for _, want := range topics {
				if t.Topic == want {
					return true
				}
			}
		}
		return false
	}
}

func anyRequest(kmsg.Request) bool { return true }

// TestIdempotentUnderFaults proves that retried produce requests write nothing twice: with the broker answering REQUEST_TIMED_OUT
// after appending on every 10th produce request to the output topics, NOT_LEADER_FOR_PARTITION
// and NOT_ENOUGH_REPLICAS on other produce requests, NOT_LEADER_FOR_PARTITION on fetches of the
// input, coordinator errors and timeouts on offset commits, and three forced rebalances in the
// middle of the stream, the output holds every unique record exactly once, in input order, and
// the duplicates topic every duplicate exactly once. Faults are picked by request counters and
// rebalances by progress, never by timing.
func TestIdempotentUnderFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		outParts    int
		part        consumer.Partitioning
		compression kafkaio.Compression
		dups        bool
	}{
		{"same", 4, consumer.PartitionSame, kafkaio.CompressionNone, false},
		{"hash-zstd-dups", 3, consumer.PartitionHash, kafkaio.CompressionZstd, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 4, tc.outParts, embedkafka.Options{Topics: map[string]int32{"dups": 2}})
			const perPart, phases = 4000, 4
			rng := rand.New(rand.NewPCG(21, 22))
			ins, want, wantDups := map[int][]kafkaio.Record{}, map[int][]kafkaio.Record{}, map[int][]kafkaio.Record{}
			for p := range 4 {
				ins[p], want[p] = stream("key", p, perPart, rng)
				for i, m := range ins[p] {
					if i%4 == 3 {
						wantDups[p] = append(wantDups[p], m)
					}
				}
			}
			feed := func(phase int) {
				for p := range 4 {
					e.produce(p, ins[p][phase*perPart/phases:(phase+1)*perPart/phases])
				}
			}
			feed(0)
			faults := installFaults(e.cl.Fake(), e.group)
			cfg := e.config()
			cfg.BatchSize = 100
			cfg.RebalanceTimeout = 10 * time.Second // drains must not run out of time on a loaded machine
			cfg.Partitioning, cfg.Compression = tc.part, string(tc.compression)
			if tc.dups {
				cfg.DuplicatesTopic = "dups"
			}
			obs := &producerObserver{}
			w, cancel, done := e.startObserved(cfg, newMapDeduper(false, nil), obs)
			for phase := 1; phase < phases; phase++ {
				// Once the worker is well into the records fed so far, feed more and force a
				// rebalance while they are being processed.
				fed := int64(4 * perPart / phases * phase * 3 / 4) // unique records fed so far
				eventually(t, 30*time.Second, "progress", func() bool { return obs.produced.Load() >= fed/2 })
				before := obs.rebalances.Load()
				feed(phase)
				// Every heartbeat is answered REBALANCE_IN_PROGRESS until the worker rejoined, as a
				// coordinator does during a rebalance: a one-shot fault could be taken by the worker's
				// own ownership heartbeat instead of kafka-go's.
				h := e.cl.Fake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Group: e.group, Err: kerr.RebalanceInProgress, Count: -1})
				eventually(t, 30*time.Second, "a forced rebalance", func() bool { return obs.rebalances.Load() > before })
				h.Remove()
			}
			e.waitAllCommitted(60 * time.Second)
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			done <- nil
			if w.Ready() {
				t.Error("ready after Run returned")
			}
			for _, f := range faults {
				if f.h.Hits() == 0 {
					t.Errorf("fault %q never hit", f.name)
				}
				t.Logf("fault %s: %d hits", f.name, f.h.Hits())
			}
			t.Logf("produce errors %d, uncertain retries %d, resets %d, commit errors %d, generations %d",
				obs.produceErrors.Load(), obs.uncertain.Load(), obs.resets.Load(), obs.commitErrors.Load(), obs.rebalances.Load())
			if obs.uncertain.Load() == 0 || obs.commitErrors.Load() == 0 || obs.rebalances.Load() < phases {
				t.Error("the faults did not reach the worker")
			}
			checkExactlyOnce(t, "output", e.readOut(e.out), want)
			if tc.dups {
				checkExactlyOnce(t, "duplicates topic", e.readOut("dups"), wantDups)
			}
		})
	}
}

// namedFault is an installed fault and what it is called in the test log.
type namedFault struct {
	name string
	h    *kfake.FaultHandle
}

// installFaults installs the faults of TestIdempotentUnderFaults. The first matching fault
// answers a request, so each produce request gets at most one of them.
func installFaults(cl *embedkafka.Cluster, group string) []namedFault {
	produce := []kmsg.Key{kmsg.Produce}
	out := producesTo("out", "dups")
	return []namedFault{
		{"produce REQUEST_TIMED_OUT after append, every 10th", cl.Fault(kfake.Fault{Keys: produce, Err: kerr.RequestTimedOut,
			Count: -1, When: everyNth(10, out)})},
		{"produce NOT_LEADER_FOR_PARTITION, every 13th", cl.Fault(kfake.Fault{Keys: produce, Err: kerr.NotLeaderForPartition,
			Count: -1, When: everyNth(13, out)})},
		{"produce NOT_ENOUGH_REPLICAS, every 17th", cl.Fault(kfake.Fault{Keys: produce, Err: kerr.NotEnoughReplicas,
			Count: -1, When: everyNth(17, out)})},
		{"fetch NOT_LEADER_FOR_PARTITION, every 9th", cl.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "in",
			Err: kerr.NotLeaderForPartition, Count: -1, When: everyNth(9, anyRequest)})},
		{"commit NOT_COORDINATOR, every 5th", cl.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: group,
			Err: kerr.NotCoordinator, Count: -1, When: everyNth(5, anyRequest)})},
		{"commit COORDINATOR_NOT_AVAILABLE, every 7th", cl.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: group,
			Err: kerr.CoordinatorNotAvailable, Count: -1, When: everyNth(7, anyRequest)})},
		{"commit REQUEST_TIMED_OUT after apply, every 11th", cl.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: group,
			Err: kerr.RequestTimedOut, Count: -1, When: everyNth(11, anyRequest)})},
	}
}

// checkExactlyOnce checks that got (by output partition) holds exactly the records of want (by
// input partition; values start with "p<input partition>-r<index>"), each once, and that the
// records of one input partition keep their order within every output partition.
func checkExactlyOnce(t *testing.T, what string, got, want map[int][]kafkaio.Record) {
	t.Helper()
	wantSet := map[string]bool{}
	for _, msgs := range want {
		for _, m := range msgs {
			wantSet[string(m.Value)] = true
		}
	}
	seen := map[string]bool{}
	dups, unexpected := 0, 0
	for q, msgs := range got {
		last := map[int]int{}
		for _, m := range msgs {
			v := string(m.Value)
			switch {
			case seen[v]:
				dups++
				continue
			case !wantSet[v]:
				unexpected++
			}
			seen[v] = true
			var p, i int
			fmt.Sscanf(v, "p%d-r%d", &p, &i)
			if prev, ok := last[p]; ok && i <= prev {
				t.Errorf("%s partition %d: record %d of input partition %d after record %d", what, q, i, p, prev)
			}
			last[p] = i
		}
	}
	lost := 0
	for v := range wantSet {
		if !seen[v] {
			lost++
		}
	}
	if dups != 0 || lost != 0 || unexpected != 0 {
		t.Errorf("%s: %d duplicates, %d lost, %d unexpected records (want %d records)", what, dups, lost, unexpected, len(wantSet))
	}
}

// TestProduceTimeoutsWithoutIdempotence shows the duplicates that retries write without idempotence, cheaply: with
// idempotence disabled, REQUEST_TIMED_OUT after append on every 5th produce request writes
// duplicates; the same faults with idempotence write none.
func TestProduceTimeoutsWithoutIdempotence(t *testing.T) {
	t.Parallel()
	for _, idempotent := range []bool{false, true} {
		t.Run(fmt.Sprintf("idempotent=%v", idempotent), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1, 1, embedkafka.Options{})
			in := make([]kafkaio.Record, 2000)
			for i := range in {
				in[i] = record("key", 0, i, fmt.Sprintf("id-%d", i))
			}
			e.produce(0, in)
			h := e.cl.Fake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.RequestTimedOut, Count: -1,
				When: everyNth(5, producesTo(e.out))})
			cfg := e.config()
			cfg.BatchSize = 50
			cfg.DisableIdempotence = !idempotent
			obs := &producerObserver{}
			_, cancel, done := e.startObserved(cfg, newMapDeduper(false, nil), obs)
			e.waitAllCommitted(30 * time.Second)
			cancel()
			<-done
			done <- nil
			got := e.readOut(e.out)[0]
			distinct := map[string]bool{}
			for _, m := range got {
				distinct[string(m.Value)] = true
			}
			dups := len(got) - len(distinct)
			t.Logf("%d timed-out produce requests, %d uncertain retries: %d records written, %d duplicates",
				h.Hits(), obs.uncertain.Load(), len(got), dups)
			if len(distinct) != len(in) || h.Hits() == 0 || obs.uncertain.Load() == 0 {
				t.Fatalf("%d distinct records of %d, %d faults", len(distinct), len(in), h.Hits())
			}
			if idempotent && dups != 0 {
				t.Errorf("%d duplicates with idempotence", dups)
			}
			if !idempotent && dups == 0 {
				t.Error("no duplicates without idempotence: the fault did not act after append")
			}
		})
	}
}

// TestIdempotenceUnsupported proves the startup check: brokers without InitProducerId, or that
// refuse this client a producer id, make Run fail at once with ErrIdempotenceUnsupported before
// anything is consumed; a coordinator that is only not available yet is waited for.
func TestIdempotenceUnsupported(t *testing.T) {
	t.Parallel()
	noInit := kversion.Stable()
	noInit.SetMaxKeyVersion(int16(kmsg.InitProducerID), -1)
	initFault := func(err *kerr.Error, count int) kfake.Fault {
		return kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, Err: err, Count: count}
	}
	for _, tc := range []struct {
		name    string
		opts    embedkafka.Options
		fault   *kfake.Fault
		wantErr bool
	}{
		{"no InitProducerId", embedkafka.Options{MaxVersions: noInit}, nil, true},
		{"cluster authorization", embedkafka.Options{}, ptr(initFault(kerr.ClusterAuthorizationFailed, -1)), true},
		{"coordinator not available yet", embedkafka.Options{}, ptr(initFault(kerr.CoordinatorNotAvailable, 3)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 1, 1, tc.opts)
			in, want := stream("key", 0, 40, rand.New(rand.NewPCG(23, 24)))
			e.produce(0, in)
			if tc.fault != nil {
				e.cl.Fake().Fault(*tc.fault)
			}
			obs := &producerObserver{}
			_, cancel, done := e.startObserved(e.config(), newMapDeduper(false, nil), obs)
			if !tc.wantErr {
				e.waitAllCommitted(20 * time.Second)
				cancel()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				done <- nil
				compareSeq(t, "output", e.readOut(e.out)[0], want)
				return
			}
			select {
			case err := <-done:
				done <- err
				if !errors.Is(err, consumer.ErrIdempotenceUnsupported) {
					t.Fatalf("Run = %v, want ErrIdempotenceUnsupported", err)
				}
				t.Logf("error: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not fail")
			}
			if n := obs.consumed.Load(); n != 0 {
				t.Errorf("%d records consumed", n)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
