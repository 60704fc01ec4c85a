package app

// Scale-out tests: three replicas of the real binary (cmd/kdedup, built by kdedupBinary) in one
// consumer group on an embedded broker, while records flow: a replica joins a group of two, one
// leaves with SIGTERM, one is killed with SIGKILL, and one comes back. The filters must follow the
// partitions through every move, with snapshots in a directory per replica (which leaves only the
// rebuild from the output topic to a replica that gets a partition it never had), in a shared
// directory, or in an S3-compatible store (a moto_server process).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint/s3test"
	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

const scalePartitions = 12

// scaleStream generates records spread at random over the input partitions, about dupRate of
// which repeat the identity of an earlier record of the same partition; values are the record's
// sequence number, so that order can be checked per partition. It is used by one goroutine.
type scaleStream struct {
	rng     *rand.Rand
	dupRate float64
	n       int
	byPart  [scalePartitions][]string
	unique  map[string]bool
}

func (s *scaleStream) next() (int, kafkaio.Record) {
	p := s.rng.IntN(scalePartitions)
	var id string
	if pool := s.byPart[p]; len(pool) > 0 && s.rng.Float64() < s.dupRate {
		id = pool[s.rng.IntN(len(pool))]
	} else {
		id = fmt.Sprintf("ev-%07d", s.n)
		s.unique[id] = true
		s.byPart[p] = append(s.byPart[p], id)
	}
	m := kafkaio.Record{Key: []byte(id), Value: []byte(strconv.Itoa(s.n))}
	s.n++
	return p, m
}

// produceUntil writes rounds of per records from s to the input topic, one round every pause
// (pacing only: the test orders its events by output progress), until stop is closed. It sends
// its result to done; s is the caller's again after that.
func produceUntil(cl testbroker.Broker, s *scaleStream, per int, pause time.Duration, stop <-chan struct{}, done chan<- error) {
	t := time.NewTicker(pause)
	defer t.Stop()
	for {
		var byPart [scalePartitions][]kafkaio.Record
		for range per {
			p, m := s.next()
			byPart[p] = append(byPart[p], m)
		}
		for p, msgs := range byPart {
			if err := cl.Produce(context.Background(), cl.Name("in"), p, msgs...); err != nil {
				done <- err
				return
			}
		}
		select {
		case <-stop:
			done <- nil
			return
		case <-t.C:
		}
	}
}

// stallMonitor polls the end offsets of the output partitions and records, for every partition,
// each stretch of time its output did not grow (while the test produces, every partition gets
// records every round): the pause a rebalance causes. Gaps are filed under the phase in which they
// ended.
type stallMonitor struct {
	mu    sync.Mutex
	phase string
	gaps  map[string][]time.Duration // phase → the longest gap of each partition in it
	// byPart: phase → partition → its longest gap in it
	byPart map[string]map[int]time.Duration
	stop   chan struct{}
	done   chan struct{}
}

func startStallMonitor(cl testbroker.Broker) *stallMonitor {
	m := &stallMonitor{phase: "start", gaps: map[string][]time.Duration{}, stop: make(chan struct{}), done: make(chan struct{})}
	go m.run(cl)
	return m
}

func (m *stallMonitor) setPhase(p string) {
	m.mu.Lock()
	m.phase = p
	m.mu.Unlock()
}

func (m *stallMonitor) run(cl testbroker.Broker) {
	defer close(m.done)
	last := map[int]int64{}
	grew := map[int]time.Time{}
	longest := map[string]map[int]time.Duration{}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			m.mu.Lock()
			for phase, byPart := range longest {
				m.gaps[phase] = slices.Sorted(maps.Values(byPart))
			}
			m.byPart = longest
			m.mu.Unlock()
			return
		case <-tick.C:
		}
		ends, err := cl.EndOffsets(context.Background(), cl.Name("out"))
		if err != nil {
			continue
		}
		now := time.Now()
		m.mu.Lock()
		phase := m.phase
		m.mu.Unlock()
		for p, e := range ends {
			if e == last[p] {
				continue
			}
			if since, ok := grew[p]; ok {
				if longest[phase] == nil {
					longest[phase] = map[int]time.Duration{}
				}
				longest[phase][p] = max(longest[phase][p], now.Sub(since))
			}
			last[p], grew[p] = e, now
		}
	}
}

