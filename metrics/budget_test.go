package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type fakeBudget struct{ limit, used, refusals uint64 }

func (b *fakeBudget) Limit() uint64    { return b.limit }
func (b *fakeBudget) Used() uint64     { return b.used }
func (b *fakeBudget) Refusals() uint64 { return b.refusals }

// TestBudgetMetrics checks that the kdedup_memory_budget_* metrics are 0 until a budget is
// registered and then read it at every scrape.
func TestBudgetMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, Options{})
	value := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				if g := mf.GetMetric()[0].GetGauge(); g != nil {
					return g.GetValue()
				}
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatalf("%s not gathered", name)
		return 0
	}
	if v := value("kdedup_memory_budget_bytes"); v != 0 {
		t.Fatalf("budget %v before one is registered", v)
	}
	b := &fakeBudget{limit: 256 << 20, used: 100 << 20, refusals: 2}
	m.RegisterBudget(b)
	b.used, b.refusals = 300<<20, 5
	for name, want := range map[string]float64{
		"kdedup_memory_budget_bytes":          256 << 20,
		"kdedup_memory_budget_used_bytes":     300 << 20,
		"kdedup_memory_budget_refusals_total": 5,
	} {
		if got := value(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if n := testutil.CollectAndCount(reg, "kdedup_memory_budget_used_bytes"); n != 1 {
		t.Errorf("%d series of kdedup_memory_budget_used_bytes, want 1", n)
	}
}
