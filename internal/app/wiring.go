package app

// Wiring of the packages this package joins: identity (key extraction), dedup (filter manager),
// window (filter sizing), metrics and checkpoint (snapshots). Everything the worker needs from them goes
// through the functions of this file, so changes to their APIs stay here.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/dedup"
	"github.com/kdedup/kdedup/identity"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/metrics"
	"github.com/kdedup/kdedup/window"
	"github.com/prometheus/client_golang/prometheus"
)

// The interfaces each package defines for the other side, checked here because consumer and dedup
// do not import each other: consumer.OutputReader is the dedup.OutputLog of the worker, dedup.Set
// its consumer.Deduper, and metrics.Metrics observes both.
var (
	_ dedup.OutputLog          = (*consumer.OutputReader)(nil)
	_ consumer.Deduper         = (*dedup.Set)(nil)
	_ consumer.Judge           = judgedSet{}
	_ consumer.BatchJudge      = judgedSet{}
	_ consumer.Observer        = observer{}
	_ dedup.CheckpointObserver = (*metrics.Metrics)(nil)
)

// Version is the version the worker reports (log, kdedup_build_info). cmd/kdedup sets it from its
// own, which is set at build time with -ldflags "-X main.version=...". Default: "dev".
var Version = "dev"

// validateDedup reports the DEDUP_* problems that the owning packages detect: the key spec
// (identity.Parse), the scope (dedup.ParseScope) and the window sizing (window.Size,
// including the memory cap).
func validateDedup(d DedupConfig) []problem {
	var ps []problem
	if _, err := identity.Parse(d.Key); err != nil {
		ps = append(ps, problem{"DEDUP_KEY", err.Error()})
	}
	if _, err := dedup.ParseScope(d.Scope); err != nil {
		ps = append(ps, problem{"DEDUP_SCOPE", err.Error()})
	}
	if _, err := dedup.ParseClock(d.WindowClock); err != nil {
		ps = append(ps, problem{"DEDUP_WINDOW_CLOCK", err.Error()})
	}
	if _, err := dedup.ParseLatePolicy(d.LateRecords); err != nil {
		ps = append(ps, problem{"DEDUP_LATE_RECORDS", err.Error()})
	}
	if d.MetricsSource != "" {
		if _, err := identity.ParseSource(d.MetricsSource); err != nil {
			ps = append(ps, problem{"DEDUP_METRICS_SOURCE", err.Error()})
		}
	}
	if d.MetricsSourceLimit < 1 || d.MetricsSourceLimit > maxSourceLimit {
		ps = append(ps, problem{"DEDUP_METRICS_SOURCE_LIMIT", fmt.Sprintf("must be between 1 and %d, got %d", maxSourceLimit, d.MetricsSourceLimit)})
	}
	if d.MetricsSourceHold < minSourceHold || d.MetricsSourceHold > maxSourceHold {
		ps = append(ps, problem{"DEDUP_METRICS_SOURCE_HOLD", fmt.Sprintf("must be between %v and %v, got %v", minSourceHold, maxSourceHold, d.MetricsSourceHold)})
	}
	if d.WindowCount >= 1 && d.WindowInterval > 0 && d.FalsePositiveRate > 0 && d.FalsePositiveRate < 1 {
		if _, err := window.Size(windowConfig(d, newBudget(d))); err != nil {
			name := "DEDUP_WINDOW_COUNT/DEDUP_WINDOW_INTERVAL/DEDUP_WINDOW_CAPACITY/DEDUP_FALSE_POSITIVE_RATE"
			if errors.Is(err, window.ErrMemory) {
				n, from := d.MemoryBudget()
				name, err = "DEDUP_MEMORY_LIMIT", fmt.Errorf("the budget of %d bytes (%s), %d of them for the filters, cannot hold one filter: %w", n, from, d.FilterMemory(), err)
			}
			ps = append(ps, problem{name, err.Error()})
		}
	}
	return ps
}

