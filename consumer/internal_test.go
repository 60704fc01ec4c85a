package consumer

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kdedup/kdedup/identity"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// fakeGen records commits and fails the test's expectations if two commits ever overlap.
type fakeGen struct {
	inflight atomic.Int32
	overlaps atomic.Int32
	fail     atomic.Int32 // fail this many upcoming commits
	// quiesce, for a fakeGen used in a synctest bubble, holds every commit until all other
	// goroutines of the bubble are blocked, so that a commit that could overlap it has started.
	quiesce bool
	// backward allows a partition's offset to go down (a rewind).
	backward bool

	mu      sync.Mutex
	commits []map[int]int64
	best    map[int]int64
	epochs  map[int]int32 // the leader epoch of each partition's last commit
}

func (g *fakeGen) commitOffsets(offsets map[int]kafkaio.Committed) error {
	if g.inflight.Add(1) > 1 {
		g.overlaps.Add(1)
	} else if g.quiesce {
		synctest.Wait()
	}
	defer g.inflight.Add(-1)
	if g.fail.Add(-1) >= 0 {
		return errors.New("commit refused")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.best == nil {
		g.best = map[int]int64{}
	}
	c := map[int]int64{}
	if g.epochs == nil {
		g.epochs = map[int]int32{}
	}
	for p, co := range offsets {
		o := co.Offset
		c[p] = o
		g.epochs[p] = co.LeaderEpoch
		if o < g.best[p] && !g.backward {
			return errors.New("offset went backwards")
		}
		g.best[p] = o
	}
	g.commits = append(g.commits, c)
	return nil
}

func discardSampler() *kafkaio.Sampler {
	return kafkaio.NewSampler(nil, time.Second)
}

func TestCommitterCoalescesAndFlushes(t *testing.T) {
	g := &fakeGen{}
	c := newCommitter(g, "in", time.Hour, NopObserver{}, discardSampler())
	go c.run()
	defer c.close()
	c.mark(0, 10)
	c.mark(0, 20)
	c.mark(1, 5)
	c.mark(0, 15) // lower than pending: ignored
	if err := c.flush(context.Background(), 0, 20); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.commits) != 1 || g.commits[0][0] != 20 || g.commits[0][1] != 5 {
		t.Fatalf("commits = %v, want one commit {0:20 1:5}", g.commits)
	}
}

// TestCommitterRewind proves that an offset moved backward (an offset reset) is committed, and
// that marks go on from it, while other partitions keep theirs.
func TestCommitterRewind(t *testing.T) {
	g := &fakeGen{backward: true}
	c := newCommitter(g, "in", time.Hour, NopObserver{}, discardSampler())
	go c.run()
	defer c.close()
	ctx := context.Background()
	c.mark(1, 40)
	if err := c.flush(ctx, 0, 100); err != nil {
		t.Fatal(err)
	}
	c.rewind(0, 5)
	if err := c.flush(ctx, 0, 5); err != nil {
		t.Fatal(err)
	}
	c.mark(0, 3) // below the rewound offset: ignored
	if err := c.flush(ctx, 0, 8); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var zero []int64
	for _, cm := range g.commits {
		zero = append(zero, cm[0])
	}
	if !slices.Equal(zero, []int64{100, 5, 8}) || g.best[1] != 40 {
		t.Fatalf("partition 0 committed %v, partition 1 at %d; want [100 5 8] and 40", zero, g.best[1])
	}
}

func TestCommitterFailureKeepsOffsets(t *testing.T) {
	g := &fakeGen{}
	g.fail.Store(1)
	var obs countObs
	c := newCommitter(g, "in", time.Hour, &obs, discardSampler())
	go c.run()
	defer c.close()
	c.mark(3, 7)
	if err := c.flush(context.Background(), 3, 7); err == nil {
		t.Fatal("flush succeeded although the commit failed")
	}
	if obs.commitErrors.Load() != 1 {
		t.Errorf("commit errors = %d, want 1", obs.commitErrors.Load())
	}
	// The failed offsets are still pending: the retry commits them.
	if err := c.flush(context.Background(), 3, 7); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.best[3] != 7 {
		t.Fatalf("committed %v, want partition 3 at 7", g.best)
	}
}

