package testbroker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/segmentio/kafka-go"
)

// ErrNoJava is returned by StartReal when java (or, before the jars are cached, mvn) is not on
// PATH.
var ErrNoJava = errors.New("testbroker: real Kafka needs java and mvn on PATH")

// RealOptions configure StartReal. The zero value is one combined broker and controller.
type RealOptions struct {
	// Nodes is the number of nodes, each a broker and a controller. Default 1.
	Nodes int
	// Config is added to every node's server.properties (name → value).
	Config map[string]string
	// Listeners are extra listeners by security protocol (SASL_SSL, SSL, SASL_PLAINTEXT), each on
	// a port of its own; the brokers talk to each other, and the cluster's helpers to them, over
	// PLAINTEXT.
	Listeners []string
	// Format are extra arguments of the storage format step, such as
	// "--add-scram", "SCRAM-SHA-512=[name=alice,password=alice-secret]".
	Format []string
}

// Cluster is a real Apache Kafka cluster in KRaft mode run by tools/kafka/kafka.sh: one JVM per
// node, each in a process group of its own that is killed with SIGKILL if the test process dies.
// It has embedkafka's topic helpers (over PLAINTEXT). Its methods are safe for concurrent use.
type Cluster struct {
	embedkafka.Topics
	client  *kafkaio.Client // of the topic helpers, over PLAINTEXT
	dir     string
	nodes   int
	ports   map[string][]int // listener → port of each node (index node-1)
	started time.Duration    // how long StartReal took

	mu    sync.Mutex
	procs map[int]*proc
}

type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// Script returns the path of tools/kafka/kafka.sh in this source tree.
func Script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "tools", "kafka", "kafka.sh")
}

// Available returns nil when a real broker can be started here, or ErrNoJava.
func Available() error {
	if _, err := exec.LookPath("java"); err != nil {
		return ErrNoJava
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		return ErrNoJava
	}
	return nil
}

// startAttempts is how many times StartReal formats and starts a cluster whose node could not
// bind one of its ports: kafka.sh picks ports that are free a moment before the JVMs bind them,
// and another process (most often an outgoing connection's ephemeral port) can take one between.
const startAttempts = 3

// errPortTaken says that a node exited while starting because a port it was given was taken.
var errPortTaken = errors.New("testbroker: a port was taken before the node bound it")

// StartReal formats a cluster in a new directory under dir (see kafka.sh init) and starts every
// node, returning once each logged that it started and the cluster's metadata lists them all.
// A cluster whose node found a port taken is started again on new ports, up to startAttempts
// times. The caller must call Close.
func StartReal(dir string, o RealOptions) (*Cluster, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	var err error
	for range startAttempts {
		var c *Cluster
		if c, err = startReal(dir, o); !errors.Is(err, errPortTaken) {
			return c, err
		}
	}
	return nil, err
}

// startReal is one attempt of StartReal.
func startReal(dir string, o RealOptions) (*Cluster, error) {
	began := time.Now()
	if o.Nodes <= 0 {
		o.Nodes = 1
	}
	dir, err := os.MkdirTemp(dir, "kdedup-kafka-")
	if err != nil {
		return nil, fmt.Errorf("testbroker: %w", err)
	}
	args := []string{"init", dir, "-n", strconv.Itoa(o.Nodes)}
	if v := os.Getenv(VersionEnv); v != "" {
		args = append(args, "-v", v)
	}
	for _, l := range o.Listeners {
		args = append(args, "-l", l)
	}
	if len(o.Config) > 0 {
		var b strings.Builder
		for k, v := range o.Config {
			fmt.Fprintf(&b, "%s=%s\n", k, v)
		}
		p := filepath.Join(dir, "extra.properties")
		if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
			return nil, fmt.Errorf("testbroker: %w", err)
		}
		args = append(args, "-p", p)
	}
	for _, f := range o.Format {
		args = append(args, "-f", f)
	}
	if out, err := exec.Command(Script(), args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("testbroker: kafka.sh init: %v: %s", err, out)
	}
	c := &Cluster{dir: dir, nodes: o.Nodes, procs: map[int]*proc{}}
	if err := c.readPorts(); err != nil {
		return nil, err
	}
	c.client = kafkaio.Conn{Brokers: c.Listener("PLAINTEXT"), ClientID: "testbroker"}.Client(10 * time.Second)
	producer := kafkaio.NewProducer(c.client, kafkaio.ProducerConfig{Attempts: 1})
	c.Topics = embedkafka.NewTopics(func() (*kafkaio.Client, *kafkaio.Producer) { return c.client, producer }, min(o.Nodes, 3))
	for n := 1; n <= o.Nodes; n++ {
		if err := c.spawn(n); err != nil {
			c.Close()
			return nil, err
		}
	}
	for n := 1; n <= o.Nodes; n++ {
		if err := c.waitStarted(n, 0); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.waitBrokers(o.Nodes); err != nil {
		c.Close()
		return nil, err
	}
	c.started = time.Since(began)
	return c, nil
}