// finish stops the monitor and returns, per phase, the longest output gap of each partition that
// resumed in it, sorted.
func (m *stallMonitor) finish() map[string][]time.Duration {
	close(m.stop)
	<-m.done
	return m.gaps
}

// genLine is what a worker's log says about one consumer group generation it took part in: the
// partitions it got, and the restores that followed, by outcome.
type genLine struct {
	gen      int
	parts    []int
	kept     []int // the partitions that kept running from the generation before (cooperative)
	restores map[string]int
	rebuilt  int
}

// workerLog is a worker's log, parsed: its generations, its partition releases and rebuilds.
type workerLog struct {
	gens         []genLine
	releases     int
	longest      time.Duration // the longest partition release
	releaseFails []string
	errors       []string
}

func parseWorkerLog(log string) workerLog {
	var wl workerLog
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Level, Msg, Outcome, State, Took string
			Generation                       int
			Partitions, Kept                 []int
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		cur := func() *genLine {
			if len(wl.gens) == 0 {
				wl.gens = append(wl.gens, genLine{gen: -1, restores: map[string]int{}})
			}
			return &wl.gens[len(wl.gens)-1]
		}
		switch line.Msg {
		case "generation started":
			wl.gens = append(wl.gens, genLine{gen: line.Generation, parts: line.Partitions, kept: line.Kept, restores: map[string]int{}})
		case "state restored":
			cur().restores[line.Outcome]++
		case "filter rebuilt from the output topic":
			cur().rebuilt++
		case "partition released":
			wl.releases++
			if d, err := time.ParseDuration(line.Took); err == nil {
				wl.longest = max(wl.longest, d)
			}
			if line.State != "revoked" {
				wl.releaseFails = append(wl.releaseFails, sc.Text())
			}
		}
		if line.Level == "ERROR" {
			wl.errors = append(wl.errors, sc.Text())
		}
	}
	return wl
}

// generation returns the worker's line for generation g.
func (wl workerLog) generation(g int) (genLine, bool) {
	for _, l := range wl.gens {
		if l.gen == g {
			return l, true
		}
	}
	return genLine{}, false
}

// scaleVariant is where the replicas keep their snapshots.
type scaleVariant string

const (
	perReplica scaleVariant = "per-replica directories"
	sharedDir  scaleVariant = "shared directory"
	objectS3   scaleVariant = "s3"
	// noRebuild is perReplica with CHECKPOINT_REBUILD_MAX_RECORDS=0: the baseline that shows
	// what the rebuild prevents (KDEDUP_SCALEOUT_BASELINE=1).
	noRebuild scaleVariant = "per-replica directories without rebuild"
)

// scaleRun is one run of the scale-out scenario.
type scaleRun struct {
	t       *testing.T
	cl      testbroker.Broker
	variant scaleVariant
	base    map[string]string
	dirs    map[string]string // replica name → its directory (per-replica variant)
	workers map[string]*worker
	mon     *stallMonitor
	began   time.Time
}

// environ returns replica name's environment.
func (r *scaleRun) environ(name string) map[string]string {
	e := maps.Clone(r.base)
	if r.variant == perReplica || r.variant == noRebuild {
		if r.dirs[name] == "" {
			r.dirs[name] = r.t.TempDir()
		}
		e["CHECKPOINT_DIR"] = r.dirs[name]
	}
	return e
}

func (r *scaleRun) start(name string) *worker {
	w := startWorker(r.t, r.environ(name))
	r.workers[name] = w
	return w
}

// progress waits until the output grew by at least n records since it was called, in every
// partition by at least n/(2·partitions) (so every partition resumed after the last event), with w
// (a running worker) alive.
func (r *scaleRun) progress(w *worker, n int64, what string) {
	r.t.Helper()
	ends := func() map[int]int64 {
		e, err := r.cl.EndOffsets(context.Background(), r.cl.Name("out"))
		if err != nil {
			return nil
		}
		return e
	}
	from, total := ends(), outputTotal(r.cl)
	each := max(1, n/(2*scalePartitions))
	waitFor(r.t, w, 60*time.Second, what, func() bool {
		now := ends()
		for p, e := range from {
			if now[p] < e+each {
				return false
			}
		}
		return now != nil && outputTotal(r.cl) >= total+n
	})
	r.t.Logf("%v: %s (%d output records)", time.Since(r.began).Round(time.Millisecond), what, outputTotal(r.cl))
}

