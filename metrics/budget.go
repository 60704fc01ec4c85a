package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Budget is the worker's filter memory budget as the metrics read it (window.Budget is one). Its
// methods must be cheap and safe for concurrent use.
type Budget interface {
	// Limit returns the budget in bytes.
	Limit() uint64
	// Used returns the bytes the filters hold now.
	Used() uint64
	// Refusals returns how many generations the budget stopped from growing.
	Refusals() uint64
}

// budgetMetrics are the memory budget's gauges and counter, which read the registered Budget at
// every scrape.
type budgetMetrics struct {
	b atomic.Pointer[Budget]
}

// init makes the budget metrics and returns them for registration.
func (bm *budgetMetrics) init() []prometheus.Collector {
	read := func(field func(Budget) uint64) func() float64 {
		return func() float64 {
			if b := bm.b.Load(); b != nil {
				return float64(field(*b))
			}
			return 0
		}
	}
	limit := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "memory_budget_bytes",
		Help: "The memory budget all the worker's filters share (DEDUP_MEMORY_LIMIT, by default half the container's memory limit)."},
		read(Budget.Limit))
	used := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "memory_budget_used_bytes",
		Help: "Memory the worker's filters hold of kdedup_memory_budget_bytes: their first stages and the stages they grew. Above the budget when the first stages of the assigned partitions alone need more (they are taken anyway: every partition is served), and then no filter grows."},
		read(Budget.Used))
	refusals := prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Name: "memory_budget_refusals_total",
		Help: "Generations that needed a further stage and DEDUP_MEMORY_LIMIT refused it, each counted once: the generation stops growing and DEDUP_OVERLOAD_POLICY applies (kdedup_filter_at_memory_cap)."},
		read(Budget.Refusals))
	return []prometheus.Collector{limit, used, refusals}
}

// RegisterBudget makes the kdedup_memory_budget_* metrics read b at every scrape (0 until it is
// registered); a later call replaces b. It is safe for concurrent use.
func (m *Metrics) RegisterBudget(b Budget) {
	if b != nil {
		m.budget.b.Store(&b)
	}
}
