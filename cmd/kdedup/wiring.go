package main

// Wiring of the packages cmd/kdedup does not own: dedup (filter manager and key extraction),
// window (filter sizing), metrics and checkpoint (snapshots). Everything the worker needs from them goes
// through the functions of this file, so changes to their APIs stay here.

import (
	"context"
	"errors"
	"log/slog"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/dedup"
	"github.com/kdedup/kdedup/metrics"
	"github.com/kdedup/kdedup/window"
	"github.com/prometheus/client_golang/prometheus"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// validateDedup reports the DEDUP_* problems that the owning packages detect: the key spec
// (dedup.ParseKeySpec), the scope (dedup.ParseScope) and the window sizing (window.Size,
// including the memory cap).
func validateDedup(d DedupConfig) []problem {
	var ps []problem
	if _, err := dedup.ParseKeySpec(d.Key); err != nil {
		ps = append(ps, problem{"DEDUP_KEY", err.Error()})
	}
	if _, err := dedup.ParseScope(d.Scope); err != nil {
		ps = append(ps, problem{"DEDUP_SCOPE", err.Error()})
	}
	if d.WindowCount >= 1 && d.WindowInterval > 0 && d.WindowCapacity >= 1 && d.FalsePositiveRate > 0 && d.FalsePositiveRate < 1 {
		if _, err := window.Size(windowConfig(d)); err != nil {
			name := "DEDUP_WINDOW_COUNT/DEDUP_WINDOW_INTERVAL/DEDUP_WINDOW_CAPACITY/DEDUP_FALSE_POSITIVE_RATE"
			if errors.Is(err, window.ErrMemory) {
				name = "DEDUP_MAX_MEMORY"
			}
			ps = append(ps, problem{name, err.Error()})
		}
	}
	return ps
}

// windowConfig converts DEDUP_* into the configuration of one filter.
func windowConfig(d DedupConfig) window.Config {
	return window.Config{
		Generations:       d.WindowCount,
		Interval:          d.WindowInterval,
		Capacity:          d.WindowCapacity,
		FalsePositiveRate: d.FalsePositiveRate,
		MaxBytes:          uint64(d.MaxMemory),
		Seed:              d.HashSeed,
	}
}

// newKeyFunc returns the identity extractor for DEDUP_KEY.
func newKeyFunc(spec string) (consumer.KeyFunc, error) {
	ks, err := dedup.ParseKeySpec(spec)
	if err != nil {
		return nil, err
	}
	return ks.Extract, nil
}

// metrics.Metrics reports the idempotent producer's resets and uncertain retries.
var _ consumer.ProducerObserver = (*metrics.Metrics)(nil)

// newObserver builds the metrics on reg.
func newObserver(reg *prometheus.Registry, cfg Config) *metrics.Metrics {
	return metrics.New(reg, metrics.Options{
		Mode:                    cfg.Dedup.Mode,
		Version:                 version,
		TargetFalsePositiveRate: cfg.Dedup.FalsePositiveRate,
		Checkpointing:           cfg.Checkpoint.Dir != "",
	})
}

// newDeduper builds the filter manager and registers its statistics with m. With CHECKPOINT_DIR
// set, filters are restored from (and saved to) snapshots in that directory and re-warmed from the
// output topic through an OutputReader. The returned close function saves what is left (the
// global filter under DEDUP_SCOPE=global) and must be called after the worker returned.
func newDeduper(ctx context.Context, cfg Config, ccfg consumer.Config, kf consumer.KeyFunc, log *slog.Logger, m *metrics.Metrics) (consumer.Deduper, func(context.Context) error, error) {
	dcfg := dedup.Config{
		Scope:    dedup.Scope(cfg.Dedup.Scope),
		Window:   windowConfig(cfg.Dedup),
		Topic:    cfg.Kafka.InputTopic,
		Logger:   log,
		Observer: m,
	}
	closeOutput := func() error { return nil }
	if cfg.Checkpoint.Dir != "" {
		store, err := checkpoint.NewDirStore(cfg.Checkpoint.Dir, cfg.Checkpoint.Keep)
		if err != nil {
			return nil, nil, err
		}
		out := consumer.NewOutputReader(ccfg, kf, log)
		closeOutput = out.Close
		dcfg.Persister = dedup.NewCheckpointPersister(store, log)
		dcfg.CheckpointInterval = cfg.Checkpoint.Interval
		dcfg.OutputEnd = out.End
		dcfg.Rewarm = out.Rewarm
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
				gens[j] = metrics.GenerationStat{Fill: g.Fill, EstimatedKeys: g.EstimatedKeys}
			}
			out[i] = metrics.FilterStat{
				Filter:        s.Name,
				ConfiguredFPR: s.ConfiguredFPR,
				EstimatedFPR:  s.EstimatedFPR,
				CapacityBytes: s.TotalBytes,
				Rotations:     s.Rotations,
				WindowSeconds: s.Window.Seconds(),
				Generations:   gens,
			}
		}
		return out
	})
	closeAll := func(ctx context.Context) error {
		return errors.Join(set.Close(ctx), closeOutput())
	}
	return set, closeAll, nil
}
