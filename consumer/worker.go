package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/internal/grace"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// ErrPartitionMismatch is returned by Run when Config.Partitioning is PartitionSame and the output
// topic does not have as many partitions as the input topic.
var ErrPartitionMismatch = errors.New("consumer: output topic partition count differs from input topic")

// ErrIdempotenceUnsupported is returned by Run when idempotent production is enabled (the
// default; see Config.DisableIdempotence) and the brokers cannot serve it; it is
// kafkaio.ErrIdempotenceUnsupported.
var ErrIdempotenceUnsupported = kafkaio.ErrIdempotenceUnsupported

// ResetReasons returns every reason Observer.ProducerReset can be given (kafkaio.ResetReasons).
func ResetReasons() []string { return kafkaio.ResetReasons() }

// RefusalReasons returns every reason Observer.DeadLetter and Observer.PartitionBlocked can be
// given: the output's refusals (kafkaio.RefusalReasons) and the input's
// (kafkaio.InputRefusalReasons).
func RefusalReasons() []string {
	return append(kafkaio.RefusalReasons(), kafkaio.InputRefusalReasons()...)
}

// Worker is one member of the deduplicating consumer group. Create it with New and call Run once.
// Ready and the Observer it was given are safe to use concurrently with Run.
type Worker struct {
	cfg   Config
	dedup Deduper
	judge Judge      // dedup as a Judge (judgeOf)
	batch BatchJudge // dedup as a BatchJudge, or nil

	inputTopic []byte // the value of AuditHeaderSourceTopic
	key        KeyFunc
	obs        Observer
	log        *slog.Logger
	sample     *kafkaio.Sampler

	client *kafkaio.Client
	pool   *kafkaio.FetchPool // the partition readers' fetches, one request per broker; set by Run
	outs   recordSlices       // the partitions' output record slices between batches
	// produceMem bounds the records being produced at once by all of the worker's producers
	// (the output batches of every partition in flight, each encoded and copied by kafka-go).
	produceMem *kafkaio.ProduceMemory
	prod       *kafkaio.Producer
	balancer   *kafkaio.StickyBalancer

	inGeneration  atomic.Bool
	own           atomic.Pointer[ownership] // the latest generation's, for retryOwned; nil before the first
	pendingAssign atomic.Int64
	identityHeld  atomic.Int64 // partitions held at an identity for longer than Config.IdentityHold
	readyMu       sync.Mutex
	lastReady     bool

	blockedMu sync.Mutex
	blocked   map[int32]BlockedPartition // see Blocked

	txnMu    sync.Mutex
	txnProds map[int32]*kafkaio.Producer // the partitions' transactional producers (DeliveryExactlyOnce)
	progress progressSet                 // the assigned partitions' progress, for readiness

	limits map[string]int // max.message.bytes last read per topic; used by Run's goroutines in turn

	connFail connFailures // which connection failures are retried
}

// New validates cfg and returns a Worker that deduplicates with d, extracts identities with key,
// reports to obs (nil means NopObserver) and logs to log (nil means slog.Default()). It does not
// connect to Kafka; Run does.
func New(cfg Config, d Deduper, key KeyFunc, obs Observer, log *slog.Logger) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d == nil || key == nil {
		return nil, errors.New("consumer: New needs a Deduper and a KeyFunc")
	}
	if obs == nil {
		obs = NopObserver{}
	}
	if log == nil {
		log = slog.Default()
	}
	w := &Worker{cfg: cfg, dedup: d, judge: judgeOf(d), inputTopic: []byte(cfg.InputTopic), key: key, obs: obs, log: log, sample: kafkaio.NewSampler(log, 10*time.Second),
		blocked: make(map[int32]BlockedPartition), limits: make(map[string]int), txnProds: make(map[int32]*kafkaio.Producer),
		produceMem: kafkaio.NewProduceMemory(kafkaio.DefaultMaxProduceBytes)}
	w.batch, _ = d.(BatchJudge)
	w.balancer = &kafkaio.StickyBalancer{}
	w.connFail.bound = cfg.RebalanceTimeout
	w.client = cfg.conn().Client(cfg.ProduceTimeout)
	w.prod = kafkaio.NewProducer(w.client, kafkaio.ProducerConfig{
		Idempotent:  !cfg.DisableIdempotence,
		Compression: kafkaio.Compression(cfg.Compression),
		BatchBytes:  cfg.BatchBytes,
		Backoff:     cfg.retry(),
		Observer:    obs,
		Log:         w.sample,
		OnFailing:   w.updateReady,
		BeforeSend:  w.sendOwned,
		Memory:      w.produceMem,
	})
	return w, nil
}

