package app

// The routed scope (DEDUP_SCOPE=routed): one router per input topic (stage 1) and one worker over
// the route topic (stage 2), run together as one runner.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/dedup"
	"github.com/kdedup/kdedup/metrics"
)

// runner is what Serve runs: one consumer.Worker, or the routed scope's stages.
type runner interface {
	Run(ctx context.Context) error
	Ready() bool
	Blocked() []consumer.BlockedPartition
}

// inputTopics returns the topics of KAFKA_INPUT_TOPIC, a comma-separated list.
func (k KafkaConfig) inputTopics() []string {
	var out []string
	for t := range strings.SplitSeq(k.InputTopic, ",") {
		out = append(out, strings.TrimSpace(t))
	}
	return out
}

// routerGroup returns the consumer group of the router of input topic: GROUP_ID-in-TOPIC.
func routerGroup(group, topic string) string { return group + "-in-" + topic }

// routeGroup returns the consumer group of the second stage: GROUP_ID-route.
func routeGroup(group string) string { return group + "-route" }

// validateRouted checks KAFKA_INPUT_TOPIC and KAFKA_ROUTE_TOPIC against DEDUP_SCOPE: a list of
// input topics and a route topic belong to the routed scope, which needs the route topic, distinct
// topics and the output partition of the route partition (KAFKA_PARTITIONING=same).
func (k KafkaConfig) validateRouted(scope, duplicates string, add func(name, format string, args ...any)) {
	topics := k.inputTopics()
	if scope != string(dedup.ScopeRouted) {
		if len(topics) > 1 {
			add("KAFKA_INPUT_TOPIC", "%q is a list of topics: only DEDUP_SCOPE=routed deduplicates several topics (partition and global read one)", k.InputTopic)
		}
		if k.RouteTopic != "" {
			add("KAFKA_ROUTE_TOPIC", "is set but DEDUP_SCOPE is %s: only DEDUP_SCOPE=routed uses a route topic", scope)
		}
		return
	}
	if k.RouteTopic == "" {
		add("KAFKA_ROUTE_TOPIC", "required with DEDUP_SCOPE=routed")
	}
	for i, t := range topics {
		switch {
		case t == "":
			add("KAFKA_INPUT_TOPIC", "%q holds an empty topic name", k.InputTopic)
		case slices.Index(topics, t) < i:
			add("KAFKA_INPUT_TOPIC", "%q names topic %q twice", k.InputTopic, t)
		case t == k.RouteTopic || t == k.OutputTopic || t == duplicates || t == k.DeadLetterTopic:
			add("KAFKA_INPUT_TOPIC", "topic %q is also the route, output, duplicates or dead-letter topic", t)
		}
	}
	if r := k.RouteTopic; r != "" && (r == k.OutputTopic || r == duplicates || r == k.DeadLetterTopic) {
		add("KAFKA_ROUTE_TOPIC", "%q must differ from the output, duplicates and dead-letter topics", r)
	}
	if k.Partitioning != string(consumer.PartitionSame) {
		add("KAFKA_PARTITIONING", "must be same with DEDUP_SCOPE=routed (a record goes to the output partition with its route partition's number), got %q", k.Partitioning)
	}
}

// stageConfigs returns the workers' configurations of the routed scope: one router per input topic
// and the second stage, from the validated ccfg.
func stageConfigs(cfg Config, ccfg consumer.Config) (routers []consumer.Config, stage2 consumer.Config) {
	for _, t := range cfg.Kafka.inputTopics() {
		r := ccfg
		r.InputTopic, r.OutputTopic, r.GroupID = t, cfg.Kafka.RouteTopic, routerGroup(ccfg.GroupID, t)
		r.Partitioning, r.Route = consumer.PartitionIdentity, true
		r.Mode = consumer.ModeDrop // a Passer judges nothing a duplicate
		r.SourceKey, r.Sources = nil, nil
		// Only the second stage stamps the processed time: the router's stamp would reach the
		// output as a second header, and the output record would not be the input's plus one.
		r.ProcessedHeader = ""
		routers = append(routers, r)
	}
	stage2 = ccfg
	stage2.InputTopic, stage2.GroupID, stage2.StripRouteHeaders = cfg.Kafka.RouteTopic, routeGroup(ccfg.GroupID), true
	stage2.FetchMaxWait = min(ccfg.FetchMaxWait, consumer.RouteFetchMaxWait)
	return routers, stage2
}

