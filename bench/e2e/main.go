// Command e2e runs the Redpanda Connect workload of docs/performance.md end to end, for one or
// more kdedup binaries in alternating rounds, and prints what each run measured and the medians.
//
// Each run starts an embedded kfake broker in this process (topics loadtest-in and loadtest-out,
// six partitions each), preloads the input with the loadtest of -loadtest (1M JSON records of
// about 120 B with an id, 20 % duplicates), then starts the binary as the worker with its
// defaults plus DEDUP_KEY=json:id and any -env, and times it from process start until its output
// is complete: until the output topic holds as many records as the input has distinct ids per
// partition (counted before the worker starts; the broker's end offsets are read every -poll, which
// costs the worker nothing), or, should the worker drop a unique event, until its /metrics says it
// produced or dropped every record (read every second). Its CPU (user + system) and peak RSS come
// from /proc. The
// worker is then stopped with SIGTERM and the loadtest verifies the output: a run reports its
// lost and leaked events.
//
//	go build -o /tmp/new ./cmd/kdedup    # and the baselines, from worktrees
//	cd bench && go run ./e2e -rounds 4 new=/tmp/new main=/tmp/main before=/tmp/before
//
// It runs on Linux only (/proc). The worker, the broker with the loadtest's producer and
// verifier, and this process share the machine: compare runs of one invocation.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

const (
	inTopic, outTopic = "loadtest-in", "loadtest-out"
	partitions        = 6
)

type config struct {
	rounds   int
	records  int
	loadtest string
	poll     time.Duration
	slow     time.Duration // a run whose first output comes later prints the worker's log
	env      []string
	bins     []binary
}

type binary struct{ name, path string }

