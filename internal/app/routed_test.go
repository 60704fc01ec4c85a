package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/scrape"
	"github.com/kdedup/kdedup/internal/scrape/scrapetest"
	"github.com/kdedup/kdedup/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
)

// TestRoutedConfig checks the settings of the routed scope: what it needs, and that a list of
// input topics or a route topic is refused, naming the variable, in the other scopes.
func TestRoutedConfig(t *testing.T) {
	routed := map[string]string{"DEDUP_SCOPE": "routed", "KAFKA_INPUT_TOPIC": "eu, us", "KAFKA_ROUTE_TOPIC": "events-route"}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		problem string // "" when the configuration is valid
	}{
		{"routed", routed, ""},
		{"routed one topic", map[string]string{"DEDUP_SCOPE": "routed", "KAFKA_ROUTE_TOPIC": "r"}, ""},
		{"no route topic", map[string]string{"DEDUP_SCOPE": "routed"}, "KAFKA_ROUTE_TOPIC: required with DEDUP_SCOPE=routed"},
		{"list in partition scope", map[string]string{"KAFKA_INPUT_TOPIC": "eu,us"}, "KAFKA_INPUT_TOPIC: \"eu,us\" is a list of topics: only DEDUP_SCOPE=routed"},
		{"list in global scope", map[string]string{"DEDUP_SCOPE": "global", "KAFKA_INPUT_TOPIC": "eu,us"}, "only DEDUP_SCOPE=routed deduplicates several topics"},
		{"route topic in partition scope", map[string]string{"KAFKA_ROUTE_TOPIC": "r"}, "KAFKA_ROUTE_TOPIC: is set but DEDUP_SCOPE is partition"},
		{"topic twice", withRouted(routed, "KAFKA_INPUT_TOPIC", "eu,eu"), "names topic \"eu\" twice"},
		{"empty topic", withRouted(routed, "KAFKA_INPUT_TOPIC", "eu,,us"), "holds an empty topic name"},
		{"route is output", withRouted(routed, "KAFKA_ROUTE_TOPIC", "events-dedup"), "KAFKA_ROUTE_TOPIC: \"events-dedup\" must differ"},
		{"input is route", withRouted(routed, "KAFKA_INPUT_TOPIC", "eu,events-route"), "topic \"events-route\" is also the route"},
		{"hash partitioning", withRouted(routed, "KAFKA_PARTITIONING", "hash"), "KAFKA_PARTITIONING: must be same with DEDUP_SCOPE=routed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(withEnv(tc.env))
			switch {
			case tc.problem == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)):
				t.Fatalf("error %v, want one holding %q", err, tc.problem)
			}
		})
	}
}

// withRouted returns env with name set to v.
func withRouted(env map[string]string, name, v string) map[string]string {
	out := map[string]string{name: v}
	for k, x := range env {
		if k != name {
			out[k] = x
		}
	}
	return out
}

// TestStageConfigs checks the workers of the routed scope: a router per input topic in a group of
// its own, producing to the route topic by identity, and the second stage over the route topic.
func TestStageConfigs(t *testing.T) {
	cfg, err := Load(withEnv(map[string]string{"DEDUP_SCOPE": "routed", "KAFKA_INPUT_TOPIC": "eu, us", "KAFKA_ROUTE_TOPIC": "r", "KAFKA_GROUP_ID": "g",
		"DEDUP_PROCESSED_HEADER": "processed"}))
	if err != nil {
		t.Fatal(err)
	}
	ccfg, err := cfg.consumerConfig()
	if err != nil {
		t.Fatal(err)
	}
	routers, s2 := stageConfigs(cfg, ccfg)
	if len(routers) != 2 {
		t.Fatalf("%d routers, want 2", len(routers))
	}
	for i, want := range []string{"eu", "us"} {
		r := routers[i]
		if r.InputTopic != want || r.OutputTopic != "r" || r.GroupID != "g-in-"+want || !r.Route || r.Partitioning != consumer.PartitionIdentity {
			t.Errorf("router %d: input %q output %q group %q route %v partitioning %s", i, r.InputTopic, r.OutputTopic, r.GroupID, r.Route, r.Partitioning)
		}
		if r.ProcessedHeader != "" {
			t.Errorf("router %d stamps the processed time (%q): only the second stage may", i, r.ProcessedHeader)
		}
		if err := r.Validate(); err != nil {
			t.Errorf("router %d: %v", i, err)
		}
	}
	if s2.InputTopic != "r" || s2.OutputTopic != "events-dedup" || s2.GroupID != "g-route" || !s2.StripRouteHeaders || s2.Partitioning != consumer.PartitionSame {
		t.Errorf("stage 2: input %q output %q group %q strip %v partitioning %s", s2.InputTopic, s2.OutputTopic, s2.GroupID, s2.StripRouteHeaders, s2.Partitioning)
	}
	if s2.ProcessedHeader != "processed" {
		t.Errorf("stage 2 processed header %q, want %q", s2.ProcessedHeader, "processed")
	}
	if s2.FetchMaxWait != consumer.RouteFetchMaxWait {
		t.Errorf("stage 2 fetch wait %v, want %v", s2.FetchMaxWait, consumer.RouteFetchMaxWait)
	}
	if err := s2.Validate(); err != nil {
		t.Error(err)
	}
}