// sendOwned is the producer's BeforeSend: a produce request is sent, the first time or again after
// a failure, only while the latest generation is not known to be lost (see ownership.checkLease;
// it asks the coordinator once the last confirmation is older than the session timeout, so right
// after a pause past the session). A process resumed after a pause past its session would otherwise send the
// batch it held, or re-send one that timed out meanwhile, after the partition's new owner wrote
// the same records; instead the batch fails with an error wrapping ErrNotOwner and the partition
// is discarded. A process paused between this check and the request's write still writes it when
// it resumes: only the transactional output (DeliveryExactlyOnce) fences that. It is safe for
// concurrent use.
func (w *Worker) sendOwned(ctx context.Context) error {
	own := w.own.Load()
	if own == nil {
		return nil
	}
	if err := own.checkLease(ctx); errors.Is(err, ErrNotOwner) {
		return err
	}
	return nil
}

// Ready reports whether the worker is a member of an active consumer group generation, every
// partition of that generation has been assigned (Deduper.Assign returned), no output write is
// currently failing, no partition's fetches have been failing for longer than
// Config.FetchFailingMax, and no partition has been held for longer than Config.IdentityHold at a
// record whose identity cannot be extracted. A member that got no partitions (more workers than
// partitions) is ready. A partition blocked at a refused record does not make the worker not
// ready.
func (w *Worker) Ready() bool {
	return w.inGeneration.Load() && w.pendingAssign.Load() == 0 && !w.prod.Failing() && !w.txnFailing() &&
		w.identityHeld.Load() == 0 && !w.progress.failing(w.cfg.FetchFailingMax)
}

// txnFailing reports whether a partition's transactional producer is retrying a request.
func (w *Worker) txnFailing() bool {
	w.txnMu.Lock()
	defer w.txnMu.Unlock()
	for _, p := range w.txnProds {
		if p.Failing() {
			return true
		}
	}
	return false
}

// updateReady tells the Observer about readiness changes.
func (w *Worker) updateReady() {
	w.readyMu.Lock()
	defer w.readyMu.Unlock()
	if r := w.Ready(); r != w.lastReady {
		w.lastReady = r
		w.obs.SetReady(r)
	}
}

