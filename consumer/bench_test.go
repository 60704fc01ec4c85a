package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/identity"
	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
)

const (
	benchPartitions = 4
	benchBatch      = 1000
	benchTimeout    = 5 * time.Millisecond
)

// BenchmarkEndToEnd measures end-to-end throughput (records consumed, deduplicated, produced with
// acks=all and committed, per second) on an in-process kfake broker over TCP. b.N records (25%
// duplicates, 100-byte values, 4 partitions) are produced before the timer starts; the timer
// stops when the group's committed offsets reach the end of every partition. Sub-benchmarks:
//
//   - passthrough: the baseline, a plain kafka-go pipeline with the same batching: a consumer
//     group Reader, FetchMessage up to 1000 records or 5ms, Writer.WriteMessages to the same
//     partition number (BatchSize 1000, BatchTimeout 5ms, acks=all), CommitMessages.
//   - worker-drop / worker-mark: consumer.Worker with a mutex+map Deduper (drop mode produces
//     75% of the records, mark mode all of them), producing idempotently (the default; see
//     BenchmarkProducePath for the comparison with the non-idempotent produce path).
//   - worker-sources: worker-drop with per-source counts (DEDUP_METRICS_SOURCE): every record's
//     source (100 sources, read from the key) is counted by metrics.Sources with the default
//     limit of 50, so half the sources go through its sketch. Compare it with worker-drop.
//   - worker-nodedup: consumer.Worker with a Deduper that finds nothing (all records produced):
//     the worker's plumbing alone, a pass-through built on the same code.
//   - worker-drop-eos: worker-drop under exactly-once delivery with the default transaction
//     cadence (KAFKA_TXN_INTERVAL 100ms, KAFKA_TXN_MAX_RECORDS 10000): one transactional
//     producer per input partition, output and offsets committed in transactions. Compare it with
//     worker-drop, the at-least-once default.
//   - worker-drop-eos-batch: the same with a transaction per batch (KAFKA_TXN_MAX_RECORDS 1000):
//     the cost of a short cadence.
//   - worker-drop-processed: worker-drop with the processed-time header (DEDUP_PROCESSED_HEADER)
//     on every output record: its cost beside worker-drop.
//   - worker-drop-audit: worker-drop with the audit topic (KAFKA_DUPLICATES_TOPIC): every
//     duplicate is also written there with its coordinates. BenchmarkAuditCost compares the two
//     at 20% duplicates.
//
// Besides events/s it reports cpu-ns/event, the process's CPU time per record (worker and
// broker, both in this process), which a busy machine disturbs less than wall time.
//
// Run it with a fixed count, e.g. go test -run '^$' -bench EndToEnd -benchtime 200000x ./consumer/
// It is an end-to-end measurement of a pipeline, so it does not use b.RunParallel; the baseline
// runs beside it in the same process against the same kind of broker.
func BenchmarkEndToEnd(b *testing.B) {
	b.Run("passthrough", func(b *testing.B) { benchPipeline(b, runPassthrough) })
	b.Run("worker-drop", func(b *testing.B) { benchPipeline(b, workerRunner(consumer.ModeDrop)) })
	b.Run("worker-mark", func(b *testing.B) { benchPipeline(b, workerRunner(consumer.ModeMark)) })
	b.Run("worker-sources", func(b *testing.B) { benchPipeline(b, sourcesRunner()) })
	b.Run("worker-nodedup", func(b *testing.B) { benchPipeline(b, workerRunnerWith(consumer.ModeDrop, nopDeduper{})) })
	b.Run("worker-drop-eos", func(b *testing.B) { benchPipeline(b, eosRunner(0)) })
	b.Run("worker-drop-eos-batch", func(b *testing.B) { benchPipeline(b, eosRunner(benchBatch)) })
	b.Run("worker-drop-audit", func(b *testing.B) { benchPipeline(b, auditRunner(consumer.AuditFull)) })
	b.Run("worker-drop-processed", func(b *testing.B) {
		benchPipeline(b, workerRunnerCfg(consumer.ModeDrop, nil, func(c *consumer.Config) { c.ProcessedHeader = "kdedup-processed" }))
	})
}