// inGeneration waits until every worker of names logged one generation whose partitions cover all
// of them, with each worker of names having at least one, and returns it.
func (r *scaleRun) inGeneration(alive *worker, what string, names ...string) int {
	r.t.Helper()
	gen := -1
	waitFor(r.t, alive, 60*time.Second, what, func() bool {
		logs := map[string]workerLog{}
		for _, n := range names {
			logs[n] = parseWorkerLog(r.workers[n].stderr.String())
		}
		last := logs[names[0]].gens
		if len(last) == 0 {
			return false
		}
		g := last[len(last)-1].gen
		covered := 0
		for _, n := range names {
			l, ok := logs[n].generation(g)
			if !ok || len(l.parts) == 0 {
				return false
			}
			covered += len(l.parts)
		}
		gen = g
		return covered == scalePartitions
	})
	return gen
}

// prepared waits until the workers of names logged how the state of each of their partitions in
// generation g was prepared (a restore or a rebuild), or that it kept running from the generation
// before (the cooperative protocol).
func (r *scaleRun) prepared(alive *worker, g int, names ...string) {
	r.t.Helper()
	waitFor(r.t, alive, 60*time.Second, "the partitions' state prepared", func() bool {
		for _, n := range names {
			l, _ := parseWorkerLog(r.workers[n].stderr.String()).generation(g)
			done := l.rebuilt + len(l.kept) // kept: running since the generation before (cooperative)
			for _, c := range l.restores {
				done += c
			}
			if done < len(l.parts) {
				return false
			}
		}
		return true
	})
}

// owners returns partition → replica in generation g.
func (r *scaleRun) owners(g int, names ...string) map[int]string {
	out := map[int]string{}
	for _, n := range names {
		l, _ := parseWorkerLog(r.workers[n].stderr.String()).generation(g)
		for _, p := range l.parts {
			out[p] = n
		}
	}
	return out
}

// scaleResult is what a scale-out run measured.
type scaleResult struct {
	outputCheck
	unique, produced int
	moved            int             // partitions that changed owner when the third replica joined
	stayed           []int           // partitions that did not
	stayedStalls     []time.Duration // the join's output pause of each partition that stayed, sorted
	retained, loaded int             // at the join, partitions kept in memory or running / restored from the store, on the two old replicas
	rebuilt          int             // filters rebuilt from the output topic, all replicas
	restores         map[string]int  // every restore by outcome
	longestRelease   time.Duration   // the longest partition release
	releases         int             // partition releases logged
	stalls           map[string][]time.Duration
	disorder         []string // output partitions whose records are out of input order
	problems         []string // failed releases, checkpoint and revoke errors logged by the workers
	otherErrors      []string // other errors the workers logged (transient broker errors under load)
	took             time.Duration
}