// checkpointLocation resolves CHECKPOINT_URL and CHECKPOINT_DIR (shorthand for file://DIR) into
// the store location; ok is false when checkpoints are disabled (both empty). With both set they
// must name the same directory. A problem names the variable at fault.
func checkpointLocation(c CheckpointConfig) (loc checkpoint.Location, ok bool, p *problem) {
	var dirLoc checkpoint.Location
	if c.Dir != "" {
		var err error
		if dirLoc, err = checkpoint.DirLocation(c.Dir); err != nil {
			return loc, false, &problem{"CHECKPOINT_DIR", err.Error()}
		}
	}
	if c.URL == "" {
		return dirLoc, c.Dir != "", nil
	}
	loc, err := checkpoint.ParseURL(c.URL)
	if err != nil {
		return loc, false, &problem{"CHECKPOINT_URL", err.Error()}
	}
	if c.Dir != "" && loc != dirLoc {
		return loc, false, &problem{"CHECKPOINT_URL", fmt.Sprintf("%s conflicts with CHECKPOINT_DIR=%q (%s): set only one of them", loc, c.Dir, dirLoc)}
	}
	return loc, true, nil
}

// s3Endpoint returns AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, and the variable it came from.
func s3Endpoint(a AWSConfig) (endpoint, name string) {
	if a.EndpointURLS3 != "" {
		return a.EndpointURLS3, "AWS_ENDPOINT_URL_S3"
	}
	return a.EndpointURL, "AWS_ENDPOINT_URL"
}

// validateCheckpoint reports the CHECKPOINT_URL/CHECKPOINT_DIR problems and, for an s3:// URL,
// those of the AWS_* variables kdedup reads.
func validateCheckpoint(c CheckpointConfig, a AWSConfig) []problem {
	loc, _, p := checkpointLocation(c)
	var ps []problem
	if p != nil {
		ps = append(ps, *p)
	}
	if loc.Scheme != checkpoint.SchemeS3 { // also checked when the URL conflicts with CHECKPOINT_DIR
		return ps
	}
	for _, e := range []struct{ name, v string }{{"AWS_ENDPOINT_URL_S3", a.EndpointURLS3}, {"AWS_ENDPOINT_URL", a.EndpointURL}} {
		if err := checkpoint.ValidateS3Endpoint(e.v); err != nil {
			ps = append(ps, problem{e.name, err.Error()})
		}
	}
	if a.AccessKeyID != "" && a.SecretAccessKey == "" {
		ps = append(ps, problem{"AWS_SECRET_ACCESS_KEY", "required with AWS_ACCESS_KEY_ID"})
	}
	if a.AccessKeyID == "" && (a.SecretAccessKey != "" || a.SessionToken != "") {
		ps = append(ps, problem{"AWS_ACCESS_KEY_ID", "required with AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN"})
	}
	return ps
}

// s3Options converts the AWS_* variables into the S3 store's options; the SDK logs through log.
func s3Options(a AWSConfig, log *slog.Logger) checkpoint.S3Options {
	endpoint, _ := s3Endpoint(a)
	return checkpoint.S3Options{
		Region:          a.Region,
		Endpoint:        endpoint,
		AccessKeyID:     a.AccessKeyID,
		SecretAccessKey: a.SecretAccessKey,
		SessionToken:    a.SessionToken,
		Logger:          log,
	}
}

// storeCheckTimeout bounds the start-up check that the checkpoint store is reachable.
const storeCheckTimeout = 30 * time.Second

// openCheckpointStore opens the store at loc; it must answer a listing within storeCheckTimeout,
// so a wrong bucket, endpoint, credential or directory stops the start with a clear error.
func openCheckpointStore(ctx context.Context, cfg Config, loc checkpoint.Location, log *slog.Logger) (*checkpoint.Store, error) {
	store, err := checkpoint.OpenLocation(ctx, loc, checkpoint.Options{Keep: cfg.Checkpoint.Keep, S3: s3Options(cfg.AWS, log)})
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, storeCheckTimeout)
	defer cancel()
	if err := store.Check(cctx); err != nil {
		return nil, err
	}
	log.Info("checkpoint store", "url", loc.String(), "keep", cfg.Checkpoint.Keep)
	return store, nil
}