// BenchmarkAuditCost measures what the audit topic costs at 20% duplicates: worker-drop (the
// baseline, duplicates dropped), worker-drop-audit (every duplicate written to the audit topic
// with its coordinates and reason, KAFKA_DUPLICATES_TOPIC) and worker-drop-audit-headers
// (KAFKA_DUPLICATES_CONTENT=headers), in the same run. Compare their cpu-ns/event.
func BenchmarkAuditCost(b *testing.B) {
	b.Run("worker-drop", func(b *testing.B) { benchPipelineDups(b, testbroker.Fake, 5, workerRunner(consumer.ModeDrop)) })
	b.Run("worker-drop-audit", func(b *testing.B) { benchPipelineDups(b, testbroker.Fake, 5, auditRunner(consumer.AuditFull)) })
	b.Run("worker-drop-audit-headers", func(b *testing.B) {
		benchPipelineDups(b, testbroker.Fake, 5, auditRunner(consumer.AuditHeadersOnly))
	})
}

// auditRunner is worker-drop with the audit topic, keeping content of the dropped records.
func auditRunner(content consumer.AuditContent) pipeline {
	return func(ctx context.Context, cl testbroker.Broker) error {
		return workerRunnerCfg(consumer.ModeDrop, nil, func(c *consumer.Config) {
			c.DuplicatesTopic, c.DuplicatesContent = cl.Name("audit"), content
		})(ctx, cl)
	}
}

// eosRunner is worker-drop under exactly-once delivery, with transactions of at most maxRecords
// input records (0: the default).
func eosRunner(maxRecords int) pipeline {
	return workerRunnerCfg(consumer.ModeDrop, nil, func(c *consumer.Config) {
		c.Delivery, c.TxnMaxRecords = consumer.DeliveryExactlyOnce, maxRecords
	})
}

// nopDeduper keeps no state and finds no duplicates: the worker's plumbing alone.
type nopDeduper struct{}

func (nopDeduper) Assign(context.Context, int32) error                    { return nil }
func (nopDeduper) Revoke(context.Context, int32) error                    { return nil }
func (nopDeduper) Seen(int32, []byte, time.Time) bool                     { return false }
func (nopDeduper) Generation(int32, []int32, func(context.Context) error) {}
func (nopDeduper) Processing(int32, int64)                                {}
func (nopDeduper) Rewind(int32, int64)                                    {}
func (nopDeduper) Acked(int32, int64)                                     {}
func (nopDeduper) Discard(context.Context, int32) error                   { return nil }

type pipeline func(ctx context.Context, cl testbroker.Broker) error

// BenchmarkEndToEndRealKafka is BenchmarkEndToEnd's baseline and worker on the shared
// single-node real Kafka broker (see testbroker; it runs when KDEDUP_TEST_KAFKA is real or both).
// The broker is a JVM of its own here, so cpu-ns/event counts the pipeline alone, not the broker
// as on kfake.
func BenchmarkEndToEndRealKafka(b *testing.B) {
	testbroker.NeedReal(b)
	b.Run("passthrough", func(b *testing.B) { benchPipelineOn(b, testbroker.Real, runPassthrough) })
	b.Run("worker-drop", func(b *testing.B) { benchPipelineOn(b, testbroker.Real, workerRunner(consumer.ModeDrop)) })
	b.Run("worker-nodedup", func(b *testing.B) {
		benchPipelineOn(b, testbroker.Real, workerRunnerWith(consumer.ModeDrop, nopDeduper{}))
	})
}

// benchPipeline runs run on kfake; see benchPipelineOn.
func benchPipeline(b *testing.B, run pipeline) { benchPipelineOn(b, testbroker.Fake, run) }

// benchPipelineOn measures run on a broker of kind k with topics of its own, with 25% duplicates
// (see BenchmarkEndToEnd).
func benchPipelineOn(b *testing.B, k testbroker.Kind, run pipeline) { benchPipelineDups(b, k, 4, run) }

// benchPipelineDups measures run on a broker of kind k with topics of its own ("in", "out" and
// "audit"), where every dupEvery-th record repeats an earlier identity.
func benchPipelineDups(b *testing.B, k testbroker.Kind, dupEvery int, run pipeline) {
	value := make([]byte, 100)
	benchPipelineOf(b, k, dupEvery, run, func(p, id int) kafkaio.Record {
		return kafkaio.Record{Key: []byte(fmt.Sprintf("key-%d-%d", p, id)), Value: value, Time: time.Now()}
	})
}

