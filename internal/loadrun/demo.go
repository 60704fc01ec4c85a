package loadrun

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kdedup/kdedup/internal/app"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/scrape"
)

// The demo's topics and consumer group.
const demoIn, demoOut, demoGroup = "orders", "orders-dedup", "kdedup-demo"

// demoCounters are the worker's counters the demo prints, summed over their partitions.
var demoCounters = []string{"kdedup_records_consumed_total", "kdedup_records_produced_total", "kdedup_duplicates_total"}

// demoFlags are the flags of `kdedup demo`.
type demoFlags struct {
	records, partitions int
	dupRate             float64
	httpAddr            string
	linger              time.Duration
	verbose             bool
}

// Demo runs `kdedup demo` with its flags args: it starts an embedded Kafka-protocol broker,
// produces a stream with duplicates, runs the real worker (configured through the same
// environment parsing as production) against it, and prints what went in and out. It returns the
// exit status: 0 when no duplicate was let through, 1 on a failure, 2 on bad flags.
func Demo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, ok := parseDemoFlags(args, stderr)
	if !ok {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "kdedup demo: "+format+"\n", a...)
		return 1
	}
	cl, err := embedkafka.Start(embedkafka.Options{Topics: map[string]int32{demoIn: int32(f.partitions), demoOut: int32(f.partitions)}})
	if err != nil {
		return fail("%v", err)
	}
	defer cl.Close()
	ln, err := net.Listen("tcp", f.httpAddr)
	if err != nil {
		return fail("listen %s: %v", f.httpAddr, err)
	}
	cfg, err := demoConfig(cl.Addrs(), ln.Addr().String(), f.records)
	if err != nil {
		ln.Close()
		return fail("%v", err)
	}
	level := slog.LevelWarn
	if f.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "embedded broker: %s (topics %q -> %q, %d partitions each)\n", strings.Join(cl.Addrs(), ","), demoIn, demoOut, f.partitions)
	fmt.Fprintf(stdout, "metrics:         %s/metrics   (health: %s/healthz, %s/readyz)\n", base, base, base)

	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	exit := make(chan int, 1)
	go func() { exit <- app.Serve(workerCtx, cfg, ln, log) }()

	began := time.Now()
	dups, err := produceOrders(ctx, cl, f.records, f.partitions, f.dupRate)
	if err != nil {
		return fail("%v", err)
	}
	fmt.Fprintf(stdout, "produced:        %d records to %q, %d of them re-sent orders (duplicates by construction)\n", f.records, demoIn, dups)
	if err := waitCommitted(ctx, cl, f.records, exit); err != nil {
		return fail("%v", err)
	}
	elapsed := time.Since(began)
	if err := printDemoResult(ctx, stdout, cl, base, f.records, dups, elapsed); err != nil {
		return fail("%v", err)
	}
	if f.linger > 0 {
		fmt.Fprintf(stdout, "lingering %v: the worker, /metrics and the broker (%s) stay up; Ctrl-C to stop\n", f.linger, strings.Join(cl.Addrs(), ","))
		select {
		case <-time.After(f.linger):
		case <-ctx.Done():
		}
	}
	stopWorker()
	if code := <-exit; code != 0 {
		return fail("worker exited with status %d", code)
	}
	return 0
}

// parseDemoFlags parses args; ok is false on bad flags, reported on stderr.
func parseDemoFlags(args []string, stderr io.Writer) (f demoFlags, ok bool) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&f.records, "records", 20000, "number of records to produce")
	fs.IntVar(&f.partitions, "partitions", 4, "partitions of the input and output topics")
	fs.Float64Var(&f.dupRate, "dups", 0.25, "fraction of records that re-send an earlier order")
	fs.StringVar(&f.httpAddr, "http", "127.0.0.1:0", "listen address of /metrics, /healthz and /readyz (port 0: any free port)")
	fs.DurationVar(&f.linger, "linger", 0, "keep the worker, its HTTP server and the broker up this long after the run, to look at /metrics")
	fs.BoolVar(&f.verbose, "v", false, "show the worker's info-level logs")
	if err := fs.Parse(args); err != nil {
		return f, false
	}
	if f.records < 1 || f.partitions < 1 || f.dupRate < 0 || f.dupRate >= 1 {
		fmt.Fprintln(stderr, "kdedup demo: need -records >= 1, -partitions >= 1 and 0 <= -dups < 1")
		return f, false
	}
	return f, true
}