// rebuildMaxRecords returns CHECKPOINT_REBUILD_MAX_RECORDS, or 0 (no rebuild) under hash
// partitioning with the partition scope, where a rebuild cannot tell one input partition's output
// records from another's and would fill each filter with every partition's identities.
func rebuildMaxRecords(cfg Config, log *slog.Logger) int64 {
	n := cfg.Checkpoint.RebuildMaxRecords
	if n > 0 && cfg.Kafka.Partitioning == string(consumer.PartitionHash) && cfg.Dedup.Scope == string(dedup.ScopePartition) {
		log.Warn("no rebuild from the output topic under KAFKA_PARTITIONING=hash with DEDUP_SCOPE=partition: every output partition mixes the records of all input partitions; a partition without a usable snapshot starts empty")
		return 0
	}
	return n
}

// windowConfig converts DEDUP_* into the configuration of one filter drawing on budget (the
// worker's one budget, see newBudget).
func windowConfig(d DedupConfig, budget *window.Budget) window.Config {
	return window.Config{
		Generations:       d.WindowCount,
		Interval:          d.WindowInterval,
		Capacity:          uint64(d.WindowCapacity),
		Auto:              d.WindowCapacity == 0,
		FalsePositiveRate: d.FalsePositiveRate,
		Budget:            budget,
		Overload:          overloadPolicy(d.OverloadPolicy),
		Seed:              d.HashSeed,
	}
}

// overloadPolicy converts DEDUP_OVERLOAD_POLICY, already validated, into the window's policy.
func overloadPolicy(s string) window.OverloadPolicy {
	if s == "pass" {
		return window.OverloadPass
	}
	return window.OverloadDrop
}

// newKeyFunc returns the identity extractor for DEDUP_KEY; reg serves the schemas of Avro and
// Protobuf specs (nil when there is none).
func newKeyFunc(spec string, reg identity.Registry) (consumer.KeyFunc, error) {
	ks, err := identity.Parse(spec)
	if err != nil {
		return nil, err
	}
	e, err := identity.New(ks, identity.Options{Registry: reg})
	if err != nil {
		return nil, err
	}
	return e.Extract, nil
}

// keySpecOf returns DEDUP_KEY as the identity package spells it, so that equivalent settings
// record the same key spec in snapshots; the setting itself when it does not parse (Load rejects
// such a configuration).
func keySpecOf(key string) string {
	ks, err := identity.Parse(key)
	if err != nil {
		return key
	}
	return ks.String()
}

// maxSourceLimit bounds DEDUP_METRICS_SOURCE_LIMIT: the source label takes at most this many
// values plus other and none.
const maxSourceLimit = 1000

// minSourceHold and maxSourceHold bound DEDUP_METRICS_SOURCE_HOLD: below a scrape's resolution
// no source could earn a label before its records are settled, and above a few minutes the
// per-source panels lag the rest of the dashboard.
const minSourceHold, maxSourceHold = 100 * time.Millisecond, 10 * time.Minute

// withSources returns ccfg with the per-source counts of DEDUP_METRICS_SOURCE: the counters on reg,
// the extractor (its schemas from schemas) and the tallies. It returns ccfg unchanged when the
// setting is empty, and, logging why, when it does not parse (Load rejects such a configuration).
func withSources(reg prometheus.Registerer, d DedupConfig, ccfg consumer.Config, schemas identity.Registry, log *slog.Logger) consumer.Config {
	if d.MetricsSource == "" {
		return ccfg
	}
	spec, err := identity.ParseSource(d.MetricsSource)
	var e *identity.Extractor
	if err == nil {
		e, err = identity.New(spec, identity.Options{Registry: schemas})
	}
	if err != nil {
		log.Error("invalid DEDUP_METRICS_SOURCE: no per-source metrics", "error", err.Error())
		return ccfg
	}
	src := metrics.NewSources(reg, metrics.SourceOptions{Limit: d.MetricsSourceLimit, Hold: d.MetricsSourceHold})
	ccfg.SourceKey = e.Extract
	ccfg.Sources = func() consumer.SourceTally { return src.NewTally() }
	return ccfg
}