// Run consumes until ctx is cancelled, then stops fetching, produces what it already processed,
// commits, calls Revoke for every partition and leaves the group, all within
// Config.ShutdownTimeout, and returns nil. Broker outages and missing topics are logged and
// retried with backoff. Run returns an error only for problems retrying cannot fix: an
// ErrPartitionMismatch, an ErrIdempotenceUnsupported, a kafkaio.ErrProduceUnsupported (brokers
// before Kafka 0.11), an authentication, TLS or authorization failure (kafkaio.Fatal: wrong
// credentials, a certificate that does not verify, a topic or group the ACLs deny) on the first
// connection, or one that persisted for Config.RebalanceTimeout after the worker had connected
// (until then it is logged, counted by Observer.ConnectionRetry and retried), or a consumer group
// that cannot be created. A broker throttling new connections is always retried.
func (w *Worker) Run(ctx context.Context) error {
	// hard ends ShutdownTimeout after ctx: it bounds the drain.
	hard, cancelHard := grace.Context(context.WithoutCancel(ctx), ctx, w.cfg.ShutdownTimeout)
	defer cancelHard()
	logged := make(chan struct{})
	stopLog := context.AfterFunc(ctx, func() {
		defer close(logged)
		w.log.Info("shutdown requested: draining", "timeout", w.cfg.ShutdownTimeout.String())
	})
	defer func() {
		if !stopLog() {
			<-logged // ctx ended: the drain's log line runs; a fast stop must not exit before it
		}
	}()
	defer kafkaio.CloseIdle(w.client)
	w.pool = kafkaio.NewFetchPool(w.client, kafkaio.FetchPoolConfig{
		Isolation: w.cfg.isolation(), MaxWait: w.cfg.FetchMaxWait, MaxBytes: 4 * w.cfg.FetchMaxBytes,
		MaxBufferedBytes: partitionMemory(w.cfg.InputMemoryLimit),
	})
	defer w.pool.Close()
	defer w.updateReady()

	if _, err := w.topicInfo(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := w.prod.Start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	group := kafkaio.NewGroupMember(w.client, w.groupConfig())
	fl := &fleet{parts: map[int]*running{}, group: group}
	var fatal error
	for attempt := 0; fatal == nil && ctx.Err() == nil; {
		gen, err := group.Join(ctx)
		if err != nil && len(fl.parts) > 0 {
			// The partitions kept running for a rejoin that failed: they are released, and the
			// ownership asks the coordinator whether they may still be saved.
			fl.own.rejoinFailed()
			w.releaseAll(fl)
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, kafkaio.ErrGroupFenced) {
				fatal = fmt.Errorf("consumer: group instance id %q: %w", w.cfg.GroupInstanceID, err)
				break
			}
			err = kafkaio.AuthFailed(kafkaio.Denied(err, "READ", fmt.Sprintf("group %q", w.cfg.GroupID)))
			if !w.connFail.retry(err) {
				fatal = err
				break
			}
			w.countRetry(err)
			w.sample.Log(slog.LevelWarn, "group-next", "consumer group: cannot join, retrying",
				"group", w.cfg.GroupID, "error", err.Error())
			kafkaio.Sleep(ctx, w.cfg.retry().Delay(attempt))
			attempt++
			continue
		}
		attempt = 0
		fatal = w.generation(ctx, hard, gen, fl)
	}
	if len(fl.parts) > 0 {
		fl.own.rejoinFailed()
	}
	w.releaseAll(fl)
	w.leave(hard, group)
	return fatal
}

// leave leaves the consumer group after the last generation ended, so that the partitions move
// to the other members at once; a static member (Config.GroupInstanceID) stays a member until
// its session expires, so that a restart within SessionTimeout gets its partitions back.
func (w *Worker) leave(hard context.Context, group *kafkaio.GroupMember) {
	if w.cfg.GroupInstanceID != "" {
		w.log.Info("static member: not leaving the consumer group; its partitions move once its session expired unless it comes back",
			"group", w.cfg.GroupID, "instance", w.cfg.GroupInstanceID, "session_timeout", w.cfg.SessionTimeout.String())
		return
	}
	lctx, cancel := context.WithTimeout(hard, w.cfg.SessionTimeout)
	defer cancel()
	if err := group.Leave(lctx); err != nil {
		w.log.Warn("cannot leave the consumer group; its partitions move once the session expired", "group", w.cfg.GroupID, "error", err.Error())
		return
	}
	w.log.Info("left consumer group", "group", w.cfg.GroupID)
}

// groupConfig returns the configuration of the worker's consumer group membership.
func (w *Worker) groupConfig() kafkaio.GroupConfig {
	return kafkaio.GroupConfig{
		Group:            w.cfg.GroupID,
		Topic:            w.cfg.InputTopic,
		InstanceID:       w.cfg.GroupInstanceID,
		SessionTimeout:   w.cfg.SessionTimeout,
		RebalanceTimeout: w.cfg.RebalanceTimeout,
		Sticky:           w.balancer,
		Cooperative:      w.cfg.GroupProtocol == GroupCooperative,
		Backoff:          w.cfg.retry(),
	}
}

// topicCounts holds the partition counts of the topics the worker uses.
type topicCounts struct {
	input, output, duplicates, deadLetters int
}