// readPorts reads DIR/ports: one "node listener port" line per listener of each node.
func (c *Cluster) readPorts() error {
	b, err := os.ReadFile(filepath.Join(c.dir, "ports"))
	if err != nil {
		return fmt.Errorf("testbroker: %w", err)
	}
	c.ports = map[string][]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var node, port int
		var name string
		if _, err := fmt.Sscanf(sc.Text(), "%d %s %d", &node, &name, &port); err != nil {
			return fmt.Errorf("testbroker: ports line %q: %w", sc.Text(), err)
		}
		if c.ports[name] == nil {
			c.ports[name] = make([]int, c.nodes)
		}
		c.ports[name][node-1] = port
	}
	return nil
}

// Listener returns the host:port of every node's listener of the given security protocol
// (PLAINTEXT, or one of RealOptions.Listeners).
func (c *Cluster) Listener(name string) []string {
	var out []string
	for _, p := range c.ports[name] {
		out = append(out, "127.0.0.1:"+strconv.Itoa(p))
	}
	return out
}

// Nodes returns the number of nodes.
func (c *Cluster) Nodes() int { return c.nodes }

// StartTime returns how long StartReal took: format, JVM start and the cluster ready.
func (c *Cluster) StartTime() time.Duration { return c.started }

// Dir returns the cluster's directory: node-N/server.log and node-N/server.properties of each node.
func (c *Cluster) Dir() string { return c.dir }

// LogFile returns the path of node n's log.
func (c *Cluster) LogFile(n int) string {
	return filepath.Join(c.dir, "node-"+strconv.Itoa(n), "server.log")
}

func (c *Cluster) logSize(n int) int64 {
	fi, err := os.Stat(c.LogFile(n))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// spawn starts node n's JVM (kafka.sh run) in a process group of its own.
func (c *Cluster) spawn(n int) error {
	cmd := exec.Command(Script(), "run", c.dir, strconv.Itoa(n))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testbroker: start node %d: %w", n, err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	c.mu.Lock()
	c.procs[n] = p
	c.mu.Unlock()
	return nil
}

// waitStarted waits until node n logged "Kafka Server started" past offset from of its log.
func (c *Cluster) waitStarted(n int, from int64) error {
	c.mu.Lock()
	p := c.procs[n]
	c.mu.Unlock()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		b, _ := os.ReadFile(c.LogFile(n))
		if int64(len(b)) > from && bytes.Contains(b[from:], []byte("Kafka Server started")) {
			return nil
		}
		select {
		case <-p.exited:
			return exitedWhileStarting(n, c.LogFile(n), b, from)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testbroker: node %d did not start within 3m; log %s", n, c.LogFile(n))
		}
	}
}

