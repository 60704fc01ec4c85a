package loadtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// newClient returns a kafka-go client of conn whose requests time out after 30s; its client ID
// defaults to "kdedup-loadtest".
func newClient(conn kafkaio.Conn) *kafkaio.Client {
	if conn.ClientID == "" {
		conn.ClientID = "kdedup-loadtest"
	}
	return conn.Client(30 * time.Second)
}

// endOffsets returns the high watermark of partitions 0..n-1 of topic.
func endOffsets(ctx context.Context, client *kafkaio.Client, topic string, n int) ([]int64, error) {
	_, end, err := kafkaio.TopicOffsets(ctx, client, topic, n)
	return end, err
}

// Run generates cfg.Count records (plus one end marker per input partition) into the input
// topic, reads the output topic from its end offsets at the start, waits until every end marker
// arrived and the output was read up to its end (or nothing arrived for cfg.Settle after the
// last record was sent, or cfg.Timeout passed), and returns the verified report. Records of other
// runs in the output topic are ignored.
//
// Run returns an error, and no report, when cfg is invalid, the brokers or topics cannot be
// reached, producing fails after retries, or ctx is cancelled. Leaks, losses and order
// violations are not errors: they are in the report (Report.Pass is false).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.RunID == "" {
		cfg.RunID = strconv.FormatUint(cfg.Seed, 36) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	client := newClient(cfg.Conn)
	defer kafkaio.CloseIdle(client)

	runCtx := ctx
	var cancelRun context.CancelFunc = func() {}
	if cfg.Timeout > 0 {
		runCtx, cancelRun = context.WithTimeout(ctx, cfg.Timeout)
	}
	defer cancelRun()

	setupCtx, cancelSetup := context.WithTimeout(runCtx, 30*time.Second)
	topics := []string{cfg.InputTopic, cfg.OutputTopic, cfg.DeadLetterTopic, cfg.AuditTopic}
	topics = slices.DeleteFunc(topics, func(t string) bool { return t == "" })
	counts, err := kafkaio.PartitionCounts(setupCtx, client, topics...)
	if err == nil {
		starts := make([][]int64, len(topics)) // the end offsets of every topic but the input
		for i := 1; i < len(topics) && err == nil; i++ {
			starts[i], err = endOffsets(setupCtx, client, topics[i], counts[i])
		}
		if err == nil {
			var dlStarts, auditStarts []int64
			rest := starts[2:]
			if cfg.DeadLetterTopic != "" {
				dlStarts, rest = rest[0], rest[1:]
			}
			if cfg.AuditTopic != "" {
				auditStarts = rest[0]
			}
			cancelSetup()
			return run(ctx, runCtx, cfg, client, counts[0], starts[1], dlStarts, auditStarts)
		}
	}
	cancelSetup()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, err
}

// run is Run once the topics are known: it starts reading the output (startFetchers) and
// sending (send), runs the AfterSend hook, waits for the output (waitOutput), stops reading,
// reads the dead-letter topic from dlStarts (readDeadLetters) and verifies what arrived
// (buildReport).
func run(ctx, runCtx context.Context, cfg Config, client *kafkaio.Client, inParts int, starts, dlStarts, auditStarts []int64) (*Report, error) {
	start := time.Now()
	st := &outputState{markers: make([]atomic.Bool, inParts)}
	fetchers, stopFetch := startFetchers(ctx, cfg, client, st, starts, start)
	defer stopFetch()
	gen := newGenerator(cfg, client, inParts, start)
	prog := startProgress(cfg, start, gen, st, inParts)
	abort := func(err error) (*Report, error) {
		stopFetch()
		prog.stop("")
		return nil, err
	}

	incomplete, genEnd, err := send(ctx, runCtx, cfg, gen, start)
	if err != nil {
		return abort(err)
	}
	hooks := gen.hooks.wait()
	drainStart := int64(-1)
	if incomplete == "" && cfg.AfterSend != nil {
		if err := cfg.AfterSend(runCtx); err != nil {
			return abort(err)
		}
		drainStart = int64(time.Since(start))
		genEnd = time.Duration(drainStart)
	}

	// Wait for the output: every end marker, then everything up to the output's end offsets.
	note := ""
	if incomplete == "" {
		var complete bool
		note, complete = waitOutput(ctx, runCtx, cfg, client, st, fetchers, inParts, genEnd, start)
		if !complete {
			incomplete, note = note, ""
		}
	}
	if ctx.Err() != nil {
		return abort(ctx.Err())
	}
	end := int64(time.Since(start))
	stopFetch()
	deadLetters, err := readDeadLetters(ctx, cfg, client, dlStarts)
	if err != nil {
		return abort(err)
	}
	audit, err := readAudit(ctx, cfg, client, auditStarts)
	if err != nil {
		return abort(err)
	}
	prog.stop("done")

	r := buildReport(cfg, gen, st, fetchers, inParts, start, end, drainStart, deadLetters, audit)
	r.Incomplete = incomplete
	if note != "" {
		r.Notes = append(r.Notes, note)
	}
	r.Hooks = hooks
	r.Judge()
	for _, h := range hooks {
		if h.Error != "" {
			r.AddFailure(h.failure())
		}
	}
	return r, nil
}

