package consumer_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/tier"
	"github.com/twmb/franz-go/pkg/kfake"
)

// listenCounter counts, on the brokers' side, the connections accepted after mark that are open
// at once, per listener: the brokers' view of one client's connections.
type listenCounter struct {
	marked atomic.Bool
	mu     sync.Mutex
	open   map[string]int
	peak   map[string]int
}

// listen is a kfake.ListenFn.
func (c *listenCounter) listen(network, addr string) (net.Listener, error) {
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.open == nil {
		c.open, c.peak = map[string]int{}, map[string]int{}
	}
	c.mu.Unlock()
	return &countingListener{Listener: l, c: c}, nil
}

// maxPeak returns the most connections open at once to one broker.
func (c *listenCounter) maxPeak() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range c.peak {
		n = max(n, p)
	}
	return n
}

type countingListener struct {
	net.Listener
	c *listenCounter
}

func (l *countingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil || !l.c.marked.Load() {
		return conn, err
	}
	addr := l.Addr().String()
	l.c.mu.Lock()
	l.c.open[addr]++
	l.c.peak[addr] = max(l.c.peak[addr], l.c.open[addr])
	l.c.mu.Unlock()
	cc := &closeCounted{Conn: conn}
	cc.closed = func() { l.c.mu.Lock(); l.c.open[addr]--; l.c.mu.Unlock() }
	return cc, nil
}

type closeCounted struct {
	net.Conn
	once   sync.Once
	closed func()
}

func (c *closeCounted) Close() error {
	c.once.Do(c.closed)
	return c.Conn.Close()
}

// TestConnectionsByBroker runs one worker on 96 input and 96 output partitions led by 3 brokers
// and counts, from the brokers' side, the connections it holds open at once to each: at most 12
// (fetches by broker, produce requests by broker, the group's, metadata and offset lookups),
// where a connection per partition and request kind made hundreds.
func TestConnectionsByBroker(t *testing.T) {
	tier.Integration(t)
	t.Parallel()
	const parts, per = 96, 50
	var ln listenCounter
	kc, err := kfake.NewCluster(kfake.Ports(0, 0, 0), kfake.NumBrokers(3), kfake.SeedTopics(parts, "in", "out"),
		kfake.ListenFn(ln.listen), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	client := kafkaio.Conn{Brokers: kc.ListenAddrs()}.Client(10 * time.Second)
	prod := kafkaio.NewProducer(client, kafkaio.ProducerConfig{})
	for p := range parts {
		var msgs []kafkaio.Record
		for i := range per {
			msgs = append(msgs, kafkaio.Record{Key: fmt.Appendf(nil, "k-%d-%d", p, i), Value: []byte("v")})
		}
		if err := prod.Produce(context.Background(), "in", p, msgs); err != nil {
			t.Fatal(err)
		}
	}
	kafkaio.CloseIdle(client)
	ln.marked.Store(true) // the worker's connections from here on
	e := &env{t: t, in: "in", out: "out", group: "g"}
	cfg := testConfig(kc.ListenAddrs(), "in", "out", "g")
	r := e.start(cfg, newMapDeduper(false, nil), keyFuncFor(t, "key"))
	eventually(t, 60*time.Second, "every record produced", func() bool { return r.obs.produced.Load() == parts*per })
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("at most %d connections open at once to one broker", ln.maxPeak())
	if n := ln.maxPeak(); n > 12 {
		t.Errorf("the worker held %d connections open at once to one broker for %d partitions, want at most 12", n, parts)
	}
}
