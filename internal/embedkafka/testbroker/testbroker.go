// Package testbroker gives tests a Kafka broker from one factory: the embedded kfake
// (internal/embedkafka), or a real Apache Kafka in KRaft mode run as a JVM by
// tools/kafka/kafka.sh, chosen by KDEDUP_TEST_KAFKA or, unset, the real tier of KDEDUP_TEST_TIERS
// (internal/tier). The same test runs against either through
// Broker; a test that needs a kfake-only feature asks for it with Broker.Fake and is skipped on
// real Kafka.
//
// Real Kafka is opt-in, so that go build, the demo and a quick unit run never need Java:
//
//	KDEDUP_TEST_KAFKA=kfake (default)  kfake only (unset: both when KDEDUP_TEST_TIERS has real or all)
//	KDEDUP_TEST_KAFKA=real             real Kafka only
//	KDEDUP_TEST_KAFKA=both             every such test twice, as subtests "kfake" and "real"
//
// Without java and mvn the real subtests are skipped, or fail when KDEDUP_REQUIRE_KAFKA=1 (as in
// CI). Every broker test is of the integration tier (internal/tier): Start skips it unless
// KDEDUP_TEST_TIERS runs that tier. KDEDUP_KAFKA_VERSION picks another Kafka 4.x version.
//
// One real single-node broker is shared by the tests of a package (see Main): each test works in
// topics and groups of its own, named by Broker.Name. A test that needs brokers configured
// otherwise (more nodes, other settings, other listeners) gets a private cluster. Only tests
// import this package.
package testbroker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/tier"
)

// The environment variables of the tier.
const (
	KindEnv    = "KDEDUP_TEST_KAFKA"    // kfake (default), real or both
	RequireEnv = "KDEDUP_REQUIRE_KAFKA" // "1": a real broker that cannot start fails the test
	VersionEnv = "KDEDUP_KAFKA_VERSION" // the Kafka version kafka.sh fetches; default 4.4.0
)

// Kind is the implementation of a Broker.
type Kind string

// The kinds of broker.
const (
	Fake Kind = "kfake"
	Real Kind = "real"
)

// Broker is what an integration test needs of a cluster: addresses, names of its own, and
// embedkafka's topic helpers (which take names as they are: pass them through Name).
type Broker interface {
	Kind() Kind
	// Addrs are the addresses a worker bootstraps from.
	Addrs() []string
	// Name returns the name of the test's topic or group called s: s itself on a private
	// cluster, a name unique to the test on a shared one.
	Name(s string) string
	// Fake returns the kfake cluster, or nil on real Kafka.
	Fake() *embedkafka.Cluster
	// Real returns the real cluster, or nil on kfake.
	Real() *Cluster

	Client() *kafkaio.Client
	CreateTopic(ctx context.Context, name string, partitions int) error
	SetTopicConfig(ctx context.Context, topic string, configs map[string]string) error
	Partitions(ctx context.Context, topic string) (int, error)
	Produce(ctx context.Context, topic string, partition int, msgs ...kafkaio.Record) error
	EndOffsets(ctx context.Context, topic string) (map[int]int64, error)
	Committed(ctx context.Context, group, topic string) (map[int]int64, error)
	ReadAll(ctx context.Context, topic string) (map[int][]kafkaio.Record, error)
	ReadPartition(ctx context.Context, topic string, partition int, end int64) ([]kafkaio.Record, error)
}

// Options describe the broker a test needs.
type Options struct {
	// Topics are created at start (name, before Name → partitions).
	Topics map[string]int32
	// Nodes is the number of brokers. Default 1.
	Nodes int
	// Real configures a real cluster (more than Nodes); a test that sets it gets a private one.
	Real RealOptions
}

// Kinds returns the kinds KDEDUP_TEST_KAFKA asks for; unset, both when the test tiers
// (KDEDUP_TEST_TIERS) include real, kfake otherwise.
func Kinds() []Kind {
	switch kind() {
	case "real":
		return []Kind{Real}
	case "both":
		return []Kind{Fake, Real}
	default:
		return []Kind{Fake}
	}
}

// kind returns KDEDUP_TEST_KAFKA, or what the test tiers imply when it is unset.
func kind() string {
	if k := os.Getenv(KindEnv); k != "" {
		return k
	}
	if tier.Enabled("real") {
		return "both"
	}
	return "kfake"
}