// newRouters returns the routers of ccfgs, reporting to m (errors and losses), rm and ready.
func newRouters(ccfgs []consumer.Config, kf consumer.KeyFunc, unkeyed string, m *metrics.Metrics, rm *metrics.Route,
	ready *readyGate, log *slog.Logger) ([]*consumer.Worker, error) {
	var out []*consumer.Worker
	for _, c := range ccfgs {
		obs := routeObserver{main: observer{m}, route: rm, ready: ready, topic: c.InputTopic,
			dropUnkeyed: unkeyed == string(consumer.UnkeyedDrop)}
		w, err := consumer.New(c, consumer.Passer{}, kf, obs, log.With("stage", "route", "topic", c.InputTopic))
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// stages runs the routers and the second stage together.
type stages struct {
	routers []*consumer.Worker
	stage2  *consumer.Worker
}

// all returns every worker of s.
func (s *stages) all() []*consumer.Worker { return append(slices.Clone(s.routers), s.stage2) }

// Ready reports whether every worker is ready: the routers of every input topic and the second
// stage.
func (s *stages) Ready() bool {
	for _, w := range s.all() {
		if !w.Ready() {
			return false
		}
	}
	return true
}

// Blocked returns the blocked partitions of every worker.
func (s *stages) Blocked() []consumer.BlockedPartition {
	var out []consumer.BlockedPartition
	for _, w := range s.all() {
		out = append(out, w.Blocked()...)
	}
	return out
}

// Run runs every worker until ctx ends or one fails; a failure stops the others, and Run returns
// the errors of all that failed.
func (s *stages) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(s.all()))
	for i, w := range s.all() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = w.Run(ctx); errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// readyGate sets kdedup_ready under the routed scope: 1 only while every worker of the stages is
// ready, so that a router that cannot read its input or write the route topic makes the replica
// unready as the second stage does. Each worker reports its own changes (consumer.Observer's
// SetReady); the gate then reads them all again, under its lock, so that the last report sets
// what holds after every change. It is safe for concurrent use.
type readyGate struct {
	mu    sync.Mutex
	m     *metrics.Metrics
	ready func() bool // every worker's readiness (stages.Ready), set before they run; nil: not ready
}

// changed sets kdedup_ready from every worker's readiness.
func (g *readyGate) changed() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.m.SetReady(g.ready != nil && g.ready())
}

// set makes the gate read ready, and sets kdedup_ready from it.
func (g *readyGate) set(ready func() bool) {
	g.mu.Lock()
	g.ready = ready
	g.mu.Unlock()
	g.changed()
}

// stage2Observer is the second stage's consumer.Observer under the routed scope: the worker's,
// except that its readiness goes through the gate.
type stage2Observer struct {
	consumer.Observer
	ready *readyGate
}

// SetReady reports the second stage's readiness change to the gate.
func (o stage2Observer) SetReady(bool) { o.ready.changed() }

// routeObserver is a router's consumer.Observer: its records, latency, lag, failed fetches and
// blocked partitions go to the route metrics (labelled with the input topic), its readiness to
// the gate; what counts a loss or an error goes to the worker's metrics, shared with the second
// stage; other per-partition reports of the input topic are left out of them, whose partition
// label is the route topic's.
type routeObserver struct {
	consumer.NopObserver
	main        observer
	route       *metrics.Route
	ready       *readyGate
	topic       string
	dropUnkeyed bool // DEDUP_UNKEYED_POLICY=drop: the router drops them, the second stage never sees them
}

// Produced counts records acknowledged by the route topic.
func (o routeObserver) Produced(_ int32, n int) { o.route.Routed(o.topic, n) }

// Latency observes the route topic's acknowledgement of a batch's records.
func (o routeObserver) Latency(sinceConsume time.Duration, sinceRecordTimestamps []time.Duration) {
	o.route.Latency(sinceConsume, len(sinceRecordTimestamps))
}

// Progress reports the input partition's lag.
func (o routeObserver) Progress(p int32, pr consumer.Progress) { o.route.Lag(o.topic, p, pr.Lag) }

// FetchError counts a failed fetch of the input partition.
func (o routeObserver) FetchError(p int32) { o.route.FetchError(o.topic, p) }

// PartitionBlocked reports the input partition blocked at a refused record, or no longer.
func (o routeObserver) PartitionBlocked(p int32, reason string, blocked bool) {
	o.route.PartitionBlocked(o.topic, p, reason, blocked)
}

// SetReady reports the router's readiness change to the gate.
func (o routeObserver) SetReady(bool) { o.ready.changed() }

// Assigned forgets the lag of the partitions of the previous generation.
func (o routeObserver) Assigned(int) { o.route.Unassigned(o.topic) }

// Unkeyed counts records without identity that the router drops; those it passes are counted
// by the second stage, which sees them.
func (o routeObserver) Unkeyed(p int32, reason string, n int) {
	if o.dropUnkeyed {
		o.main.Unkeyed(p, reason, n)
	}
}

// ProduceError counts a failed produce attempt to the route topic.
func (o routeObserver) ProduceError() { o.main.ProduceError() }

// ProducerReset counts a producer reset.
func (o routeObserver) ProducerReset(reason string) { o.main.ProducerReset(reason) }

// UncertainRetry counts an uncertain produce retry.
func (o routeObserver) UncertainRetry() { o.main.UncertainRetry() }

// CommitError counts a failed input offset commit.
func (o routeObserver) CommitError() { o.main.CommitError() }

// DeadLetter counts a record the route topic refused.
func (o routeObserver) DeadLetter(p int32, reason string) { o.main.DeadLetter(p, reason) }

// InputSkipped counts input records never read.
func (o routeObserver) InputSkipped(p int32, reason string, n int64) {
	o.main.InputSkipped(p, reason, n)
}

// Diverted counts records written to the audit topic.
func (o routeObserver) Diverted(p int32, reason string, n int) { o.main.Diverted(p, reason, n) }

// AuditProduceError counts a failed write to the audit topic.
func (o routeObserver) AuditProduceError() { o.main.AuditProduceError() }

// describeStages returns how the routed scope reads its topics, for the start-up log.
func describeStages(routers []consumer.Config, stage2 consumer.Config) string {
	var b strings.Builder
	for _, r := range routers {
		fmt.Fprintf(&b, "%s (group %s) -> %s; ", r.InputTopic, r.GroupID, r.OutputTopic)
	}
	fmt.Fprintf(&b, "%s (group %s) -> %s", stage2.InputTopic, stage2.GroupID, stage2.OutputTopic)
	return b.String()
}
