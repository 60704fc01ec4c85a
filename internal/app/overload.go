package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/kdedup/kdedup/dedup"
)

// capWatchInterval is how often the worker checks whether a filter reached the memory budget (DEDUP_MEMORY_LIMIT).
const capWatchInterval = 10 * time.Second

// capWatcher logs, once per transition, a filter that reaches the memory budget DEDUP_MEMORY_LIMIT (a
// live generation needed a further stage and the budget refused it) and one that is below it again (the
// generation expired). It is not safe for concurrent use; watchCap owns one.
type capWatcher struct {
	log    *slog.Logger
	policy string
	atCap  map[string]bool
}

// observe compares the filters' state with the previous call's and logs the transitions.
func (w *capWatcher) observe(stats []dedup.FilterStats) {
	seen := make(map[string]bool, len(stats))
	for _, s := range stats {
		seen[s.Name] = true
		switch was := w.atCap[s.Name]; {
		case s.AtCap && !was:
			msg := "filter reached the memory budget (DEDUP_MEMORY_LIMIT): it stops growing; with DEDUP_OVERLOAD_POLICY=drop the false-positive rate rises above target and unique records may be dropped as duplicates"
			if w.policy == "pass" {
				msg = "filter reached the memory budget (DEDUP_MEMORY_LIMIT): it stops growing; with DEDUP_OVERLOAD_POLICY=pass new identities are no longer remembered and their duplicates may pass"
			}
			w.log.Warn(msg, "filter", s.Name, "bytes", s.TotalBytes, "max_bytes", s.MaxBytes,
				"stages", s.Stages, "estimated_fpr", s.EstimatedFPR, "target_fpr", s.ConfiguredFPR)
		case !s.AtCap && was:
			w.log.Info("filter below the memory budget again: the generation that hit it expired", "filter", s.Name, "bytes", s.TotalBytes)
		}
		w.atCap[s.Name] = s.AtCap
	}
	for name := range w.atCap {
		if !seen[name] {
			delete(w.atCap, name) // revoked: a filter that comes back starts afresh
		}
	}
}

// watchCap runs a capWatcher over stats every capWatchInterval until ctx ends.
func watchCap(ctx context.Context, stats func() []dedup.FilterStats, policy string, log *slog.Logger) {
	w := &capWatcher{log: log, policy: policy, atCap: map[string]bool{}}
	t := time.NewTicker(capWatchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.observe(stats())
		}
	}
}