// observer is the worker's consumer.Observer: the metrics, with consumer's types converted.
type observer struct{ *metrics.Metrics }

// Progress implements consumer.Observer.
func (o observer) Progress(p int32, pr consumer.Progress) {
	o.Metrics.Progress(p, metrics.Progress(pr))
}

// newObserver builds the metrics on reg.
func newObserver(reg *prometheus.Registry, cfg Config) *metrics.Metrics {
	var budget time.Duration
	if ccfg, err := cfg.consumerConfig(); err == nil {
		budget = ccfg.ReleaseBudget()
	}
	return metrics.New(reg, metrics.Options{
		ReleaseBudget:            budget,
		SkipReasons:              kafkaio.SkipReasons(),
		RereadReasons:            kafkaio.RereadReasons(),
		CheckpointFailureReasons: dedup.CheckpointFailureReasons(),
		UnkeyedPolicy:            cfg.Dedup.Unkeyed,
		LatePolicy:               cfg.Dedup.LateRecords,
		Mode:                     cfg.Dedup.Mode,
		Version:                  Version,
		TargetFalsePositiveRate:  cfg.Dedup.FalsePositiveRate,
		Checkpointing:            cfg.Checkpoint.URL != "" || cfg.Checkpoint.Dir != "",
		CheckpointStore:          checkpointKind(cfg.Checkpoint),
		ProducerResetReasons:     consumer.ResetReasons(),
		ConnectionRetryReasons:   consumer.RetryReasons(),
		RefusalReasons:           consumer.RefusalReasons(),
		DropReasons:              consumer.DropReasons,
		RejectReasons:            dedup.RejectReasons(),
		UnkeyedReasons:           identity.Reasons(),
	})
}

// checkpointKind returns the kind of the checkpoint store c configures ("file", "s3"), or "" when
// there is none (or it is misconfigured: Load reports that).
func checkpointKind(c CheckpointConfig) string {
	if loc, ok, p := checkpointLocation(c); ok && p == nil {
		return loc.Scheme
	}
	return ""
}