// run plays the scenario: w1 and w2 start; w3 joins; w1 leaves with SIGTERM; w2 is killed; w1
// comes back (with its own directory again); then production stops, the group catches up and
// the two last replicas stop with SIGTERM. Every step waits for output progress, not for time.
func (r *scaleRun) run(records, per int, seed uint64) scaleResult {
	t := r.t
	r.began = time.Now()
	stream := &scaleStream{rng: rand.New(rand.NewPCG(seed, 0x7363616c65)), dupRate: 0.3, unique: map[string]bool{}}
	stop, produced := make(chan struct{}), make(chan error, 1)
	r.mon = startStallMonitor(r.cl)
	go produceUntil(r.cl, stream, per, 25*time.Millisecond, stop, produced)
	step := int64(records / 8)
	var res scaleResult

	w1, w2 := r.start("w1"), r.start("w2")
	g0 := r.inGeneration(w1, "w1 and w2 share the partitions", "w1", "w2")
	r.progress(w1, step, "w1 and w2 consume")

	r.mon.setPhase("join")
	w3 := r.start("w3")
	g1 := r.inGeneration(w3, "w3 joined", "w1", "w2", "w3")
	r.progress(w3, step, "three replicas consume")
	r.prepared(w3, g1, "w1", "w2")
	res.moved = r.countMoves(g0, g1, &res)

	r.mon.setPhase("SIGTERM")
	w1.signal(t, syscall.SIGTERM)
	if code := w1.wait(t, 20*time.Second); code != 0 {
		t.Errorf("w1: exit status %d after SIGTERM, want 0; log:\n%s", code, tail(w1.stderr.String(), 30))
	}
	r.inGeneration(w3, "w2 and w3 took over from w1", "w2", "w3")
	r.progress(w3, step, "w1 left")

	r.mon.setPhase("SIGKILL")
	w2.signal(t, syscall.SIGKILL)
	w2.wait(t, 10*time.Second)
	r.inGeneration(w3, "w3 took over from the killed w2", "w3")
	r.progress(w3, step, "w2 killed")

	r.mon.setPhase("rejoin")
	r.workers["w1"] = nil
	w1b := r.start("w1")
	r.inGeneration(w1b, "w1 came back", "w1", "w3")
	r.progress(w1b, step, "w1 back")

	r.mon.setPhase("end")
	close(stop)
	if err := <-produced; err != nil {
		t.Fatalf("producing: %v", err)
	}
	waitFor(t, w1b, 60*time.Second, "the group to catch up", func() bool { return caughtUp(r.cl) })
	for _, w := range []*worker{w3, w1b} {
		w.signal(t, syscall.SIGTERM)
	}
	for _, w := range []*worker{w3, w1b} {
		if code := w.wait(t, 20*time.Second); code != 0 {
			t.Errorf("exit status %d after SIGTERM, want 0; log:\n%s", code, tail(w.stderr.String(), 30))
		}
	}
	res.stalls = r.mon.finish()
	for _, p := range res.stayed {
		res.stayedStalls = append(res.stayedStalls, r.mon.byPart["join"][p])
	}
	slices.Sort(res.stayedStalls)
	res.unique, res.produced = len(stream.unique), stream.n
	res.outputCheck = checkOutput(t, r.cl, stream.unique)
	res.disorder = r.checkOrder()
	r.summarize(&res, []*worker{w1, w2, w3, w1b})
	res.took = time.Since(r.began)
	return res
}

// countMoves compares the owners of generations g0 (w1, w2) and g1 (w1, w2, w3), and counts on
// w1 and w2 the partitions they kept and reused in memory, and those restored from the store.
func (r *scaleRun) countMoves(g0, g1 int, res *scaleResult) int {
	before, after := r.owners(g0, "w1", "w2"), r.owners(g1, "w1", "w2", "w3")
	moved := 0
	for p := range scalePartitions {
		if before[p] != after[p] {
			moved++
		} else {
			res.stayed = append(res.stayed, p)
		}
	}
	for _, n := range []string{"w1", "w2"} {
		l, _ := parseWorkerLog(r.workers[n].stderr.String()).generation(g1)
		res.retained += l.restores["retained"] + len(l.kept)
		res.loaded += l.restores["warm"] + l.restores["fallback"]
	}
	r.t.Logf("join: generation %d %v → generation %d %v: %d partitions moved", g0, before, g1, after, moved)
	return moved
}

// checkOrder returns the output partitions whose records are not in input order (values are
// sequence numbers, increasing within an input partition).
func (r *scaleRun) checkOrder() []string {
	got, err := r.cl.ReadAll(context.Background(), r.cl.Name("out"))
	if err != nil {
		r.t.Fatal(err)
	}
	var bad []string
	for p, msgs := range got {
		prev := -1
		for _, m := range msgs {
			v, _ := strconv.Atoi(string(m.Value))
			if v <= prev {
				bad = append(bad, fmt.Sprintf("partition %d: %d after %d", p, v, prev))
				break
			}
			prev = v
		}
	}
	return bad
}

func (r *scaleRun) summarize(res *scaleResult, ws []*worker) {
	res.restores = map[string]int{}
	for _, w := range ws {
		wl := parseWorkerLog(w.stderr.String())
		for _, g := range wl.gens {
			for o, n := range g.restores {
				res.restores[o] += n
			}
			res.rebuilt += g.rebuilt
		}
		res.releases += wl.releases
		res.longestRelease = max(res.longestRelease, wl.longest)
		res.problems = append(res.problems, wl.releaseFails...)
		for _, e := range wl.errors {
			if strings.Contains(e, "checkpoint") || strings.Contains(e, "revoke") || strings.Contains(e, "release") {
				res.problems = append(res.problems, e)
			} else {
				res.otherErrors = append(res.otherErrors, e)
			}
		}
	}
}