// topicInfo checks the connection (kafkaio.Conn.Check), looks the topics up and checks that the
// input topic may be read (kafkaio.CheckRead), retrying under the retry policy until they all
// exist or ctx ends (then it returns ctx's error), and reads their limits (readLimits). An
// authentication, TLS or authorization failure (kafkaio.Fatal) is returned when connFailures
// says it is not retried: at once before the worker first connected. In PartitionSame mode a
// partition count mismatch is an ErrPartitionMismatch.
func (w *Worker) topicInfo(ctx context.Context) (topicCounts, error) {
	var tc topicCounts
	err := w.cfg.retry().Retry(ctx, 0, func(attempt int) error {
		err := w.cfg.conn().Check(ctx, w.topicNames()...)
		if err == nil {
			tc, err = w.lookupTopics(ctx)
		}
		if err == nil {
			err = kafkaio.CheckRead(ctx, w.client, w.cfg.InputTopic)
		}
		switch {
		case err != nil && !w.connFail.retry(err):
			return kafkaio.Permanent(err)
		case err != nil && ctx.Err() == nil:
			w.countRetry(err)
			w.sample.Log(slog.LevelWarn, "topics", "waiting for Kafka topics; retrying", "error", err.Error(),
				"brokers", w.cfg.Brokers)
		case err == nil:
			w.connFail.ok()
			if attempt > 0 {
				w.log.Info("topics available", "input", w.cfg.InputTopic, "output", w.cfg.OutputTopic)
			}
		}
		return err
	})
	if err != nil && ctx.Err() == nil {
		return tc, err // a failure connFailures does not retry
	}
	if err != nil {
		return tc, ctx.Err()
	}
	w.readLimits(ctx)
	if w.cfg.Partitioning == PartitionSame && tc.input != tc.output {
		return tc, fmt.Errorf("%w: output topic %q has %d partitions, input topic %q has %d; "+
			"partitioning \"same\" writes every record to the output partition with the number of its input partition, "+
			"so the counts must be equal (or use partitioning \"hash\")",
			ErrPartitionMismatch, w.cfg.OutputTopic, tc.output, w.cfg.InputTopic, tc.input)
	}
	return tc, nil
}

// countRetry counts a retried connection failure that is fatal at startup or throttled
// (kafkaio.RetryReason), and not other failures.
func (w *Worker) countRetry(err error) {
	if reason := kafkaio.RetryReason(err); reason != "" {
		w.obs.ConnectionRetry(reason)
	}
}

// topicNames returns the worker's topics: input, output and, if set, duplicates and dead letters.
func (w *Worker) topicNames() []string {
	names := []string{w.cfg.InputTopic, w.cfg.OutputTopic, w.cfg.DuplicatesTopic, w.cfg.DeadLetterTopic}
	return slices.DeleteFunc(names, func(n string) bool { return n == "" })
}

// lookupTopics reads the partition counts of the worker's topics with one metadata request.
func (w *Worker) lookupTopics(ctx context.Context) (topicCounts, error) {
	names := w.topicNames()
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	counts, err := kafkaio.PartitionCounts(mctx, w.client, names...)
	if err != nil {
		return topicCounts{}, err
	}
	tc := topicCounts{input: counts[0], output: counts[1]}
	counts = counts[2:]
	if w.cfg.DuplicatesTopic != "" {
		tc.duplicates, counts = counts[0], counts[1:]
	}
	if w.cfg.DeadLetterTopic != "" {
		tc.deadLetters = counts[0]
	}
	return tc, nil
}

// readLimits reads the max.message.bytes of the topics the worker writes and bounds the
// producer's batches by them (kafkaio.Producer.SetMaxMessageBytes). A change is logged; a
// failure (a principal without DESCRIBE_CONFIGS on the topics, for example) is logged, sampled,
// and leaves the bounds as they were: batches are then bounded by BatchBytes and split when
// refused.
func (w *Worker) readLimits(ctx context.Context) {
	names := []string{w.cfg.OutputTopic, w.cfg.DuplicatesTopic, w.cfg.DeadLetterTopic}
	names = slices.DeleteFunc(names, func(n string) bool { return n == "" })
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	limits, err := kafkaio.MaxMessageBytes(mctx, w.client, names...)
	if err != nil {
		if ctx.Err() == nil {
			w.sample.Log(slog.LevelWarn, "topic-limits", "cannot read max.message.bytes of the topics the worker writes; "+
				"batches are bounded by the batch size and split when refused", "topics", names, "error", err.Error())
		}
		return
	}
	for i, name := range names {
		w.prod.SetMaxMessageBytes(name, limits[i])
		if w.limits[name] != limits[i] {
			w.limits[name] = limits[i]
			w.log.Info("topic limit", "topic", name, "max_message_bytes", limits[i])
		}
	}
}