// result is what one run measured.
type result struct {
	rssMiB       float64
	cpuPerRecord time.Duration // the worker's user + system CPU over the records
	elapsed      time.Duration // worker start until its output was complete
	first        time.Duration // worker start until the output's first record (within a poll)
	log          string        // the worker's log, kept when its first output came after -slow-start
	lost, leaked int
	lossLine     string // the loadtest's line on unique events (bound, expected loss), kept when one was lost
	load         string
	// broker and loadtest are the CPU the others spent meanwhile: this process (the broker) and the loadtest
	// (its verifier reads the output as it comes).
	broker, loadtest time.Duration
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(2)
	}
	all := map[string][]result{}
	for round := 1; round <= cfg.rounds; round++ {
		for _, b := range cfg.bins {
			r, err := run(cfg, b)
			if err != nil {
				fmt.Fprintf(os.Stderr, "e2e: %s, round %d: %v\n", b.name, round, err)
				os.Exit(1)
			}
			all[b.name] = append(all[b.name], r)
			fmt.Printf("%-10s round %d: rss %.0f MiB, cpu %.3f µs/record, %.3f s (first output %.3f s), lost %d, leaked %d, load %s; meanwhile broker %.2f s, loadtest %.2f s of CPU\n",
				b.name, round, r.rssMiB, float64(r.cpuPerRecord.Nanoseconds())/1e3, r.elapsed.Seconds(), r.first.Seconds(), r.lost, r.leaked, r.load,
				r.broker.Seconds(), r.loadtest.Seconds())
			if r.lost > 0 {
				fmt.Printf("           the loadtest: %s\n", r.lossLine)
			}
			if r.log != "" {
				fmt.Printf("           a slow start; the worker's log:\n%s\n", r.log)
			}
		}
	}
	summarize(cfg, all)
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("e2e", flag.ContinueOnError)
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds; each runs every binary once, in the order given")
	fs.IntVar(&cfg.records, "records", 1000000, "records preloaded")
	fs.StringVar(&cfg.loadtest, "loadtest", "", "kdedup binary whose loadtest preloads and verifies (default: the first binary)")
	fs.DurationVar(&cfg.poll, "poll", 10*time.Millisecond, "how often the output topic's end offsets are read")
	fs.DurationVar(&cfg.slow, "slow-start", 500*time.Millisecond, "a run whose first output record comes later than this after the worker started prints the worker's log")
	fs.Func("env", "VAR=value added to the worker's environment (repeatable)", func(s string) error {
		if !strings.Contains(s, "=") {
			return fmt.Errorf("want VAR=value, got %q", s)
		}
		cfg.env = append(cfg.env, s)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	for _, a := range fs.Args() {
		name, path, ok := strings.Cut(a, "=")
		if !ok || name == "" || path == "" {
			return cfg, fmt.Errorf("want NAME=BINARY, got %q", a)
		}
		cfg.bins = append(cfg.bins, binary{name, path})
	}
	if len(cfg.bins) == 0 {
		return cfg, errors.New("no binary: give NAME=BINARY ...")
	}
	if cfg.loadtest == "" {
		cfg.loadtest = cfg.bins[0].path
	}
	return cfg, nil
}

// run measures one binary on a fresh broker.
func run(cfg config, b binary) (result, error) {
	cl, err := embedkafka.Start(embedkafka.Options{Topics: map[string]int32{inTopic: partitions, outTopic: partitions}})
	if err != nil {
		return result{}, err
	}
	defer cl.Close()
	brokers := strings.Join(cl.Addrs(), ",")
	lt, err := startLoadtest(cfg, brokers)
	if err != nil {
		return result{}, err
	}
	defer lt.kill()
	if err := lt.waitSent(cfg.records); err != nil {
		return result{}, err
	}
	unique, err := distinctPerPartition(cl)
	if err != nil {
		return result{}, err
	}
	brokerCPU, ltCPU := selfCPU(), lt.cpu()
	r, err := measureWorker(cfg, b, cl, unique)
	if err != nil {
		return result{}, err
	}
	r.broker, r.loadtest = selfCPU()-brokerCPU, lt.cpu()-ltCPU
	if r.loadtest < 0 {
		r.loadtest = -1 // it ended before the worker did: not known
	}
	r.lost, r.leaked, r.lossLine, err = lt.verdict()
	r.load = loadAverage()
	return r, err
}

// measureWorker starts the worker and times it until its output is complete.
func measureWorker(cfg config, b binary, cl *embedkafka.Cluster, unique int64) (result, error) {
	brokers := strings.Join(cl.Addrs(), ",")
	addr, err := freeAddr()
	if err != nil {
		return result{}, err
	}
	cmd := exec.Command(b.path)
	cmd.Env = append([]string{"KAFKA_BROKERS=" + brokers, "KAFKA_INPUT_TOPIC=" + inTopic,
		"KAFKA_OUTPUT_TOPIC=" + outTopic, "HTTP_ADDR=" + addr, "DEDUP_KEY=json:id"}, cfg.env...)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	defer cmd.Wait() //nolint:errcheck // the exit status after SIGTERM says nothing more
	defer cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	var first time.Duration
	go func() { done <- waitDone(cl, unique, addr, cfg.records, cfg.poll, start, &first) }()
	select {
	case err = <-done:
	case <-time.After(10 * time.Minute):
		err = errors.New("the output was not complete after 10 minutes")
	}
	elapsed := time.Since(start)
	if err != nil {
		return result{}, fmt.Errorf("%w; worker log:\n%s", err, log.String())
	}
	cpu, rss, err := procUsage(cmd.Process.Pid)
	if err != nil {
		return result{}, err
	}
	r := result{rssMiB: rss, cpuPerRecord: cpu / time.Duration(cfg.records), elapsed: elapsed, first: first}
	if first > cfg.slow {
		cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // the log is read once the worker ended
		cmd.Wait()                          //nolint:errcheck // as the deferred Wait
		r.log = log.String()
	}
	return r, nil
}

// waitDone returns once the output topic holds unique records, or once the worker's metrics say
// that it produced or dropped all n input records: read once a second, and at every poll once the
// output is within a thousandth of unique (a run that dropped a unique event ends there).
// It stores in first how long after start the output first held a record.
func waitDone(cl *embedkafka.Cluster, unique int64, addr string, n int, every time.Duration, start time.Time, first *time.Duration) error {
	client := &http.Client{Timeout: 5 * time.Second}
	lastScrape := time.Now()
	for {
		var sum int64
		if out, err := cl.EndOffsets(context.Background(), outTopic); err == nil {
			for _, o := range out {
				sum += o
			}
			if sum > 0 && *first == 0 {
				*first = time.Since(start)
			}
			if sum >= unique {
				return nil
			}
		}
		if time.Since(lastScrape) >= time.Second || sum >= unique-unique/1000 {
			lastScrape = time.Now()
			if v, err := judged(client, "http://"+addr+"/metrics"); err == nil && v >= float64(n) {
				return nil
			}
		}
		time.Sleep(every)
	}
}

// distinctPerPartition reads the input topic and returns the number of distinct JSON ids summed
// over its partitions, plus the records without one: the records a worker with partition scope
// and its default DEDUP_UNKEYED_POLICY=pass produces when it loses none.
func distinctPerPartition(cl *embedkafka.Cluster) (int64, error) {
	ctx := context.Background()
	end, err := cl.EndOffsets(ctx, inTopic)
	if err != nil {
		return 0, err
	}
	var total int64
	for p, e := range end {
		seen := make(map[string]struct{})
		r := kafkaio.Range{Topic: inTopic, Partition: p, End: e}
		err := kafkaio.Read(ctx, cl.Client(), r, func(recs []kafkaio.Record) error {
			for _, m := range recs {
				var v struct {
					ID string `json:"id"`
				}
				if json.Unmarshal(m.Value, &v) != nil || v.ID == "" {
					total++ // no identity (the loadtest's end markers): passed on
					continue
				}
				seen[v.ID] = struct{}{}
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		total += int64(len(seen))
	}
	return total, nil
}

// judged sums kdedup_records_produced_total and kdedup_duplicates_total over their series.
func judged(client *http.Client, url string) (float64, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "kdedup_records_produced_total") && !strings.HasPrefix(line, "kdedup_duplicates_total") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// selfCPU returns this process's user + system CPU so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpu returns the loadtest's user + system CPU so far, or 0 once it is gone.
func (lt *loadtest) cpu() time.Duration {
	cpu, _, _ := procUsage(lt.cmd.Process.Pid)
	return cpu
}

// procUsage returns a process's user + system CPU and its peak RSS in MiB.
func procUsage(pid int) (time.Duration, float64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64) // field 14 of proc(5)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const tick = 10 * time.Millisecond // USER_HZ = 100 on Linux
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	var hwmKiB float64
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			hwmKiB, _ = strconv.ParseFloat(strings.Fields(rest)[0], 64)
		}
	}
	return time.Duration(ut+st) * tick, hwmKiB / 1024, nil
}

// loadtest is a running `kdedup loadtest` that preloads the input and verifies the output.
type loadtest struct {
	cmd   *exec.Cmd
	lines chan string
	out   []string
}

func startLoadtest(cfg config, brokers string) (*loadtest, error) {
	cmd := exec.Command(cfg.loadtest, "loadtest", "-brokers", brokers, "-input", inTopic, "-output", outTopic,
		"-count", strconv.Itoa(cfg.records), "-dups", "0.2", "-mix", "immediate=1", "-field", "json:id",
		"-window-count", "8", "-window-interval", "15m", "-fpr", "1e-6", "-settle", "20s")
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lt := &loadtest{cmd: cmd, lines: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lt.lines <- sc.Text()
		}
		close(lt.lines)
	}()
	go func() { pw.CloseWithError(cmd.Wait()) }()
	return lt, nil
}