// startFetchers starts reading every output partition p from starts[p], until stop is called;
// stop waits for the readers to end.
func startFetchers(ctx context.Context, cfg Config, client *kafkaio.Client, st *outputState, starts []int64, start time.Time) (fetchers []*fetcher, stop func()) {
	fetchCtx, stopFetch := context.WithCancel(context.WithoutCancel(ctx))
	pool := kafkaio.NewFetchPool(client, kafkaio.FetchPoolConfig{MaxWait: fetchMaxWait})
	fetchers = make([]*fetcher, len(starts))
	var wg sync.WaitGroup
	for p, off := range starts {
		f := &fetcher{
			client: client, pool: pool, topic: cfg.OutputTopic, part: p, offset: off, start: start,
			runID: []byte(cfg.RunID), markHeader: cfg.MarkHeader, count: int64(cfg.Count), st: st,
		}
		f.pos.Store(off)
		fetchers[p] = f
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.run(fetchCtx)
		}()
	}
	return fetchers, func() {
		stopFetch()
		wg.Wait()
		pool.Close()
	}
}

// send runs the generator. A run that timed out while sending is not an error: it is incomplete,
// with the reason. It returns when sending ended, since start.
func send(ctx, runCtx context.Context, cfg Config, gen *generator, start time.Time) (incomplete string, genEnd time.Duration, err error) {
	genErr := gen.run(runCtx)
	genEnd = time.Since(start)
	switch {
	case genErr == nil:
		return "", genEnd, nil
	case ctx.Err() != nil:
		return "", genEnd, ctx.Err()
	case !errors.Is(genErr, context.DeadlineExceeded):
		return "", genEnd, genErr
	}
	return fmt.Sprintf("timed out after %v while sending (%d of %d records created)", cfg.Timeout, gen.created.Load(), cfg.Count), genEnd, nil
}

// buildReport verifies what the fetchers read until end (and deadLetters, what the dead-letter
// topic held) against what gen sent and returns the report, not yet judged. drainStart (-1:
// none) is when the AfterSend hook returned.
func buildReport(cfg Config, gen *generator, st *outputState, fetchers []*fetcher, inParts int, start time.Time, end, drainStart int64,
	deadLetters map[int64]bool, audit []AuditRec) *Report {
	obs := make([][]Obs, len(fetchers))
	for i, f := range fetchers {
		obs[i] = f.out
	}
	width := cfg.BucketWidth
	if width == 0 {
		width = niceWidth(time.Duration(end))
	}
	vo := verify(verifyInput{
		sent: gen.log, obs: obs, end: end, width: width, deadLetters: deadLetters, audit: audit, sources: cfg.Sources, seed: cfg.Seed,
		expect: Expect{
			WindowCount: cfg.WindowCount, WindowInterval: cfg.WindowInterval, Global: cfg.Global,
			ExpectAll: cfg.ExpectAll, FalsePositiveRate: cfg.FalsePositiveRate, Refresh: cfg.Refresh,
		},
	})
	r := newReport(cfg, inParts, len(fetchers), start, time.Duration(end), vo, width)
	acked := make([]int64, len(gen.ackedAt))
	for i := range acked {
		acked[i] = gen.ackedAt[i].Load()
	}
	r.LatencyParts = latencyParts(gen.log, acked, obs)
	if drainStart >= 0 && vo.lastSeen > drainStart {
		d := time.Duration(vo.lastSeen - drainStart)
		r.Throughput.DrainSeconds = d.Seconds()
		r.Throughput.DrainRate = float64(vo.verdict.Records) / d.Seconds()
	}
	r.ProduceErrors = int(gen.errors.Load())
	r.FetchErrors = int(st.errors.Load())
	r.Foreign = int(st.foreign.Load())
	return r
}

// waitOutput waits until the output is complete. It returns complete=false with the reason when
// the run timed out or was interrupted, and complete=true with a note when it stopped waiting
// because nothing arrived for cfg.Settle.
func waitOutput(ctx, runCtx context.Context, cfg Config, client *kafkaio.Client, st *outputState, fetchers []*fetcher,
	inParts int, genEnd time.Duration, start time.Time) (reason string, complete bool) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var target []int64 // output end offsets once every marker arrived
	for {
		select {
		case <-runCtx.Done():
			if ctx.Err() != nil {
				return "interrupted", false
			}
			return fmt.Sprintf("timed out after %v waiting for the output (%d of %d end markers seen)", cfg.Timeout, st.nMarkers.Load(), inParts), false
		case <-tick.C:
		}
		if target == nil && st.nMarkers.Load() == int64(inParts) {
			octx, cancel := context.WithTimeout(runCtx, 10*time.Second)
			ends, err := endOffsets(octx, client, cfg.OutputTopic, len(fetchers))
			cancel()
			if err == nil {
				target = ends
			}
		}
		if target != nil {
			caughtUp := true
			for p, f := range fetchers {
				if f.pos.Load() < target[p] {
					caughtUp = false
				}
			}
			if caughtUp {
				return "", true
			}
		}
		last := max(time.Duration(st.lastAt.Load()), genEnd)
		if idle := time.Since(start) - last; idle > cfg.Settle {
			if target != nil {
				return fmt.Sprintf("the output was not read up to its end offsets within %v", cfg.Settle), false
			}
			if st.observed.Load() == 0 && st.nMarkers.Load() == 0 {
				return fmt.Sprintf("nothing of this run arrived in the output topic within %v after the last record was sent: is the worker running and consuming %q?",
					cfg.Settle, cfg.InputTopic), true
			}
			return fmt.Sprintf("only %d of %d end markers arrived (nothing new for %v; DEDUP_UNKEYED_POLICY=drop drops them, and a partition blocked at a refused record never delivers its own): records near the end are judged with looser bounds",
				st.nMarkers.Load(), inParts, cfg.Settle), true
		}
	}
}
