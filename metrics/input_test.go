package metrics

import (
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestProgressSeries proves that a partition's progress is exported as reported, that an unknown
// lead keeps the last known one and an unmeasured lag time is left out, and that a rebalance
// forgets the partition until its next report.
func TestProgressSeries(t *testing.T) {
	const (
		lagSeconds = "kdedup_consumer_lag_seconds"
		lead       = "kdedup_consumer_lead_records"
		last       = "kdedup_consumer_last_progress_timestamp_seconds"
	)
	tests := []struct {
		name string
		call func(m *Metrics)
		want map[string]float64
	}{
		{"reported", func(m *Metrics) {
			m.Progress(2, Progress{Lag: 5, LagTime: 1500 * time.Millisecond, LagTimeKnown: true, Lead: 40, LastProgress: fixedNow})
		}, map[string]float64{lagSeconds: 1.5, lead: 40, last: 1.7e9}},
		{"unknown lead keeps the last, unmeasured lag time left out", func(m *Metrics) {
			m.Progress(2, Progress{Lag: 5, Lead: 40, LastProgress: fixedNow})
			m.Progress(2, Progress{Lag: 6, Lead: -1, LastProgress: fixedNow})
		}, map[string]float64{lead: 40, last: 1.7e9}},
		{"rebalance forgets", func(m *Metrics) {
			m.Progress(2, Progress{Lag: 5, Lead: 40, LastProgress: fixedNow})
			m.Rebalance()
		}, map[string]float64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reg := newTest(t, Options{SkipRuntimeCollectors: true})
			tt.call(m)
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, mf := range mfs {
				switch n := mf.GetName(); n {
				case lagSeconds, lead, last:
					for _, s := range mf.GetMetric() {
						if s.GetLabel()[0].GetValue() != "2" {
							t.Errorf("%s: series %v", n, s.GetLabel())
						}
						got[n] = s.GetGauge().GetValue()
					}
				}
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("exported %v, want %v", got, tt.want)
			}
		})
	}
}

// TestInputCounters proves that fetch errors are counted per partition and skipped records by
// reason, a reason outside Options.SkipReasons as "other", and that every reason's series exists
// from the start.
func TestInputCounters(t *testing.T) {
	m, reg := newTest(t, Options{SkipRuntimeCollectors: true, SkipReasons: []string{"retention", "reset_to_latest"}})
	if got := testutil.ToFloat64(m.inputs.skipped["reset_to_latest"]); got != 0 {
		t.Errorf("reset_to_latest %v before any skip", got)
	}
	m.FetchError(1)
	m.FetchError(1)
	m.InputSkipped(0, "retention", 30)
	m.InputSkipped(0, "cosmic ray", 2)
	m.InputSkipped(0, "retention", 0)
	for _, c := range []struct {
		got, want float64
		what      string
	}{
		{testutil.ToFloat64(m.inputs.fetchErrors.WithLabelValues("1")), 2, "fetch errors of partition 1"},
		{testutil.ToFloat64(m.inputs.skipped["retention"]), 30, "skipped for retention"},
		{testutil.ToFloat64(m.inputs.skipped[resetOther]), 2, "skipped for another reason"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	if n := testutil.CollectAndCount(reg, "kdedup_input_skipped_records_total"); n != 3 {
		t.Errorf("%d skip series, want 3", n)
	}
}

// TestLossCounters proves that the counts of the deduplication state are read at every scrape
// (0 before a source is registered), that re-warm skips are counted, and that the unkeyed
// records carry the policy and the filters their forgotten identities.
func TestLossCounters(t *testing.T) {
	m, reg := newTest(t, Options{SkipRuntimeCollectors: true, UnkeyedPolicy: "drop"})
	values := func() map[string]float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			for _, s := range mf.GetMetric() {
				key := mf.GetName()
				for _, l := range s.GetLabel() {
					key += "," + l.GetName() + "=" + l.GetValue()
				}
				got[key] = s.GetCounter().GetValue()
			}
		}
		return got
	}
	if v := values()["kdedup_records_unassigned_total"]; v != 0 {
		t.Errorf("unassigned %v before a source", v)
	}
	counts := SetCounts{Unassigned: 3, FutureCapped: 7}
	m.RegisterSetCounts(func() SetCounts { return counts })
	m.RewarmSkipped(5)
	m.RewarmSkipped(-1)
	m.Unkeyed(1, "missing", 2)
	m.RegisterFilterSource(func() []FilterStat { return []FilterStat{{Filter: "1", Forgotten: 9}} })
	counts.Unassigned = 4
	got := values()
	for key, want := range map[string]float64{
		"kdedup_records_unassigned_total":                      4,
		"kdedup_records_future_capped_total":                   7,
		"kdedup_rewarm_skipped_records_total":                  5,
		"kdedup_records_unkeyed_total,partition=1,policy=drop": 2,
		"kdedup_filter_forgotten_total,filter=1":               9,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
}