// benchPipelineOf is benchPipelineDups with the input records built by record: the record of
// partition p for event id (every dupEvery-th event repeats an earlier id of the partition).
func benchPipelineOf(b *testing.B, k testbroker.Kind, dupEvery int, run pipeline, record func(p, id int) kafkaio.Record) {
	b.ReportAllocs()
	cl := testbroker.Start(b, k, testbroker.Options{Topics: map[string]int32{"in": benchPartitions, "out": benchPartitions, "audit": benchPartitions,
		"route": benchPartitions}})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 1))
	per := (b.N + benchPartitions - 1) / benchPartitions
	for p := range benchPartitions {
		msgs := make([]kafkaio.Record, 0, per)
		for i := range per {
			id := i
			if i%dupEvery == dupEvery-1 {
				id = rng.IntN(i)
			}
			msgs = append(msgs, record(p, id))
		}
		if err := cl.Produce(ctx, cl.Name("in"), p, msgs...); err != nil {
			b.Fatal(err)
		}
	}
	total := int64(per * benchPartitions)

	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	b.ResetTimer()
	cpu0, cpuOK := processCPU()
	var jvm0 time.Duration
	jvmOK := cl.Real() != nil
	if jvmOK {
		jvm0, jvmOK = cl.Real().CPUTime()
	}
	start := time.Now()
	benchCounted.Store(false)
	benchConsumed.Store(0)
	go func() { errc <- run(runCtx, cl) }()
	for {
		if benchCounted.Load() && benchConsumed.Load() < total {
			select { // not all consumed yet: no need to ask the broker
			case err := <-errc:
				b.Fatalf("pipeline stopped early: %v", err)
			case <-time.After(2 * time.Millisecond):
			}
			continue
		}
		com, err := cl.Committed(ctx, cl.Name("g"), cl.Name("in"))
		if err != nil {
			b.Fatal(err)
		}
		var done int64
		for _, o := range com {
			done += max(o, 0)
		}
		if done == total {
			break
		}
		select {
		case err := <-errc:
			b.Fatalf("pipeline stopped early: %v", err)
		case <-time.After(2 * time.Millisecond):
		}
	}
	waitStage2(b, cl, errc)
	elapsed := time.Since(start)
	cpu1, _ := processCPU()
	var jvm1 time.Duration
	if jvmOK {
		jvm1, jvmOK = cl.Real().CPUTime()
	}
	conns := brokerConns(cl.Addrs())
	b.StopTimer()
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		b.Fatal(err)
	}
	if ps := runStats; ps.writes > 0 {
		b.ReportMetric(float64(ps.produced)/float64(ps.writes), "records/produce")
		if ps.fetches > 0 {
			b.ReportMetric(float64(ps.consumed)/float64(ps.fetches), "records/fetch")
		}
		if ps.batches > 0 { // routed: stage 2's input batches, and the router's
			b.ReportMetric(float64(ps.consumed)/float64(ps.batches), "records/batch")
		}
		if ps.routeBatches > 0 {
			b.ReportMetric(float64(ps.routed)/float64(ps.routeBatches), "route-records/batch")
		}
		runStats = passStats{}
	}
	b.ReportMetric(float64(total)/elapsed.Seconds(), "events/s")
	if conns >= 0 { // the process's connections to the broker at the end: the pipeline's and this loop's
		b.ReportMetric(float64(conns), "conns")
	}
	if cpuOK { // the whole process: worker, broker and this loop; less sensitive to a busy machine than events/s
		b.ReportMetric(float64(cpu1-cpu0)/float64(total), "cpu-ns/event")
	}
	if jvmOK { // a real broker's JVM, outside this process
		b.ReportMetric(float64(jvm1-jvm0)/float64(total), "broker-cpu-ns/event")
	}
}