// fleet is the partitions the worker consumes and the committer of their offsets. Under the
// eager protocol both end with every generation; under the cooperative one the partitions a new
// generation leaves with the worker keep running, with the same committer, into it. It is used by
// Run's goroutine alone.
type fleet struct {
	parts  map[int]*running
	c      *committer  // nil while parts is empty
	own    *ownership  // the generation the partitions last ran in
	member string      // the member id of that generation
	topics topicCounts // the topics' partition counts the partitions run with
	group  *kafkaio.GroupMember
}

// running is one partition goroutine of the fleet.
type running struct {
	stop context.CancelFunc // ends the partition's assignment: it drains and is released
	done chan struct{}
}

// ids returns the fleet's partitions, sorted.
func (fl *fleet) ids() []int { return slices.Sorted(maps.Keys(fl.parts)) }

// generation runs one consumer group generation: one goroutine per partition it assigns, the
// committer, and the member's heartbeats (groupHeartbeats), which end the generation when the
// group rebalances. Under the eager protocol every partition is released when the generation
// ends. Under the cooperative one (gen.Cooperative) the partitions the previous generation left
// running go on: only those gen does not list are released, before the new ones start, and the
// generation ends at once after such a release, so that the next rebalance hands them out; when
// it ends for a rebalance the partitions keep running while the member rejoins. Everything is
// released when ctx ends or the generation is lost. A non-nil error is fatal for Run.
func (w *Worker) generation(ctx, hard context.Context, gen kafkaio.Generation, fl *fleet) error {
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var lost atomic.Bool
	end := func(lostIt bool) {
		if lostIt {
			lost.Store(true)
		}
		cancel()
	}
	if len(fl.parts) > 0 && (!gen.Cooperative || gen.MemberID != fl.member) {
		// The member was dropped from the group while it rejoined (a new member id), or the
		// group fell back to an eager protocol, whose assignment may already have given the
		// partitions to others: they are lost, and dropped unsaved.
		fl.own.lose(fmt.Errorf("consumer: generation %d (protocol %s, member %s) did not keep the partitions of member %s",
			gen.ID, gen.Protocol, gen.MemberID, fl.member))
		w.releaseAll(fl)
	}
	ids := gen.Partitions
	// Claimed in the UserData of the next JoinGroup (the eager sticky balancer's claims).
	w.balancer.SetOwned(gen.ID, map[string][]int{w.cfg.InputTopic: ids})
	parts := make([]int32, len(ids))
	for i, id := range ids {
		parts[i] = int32(id)
	}
	own := newOwnership(w.client, kafkaio.Member{Group: w.cfg.GroupID, Generation: gen.ID, ID: gen.MemberID},
		w.cfg.HeartbeatInterval, w.cfg.SessionTimeout)
	w.own.Store(own)
	// Heartbeats go on while partitions are released: a coordinator removes a member that did
	// not heartbeat for the session timeout even while it waits for the members to rejoin, so
	// the release is bounded by the rebalance timeout alone.
	stopHeartbeats := w.groupHeartbeats(fl.group, gen, own, end)
	defer stopHeartbeats()
	w.dedup.Generation(gen.ID, parts, own.check)
	w.obs.Rebalance()
	kept, revoked := fl.split(ids)
	if fl.c != nil {
		fl.c.switchTo(groupCommits{group: fl.group, gen: gen, timeout: w.cfg.SessionTimeout}, own)
	}
	fl.own, fl.member = own, gen.MemberID
	w.inGeneration.Store(true)
	w.updateReady()
	w.log.Info("generation started", "generation", gen.ID, "member", gen.MemberID, "protocol", gen.Protocol,
		"partitions", ids, "kept", kept, "revoked", revoked)
	w.releaseParts(fl, revoked)
	fresh := fl.fresh(ids)
	w.obs.Assigned(len(fl.parts) + len(fresh))
	w.pendingAssign.Add(int64(len(fresh))) // not ready until they are assigned
	w.updateReady()
	// The connection and topics are checked at every generation: a rebalance is when a group's
	// members reconnect, and when a broker throttles or refuses them.
	tc, err := w.topicInfo(gctx)
	switch {
	case err == nil:
		fl.topics = tc
		w.startParts(gctx, hard, gen, fl, fresh)
	case gctx.Err() == nil:
		w.releaseAll(fl)
		return err
	default:
		w.pendingAssign.Add(-int64(len(fresh)))
		w.updateReady()
	}
	fl.group.Own(gen.ID, fl.ids())
	if len(revoked) == 0 || !gen.Cooperative {
		// Wait for the generation's end even when no partition was assigned: an early return
		// would make the group rebalance endlessly.
		<-gctx.Done()
	}
	if !gen.Cooperative || lost.Load() || ctx.Err() != nil {
		w.releaseAll(fl)
		return nil
	}
	// The partitions keep running while the member rejoins.
	own.rejoin()
	if fl.c != nil {
		fl.c.pause()
	}
	w.log.Info("generation ended: rejoining, the partitions keep running", "generation", gen.ID, "partitions", fl.ids())
	return nil
}