func TestCommitterFlushAlreadyCommitted(t *testing.T) {
	g := &fakeGen{}
	c := newCommitter(g, "in", 0, NopObserver{}, discardSampler())
	go c.run()
	defer c.close()
	if err := c.flush(context.Background(), 0, 4); err != nil {
		t.Fatal(err)
	}
	if err := c.flush(context.Background(), 0, 4); err != nil {
		t.Fatal(err)
	}
	if err := c.flush(context.Background(), 0, 2); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.commits) != 1 {
		t.Fatalf("commits = %v, want exactly one", g.commits)
	}
}

// TestCommitterSingleCaller hammers the committer from many goroutines (run with -race): commits
// never overlap, never go backwards, and end at the highest offset of every partition. In the
// synctest bubble, each commit waits until every other goroutine is blocked, so any commit that
// the committer would let overlap it starts while it is in flight.
func TestCommitterSingleCaller(t *testing.T) {
	for _, interval := range []time.Duration{0, time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background()) // its Done channel is the bubble's
			defer cancel()
			g := &fakeGen{quiesce: true}
			c := newCommitter(g, "in", interval, NopObserver{}, discardSampler())
			go c.run()
			var wg sync.WaitGroup
			for p := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for o := int64(1); o <= 200; o++ {
						c.mark(p, o)
						if o%50 == 0 {
							if err := c.flush(ctx, p, o); err != nil {
								t.Error(err)
							}
						}
					}
				}()
			}
			wg.Wait()
			c.close()
			if n := g.overlaps.Load(); n != 0 {
				t.Errorf("interval %v: %d overlapping commits", interval, n)
			}
			for p := range 8 {
				if g.best[p] != 200 {
					t.Errorf("interval %v: partition %d committed at %d, want 200", interval, p, g.best[p])
				}
			}
		})
	}
}

// TestCommitterFlushFailsFast proves that a flush against a coordinator that refuses every
// commit returns the error instead of hanging (the drain must not wait for a dead generation).
func TestCommitterFlushFailsFast(t *testing.T) {
	g := &fakeGen{}
	g.fail.Store(1 << 20)
	c := newCommitter(g, "in", time.Hour, NopObserver{}, discardSampler())
	go c.run()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- c.flush(ctx, 0, 1) }()
	if err := <-errc; err == nil {
		t.Fatal("flush succeeded against a failing coordinator")
	}
	c.close()
}

type countObs struct {
	NopObserver
	commitErrors atomic.Int64
}

func (o *countObs) CommitError() { o.commitErrors.Add(1) }

func TestHashPartitionerNullKeys(t *testing.T) {
	h := newHashPartitioner(3)
	for in := range 7 {
		if got := h.partition(&kafkaio.Record{}, nil, in); got != in%3 {
			t.Errorf("null key from input %d: partition %d, want %d", in, got, in%3)
		}
	}
	// Empty (non-null) keys are hashed like Java does, the same way every time.
	if a, b := h.partition(&kafkaio.Record{Key: []byte{}}, nil, 0), h.partition(&kafkaio.Record{Key: []byte{}}, nil, 2); a != b {
		t.Errorf("empty key placed by input partition: %d vs %d", a, b)
	}
}

// TestIdentityPartitioner checks that every copy of an identity goes to one partition whatever
// its input partition, that identities spread over all partitions, and that a record without one
// stays with its input partition's number modulo n.
func TestIdentityPartitioner(t *testing.T) {
	p := identityPartitioner{n: 12}
	hits := make([]int, 12)
	for i := range 12000 {
		id := []byte(fmt.Sprintf("event-%d", i))
		q := p.partition(&kafkaio.Record{}, id, 0)
		if other := p.partition(&kafkaio.Record{}, id, 5); other != q {
			t.Fatalf("identity %s: partition %d from input 0, %d from input 5", id, q, other)
		}
		hits[q]++
	}
	for q, n := range hits {
		if n < 800 || n > 1200 { // 1000 expected, sd about 30
			t.Errorf("partition %d got %d of 12000 identities", q, n)
		}
	}
	if got := p.partition(&kafkaio.Record{}, nil, 14); got != 2 {
		t.Errorf("record without identity from input 14: partition %d, want 2", got)
	}
}