// waitSent returns once the loadtest has sent all n records.
func (lt *loadtest) waitSent(n int) error {
	sent := fmt.Sprintf("sent %d/%d", n, n)
	for line := range lt.lines {
		lt.out = append(lt.out, line)
		if strings.Contains(line, sent) {
			return nil
		}
	}
	return fmt.Errorf("the loadtest ended before it sent its records:\n%s", strings.Join(lt.out, "\n"))
}

var (
	lostRE   = regexp.MustCompile(`^unique events .*: (\d+) lost`)
	leakedRE = regexp.MustCompile(`^duplicates .*: (\d+) leaked`)
)

// verdict waits for the loadtest to end and returns the lost and leaked events it reported, and its
// line on unique events (with the loss bound and the loss expected at the false-positive rate).
func (lt *loadtest) verdict() (lost, leaked int, lossLine string, err error) {
	lost, leaked = -1, -1
	for line := range lt.lines {
		lt.out = append(lt.out, line)
		if m := lostRE.FindStringSubmatch(line); m != nil {
			lost, _ = strconv.Atoi(m[1])
			lossLine = strings.TrimSpace(line)
		}
		if m := leakedRE.FindStringSubmatch(line); m != nil {
			leaked, _ = strconv.Atoi(m[1])
		}
	}
	if lost < 0 || leaked < 0 {
		return lost, leaked, "", fmt.Errorf("the loadtest reported no verdict:\n%s", strings.Join(lt.out, "\n"))
	}
	return lost, leaked, lossLine, nil
}

func (lt *loadtest) kill() {
	if lt.cmd.ProcessState == nil {
		lt.cmd.Process.Kill() //nolint:errcheck // it may have exited already
	}
	for range lt.lines {
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Fields(string(b) + " ?")[0]
}

// summarize prints each binary's medians and their ratios to the last binary given (the
// baseline), per measure.
func summarize(cfg config, all map[string][]result) {
	base := cfg.bins[len(cfg.bins)-1].name
	med := func(name string, f func(result) float64) float64 {
		v := make([]float64, 0, len(all[name]))
		for _, r := range all[name] {
			v = append(v, f(r))
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	rss := func(r result) float64 { return r.rssMiB }
	cpu := func(r result) float64 { return float64(r.cpuPerRecord.Nanoseconds()) / 1e3 }
	secs := func(r result) float64 { return r.elapsed.Seconds() }
	fmt.Printf("\nmedians of %d rounds; ratios to %s (events/s: %s's time over this one's)\n", cfg.rounds, base, base)
	for _, b := range cfg.bins {
		fmt.Printf("%-10s rss %.0f MiB (%.2f×), cpu %.3f µs/record (%.2f×), %.3f s (events/s %.2f×)\n", b.name,
			med(b.name, rss), med(b.name, rss)/med(base, rss), med(b.name, cpu), med(b.name, cpu)/med(base, cpu),
			med(b.name, secs), med(base, secs)/med(b.name, secs))
	}
}
