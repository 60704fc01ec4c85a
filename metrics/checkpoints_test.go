package metrics

import (
	"maps"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
)

// TestUnitCheckpointHealth proves that each held unit's last success is seeded from the restored
// snapshot's time (or the restore's, without one), moves with its own saves only, survives a
// rebalance for a unit that comes back (a retained filter) and disappears for one that does not.
func TestUnitCheckpointHealth(t *testing.T) {
	now := fixedNow
	m, reg := newTest(t, Options{SkipRuntimeCollectors: true, Now: func() time.Time { return now }})
	ages := func() map[string]float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() == "kdedup_checkpoint_partition_last_success_timestamp_seconds" {
				for _, s := range mf.GetMetric() {
					got[s.GetLabel()[0].GetValue()] = unixSeconds(now) - s.GetGauge().GetValue()
				}
			}
		}
		return got
	}
	check := func(what string, want map[string]float64) {
		t.Helper()
		if got := ages(); !maps.Equal(got, want) {
			t.Errorf("%s: ages %v, want %v", what, got, want)
		}
	}
	m.Restored(0, checkpoint.OutcomeWarm, time.Second, now.Add(-time.Hour))
	m.Restored(1, checkpoint.OutcomeCold, time.Second, time.Time{})
	m.Restored(-1, checkpoint.OutcomeWarm, time.Second, now.Add(-time.Minute))
	check("restored", map[string]float64{"0": 3600, "1": 0, "global": 60})
	now = now.Add(10 * time.Minute)
	m.CheckpointSaved(1, time.Second, 10)
	m.CheckpointFailed(0, "store")
	check("partition 1 saved, 0 failed", map[string]float64{"0": 4200, "1": 0, "global": 660})
	m.Rebalance()
	check("rebalanced", map[string]float64{"global": 660})
	m.Restored(0, checkpoint.OutcomeRetained, time.Second, time.Time{})
	check("partition 0 retained, 1 gone", map[string]float64{"0": 4200, "global": 660})
}