// waitStage2 waits, when the pipeline routed records (routedRunner), until the second stage's
// committed offsets reach the end of the route topic.
func waitStage2(b *testing.B, cl testbroker.Broker, errc chan error) {
	ctx := context.Background()
	for {
		ends, err := cl.EndOffsets(ctx, cl.Name("route"))
		if err != nil {
			b.Fatal(err)
		}
		com, err := cl.Committed(ctx, cl.Name("g-route"), cl.Name("route"))
		if err != nil {
			b.Fatal(err)
		}
		var end, done int64
		for p, o := range ends {
			end, done = end+o, done+max(com[p], 0)
		}
		if done == end {
			return
		}
		select {
		case err := <-errc:
			b.Fatalf("pipeline stopped early: %v", err)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// BenchmarkRoutedScope compares the routed scope with the partition scope on the same records
// (BenchmarkEndToEnd's: 4 partitions, 25% duplicates, kfake in process) in the same run:
// partition is worker-drop; routed is a router (input to the route topic by identity, in group
// "g", so the timer's wait on "g" covers it) and a second stage over the route topic (group
// "g-route", deduplicating into the output), run together as one replica does, the timer
// stopping when the second stage committed the whole route topic. Compare events/s and
// cpu-ns/event: each routed record is produced and consumed twice.
func BenchmarkRoutedScope(b *testing.B) {
	b.Run("partition", func(b *testing.B) { benchPipeline(b, workerRunner(consumer.ModeDrop)) })
	b.Run("routed", func(b *testing.B) { benchPipeline(b, routedRunner) })
}

// routedRunner runs the two stages of the routed scope until ctx ends.
func routedRunner(ctx context.Context, cl testbroker.Broker) error {
	base := benchConfig(cl.Addrs(), "", "", "", benchBatch)
	r := base
	r.InputTopic, r.OutputTopic, r.GroupID = cl.Name("in"), cl.Name("route"), cl.Name("g")
	r.Partitioning, r.Route = consumer.PartitionIdentity, true
	s := base
	s.InputTopic, s.OutputTopic, s.GroupID, s.StripRouteHeaders = cl.Name("route"), cl.Name("out"), cl.Name("g-route"), true
	s.FetchMaxWait = consumer.RouteFetchMaxWait // as internal/app sets it
	robs, sobs := &writeCounter{}, &writeCounter{last: true}
	router, err := consumer.New(r, consumer.Passer{}, kafkaKey, robs, testLog)
	if err != nil {
		return err
	}
	stage2, err := consumer.New(s, newMapDeduper(false, nil), consumer.RouteKey(kafkaKey), sobs, testLog)
	if err != nil {
		return err
	}
	defer func() {
		runStats = passStats{writes: sobs.writes.Load(), produced: sobs.produced.Load(), batches: sobs.batches.Load(),
			consumed: sobs.consumed.Load(), routeBatches: robs.batches.Load(), routed: robs.consumed.Load()}
	}()
	benchCounted.Store(true)
	errc := make(chan error, 1)
	go func() { errc <- router.Run(ctx) }()
	return errors.Join(stage2.Run(ctx), <-errc)
}

// brokerConns returns the number of established TCP connections to the brokers at addrs
// (IPv4, from /proc/net/tcp), or -1 where that cannot be read.
func brokerConns(addrs []string) int {
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return -1
	}
	ports := map[string]bool{}
	for _, a := range addrs {
		_, port, _ := net.SplitHostPort(a)
		n, _ := strconv.Atoi(port)
		ports[fmt.Sprintf("%04X", n)] = true
	}
	count := 0
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "01" { // ESTABLISHED
			continue
		}
		if _, port, ok := strings.Cut(f[2], ":"); ok && ports[port] {
			count++
		}
	}
	return count
}

func workerRunner(mode consumer.Mode) pipeline {
	return workerRunnerWith(mode, nil)
}

func workerRunnerWith(mode consumer.Mode, d consumer.Deduper) pipeline {
	return workerRunnerCfg(mode, d, func(*consumer.Config) {})
}

// sourcesRunner is worker-drop counting by source: the last two digits of the key.
func sourcesRunner() pipeline {
	return workerRunnerCfg(consumer.ModeDrop, nil, func(c *consumer.Config) {
		src := metrics.NewSources(prometheus.NewRegistry(), metrics.SourceOptions{})
		c.SourceKey = func(_ context.Context, k, _ []byte, _ identity.Headers) ([]byte, identity.Reason, error) {
			if len(k) == 0 {
				return nil, identity.Missing, nil
			}
			return k[max(0, len(k)-2):], identity.Found, nil
		}
		c.Sources = func() consumer.SourceTally { return src.NewTally() }
	})
}

// benchConfig returns the defaults (consumer.AppDefaults) with brokers, the topics and group set,
// the benchmarks' batching, a commit after every batch, and group timeouts short enough for a
// benchmark's start.
func benchConfig(brokers []string, in, out, group string, batch int) consumer.Config {
	c := consumer.AppDefaults()
	c.Brokers, c.InputTopic, c.OutputTopic, c.GroupID = brokers, in, out, group
	c.SessionTimeout, c.HeartbeatInterval = 2*time.Second, 200*time.Millisecond
	c.BatchSize, c.BatchTimeout, c.CommitInterval = batch, benchTimeout, 0
	return c
}

func workerRunnerCfg(mode consumer.Mode, d consumer.Deduper, edit func(*consumer.Config)) pipeline {
	return func(ctx context.Context, cl testbroker.Broker) error {
		if d == nil {
			d = newMapDeduper(false, nil)
		}
		cfg := benchConfig(cl.Addrs(), cl.Name("in"), cl.Name("out"), cl.Name("g"), benchBatch)
		cfg.Mode = mode
		edit(&cfg)
		obs := &writeCounter{last: true}
		w, err := consumer.New(cfg, d, kafkaKey, obs, testLog)
		if err != nil {
			return err
		}
		benchCounted.Store(true)
		defer func() { runStats = passStats{writes: obs.writes.Load(), produced: obs.produced.Load()} }()
		return w.Run(ctx)
	}
}

// writeCounter counts a worker's output writes (one per input batch that produced anything) and
// the records they held, and its input batches and their records, and observes nothing else. The
// last stage of a pipeline (last) adds its input records to benchConsumed as well.
type writeCounter struct {
	consumer.NopObserver
	last                                bool
	writes, produced, batches, consumed atomic.Int64
}

func (o *writeCounter) Produced(_ int32, n int) { o.writes.Add(1); o.produced.Add(int64(n)) }
func (o *writeCounter) Consumed(_ int32, n int) {
	o.batches.Add(1)
	o.consumed.Add(int64(n))
	if o.last {
		benchConsumed.Add(int64(n))
	}
}

// benchConsumed counts the records the last stage of the running pipeline took from its input,
// when benchCounted says the pipeline counts them (workerRunnerCfg, routedRunner). Until it
// reaches the input's size, benchPipelineOf waits without asking the broker for the committed
// offsets: that polling costs CPU for as long as the pipeline runs, which charged a slow pipeline
// more per record than a fast one.
var (
	benchConsumed atomic.Int64
	benchCounted  atomic.Bool
)

// samePartition is a kafka-go Balancer that keeps a record's input partition number.
type samePartition struct{}

func (samePartition) Balance(m kafka.Message, _ ...int) int { return m.Partition }

// passStats are the batching counts of the last pipeline run: runPassthrough's from its Reader's
// and Writer's Stats, a worker's writes (one per input batch) from writeCounter. Benchmarks run
// one at a time, and benchPipelineOn reads them after the run returned.
// Under the routed scope (routedRunner) writes and produced are stage 2's, batches and consumed
// its input batches, routeBatches and routed the router's.
type passStats struct{ fetches, consumed, writes, produced, batches, routeBatches, routed int64 }

var runStats passStats

// runPassthrough is the baseline: consume → produce → commit with plain kafka-go and the same
// batching, no deduplication.
func runPassthrough(ctx context.Context, cl testbroker.Broker) error {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: cl.Addrs(), GroupID: cl.Name("g"), Topic: cl.Name("in"),
		MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 500 * time.Millisecond, QueueCapacity: 2 * benchBatch,
		SessionTimeout: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
	})
	defer r.Close()
	// A transport of its own: kafka-go's shared default one caches the metadata of a broker for
	// 6s, and on a broker shared by several runs it would not know this run's new topic yet.
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{
		Addr: kafka.TCP(cl.Addrs()...), Topic: cl.Name("out"), Balancer: samePartition{}, Transport: tr,
		BatchSize: benchBatch, BatchTimeout: benchTimeout, RequiredAcks: kafka.RequireAll,
	}
	defer w.Close()
	var ps passStats
	defer func() { runStats = ps }()
	count := func() {
		rs, ws := r.Stats(), w.Stats()
		ps.fetches, ps.consumed = ps.fetches+rs.Fetches, ps.consumed+rs.Messages
		ps.writes, ps.produced = ps.writes+ws.Writes, ps.produced+ws.Messages
	}
	defer count()
	batch := make([]kafka.Message, 0, benchBatch)
	out := make([]kafka.Message, 0, benchBatch)
	for {
		batch = batch[:0]
		m, err := r.FetchMessage(ctx)
		if err != nil {
			return err
		}
		batch = append(batch, m)
		bctx, cancel := context.WithTimeout(ctx, benchTimeout)
		for len(batch) < benchBatch {
			m, err := r.FetchMessage(bctx)
			if err != nil {
				break
			}
			batch = append(batch, m)
		}
		cancel()
		out = out[:0]
		for _, m := range batch {
			out = append(out, kafka.Message{Key: m.Key, Value: m.Value, Headers: m.Headers, Time: m.Time, Partition: m.Partition})
		}
		if err := w.WriteMessages(ctx, out...); err != nil {
			return err
		}
		if err := r.CommitMessages(ctx, batch...); err != nil {
			return err
		}
	}
}