// split returns the partitions of the fleet that ids keeps, and those it does not (revoked).
func (fl *fleet) split(ids []int) (kept, revoked []int) {
	for _, p := range fl.ids() {
		if slices.Contains(ids, p) {
			kept = append(kept, p)
		} else {
			revoked = append(revoked, p)
		}
	}
	return kept, revoked
}

// fresh returns the partitions of ids the fleet does not run yet.
func (fl *fleet) fresh(ids []int) []int {
	var out []int
	for _, p := range ids {
		if fl.parts[p] == nil {
			out = append(out, p)
		}
	}
	return out
}

// startParts starts the partitions fresh, which the fleet does not run yet and which count in
// pendingAssign, with the committer of gen (a new one if the fleet has none) and the topics'
// counts fl.topics. It starts nothing when gctx ends before their committed offsets were read.
func (w *Worker) startParts(gctx, hard context.Context, gen kafkaio.Generation, fl *fleet, fresh []int) {
	if len(fresh) == 0 {
		return
	}
	offsets, err := w.startOffsets(gctx, fl.group, fresh)
	if err != nil { // the generation ended
		w.pendingAssign.Add(-int64(len(fresh)))
		w.updateReady()
		return
	}
	tc := fl.topics
	if fl.c == nil {
		fl.c = newCommitter(groupCommits{group: fl.group, gen: gen, timeout: w.cfg.SessionTimeout}, w.cfg.InputTopic, w.cfg.CommitInterval, w.obs, w.sample)
		fl.c.own = fl.own
		go fl.c.run()
	}
	for _, p := range fresh {
		// A partition's assignment outlives the generation under the cooperative protocol: it
		// ends when the partition is revoked, the generation lost, or ctx (shutdown) ends.
		pctx, stop := context.WithCancel(context.WithoutCancel(gctx))
		r := &running{stop: stop, done: make(chan struct{})}
		fl.parts[p] = r
		go func() {
			defer close(r.done)
			w.partition(pctx, hard, fl.c, tc, int32(p), offsets[p])
		}()
	}
}

// releaseParts ends the assignment of the fleet's partitions ids and waits until they were
// released (drained, committed, revoked), all at once.
func (w *Worker) releaseParts(fl *fleet, ids []int) {
	for _, p := range ids {
		fl.parts[p].stop()
	}
	for _, p := range ids {
		<-fl.parts[p].done
		delete(fl.parts, p)
	}
	if len(fl.parts) == 0 && fl.c != nil {
		fl.c.close()
		fl.c = nil
	}
}

// releaseAll releases every partition of the fleet and stops its committer; the member's next
// subscription owns nothing.
func (w *Worker) releaseAll(fl *fleet) {
	if len(fl.parts) == 0 && !w.inGeneration.Load() {
		return // released already
	}
	if fl.c != nil {
		fl.c.resume() // a pause for a rejoin that did not keep the partitions
	}
	w.releaseParts(fl, fl.ids())
	fl.group.Own(-1, nil)
	w.inGeneration.Store(false)
	w.pendingAssign.Store(0)
	w.obs.Assigned(0)
	w.updateReady()
	if fl.own != nil {
		w.log.Info("generation ended", "generation", fl.own.member.Generation)
	}
}

