// Package embedkafka runs an embedded Kafka-protocol broker in the process: kfake from franz-go,
// listening on 127.0.0.1 over real TCP, with one or more brokers, optional persistence across
// Stop and Resume, and small helpers to create, produce to and read topics and committed offsets
// with kafka-go.
//
// It is linked into the production binary on purpose: `kdedup demo` and `kdedup loadtest
// -embedded` run the real worker against it, so that the README demo needs nothing installed.
// Tests of every package use it too. It is not a Kafka to run production traffic on.
package embedkafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Options configures Start. The zero value starts one broker without topics.
type Options struct {
	// Topics are created at start: name → number of partitions.
	Topics map[string]int32
	// Brokers is the number of brokers. Default 1.
	Brokers int
	// DataDir, when set, makes the cluster persist its state (records, committed offsets) there,
	// so that Stop followed by Resume (or Restart) keeps everything.
	DataDir string
	// MinSessionTimeout is the smallest consumer group session timeout accepted. Default 100ms
	// (kfake's own default is 6s, which makes group tests slow).
	MinSessionTimeout time.Duration
	// AutoCreateTopics lets metadata requests create missing topics.
	AutoCreateTopics bool
	// MaxVersions, when set, caps the API versions the brokers accept, to simulate an older
	// Kafka; an API it lacks is not offered at all.
	MaxVersions *kversion.Versions
	// Security, when set, makes the brokers require TLS and SASL as it says; the cluster's own
	// client (Client and the helpers) connects with its Conn settings.
	Security *Security
}

// Security is how a secured cluster listens and how its own client connects.
type Security struct {
	// Listen are kfake options that secure the brokers: kfake.TLS, kfake.EnableSASL,
	// kfake.Superuser, kfake.User, kfake.EnableACLs.
	Listen []kfake.Opt
	// Client holds the TLS and SASL settings of the cluster's own client (its brokers and
	// client ID are ignored). It must be allowed everything the helpers do.
	Client kafkaio.Conn
}

// Cluster is a running (or stopped) fake cluster. Its methods are safe for concurrent use.
type Cluster struct {
	Topics
	opts  Options
	ports []int

	mu       sync.Mutex
	c        *kfake.Cluster
	client   *kafkaio.Client // replaced on every start: pooled connections do not survive a restart
	producer *kafkaio.Producer
}

// Start starts a cluster on random free ports of 127.0.0.1.
func Start(opts Options) (*Cluster, error) {
	if opts.Brokers <= 0 {
		opts.Brokers = 1
	}
	if opts.MinSessionTimeout <= 0 {
		opts.MinSessionTimeout = 100 * time.Millisecond
	}
	cl := &Cluster{opts: opts}
	cl.Topics = NewTopics(cl.conns, 1)
	for range opts.Brokers {
		cl.ports = append(cl.ports, 0)
	}
	if err := cl.start(true); err != nil {
		return nil, err
	}
	return cl, nil
}

func (cl *Cluster) start(seed bool) error {
	kopts := []kfake.Opt{
		kfake.Ports(cl.ports...),
		kfake.GroupMinSessionTimeout(cl.opts.MinSessionTimeout),
	}
	if cl.opts.AutoCreateTopics {
		kopts = append(kopts, kfake.AllowAutoTopicCreation())
	}
	if cl.opts.DataDir != "" {
		kopts = append(kopts, kfake.DataDir(cl.opts.DataDir))
	}
	if cl.opts.Security != nil {
		kopts = append(kopts, cl.opts.Security.Listen...)
	}
	if cl.opts.MaxVersions != nil {
		kopts = append(kopts, kfake.MaxVersions(cl.opts.MaxVersions))
	}
	if seed {
		for name, n := range cl.opts.Topics {
			kopts = append(kopts, kfake.SeedTopics(n, name))
		}
	}
	var c *kfake.Cluster
	// A port freed by Stop can take a moment to be reusable: retry for about 5s.
	err := kafkaio.Backoff{Min: 100 * time.Millisecond, Max: 100 * time.Millisecond}.Retry(context.Background(), 50, func(int) error {
		var err error
		c, err = kfake.NewCluster(kopts...)
		return err
	})
	if err != nil {
		return fmt.Errorf("embedkafka: start cluster: %w", err)
	}
	addrs := c.ListenAddrs()
	ports := make([]int, len(addrs))
	for i, a := range addrs {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			c.Close()
			return fmt.Errorf("embedkafka: listen address %q: %w", a, err)
		}
		ports[i], _ = strconv.Atoi(p)
	}
	cl.mu.Lock()
	cl.c, cl.ports = c, ports
	conn := kafkaio.Conn{Brokers: cl.Addrs(), ClientID: "embedkafka"}
	if sec := cl.opts.Security; sec != nil {
		conn.TLS, conn.SASL = sec.Client.TLS, sec.Client.SASL
	}
	cl.client = conn.Client(10 * time.Second)
	cl.producer = kafkaio.NewProducer(cl.client, kafkaio.ProducerConfig{Attempts: 1})
	cl.mu.Unlock()
	return nil
}

// Addrs returns the brokers' host:port addresses. They stay the same across Stop and Resume.
func (cl *Cluster) Addrs() []string {
	out := make([]string, len(cl.ports))
	for i, p := range cl.ports {
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return out
}

// Stop shuts the cluster down: connections are refused until Resume. Without a DataDir all state
// is lost.
func (cl *Cluster) Stop() {
	cl.mu.Lock()
	c, client := cl.c, cl.client
	cl.c = nil
	cl.mu.Unlock()
	if c != nil {
		c.Close()
	}
	if client != nil {
		kafkaio.CloseIdle(client)
	}
}

// Resume starts a stopped cluster again on the same ports, reloading its state from DataDir.
func (cl *Cluster) Resume() error {
	if cl.opts.DataDir == "" {
		return errors.New("embedkafka: Resume needs Options.DataDir")
	}
	cl.mu.Lock()
	running := cl.c != nil
	cl.mu.Unlock()
	if running {
		return errors.New("embedkafka: cluster is running")
	}
	return cl.start(false)
}

// Restart stops and resumes the cluster.
func (cl *Cluster) Restart() error {
	cl.Stop()
	return cl.Resume()
}

// Fault installs broker faults (see kfake.Cluster.Fault: errors answered in place of the real
// answer, REQUEST_TIMED_OUT on produce after the records were appended) on the running cluster
// and returns their handle, or nil when the cluster is stopped. Faults do not survive Stop.
func (cl *Cluster) Fault(faults ...kfake.Fault) *kfake.FaultHandle {
	c := cl.Kfake()
	if c == nil {
		return nil
	}
	return c.Fault(faults...)
}

// Kfake returns the running kfake cluster, or nil when the cluster is stopped: what Fault injects
// faults into, and what the tests' hooks (internal/embedkafka/kfaketest: retention, leader
// elections, delayed and substituted answers) drive. A cluster returned before Stop is shut down
// and is not the one Resume starts; what is installed on it does not survive Stop.
func (cl *Cluster) Kfake() *kfake.Cluster {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.c
}

// Close stops the cluster for good.
func (cl *Cluster) Close() { cl.Stop() }

// conns returns the current client and producer of the cluster.
func (cl *Cluster) conns() (*kafkaio.Client, *kafkaio.Producer) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.client, cl.producer
}
