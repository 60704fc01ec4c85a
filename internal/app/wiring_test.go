package app

import (
	"testing"

	"github.com/kdedup/kdedup/consumer"
	"github.com/prometheus/client_golang/prometheus"
)

// TestProducerResetReasons keeps the reason label of kdedup_producer_resets_total in step with
// the reasons the consumer package reports: each one has its own series, none lands in "other".
func TestProducerResetReasons(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newObserver(reg, Config{})
	for _, r := range consumer.ResetReasons() {
		m.ProducerReset(r)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "kdedup_producer_resets_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "reason" {
					got[l.GetValue()] = mt.GetCounter().GetValue()
				}
			}
		}
	}
	for _, r := range consumer.ResetReasons() {
		if got[r] != 1 {
			t.Errorf("reason %q: counter %v, want 1", r, got[r])
		}
	}
	if got["other"] != 0 {
		t.Errorf("%v reasons counted as \"other\"", got["other"])
	}
}