// TestUnitPartitions checks the unit-ownership function of the re-warm and rebuild.
func TestUnitPartitions(t *testing.T) {
	for _, tc := range []struct {
		part Partitioning
		unit int32
		n    int
		want []int
	}{
		{PartitionSame, 3, 0, []int{3}},
		{PartitionSame, 3, 12, []int{3}},
		{PartitionSame, -1, 3, []int{0, 1, 2}},
		{PartitionSame, -1, 0, nil},
		{PartitionHash, 1, 3, []int{0, 1, 2}},
		{PartitionHash, 1, 0, nil},
		{PartitionIdentity, 0, 2, []int{0, 1}},
	} {
		if got := UnitPartitions(tc.part, tc.unit, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("UnitPartitions(%s, %d, %d) = %v, want %v", tc.part, tc.unit, tc.n, got, tc.want)
		}
	}
}

// TestStripRouteHeaders checks that stage 2 removes exactly the router's headers, in order.
func TestStripRouteHeaders(t *testing.T) {
	var a routeArena
	a.reset(1, 0, "in")
	m := kafkaio.Record{Offset: 7, Headers: []kafkaio.Header{{Key: "a", Value: []byte("1")}, {Key: "b"}}}
	r := a.routed(&m, "in", 3, []byte("id"))
	want := map[string]string{RouteHeaderFrom: "in/3/7", RouteHeaderID: "id"}
	for _, h := range r.Headers[2:] {
		if want[h.Key] != string(h.Value) {
			t.Errorf("header %s = %q, want %q", h.Key, h.Value, want[h.Key])
		}
	}
	if len(r.Headers) != 4 || len(m.Headers) != 2 {
		t.Fatalf("routed headers %v (the original's %v)", r.Headers, m.Headers)
	}
	s := stripRouteHeaders(r)
	if len(s.Headers) != 2 || s.Headers[0].Key != "a" || s.Headers[1].Key != "b" {
		t.Errorf("stripped headers %v", s.Headers)
	}
	if cap(s.Headers) != 2 {
		t.Errorf("stripped headers have capacity %d: an append would overwrite the routing headers", cap(s.Headers))
	}
	if string(routeID(r.Headers)) != "id" || routeID(m.Headers) != nil {
		t.Errorf("routeID = %q on the routed record, %q on the original", routeID(r.Headers), routeID(m.Headers))
	}
	mixed := kafkaio.Record{Headers: []kafkaio.Header{{Key: RouteHeaderID}, {Key: "a"}, {Key: RouteHeaderFrom}, {Key: "b"}}}
	if s := stripRouteHeaders(mixed); len(s.Headers) != 2 || s.Headers[0].Key != "a" || s.Headers[1].Key != "b" ||
		mixed.Headers[0].Key != RouteHeaderID {
		t.Errorf("headers in another order: stripped %v, original now %v", s.Headers, mixed.Headers)
	}
	if s := stripRouteHeaders(kafkaio.Record{Headers: r.Headers[2:]}); s.Headers != nil {
		t.Errorf("a record with only routing headers got %v", s.Headers)
	}
	if s := stripRouteHeaders(kafkaio.Record{}); s.Headers != nil {
		t.Errorf("a record without headers got %v", s.Headers)
	}
}

// validConfig returns the defaults (AppDefaults) with brokers and topics: a Config Validate accepts.
func validConfig() Config {
	c := AppDefaults()
	c.Brokers, c.InputTopic, c.OutputTopic = []string{"b:9092"}, "in", "out"
	return c
}

