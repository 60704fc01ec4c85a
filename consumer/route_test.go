package consumer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/identity"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/segmentio/kafka-go"
)

// routedEnv is the routed scope on kfake: input topics "in" and "in2", the route topic "route" and
// the output topic "out", the routers in groups "g-in-<topic>" and stage 2 in "g-route".
type routedEnv struct {
	*env
	ids  map[string]kafkaio.Record // every identity produced, with its record
	edit func(*consumer.Config)    // applied to both stages' configurations, when set
}

func newRoutedEnv(t *testing.T, in, in2, route int) *routedEnv {
	e := newEnv(t, in, route, embedkafka.Options{Topics: map[string]int32{"in2": int32(in2), "route": int32(route)}})
	return &routedEnv{env: e, ids: map[string]kafkaio.Record{}}
}

// router starts stage 1 for topic in group group.
func (e *routedEnv) router(topic, group string) *running {
	cfg := e.config()
	cfg.InputTopic, cfg.OutputTopic, cfg.GroupID = topic, "route", group
	cfg.Partitioning, cfg.Route = consumer.PartitionIdentity, true
	if e.edit != nil {
		e.edit(&cfg)
	}
	return e.start(cfg, consumer.Passer{}, kafkaKey)
}

// stage2 starts stage 2: the partition scope over the route topic.
func (e *routedEnv) stage2() (*running, *mapDeduper) {
	cfg := e.config()
	cfg.InputTopic, cfg.GroupID, cfg.StripRouteHeaders = "route", "g-route", true
	if e.edit != nil {
		e.edit(&cfg)
	}
	d := newMapDeduper(false, nil)
	return e.start(cfg, d, consumer.RouteKey(kafkaKey)), d
}

// record returns the record of identity id, with a header of its own and a fixed timestamp.
func (e *routedEnv) record(id string) kafkaio.Record {
	m := kafkaio.Record{Key: []byte(id), Value: []byte("value of " + id),
		Headers: []kafkaio.Header{{Key: "app", Value: []byte(id)}}, Time: time.UnixMilli(1_700_000_000_000)}
	e.ids[id] = m
	return m
}

// produceTo produces msgs to partition p of topic.
func (e *routedEnv) produceTo(topic string, p int, msgs ...kafkaio.Record) {
	e.t.Helper()
	if err := e.cl.Produce(context.Background(), topic, p, msgs...); err != nil {
		e.t.Fatal(err)
	}
}

// waitCommitted waits until group's committed offsets reach the end of every partition of topic.
func (e *routedEnv) waitCommitted(group, topic string) {
	e.t.Helper()
	ctx := context.Background()
	eventually(e.t, 60*time.Second, group+" committed "+topic, func() bool {
		ends, err1 := e.cl.EndOffsets(ctx, topic)
		com, err2 := e.cl.Committed(ctx, group, topic)
		if err1 != nil || err2 != nil {
			return false
		}
		for p, end := range ends {
			if com[p] != end && (end > 0 || com[p] >= 0) {
				return false
			}
		}
		return true
	})
}

// checkOutput checks that the output holds every identity produced exactly once, unchanged (no
// routing header left), in the partition its identity routes to.
func (e *routedEnv) checkOutput() {
	e.t.Helper()
	seen := map[string]int{}
	for p, msgs := range e.readOut("out") {
		for _, m := range msgs {
			id := string(m.Key)
			seen[id]++
			want, ok := e.ids[id]
			if !ok {
				e.t.Errorf("output holds unknown identity %q", id)
				continue
			}
			if d := sameRecord(m, want); d != "" {
				e.t.Errorf("identity %s changed: %s", id, d)
			}
			if q := consumer.RoutePartition(m.Key, e.outParts); q != p {
				e.t.Errorf("identity %s in output partition %d, routes to %d", id, p, q)
			}
		}
	}
	leaked, lost := 0, 0
	for id := range e.ids {
		switch n := seen[id]; {
		case n == 0:
			lost++
		case n > 1:
			leaked += n - 1
		}
	}
	if leaked != 0 || lost != 0 {
		e.t.Errorf("%d identities: %d leaked, %d lost", len(e.ids), leaked, lost)
	}
}

// TestRouted checks the routed scope end to end: duplicates on another partition of the same
// topic, on the other topic and on the same partition are all dropped, survivors reach the output
// unchanged; then a router that routes the whole of "in" again (what a crash between the route
// topic's acknowledgement and the input commit does, at its worst) adds nothing to the output.
func TestRouted(t *testing.T) {
	testRouted(t, newRoutedEnv(t, 6, 4, 4))
}

// TestRoutedExactlyOnce is TestRouted with both stages under exactly-once delivery: the routers
// write the route topic in transactions, the second stage reads it read_committed.
func TestRoutedExactlyOnce(t *testing.T) {
	e := newRoutedEnv(t, 6, 4, 4)
	e.edit = func(c *consumer.Config) { c.Delivery = consumer.DeliveryExactlyOnce }
	testRouted(t, e)
}