// Each runs f as a subtest named after each kind of Kinds, with a broker of that kind.
func Each(t *testing.T, o Options, f func(t *testing.T, b Broker)) {
	t.Helper()
	for _, k := range Kinds() {
		t.Run(string(k), func(t *testing.T) { f(t, Start(t, k, o)) })
	}
}

// RealOnly returns a real broker for a test that only makes sense on real Kafka, or skips the
// test (see NeedReal).
func RealOnly(t testing.TB, o Options) Broker {
	t.Helper()
	NeedReal(t)
	return Start(t, Real, o)
}

// Start returns a broker of kind k with o's topics, stopped at the end of the test (a shared
// real broker is stopped by Main).
func Start(t testing.TB, k Kind, o Options) Broker {
	t.Helper()
	tier.Integration(t)
	if k == Fake {
		cl, err := embedkafka.Start(embedkafka.Options{Topics: o.Topics, Brokers: o.Nodes})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return fakeBroker{cl, ""}
	}
	var r realBroker
	if o.Nodes <= 1 && o.Real.Nodes <= 1 && len(o.Real.Config) == 0 && len(o.Real.Listeners) == 0 && len(o.Real.Format) == 0 {
		r = realBroker{shared(t), uniquePrefix(t)}
	} else {
		if o.Real.Nodes < o.Nodes {
			o.Real.Nodes = o.Nodes
		}
		privateSlots <- struct{}{}
		t.Cleanup(func() { <-privateSlots })
		c, err := StartReal(os.TempDir(), o.Real)
		if err != nil {
			unavailable(t, err)
		}
		t.Cleanup(c.Close)
		t.Logf("real Kafka: %d node(s) started in %v (%s)", c.Nodes(), c.StartTime().Round(10e6), c.Dir())
		r = realBroker{c, ""}
	}
	for name, n := range o.Topics {
		if err := r.CreateTopic(t.Context(), r.Name(name), int(n)); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// unavailable ends a test whose real broker could not start: a skip without Java unless
// KDEDUP_REQUIRE_KAFKA=1, a failure otherwise.
func unavailable(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNoJava) && os.Getenv(RequireEnv) != "1" {
		t.Skipf("%v: the real-Kafka tests are skipped (set %s=1 to make this a failure)", err, RequireEnv)
	}
	t.Fatalf("real Kafka did not start: %v", err)
}

// privateSlots bounds the private real clusters that run at once: each node is a JVM, and two
// cores run little more than two clusters well.
var privateSlots = make(chan struct{}, 2)

var sharedState struct {
	once sync.Once
	c    *Cluster
	err  error
}

// shared returns the package's shared single-node broker, starting it on first use.
func shared(t testing.TB) *Cluster {
	t.Helper()
	s := &sharedState
	s.once.Do(func() {
		s.c, s.err = StartReal(os.TempDir(), RealOptions{})
		if s.err == nil {
			fmt.Fprintf(os.Stderr, "testbroker: shared real Kafka started in %v (%s)\n", s.c.StartTime().Round(10e6), s.c.Dir())
		}
	})
	if s.err != nil {
		unavailable(t, s.err)
	}
	return s.c
}

// Main runs the tests of a package (call it from TestMain) and stops the shared real broker
// afterwards.
func Main(m *testing.M) int {
	code := m.Run()
	if c := sharedState.c; c != nil {
		c.Close()
	}
	return code
}

var prefixes atomic.Int64

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// uniquePrefix returns a prefix of names unique to the test within the process.
func uniquePrefix(t testing.TB) string {
	name := unsafeName.ReplaceAllString(t.Name(), "_")
	if len(name) > 120 {
		name = name[len(name)-120:]
	}
	return fmt.Sprintf("%s-%d.", strings.Trim(name, "_"), prefixes.Add(1))
}

// Scoped returns b with names of its own under prefix (see Broker.Name), for a test that runs
// several scenarios on one cluster.
func Scoped(b Broker, prefix string) Broker {
	switch b := b.(type) {
	case fakeBroker:
		return fakeBroker{b.Cluster, b.prefix + prefix}
	case realBroker:
		return realBroker{b.Cluster, b.prefix + prefix}
	}
	panic(fmt.Sprintf("testbroker: Scoped of a %T", b))
}

type fakeBroker struct {
	*embedkafka.Cluster
	prefix string
}

func (fakeBroker) Kind() Kind                  { return Fake }
func (f fakeBroker) Name(s string) string      { return f.prefix + s }
func (f fakeBroker) Fake() *embedkafka.Cluster { return f.Cluster }
func (fakeBroker) Real() *Cluster              { return nil }

type realBroker struct {
	*Cluster
	prefix string
}

func (realBroker) Kind() Kind                { return Real }
func (r realBroker) Name(s string) string    { return r.prefix + s }
func (realBroker) Fake() *embedkafka.Cluster { return nil }
func (r realBroker) Real() *Cluster          { return r.Cluster }
func (r realBroker) Addrs() []string         { return r.Listener("PLAINTEXT") }

// FromFake returns cl as a Broker, for a test that starts its kfake cluster itself.
func FromFake(cl *embedkafka.Cluster) Broker { return fakeBroker{cl, ""} }

// NeedReal skips the test unless KDEDUP_TEST_KAFKA asks for real Kafka: for a test of what only
// a real broker does (the log cleaner, an unclean election, enforced re-authentication).
func NeedReal(t testing.TB) {
	t.Helper()
	tier.Integration(t)
	switch kind() {
	case "real", "both":
	default:
		t.Skipf("needs real Kafka, which %s=real (or all) or %s=real or both runs (see docs/hacking.md)", tier.Env, KindEnv)
	}
}

// FakeOnly returns b's kfake cluster for a test that needs a kfake-only feature (faults,
// ControlKey, SleepControl, Stop and Resume), or skips the test on real Kafka, naming the feature.
func FakeOnly(t testing.TB, b Broker, feature string) *embedkafka.Cluster {
	t.Helper()
	if b.Fake() == nil {
		t.Skipf("needs kfake's %s, which real Kafka does not have", feature)
	}
	return b.Fake()
}

// ReadAll implements Broker.
func (f fakeBroker) ReadAll(ctx context.Context, topic string) (map[int][]kafkaio.Record, error) {
	return readAll(ctx, f, topic)
}

// ReadAll implements Broker.
func (r realBroker) ReadAll(ctx context.Context, topic string) (map[int][]kafkaio.Record, error) {
	return readAll(ctx, r, topic)
}

// ReadPartition implements Broker.
func (f fakeBroker) ReadPartition(ctx context.Context, topic string, partition int, end int64) ([]kafkaio.Record, error) {
	return readPartition(ctx, f.Client(), topic, partition, end)
}

// ReadPartition implements Broker.
func (r realBroker) ReadPartition(ctx context.Context, topic string, partition int, end int64) ([]kafkaio.Record, error) {
	return readPartition(ctx, r.Client(), topic, partition, end)
}

// readPartition returns the records of topic/partition from the start of the log up to end.
// Records deleted by retention are skipped.
func readPartition(ctx context.Context, c *kafkaio.Client, topic string, partition int, end int64) ([]kafkaio.Record, error) {
	var out []kafkaio.Record
	err := kafkaio.Read(ctx, c, kafkaio.Range{Topic: topic, Partition: partition, End: end, Failures: 1, Stalls: 100},
		func(recs []kafkaio.Record) error {
			for i := range recs {
				out = append(out, clone(recs[i]))
			}
			return nil
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readAll returns every record of every partition of topic up to its current high watermark, by
// partition, in offset order.
func readAll(ctx context.Context, b Broker, topic string) (map[int][]kafkaio.Record, error) {
	ends, err := b.EndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(map[int][]kafkaio.Record, len(ends))
	for p, end := range ends {
		recs, err := b.ReadPartition(ctx, topic, p, end)
		if err != nil {
			return nil, err
		}
		out[p] = recs
	}
	return out, nil
}

// clone returns a deep copy of r that stays valid after the read that handed it out goes on.
func clone(r kafkaio.Record) kafkaio.Record {
	r.Key, r.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
	if len(r.Headers) > 0 {
		hs := make([]kafkaio.Header, len(r.Headers))
		for i, h := range r.Headers {
			hs[i] = kafkaio.Header{Key: h.Key, Value: bytes.Clone(h.Value)}
		}
		r.Headers = hs
	}
	return r
}