// TestRoutedServe runs the routed scope through Serve on kfake: two input topics of 4 and 3
// partitions, route and output topics of 4, checkpoints on. Every identity, produced up to three
// times on other partitions and the other topic, reaches the output once, in the partition of its
// identity, without the routing headers; the route metrics count what was routed.
func TestRoutedServe(t *testing.T) {
	cl := testbroker.Start(t, testbroker.Fake, testbroker.Options{Topics: map[string]int32{"in": 4, "in2": 3, "route": 4, "out": 4}})
	environ := restartEnviron(cl, t.TempDir(), "routed")
	environ["KAFKA_INPUT_TOPIC"] = "in,in2"
	environ["KAFKA_ROUTE_TOPIC"] = "route"
	url := serveInProcess(t, environ)
	const n = 400
	produced := 0
	for i := range n {
		m := kafkaio.Record{Key: fmt.Appendf(nil, "id-%d", i), Value: []byte("v"), Headers: []kafkaio.Header{{Key: "h", Value: []byte("x")}}}
		copies := []struct {
			topic string
			p     int
		}{{"in", i % 4}, {"in", (i + 1) % 4}, {"in2", i % 3}}[:1+i%3]
		for _, c := range copies {
			if err := cl.Produce(context.Background(), c.topic, c.p, m); err != nil {
				t.Fatal(err)
			}
			produced++
		}
	}
	var v model.Vector
	poll(t, 60*time.Second, "every record routed and every identity in the output", func() (bool, error) {
		var err error
		v, err = scrape.Samples(url)
		return err == nil && scrapetest.Sum(v, "kdedup_route_records_total") == float64(produced) &&
			scrapetest.Sum(v, "kdedup_records_produced_total") == n, err
	}, func() string {
		return fmt.Sprintf(": routed %v of %d, produced %v of %d", scrapetest.Sum(v, "kdedup_route_records_total"), produced,
			scrapetest.Sum(v, "kdedup_records_produced_total"), n)
	})
	if got := scrapetest.Sum(v, "kdedup_ready"); got != 1 {
		t.Errorf("kdedup_ready %v with every stage serving, want 1", got)
	}
	out, err := cl.ReadAll(context.Background(), "out")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for p, msgs := range out {
		for _, m := range msgs {
			if seen[string(m.Key)] {
				t.Errorf("identity %s leaked", m.Key)
			}
			seen[string(m.Key)] = true
			if q := consumer.RoutePartition(m.Key, 4); q != p {
				t.Errorf("identity %s in output partition %d, routes to %d", m.Key, p, q)
			}
			if len(m.Headers) != 1 || m.Headers[0].Key != "h" {
				t.Errorf("identity %s: headers %v, want the original's only", m.Key, m.Headers)
			}
		}
	}
	if len(seen) != n {
		t.Errorf("%d identities in the output, want %d", len(seen), n)
	}
}

// TestRoutedTopicMismatch checks the start-up check of the routed scope: a route topic with
// another partition count than the output topic stops the worker with an error that names both.
func TestRoutedTopicMismatch(t *testing.T) {
	cl := testbroker.Start(t, testbroker.Fake, testbroker.Options{Topics: map[string]int32{"in": 2, "route": 4, "out": 3}})
	environ := restartEnviron(cl, "", "routed")
	environ["KAFKA_ROUTE_TOPIC"] = "route"
	cfg, err := Load(environ)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	var mu sync.Mutex
	code := Serve(context.Background(), cfg, ln, slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil)))
	mu.Lock()
	defer mu.Unlock()
	if code != 1 || !strings.Contains(logs.String(), `output topic \"out\" has 3 partitions, input topic \"route\" has 4`) ||
		!strings.Contains(logs.String(), "KAFKA_ROUTE_TOPIC") {
		t.Errorf("Serve returned %d, log:\n%s", code, logs.String())
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestRoutedReadiness checks that kdedup_ready follows every stage under the routed scope: a
// router's readiness change, like the second stage's, sets it from all the workers' readiness,
// and a router's failed fetches and blocked partitions reach the route metrics with its topic.
func TestRoutedReadiness(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.Options{SkipRuntimeCollectors: true, RefusalReasons: consumer.RefusalReasons()})
	rm := metrics.NewRoute(reg, consumer.RefusalReasons())
	gate := &readyGate{m: m}
	router := routeObserver{main: observer{m}, route: rm, ready: gate, topic: "eu"}
	stage2 := stage2Observer{Observer: observer{m}, ready: gate}
	ready := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "kdedup_ready" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no kdedup_ready")
		return 0
	}
	routerReady, stage2Ready := false, false
	gate.set(func() bool { return routerReady && stage2Ready })
	stage2Ready = true
	stage2.SetReady(true)
	if got := ready(); got != 0 {
		t.Errorf("kdedup_ready %v with the router not ready, want 0", got)
	}
	routerReady = true
	router.SetReady(true)
	if got := ready(); got != 1 {
		t.Errorf("kdedup_ready %v with both stages ready, want 1", got)
	}
	routerReady = false
	router.SetReady(false)
	if got := ready(); got != 0 {
		t.Errorf("kdedup_ready %v after the router became unready, want 0", got)
	}

	router.FetchError(3)
	router.PartitionBlocked(2, "message_too_large", true)
	want := `# HELP kdedup_route_fetch_errors_total Failed fetches (and offset lookups) of a router's input partition (DEDUP_SCOPE=routed), by input topic and partition. The router retries by itself; kdedup_ready goes to 0 while a partition's fetches keep failing for longer than KAFKA_FETCH_FAILING_MAX. The second stage's are kdedup_input_fetch_errors_total, its input being the route topic.
# TYPE kdedup_route_fetch_errors_total counter
kdedup_route_fetch_errors_total{partition="3",topic="eu"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kdedup_route_fetch_errors_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "kdedup_route_partition_blocked", "kdedup_partition_blocked"); n != 1 {
		t.Errorf("%d blocked series, want the router's only", n)
	}
}