// demoConfig returns the worker's configuration for the demo, through the same parsing as
// production: brokers, HTTP address and a window that holds every record.
func demoConfig(brokers []string, httpAddr string, records int) (app.Config, error) {
	return app.Load(map[string]string{
		"KAFKA_BROKERS":            strings.Join(brokers, ","),
		"KAFKA_INPUT_TOPIC":        demoIn,
		"KAFKA_OUTPUT_TOPIC":       demoOut,
		"KAFKA_GROUP_ID":           demoGroup,
		"KAFKA_SESSION_TIMEOUT":    "3s",
		"KAFKA_HEARTBEAT_INTERVAL": "300ms",
		"KAFKA_COMMIT_INTERVAL":    "100ms",
		"DEDUP_KEY":                "key",
		"DEDUP_WINDOW_INTERVAL":    "1m",
		"DEDUP_WINDOW_CAPACITY":    strconv.Itoa(max(records, 1000)),
		"HTTP_ADDR":                httpAddr,
		"SHUTDOWN_TIMEOUT":         "10s",
	})
}

// produceOrders produces records orders keyed by order ID to the demo's input topic, placed like
// a Java producer would (murmur2), so that a re-sent order lands on the partition of the
// original. A duplicate (a share dupRate of the records) re-sends one of the last 1000 orders:
// well inside the window. It returns the number of duplicates.
func produceOrders(ctx context.Context, cl *embedkafka.Cluster, records, partitions int, dupRate float64) (int, error) {
	rng := rand.New(rand.NewPCG(2024, 7))
	byPart := make([][]kafkaio.Record, partitions)
	parts := make([]int, partitions)
	for i := range parts {
		parts[i] = i
	}
	var ids []int
	dups := 0
	for i := range records {
		id := len(ids)
		if len(ids) > 0 && rng.Float64() < dupRate {
			id = ids[max(0, len(ids)-1000)+rng.IntN(min(len(ids), 1000))]
			dups++
		} else {
			ids = append(ids, id)
		}
		m := kafkaio.Record{
			Key:     []byte(fmt.Sprintf("order-%06d", id)),
			Value:   []byte(fmt.Sprintf(`{"order":{"id":"order-%06d","amount":%d},"attempt":%d}`, id, 10+id%990, i)),
			Headers: []kafkaio.Header{{Key: "source", Value: []byte("demo")}},
			Time:    time.Now(),
		}
		p := kafkaio.KeyPartition(m.Key, parts...)
		byPart[p] = append(byPart[p], m)
	}
	var wg sync.WaitGroup
	errs := make(chan error, partitions)
	for p, msgs := range byPart {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cl.Produce(ctx, demoIn, p, msgs...); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return dups, <-errs
}

// waitCommitted waits until the worker committed every one of the records, within 50s. It fails
// when the worker exits (status on exit) or ctx ends.
func waitCommitted(ctx context.Context, cl *embedkafka.Cluster, records int, exit <-chan int) error {
	deadline := time.Now().Add(50 * time.Second)
	for {
		com, err := cl.Committed(ctx, demoGroup, demoIn)
		done := 0
		if err == nil {
			for _, o := range com {
				done += int(max(o, 0))
			}
		}
		if done == records {
			return nil
		}
		select {
		case code := <-exit:
			return fmt.Errorf("worker exited early with status %d", code)
		case <-ctx.Done():
			return errors.New("interrupted")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("worker did not catch up within 50s (%d of %d committed)", done, records)
		}
	}
}

// printDemoResult prints what went in and out, and what the worker's /metrics at base say. It
// fails when duplicates were let through.
func printDemoResult(ctx context.Context, stdout io.Writer, cl *embedkafka.Cluster, base string, records, dups int, elapsed time.Duration) error {
	scraped := scrape.Totals(base+"/metrics", demoCounters...)
	ends, err := cl.EndOffsets(context.WithoutCancel(ctx), demoOut)
	if err != nil {
		return err
	}
	produced := 0
	for _, e := range ends {
		produced += int(e)
	}
	dropped := records - produced
	fmt.Fprintf(stdout, "records in:      %d\n", records)
	fmt.Fprintf(stdout, "records out:     %d (to %q)\n", produced, demoOut)
	fmt.Fprintf(stdout, "dropped:         %d duplicates\n", dropped)
	fmt.Fprintf(stdout, "duplicate rate:  %.2f%%\n", 100*float64(dropped)/float64(records))
	fmt.Fprintf(stdout, "elapsed:         %v (%.0f records/s, produce to commit)\n", elapsed.Round(time.Millisecond), float64(records)/elapsed.Seconds())
	if scraped != nil {
		parts := make([]string, len(demoCounters))
		for i, n := range demoCounters {
			parts[i] = fmt.Sprintf("%s %.0f", n, scraped[n])
		}
		fmt.Fprintf(stdout, "from /metrics:   %s\n", strings.Join(parts, ", "))
	}
	switch {
	case dropped < dups:
		return fmt.Errorf("%d duplicates were let through", dups-dropped)
	case dropped > dups:
		// Only a filter false positive can do this; at the default rate it is very unlikely.
		fmt.Fprintf(stdout, "note:            %d unique records were taken for duplicates (filter false positives)\n", dropped-dups)
	}
	return nil
}