// newDeduper builds the filter manager and registers its statistics with m. With CHECKPOINT_URL (or
// CHECKPOINT_DIR) set, filters are restored from (and saved to) snapshots in that store and
// re-warmed from the output topic through an OutputReader; with CHECKPOINT_REBUILD_MAX_RECORDS
// above 0, a filter without a usable snapshot is rebuilt from the output topic. The returned close
// function saves what is left (the global filter under DEDUP_SCOPE=global) and must be called after
// the worker returned.
func newDeduper(ctx context.Context, cfg Config, ccfg consumer.Config, kf consumer.KeyFunc, log *slog.Logger, m *metrics.Metrics) (consumer.Deduper, func(context.Context) error, error) {
	budget := newBudget(cfg.Dedup)
	limit, from := cfg.Dedup.MemoryBudget()
	log.Info("memory budget", "bytes", limit, "from", from, "filters", cfg.Dedup.FilterMemory(), "input", cfg.Dedup.InputMemory())
	m.RegisterBudget(budget)
	go followBudget(ctx, cfg, budget)
	dcfg := dedup.Config{
		Scope:       dedup.Scope(cfg.Dedup.Scope),
		Window:      windowConfig(cfg.Dedup, budget),
		Clock:       dedup.Clock(cfg.Dedup.WindowClock),
		LateRecords: dedup.LatePolicy(cfg.Dedup.LateRecords),
		MaxAhead:    cfg.Dedup.EventTimeMaxAhead,
		Refresh:     cfg.Dedup.WindowRefresh,
		Topic:       ccfg.InputTopic, // the route topic under DEDUP_SCOPE=routed
		Logger:      log,
		Observer:    m,
	}
	closeOutput := func() error { return nil }
	var out *consumer.OutputReader
	output := func() *consumer.OutputReader {
		if out == nil {
			out = consumer.NewOutputReader(ccfg, kf, log)
			out.OnSkipped(m.RewarmSkipped)
			out.OnTruncated(m.OutputTruncated)
			closeOutput = out.Close
			dcfg.Output = out
		}
		return out
	}
	if loc, ok, p := checkpointLocation(cfg.Checkpoint); p != nil {
		return nil, nil, fmt.Errorf("%s: %s", p.name, p.msg)
	} else if ok {
		store, err := openCheckpointStore(ctx, cfg, loc, log)
		if err != nil {
			return nil, nil, err
		}
		output()
		persister := dedup.NewCheckpointPersister(store, log).WithKeySpec(keySpecOf(cfg.Dedup.Key))
		if k := cfg.Checkpoint.SigningKey; k != "" {
			persister.WithSigningKey([]byte(k))
		}
		persister.OnRejected(m.SnapshotRejected)
		dcfg.Persister = persister
		dcfg.CheckpointInterval = cfg.Checkpoint.Interval
	}
	if n := rebuildMaxRecords(cfg, log); n > 0 {
		output()
		dcfg.RebuildMaxRecords = n
		dcfg.ProcessedTime = cfg.Dedup.ProcessedHeader != ""
	}
	set, err := dedup.NewSet(ctx, dcfg)
	if err != nil {
		closeOutput()
		return nil, nil, err
	}
	m.RegisterFilterSource(func() []metrics.FilterStat {
		stats := set.Stats()
		out := make([]metrics.FilterStat, len(stats))
		for i, s := range stats {
			gens := make([]metrics.GenerationStat, len(s.Generations))
			for j, g := range s.Generations {
				gens[j] = metrics.GenerationStat{Fill: g.Fill, EstimatedKeys: g.EstimatedKeys, Keys: g.Keys}
			}
			out[i] = metrics.FilterStat{
				Filter:        s.Name,
				ConfiguredFPR: s.ConfiguredFPR,
				EstimatedFPR:  s.EstimatedFPR,
				CapacityBytes: s.TotalBytes,
				ResidentBytes: s.ResidentBytes,
				Rotations:     s.Rotations,
				WindowSeconds: s.Window.Seconds(),
				Stages:        s.Stages,
				Growths:       s.Growths,
				Refreshes:     s.Refreshes,
				Forgotten:     s.Forgotten,
				AtCap:         s.AtCap,
				Generations:   gens,
				EventTime:     s.EventTime,
				StreamTime:    s.StreamTime,
				LateRecords:   s.Late,
			}
		}
		return out
	})
	m.RegisterSetCounts(func() metrics.SetCounts {
		return metrics.SetCounts{Unassigned: set.Unassigned(), FutureCapped: set.Capped()}
	})
	watchCtx, stopWatch := context.WithCancel(ctx)
	go watchCap(watchCtx, set.Stats, cfg.Dedup.OverloadPolicy, log)
	closeAll := func(ctx context.Context) error {
		stopWatch()
		return errors.Join(set.Close(ctx), closeOutput())
	}
	return judgedSet{set}, closeAll, nil
}

// judgedSet is a dedup.Set as a consumer.Judge, so that the worker's audit records say why a
// record was dropped (consumer and dedup do not import each other).
type judgedSet struct{ *dedup.Set }

// verdicts maps dedup's verdicts to consumer's.
var verdicts = [...]consumer.Verdict{
	dedup.VerdictNew:       consumer.VerdictNew,
	dedup.VerdictDuplicate: consumer.VerdictDuplicate,
	dedup.VerdictLate:      consumer.VerdictLate,
	dedup.VerdictOverload:  consumer.VerdictOverload,
}

// Judge is dedup.Set.Judge in consumer's terms.
func (j judgedSet) Judge(partition int32, id []byte, ts time.Time) consumer.Verdict {
	return verdicts[j.Set.Judge(partition, id, ts)]
}

// JudgeBatch is dedup.Set.JudgeBatch in consumer's terms.
func (j judgedSet) JudgeBatch(partition int32, ids [][]byte, ts func(int) time.Time, put func(int, consumer.Verdict)) {
	j.Set.JudgeBatch(partition, ids, ts, func(i int, v dedup.Verdict) { put(i, verdicts[v]) })
}