// describeStalls formats, per phase, the median and the longest of the partitions' longest output
// gaps.
func describeStalls(stalls map[string][]time.Duration) string {
	var b strings.Builder
	for _, phase := range []string{"join", "SIGTERM", "SIGKILL", "rejoin"} {
		g := stalls[phase]
		if len(g) == 0 {
			fmt.Fprintf(&b, " %s: -", phase)
			continue
		}
		sort.Slice(g, func(i, j int) bool { return g[i] < g[j] })
		fmt.Fprintf(&b, " %s: median %v, max %v;", phase, g[len(g)/2].Round(time.Millisecond), g[len(g)-1].Round(time.Millisecond))
	}
	return b.String()
}

// describeGaps formats the median and the longest of sorted gaps.
func describeGaps(g []time.Duration) string {
	if len(g) == 0 {
		return "-"
	}
	return fmt.Sprintf("median %v, max %v", g[len(g)/2].Round(time.Millisecond), g[len(g)-1].Round(time.Millisecond))
}

// TestScaleOut runs the scale-out scenario with each kind of checkpoint store and proves that no
// duplicate leaks and no record is lost (the false-positive rate of 1e-9 over ~40k identities
// makes the allowance 0), that the output keeps the input order of every partition, that a
// replica joining a group of two moves at most ⌈P/3⌉+1 partitions, that the partitions that stay
// are reused from memory and not restored, and that every partition is released within the
// release budget. It logs the output pause each event caused. Under -short it runs only the
// shared-directory variant, with fewer records. KDEDUP_SCALEOUT_BASELINE=1 adds the per-replica
// variant without the rebuild and asserts that it leaks duplicates, which shows that the scenario
// exercises what the rebuild protects against. KDEDUP_SCALEOUT_EAGER=1 runs every variant a second
// time with KAFKA_GROUP_PROTOCOL=eager, the baseline of the cooperative default's pauses.
// KDEDUP_SCALEOUT_WORKER_ENV="NAME=value,..." adds
// to the workers' environment, for measurements with other windows, such as the default one:
//
//	KDEDUP_SCALEOUT_WORKER_ENV=DEDUP_WINDOW_COUNT=8,DEDUP_WINDOW_INTERVAL=15m,DEDUP_WINDOW_CAPACITY=1000000,DEDUP_FALSE_POSITIVE_RATE=1e-6 \
//	  go test ./internal/app -run TestScaleOut -v
func TestScaleOut(t *testing.T) {
	t.Parallel()
	variants := []scaleVariant{perReplica, sharedDir, objectS3}
	records, per := 40000, 100
	if testing.Short() {
		variants, records, per = []scaleVariant{sharedDir}, 8000, 40
	}
	if os.Getenv("KDEDUP_SCALEOUT_BASELINE") == "1" {
		variants = append(variants, noRebuild)
	}
	protocols := []string{""} // the default (cooperative)
	if os.Getenv("KDEDUP_SCALEOUT_EAGER") == "1" {
		protocols = append(protocols, "eager")
	}
	for _, v := range variants {
		for _, proto := range protocols {
			name := string(v)
			if proto != "" {
				name += ", " + proto
			}
			t.Run(name, func(t *testing.T) { scaleOut(t, v, proto, records, per) })
		}
	}
}