// TestConfigValidate checks that Validate reports every problem as a FieldError naming the field
// at fault, and accepts the defaults.
func TestConfigValidate(t *testing.T) {
	ok := validConfig()
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want []string // fields at fault, in order; none means valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"zeros refused", func(c *Config) { c.BatchSize, c.BatchTimeout, c.MarkHeader = 0, 0, "" }, []string{"BatchSize", "BatchTimeout", "MarkHeader"}},
		{"no brokers or topics", func(c *Config) { c.Brokers, c.InputTopic, c.OutputTopic = nil, "", "" }, []string{"Brokers", "InputTopic", "OutputTopic"}},
		{"brokers", func(c *Config) { c.Brokers = []string{"b:9092", "nohostport", ""} }, []string{"Brokers", "Brokers"}},
		{"loop", func(c *Config) { c.OutputTopic = "in" }, []string{"OutputTopic"}},
		{"dups topic", func(c *Config) { c.DuplicatesTopic = "out" }, []string{"DuplicatesTopic"}},
		{"dead-letter topic", func(c *Config) { c.DeadLetterTopic = "in" }, []string{"DeadLetterTopic"}},
		{"dead-letter topic is the dups topic", func(c *Config) { c.DuplicatesTopic, c.DeadLetterTopic = "d", "d" }, []string{"DeadLetterTopic"}},
		{"dead-letter topic set", func(c *Config) { c.DuplicatesTopic, c.DeadLetterTopic = "d", "dlq" }, nil},
		{"heartbeat", func(c *Config) { c.HeartbeatInterval = time.Minute }, []string{"HeartbeatInterval", "RebalanceTimeout"}},
		{"no release budget", func(c *Config) { c.RebalanceTimeout = 3 * time.Second }, []string{"RebalanceTimeout"}},
		{"smallest release budget", func(c *Config) { c.RebalanceTimeout, c.HeartbeatInterval = 200*time.Millisecond, 100*time.Millisecond }, nil},
		{"enums", func(c *Config) { c.Mode = "x"; c.Partitioning = "y"; c.Unkeyed = "z"; c.MarkHeader = " " },
			[]string{"Partitioning", "Mode", "Unkeyed", "MarkHeader"}},
		{"ranges", func(c *Config) { c.BatchSize = 1_000_001; c.BatchBytes = 1000; c.FetchMaxBytes = 10 },
			[]string{"BatchSize", "BatchBytes", "FetchMaxBytes"}},
		{"source key without tallies", func(c *Config) {
			c.SourceKey = func(_ context.Context, k, _ []byte, _ identity.Headers) ([]byte, identity.Reason, error) {
				return k, identity.Found, nil
			}
		},
			[]string{"Sources"}},
		{"negative", func(c *Config) { c.BatchSize = -1; c.BatchTimeout = -1; c.CommitInterval = -1; c.SessionTimeout = -1 },
			[]string{"SessionTimeout", "BatchSize", "BatchTimeout", "CommitInterval"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mod(&c)
			err := c.Validate()
			var got []string
			for _, fe := range FieldErrors(err) {
				got = append(got, fe.Field)
				if !strings.HasPrefix(fe.Error(), "consumer: "+fe.Field+": ") || strings.Contains(fe.Problem, fe.Field) {
					t.Errorf("problem %q: want \"consumer: Field: problem\" with a problem that does not name the field", fe)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Validate = %v; fields %v, want %v", err, got, tc.want)
			}
			if (err == nil) != (len(tc.want) == 0) {
				t.Errorf("Validate = %v, want an error only for problems", err)
			}
		})
	}
}

// TestConfigValidateRefusesZeros checks that Validate refuses the zero value of every field the
// defaults set (under exactly-once delivery, whose settings it checks only then): the worker has no
// defaults of its own, so a zero there is a mistake, never "the default".
func TestConfigValidateRefusesZeros(t *testing.T) {
	ok := validConfig()
	ok.Delivery = DeliveryExactlyOnce
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults under exactly-once: %v", err)
	}
	v := reflect.ValueOf(AppDefaults())
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if v.Field(i).IsZero() {
			continue
		}
		c := ok
		reflect.ValueOf(&c).Elem().Field(i).SetZero()
		if !slices.ContainsFunc(FieldErrors(c.Validate()), func(fe *FieldError) bool { return fe.Field == name }) {
			t.Errorf("Validate accepts %s zero: %v", name, c.Validate())
		}
	}
}

// TestReleaseBudget checks that a release ends before the coordinator's rebalance timeout, which
// started up to a heartbeat interval before the worker noticed the rebalance, with room to rejoin.
func TestReleaseBudget(t *testing.T) {
	for _, tc := range []struct {
		rebalance, heartbeat, want time.Duration
	}{
		{30 * time.Second, 3 * time.Second, 26 * time.Second}, // the defaults: 1s margin
		{3 * time.Second, 100 * time.Millisecond, 2600 * time.Millisecond},
		{time.Second, 500 * time.Millisecond, 400 * time.Millisecond},
	} {
		c := Config{RebalanceTimeout: tc.rebalance, HeartbeatInterval: tc.heartbeat}
		if got := c.releaseBudget(); got != tc.want {
			t.Errorf("releaseBudget(rebalance %v, heartbeat %v) = %v, want %v", tc.rebalance, tc.heartbeat, got, tc.want)
		}
	}
}