// startOffsets returns where each of partitions starts: its committed offset and the leader epoch
// committed with it, or kafkaio.FirstOffset (kafkaio.LastOffset under Config.StartFromLatest) and
// epoch -1 when it has none. Failures are logged and retried under the retry policy until gctx
// ends, when it returns gctx's error.
func (w *Worker) startOffsets(gctx context.Context, group *kafkaio.GroupMember, partitions []int) (map[int]kafkaio.Committed, error) {
	start := kafkaio.FirstOffset
	if w.cfg.StartFromLatest {
		start = kafkaio.LastOffset
	}
	var committed map[int]kafkaio.Committed
	err := w.cfg.retry().Retry(gctx, 0, func(int) error {
		var err error
		if committed, err = group.Fetch(gctx, partitions); err != nil && gctx.Err() == nil {
			w.sample.Log(slog.LevelWarn, "offset-fetch", "cannot read the committed offsets; retrying", "group", w.cfg.GroupID, "error", err.Error())
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make(map[int]kafkaio.Committed, len(partitions))
	for _, p := range partitions {
		out[p] = kafkaio.Committed{Offset: start, LeaderEpoch: -1}
		if c, ok := committed[p]; ok {
			out[p] = c
		}
	}
	return out, nil
}

// partitionWatchInterval is how often the group's leader checks the input topic's partition
// count, and rejoins when it changed, so that new partitions get assigned.
const partitionWatchInterval = 5 * time.Second

// groupHeartbeats heartbeats the coordinator for gen every HeartbeatInterval until the returned
// stop is called (stop waits for it). It ends the generation (end) when the coordinator asks the
// member to rejoin (REBALANCE_IN_PROGRESS), when it lost the generation (kafkaio.Fenced: own is
// fenced and the heartbeats stop), when no heartbeat was answered for SessionTimeout, and, on
// the group's leader, when the input topic's partition count changed. Every accepted heartbeat
// confirms own. Failures are logged (sampled) and retried at the next tick.
func (w *Worker) groupHeartbeats(group *kafkaio.GroupMember, gen kafkaio.Generation, own *ownership, end func(lost bool)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(w.cfg.HeartbeatInterval)
		defer t.Stop()
		answered, watched, count := time.Now(), time.Now(), gen.Count
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			start := time.Now()
			err := group.Heartbeat(ctx, gen)
			switch {
			case err == nil:
				answered = start
				own.confirm(start)
			case errors.Is(err, kafkaio.ErrRebalanceInProgress):
				answered = start
				end(false)
			case own.fence(err):
				w.log.Info("consumer group generation lost", "generation", gen.ID, "error", err.Error())
				end(true)
				return
			case ctx.Err() == nil:
				w.sample.Log(slog.LevelWarn, "heartbeat", "consumer group heartbeat failed; retrying",
					"group", w.cfg.GroupID, "generation", gen.ID, "error", err.Error())
				if time.Since(answered) > w.cfg.SessionTimeout {
					end(true) // the session expired meanwhile, most likely: rejoin
				}
			}
			if gen.Leader && time.Since(watched) >= partitionWatchInterval {
				watched = time.Now()
				count = w.watchPartitions(ctx, count, end)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// watchPartitions reads the input topic's partition count and ends the generation (end) when it
// differs from count, the count the generation was assigned with (0: unknown, which the first
// answer sets). It returns the count to compare with next.
func (w *Worker) watchPartitions(ctx context.Context, count int, end func(lost bool)) int {
	mctx, cancel := context.WithTimeout(ctx, w.cfg.SessionTimeout)
	defer cancel()
	n, err := kafkaio.PartitionCount(mctx, w.client, w.cfg.InputTopic)
	switch {
	case err != nil:
		return count
	case count != 0 && n != count:
		w.log.Info("input topic partition count changed: rejoining the consumer group", "topic", w.cfg.InputTopic, "from", count, "to", n)
		end(false)
	}
	return n
}

// groupCommits commits offsets in one generation through the worker's group membership; it is
// the committer's offsetCommitter.
type groupCommits struct {
	group   *kafkaio.GroupMember
	gen     kafkaio.Generation
	timeout time.Duration // bounds each commit, its retries while the coordinator moves included
}

// commitOffsets implements offsetCommitter.
func (g groupCommits) commitOffsets(commits map[int]kafkaio.Committed) error {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	return g.group.Commit(ctx, g.gen, commits)
}

// graceContext returns a context that is cancelled when parent is, or d after trigger is.
func graceContext(parent, trigger context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return grace.Context(parent, trigger, d)
}