// scaleOut runs the scale-out scenario of variant v with the workers' KAFKA_GROUP_PROTOCOL set
// to proto (empty: the default), and checks its result (see TestScaleOut).
func scaleOut(t *testing.T, v scaleVariant, proto string, records, per int) {
	t.Parallel()
	cl := testbroker.Start(t, testbroker.Fake, testbroker.Options{Topics: map[string]int32{"in": scalePartitions, "out": scalePartitions}})
	base := restartEnviron(cl, "", "partition")
	base["CHECKPOINT_INTERVAL"] = "500ms"
	// A release budget of 8.9s: the race-built workers on a busy 2-core machine need it; a
	// rebalance still completes as soon as every member rejoined.
	base["KAFKA_REBALANCE_TIMEOUT"] = "10s"
	// A 6s session: under the restart tests' 1s one, a loaded machine's late heartbeats ended
	// generations (every partition of a replica discarded at once, counted as failed releases),
	// which is not what this test is about; a killed replica's partitions now move after 6s
	// instead of 1s.
	base["KAFKA_SESSION_TIMEOUT"], base["KAFKA_HEARTBEAT_INTERVAL"] = "6s", "300ms"
	if proto != "" {
		base["KAFKA_GROUP_PROTOCOL"] = proto
	}
	for _, kv := range strings.Split(os.Getenv("KDEDUP_SCALEOUT_WORKER_ENV"), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			base[k] = v
		}
	}
	if v == noRebuild {
		base["CHECKPOINT_REBUILD_MAX_RECORDS"] = "0"
	}
	sharedStore(t, v, "scaleout", base)
	r := &scaleRun{t: t, cl: cl, variant: v, base: base, dirs: map[string]string{}, workers: map[string]*worker{}}
	res := r.run(records, per, restartSeed(t))
	t.Logf("%s (protocol %q): %d records produced, %d distinct, %d output; %d leaked, %d lost; join moved %d partitions "+
		"(%d kept in memory, %d restored on the old replicas); restores %v, %d rebuilt from the output topic; "+
		"%d partition releases, the longest %v; output pause per partition:%s the join's of the %d partitions that stayed: %s; took %v",
		v, proto, res.produced, res.unique, res.records, res.leaked, res.lost, res.moved, res.retained, res.loaded,
		res.restores, res.rebuilt, res.releases, res.longestRelease, describeStalls(res.stalls), len(res.stayed),
		describeGaps(res.stayedStalls), res.took.Round(time.Millisecond))
	if v == noRebuild {
		if res.leaked == 0 {
			t.Error("no duplicate leaked without the rebuild: the scenario does not exercise moves to replicas without the snapshot")
		}
		return
	}
	res.wantNoLeak(t)
	res.wantNoLoss(t)
	for _, d := range res.disorder {
		t.Errorf("output out of input order: %s", d)
	}
	if limit := (scalePartitions+2)/3 + 1; res.moved > limit {
		t.Errorf("the join moved %d partitions, want at most ⌈%d/3⌉+1 = %d", res.moved, scalePartitions, limit)
	}
	if res.loaded != 0 || res.retained != scalePartitions-res.moved {
		t.Errorf("at the join the old replicas restored %d partitions from the store and kept %d in memory; want 0 and the %d that stayed",
			res.loaded, res.retained, scalePartitions-res.moved)
	}
	if v == perReplica && res.rebuilt == 0 {
		t.Error("no filter was rebuilt from the output topic with a directory per replica")
	}
	rebalance, _ := time.ParseDuration(base["KAFKA_REBALANCE_TIMEOUT"])
	heartbeat, _ := time.ParseDuration(base["KAFKA_HEARTBEAT_INTERVAL"])
	budget := rebalance - heartbeat - min(rebalance/10, time.Second) // the worker's release budget
	if res.longestRelease > budget {
		t.Errorf("a partition release took %v, over the release budget %v", res.longestRelease, budget)
	}
	for _, p := range res.problems {
		t.Errorf("worker log: %s", p)
	}
	for _, e := range res.otherErrors {
		t.Logf("worker log: %s", e)
	}
}

// sharedStore sets base's checkpoint store for variant v: a fresh directory for sharedDir, a bucket
// of its own on a moto server for objectS3 (the other variants' directories are per replica).
func sharedStore(t *testing.T, v scaleVariant, bucket string, base map[string]string) {
	t.Helper()
	switch v {
	case sharedDir:
		base["CHECKPOINT_DIR"] = t.TempDir()
	case objectS3:
		moto := s3test.StartMoto(t)
		moto.CreateBucket(t, bucket)
		maps.Copy(base, map[string]string{
			"CHECKPOINT_URL": "s3://" + bucket + "/kdedup", "AWS_ENDPOINT_URL_S3": moto.Endpoint(),
			"AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
		})
	}
}