// testRouted is TestRouted on e.
func testRouted(t *testing.T, e *routedEnv) {
	e.router("in", "g-in-in")
	e.router("in2", "g-in-in2")
	s2, d := e.stage2()
	const n = 900
	for i := range n {
		id := fmt.Sprintf("event-%d", i)
		m := e.record(id)
		e.produceTo("in", i%6, m)
		switch i % 4 {
		case 0: // another partition of the same topic
			e.produceTo("in", (i+1)%6, m)
		case 1: // the other topic
			e.produceTo("in2", (i/4)%4, m)
		case 2: // the same partition
			e.produceTo("in", i%6, m)
		}
	}
	e.waitCommitted("g-in-in", "in")
	e.waitCommitted("g-in-in2", "in2")
	e.waitCommitted("g-route", "route")
	e.checkOutput()
	if got := s2.obs.duplicates.Load(); got != n/4*3 {
		t.Errorf("stage 2 counted %d duplicates, want %d", got, n/4*3)
	}

	before, err := e.cl.EndOffsets(context.Background(), "route")
	if err != nil {
		t.Fatal(err)
	}
	e.router("in", "g-in-in-replay") // a fresh group: everything of "in" is routed a second time
	e.waitCommitted("g-in-in-replay", "in")
	e.waitCommitted("g-route", "route")
	after, _ := e.cl.EndOffsets(context.Background(), "route")
	routedTwice := int64(0)
	for p := range after {
		routedTwice += after[p] - before[p]
	}
	if routedTwice < n {
		t.Fatalf("the replay routed %d records, want at least %d", routedTwice, n)
	}
	e.checkOutput()
	d.check(t)
}

// TestRoutedInputPartitionsGrow raises an input topic's partition count while the routers run:
// the router picks the new partitions up, their new identities pass once and their copies of
// identities seen before are dropped.
func TestRoutedInputPartitionsGrow(t *testing.T) {
	e := newRoutedEnv(t, 2, 2, 3)
	e.router("in", "g-in-in")
	e.router("in2", "g-in-in2")
	e.stage2()
	for i := range 200 {
		e.produceTo("in", i%2, e.record(fmt.Sprintf("old-%d", i)))
	}
	e.waitCommitted("g-in-in", "in")
	res, err := e.cl.Client().CreatePartitions(context.Background(), &kafka.CreatePartitionsRequest{
		Topics: []kafka.TopicPartitionsConfig{{Name: "in", Count: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Errors["in"]; err != nil {
		t.Fatal(err)
	}
	if err := e.cl.Fake().WaitLeaders(context.Background(), "in"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the new partitions in the metadata", func() bool {
		n, err := e.cl.Partitions(context.Background(), "in")
		return err == nil && n == 5
	})
	for i := range 300 {
		p := 2 + i%3 // the new partitions
		e.produceTo("in", p, e.record(fmt.Sprintf("new-%d", i)))
		e.produceTo("in", p, e.ids[fmt.Sprintf("old-%d", i%200)])
		e.produceTo("in2", i%2, e.ids[fmt.Sprintf("new-%d", i)])
	}
	e.waitCommitted("g-in-in", "in")
	e.waitCommitted("g-in-in2", "in2")
	e.waitCommitted("g-route", "route")
	e.checkOutput()
}

// TestRoutedUnkeyedPass checks where a record without identity goes under UnkeyedPass: through
// route partition input partition % n to the output partition of that number, unchanged.
func TestRoutedUnkeyedPass(t *testing.T) {
	e := newRoutedEnv(t, 6, 1, 4)
	e.router("in", "g-in-in")
	e.stage2()
	m := kafkaio.Record{Value: []byte("no key"), Headers: []kafkaio.Header{{Key: "app", Value: []byte("x")}}, Time: time.UnixMilli(1_700_000_000_000)}
	e.produceTo("in", 5, m, m)
	e.waitCommitted("g-in-in", "in")
	e.waitCommitted("g-route", "route")
	out := e.readOut("out")
	if len(out[1]) != 2 {
		t.Fatalf("output partition 1 holds %d records, want both copies (unkeyed records are not judged): %v", len(out[1]), out)
	}
	for _, got := range out[1] {
		if d := sameRecord(got, m); d != "" {
			t.Errorf("unkeyed record changed: %s", d)
		}
	}
}

// TestRoutedStage2ReadsRouteID checks that stage 2 takes the identity of a routed record from its
// kdedup-route-id header without calling its KeyFunc, and calls the KeyFunc for a record routed
// without one (no identity, passed by the router).
func TestRoutedStage2ReadsRouteID(t *testing.T) {
	e := newRoutedEnv(t, 2, 1, 4)
	e.router("in", "g-in-in")
	cfg := e.config()
	cfg.InputTopic, cfg.GroupID, cfg.StripRouteHeaders = "route", "g-route", true
	var calls atomic.Int64
	rk := consumer.RouteKey(kafkaKey)
	e.start(cfg, newMapDeduper(false, nil), func(ctx context.Context, k, v []byte, h identity.Headers) ([]byte, identity.Reason, error) {
		calls.Add(1)
		return rk(ctx, k, v, h)
	})
	for i := range 40 {
		m := e.record(fmt.Sprintf("event-%d", i))
		e.produceTo("in", i%2, m, m)
	}
	e.produceTo("in", 1, kafkaio.Record{Value: []byte("no key"), Time: time.UnixMilli(1_700_000_000_000)})
	e.waitCommitted("g-in-in", "in")
	e.waitCommitted("g-route", "route")
	if got := calls.Load(); got != 1 {
		t.Errorf("stage 2 called its KeyFunc %d times, want once (for the record without identity)", got)
	}
	out := e.readOut("out")
	for p, msgs := range out {
		for _, m := range msgs {
			if m.Key == nil {
				if p != 1 {
					t.Errorf("the record without identity reached output partition %d, want 1", p)
				}
				continue
			}
			if d := sameRecord(m, e.ids[string(m.Key)]); d != "" {
				t.Errorf("identity %s changed: %s", m.Key, d)
			}
		}
	}
	total := 0
	for _, msgs := range out {
		total += len(msgs)
	}
	if total != 41 {
		t.Errorf("output holds %d records, want 41 (40 identities once, 1 without identity)", total)
	}
}