// exitedWhileStarting returns the error of node n, which exited while starting, given its log b
// (written to the file logFile) of which it wrote from offset from on: wrapping errPortTaken
// when the node could not bind a port.
func exitedWhileStarting(n int, logFile string, b []byte, from int64) error {
	err := fmt.Errorf("testbroker: node %d exited while starting; log %s:\n%s", n, logFile, tail(b, 30))
	if bytes.Contains(b[min(max(from, 0), int64(len(b))):], []byte("Address already in use")) {
		return fmt.Errorf("%w: %w", errPortTaken, err)
	}
	return err
}

// waitBrokers waits until the cluster's metadata lists want brokers.
func (c *Cluster) waitBrokers(want int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		res, err := c.Client().Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}})
		if err == nil && len(res.Brokers) == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testbroker: the cluster's metadata did not list %d brokers within 2m (last: %v)", want, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func tail(b []byte, lines int) string {
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}

// signal sends sig to node n's process group; it returns false when the node is not running.
func (c *Cluster) signal(n int, sig syscall.Signal) (*proc, bool) {
	c.mu.Lock()
	p := c.procs[n]
	c.mu.Unlock()
	if p == nil {
		return nil, false
	}
	select {
	case <-p.exited:
		return p, false
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	return p, true
}

// StopNode stops node n with SIGTERM (a controlled shutdown: its leaderships move first) and
// waits for it to exit, killing it after 60s.
func (c *Cluster) StopNode(n int) {
	p, ok := c.signal(n, syscall.SIGTERM)
	if !ok {
		return
	}
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		c.KillNode(n)
	}
}

// KillNode kills node n with SIGKILL, as a crashed machine, and waits for it to exit.
func (c *Cluster) KillNode(n int) {
	_ = c.ResumeNode(n) // a stopped process still dies of SIGKILL, but resume it anyway
	if p, ok := c.signal(n, syscall.SIGKILL); ok {
		<-p.exited
	}
}

// PauseNode freezes node n with SIGSTOP: it holds its connections but answers nothing, as a
// node in a long pause would.
func (c *Cluster) PauseNode(n int) error {
	if _, ok := c.signal(n, syscall.SIGSTOP); !ok {
		return fmt.Errorf("testbroker: node %d is not running", n)
	}
	return nil
}

// ResumeNode continues a node frozen by PauseNode.
func (c *Cluster) ResumeNode(n int) error {
	if _, ok := c.signal(n, syscall.SIGCONT); !ok {
		return fmt.Errorf("testbroker: node %d is not running", n)
	}
	return nil
}

// StartNode starts a stopped or killed node n again and waits until it logged that it started.
func (c *Cluster) StartNode(n int) error {
	if _, running := c.signal(n, 0); running {
		return fmt.Errorf("testbroker: node %d is running", n)
	}
	from := c.logSize(n)
	if err := c.spawn(n); err != nil {
		return err
	}
	return c.waitStarted(n, from)
}

// Close kills every node (SIGKILL: nothing of the cluster is kept), waits for them to exit and
// removes the cluster's directory unless KDEDUP_KEEP_KAFKA_LOGS=1.
func (c *Cluster) Close() {
	for n := 1; n <= c.nodes; n++ {
		c.KillNode(n)
	}
	if c.client != nil {
		kafkaio.CloseIdle(c.client) // the idle connections of the topic helpers
	}
	if os.Getenv("KDEDUP_KEEP_KAFKA_LOGS") != "1" {
		os.RemoveAll(c.dir)
	}
}

// CPUTime returns the CPU time (user and system) the running nodes' JVMs used so far, read
// from /proc (Linux); ok is false where it cannot be read.
func (c *Cluster) CPUTime() (d time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
		if err != nil {
			return 0, false
		}
		// The fields after the command name, which is in parentheses: utime and stime are the
		// 12th and 13th of them, in clock ticks (100 per second on Linux).
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 13 {
			return 0, false
		}
		u, err1 := strconv.ParseInt(f[11], 10, 64)
		s, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, false
		}
		d += time.Duration(u+s) * 10 * time.Millisecond
	}
	return d, true
}
